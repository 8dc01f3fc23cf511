"""The text ``shardmeter plan`` prints: what the search scored and rejected, then one row per
plan (its layout, step time, throughput, wall-clock or time per token, cost, and why it
ranks where it does)."""

from __future__ import annotations

from typing import Any

from ..table import fmt_num, fmt_time, render_table

__all__ = ["plan_table"]


def plan_table(doc) -> str:
    """The text of ``plan --json`` document ``doc`` (see :func:`~shardmeter.explore.plan.search`)."""
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
        "time/token" if per_tok else "wall-clock",
        "$/Mtok" if per_tok else "cost",
        "why",
    ]
    best = plans[0]
    rows = [_plan_cells(p, best, doc["objective"], multi, per_tok) for p in plans]
    title = {
        "time": "fastest plans",
        "cost": "cheapest plans",
        "pareto": f"Pareto front of {'time per token' if per_tok else 'wall-clock'} vs cost "
        f"({len(plans)} non-dominated plans, fastest first)",
    }[doc["objective"]]
    lines.append("")
    lines.append(render_table(headers, rows, title=title))
    if per_tok:
        lines.append("(no training.tokens in the scenario: time and cost per token)")
    return "\n".join(lines)


def _summary_lines(doc) -> list[str]:
    """Candidates scored and how fast, how many were feasible, and why the others were not."""
    head = (
        f"ShardMeter plan: {doc['evaluated']:,} candidates scored in {doc['seconds']:.2f} s "
        f"({doc['candidates_per_s'] / 1e6:.2f} M/s); {doc['feasible']:,} feasible"
        + (" [interrupted: best so far]" if doc.get("interrupted") else "")
    )
    lines = [head]
    if doc["infeasible"]:
        lines.append(
            "infeasible candidates by reason: "
            + ", ".join(f"{k} {n:,}" for k, n in sorted(doc["infeasible"].items(), key=lambda kv: -kv[1]))
        )
    extra = [
        f"{n:,} {w}"
        for n, w in (
            (doc.get("over_deadline"), "past the deadline"),
            (doc.get("over_budget"), "over budget"),
            (doc.get("duplicates"), "duplicates skipped"),
        )
        if n
    ]
    if extra:
        lines.append("also: " + ", ".join(extra))
    return lines


def _plan_cells(p, best, objective: str, multi: bool, per_tok) -> list[Any]:
    """One plan's row."""
    par, tr, rep = p["parallelism"], p["training"], p["report"]
    if isinstance(par["schedule"], list) or isinstance(par.get("virtual_stages"), list):  # per island
        vs = (
            par["virtual_stages"] if isinstance(par["virtual_stages"], list) else [par["virtual_stages"]] * 99
        )
        sc = par["schedule"] if isinstance(par["schedule"], list) else [par["schedule"]] * len(vs)
        sched = "/".join(s + (f"(v={v})" if v > 1 else "") for s, v in zip(sc, vs, strict=False))
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
        "/".join("y" if x else "n" for x in sp) if isinstance(sp, list) else ("y" if sp else "n"),
        tr["micro_batch"],
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
        wall,
        cost,
        _why(p, best, objective),
    ]
    return cells


def _per_island(value) -> Any:
    """A knob's cell: its value, or each island's joined by ``/`` (per-island layouts)."""
    return "/".join(str(v) for v in value) if isinstance(value, list) else value


def _why(plan, best, objective) -> str:
    """The plan's bottleneck and its share of the step, the memory left free, and (ranked by
    time or cost) how far it is from the best plan."""
    rep = plan["report"]
    bits = []
    if rep.get("bottleneck") and rep.get("step_time_s"):
        share = rep["breakdown_s"][rep["bottleneck"]] / rep["step_time_s"]
        bits.append(f"{rep['bottleneck']} {share:.0%}")
    if rep.get("memory_capacity_gb") and rep.get("memory_per_gpu_gb") is not None:
        free = rep["memory_capacity_gb"] - rep["memory_per_gpu_gb"]
        bits.append(f"{free:.1f} GB free" if free < 9.95 else f"{free:.0f} GB free")
    if plan is not best and objective != "pareto":
        key = "step_time_s" if objective == "time" else "cost_usd"
        a, b = rep.get(key), best["report"].get(key)
        if key == "cost_usd" and (a is None or b is None):
            a, b = plan.get("cost_per_token_usd"), best.get("cost_per_token_usd")
        if a and b:
            bits.append(f"{(a / b - 1):+.1%} vs #1")
    return "; ".join(bits)
