"""The per-island planner against a brute force: on a small heterogeneous space (two islands of
two GPU types, a few layouts and two micro-batch sizes each, every node count) every
island-layout pair x every integer split of the global batch is scored by the model itself, and
``plan`` must find the same fastest plan, the same cheapest, and the same Pareto front of
(wall-clock, cost). Each island's micro-batch is its own (``[[island]] micro_batch``), so the
brute force pairs every micro-batch of one island with every one of the other. The same on
twin islands (one GPU type, two prices), whose identical candidates the planner scores once."""

from __future__ import annotations

import copy
import itertools

import attrs
import numpy as np
import pytest

from shardmeter.estimator import Estimator
from shardmeter.explore.search.plan import _cost_per_step, _objective, search
from shardmeter.inputs.bundles import ModelInputs
from shardmeter.load.scenario import load_scenario
from shardmeter.model.evaluate import evaluate

GB = 48  # global batch: every split of 48 sequences between the islands is tried
PRICE = {"name": "cloud-on-demand", "egress_usd_per_gb": 0.0}
BASE = {
    "model": {"layers": 8, "hidden": 4096, "heads": 32, "vocab": 32000, "seq_len": 4096},
    "training": {"global_batch": GB, "micro_batch": 1, "recompute": "none", "tokens": 1e9},
    "island": [
        {"name": "h", "gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 4, "price": PRICE},
        {"name": "a", "gpu": "a100-sxm-40gb", "nodes": 2, "gpus_per_node": 4, "price": PRICE},
    ],
    # a fast link and free egress: plans on both islands are on the front, not only one island
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 200.0, "latency_us": 10}},
    "parallelism": {"tp": 1, "pp": 1, "schedule": "1f1b"},
    "sync": {"strategy": "diloco", "inner_steps": 20},
}
#: The space: tp and pp in {1, 2}, two shardings, micro-batch 1 or 2, 0, 1 or 2 nodes per
#: island (4 GPUs each).
MBS = [1, 2]
ONLY = {
    "tp": [1, 2],
    "pp": [1, 2],
    "cp": [1],
    "sp": [False],
    "mbs": MBS,
    "recompute": ["none"],
    "schedule": ["1f1b"],
    "sharding": ["none", "fsdp"],
}
SHAPES = [
    {"tp": tp, "pp": pp, "sharding": sh, "schedule": "1f1b"}
    for tp, pp, sh in itertools.product([1, 2], [1, 2], ["none", "fsdp"])
]


def _island_options(j: int) -> list[tuple[int, dict | None, int]]:
    """(nodes, parallelism, micro-batch) of island ``j``: dropped, or 1 or 2 nodes with every
    shape and micro-batch."""
    return [(0, None, 0)] + [(n, s, mb) for n in (1, 2) for s in SHAPES for mb in MBS]


#: Twin islands: the same GPU, nodes and links (the planner scores one island's candidates for
#: both), at two prices.
TWINS = copy.deepcopy(BASE)
TWINS["island"][1] |= {
    "gpu": "h100-sxm",
    "price": PRICE | {"usd_per_gpu_hour": 2.2},
}


def _brute(sync: dict, base: dict = BASE) -> np.ndarray:
    """(step, cost per step, islands used, micro-batches differ) of every feasible plan of the
    space, scored by the model."""
    est = Estimator()
    found = []
    for opts in itertools.product(_island_options(0), _island_options(1)):
        used = [j for j, (n, _, _) in enumerate(opts) if n > 0]
        if not used:
            continue
        data = copy.deepcopy(base) | {"sync": dict(sync)}
        kept = []
        for j in used:
            n, par, mb = opts[j]
            gpus = n * 4
            rep = par["tp"] * par["pp"]
            kept.append(
                data["island"][j] | {"nodes": n, "micro_batch": mb, "parallelism": par | {"dp": gpus // rep}}
            )
        data["island"] = kept
        if len(kept) == 1:
            data.pop("sync")
            data.pop("network")
        sc = load_scenario(data, registry=est.registry)
        res = est.resolve(sc)
        inp, table = est.inputs(res)
        cols = inp.columns()
        q = [isl["parallelism"]["dp"] * isl["micro_batch"] for isl in kept]  # sequences per micro-batch
        splits = [
            s
            for s in itertools.product(range(1, GB + 1), repeat=len(kept))
            if sum(s) == GB and all(b % qj == 0 for b, qj in zip(s, q, strict=True))
        ]
        if not splits:
            continue
        cols["training.island_batch"] = np.asarray(splits, dtype=float)
        with np.errstate(all="ignore"):
            out = evaluate(ModelInputs.from_columns(cols), table, detail=False)
        out = attrs.evolve(
            out,
            step_time_s=np.broadcast_to(out.step_time_s, (len(splits),)),
            egress_bytes_per_step=np.broadcast_to(out.egress_bytes_per_step, (len(splits),)),
            island=attrs.evolve(out.island, gpus=np.broadcast_to(out.island.gpus, (len(splits), len(kept)))),
        )
        ok = np.broadcast_to(out.feasible, (len(splits),)).astype(bool)
        cost = _cost_per_step(out, _objective(sc, est, "cost", 1, None, None))
        mixed = len({isl["micro_batch"] for isl in kept}) > 1
        found += [
            (float(t), float(c), len(kept), mixed) for t, c in zip(out.step_time_s[ok], cost[ok], strict=True)
        ]
    return np.asarray(found)


def _front(points: np.ndarray) -> list[tuple[float, float]]:
    out, best = [], np.inf
    for t, c in sorted(map(tuple, points[:, :2])):
        if c < best * (1 - 1e-12):
            out.append((t, c))
            best = c
    return out


SYNCS = {
    "diloco": {"strategy": "diloco", "inner_steps": 20},
    "allreduce": {"strategy": "allreduce"},
}


@pytest.fixture(scope="module", params=[(s, b) for b in ("mixed", "twins") for s in sorted(SYNCS)])
def case(request):
    sync = SYNCS[request.param[0]]
    base = TWINS if request.param[1] == "twins" else BASE
    scenario = copy.deepcopy(base) | {"sync": dict(sync)}
    steps = BASE["training"]["tokens"] / (GB * BASE["model"]["seq_len"])
    only = ONLY | {"strategy": [sync["strategy"]]}  # the plan would also try the other strategy
    return scenario, _brute(sync, base), steps, only


def test_the_brute_force_space_is_heterogeneous_and_not_trivial(case):
    scenario, pts, _, only = case
    assert len(pts) > 200  # many feasible plans, so agreeing on the best is not a coincidence
    assert len(_front(pts)) >= 3
    doc = search(scenario, objective="pareto", only=only)
    assert doc["space"]["sync"] == 1
    # every two-island plan the model finds feasible is represented (a one-island plan is
    # scored with the sync strategy's memory, e.g. DiLoCo's outer state: a bound)
    assert doc["combined_plans"] >= np.count_nonzero(pts[:, 2] == 2)
    # the front mixes plans on one island and on both (both GPU types, unless twins)
    used = {tuple(i["name"] for i in p["islands"] if not i.get("dropped")) for p in doc["plans"]}
    assert ("h", "a") in used and len(used) >= 2
    if scenario["island"][0]["gpu"] != scenario["island"][1]["gpu"]:
        # a point of the front that only plans with a micro-batch per island reach, and the
        # plan's scenario says so island by island
        mixed_only = [all(p[3] for p in pts if (p[0], p[1]) == point) for point in map(tuple, _front(pts))]
        assert any(mixed_only)
        mixed = [p for p in doc["plans"] if isinstance(p["training"]["micro_batch"], list)]
        assert mixed
        for p in mixed:
            isl = p["scenario"]["island"]
            assert [i["micro_batch"] for i in isl] == p["training"]["micro_batch"]
            assert len(set(p["training"]["micro_batch"])) == 2


@pytest.mark.parametrize("objective", ["time", "cost"])
def test_plan_finds_the_brute_force_best(case, objective):
    scenario, pts, _, only = case
    doc = search(scenario, objective=objective, only=only, top=1)
    assert doc["layouts"] == "per-island"  # the default with several islands
    best = doc["plans"][0]
    tps = GB * BASE["model"]["seq_len"]
    got = (best["predicted_step_s"], best["cost_per_token_usd"] * tps)
    col = 0 if objective == "time" else 1
    want = pts[np.lexsort((pts[:, 1 - col], pts[:, col]))[0]]
    assert got[col] == pytest.approx(want[col], rel=1e-9)
    assert got[1 - col] == pytest.approx(want[1 - col], rel=1e-9)
    assert best["report"]["step_time_s"] == pytest.approx(best["predicted_step_s"], rel=1e-9)


def test_plan_finds_the_whole_brute_force_front(case):
    scenario, pts, steps, only = case
    doc = search(scenario, objective="pareto", only=only)
    got = list(zip(doc["front"]["time_s"], doc["front"]["cost_usd"], strict=True))
    want = [(t * steps, c * steps) for t, c in _front(pts)]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, rel=1e-9)
