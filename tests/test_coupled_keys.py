"""Coupled keys: ``recompute_layers`` qualifies ``recompute`` (it means something only with
``recompute = "full"``), so a variant that sets ``recompute`` to another value (a plan's option,
a sweep's ``--vary``) drops it, as a user editing the file would; ``plan``, ``sweep`` and
``sensitivity`` run on scenarios that write it or whose profile filled it. ``recompute_layers = 0``
recomputes every layer (docs/scenario.md). A profile default that makes a written key invalid
names the profile. ``with_part`` of an unknown kind is a PluginError naming it."""

from __future__ import annotations

import copy

import pytest
from shared_scenarios import TINY

from shardmeter.errors import PluginError, ScenarioError
from shardmeter.estimator import Estimator
from shardmeter.explore.search.plan import search
from shardmeter.explore.search.sensitivity import sensitivity
from shardmeter.explore.search.sweep import run_sweep
from shardmeter.load.scenario import load_scenario


def _full(layers: int) -> dict:
    sc = copy.deepcopy(TINY)
    sc["training"].update(recompute="full", recompute_layers=layers)
    return sc


#: torchtitan before 2026-03-23 checkpoints every second block: its profile fills
#: recompute = "full" and recompute_layers (plugins/frameworks/torchtitan.py).
TORCHTITAN_2025 = {
    **copy.deepcopy(TINY),
    "training": {**TINY["training"], "framework": "torchtitan", "framework_version": "2025-06"},
}


@pytest.mark.parametrize("source", [_full(2), TORCHTITAN_2025], ids=["written", "profile"])
def test_plan_searches_recompute_on_a_scenario_with_recompute_layers(source):
    doc = search(source, top=3, only={"training.recompute": ["none", "full", "op"]})
    assert doc["feasible"] > 0 and doc["plans"]
    modes = {p["training"].get("recompute") for p in doc["plans"]}
    assert modes <= {"none", "full", "op", None}


def test_sweep_over_recompute_drops_recompute_layers_where_it_means_nothing():
    res = run_sweep(_full(2), [("training.recompute", ["none", "full", "op"])])
    assert len(res.rows) == 3
    est = Estimator()
    for row, mode in zip(res.rows, ("none", "full", "op"), strict=True):
        tr = {**_full(2)["training"], "recompute": mode}
        if mode != "full":
            del tr["recompute_layers"]
        want = est.estimate({**_full(2), "training": tr})
        assert row["report"]["step_time_s"] == pytest.approx(want.step_time_s, rel=1e-12)


def test_sensitivity_runs_with_recompute_layers():
    doc = sensitivity(_full(2))
    assert doc["feasible"] and doc["resources"]


def test_recompute_layers_zero_is_every_layer():
    est = Estimator()
    zero = est.estimate(_full(0))
    tr = {**_full(0)["training"]}
    del tr["recompute_layers"]
    every = est.estimate({**_full(0), "training": tr})
    assert zero.to_dict()["step_time_s"] == every.to_dict()["step_time_s"]
    assert zero.memory_per_gpu_gb == every.memory_per_gpu_gb


def test_a_profile_default_that_conflicts_with_a_written_key_names_the_profile():
    sc = copy.deepcopy(TINY)
    sc["training"].update(framework="torchtitan", recompute_layers=4)  # today's default is "op"
    with pytest.raises(ScenarioError) as err:
        load_scenario(sc)
    msg = str(err.value)
    assert "recompute_layers" in msg and "framework torchtitan" in msg and 'training.recompute = "op"' in msg


def test_with_part_of_an_unknown_kind_names_it():
    est = Estimator()
    gpu = est.registry.get("hardware", "h100-sxm")
    with pytest.raises(PluginError, match=r"no part kind 'gpu'.*hardware"):
        est.with_part("gpu", gpu)
