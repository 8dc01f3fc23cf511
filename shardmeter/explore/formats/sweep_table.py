"""The text table ``shardmeter sweep`` prints: one row per grid point, the knee and regime
transitions of the scaling analysis (:mod:`.scaling`) marked on their rows and explained
below the table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shardmeter.explore.search.sweep import SweepResult
from shardmeter.explore.search.values import fields_of, format_value
from shardmeter.tables import fmt_num, fmt_time, fmt_usd, render_table

__all__ = ["sweep_table", "TABLE_ROWS", "TABLE_LINES"]

#: An entry of a sweep's analysis (a knee or a regime transition: a JSON object).
Doc = Mapping[str, Any]

#: Rows the table prints (a larger grid prints its first rows and says how many more there
#: are: ``--csv`` and ``--json`` have every row).
TABLE_ROWS = 50
#: Knee and transition lines printed below the table (then how many more).
TABLE_LINES = 20


def sweep_table(res: SweepResult) -> str:
    """The table of sweep result ``res`` (a :class:`~shardmeter.explore.search.sweep.SweepResult`)."""
    an = res.analysis
    eff = an.get("scaling_efficiency")
    if eff and all(e is None for e in eff):
        eff = None  # the GPU count does not vary: no efficiency to claim (see the note)
    x = an.get("x")
    knees = an.get("knees") or ([{"knee": an.get("knee")}] if "knee" in an else [])
    marks = _marks(res.rows[:TABLE_ROWS], x, an.get("transitions", []), knees)
    priced = any(fields_of(r).get("cost_usd") is not None for r in res.rows)
    # compute utilization is the share of wall time spent computing between islands' syncs: on one
    # island (and wherever no sync shows) it is 1 by definition, and a column of 100 % says nothing
    util = any(fields_of(r).get("compute_utilization") not in (None, 1.0) for r in res.rows)
    headers = [*res.keys, "GPUs", "step", "tokens/s", "tok/s/GPU", "MFU"]
    headers += ["util", "mem GB", "regime"] if util else ["mem GB", "regime"]
    if priced:
        headers += ["wall-clock", "cost"]
    if eff:
        headers.append("efficiency")
    if marks:
        headers.append("")
    rows = []
    for i, r in enumerate(res.rows[:TABLE_ROWS]):
        cells = [format_value(r["vary"][k]) for k in res.keys] + _report_cells(fields_of(r), priced, util)
        if eff:
            cells.append(f"{eff[i]:.1%}" if eff[i] is not None else "-")
        if marks:
            cells.append("  ".join(marks.get(i, [])))
        rows.append(cells)
    out = [render_table(headers, rows, title=f"ShardMeter sweep ({len(res.rows)} points)")]
    if len(res.rows) > TABLE_ROWS:
        out.append(
            f"... {len(res.rows) - TABLE_ROWS} more points not shown (the first {TABLE_ROWS} above): "
            "--csv OUT or --json has every row"
        )
    if an.get("scaling_note"):
        out.append(f"note: {an['scaling_note']}")
    if "knee" in an and not an.get("scaling_note"):
        out += _first(_knee_lines(knees, x), "knee lines")
    out += _first(_transition_lines(an.get("transitions", []), x), "transitions")
    return "\n".join(out)


def _first(lines: list[str], what: str) -> list[str]:
    """At most :data:`TABLE_LINES` of ``lines``, then how many more there are."""
    if len(lines) <= TABLE_LINES:
        return lines
    return [*lines[:TABLE_LINES], f"... {len(lines) - TABLE_LINES} more {what} (--json lists every one)"]


def _marks(
    rows: Sequence[Mapping[str, Any]], x: str | None, transitions: Sequence[Doc], knees: Sequence[Doc]
) -> dict[int, list[str]]:
    """Row index -> the transitions (``<- a -> b``) and knees (``<- knee``) at that row."""
    at: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        at.setdefault(_point(x, r["vary"].get(x), {k: v for k, v in r["vary"].items() if k != x}), []).append(
            i
        )
    marks: dict[int, list[str]] = {}
    for t in transitions:
        for i in at.get(_point(x, t["at"], t.get("series", {})), []):
            marks.setdefault(i, []).append(f"<- {t['from']} -> {t['to']}")
    for kn in knees:
        if kn["knee"] is None:
            continue
        for i in at.get(_point(x, kn["knee"], kn.get("series", {})), []):
            marks.setdefault(i, []).append("<- knee")
    return marks


def _point(x: str | None, value: Any, series: Mapping[str, Any]) -> tuple:
    """A grid point as a lookup key: its ``x`` value and the other keys' values, formatted."""
    return (format_value(value), tuple(sorted((k, format_value(v)) for k, v in series.items())))


def _report_cells(rep: Mapping[str, Any], priced: bool, util: bool = True) -> list[Any]:
    """The cells of one grid point's report, from ``GPUs`` to ``regime`` (and the price)."""
    if rep.get("feasible"):
        cells = [
            rep.get("gpus"),
            fmt_time(rep.get("step_time_s")),
            fmt_num(rep.get("tokens_per_s")),
            fmt_num(rep.get("tokens_per_s_per_gpu")),
            f"{rep['mfu']:.1%}" if rep.get("mfu") is not None else "-",
            f"{rep['compute_utilization']:.1%}" if rep.get("compute_utilization") is not None else "-",
            f"{rep['memory_per_gpu_gb']:.1f}" if rep.get("memory_per_gpu_gb") is not None else "-",
            rep.get("regime") or "-",
        ]
        if not util:
            del cells[5]
    else:
        why = ", ".join(sorted({x.split(":")[0] for x in rep.get("reasons") or []})) or "?"
        cells = [
            rep.get("gpus"),
            "-",
            "-",
            "-",
            "-",
            "-",
            f"{rep['memory_per_gpu_gb']:.1f}" if rep.get("memory_per_gpu_gb") is not None else "-",
            f"infeasible ({why})",
        ]
        if not util:
            del cells[5]
    if priced:
        cells += [
            fmt_time(rep.get("wall_clock_s")) if rep.get("wall_clock_s") else "-",
            fmt_usd(rep.get("cost_usd")),
        ]
    return cells


def _knee_lines(knees: Sequence[Doc], x: str | None) -> list[str]:
    """One line per series: where its knee is, or that it has none."""
    out = []
    for kn in knees:
        ser = ", ".join(f"{k}={format_value(v)}" for k, v in kn.get("series", {}).items())
        ser = f" [{ser}]" if ser else ""
        if kn["knee"] is None:
            out.append(
                f"knee{ser}: none (every added GPU still buys at least half the average per-GPU throughput)"
            )
        else:
            out.append(
                f"knee{ser}: {x} = {format_value(kn['knee'])} (past it an added GPU buys less than half "
                "the average tokens/s per GPU)"
            )
    return out


def _transition_lines(transitions: Sequence[Doc], x: str | None) -> list[str]:
    """One line per regime transition: between which values of ``x`` it happens."""
    out = []
    for t in transitions:
        ser = ", ".join(f"{k}={format_value(v)}" for k, v in t.get("series", {}).items())
        out.append(
            f"transition{' [' + ser + ']' if ser else ''}: {t['from']} -> {t['to']} between {x} = "
            f"{format_value(t['after'])} and {format_value(t['at'])}"
        )
    return out
