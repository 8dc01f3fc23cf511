"""The text ``shardmeter plan`` prints: what the search scored and rejected, then one row per
plan (its layout, step time, throughput, wall-clock or time per token, cost, and why it
ranks where it does); plans of equal time and cost share one row (:func:`equivalence_groups`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from shardmeter.explore.formats.plan_flags import band_cell, flag_legend, plan_flags, winner_caveats
from shardmeter.tables import fmt_num, fmt_time, render_table

__all__ = ["plan_table", "equivalence_groups", "front_unit", "TITLES"]

#: A ``plan --json`` document, or one of its plans or reports (JSON objects).
Doc = Mapping[str, Any]

#: The table's title per objective (the Pareto front's is built with its unit).
TITLES = {
    "time": "fastest plans",
    "cost": "cheapest plans",
    "time-to-quality": "fastest plans to data-parallel quality",
    "cost-to-quality": "cheapest plans to data-parallel quality",
    "time-pessimistic": "fastest plans at the slow end of their confidence band",
    "cost-pessimistic": "cheapest plans at the slow end of their confidence band",
}


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def _time_cost(plan: Doc) -> tuple[Any, Any]:
    rep = plan["report"]
    return rep.get("step_time_s"), rep.get("cost_usd", plan.get("cost_per_token_usd"))


def equivalence_groups(plans: Sequence[Doc]) -> list[list[int]]:
    """Indices of ``plans`` grouped by equal step time and equal cost (relative 1e-9; an unknown
    cost equals only an unknown cost), each group in rank order, groups by their first plan: such
    plans differ in layout but not in anything the objective ranks."""
    groups: list[list[int]] = []
    keys: list[tuple[Any, Any]] = []
    for i, p in enumerate(plans):
        t, c = _time_cost(p)
        for g, (gt, gc) in zip(groups, keys, strict=True):
            if _same(t, gt) and _same(c, gc):
                g.append(i)
                break
        else:
            groups.append([i])
            keys.append((t, c))
    return groups


def front_unit(doc: Doc) -> str:
    """What the Pareto front trades, with its units."""
    if doc.get("per_token"):
        return "time per token (s) vs cost per million tokens (USD)"
    return "wall-clock (days) vs cost (USD)"


def plan_table(doc: Doc) -> str:
    """The text of ``plan --json`` document ``doc`` (see :func:`~shardmeter.explore.search.plan.search`)."""
    per_tok = doc.get("per_token")
    lines = _summary_lines(doc)
    plans = doc["plans"]
    if not plans:
        lines.append("no feasible plan found")
        return "\n".join(lines)
    multi = len(plans[0]["islands"]) > 1
    headers = ["#", "tp", "pp", "dp", "cp", "ep", "sp", "mbs", "schedule", "recompute", "sharding"]
    if multi:
        headers += ["nodes", "sync"]
    headers += [
        "GPUs",
        "step",
        "tok/s/GPU",
        "MFU",
        "band",
        "time/token" if per_tok else "wall-clock",
        "$/Mtok" if per_tok else "cost",
    ]
    quality = _has_quality(plans)
    if quality:
        headers += ["tokens x", "to quality", "cost to q."]
    flags = any(plan_flags(p["report"]) for p in plans)
    if flags:
        headers.append("flags")
    headers.append("why")
    best = plans[0]
    groups = equivalence_groups(plans)
    merged = any(len(g) > 1 for g in groups)
    if merged:
        headers.insert(1, "same")
    flagged = any(_outside([p]) for p in plans)
    if flagged:  # a column marks the rows outside the validated envelope, footnoted below
        headers.insert(1, "!")
    rows = []
    for g in groups:
        cells = _plan_cells(plans[g[0]], best, doc["objective"], multi, per_tok, quality)
        if flags:
            cells.insert(-1, ", ".join(plan_flags(plans[g[0]]["report"])))
        cells[0] = _ranks([plans[i]["rank"] for i in g])
        if merged:
            cells.insert(1, f"x{len(g)}" if len(g) > 1 else "")
        if flagged:
            cells.insert(1, "!" if _outside([plans[i] for i in g]) else "")
        rows.append(cells)
    objective = doc["objective"]
    if objective == "pareto":
        title = f"Pareto front of {front_unit(doc)} ({len(plans)} non-dominated plans, fastest first)"
    else:
        title = TITLES.get(objective, f"best plans by {objective}")
    lines.append("")
    lines.append(render_table(headers, rows, title=title))
    if merged:
        lines.append(
            "(a row marked xN stands for N plans of equal step time and cost whose layouts differ; "
            "the row shows the first: --json or --csv lists each)"
        )
    if per_tok:
        lines.append("(no training.tokens in the scenario: time and cost per token)")
    if flags:
        lines.extend(flag_legend())
    lines.extend(_envelope_notes(plans, groups))
    lines.extend(winner_caveats(best))
    return "\n".join(lines)


def _outside(plans: Sequence[Doc]) -> list[str]:
    """Why the first of ``plans`` outside the validated envelope is (``[]``: all inside, or no
    ``confidence`` in their reports)."""
    for p in plans:
        c = p["report"].get("confidence") or {}
        if c and not c.get("within_envelope", True):
            return list(c.get("reasons") or ["outside the validated envelope"])
    return []


def _envelope_notes(plans: Sequence[Doc], groups: list[list[int]]) -> list[str]:
    """The footnotes of the rows marked ``!``: each row's reasons for lying outside the validated
    envelope (``docs/scenario.md``, "Confidence")."""
    notes = []
    for g in groups:
        why = _outside([plans[i] for i in g])
        if why:
            notes.append(f"  #{_ranks([plans[i]['rank'] for i in g])}: " + "; ".join(why))
    if not notes:
        return []
    return [
        "! outside the validated envelope (the band of --json's report.confidence is extrapolated):",
        *notes,
    ]


def _ranks(ranks: list[int]) -> str:
    """The ranks one row stands for: ``3``, ``3-5`` (consecutive) or ``3,7``."""
    if len(ranks) == 1:
        return str(ranks[0])
    if ranks == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


def _summary_lines(doc: Doc) -> list[str]:
    """Candidates scored and how fast, how many were feasible, and why the others were not."""
    head = (
        f"ShardMeter plan: {doc['evaluated']:,} candidates scored in {doc['seconds']:.2f} s "
        f"({doc['candidates_per_s'] / 1e6:.2f} M/s); {doc['feasible']:,} feasible"
        + (" [interrupted: best so far]" if doc.get("interrupted") else "")
    )
    lines = [head]
    if doc["infeasible"]:
        how = (
            "by primary reason (each counted once, under the first check it fails; a candidate may fail several)"
            if doc.get("infeasible_note")
            else "by reason (the reasons overlap: a candidate failing several checks counts under each)"
        )
        lines.append(
            f"infeasible candidates {how}: "
            + ", ".join(f"{k} {n:,}" for k, n in sorted(doc["infeasible"].items(), key=lambda kv: -kv[1]))
        )
    extra = [
        f"{n:,} {w}"
        for n, w in (
            (doc.get("over_deadline"), "past the deadline"),
            (doc.get("over_budget"), "over budget"),
            (doc.get("duplicates"), "duplicates skipped"),
            (doc.get("equivalent"), "plans equal in time and cost to a kept one collapsed by the search"),
        )
        if n
    ]
    if extra:
        lines.append("also: " + ", ".join(extra))
    return lines


def _has_quality(plans: Sequence[Doc]) -> bool:
    """Whether any plan's report prices convergence (``quality`` with the figures to quality)."""
    return any((p["report"].get("quality") or {}).get("tokens_factor") is not None for p in plans)


def _quality_cells(rep: Doc) -> list[str]:
    """Tokens factor, wall-clock and cost to data-parallel quality (``-`` when unknown)."""
    q = rep.get("quality") or {}
    f, t, c = q.get("tokens_factor"), q.get("wall_clock_to_quality_s"), q.get("cost_to_quality_usd")
    return [
        f"{f:.3f}" if f is not None else "-",
        fmt_time(t),
        f"${c:,.0f}" if c is not None else "-",
    ]


def _plan_cells(
    p: Doc, best: Doc, objective: str, multi: bool, per_tok: Any, quality: bool = False
) -> list[Any]:
    """One plan's row."""
    par, tr, rep = p["parallelism"], p["training"], p["report"]
    kept = [not e.get("dropped") and e.get("nodes") != 0 for e in p["islands"]]
    par = {k: _spread(v, kept) for k, v in par.items()}
    if isinstance(par["schedule"], list) or isinstance(par.get("virtual_stages"), list):  # per island
        vs = (
            par["virtual_stages"] if isinstance(par["virtual_stages"], list) else [par["virtual_stages"]] * 99
        )
        sc = par["schedule"] if isinstance(par["schedule"], list) else [par["schedule"]] * len(vs)
        sched = "/".join(
            s + (f"(v={v})" if isinstance(v, int) and v > 1 else "") for s, v in zip(sc, vs, strict=False)
        )
    else:
        sched = par["schedule"] + (f"(v={par['virtual_stages']})" if par.get("virtual_stages", 1) > 1 else "")
    sp = par["sequence_parallel"]
    cells = [
        p["rank"],
        _per_island(par["tp"]),
        _per_island(par["pp"]),
        _per_island(par["dp"]),
        _per_island(par["cp"]),
        _per_island(par["ep"]),
        "/".join(x if x == "-" else "y" if x else "n" for x in sp)
        if isinstance(sp, list)
        else ("y" if sp else "n"),
        _per_island(_spread(tr["micro_batch"], kept)),
        sched,
        tr["recompute"],
        _per_island(par["sharding"]),
    ]
    if multi:
        s = p.get("sync", {})
        cells += [
            "/".join(str(i["nodes"]) for i in p["islands"]),
            s.get("strategy", "") + (f"(H={s['inner_steps']})" if "inner_steps" in s else ""),
        ]
    if per_tok:
        wall = fmt_time(p.get("time_per_token_s"))
        cost = f"${p['cost_per_token_usd'] * 1e6:,.2f}" if p.get("cost_per_token_usd") is not None else "-"
    else:
        wall = fmt_time(rep.get("wall_clock_s"))
        cost = f"${rep['cost_usd']:,.0f}" if rep.get("cost_usd") is not None else "-"
    cells += [
        rep["gpus"],
        fmt_time(rep["step_time_s"]),
        fmt_num(rep["tokens_per_s_per_gpu"]),
        f"{rep['mfu']:.1%}",
        band_cell(rep),
        wall,
        cost,
    ]
    if quality:
        cells += _quality_cells(rep)
    cells.append(_why(p, best, objective))
    return cells


def _spread(value: Any, kept: list[bool]) -> Any:
    """A per-island list of the islands kept, with ``-`` in the place of each dropped island
    (``[1, 2]`` with the first of three dropped: ``["-", 1, 2]``); anything else as it is."""
    if not isinstance(value, list) or all(kept) or len(value) != sum(kept):
        return value
    it = iter(value)
    return [next(it) if k else "-" for k in kept]


def _per_island(value: Any) -> Any:
    """A knob's cell: its value, or each island's joined by ``/`` (per-island layouts)."""
    return "/".join(str(v) for v in value) if isinstance(value, list) else value


def _why(plan: Doc, best: Doc, objective: str) -> str:
    """The plan's bottleneck and its share of the step, the memory left free beside what the
    plan holds (``memory_per_gpu_gb``: the caching allocator's cache may fill the rest, up to the
    GPU's memory, ``memory_reserved_gb``, and gives it back before it runs out), and (ranked by
    time or cost) how far it is from the best plan."""
    rep = plan["report"]
    bits = []
    if rep.get("bottleneck") and rep.get("step_time_s"):
        share = rep["breakdown_s"][rep["bottleneck"]] / rep["step_time_s"]
        bits.append(f"{rep['bottleneck']} {share:.0%}")
    held = rep.get("memory_per_gpu_gb")
    if rep.get("memory_capacity_gb") and held is not None:
        free = rep["memory_capacity_gb"] - held  # headroom: cached blocks are given back
        bits.append(f"{free:.1f} GB free" if free < 9.95 else f"{free:.0f} GB free")
    if plan is not best and objective != "pareto":
        a, b = _score(plan, objective), _score(best, objective)
        if a and b and math.isfinite(a) and math.isfinite(b):
            bits.append(f"{(a / b - 1):+.1%} vs #1")
    return "; ".join(bits)


def _score(plan: Doc, objective: str) -> float | None:
    """The figure ``objective`` ranks ``plan`` by (``None`` when unknown)."""
    rep = plan["report"]
    q = rep.get("quality") or {}
    if objective in ("time-pessimistic", "cost-pessimistic"):
        raw = _score(plan, objective.split("-")[0])
        band = (rep.get("confidence") or {}).get("band_pct")
        if raw is None or band is None:
            return None
        return raw / (1 - band / 100) if band < 100 else math.inf
    if objective == "time":
        return rep.get("step_time_s")
    if objective == "time-to-quality":
        return q.get("wall_clock_to_quality_s")
    if objective == "cost-to-quality":
        return q.get("cost_to_quality_usd")
    cost = rep.get("cost_usd")
    return cost if cost is not None else plan.get("cost_per_token_usd")
