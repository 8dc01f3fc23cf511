"""Convergence as more than H (issue 26, item 4): the global batch against a critical batch, the
published compression / fragment table, and the plan table's ``conv-extrap`` flag.

Published values are typed here from the papers, independently of the modules' constants:
McCandlish et al. 2018 (arXiv 1812.06162) Eq. 2.11, Kaplan et al. 2020 (arXiv 2001.08361)
Eq. 1.4 and Sec. 5.1, Streaming DiLoCo (arXiv 2501.18512), INTELLECT-1 (arXiv 2412.01152).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from test_convergence import _inputs, scenario

import shardmeter
from shardmeter.errors import ScenarioError
from shardmeter.explore.formats.plan_flags import flag_legend, plan_flags
from shardmeter.explore.formats.plan_table import plan_table
from shardmeter.explore.search.plan import search
from shardmeter.model.critical_batch import (
    batch_factor,
    kaplan_critical_batch_tokens,
    kaplan_loss,
    steps_factor,
)
from shardmeter.strategies.compression_table import (
    ERROR_FEEDBACK_POINTS,
    POINTS,
    CompressionPoint,
    compression_loss_ratio,
)
from shardmeter.strategies.convergence import DiLoCoFits

# --- the critical-batch formulas -------------------------------------------------------------


@pytest.mark.parametrize("b, crit", [(1e5, 3e6), (3e6, 3e6), (4e7, 3e6), (2.5e5, 1.1e6)])
def test_mccandlish_steps_and_tokens_are_the_closed_form_and_trade_as_a_hyperbola(b, crit):
    s, e = float(steps_factor(b, crit)), float(batch_factor(b, crit))
    assert s == pytest.approx(1 + crit / b, rel=1e-15)
    assert e == pytest.approx(1 + b / crit, rel=1e-15)
    # Eq. 2.11's trade-off (S/S_min - 1)(E/E_min - 1) = 1
    assert (s - 1) * (e - 1) == pytest.approx(1.0, rel=1e-12)


def test_at_the_critical_batch_a_run_takes_twice_the_fewest_steps_and_twice_the_fewest_tokens():
    assert float(batch_factor(2.0e6, 2.0e6)) == 2.0 and float(steps_factor(2.0e6, 2.0e6)) == 2.0


def test_kaplan_critical_batch_doubles_for_every_13_percent_decrease_in_loss():
    # Kaplan et al. 2020 Sec. 5.1 (Fig. 10): "B_crit ... doubles for every 13% decrease in loss"
    for loss in (2.0, 2.5, 3.0, 4.0):
        ratio = float(kaplan_critical_batch_tokens(loss * (1 - 0.13)) / kaplan_critical_batch_tokens(loss))
        assert ratio == pytest.approx(2.0, rel=0.03)
    # Eq. 1.4 at L = 1 nat is B* = 2e8 tokens
    assert float(kaplan_critical_batch_tokens(1.0)) == pytest.approx(2e8, rel=1e-15)


def test_kaplan_loss_is_eq_1_5_with_table_2s_joint_fit():
    n, d = 1.2e9, 2e10
    by_hand = ((6.4e13 / n) ** (0.076 / 0.103) + 1.8e13 / d) ** 0.103
    assert float(kaplan_loss(n, d)) == pytest.approx(by_hand, rel=1e-14)
    assert float(kaplan_loss(n, 1e12)) < float(kaplan_loss(n, d)) < float(kaplan_loss(n / 10, d))


# --- the report --------------------------------------------------------------------------------


def _with_batch(sc, model="kaplan-2020"):
    sc = copy.deepcopy(sc)
    sc["training"]["critical_batch"] = model
    return sc


def test_the_batch_factor_multiplies_the_sync_factor_and_the_figures_to_quality():
    plain = shardmeter.estimate(scenario(inner_steps=300)).to_dict()
    rep = shardmeter.estimate(_with_batch(scenario(inner_steps=300))).to_dict()
    q, b = rep["quality"], rep["quality"]["batch"]
    assert rep["wall_clock_s"] == plain["wall_clock_s"]  # raw figures unchanged
    assert q["sync_tokens_factor"] == plain["quality"]["tokens_factor"]
    # the 1B model of the curve: 24 layers of 2048, 32000-token vocabulary, untied
    n = rep["params"] - 2 * 32000 * 2048
    assert b["params_non_embedding"] == n
    crit = 2e8 / (((6.4e13 / n) ** (0.076 / 0.103) + 1.8e13 / 20e9) ** 0.103) ** (1 / 0.21)
    assert b["critical_batch_tokens"] == pytest.approx(crit, rel=1e-12)
    assert b["batch_tokens"] == 512 * 2048
    assert b["batch_factor"] == pytest.approx(1 + 512 * 2048 / crit, rel=1e-12)
    assert q["tokens_factor"] == pytest.approx(q["sync_tokens_factor"] * b["batch_factor"], rel=1e-15)
    assert q["wall_clock_to_quality_s"] == pytest.approx(rep["wall_clock_s"] * q["tokens_factor"], rel=1e-15)
    assert q["cost_to_quality_usd"] == pytest.approx(rep["cost_usd"] * q["tokens_factor"], rel=1e-15)
    assert b["in_validity_range"] and q["in_validity_range"]


def test_a_larger_global_batch_costs_more_tokens_and_fewer_steps():
    small, large = (
        shardmeter.estimate(_with_batch(scenario()), overrides=[("training.global_batch", g)]).to_dict()
        for g in (128, 2048)
    )
    assert large["quality"]["batch"]["batch_factor"] > small["quality"]["batch"]["batch_factor"] > 1.0


def test_the_batch_alone_prices_a_single_island_without_a_convergence_model():
    sc = scenario(convergence=None)
    sc["island"] = sc["island"][:1]
    del sc["sync"], sc["network"]
    rep = shardmeter.estimate(_with_batch(sc)).to_dict()
    q = rep["quality"]
    assert q["model"] == "none" and q["sync_tokens_factor"] == 1.0
    assert q["tokens_factor"] == q["batch"]["batch_factor"]
    assert any(n.startswith("quality (none, batch kaplan-2020)") for n in rep["notes"])


def test_a_model_beyond_kaplans_runs_is_flagged_extrapolated():
    sc = _with_batch(scenario(model="10b", tokens=200e9))
    q = shardmeter.estimate(sc).to_dict()["quality"]
    assert not q["batch"]["in_validity_range"] and not q["in_validity_range"]
    assert any(o.startswith("batch: params_non_embedding") for o in q["outside"])
    assert any(o.startswith("batch: tokens 2e+11 > 2.3e+10") for o in q["outside"])


def test_by_default_the_batch_is_not_priced_and_the_report_is_unchanged():
    base = shardmeter.estimate(scenario()).to_dict()
    none = shardmeter.estimate(_with_batch(scenario(), "none")).to_dict()
    assert base == none and "batch" not in base["quality"]
    assert "quality" not in {
        k for k, v in shardmeter.estimate(scenario(convergence=None)).to_dict().items() if v
    }


def test_without_tokens_the_batch_is_not_priced():
    sc = _with_batch(scenario(convergence=None))
    del sc["training"]["tokens"]
    rep = shardmeter.estimate(sc).to_dict()
    assert not rep["quality"]
    assert (
        "training.critical_batch = 'kaplan-2020' is not priced: its target loss needs training.tokens"
        in rep["notes"]
    )


def test_a_bad_critical_batch_name_is_a_one_line_error_naming_the_key():
    with pytest.raises(ScenarioError, match=r"training\.critical_batch.*'kaplan-2020'") as e:
        shardmeter.estimate(_with_batch(scenario(), "kaplan"))
    assert "\n" not in str(e.value)


# --- compression and fragments ---------------------------------------------------------------


def test_every_published_point_is_cited_and_reproduced_exactly():
    for p in POINTS:
        ratio, inside = compression_loss_ratio(p.bits, 4.0 if p.streaming else 1.0)
        assert float(ratio) == p.loss_ratio and bool(inside), p
        assert "arXiv" in p.source
    assert all(p.bits < 4 for p in ERROR_FEEDBACK_POINTS)


def test_fp4_and_int8_match_full_precision_as_streaming_diloco_and_intellect_1_report():
    # Streaming DiLoCo: FP4 (E3M0) outer gradients lose nothing measurable; INTELLECT-1: int8 the same
    model = DiLoCoFits(name="t")
    base = model.terms(_inputs(compression_bits=16.0), None)
    for bits, frags in ((4.0, 1.0), (8.0, 1.0), (4.0, 8.0)):
        t = model.terms(_inputs(compression_bits=bits, fragments=frags), None)
        assert t.tokens_factor == base.tokens_factor and bool(t.in_range)


def test_between_points_the_penalty_is_interpolated_in_log_bits_and_held_and_flagged_outside():
    pts = (
        CompressionPoint(bits=4, streaming=False, loss_ratio=1.02, source="a"),
        CompressionPoint(bits=16, streaming=False, loss_ratio=1.0, source="b"),
        CompressionPoint(bits=4, streaming=True, loss_ratio=1.04, source="c"),
        CompressionPoint(bits=16, streaming=True, loss_ratio=1.01, source="d"),
    )
    r, inside = compression_loss_ratio(np.array([8.0, 2.0, 32.0, 8.0]), np.array([1.0, 1.0, 1.0, 3.0]), pts)
    assert r[0] == pytest.approx(1.01, rel=1e-15)  # half-way in log2 between 4 and 16
    assert r[1] == 1.02 and r[2] == 1.0  # held at the ends
    assert r[3] == pytest.approx(1.025, rel=1e-15)  # the streaming row
    assert inside.tolist() == [True, False, False, True]


def test_below_4_bits_plain_diloco_is_extrapolated_as_the_error_feedback_results_do_not_apply():
    rep = shardmeter.estimate(scenario(compression_bits=2)).to_dict()
    q = rep["quality"]
    four = shardmeter.estimate(scenario(compression_bits=4)).to_dict()["quality"]
    assert q["tokens_factor"] == four["tokens_factor"] and not q["in_validity_range"]
    assert "compression_bits 2 < 4" in q["outside"]
    assert "conv-extrap" in plan_flags(rep)


# --- the plan table ----------------------------------------------------------------------------


ONLY = {"tp": [1], "pp": [1], "cp": [1], "sync.inner_steps": [100, 300], "training.micro_batch": [1]}


@pytest.fixture(scope="module")
def two_bit_plan():
    return search(scenario(compression_bits=2), objective="time-to-quality", only=ONLY, top=3)


def test_a_plan_beyond_the_compression_table_shows_conv_extrap(two_bit_plan):
    text = plan_table(two_bit_plan)
    head = next(ln for ln in text.splitlines() if ln.startswith("# "))
    assert "flags" in head.split()
    rows = [ln for ln in text.splitlines() if ln[:1].isdigit()]
    assert rows and all("conv-extrap" in ln for ln in rows)
    assert "conv-extrap = the convergence factor is extrapolated" in text
    assert any("conv-extrap" in ln for ln in flag_legend())


def test_a_plan_inside_the_table_has_no_conv_extrap():
    doc = search(scenario(compression_bits=4), objective="time-to-quality", only=ONLY, top=3)
    assert doc["plans"] and all("conv-extrap" not in plan_flags(p["report"]) for p in doc["plans"])
    assert "conv-extrap" not in plan_table(doc)


def test_the_plans_tokens_factor_carries_the_batch_factor():
    doc = search(_with_batch(scenario()), objective="time-to-quality", only=ONLY, top=2)
    for p in doc["plans"]:
        q = p["report"]["quality"]
        assert p["tokens_factor"] == pytest.approx(q["tokens_factor"], rel=1e-12)
        assert math.isclose(q["tokens_factor"], q["sync_tokens_factor"] * q["batch"]["batch_factor"])


def test_the_documented_batch_table_is_the_models():
    from test_convergence import DOC

    block = DOC.split("<!-- batch 1b -->", 1)[1].split("\n\n", 1)[0]
    cells = [ln.strip("|").split("|") for ln in block.splitlines() if ln[:2] == "| " and ln[2].isdigit()]
    rows = [[float(c.replace(",", "").strip(" *")) for c in row] for row in cells]
    assert [int(r[0]) for r in rows] == [128, 256, 512, 1024, 2048, 4096]
    for g, tokens, bf, tf, days, q_days, usd, q_usd in rows:
        r = shardmeter.estimate(
            _with_batch(scenario(inner_steps=300)), overrides=[("training.global_batch", int(g))]
        )
        q = r.quality
        assert q["batch"]["batch_tokens"] == tokens
        assert q["batch"]["batch_factor"] == pytest.approx(bf, abs=6e-4)
        assert q["tokens_factor"] == pytest.approx(tf, abs=6e-4)
        assert r.wall_clock_s / 86400 == pytest.approx(days, abs=6e-4)
        assert q["wall_clock_to_quality_s"] / 86400 == pytest.approx(q_days, abs=6e-4)
        assert r.cost_usd == pytest.approx(usd, abs=0.6)
        assert q["cost_to_quality_usd"] == pytest.approx(q_usd, abs=0.6)
    for col in (5, 7):  # the bold cell of each quality-adjusted column is its minimum
        marked = [int(float(c[0])) for c in cells if "**" in c[col]]
        assert marked == [int(rows[int(np.argmin([r[col] for r in rows]))][0])]
