"""The scalar fast path (one plan on one island, Python floats) computes what the array path
computes, and falls back to it where plain floats cannot (a division by zero)."""

from __future__ import annotations

import math
import pathlib

import attrs
import numpy as np
import pytest

import shardmeter
from shardmeter.inputs.build import build_inputs
from shardmeter.model.evaluate import evaluate

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.toml") if "plugins" not in p.parts)
#: The scalar path is one plan on one island: the single-island examples.
ONE_ISLAND = [p for p in EXAMPLES if len(shardmeter.load_scenario(p).islands) == 1]


def _flat(out):
    for k, v in out.columns().items():
        yield k, float(np.ravel(v)[0])


@pytest.mark.parametrize("path", ONE_ISLAND, ids=lambda p: p.name)
def test_scalar_and_array_paths_agree(path):
    est = shardmeter.Estimator()
    res = est.resolve(est.load(path))
    scalar_inp, t1 = build_inputs(res, scalar=True)
    array_inp, t2 = build_inputs(res)
    assert isinstance(scalar_inp.layout.tp, float) and isinstance(array_inp.layout.tp, np.ndarray)
    a, b = dict(_flat(evaluate(scalar_inp, t1))), dict(_flat(evaluate(array_inp, t2)))
    assert a.keys() == b.keys()
    for k in a:
        assert math.isclose(a[k], b[k], rel_tol=1e-12, abs_tol=1e-300) or (
            math.isnan(a[k]) and math.isnan(b[k])
        ), k


def test_a_division_by_zero_on_the_scalar_path_falls_back_to_the_array_path():
    est = shardmeter.Estimator()
    res = est.resolve(est.load(ROOT / "examples" / "gpt3-175b-a100.toml"))
    inp, table = build_inputs(res, scalar=True)
    broken = attrs.evolve(inp, hardware=attrs.evolve(inp.hardware, hbm_bytes_s=0.0))  # x / 0.0 raises
    out = evaluate(broken, table)
    assert isinstance(out.step_time_s, np.ndarray)  # the array path answered, with numpy's inf
    assert not np.isfinite(out.step_time_s).all()
