"""``plan --csv OUT``: one row per returned plan (rank, the objective's figure, step time,
throughput, wall-clock, cost, the figures to quality, then each island's nodes, layout and
batch share, and how many plans share its time and cost), written atomically."""

from __future__ import annotations

import csv
import os
from typing import Any

from shardmeter.explore.formats.plan_table import equivalence_groups
from shardmeter.io import atomic_write
from shardmeter.report.band import pessimistic_time

__all__ = ["PLAN_CSV_FIELDS", "ISLAND_FIELDS", "plan_rows", "write_plan_csv", "objective_value"]

#: The columns of every row, before the islands' (``island[i].name``, ``.nodes``, ``.layout``, ``.share``).
PLAN_CSV_FIELDS = (
    "rank",
    "objective",
    "objective_value",
    "equivalent",
    "same_as_rank",
    "step_time_s",
    "tokens_per_s",
    "wall_clock_s",
    "cost_usd",
    "time_per_token_s",
    "cost_per_token_usd",
    "tokens_factor",
    "wall_clock_to_quality_s",
    "cost_to_quality_usd",
    "gpus",
    "mfu",
    "micro_batch",
    "recompute",
    "sync",
)
#: Each island's columns, after :data:`PLAN_CSV_FIELDS`.
ISLAND_FIELDS = ("name", "nodes", "layout", "share")

_LAYOUT_KEYS = ("tp", "pp", "dp", "cp", "ep")


def objective_value(plan: dict[str, Any], objective: str) -> float | None:
    """The figure ``objective`` ranks ``plan`` by: wall-clock (``time``, ``pareto``: fastest
    first), cost, either to data-parallel quality, or either at the slow end of the plan's
    confidence band (``time-pessimistic``, ``cost-pessimistic``: ``/ (1 - band)``); per token
    without ``training.tokens``."""
    rep = plan["report"]
    q = rep.get("quality") or {}
    if objective in ("time-pessimistic", "cost-pessimistic"):
        raw = objective_value(plan, objective.split("-")[0])
        band = (rep.get("confidence") or {}).get("band_pct")
        return None if raw is None or band is None else float(pessimistic_time(raw, band / 100))
    if objective == "time-to-quality":
        return q.get("wall_clock_to_quality_s")
    if objective == "cost-to-quality":
        return q.get("cost_to_quality_usd")
    if objective == "cost":
        return rep["cost_usd"] if rep.get("cost_usd") is not None else plan.get("cost_per_token_usd")
    return rep["wall_clock_s"] if rep.get("wall_clock_s") is not None else plan.get("time_per_token_s")


def _layout(par: dict[str, Any], j: int) -> str:
    """An island's layout as ``tp=2 pp=1 dp=32 cp=1 ep=1 sp=y sharding=zero1 schedule=1f1b``
    (``v=`` with virtual stages); ``par`` may hold one value per island (lists)."""

    def at(key: str, default: Any = None) -> Any:
        v = par.get(key, default)
        return v[j] if isinstance(v, list) else v

    bits = [f"{k}={at(k)}" for k in _LAYOUT_KEYS]
    bits.append(f"sp={'y' if at('sequence_parallel') else 'n'}")
    bits.append(f"sharding={at('sharding')}")
    bits.append(f"schedule={at('schedule')}")
    if (at("virtual_stages", 1) or 1) > 1:
        bits.append(f"v={at('virtual_stages')}")
    return " ".join(bits)


def _islands(plan: dict[str, Any]) -> list[tuple[Any, Any, str, Any]]:
    """``(name, nodes, layout, batch share)`` per island of ``plan`` (a dropped island: 0 nodes,
    no layout, share 0)."""
    by_name = {i.get("name"): i for i in plan["report"].get("islands") or []}
    out = []
    for j, e in enumerate(plan["islands"]):
        if e.get("dropped") or not e.get("nodes"):
            out.append((e.get("name"), 0, "", 0))
            continue
        par = e.get("parallelism") or plan["parallelism"]
        share = e.get("batch_share", (by_name.get(e.get("name")) or {}).get("batch_per_step"))
        out.append((e.get("name"), e.get("nodes"), _layout(par, 0 if "parallelism" in e else j), share))
    return out


def _sync(plan: dict[str, Any]) -> str:
    s = plan.get("sync") or {}
    return s.get("strategy", "") + (f"(H={s['inner_steps']})" if "inner_steps" in s else "")


def plan_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The header and one row of values per plan of ``plan --json`` document ``doc``."""
    plans = doc["plans"]
    n_isl = max((len(p["islands"]) for p in plans), default=0)
    header = [*PLAN_CSV_FIELDS, *(f"island[{j}].{f}" for j in range(n_isl) for f in ISLAND_FIELDS)]
    group_of: dict[int, list[int]] = {}
    for g in equivalence_groups(plans):
        for i in g:
            group_of[i] = g
    rows = []
    for i, p in enumerate(plans):
        rep, tr = p["report"], p["training"]
        q = rep.get("quality") or {}
        g = group_of[i]
        row = [
            p["rank"],
            doc["objective"],
            objective_value(p, doc["objective"]),
            len(g),
            plans[g[0]]["rank"] if g[0] != i else None,
            rep.get("step_time_s"),
            rep.get("tokens_per_s"),
            rep.get("wall_clock_s"),
            rep.get("cost_usd"),
            p.get("time_per_token_s"),
            p.get("cost_per_token_usd"),
            q.get("tokens_factor"),
            q.get("wall_clock_to_quality_s"),
            q.get("cost_to_quality_usd"),
            rep.get("gpus"),
            rep.get("mfu"),
            _joined(tr.get("micro_batch")),
            tr.get("recompute"),
            _sync(p),
        ]
        for isl in _islands(p):
            row += list(isl)
        rows.append(row)
    return header, rows


def _joined(v: Any) -> Any:
    """A per-island list (one value per island kept) as the table writes it, ``1/2``."""
    return "/".join(str(x) for x in v) if isinstance(v, list) else v


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_plan_csv(path: str | os.PathLike, doc: dict[str, Any], *, label: str = "--csv") -> None:
    """Write :func:`plan_rows` of ``doc`` to ``path`` atomically (:func:`~shardmeter.io.atomic_write`:
    a special file is refused, a symlink followed); ``label`` goes before ``path`` in errors."""
    header, rows = plan_rows(doc)
    with atomic_write(path, label=label) as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for r in rows:
            w.writerow([_cell(v) for v in r])
