"""The plan table of a ``[[stage_group]]`` scenario: the heterogeneous pipelines found, fastest
first, and the best per-island plan beside them."""

from __future__ import annotations

from typing import Any

from shardmeter.tables import render_table

__all__ = ["stage_group_table"]


def stage_group_table(doc: dict[str, Any]) -> str:
    """The text of :func:`~shardmeter.explore.search.stage_group_plan.search_stage_groups`'s
    document (with ``per_island``, the per-island planner's best, when it was asked)."""
    rows = []
    for k, p in enumerate(doc["plans"], start=1):
        rep = p["report"]
        groups = " | ".join(
            f"{g['name']}@{g['island']} tp{g['tp']} x{g['stages']} [{'/'.join(str(x) for x in g['layers'])}]"
            + (" *" if g["pacing"] else "")
            for g in rep["groups"]
        )
        rows.append(
            [
                str(k),
                f"{rep['step_time_s']:.4g}",
                f"{rep['tokens_per_s']:,.0f}",
                f"{100 * rep['mfu']:.1f}",
                str(rep["dp"]),
                str(rep["micro_batch"]),
                p["sharding"],
                groups,
            ]
        )
    lines = [
        f"heterogeneous pipelines: {doc['candidates']} candidates (order x tp x dp x micro-batch x sharding), "
        f"{doc['feasible']} feasible; each one's layer split balanced, not enumerated",
        render_table(
            ["#", "step s", "tokens/s", "MFU %", "dp", "mbs", "sharding", "stage groups (layers per stage)"],
            rows,
        ),
        "(* holds the slowest stage)",
    ]
    best = doc.get("per_island")
    if best is not None and doc["plans"]:
        used = [f"{i['name']} {i['gpus']} GPUs" for i in best["islands"] if i.get("gpus")]
        speed = best["step_time_s"] / doc["plans"][0]["report"]["step_time_s"]
        lines.append(
            f"best per-island plan (all-reduce between islands, {best['evaluated']:,} evaluated): "
            f"{best['step_time_s']:.4g} s a step on {', '.join(used)}; the heterogeneous pipeline is "
            f"{speed:.2f}x {'faster' if speed >= 1 else 'as fast'}"
        )
    elif "per_island" in doc:
        lines.append("best per-island plan: none fits")
    return "\n".join(lines)
