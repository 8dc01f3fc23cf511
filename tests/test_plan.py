"""`shardmeter plan`: the space, exactness against brute force, objectives, Pareto dominance, Narayanan."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from shared_scenarios import TINY

from shardmeter.cli.app import main
from shardmeter.errors import ShardMeterError
from shardmeter.estimator import Estimator
from shardmeter.explore.search.pareto import dominated_by_any, pareto_front, top_k
from shardmeter.explore.search.plan import search
from shardmeter.explore.search.space import compile_space
from shardmeter.load.scenario import apply_override, load_scenario
from shardmeter.model.evaluate import evaluate_columns
from shardmeter.model.feasibility import REASONS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT3_1536 = os.path.join(ROOT, "examples", "gpt3-175b-1536-a100.toml")


TWO_ISLANDS = {
    "model": {"layers": 8, "hidden": 2048, "heads": 16, "vocab": 32000, "seq_len": 2048},
    "training": {"global_batch": 128, "micro_batch": 1, "tokens": 5e9},
    "island": [
        {"name": "a", "gpu": "h100-sxm", "nodes": 2, "price": "cloud-on-demand"},
        {"name": "b", "gpu": "a100-sxm-80gb", "nodes": 3, "price": "cloud-on-demand"},
    ],
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 1.0, "latency_us": 30000}},
    "sync": {"strategy": "diloco", "inner_steps": 100},
}


def _brute(scenario, only=None, max_gpus=None):
    """Every candidate of the space through the full model (no structural shortcut)."""
    est = Estimator()
    sc = load_scenario(scenario, registry=est.registry)
    sp = compile_space(sc, est, only=only, max_gpus=max_gpus)
    ids = np.arange(sp.size, dtype=np.int64)
    inp = dict(sp.base)
    inp.update(sp.columns(ids))
    with np.errstate(all="ignore"):
        out = evaluate_columns(inp, sp.table)
    return sp, ids, out


def test_plan_json_shape(capsys):
    path = os.path.join(ROOT, "examples", "studies", "scale-nodes.toml")
    assert (
        main(["plan", path, "--json", "--top", "3", "--only", "tp=1,2", "--only", "pp=1,2", "--only", "cp=1"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    for k in ("evaluated", "feasible", "seconds", "plans"):
        assert k in doc
    assert doc["evaluated"] > doc["feasible"] > 0
    assert 1 <= len(doc["plans"]) <= 3
    for p in doc["plans"]:
        assert set(p) >= {"parallelism", "training", "islands", "report"}
        assert {"tp", "pp", "dp", "cp", "ep", "sharding", "schedule", "virtual_stages"} <= set(
            p["parallelism"]
        )
        assert {"micro_batch", "recompute"} <= set(p["training"])
        assert p["report"]["feasible"]
    times = [p["report"]["step_time_s"] for p in doc["plans"]]
    assert times == sorted(times)


def test_search_is_exact_against_brute_force():
    sp, ids, out = _brute(TINY)
    doc = search(TINY, top=5)
    assert doc["evaluated"] == sp.size
    _bits, dup = sp.prefix_verdict(ids // sp.R_in)  # interleaved schedules' copies at pp = 1
    assert doc["duplicates"] == int(np.count_nonzero(dup & (_bits == 0)))
    f = out.feasible & ~dup
    assert doc["feasible"] == int(np.count_nonzero(f))
    best_step, best_ids = top_k(out.step_time_s[f], ids[f], 5)
    assert doc["ids"] == best_ids.tolist()
    for p, s in zip(doc["plans"], best_step, strict=True):
        assert p["report"]["step_time_s"] == pytest.approx(s, rel=1e-12)
    # infeasible counts per reason key: structural bits for all, memory for the structurally valid
    rb = np.bitwise_or.reduce(out.reasons, axis=-1)
    structural = rb & ~(32 | 64)
    expect = {}
    for b, (key, _msg) in REASONS.items():
        if b in (32, 64):
            n = int(np.count_nonzero(((rb & b) != 0) & (structural == 0) & ~dup))
        else:
            n = int(np.count_nonzero(structural & b))
        if n:
            key = key.replace("[{j}]", "[*]")
            expect[key] = expect.get(key, 0) + n
    assert doc["infeasible"] == expect


def test_structural_reason_bits_match_evaluate_on_the_gpt3_space():
    est = Estimator()
    sc = load_scenario(GPT3_1536, registry=est.registry)
    sp = compile_space(sc, est)
    ids = np.random.default_rng(7).integers(0, sp.size, 100_000)
    inp = dict(sp.base)
    inp.update(sp.columns(ids))
    with np.errstate(all="ignore"):
        out = evaluate_columns(inp, sp.table)
    ev = np.bitwise_or.reduce(out.reasons, axis=-1) & ~(32 | 64)
    # the prefix's bits and the inner option's (hsdp's shard groups: the sharding axis is inner)
    bits = sp.verdict(ids)
    assert np.array_equal(ev, bits) and np.any(ev & 1024)


def test_top_plan_report_is_what_estimate_says_of_its_scenario():
    doc = search(TINY, top=2)
    est = Estimator()
    for p in doc["plans"]:
        data = dict(TINY)
        ov = {
            "parallelism.tp": p["parallelism"]["tp"],
            "parallelism.pp": p["parallelism"]["pp"],
            "parallelism.dp": p["parallelism"]["dp"],
            "parallelism.cp": p["parallelism"]["cp"],
            "parallelism.sequence_parallel": p["parallelism"]["sequence_parallel"],
            "parallelism.sharding": p["parallelism"]["sharding"],
            "parallelism.schedule": p["parallelism"]["schedule"],
            "parallelism.virtual_stages": p["parallelism"]["virtual_stages"],
            "training.micro_batch": p["training"]["micro_batch"],
            "training.recompute": p["training"]["recompute"],
        }
        for k, v in ov.items():
            data = apply_override(data, k, v)
        rep = est.estimate(data)
        assert rep.step_time_s == pytest.approx(p["report"]["step_time_s"], rel=1e-12)


def test_cost_objective_and_constraints():
    _sp, _ids, _out = _brute(TINY)
    doc = search(TINY, objective="cost", top=3)
    costs = [p["report"]["cost_usd"] for p in doc["plans"]]
    assert costs == sorted(costs)
    fastest = search(TINY, objective="time", top=1)["plans"][0]["report"]
    assert costs[0] <= fastest["cost_usd"] * (1 + 1e-9)
    # a deadline at the fastest plan's wall-clock leaves only plans that fast
    dl = search(TINY, objective="cost", deadline_days=fastest["wall_clock_s"] / 86400 * 1.0001, top=50)
    assert dl["plans"] and all(
        p["report"]["wall_clock_s"] <= fastest["wall_clock_s"] * 1.0001 for p in dl["plans"]
    )
    assert dl["over_deadline"] > 0
    budget = costs[0] * 1.01
    b = search(TINY, objective="time", budget_usd=budget, top=20)
    assert all(p["report"]["cost_usd"] <= budget for p in b["plans"])


def test_max_gpus_caps_every_plan():
    doc = search(TINY, max_gpus=4, top=10)
    assert doc["plans"] and all(p["report"]["gpus"] <= 4 for p in doc["plans"])


def test_deadline_without_tokens_is_an_error():
    data = apply_override(TINY, "training.tokens", None)
    data["training"].pop("tokens")
    with pytest.raises(ShardMeterError, match=r"training\.tokens"):
        search(data, deadline_days=3)


def test_pareto_front_is_non_dominated_and_complete():
    doc = search(TINY, objective="pareto")
    plans = doc["plans"]
    assert len(plans) >= 2
    t = np.array([p["report"]["wall_clock_s"] for p in plans])
    c = np.array([p["report"]["cost_usd"] for p in plans])
    assert np.all(np.diff(t) > 0) and np.all(np.diff(c) < 0)  # fastest first, each slower one cheaper
    # each plan's cost is what its own report says
    for p in plans:
        assert p["cost_per_token_usd"] * TINY["training"]["tokens"] == pytest.approx(
            p["report"]["cost_usd"], rel=1e-9
        )
    # against every feasible candidate of the space, evaluated by brute force
    from shardmeter.explore.search.plan import _cost_per_step, _objective

    sp, ids, out = _brute(TINY)
    est = Estimator()
    obj = _objective(load_scenario(TINY, registry=est.registry), est, "pareto", 1, None, None)
    _bits, dup = sp.prefix_verdict(ids // sp.R_in)
    f = out.feasible & ~dup
    wall = out.step_time_s[f] * obj["steps"]
    cost = _cost_per_step(out, obj)[f] * obj["steps"]
    assert not np.any(dominated_by_any(wall, cost, t * (1 - 1e-12), c * (1 - 1e-12)))
    # every feasible candidate is matched or dominated by a front member
    for w, k in zip(wall, cost, strict=True):
        assert np.any((t <= w * (1 + 1e-9)) & (c <= k * (1 + 1e-9)))


def test_pareto_front_function():
    x = np.array([1.0, 2.0, 2.0, 3.0, 0.5, 4.0])
    y = np.array([5.0, 4.0, 6.0, 1.0, 9.0, 1.0])
    fx, fy, fi = pareto_front(x, y, np.arange(6))
    assert fi.tolist() == [4, 0, 1, 3]
    assert not np.any(dominated_by_any(x, y, fx, fy))


def test_pareto_without_tokens_uses_per_token_figures():
    data = apply_override(TINY, "training.tokens", 1.0)
    data["training"].pop("tokens")
    doc = search(data, objective="pareto")
    assert doc["per_token"] and doc["plans"]
    assert all(p["time_per_token_s"] > 0 and p["cost_per_token_usd"] > 0 for p in doc["plans"])


def test_multi_island_plan_chooses_nodes_and_sync():
    doc = search(TWO_ISLANDS, top=3, only={"cp": [1], "pp": [1, 2], "tp": [1, 2, 4]})
    assert doc["plans"]
    p = doc["plans"][0]
    assert len(p["islands"]) == 2 and "sync" in p
    assert {i["nodes"] for i in p["islands"]} <= {1, 2, 3}
    assert p["report"]["feasible"]
    for q in doc["plans"]:  # the planner prices a plan as its report does (GPUs of the nodes used + egress)
        assert q["cost_per_token_usd"] * TWO_ISLANDS["training"]["tokens"] == pytest.approx(
            q["report"]["cost_usd"], rel=1e-9
        )
    space = doc["space"]
    assert space["sync"] >= 2  # allreduce and diloco (with its inner-step options)
    # fewer nodes are candidates too: an island may use 1 of its nodes
    small = search(
        TWO_ISLANDS,
        top=1,
        only={"cp": [1], "pp": [1], "tp": [1], "island[0].nodes": [1], "island[1].nodes": [1]},
    )
    assert [i["nodes"] for i in small["plans"][0]["islands"]] == [1, 1]


def test_best_plan_at_least_as_fast_as_narayanan_layout():
    """GPT-3 175B on 1536 A100: a space holding Narayanan et al. 2021's layout (TP 8 x PP 16 x DP 12)
    and its neighbours; the full ~20 M space is benchmarks/plan_speed.py."""
    narayanan = Estimator().estimate(GPT3_1536)
    assert narayanan.feasible
    doc = search(
        GPT3_1536,
        top=1,
        only={"tp": [4, 8], "pp": [8, 12, 16], "cp": [1], "dp": [8, 12, 16, 24], "mbs": [1, 2]},
    )
    best = doc["plans"][0]["report"]
    assert best["step_time_s"] <= narayanan.step_time_s * (1 + 1e-12)


def test_ctrl_c_returns_the_best_so_far(monkeypatch):
    from shardmeter.explore.search import plan as planmod

    calls = []

    def chunk(space, bounds):
        calls.append(bounds)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return planmod.score_chunk(space, bounds)

    doc = search(TINY, top=3, chunk_size=2000, chunk_fn=chunk)
    assert doc["interrupted"]
    assert 0 < doc["evaluated"] < doc["space_size"]


def test_plan_table_says_why(capsys):
    path = os.path.join(ROOT, "examples", "studies", "scale-nodes.toml")
    assert main(["plan", path, "--top", "3", "--only", "tp=1,2", "--only", "pp=1,2", "--only", "cp=1"]) == 0
    out = capsys.readouterr().out
    assert "candidates scored" in out and "GB free" in out and "fastest plans" in out


def test_unknown_only_knob_is_an_error(capsys):
    path = os.path.join(ROOT, "examples", "studies", "scale-nodes.toml")
    assert main(["plan", path, "--only", "tq=1"]) == 2
    assert "tp" in capsys.readouterr().err


def test_skipped_duplicates_are_exact_copies_of_a_scored_candidate():
    """pp = 1 makes virtual stages and interleaving moot: those candidates are skipped, and each
    scores exactly like the kept candidate it copies."""
    sp, ids, out = _brute(TINY)
    _bits, dup = sp.prefix_verdict(ids // sp.R_in)
    assert dup.any()
    _li, codes = sp.codes(ids)
    j = [a.name for a in sp.axes].index("schedule")
    sched = sp.axes[j]
    rows = np.flatnonzero(dup)[::50]
    for r in rows:
        c = int(codes[j][r])
        sig = {
            k: np.asarray(sched.cols[k][c]).ravel()[0]
            for k in ("sched_all", "bubble_frac")
            if k in sched.cols
        }
        ref = next(
            i for i in range(c) if all(np.asarray(sched.cols[k][i]).ravel()[0] == v for k, v in sig.items())
        )
        twin = ids[r] + (ref - c) * sp.strides[j]
        assert not dup[twin]
        for k, v in (("step", out.step_time_s), ("memory", out.memory_bytes), ("feasible", out.feasible)):
            assert v[r] == v[twin], k


def test_progress_bar_only_on_a_terminal_after_a_second():
    import io

    from shardmeter.explore.execution.progress import Progress

    quiet = io.StringIO()
    Progress(stream=quiet)(5, 10)  # not a terminal
    assert quiet.getvalue() == ""
    early = io.StringIO()
    Progress(stream=early, enabled=True)(5, 10)  # within the first second
    assert early.getvalue() == ""
    drawn = io.StringIO()
    bar = Progress("plan ", stream=drawn, enabled=True, delay=0.0)
    bar(5, 10)
    bar.close()
    assert "50.0%" in drawn.getvalue() and drawn.getvalue().endswith("\n")


def test_json_mode_prints_one_document_and_no_progress(capsys):
    path = os.path.join(ROOT, "examples", "studies", "scale-nodes.toml")
    assert main(["plan", path, "--json", "--only", "tp=1", "--only", "pp=1,2", "--only", "cp=1"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    assert err == ""


def test_a_one_island_plan_notes_no_sync_its_scenario_never_had():
    """The plan's candidates were loaded from every value as loaded, where ``[sync]`` is always
    written: each report said "[sync] and [network] apply only with two islands or more:
    ignored" of a scenario with neither, which its estimate does not say."""
    best = search(TINY, top=1)["plans"][0]
    assert best["report"]["notes"] == Estimator().estimate(TINY).to_dict()["notes"]
    assert not any("[sync]" in n for n in best["report"]["notes"])
