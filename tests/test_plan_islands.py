"""``plan`` over several islands with per-island layouts and a balanced batch split: on the
three-island example the planner beats the example's own hand-written layout, and each plan's
report is what ``estimate`` gives for the plan written out as a scenario."""

from __future__ import annotations

import pathlib

import pytest

import shardmeter
from shardmeter.explore.pareto import dominated_by_any
from shardmeter.explore.plan import search

ROOT = pathlib.Path(__file__).resolve().parents[1]
THREE = ROOT / "examples" / "multi-island" / "three-islands.toml"


@pytest.fixture(scope="module")
def front():
    return search(THREE, objective="pareto", layouts="per-island")


def test_fastest_plan_beats_the_hand_written_layout_and_the_front_is_not_dominated_by_it(front):
    hand = shardmeter.estimate(THREE).to_dict()
    plans = front["plans"]
    assert plans, "no plan"
    assert plans[0]["report"]["wall_clock_s"] <= hand["wall_clock_s"]
    t = [p["report"]["wall_clock_s"] for p in plans]
    c = [p["report"]["cost_usd"] for p in plans]
    assert not dominated_by_any([hand["wall_clock_s"]], [hand["cost_usd"]], t, c).any()
    assert set(front["front"]) == {"time_s", "cost_usd"}
    assert front["front"]["time_s"][0] == pytest.approx(plans[0]["report"]["wall_clock_s"], rel=1e-9)
    assert front["front"]["cost_usd"][0] == pytest.approx(plans[0]["report"]["cost_usd"], rel=1e-6)


def test_a_plan_report_is_what_estimate_gives_for_its_scenario(front):
    plan = front["plans"][0]
    est = shardmeter.estimate(plan["scenario"]).to_dict()
    assert est["step_time_s"] == plan["report"]["step_time_s"]
    assert est["cost_usd"] == plan["report"]["cost_usd"]
    assert plan["scenario"]["sync"]["batch_split"] == "balanced"
    assert plan["predicted_step_s"] == pytest.approx(est["step_time_s"], rel=1e-9)
    shares = [i["batch_share"] for i in plan["islands"] if not i.get("dropped")]
    assert sum(shares) == 480


def test_infeasible_candidates_are_counted_once_each(front):
    assert sum(front["infeasible"].values()) + front["feasible"] <= front["evaluated"]
    assert "counted once" in front["infeasible_note"]


def test_cost_and_wall_clock_by_hand(front):
    rep = front["plans"][0]["report"]
    wall = 1.0e11 / rep["tokens_per_s"]  # training.tokens / throughput
    assert rep["wall_clock_s"] == pytest.approx(wall, rel=1e-12)
    by_hand = sum(
        i["gpus_billed"] * i["usd_per_gpu_hour"] * wall / 3600 + i["egress_cost_usd"] for i in rep["islands"]
    )
    assert rep["cost_usd"] == pytest.approx(by_hand, rel=1e-9)
