"""The report's written-out twins compute exactly what the general code computes (the same
operations in the same order: equal to the last bit, nan where it gives nan), and the figures
kept per resolved scenario (:class:`shardmeter.report.build.ReportFigures`) never reach another one: a
second or modified scenario gets the report a fresh Estimator gives it."""

from __future__ import annotations

import math
import pathlib
import random

import attrs
import pytest

import shardmeter
from shardmeter.model.evaluate import evaluate
from shardmeter.report import build, layout, pricing, words
from shardmeter.report.build import ReportFigures, build_report

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPT3 = ROOT / "examples" / "gpt3-175b-a100.toml"
THREE = ROOT / "examples" / "multi-island" / "three-islands.toml"

EDGES = (0.0, -0.0, 1.0, 3.5e-7, 2.5e6, 1e300, math.inf, -math.inf, math.nan)


def _same(a, b) -> bool:
    """Equal to the bit (a nan equals a nan; 0.0 and -0.0 differ), or the same non-float."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def _num(rng: random.Random) -> float:
    return rng.choice(EDGES) if rng.random() < 0.3 else rng.uniform(-10.0, 1e6)


def test_one_islands_totals_are_the_general_totals_to_the_bit():
    rng = random.Random(7)
    for _ in range(4000):
        row = {
            "compute_usd": None if rng.random() < 0.15 else _num(rng),
            "egress_usd": _num(rng),
            "gpu_hours": _num(rng),
            "egress_gb": _num(rng),
            "rate_usd_per_gpu_hour": rng.choice((None, math.nan, 2.5, 0.0, -0.0, math.inf)),
            "price_source": rng.choice((None, "cloud-on-demand", "")),
            "price_date": rng.choice((None, "2024-06", "")),
        }
        one, general = pricing._totals_of_one(row), pricing._totals([row])
        assert list(one) == list(general)
        for k in general:
            assert _same(one[k], general[k]), (row, k, one[k], general[k])


def _regime_by_sum(bd: dict[str, float]) -> str:
    """``regime_of`` as written before its sum was written out (``sum`` over the terms)."""
    groups = {
        "compute-bound": bd.get("compute", 0.0) + bd.get("optimizer", 0.0),
        "communication-bound": sum(bd.get(k, 0.0) for k in (*words._COMM, "offload")),
        "memory-bound": bd.get("memory_ops", 0.0),
        "bubble-bound": bd.get("pp_bubble", 0.0) + bd.get("idle", 0.0),
    }
    return max(groups, key=lambda g: groups[g])


def test_regime_of_is_the_sum_over_the_terms():
    rng = random.Random(11)
    keys = ("compute", "optimizer", "memory_ops", "pp_bubble", "idle", *words._COMM, "offload")
    for _ in range(4000):
        bd = {k: _num(rng) for k in keys if rng.random() < 0.6}
        assert words.regime_of(bd) == _regime_by_sum(bd), bd
    # a near-tie the order of the additions decides: 0.1 + 0.2 + 0.3 exceeds 0.6 only summed in order
    bd = {"tp_comm": 0.1, "cp_comm": 0.2, "ep_comm": 0.3, "compute": 0.6000000000000001}
    assert words.regime_of(bd) == _regime_by_sum(bd)


def test_hidden_notes_follow_hidden_share():
    rng = random.Random(5)
    for _ in range(2000):
        ov = {k: rng.choice((0.0, 0.5, 1.0, 3.0, math.nan)) for k in ("tp_comm", "dp_comm")}
        bd = {"compute": rng.choice((0.0, -1.0, 1.0, 2.0, 10.0, math.nan))}
        rep = attrs.make_class("R", ["overlapped_s", "breakdown_s", "step_time_s"])(ov, bd, 1.0)
        share = words.hidden_share(ov, bd)
        assert bool(words.hidden_notes(rep)) == (share is not None and share > words.HIDDEN_NOTE_ABOVE)


def _fresh(sc) -> dict:
    return shardmeter.Estimator().estimate(sc).to_dict()


def test_a_modified_or_other_scenario_gets_its_own_figures():
    est = shardmeter.Estimator()
    sc = est.load(GPT3)
    first = est.estimate(sc).to_dict()
    isl = sc.islands[0]
    # every figure the report keeps per resolved scenario moves: the GPUs billed and used (more
    # nodes, idle GPUs and a note on them), the price, the steps (tokens), the layout
    bigger = attrs.evolve(sc, islands=(attrs.evolve(isl, nodes=isl.nodes * 2),))
    cheaper = est.load(sc, overrides={"island[0].price": "owned"})
    shorter = attrs.evolve(sc, training=attrs.evolve(sc.training, tokens=sc.training.tokens / 3))
    relaid = est.load(sc, overrides={"parallelism.tp": 4, "parallelism.dp": 32})
    three = est.load(THREE)
    for other in (bigger, cheaper, shorter, relaid, three, sc, bigger, sc):
        got = est.estimate(other).to_dict()
        assert got == _fresh(other)
        if other is not sc:
            assert got != first
    assert est.estimate(bigger).to_dict()["gpus"] == first["gpus"]  # the same plan ...
    big = est.estimate(bigger).to_dict()
    assert big["islands"][0]["gpus_billed"] == 2 * first["islands"][0]["gpus_billed"]  # ... billed twice
    assert big["cost_usd"] > first["cost_usd"] and len(big["notes"]) == len(first["notes"]) + 1
    assert est.estimate(shorter).to_dict()["cost_breakdown_usd"]["gpu_hours"] == pytest.approx(
        first["cost_breakdown_usd"]["gpu_hours"] / 3
    )
    assert est.estimate(relaid).to_dict()["layout"]["tp"] == 4


def test_figures_of_another_resolved_scenario_are_not_used():
    est = shardmeter.Estimator()
    a, b = est.resolve(est.load(GPT3)), est.resolve(est.load(THREE))
    out_b = evaluate(*est.inputs(b))
    kept_a = ReportFigures(a)
    build_report(a, evaluate(*est.inputs(a)), figures=kept_a)  # a's figures worked out
    assert build_report(b, out_b, figures=kept_a).to_dict() == build_report(b, out_b).to_dict()


def test_a_report_taken_from_kept_figures_is_its_own():
    """Changing one report's lists and dicts changes neither the kept figures nor the next."""
    est = shardmeter.Estimator()
    sc = est.load(THREE)
    first = est.estimate(sc)
    want = first.to_dict()
    first.notes.append("changed")
    first.assumptions.append("changed")
    first.layout["tp"] = 99
    for entry in first.layout.get("islands", []):
        entry["tp"] = 99
    first.cost_breakdown_usd["islands"][0]["name"] = "changed"
    first.confidence["runs"].append("changed")
    first.confidence["reasons"].append("changed")
    assert est.estimate(sc).to_dict() == want


def test_levels_sum_the_terms_in_order():
    rng = random.Random(3)
    keys = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "island_sync", "compute")
    est = shardmeter.Estimator()  # (any outputs: _levels reads three floats of them)
    res = est.resolve(est.load(GPT3))
    outputs = evaluate(*est.inputs(res))
    for _ in range(3000):
        bd = {k: _num(rng) for k in keys if rng.random() < 0.7}
        ov = {k: _num(rng) for k in keys if rng.random() < 0.5}
        got = build._levels(outputs, 0, bd, ov)["intra_island"]
        comm_in = sum(bd.get(k, 0.0) for k in ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm"))
        want = comm_in + sum(ov.get(k, 0.0) for k in ("tp_comm", "cp_comm", "dp_comm"))
        assert _same(got["exposed_s"], comm_in) and _same(got["time_s"], want), (bd, ov)


def test_the_terms_getters_are_the_records_own():
    est = shardmeter.Estimator()
    for path in (GPT3, THREE):
        res = est.resolve(est.load(path))
        out = evaluate(*est.inputs(res))
        for rec in (out.breakdown, out.overlapped, out.island.breakdown):
            assert list(build._terms(rec)) == list(rec.terms().items())
        parts = out.island.memory_parts
        assert list(build._PART_NAMES) == list(parts.parts())


def test_one_islands_layout_is_the_general_codes():
    """The one-island layout (its own dict at the top) is what the general code gives."""
    est = shardmeter.Estimator()
    paths = [p for p in sorted((ROOT / "examples").rglob("*.toml")) if "plugins" not in p.parts]
    seen = 0
    for path in paths:
        try:
            res = est.resolve(est.load(path))
            out = evaluate(*est.inputs(res))
        except Exception:  # noqa: BLE001 (the examples that are not one per-island scenario)
            continue
        if len(res.islands) != 1 or out.island.layers_per_stage is None:
            continue
        per = [layout._island_layout(f, out, 0, j) for j, f in enumerate(ReportFigures(res).layouts)]
        want = dict(per[0]) | {
            "dp_total": sum(p["dp"] for p in per),
            "global_batch": res.scenario.training.global_batch,
            "params": layout._fat(out.params, 0),
        }
        got = layout.layout_of(res, out, 0)
        assert list(got) == list(want) and got == want
        assert all(type(got[k]) is type(want[k]) for k in want)
        seen += 1
    assert seen >= 3


def _scalar_outputs():
    est = shardmeter.Estimator()
    res = est.resolve(est.load(GPT3))
    return res, evaluate(*est.inputs(res))


def _random_breakdown(rng: random.Random, cls):
    """A record of ``cls`` with random terms (edges, nan, ties and exact zeros among them)."""
    pool = (0.0, 1.0, 2.5, math.nan, -1.0)
    return cls(**{f.name: rng.choice(pool) if rng.random() < 0.4 else _num(rng) for f in attrs.fields(cls)})


def test_the_bottleneck_found_on_the_way_is_max_of_the_breakdown():
    """``_breakdowns``' bottleneck is ``max(bd, key=bd.__getitem__)`` (the first of the largest),
    and its breakdown the general rule's (terms > 0; compute, the island sync between islands, kept)."""
    rng = random.Random(11)
    _, out = _scalar_outputs()
    for _ in range(3000):
        rec = _random_breakdown(rng, build.Breakdown)
        n_isl = rng.choice((1, 2))
        bd, _, top = build._breakdowns(attrs.evolve(out, breakdown=rec), 0, n_isl)
        keep = ("compute", "island_sync") if n_isl > 1 else ("compute",)
        want = {k: max(0.0, v) for k, v in rec.terms().items() if v > 0 or k in keep}
        want = {k: (0.0 if math.isnan(v) else v) for k, v in want.items()}
        assert list(bd) == list(want) and all(_same(bd[k], want[k]) for k in want), (rec, bd)
        assert top == max(bd, key=bd.__getitem__), (rec, bd, top)


def test_an_islands_own_breakdown_is_the_general_codes():
    """The kept getter of the own terms gives what the test of each name gives (and an other
    record than a Breakdown still takes the general code)."""

    class Other:
        def __init__(self, rec):
            self.rec = rec

        def terms(self):
            return self.rec.terms()

    rng = random.Random(12)
    for _ in range(3000):
        rec = _random_breakdown(rng, build.Breakdown)
        want = {
            k: v
            for k, v in rec.terms().items()
            if k not in ("island_sync", "idle") and (v > 0 or k == "compute")
        }
        for given in (rec, Other(rec)):
            got = build._own_breakdown(given, 0, 0)
            assert list(got) == list(want) and all(_same(got[k], want[k]) for k in want), (rec, got)


def test_island_entries_read_floats_and_other_numbers_alike():
    """The entries' figures read with _fat's test written out are _fat's, for floats and for
    numbers of other types (a numpy float, an int)."""
    np = pytest.importorskip("numpy")
    rng = random.Random(13)
    res, out = _scalar_outputs()
    figures = ReportFigures(res)
    names = ("tokens_per_s", "idle_s", "step_s", "utilization", "memory_bytes", "batch_sequences")
    for _ in range(500):
        vals = {}
        for k in names:
            x = _num(rng)
            kind = rng.choice((float, np.float64, int))
            vals[k] = (
                kind(round(x)) if kind is int and math.isfinite(x) else kind(x) if kind is not int else x
            )
        sync = _num(rng)
        isl = attrs.evolve(
            out.island, **vals, breakdown=attrs.evolve(out.island.breakdown, island_sync_s=sync)
        )
        o = attrs.evolve(out, island=isl)
        (entry,), _, _ = build._island_entries(res, o, 0, 2.0, 3.0, [], figures)
        f = build._fat
        idle = f(vals["idle_s"], 0, 0)
        want = {
            "tokens_per_s": f(vals["tokens_per_s"], 0, 0),
            "idle_s": idle if idle > 0.0 else 0.0,
            "step_time_s": f(vals["step_s"], 0, 0),
            "compute_utilization": f(vals["utilization"], 0, 0),
            "memory_per_gpu_gb": build._gb(vals["memory_bytes"], 0, 0),
            "batch_per_step": f(vals["batch_sequences"], 0, 0),
        }
        for k, v in want.items():
            assert type(entry[k]) is float and _same(entry[k], v), (k, vals, entry[k], v)
        s = f(sync, 0, 0)
        assert _same(entry["breakdown_s"]["island_sync"], s if s > 0.0 else 0.0)


def test_cost_rows_are_the_pricing_functions():
    """``cost_breakdown``'s rows, with gpu_hours, gpu_time_usd and egress_usd written out, are
    those functions' figures to the bit (random and edge times, traffic, rates and prices)."""
    rng = random.Random(14)
    res, _ = _scalar_outputs()
    (base,) = ReportFigures(res).prices
    rates = (math.nan, 0.0, -0.0, 2.5, 1e300, math.inf)
    for _ in range(3000):
        rate = rng.choice(rates) if rng.random() < 0.5 else _num(rng)
        price = attrs.evolve(
            base,
            gpus_billed=rng.choice((0, 1, 8, 1024, 10**6)),
            rate=rate,
            known=math.isfinite(rate),
            egress_usd_per_gb=_num(rng),
        )
        wall, gb = _num(rng), _num(rng)
        (row,) = pricing.cost_breakdown(res, wall, gb, (price,))["islands"]
        want = {
            "gpu_hours": pricing.gpu_hours(price.gpus_billed, wall),
            "compute_usd": pricing.gpu_time_usd(price.gpus_billed, rate, wall) if price.known else None,
            "egress_usd": pricing.egress_usd(gb * 1e9, price.egress_usd_per_gb),
        }
        for k, v in want.items():
            assert _same(row[k], v), (k, price, wall, gb, row[k], v)
