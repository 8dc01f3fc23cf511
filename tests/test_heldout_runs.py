"""The published runs kept out of the fit (benchmarks/heldout/) load, carry a measurement and
are feasible: each ran on the hardware its source names, so a "no" would be a wrong answer."""

from __future__ import annotations

import pathlib

import pytest

import shardmeter

HELDOUT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "heldout"
RUNS = sorted(HELDOUT.glob("*/*.toml"))


def test_there_are_held_out_runs():
    assert len(RUNS) >= 7


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_a_held_out_run_is_feasible_and_measured(path):
    est = shardmeter.Estimator()
    sc = est.load(str(path))
    assert sc.measured.get("tokens_per_s_per_gpu", 0) > 0
    rep = est.estimate(sc)
    assert rep.feasible, rep.reasons
    assert rep.tokens_per_s_per_gpu > 0
