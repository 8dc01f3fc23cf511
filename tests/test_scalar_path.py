"""The scalar fast path (one plan on one island, Python floats) computes what the array path
computes, completes without falling back on every bundled model, example, published run and
random scenario of the golden record, and falls back to the array path only where plain floats
cannot (a division by zero in degenerate inputs)."""

from __future__ import annotations

import json
import math
import pathlib

import attrs
import numpy as np
import pytest

import shardmeter
from shardmeter.inputs.build import build_inputs
from shardmeter.load.scenario import model_presets
from shardmeter.model.evaluate import evaluate
from shardmeter.numeric import ops
from shardmeter.validate.run import bundled_validation_dir, collect_files

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


def _scalar_completes(source) -> None:
    """``source`` estimated on the scalar path with the fallback off: it raises rather than
    falling back, and every output is a plain number."""
    est = shardmeter.Estimator()
    inp, table = build_inputs(est.resolve(est.load(source)), scalar=True)
    assert ops.is_scalar(inp.layout.tp)
    out = evaluate(inp, table, fallback=False)
    assert all(ops.is_scalar(v) for v in out.columns().values())


@pytest.mark.parametrize("name", sorted(model_presets()))
def test_the_scalar_path_completes_on_every_bundled_model(name):
    # each preset on a node of H100s, once as the preset gives it and once with the layout that
    # exercises the most terms (tensor, pipeline and data parallelism, ZeRO-3, full recompute)
    base = {"model": {"preset": name}, "training": {"global_batch": 64, "micro_batch": 1}}
    base["island"] = [{"gpu": "h100-sxm", "nodes": 4, "gpus_per_node": 8}]
    _scalar_completes(base)
    _scalar_completes(
        {
            **base,
            "training": {**base["training"], "recompute": "full"},
            "parallelism": {"tp": 2, "pp": 2, "sharding": "zero3"},
        }
    )


RUNS = [pathlib.Path(p) for p in collect_files([bundled_validation_dir()])]
ONE_ISLAND_RUNS = [p for p in RUNS if len(shardmeter.load_scenario(p).islands) == 1]


@pytest.mark.parametrize("path", ONE_ISLAND + ONE_ISLAND_RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_scalar_path_completes_on_every_single_island_example_and_published_run(path):
    _scalar_completes(path)


def test_the_scalar_path_completes_on_every_random_scenario_of_the_golden_record():
    # infeasible plans among them have a step of 0: their throughput is numpy's inf, not a
    # ZeroDivisionError that sent the estimate to the array path (114 of 227 did)
    golden = json.loads((ROOT / "tests" / "golden" / "predictions.json").read_text())
    done = 0
    for case in golden["random"]:
        if "error" in case or len(case["scenario"].get("island", [{}])) != 1:
            continue
        _scalar_completes(case["scenario"])
        done += 1
    assert done > 200


def test_divide_has_numpys_semantics_at_zero():
    with np.errstate(divide="ignore", invalid="ignore"):
        for a in (3.0, -3.0, 0.0, -0.0, math.nan, math.inf, 2, 0):
            for b in (0.0, -0.0, 0, 2.0, -0.5, math.inf):
                want = float(np.divide(np.float64(a), np.float64(b)))
                got = ops.divide(a, b)
                assert (math.isnan(got) and math.isnan(want)) or (
                    got == want and math.copysign(1, got) == math.copysign(1, want)
                ), (a, b, got, want)


def test_the_same_loaded_scenario_is_prepared_once_and_estimated_alike():
    est = shardmeter.Estimator()
    sc = est.load(ROOT / "examples" / "gpt3-175b-a100.toml")
    first = est.estimate(sc).to_dict()
    prepared = est._prepared
    assert prepared is not None and prepared[0] is sc
    assert est.estimate(sc).to_dict() == first and est._prepared is prepared  # not resolved again
    other = est.load(sc, overrides={"parallelism.tp": 4, "parallelism.dp": 32})
    assert est.estimate(other).step_time_s != first["step_time_s"] and est._prepared[0] is other
    assert est.estimate(sc).to_dict() == first
