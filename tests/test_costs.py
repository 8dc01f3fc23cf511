"""Cost sources (shardmeter/plugins/costs.py, shardmeter/hardware_catalog/prices.toml, CostSource.gpu_hour_usd)
and the report's wall-clock time and dollar cost, per island and total, against hand
calculations."""

from __future__ import annotations

import copy
import math
import pathlib

import pytest

from shardmeter.records import CostSource

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reg(est):
    return est.registry


def _gpu(reg, name):
    return reg.get("hardware", name)


# -- CostSource.gpu_hour_usd --------------------------------------------------------------------


def test_cloud_on_demand_prices_per_gpu(reg):
    cloud = reg.get("cost", "cloud-on-demand")
    assert cloud.gpu_hour_usd(_gpu(reg, "h100-sxm")) == pytest.approx(2.69)
    assert cloud.gpu_hour_usd(_gpu(reg, "a100-sxm-80gb")) == pytest.approx(2.00)
    assert cloud.date and cloud.source
    # no sourced price: unknown, not zero
    assert math.isnan(cloud.gpu_hour_usd(_gpu(reg, "mi250x")))


def test_owned_is_purchase_over_lifetime_plus_energy(reg):
    owned = reg.get("cost", "owned")
    h100 = _gpu(reg, "h100-sxm")
    expected = 30000.0 / (4.0 * 8766.0) + 700.0 / 1000.0 * 0.8 * 1.3 * 0.10
    assert owned.gpu_hour_usd(h100) == pytest.approx(expected)


def test_owned_without_a_purchase_price_is_unknown_not_energy_only(reg):
    owned = reg.get("cost", "owned")
    a10g = _gpu(reg, "a10g")  # no purchase price in the catalog, but a TDP
    assert a10g.tdp_w and a10g.name not in owned.purchase_usd
    assert math.isnan(owned.gpu_hour_usd(a10g))


def test_energy_only_source_by_design(reg):
    power = CostSource(name="power-only", usd_per_kwh=0.2, pue=1.5, utilization=1.0)
    assert not power.prices_hardware()
    assert power.gpu_hour_usd(_gpu(reg, "h100-sxm")) == pytest.approx(0.7 * 1.0 * 1.5 * 0.2)
    assert math.isnan(power.gpu_hour_usd(_gpu(reg, "tpu-v5e")))  # no TDP published: energy unknown


def test_energy_with_unknown_tdp_is_unknown(reg):
    owned = reg.get("cost", "owned")
    tpu = _gpu(reg, "tpu-v5e")
    assert tpu.tdp_w is None
    with_price = CostSource(name="x", purchase_usd={"tpu-v5e": 10000.0}, usd_per_kwh=0.1)
    assert math.isnan(with_price.gpu_hour_usd(tpu))
    assert math.isnan(owned.gpu_hour_usd(tpu))


def test_rent_plus_energy_and_flat_rate(reg):
    h100 = _gpu(reg, "h100-sxm")
    colo = CostSource(name="colo", usd_per_gpu_hour=1.0, usd_per_kwh=0.1, pue=1.2, utilization=0.5)
    assert colo.gpu_hour_usd(h100) == pytest.approx(1.0 + 0.7 * 0.5 * 1.2 * 0.1)
    flat = CostSource(name="flat", usd_per_gpu_hour=3.0, gpu_prices={"h100-sxm": 9.0})
    assert flat.gpu_hour_usd(h100) == 3.0  # usd_per_gpu_hour wins over the table
    assert reg.get("cost", "egress").gpu_hour_usd(h100) == 0.0  # egress-only source: GPU time free
    assert math.isnan(CostSource(name="nothing").gpu_hour_usd(h100))


# -- report: wall-clock and cost, per island and total -----------------------------------------------


def test_three_island_cost_and_wall_clock_by_hand(est, three):
    r = est.estimate(copy.deepcopy(three))
    assert r.feasible
    tokens, gbs, seq = 1.0e11, 480, 8192
    wall = tokens / r.tokens_per_s
    hours = wall / 3600.0
    steps = tokens / (gbs * seq)
    # DiLoCo, 3 islands, 4 bits, 100 inner steps: bytes each island sends per inner step
    egress_gb = 2 * (3 - 1) / 3 * r.params * 4 / 8 / 100 * steps / 1e9
    owned_a100 = 15000.0 / (4.0 * 8766.0) + 400.0 / 1000.0 * 0.8 * 1.3 * 0.10
    expected = {
        #          GPUs billed x hours x $/GPU-hour  + egress GB x $/GB (the island's cost source)
        "us-east": 32 * hours * 2.69 + egress_gb * 0.09,
        "eu-north": 16 * hours * 2.20 + egress_gb * 0.09,  # inline usd_per_gpu_hour, egress kept
        "ap-south": 64 * hours * owned_a100 + egress_gb * 0.0,  # owned: uplink paid flat
    }
    assert r.wall_clock_s == pytest.approx(wall, rel=1e-12)
    for isl in r.islands:
        assert isl["wall_clock_s"] == pytest.approx(wall, rel=1e-12)
        assert isl["egress_gb"] == pytest.approx(egress_gb, rel=1e-9)
        assert isl["cost_usd"] == pytest.approx(expected[isl["name"]], rel=1e-9), isl["name"]
        assert isl["gpu_cost_usd"] + isl["egress_cost_usd"] == pytest.approx(isl["cost_usd"])
        assert isl["tokens"] == pytest.approx(tokens * isl["tokens_per_s"] / r.tokens_per_s)
    assert sum(i["tokens"] for i in r.islands) == pytest.approx(tokens)
    assert r.cost_usd == pytest.approx(sum(expected.values()), rel=1e-9)
    # the island's step times and the whole: wall-clock = steps x averaged step
    assert wall == pytest.approx(steps * r.step_time_s, rel=1e-9)


def test_allreduce_egress_is_the_whole_gradient_every_step(est, three):
    d = copy.deepcopy(three)
    d["sync"] = {"strategy": "allreduce"}
    r = est.estimate(d)
    steps = 1.0e11 / (480 * 8192)
    egress_gb = 2 * 2 / 3 * r.params * 2 * steps / 1e9  # bf16 gradients, ring over 3 islands
    assert r.islands[0]["egress_gb"] == pytest.approx(egress_gb, rel=1e-9)
    assert r.islands[0]["egress_cost_usd"] == pytest.approx(egress_gb * 0.09, rel=1e-9)


def test_all_gpus_of_an_island_are_billed(est, three):
    d = copy.deepcopy(three)
    d["island"][0]["nodes"] = 5  # 40 GPUs, layout keeps dp = 32
    d["island"][0]["parallelism"] = {"dp": 32, "sharding": "fsdp"}
    r = est.estimate(d)
    isl = r.islands[0]
    assert (isl["gpus"], isl["gpus_billed"]) == (32, 40)
    assert isl["gpu_cost_usd"] == pytest.approx(40 * r.wall_clock_s / 3600 * 2.69)
    assert any("us-east" in n and "32 of its 40" in n for n in r.notes)


def test_unknown_price_makes_cost_null_with_a_note(est, three):
    d = copy.deepcopy(three)
    d["island"][2]["price"] = "cloud-on-demand"
    d["island"][2]["gpu"] = "a100-pcie-80gb"  # no on-demand price in the catalog
    r = est.estimate(d)
    assert r.feasible
    assert r.islands[2]["cost_usd"] is None and r.cost_usd is None
    assert r.islands[0]["cost_usd"] is not None
    assert any("a100-pcie-80gb" in n and "cost_usd is null" in n for n in r.notes)
    assert r.wall_clock_s is not None


def test_price_override_per_island_and_estimator_cost_source(est, three):
    d = copy.deepcopy(three)
    d["island"][0]["price"] = {"name": "cloud-on-demand", "usd_per_gpu_hour": 1.0, "egress_usd_per_gb": 0.0}
    r = est.estimate(d)
    assert r.islands[0]["usd_per_gpu_hour"] == 1.0 and r.islands[0]["egress_cost_usd"] == 0.0
    owned = est.with_cost_source("owned").estimate(copy.deepcopy(three))
    assert {i["cost_source"] for i in owned.islands} == {"owned"}
    assert all(i["egress_cost_usd"] == 0.0 for i in owned.islands)


def test_no_token_budget_no_cost(est, three):
    d = copy.deepcopy(three)
    del d["training"]["tokens"]
    r = est.estimate(d)
    assert r.wall_clock_s is None and r.cost_usd is None
    assert all(i["cost_usd"] is None and i["wall_clock_s"] is None for i in r.islands)
    assert r.islands[0]["usd_per_gpu_hour"] == pytest.approx(2.69)  # the price is still shown


def test_single_island_has_no_egress(est):
    r = est.estimate(str(ROOT / "examples" / "gpt3-175b-a100.toml"))
    isl = r.islands[0]
    assert isl["egress_gb"] == 0.0
    assert r.cost_usd == pytest.approx(1024 * r.wall_clock_s / 3600 * 2.00, rel=1e-9)
