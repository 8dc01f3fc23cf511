"""Failures, checkpoints, preemption and stragglers (issue 26 items 2 and 3): the published fleet
figures, Young's interval and Daly's expected wall time in closed form, the report's fields with
the tables and without them, the planner's expected objectives and the spot/on-demand crossover."""

from __future__ import annotations

import copy
import itertools
import math
from statistics import NormalDist

import pytest
from shared_scenarios import TINY

import shardmeter
from shardmeter.errors import ScenarioError
from shardmeter.explore.search.plan import search
from shardmeter.model.reliability import daly_wall_factor, goodput, young_daly_interval_s
from shardmeter.parts import FailureInputs, FailurePart, FailureTerms
from shardmeter.strategies.failures import LLAMA3_CAUSES
from shardmeter.strategies.variability import slowest_quantile
from shardmeter.testing import fresh_registry

REL = 1e-9


def _tiny(**tables) -> dict:
    sc = copy.deepcopy(TINY)
    sc.update(copy.deepcopy(tables))
    return sc


def _est(sc, est=None):
    return (est or shardmeter.Estimator()).estimate(sc)


# -- closed forms ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("c", "m"), [(1.0, 3600.0), (37.5, 86400.0 * 3), (0.01, 50.0), (600.0, 1e7)])
def test_young_interval_is_its_closed_form(c, m):
    assert math.isclose(float(young_daly_interval_s(c, m)), math.sqrt(2 * c * m), rel_tol=REL)


def test_daly_wall_factor_is_the_closed_form_and_tends_to_the_failure_free_overhead():
    tau, c, r, m = 1800.0, 40.0, 600.0, 20_000.0
    want = m * math.exp(r / m) * (math.exp((tau + c) / m) - 1.0) / tau
    assert math.isclose(float(daly_wall_factor(tau, c, r, m)), want, rel_tol=REL)
    assert math.isclose(float(daly_wall_factor(tau, c, r, math.inf)), (tau + c) / tau, rel_tol=REL)
    # first order in 1/M: 1 + C/tau + (tau + C)/(2M)-ish and R/M, as Young's derivation has it
    big = 1e9
    first = (tau + c) / tau * (1 + (tau + c) / (2 * big) + r / big)
    assert math.isclose(float(daly_wall_factor(tau, c, r, big)), first, rel_tol=1e-9)


def test_planned_stops_cost_a_restart_each_and_can_stop_a_job():
    base = float(goodput(1000.0, 10.0, 600.0, 1e6, 0.0))
    p = 1.0 / 86400.0  # one planned stop a day
    assert math.isclose(float(goodput(1000.0, 10.0, 600.0, 1e6, p)), base * (1 - p * 600.0), rel_tol=REL)
    assert float(goodput(1000.0, 10.0, 600.0, 1e6, 1.0 / 600.0)) == 0.0


def test_the_slowest_of_n_lognormal_ranks_is_its_order_statistic():
    sigma = math.sqrt(math.log1p(0.1**2))
    mu = -(sigma**2) / 2
    for n in (1, 8, 1024, 131_072):
        for q in (0.1, 0.5, 0.9, 0.99):
            x = float(slowest_quantile(q, n, sigma))
            assert math.isclose(NormalDist().cdf((math.log(x) - mu) / sigma) ** n, q, rel_tol=1e-7), (n, q)
    qs = [float(slowest_quantile(0.9, n, sigma)) for n in (1, 2, 16, 4096)]
    assert qs == sorted(qs) and qs[0] < qs[-1]
    assert slowest_quantile(0.9, 4096, 0.0) == 1.0


# -- the published fleets ---------------------------------------------------------------------------


def _llama3_16k() -> dict:
    return {
        "model": {"preset": "llama3-405b", "seq_len": 8192},
        "training": {"global_batch": 2048, "tokens": 1.5e13, "recompute": "full"},
        "island": [{"gpu": "h100-sxm", "nodes": 2048}],
        "parallelism": {"tp": 8, "pp": 16, "sharding": "zero1"},
        "reliability": {"model": "llama3-h100"},
    }


def test_llama3_golden_case_reproduces_its_interruptions_scaled_to_its_gpu_days():
    """Llama 3 §3.3.4: 466 interruptions (419 unexpected, 47 planned) in 54 days on 16,384 H100."""
    rep = _est(_llama3_16k())
    assert rep.feasible and rep.gpus == 16_384
    r = rep.reliability
    gpu_days = rep.gpus * rep.expected_wall_clock_s / 86400.0
    per_llama3 = 16_384 * 54 / gpu_days
    assert round(r["expected_interruptions"] * per_llama3) == 466
    assert round(r["expected_unexpected"] * per_llama3) == 419
    assert round(r["expected_planned"] * per_llama3) == 47
    assert round(r["interruptions_per_day"] * 54) == 419 and round(r["planned_per_day"] * 54) == 47
    # one failure about every three hours (the paper's average)
    assert round(r["job_mtbf_h"], 1) == 3.1
    assert 0.0 < rep.goodput < 1.0


def test_llama3_causes_are_table_5():
    counts = [n for _, _, n in LLAMA3_CAUSES]
    assert sum(counts) == 419 and len(counts) == 18
    printed = {"GPU HBM3 Memory": 17.2, "Software Bug": 12.9, "Network Switch/Cable": 8.4, "NIC": 1.7}
    for name, _, n in LLAMA3_CAUSES:
        if name in printed:
            assert round(100 * n / 419, 1) == printed[name]
    # the paper's "58.7 %" of GPU causes is the sum of its printed shares, with 30.1 % for Faulty GPU
    # (148 of 419 is 35.3 %): the counts, which add up to 419, are what is bundled
    shares = {
        "Faulty GPU": 30.1,
        "GPU HBM3 Memory": 17.2,
        "GPU SRAM Memory": 4.5,
        "GPU System Processor": 4.1,
    }
    shares |= {"Silent Data Corruption": 1.4, "GPU Thermal Interface + Sensor": 1.4}
    assert {n for n, cat, _ in LLAMA3_CAUSES if cat == "GPU"} == set(shares)
    assert round(sum(shares.values()), 1) == 58.7


def test_meta_rsc1_projects_its_published_mttf_at_16k_gpus():
    """Kokolis et al. 2024: MTTF 1.8 h projected for a 16,384-GPU job on RSC-1."""
    reg = shardmeter.get_registry()
    part = reg.get("failures", "meta-rsc1-a100")
    t = part.terms(FailureInputs(gpus=16_384.0, nodes=2048.0, gpus_per_node=8.0), part.options())
    assert round(1.0 / float(t.failures_per_h), 1) == 1.8
    rsc2 = reg.get("failures", "meta-rsc2-a100")
    assert math.isclose(rsc2.options().gpu_mtbf_h, 1000 * 24 * 8 / 2.34, rel_tol=REL)


def test_expected_goodput_falls_with_gpu_count():
    est = shardmeter.Estimator()
    gp = []
    for nodes in (1, 4, 16, 64, 256, 1024, 4096):
        sc = _tiny(reliability={"model": "meta-rsc1-a100", "checkpoint_write_gb_s": 2.0})
        sc["island"][0]["nodes"] = nodes
        sc["training"]["global_batch"] = 16 * nodes
        rep = est.estimate(sc)
        assert rep.feasible, rep.reasons
        gp.append(rep.goodput)
    assert all(a > b for a, b in itertools.pairwise(gp)), gp
    assert gp[0] > 0.99 and gp[-1] < gp[0] - 0.01


def test_report_interval_is_young_on_the_reports_own_figures():
    rep = _est(_tiny(reliability={"model": "per-gpu", "gpu_mtbf_h": 2000.0, "checkpoint_write_gb_s": 0.5}))
    m = rep.reliability["job_mtbf_h"] * 3600.0
    assert math.isclose(rep.checkpoint_interval_s, math.sqrt(2 * rep.checkpoint_s * m), rel_tol=REL)
    assert math.isclose(m, 2000.0 * 3600.0 / rep.gpus, rel_tol=REL)  # the contract's job MTBF
    want = rep.checkpoint_interval_s / (
        m * math.exp(600.0 / m) * math.expm1((rep.checkpoint_interval_s + rep.checkpoint_s) / m)
    )
    assert math.isclose(rep.goodput, want, rel_tol=REL)
    assert math.isclose(rep.expected_wall_clock_s, rep.wall_clock_s / rep.goodput, rel_tol=REL)
    assert math.isclose(rep.expected_cost_usd, rep.cost_usd / rep.goodput, rel_tol=REL)
    # 0.9 B parameters x (2 + 12) bytes, written by 2 nodes at 0.5 GB/s each
    assert math.isclose(rep.checkpoint_s, rep.params * 14 / (2 * 0.5e9), rel_tol=REL)


def test_async_checkpoint_stalls_only_for_the_host_copy():
    sync = _est(_tiny(reliability={"checkpoint_write_gb_s": 0.5}))
    asy = _est(_tiny(reliability={"checkpoint_write_gb_s": 0.5, "async_checkpoint": True}))
    gpu = shardmeter.get_registry().get("hardware", "a100-sxm-40gb")
    assert math.isclose(asy.checkpoint_s, asy.params * 14 / 8 / (gpu.host_link_gb_s * 1e9), rel_tol=REL)
    assert asy.checkpoint_s < sync.checkpoint_s and asy.goodput > sync.goodput
    assert asy.checkpoint_interval_s >= sync.checkpoint_s  # never faster than the write


def test_preemption_per_node_hour_adds_to_the_failure_rate():
    base = _est(_tiny(reliability={"model": "per-gpu"}))
    sc = _tiny(reliability={"model": "per-gpu"})
    sc["island"][0]["preemption_per_h"] = 0.05
    pre = _est(sc)
    got = pre.reliability["interruptions_per_day"] - base.reliability["interruptions_per_day"]
    assert math.isclose(got, 0.05 * 2 * 24, rel_tol=REL) and pre.goodput < base.goodput


# -- without the tables nothing moves -----------------------------------------------------------------


def test_without_the_tables_a_run_never_fails_and_every_rank_is_alike():
    rep = _est(_tiny())
    assert rep.goodput == 1.0 and rep.checkpoint_s is None and rep.reliability == {}
    assert rep.step_time_p50_s == rep.step_time_p90_s == rep.step_time_s
    assert rep.expected_wall_clock_s == rep.wall_clock_s and rep.expected_cost_usd == rep.cost_usd
    off = _est(_tiny(variability={"gpu_step_cv": 0.0, "link_cv": 0.0}))
    assert off.step_time_p50_s == off.step_time_p90_s == off.step_time_s
    on = _est(_tiny(variability={}))
    assert on.step_time_p90_s > on.step_time_p50_s > on.step_time_s  # 8 ranks: the median of the max > mean
    assert on.step_time_s == rep.step_time_s and on.wall_clock_s == rep.wall_clock_s


def test_diloco_outer_sync_is_priced_at_the_asked_quantile():
    from shared_scenarios import THREE_ISLANDS

    est = shardmeter.Estimator()
    reps = {}
    for q in (0.5, 0.9):
        sc = est.load(
            THREE_ISLANDS,
            overrides=[
                ("sync.strategy", "diloco"),
                ("sync.inner_steps", 20),
                ("sync.overlap_steps", 0),
                ("variability", {"link_cv": 0.3, "quantile": q}),
            ],
        )
        reps[q] = est.estimate(sc)
    lo, hi = reps[0.5], reps[0.9]
    assert hi.expected_wall_clock_s > lo.expected_wall_clock_s
    assert math.isclose(
        hi.expected_wall_clock_s / hi.wall_clock_s, hi.step_time_p90_s / hi.step_time_s, rel_tol=REL
    )
    assert hi.breakdown_s.get("island_sync", 0.0) > 0.0


# -- loading --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tables", "key"),
    [
        ({"reliability": {"gpu_mtbf": 5}}, "reliability.gpu_mtbf"),
        ({"reliability": {"model": "nope"}}, "reliability.model"),
        ({"reliability": {"gpu_mtbf_h": -1.0}}, "reliability"),
        ({"reliability": {"checkpoint_write_gb_s": 0.0}}, "reliability"),
        ({"variability": {"quantile": 1.0}}, "variability"),
        ({"variability": {"link_cv": -0.1}}, "variability"),
    ],
)
def test_a_bad_key_is_one_line_naming_it(tables, key):
    with pytest.raises(ScenarioError) as e:
        shardmeter.estimate(_tiny(**tables))
    assert key in str(e.value) and "\n" not in str(e.value)


def test_offer_preemption_reaches_its_island():
    from shardmeter.load.offers import offer_islands
    from shardmeter.load.scenario import load_scenario

    sc = load_scenario(_offers(0.3))
    plain, _ = offer_islands(sc)
    assert [i.preemption_per_h for i in plain.islands] == [None, 0.3]


# -- a plugin replaces the parts -----------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_plugin_failure_model_is_used_by_name():
    import attrs

    @attrs.frozen
    class EveryHour:
        restart_s: float = 60.0

    @attrs.frozen(kw_only=True)
    class Hourly(FailurePart):
        def terms(self, inp, opts):
            return FailureTerms(failures_per_h=inp.nodes * 1.0, planned_per_h=0.0, restart_s=opts.restart_s)

    class Plugin:
        @shardmeter.hookimpl
        def shardmeter_failure_models(self):
            yield Hourly(name="hourly", options=EveryHour, source="test")

    est = shardmeter.Estimator(fresh_registry(Plugin()))
    rep = est.estimate(_tiny(reliability={"model": "hourly", "restart_s": 30.0}))
    assert rep.reliability["interruptions_per_day"] == 48.0 and rep.reliability["restart_s"] == 30.0


# -- the planner ----------------------------------------------------------------------------------------


def _offers(spot_rate: float) -> dict:
    sc = copy.deepcopy(TINY)
    del sc["island"]
    common = {"gpu": "a100-sxm-40gb", "max_nodes": 1, "gpus_per_node": 4, "inter_node": "ib-hdr"}
    sc["offer"] = [
        {"name": "ondemand", "price_usd_per_gpu_hour": 3.0, **common},
        {"name": "spot", "price_usd_per_gpu_hour": 2.4, "preemption_per_h": spot_rate, **common},
    ]
    sc["network"] = {"link": {"name": "internet", "bandwidth_gb_s": 1e-3, "latency_us": 1e5}}
    sc["reliability"] = {"model": "per-gpu", "checkpoint_write_gb_s": 0.5}
    return sc


def _crossover_rate() -> float:
    """The spot offer's preemption rate at which its expected cost equals the on-demand one's,
    from Young's interval and Daly's wall time written out here: cost ~ price / goodput."""
    est = shardmeter.Estimator()
    rep = est.estimate(_offers(0.0))
    c = rep.params * 14 / 0.5e9  # one node writes the whole checkpoint
    r, gpus = 600.0, 4

    def g(rate_h: float) -> float:
        m = 3600.0 / (gpus / 50_000.0 + rate_h)
        tau = math.sqrt(2 * c * m)
        return tau / (m * math.exp(r / m) * math.expm1((tau + c) / m))

    target = g(0.0) * 2.4 / 3.0
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if g(mid) > target else (lo, mid)
    return (lo + hi) / 2


def _chosen(rate: float, objective: str = "expected-cost") -> list[str]:
    doc = search(_offers(rate), objective=objective, top=1)
    return [i["name"] for i in doc["plans"][0]["islands"] if i.get("nodes", 1)]


def test_expected_cost_picks_on_demand_past_the_closed_form_crossover():
    star = _crossover_rate()
    assert 0.01 < star < 10.0
    assert _chosen(0.9 * star) == ["spot"]
    assert _chosen(1.1 * star) == ["ondemand"]
    assert _chosen(1.1 * star, "cost") == ["spot"]  # the raw objective ignores preemption


def test_at_the_crossover_both_offers_expect_the_same_cost():
    star = _crossover_rate()
    est = shardmeter.Estimator()
    costs = {}  # estimate rents every offer: price each alone
    for keep in ("ondemand", "spot"):
        sc = _offers(star)
        sc["offer"] = [o for o in sc["offer"] if o["name"] == keep]
        costs[keep] = est.estimate(sc).expected_cost_usd
    assert math.isclose(costs["spot"], costs["ondemand"], rel_tol=1e-6), costs


def test_p90_time_ranks_by_the_reports_p90():
    sc = _tiny(variability={"gpu_step_cv": 0.05, "link_cv": 0.3})
    doc = search(sc, objective="p90-time", top=5)
    p90 = [p["report"]["step_time_p90_s"] for p in doc["plans"]]
    assert p90 == sorted(p90) and all(
        p["report"]["step_time_p90_s"] >= p["report"]["step_time_p50_s"] for p in doc["plans"]
    )
    best_raw = search(sc, objective="time", top=1)["plans"][0]["report"]
    assert p90[0] <= best_raw["step_time_p90_s"] * (1 + REL)


def test_expected_time_with_variability_on_the_per_island_planner_is_one_line():
    sc = _offers(0.1)
    sc["variability"] = {}
    with pytest.raises(shardmeter.ShardMeterError, match="--layouts shared"):
        search(sc, objective="expected-time")


# -- P90 >= P50 on random scenarios ------------------------------------------------------------------------


def _p90_rows(dicts, draws):
    from test_properties import Batch

    from shardmeter.report.build import build_report

    for d, (gcv, lcv, with_rel) in zip(dicts, draws, strict=True):
        d["variability"] = {"gpu_step_cv": gcv, "link_cv": lcv}
        if with_rel:
            d["reliability"] = {"model": "meta-rsc1-a100"}
    b = Batch(dicts)
    rows = 0
    for n, o in b.evaluate().items():
        for row, i in enumerate(b.groups[n]):
            rep = build_report(b.resolved[i], o, row=row)
            if not rep.feasible:
                continue
            rows += 1
            assert rep.step_time_p90_s >= rep.step_time_p50_s, dicts[i]
            if dicts[i]["variability"] == {"gpu_step_cv": 0.0, "link_cv": 0.0}:
                assert rep.step_time_p90_s == rep.step_time_p50_s == rep.step_time_s
            if rep.expected_wall_clock_s is not None:
                assert (
                    rep.expected_wall_clock_s
                    >= rep.wall_clock_s * rep.step_time_p50_s / rep.step_time_s * (1 - REL)
                )
    return rows


def _property(n_examples: int):
    from hypothesis import given
    from hypothesis import strategies as st
    from test_properties import _settings, batches

    cv = st.sampled_from([0.0, 0.0, 0.01, 0.05, 0.2, 1.0])
    draws = st.lists(st.tuples(cv, cv, st.booleans()), min_size=50, max_size=50)

    @_settings(n_examples)
    @given(batches(50, 50), draws)
    def run(dicts, d):
        _p90_rows(dicts, d)

    run()


def test_p90_is_at_least_p50_on_200_random_scenarios():
    _property(4)


@pytest.mark.slow
def test_p90_is_at_least_p50_on_2000_random_scenarios():
    _property(40)


def test_the_property_checks_feasible_rows():
    """The property's checker reads real reports (three feasible rows here)."""
    d = [_tiny() for _ in range(3)]
    assert _p90_rows(d, [(0.0, 0.0, False), (0.1, 0.1, True), (0.5, 0.0, False)]) == 3


def test_the_tables_round_trip_through_the_scenario_dict():
    from shardmeter.load.scenario import load_scenario, scenario_tables

    sc = load_scenario(
        _tiny(reliability={"model": "per-gpu", "gpu_mtbf_h": 1e4}, variability={"link_cv": 0.2})
    )
    again = load_scenario(scenario_tables(sc))
    assert again.reliability == sc.reliability and again.variability == sc.variability
    assert sc.reliability.options == {"gpu_mtbf_h": 1e4} and sc.variability.options == {"link_cv": 0.2}


def test_a_key_of_another_failure_model_is_noted_not_refused():
    import attrs

    @attrs.frozen
    class Opts:
        fleet_size: int = 1

    @attrs.frozen(kw_only=True)
    class Other(FailurePart):
        def terms(self, inp, opts):
            return FailureTerms(failures_per_h=0.0, planned_per_h=0.0, restart_s=0.0)

    class Plugin:
        @shardmeter.hookimpl
        def shardmeter_failure_models(self):
            yield Other(name="other", options=Opts)

    est = shardmeter.Estimator(fresh_registry(Plugin()))
    rep = est.estimate(_tiny(reliability={"fleet_size": 3}))
    assert any("reliability.fleet_size" in n and "ignored" in n for n in rep.notes)
