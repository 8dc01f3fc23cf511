"""`shardmeter sensitivity`: elasticities in one batch, ranked; two hand-made cases."""

from __future__ import annotations

import json

import pytest

from shardmeter.cli import main
from shardmeter.explore.sensitivity import sensitivity

#: One island, a big model with a micro-batch large enough to keep every GEMM compute-bound.
COMPUTE_BOUND = {
    "model": {"preset": "gpt3-13b"},
    "training": {"global_batch": 512, "micro_batch": 4, "recompute": "full"},
    "island": [{"name": "dc", "gpu": "h100-sxm", "nodes": 8}],
    "parallelism": {"tp": 2, "pp": 1, "sharding": "zero1", "sequence_parallel": True},
}

#: Two islands whose gradients cross a slow internet link every step (allreduce).
WAN_BOUND = {
    "model": {"preset": "llama3-8b"},
    "training": {"global_batch": 256, "recompute": "full"},
    "island": [{"name": "a", "gpu": "h100-sxm", "nodes": 2}, {"name": "b", "gpu": "h100-sxm", "nodes": 2}],
    "parallelism": {"sharding": "zero3"},
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 0.5, "latency_us": 40000}},
    "sync": {"strategy": "allreduce"},
}


def test_compute_bound_island_ranks_gpu_flops_first():
    doc = sensitivity(COMPUTE_BOUND)
    assert doc["feasible"] and doc["regime"] == "compute-bound"
    ranked = [r["resource"] for r in doc["resources"]]
    assert ranked[0] == "gpu_flops"
    top = doc["resources"][0]
    assert 0.0 < top["elasticity"] <= 1.0 + 1e-9  # 10 % more FLOP/s buys at most 10 % throughput
    assert "wan_bandwidth" not in ranked  # one island: no WAN
    gains = [r["throughput_gain_pct"] for r in doc["resources"]]
    assert gains == sorted(gains, reverse=True)


def test_wan_bound_islands_rank_wan_bandwidth_first():
    doc = sensitivity(WAN_BOUND)
    assert doc["feasible"] and doc["bottleneck"] == "island_sync"
    ranked = [r["resource"] for r in doc["resources"]]
    assert ranked[0] == "wan_bandwidth"
    assert ranked.index("wan_latency") > 0
    assert doc["resources"][0]["summary"].startswith("10 % more WAN bandwidth")


def test_one_batch_of_evaluate(monkeypatch):
    import shardmeter.explore.sensitivity as sens

    calls = []
    real = sens.evaluate

    def counting(inp, table):
        calls.append(inp.hardware.peak_flops.shape[0])
        return real(inp, table)

    monkeypatch.setattr(sens, "evaluate", counting)
    doc = sensitivity(WAN_BOUND)
    assert calls == [1 + len(doc["resources"])]


def test_gain_matches_a_scenario_with_the_resource_changed():
    from shardmeter.estimator import Estimator

    doc = sensitivity(COMPUTE_BOUND)
    flops = next(r for r in doc["resources"] if r["resource"] == "gpu_flops")
    est = Estimator()
    base = est.registry.get("hardware", "h100-sxm")
    gpu = {"name": "h100-sxm", "peak_tflops": {k: v * 1.1 for k, v in base.peak_tflops.items()}}
    faster = est.estimate(COMPUTE_BOUND, overrides=[("island[0].gpu", gpu)])
    assert flops["step_time_s"] == pytest.approx(faster.step_time_s, rel=1e-9)


WAN_TOML = """
[model]
preset = "llama3-8b"
[training]
global_batch = 256
recompute = "full"
[[island]]
name = "a"
gpu = "h100-sxm"
nodes = 2
[[island]]
name = "b"
gpu = "h100-sxm"
nodes = 2
[parallelism]
sharding = "zero3"
[network]
link = { name = "internet", bandwidth_gb_s = 0.5, latency_us = 40000 }
"""


def test_cli_table_and_json(tmp_path, capsys):
    f = tmp_path / "wan.toml"
    f.write_text(WAN_TOML)
    assert main(["sensitivity", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["resources"][0]["resource"] == "wan_bandwidth"
    assert [r["rank"] for r in doc["resources"]] == list(range(1, len(doc["resources"]) + 1))
    assert main(["sensitivity", str(f), "--set", "network.link.bandwidth_gb_s=400"]) == 0
    out = capsys.readouterr().out
    assert "buys" in out and "rank" in out


def test_infeasible_scenario_has_nothing_to_rank(capsys):
    bad = dict(COMPUTE_BOUND, parallelism={"tp": 3})
    doc = sensitivity(bad)
    assert not doc["feasible"] and doc["reasons"] and doc["resources"] == []
