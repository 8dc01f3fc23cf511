"""`shardmeter sensitivity`: elasticities in one batch, ranked, against first principles and
against scenarios with the input changed by hand."""

from __future__ import annotations

import json
import math

import attrs
import pytest

from shardmeter.cli.app import main
from shardmeter.errors import ShardMeterError
from shardmeter.estimator import Estimator
from shardmeter.explore.search.sensitivity import sensitivity

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

#: One node: no process group crosses its inter-node link.
ONE_NODE = {
    "model": {"preset": "llama3-8b"},
    "training": {"global_batch": 64, "recompute": "full"},
    "island": [{"name": "box", "gpu": "h100-sxm", "nodes": 1, "inter_node": "ib-ndr"}],
    "parallelism": {"sharding": "zero3"},
}


def _entry(doc, key):
    return next(r for r in doc["resources"] if r["resource"] == key)


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
    assert [r["rank"] for r in doc["resources"]] == list(range(1, len(ranked) + 1))


def test_wan_bound_islands_rank_wan_bandwidth_first():
    doc = sensitivity(WAN_BOUND)
    assert doc["feasible"] and doc["bottleneck"] == "island_sync"
    ranked = [r["resource"] for r in doc["resources"]]
    assert ranked[0] == "wan_bandwidth"
    assert ranked.index("wan_latency") > 0
    assert doc["resources"][0]["summary"].startswith("10 % more WAN bandwidth (internet) buys")


def test_readable_labels_and_unique_machine_keys():
    doc = sensitivity(WAN_BOUND)
    labels = {r["resource"]: r["label"] for r in doc["resources"]}
    assert len(labels) == len(doc["resources"])
    assert labels["inter_node_bandwidth"] == "inter-node bandwidth (ib-ndr)"
    assert labels["intra_node_latency"] == "intra-node latency (nvlink4)"
    assert labels["memory_capacity"] == "GPU memory capacity (h100-sxm)"
    assert labels["gpu_hour_price"] == "price per GPU-hour (cloud-on-demand)"
    assert labels["wan_bandwidth"] == "WAN bandwidth (internet)"


def test_one_batch_of_evaluate(monkeypatch):
    import shardmeter.explore.search.sensitivity as sens

    calls = []
    real = sens.evaluate

    def counting(inp, table):
        calls.append(inp.hardware.peak_flops.shape[0])
        return real(inp, table)

    monkeypatch.setattr(sens, "evaluate", counting)
    doc = sensitivity(WAN_BOUND)
    assert calls == [1 + len(doc["resources"])]


@pytest.mark.parametrize("step", [0.1, 0.05])
def test_gain_matches_a_scenario_with_the_resource_changed(step):
    doc = sensitivity(COMPUTE_BOUND, step=step)
    flops = _entry(doc, "gpu_flops")
    est = Estimator()
    base = est.registry.get("hardware", "h100-sxm")
    gpu = {"name": "h100-sxm", "peak_tflops": {k: v * (1 + step) for k, v in base.peak_tflops.items()}}
    faster = est.estimate(COMPUTE_BOUND, overrides=[("island[0].gpu", gpu)])
    assert flops["step_time_s"] == pytest.approx(faster.step_time_s, rel=1e-9)
    gain = (doc["step_time_s"] / faster.step_time_s - 1) * 100
    assert flops["throughput_gain_pct"] == pytest.approx(gain, rel=1e-9)
    assert flops["elasticity"] == pytest.approx(gain / (step * 100), rel=1e-9)
    assert flops["change"] == f"+{step * 100:g}%" and doc["change_pct"] == pytest.approx(step * 100)


def test_inter_node_bandwidth_matches_the_link_changed():
    doc = sensitivity(COMPUTE_BOUND)
    link = attrs.asdict(Estimator().registry.get("interconnect", "ib-ndr"))
    link["bandwidth_gb_s"] *= 1.1
    faster = Estimator().estimate(COMPUTE_BOUND, overrides=[("island[0].inter_node", link)])
    assert _entry(doc, "inter_node_bandwidth")["step_time_s"] == pytest.approx(faster.step_time_s, rel=1e-9)
    assert _entry(doc, "inter_node_bandwidth")["throughput_gain_pct"] > 0


def test_cost_elasticity_to_price_is_one_and_to_a_shorter_step_follows_the_time():
    doc = sensitivity(COMPUTE_BOUND)
    price = _entry(doc, "gpu_hour_price")
    assert price["throughput_gain_pct"] == 0.0 and price["step_time_s"] == doc["step_time_s"]
    assert price["cost_elasticity"] == pytest.approx(1.0, abs=1e-12)  # one island: no egress
    # the cost of a step: every GPU the island has, for the step, at its GPU-hour price
    usd = Estimator().registry.get("cost", "cloud-on-demand").gpu_prices["h100-sxm"]
    assert doc["cost_per_step_usd"] == pytest.approx(64 * usd * doc["step_time_s"] / 3600, rel=1e-12)
    # anything else changes the cost only through the step time: c_r / c_0 = t_r / t_0
    flops = _entry(doc, "gpu_flops")
    assert flops["cost_change_pct"] == pytest.approx((flops["step_time_s"] / doc["step_time_s"] - 1) * 100)
    assert flops["cost_elasticity"] < 0


def test_cost_per_step_times_steps_is_the_reports_cost():
    tokens = 1e10
    sc = dict(COMPUTE_BOUND, training={**COMPUTE_BOUND["training"], "tokens": tokens})
    doc = sensitivity(sc)
    steps = tokens / (512 * 2048)
    assert doc["cost_per_step_usd"] * steps == pytest.approx(doc["cost_usd"], rel=1e-9)


def test_a_link_no_group_crosses_has_zero_elasticity():
    doc = sensitivity(ONE_NODE)
    for key in ("inter_node_bandwidth", "inter_node_latency"):
        e = _entry(doc, key)
        assert e["throughput_gain_pct"] == 0.0 and e["elasticity"] == 0.0 and e["cost_elasticity"] == 0.0


def test_memory_capacity_moves_the_headroom_not_the_throughput():
    doc = sensitivity(COMPUTE_BOUND)
    mem = _entry(doc, "memory_capacity")
    assert mem["throughput_gain_pct"] == 0.0 and mem["feasible"]
    assert doc["memory_headroom_gb"] == pytest.approx(doc["memory_capacity_gb"] - doc["memory_per_gpu_gb"])
    assert mem["memory_headroom_gb"] - doc["memory_headroom_gb"] == pytest.approx(0.1 * 80.0)
    assert "memory left free per GPU" in mem["summary"]


def test_memory_capacity_flips_a_plan_that_almost_fits():
    need = Estimator().estimate(COMPUTE_BOUND).memory_per_gpu_gb
    tight = [("island[0].gpu.memory_gb", need / 1.05)]  # 5 % short: 10 % more fits
    doc = sensitivity(COMPUTE_BOUND, overrides=tight)
    assert not doc["feasible"] and any("memory" in r for r in doc["reasons"])
    assert doc["memory_headroom_gb"] == pytest.approx(need / 1.05 - need, rel=1e-6)
    first = doc["resources"][0]
    assert first["resource"] == "memory_capacity" and first["feasible"]
    assert first["summary"] == "10 % more GPU memory capacity (h100-sxm) makes the plan feasible"
    assert all(not r["feasible"] for r in doc["resources"][1:])
    assert all(r["throughput_gain_pct"] is None for r in doc["resources"])


def test_several_links_in_one_role_get_one_key_each():
    sc = {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 256},
        "island": [
            {
                "gpu": "h100-sxm",
                "nodes": 8,
                "tiers": [
                    {"link": "nvlink4", "gpus": 8},
                    {"link": "ib-ndr", "gpus": 32},
                    {"link": "roce-400g"},
                ],
            }
        ],
        "parallelism": {"sharding": "zero3"},
    }
    doc = sensitivity(sc)
    keys = [r["resource"] for r in doc["resources"]]
    assert "inter_node_bandwidth[ib-ndr]" in keys and "inter_node_bandwidth[roce-400g]" in keys
    assert "intra_node_bandwidth" in keys and len(set(keys)) == len(keys)


@pytest.mark.parametrize("step", [0, 1, -0.1, 1.5, math.nan, "0.1", True])
def test_a_bad_step_is_one_line_naming_it(step):
    with pytest.raises(ShardMeterError, match=r"^step: expected a relative change > 0 and < 1"):
        sensitivity(COMPUTE_BOUND, step=step)


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
    assert main(["sensitivity", str(f), "--json", "--step", "0.05"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["resources"][0]["resource"] == "wan_bandwidth"
    assert doc["step"] == 0.05 and doc["resources"][0]["change"] == "+5%"
    assert [r["rank"] for r in doc["resources"]] == list(range(1, len(doc["resources"]) + 1))
    assert main(["sensitivity", str(f), "--set", "network.link.bandwidth_gb_s=400"]) == 0
    out = capsys.readouterr().out
    assert "buys" in out and "rank" in out and "price per GPU-hour (cloud-on-demand)" in out


def test_cli_refuses_a_step_of_one(tmp_path, capsys):
    f = tmp_path / "wan.toml"
    f.write_text(WAN_TOML)
    with pytest.raises(SystemExit) as exc:
        main(["sensitivity", str(f), "--step", "1"])
    assert exc.value.code == 2 and "--step" in capsys.readouterr().err


def test_infeasible_scenario_has_nothing_to_rank(capsys):
    bad = dict(COMPUTE_BOUND, parallelism={"tp": 3})
    doc = sensitivity(bad)
    assert not doc["feasible"] and doc["reasons"]
    assert doc["resources"] and all(not r["feasible"] and r["elasticity"] is None for r in doc["resources"])
    assert all(r["summary"].endswith("still infeasible when changed") for r in doc["resources"])
