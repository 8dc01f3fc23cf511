"""Heterogeneous pipelines (``[[stage_group]]``): the step's arithmetic by hand on a small case,
the one-stage case equal to the homogeneous model, the planner's balance and its win over the
per-island planner on the bundled example, and the one-line errors of the scenario keys."""

from __future__ import annotations

import copy
import itertools
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import shardmeter
from shardmeter.errors import ScenarioError
from shardmeter.explore.search.stage_group_plan import balance_layers, per_island_best, search_stage_groups
from shardmeter.hetero import estimate_pipeline, pipeline_setup, run_pipeline
from shardmeter.model.stage_groups import pipeline_step, stage_cost

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hetero-pipeline-h100-a100.toml"

#: A small model on two 2-GPU nodes of different GPU types joined by a 10 GB/s link.
SMALL = {
    "model": {"layers": 6, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 1024},
    "training": {"global_batch": 8, "micro_batch": 1},
    "island": [
        {"name": "fast", "gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 2},
        {"name": "slow", "gpu": "a100-sxm-80gb", "nodes": 1, "gpus_per_node": 2},
    ],
    "network": {"link": {"bandwidth_gb_s": 10.0, "latency_us": 500}},
    "parallelism": {"dp": 1},
    "stage_group": [
        {"name": "h", "island": "fast", "stages": 2, "tp": 1, "layers": [2, 2]},
        {"name": "a", "island": "slow", "stages": 1, "tp": 2, "layers": [2]},
    ],
}


def _scalar(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def test_step_by_hand_on_a_small_case():
    """t_i from the model's own stage; the step, sends and all, by hand from the links."""
    est = shardmeter.Estimator()
    sc = est.load(SMALL)
    setup = pipeline_setup(est, sc)
    h, a = setup.groups
    P, m = 3, 8.0  # 8 sequences of 1 over dp = 1
    t = [
        _scalar(stage_cost(h.inputs, setup.table, np.asarray(2.0), rank=0, stages=P).micro_batch_s),
        _scalar(stage_cost(h.inputs, setup.table, np.asarray(2.0), rank=1, stages=P).micro_batch_s),
        _scalar(stage_cost(a.inputs, setup.table, np.asarray(2.0), rank=2, stages=P).micro_batch_s),
    ]
    costs = [
        stage_cost(g.inputs, setup.table, np.asarray(2.0), rank=r, stages=P) for r, g in enumerate((h, h, a))
    ]
    assert [_scalar(c.held) for c in costs] == [3.0, 2.0, 1.0]  # 1F1B: min(p - rank, m)
    act = 1 * 1024 * 1024 * 2.0  # micro_batch x seq x hidden x bf16
    nv = h.island.tiers[0].link  # both H100 stages sit in one node: the NVLink between them
    c_inner = act / 1 / (nv.bandwidth_gb_s * 1e9 * nv.efficiency) + nv.latency_us * 1e-6
    wan = est.resolve(sc).network
    c_cross = 1 * act / (10.0e9 * wan.efficiency) + 500e-6  # dp = 1 replica crossing the link
    opt = max(_scalar(c.optimizer_s) for c in costs)
    dp_comm = max(_scalar(c.dp_exposed_s) for c in costs)
    want = sum(t) + (m - 1) * max(t) + 2 * ((c_inner + c_cross) + m * max(c_inner, c_cross)) + dp_comm + opt
    rep = estimate_pipeline(est, sc)
    assert rep.feasible
    assert rep.micro_batches == 8
    assert math.isclose(rep.step_time_s, want, rel_tol=1e-12)
    assert math.isclose(rep.breakdown_s["pp_bubble"], sum(t) - max(t), rel_tol=1e-12)
    assert math.isclose(sum(rep.breakdown_s.values()), rep.step_time_s, rel_tol=1e-12)
    assert [b.send_s for b in rep.boundaries] == pytest.approx([c_cross], rel=1e-12)
    assert rep.groups[0].stage_time_s == pytest.approx(t[:2], rel=1e-12)
    # the embedding rides on stage 0, the output layer and loss on stage 2: the A100 stage,
    # with the logits over 32,000 words, is the slowest
    assert rep.groups[1].pacing and not rep.groups[0].pacing


def test_equal_stages_give_narayanans_formula():
    """(m + p - 1) (t + 2 c): Narayanan et al. 2021's 1F1B with the homogeneous model's sends."""
    st = pipeline_step([0.5] * 4, [0.25] * 3, 8.0, [0.0] * 4, [0.0] * 4)
    assert float(st.step_s) == (8 + 4 - 1) * (0.5 + 2 * 0.25)
    assert float(st.bubble_s) == 3 * 0.5


def test_slowest_stage_paces_the_steady_state():
    st = pipeline_step([1.0, 3.0, 2.0], [0.0, 0.0], 10.0, [0.1, 0.4, 0.2], [0.0, 0.5, 0.0])
    assert float(st.pipeline_s) == 6.0 + 9 * 3.0
    assert float(st.step_s) == 33.0 + 0.4 + 0.5
    assert float(st.pacing_stage) == 1.0


def test_one_stage_group_of_one_stage_is_the_homogeneous_model():
    """p = 1: sum t + (m - 1) max t = m t, no sends: the homogeneous estimate to the last bit."""
    sc = {
        "model": {"preset": "llama3-8b", "seq_len": 2048},
        "training": {"global_batch": 32, "micro_batch": 1},
        "island": [{"name": "x", "gpu": "h100-sxm", "nodes": 1}],
        "parallelism": {"tp": 2, "dp": 4, "sharding": "zero1"},
    }
    homo = shardmeter.estimate(sc)
    grouped = copy.deepcopy(sc)
    grouped["stage_group"] = [{"island": "x", "stages": 1, "tp": 2, "layers": 32}]
    het = estimate_pipeline(shardmeter.Estimator(), grouped)
    assert math.isclose(het.step_time_s, homo.step_time_s, rel_tol=1e-12)
    assert math.isclose(het.groups[0].memory_reserved_gb, homo.memory_reserved_gb, rel_tol=1e-12)


class _Lin:
    """A stage table with a linear time per layer (``a L + b``) that fits up to ``k`` layers."""

    def __init__(self, a: float, b: float, k: int, layers: int):
        self.t_s = a * np.arange(1, layers + 1) + b
        self.fits = np.zeros((layers, 4), dtype=bool)
        self.fits[:k, :] = True


@pytest.mark.parametrize("seed", range(12))
def test_balance_matches_brute_force(seed):
    """The min-max balance then rounding finds the split brute force finds (small cases)."""
    rng = np.random.default_rng(seed)
    L, m = 12, float(rng.integers(2, 16))
    tabs = [_Lin(rng.uniform(0.5, 3.0), rng.uniform(0.0, 2.0), int(rng.integers(3, L)), L) for _ in range(3)]

    def obj(split):
        ts = [tb.t_s[n - 1] for tb, n in zip(tabs, split, strict=True)]
        return sum(ts) + (m - 1) * max(ts)

    splits = [
        s
        for s in itertools.product(range(1, L + 1), repeat=3)
        if sum(s) == L and all(tb.fits[n - 1, 0] for tb, n in zip(tabs, s, strict=True))
    ]
    got = balance_layers(tabs, [3, 2, 1], L, m)
    if not splits:
        assert got is None
        return
    assert got is not None and sum(got) == L
    assert obj(got) == pytest.approx(min(obj(s) for s in splits), rel=1e-12)


def test_plan_beats_the_per_island_plan_on_the_example():
    est = shardmeter.Estimator()
    sc = est.load(EXAMPLE)
    doc = search_stage_groups(est, sc, top=3)
    best = per_island_best(est, sc)
    assert best is not None and doc["plans"]
    het = doc["plans"][0]["report"]
    assert het["feasible"]
    assert het["step_time_s"] < best["step_time_s"]
    # what the search scored is what estimate says of the plan
    for p in doc["plans"]:
        assert math.isclose(p["step_time_s_searched"], p["report"]["step_time_s"], rel_tol=1e-12)
    # the example's own layout is one the search scored (second since the 2026-12-03 attention
    # tie, 0.5 % behind the best), estimated the same, and beats the per-island plan too
    own = estimate_pipeline(est, sc)
    assert any(math.isclose(own.step_time_s, p["report"]["step_time_s"], rel_tol=1e-12) for p in doc["plans"])
    assert own.step_time_s <= 1.01 * het["step_time_s"]
    assert own.step_time_s < best["step_time_s"]


def test_stages_in_flight_and_memory_follow_the_pipeline_position():
    """A stage group's first stage holds more micro-batches than its last (p - rank)."""
    est = shardmeter.Estimator()
    res = run_pipeline(pipeline_setup(est, est.load(SMALL)))
    assert [_scalar(c.held) for c in res.stages] == [3.0, 2.0, 1.0]
    # stage 0 and 1 have the same layers and GPU; stage 0 also holds the embedding and one more
    # micro-batch in flight
    assert _scalar(res.stages[0].memory_bytes) > _scalar(res.stages[1].memory_bytes)


def _with(**changes):
    d = copy.deepcopy(SMALL)
    for key, value in changes.items():
        table, _, rest = key.partition("__")
        if table == "g1":
            d["stage_group"][1][rest] = value
        elif table == "g0":
            d["stage_group"][0][rest] = value
        else:
            d.setdefault(table, {})[rest] = value
    return d


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        ({"g1__layers": [3]}, "stage_group[1].layers", "layers sum to 7; model.layers is 6"),
        ({"g0__layers": [4]}, "stage_group[0].layers", "expected 2 counts (one per stage), got 1"),
        ({"g0__layers": [4, 0]}, "stage_group[0].layers", "every stage to hold >= 1 layer"),
        ({"g1__layers": "two"}, "stage_group[1].layers", "an integer or a list of 1 integers"),
        ({"g1__island": "moon"}, "stage_group[1].island", "expected the name of an [[island]]"),
        (
            {"g1__micro_batch": 2},
            "stage_group[1].micro_batch",
            "every stage group takes the same micro_batch",
        ),
        ({"parallelism__schedule": "interleaved"}, "parallelism.schedule", "runs 1F1B"),
        ({"parallelism__pp": 4}, "parallelism.pp", "leave pp out or give 3"),
        ({"parallelism__first_stage_layers": 1}, "parallelism.first_stage_layers", "give the split"),
        ({"sync__strategy": "diloco"}, "sync.strategy", "[sync] does not apply"),
    ],
)
def test_bad_stage_groups_are_one_line_errors_naming_the_key(changes, path, message):
    with pytest.raises(ScenarioError) as exc:
        estimate_pipeline(shardmeter.Estimator(), _with(**changes))
    assert exc.value.path == path
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_too_many_gpus_names_the_group():
    with pytest.raises(ScenarioError, match=r"take 4 GPUs .* it has 2") as exc:
        estimate_pipeline(shardmeter.Estimator(), _with(parallelism__dp=2))
    assert exc.value.path == "stage_group[0].stages"


def test_an_integer_layers_splits_evenly_and_round_trips():
    d = copy.deepcopy(SMALL)
    d["stage_group"][0]["layers"] = 4
    sc = shardmeter.load_scenario(d)
    assert sc.stage_groups[0].layers == (2, 2)
    again = shardmeter.load_scenario(sc.to_dict())
    assert again.stage_groups == sc.stage_groups


def test_per_island_commands_refuse_stage_groups():
    with pytest.raises(ScenarioError, match="per-island layouts only"):
        shardmeter.estimate(SMALL)


def test_cli_estimate_and_plan_of_the_example():
    run = [sys.executable, "-m", "shardmeter"]
    out = subprocess.run([*run, "estimate", str(EXAMPLE)], capture_output=True, text=True, check=True).stdout
    assert "heterogeneous pipeline: 2 stages in 2 stage groups x 4 replicas, 16 GPUs" in out
    bad = subprocess.run(
        [*run, "estimate", str(EXAMPLE), "--set", "stage_group[1].layers=[3]"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "stage_group[1].layers: the stage groups' layers sum to 39; model.layers is 48" in bad.stderr
    plan = subprocess.run(
        [*run, "plan", str(EXAMPLE), "--top", "3"], capture_output=True, text=True, check=True
    )
    assert "best per-island plan (all-reduce between islands" in plan.stdout
    assert "the heterogeneous pipeline is 1.13x faster" in plan.stdout
