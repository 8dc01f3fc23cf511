"""Several islands over a WAN: the three-island example, per-island entries, hierarchical
sync accounting, heterogeneous islands, and the trends the issue asks for (compute
utilisation rises with WAN bandwidth and with fewer bits; a global all-reduce over the
Internet is far worse than DiLoCo)."""

from __future__ import annotations

import copy
import json
import math
import pathlib
import subprocess
import sys
from itertools import pairwise

import pytest
from shared_scenarios import THREE_ISLANDS

from shardmeter.load.scenario import load_scenario

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "multi-island").glob("*.toml"))
CHECK = ROOT / "tools" / "check_report.py"  # the contract checker: docs/scenario.md's report fields


def _est(est, d):
    return est.estimate(copy.deepcopy(d))


def _with(d, **paths):
    """A deep copy of scenario dict ``d`` with dotted ``paths`` set (``sync__inner_steps=...``)."""
    d = copy.deepcopy(d)
    for key, value in paths.items():
        cur = d
        parts = key.split("__")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = value
    return d


def _bw(d, gb_s):
    d = copy.deepcopy(d)
    d["network"]["link"]["bandwidth_gb_s"] = gb_s
    return d


# -- the example ------------------------------------------------------------------------------


def test_three_island_example_one_command():
    p = subprocess.run(
        [sys.executable, "-m", "shardmeter", "estimate", str(THREE_ISLANDS), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["feasible"] is True
    assert [i["name"] for i in r["islands"]] == ["us-east", "eu-north", "ap-south"]
    assert {i["gpu"] for i in r["islands"]} == {"h100-sxm", "a100-sxm-80gb"}
    for isl in r["islands"]:
        for k in (
            "name",
            "gpus",
            "tokens_per_s",
            "step_time_s",
            "memory_per_gpu_gb",
            "cost_usd",
            "idle_fraction",
            "tokens_per_s_per_gpu",
            "wall_clock_s",
            "compute_utilization",
        ):
            assert isl[k] is not None, k
    # islands add up to the whole; per-island GPUs x tokens/s/GPU = total
    assert sum(i["tokens_per_s"] for i in r["islands"]) == pytest.approx(r["tokens_per_s"], rel=1e-9)
    assert sum(i["gpus"] for i in r["islands"]) * r["tokens_per_s_per_gpu"] == pytest.approx(
        r["tokens_per_s"]
    )
    assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_time_s"], rel=1e-9)
    assert "island_sync" in r["breakdown_s"] and "island_sync" in r["overlapped_s"]
    assert sum(i["cost_usd"] for i in r["islands"]) == pytest.approx(r["cost_usd"])
    assert r["wall_clock_s"] == pytest.approx(1e11 / r["tokens_per_s"])
    assert set(r["levels"]) == {"intra_island", "wan"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_pass_the_contract_checker(path):
    exe = pathlib.Path(sys.executable).with_name("shardmeter")
    p = subprocess.run(
        [sys.executable, str(CHECK), str(exe), str(path)], capture_output=True, text=True, timeout=180
    )
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_feasible_multi_island(est, path):
    r = est.estimate(str(path))
    assert r.feasible, r.reasons
    assert len(r.islands) >= 2
    assert r.cost_usd is not None and r.wall_clock_s is not None


# -- trends ------------------------------------------------------------------------------------

BWS = [0.01, 0.02, 0.05, 0.125, 0.25, 0.5, 1.25, 2.5, 12.5, 125.0]  # GB/s per uplink


@pytest.mark.parametrize(
    "sync",
    [
        {"strategy": "diloco", "inner_steps": 100, "compression_bits": 16},
        {"strategy": "diloco", "inner_steps": 100, "compression_bits": 4, "fragments": 4, "overlap_steps": 1},
        {"strategy": "allreduce"},
    ],
    ids=["diloco", "streaming", "allreduce"],
)
def test_compute_utilization_rises_with_wan_bandwidth(est, three, sync):
    base = _with(three, sync=sync)
    reps = [_est(est, _bw(base, b)) for b in BWS]
    cus = [r.compute_utilization for r in reps]
    for a, b, ra in zip(cus, cus[1:], reps, strict=False):
        assert b >= a - 1e-12
        if ra.breakdown_s["island_sync"] > 1e-3 * ra.step_time_s:
            assert b > a  # strictly, while the sync is exposed
    assert cus[0] < cus[-1]
    tps = [r.tokens_per_s for r in reps]
    assert all(b >= a * (1 - 1e-12) for a, b in pairwise(tps))


def test_compute_utilization_rises_with_fewer_bits(est, three):
    blocking = _with(three, sync={"strategy": "diloco", "inner_steps": 100})  # fragments 1: blocking
    cus = [
        _est(est, _with(blocking, sync__compression_bits=b)).compute_utilization for b in (32, 16, 8, 4, 2, 1)
    ]
    assert all(b > a for a, b in pairwise(cus)), cus
    streaming = _with(
        three, sync={"strategy": "diloco", "inner_steps": 100, "fragments": 4, "overlap_steps": 1}
    )
    cus = [
        _est(est, _bw(_with(streaming, sync__compression_bits=b), 0.05)).compute_utilization
        for b in (32, 16, 8, 4, 2, 1)
    ]
    assert all(b >= a - 1e-12 for a, b in pairwise(cus)), cus
    assert cus[-1] > cus[0]


def test_global_allreduce_over_the_internet_is_much_worse_than_diloco(est, three):
    diloco = _est(est, three)
    ar = _est(est, _with(three, sync={"strategy": "allreduce"}))
    assert ar.compute_utilization < 0.25 < 0.75 < diloco.compute_utilization
    assert diloco.tokens_per_s > 5 * ar.tokens_per_s
    assert ar.bottleneck == "island_sync"
    # the same WAN: DiLoCo sends (16 / 4 bits) x 100 steps = 400x fewer bytes than bf16 gradients every step
    assert ar.levels["wan"]["bytes_per_island"] / diloco.levels["wan"]["bytes_per_island"] == pytest.approx(
        400.0
    )
    assert "inner_steps" in " ".join(load_scenario(_with(three, sync__strategy="allreduce")).notes)


def test_allreduce_faster_wan_approaches_single_island_speed(est, three):
    fast = _est(est, _bw(_with(three, sync={"strategy": "allreduce"}), 1e4))
    slowest = max(i["step_time_s"] for i in fast.islands)
    # the last 25 MB bucket is always exposed: at 10 TB/s only its 2 (I-1) = 4 ring latencies of 60 ms
    assert fast.step_time_s == pytest.approx(slowest + 4 * 0.060, rel=1e-3)


# -- sync accounting ----------------------------------------------------------------------------


def test_diloco_step_is_inner_step_plus_round_share(est, three):
    d = _bw(_with(three, sync={"strategy": "diloco", "inner_steps": 50, "compression_bits": 8}), 0.1)
    d["network"]["link"]["latency_us"] = 50000
    r = _est(est, d)
    n, P, H = 3, r.params, 50
    t_round = 2 * (n - 1) / n * P * 8 / 8 / 0.1e9 + 2 * (n - 1) * 0.05  # ring over 3 uplinks, blocking
    slowest = max(i["step_time_s"] for i in r.islands)
    assert r.breakdown_s["island_sync"] == pytest.approx(t_round / H, rel=1e-9)
    assert r.step_time_s == pytest.approx(slowest + t_round / H, rel=1e-9)
    assert r.levels["wan"]["round_s"] == pytest.approx(t_round, rel=1e-9)
    assert r.levels["wan"]["bytes_per_island"] == pytest.approx(2 * (n - 1) / n * P / H, rel=1e-9)
    # tokens/s is averaged over whole outer rounds
    assert r.tokens_per_s == pytest.approx(480 * 8192 / (slowest + t_round / H), rel=1e-9)


def test_streaming_fragments_overlap_with_inner_steps(est, three):
    base = _bw(_with(three, sync={"strategy": "diloco", "inner_steps": 100, "compression_bits": 16}), 0.05)
    vanilla = _est(est, base)
    streamed = _est(est, _with(base, sync__fragments=4, sync__overlap_steps=1))
    no_overlap = _est(est, _with(base, sync__fragments=4, sync__overlap_steps=0))
    # same bytes per round, whatever the fragments
    assert streamed.levels["wan"]["bytes_per_island"] == pytest.approx(
        vanilla.levels["wan"]["bytes_per_island"]
    )
    # without overlap fragments only add latency; with it each fragment hides under one inner step
    assert no_overlap.breakdown_s["island_sync"] >= vanilla.breakdown_s["island_sync"]
    slowest = max(i["step_time_s"] for i in streamed.islands)
    t_frag = no_overlap.levels["wan"]["round_s"] / 4
    assert streamed.breakdown_s["island_sync"] == pytest.approx(
        4 * max(0.0, t_frag - slowest) / 100, rel=1e-9
    )
    assert streamed.overlapped_s["island_sync"] == pytest.approx(4 * min(t_frag, slowest) / 100, rel=1e-9)
    assert streamed.compute_utilization > vanilla.compute_utilization


def test_island_sync_hidden_and_exposed_add_to_wan_time(est, three):
    for sync in ({"strategy": "allreduce"}, {"strategy": "diloco", "inner_steps": 30, "fragments": 2}):
        r = _est(est, _with(three, sync=sync))
        wan = r.levels["wan"]
        assert wan["exposed_s"] + r.overlapped_s["island_sync"] == pytest.approx(wan["time_s"], rel=1e-9)


def test_single_island_has_no_sync_and_no_outer_state(est, three):
    one = _with(three)
    one["island"] = one["island"][:1]
    one["training"]["global_batch"] = 192
    del one["network"]
    diloco = _est(est, one)
    plain = _est(est, _with(one, sync={"strategy": "allreduce"}))
    assert diloco.breakdown_s.get("island_sync", 0.0) == 0.0
    assert diloco.memory_per_gpu_gb == pytest.approx(plain.memory_per_gpu_gb)
    assert diloco.compute_utilization == pytest.approx(1.0)


def test_outer_optimizer_memory_is_counted(est, three):
    diloco = _est(est, three)
    ar = _est(est, _with(three, sync={"strategy": "allreduce"}))
    for d, a in zip(diloco.islands, ar.islands, strict=True):
        assert d["memory_per_gpu_gb"] > a["memory_per_gpu_gb"]
    # us-east: FSDP over 32 GPUs, tp = pp = 1: 8 bytes per parameter sharded 32 ways
    extra = diloco.islands[0]["memory_per_gpu_gb"] - ar.islands[0]["memory_per_gpu_gb"]
    assert extra == pytest.approx(8 * diloco.params / 32 / 1e9, rel=1e-4)


# -- heterogeneous islands ----------------------------------------------------------------------


def test_heterogeneous_islands_faster_ones_wait(est, three):
    r = _est(est, three)
    by = {i["name"]: i for i in r.islands}
    slow = by["ap-south"]
    assert slow["idle_s"] == 0.0
    for name in ("us-east", "eu-north"):
        fast = by[name]
        assert fast["step_time_s"] < slow["step_time_s"]
        assert fast["idle_s"] == pytest.approx(slow["step_time_s"] - fast["step_time_s"])
        assert fast["idle_fraction"] == pytest.approx(fast["idle_s"] / r.step_time_s)
        assert fast["compute_utilization"] == pytest.approx(fast["step_time_s"] / r.step_time_s)
    # batch split in proportion to data-parallel replicas (us-east 32, eu-north 16, ap-south 64 / tp 2 = 32)
    assert [i["batch_per_step"] for i in r.islands] == pytest.approx([192, 96, 192])
    # compute utilisation = 1 - (exposed sync + GPU-weighted idle) / step; the breakdown's idle is that mean
    gpus = sum(i["gpus"] for i in r.islands)
    idle = sum(i["gpus"] * i["idle_s"] for i in r.islands) / gpus
    assert r.breakdown_s["idle"] == pytest.approx(idle, rel=1e-9)
    assert r.compute_utilization == pytest.approx(1 - (r.breakdown_s["island_sync"] + idle) / r.step_time_s)
    # the breakdown is the average GPU's: islands' own steps GPU-weighted, + idle + sync
    own = sum(i["gpus"] * i["step_time_s"] for i in r.islands) / gpus
    work = sum(v for k, v in r.breakdown_s.items() if k not in ("island_sync", "idle"))
    assert work == pytest.approx(own, rel=1e-9)
    assert work + idle == pytest.approx(slow["step_time_s"], rel=1e-9)


def test_identical_islands_do_not_idle(est, three):
    d = _with(three)
    d["island"] = [dict(d["island"][0], name=n) for n in ("a", "b", "c")]
    d["training"]["global_batch"] = 576
    r = _est(est, d)
    assert all(i["idle_s"] == 0.0 for i in r.islands)
    assert r.compute_utilization == pytest.approx(1 - r.breakdown_s["island_sync"] / r.step_time_s)


def test_each_island_may_have_its_own_layout(est, three):
    r = _est(est, three)  # ap-south: tp = 2 over 64 A100s = 32 replicas
    assert r.islands[2]["gpus"] == 64 and r.islands[2]["batch_per_step"] == 192
    d = _with(three, training__global_batch=672)  # 6 x (32 + 16 + 64) replicas with the shared layout
    del d["island"][2]["parallelism"]
    r2 = _est(est, d)
    assert r2.feasible, r2.reasons
    assert [i["batch_per_step"] for i in r2.islands] == pytest.approx([192, 96, 384])
    assert r2.islands[2]["step_time_s"] > r.islands[2]["step_time_s"]  # twice the work per A100


def test_ring_over_islands_scales_with_island_count(est, three):
    """Bytes per uplink follow 2 (I-1)/I; with more islands the WAN time grows towards 2x."""
    d = _with(three, sync={"strategy": "diloco", "inner_steps": 100, "compression_bits": 16})
    two = _with(d)
    two["island"] = two["island"][:2]
    two["training"]["global_batch"] = 288
    r2, r3 = _est(est, two), _est(est, d)
    assert r2.levels["wan"]["bytes_per_island"] == pytest.approx(1.0 * r2.params * 2 / 100)
    assert r3.levels["wan"]["bytes_per_island"] == pytest.approx(4 / 3 * r3.params * 2 / 100)


def test_infeasible_island_is_named(est, three):
    d = _with(three)
    d["island"][1]["gpu"] = "l4"  # 24 GB: an 8B model under FSDP over 16 GPUs does not fit
    r = _est(est, d)
    assert not r.feasible
    assert any("eu-north" in x for x in r.reasons)
    assert r.islands[1]["feasible"] is False and r.islands[0]["feasible"] is True
    assert math.isfinite(r.islands[1]["memory_per_gpu_gb"])


def test_docs_commands_run():
    """The commands at the top of docs/multi-island.md run as written (from the repository root)."""
    import re
    import shlex

    text = (ROOT / "docs" / "multi-island.md").read_text()
    block = re.search(r"```\n(.*?)\n```", text, re.S).group(1)
    cmds = [ln.split() for ln in block.splitlines() if ln.startswith("shardmeter ")]
    assert len(cmds) >= 3
    for argv in cmds:
        p = subprocess.run(
            [sys.executable, "-m", "shardmeter", *argv[1:]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert p.returncode == 0, (shlex.join(argv), p.stderr[-500:])


def test_each_island_has_its_own_breakdown(est, three):
    r = _est(est, three)
    for isl in r.islands:
        bd = isl["breakdown_s"]
        assert sum(bd.values()) == pytest.approx(r.step_time_s, rel=1e-9)
        assert bd["idle"] == pytest.approx(isl["idle_s"])
        assert sum(v for k, v in bd.items() if k not in ("idle", "island_sync")) == pytest.approx(
            isl["step_time_s"]
        )
    gpus = sum(i["gpus"] for i in r.islands)
    for k, v in r.breakdown_s.items():
        assert v == pytest.approx(
            sum(i["gpus"] * i["breakdown_s"].get(k, 0.0) for i in r.islands) / gpus, rel=1e-9, abs=1e-15
        ), k
