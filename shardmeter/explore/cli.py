"""The ``sweep``, ``plan`` and ``sensitivity`` sub-commands (registered by
:mod:`shardmeter.cli` when this module exists)."""

from __future__ import annotations

import csv
import os
import sys
from typing import Any

from ..errors import ShardMeterError
from ..io import atomic_write
from ..model.evaluate import BREAKDOWN_TERMS
from ..table import fmt_num, fmt_time, render_table
from .values import format_value, parse_values, parse_vary

__all__ = ["add_sweep_parser", "add_plan_parser", "add_sensitivity_parser", "CSV_FIELDS"]


def _common(p, *, workers: bool = True) -> None:
    p.add_argument("file", help="scenario TOML file")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario key (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    if workers:
        p.add_argument("--workers", type=int, metavar="N", help="score chunks on N local processes")
        p.add_argument(
            "--dask",
            metavar="ADDRESS",
            help="score chunks on a dask.distributed cluster ('local' starts a LocalCluster)",
        )


def _positive_int(text: str) -> int:
    import argparse

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def _positive_float(text: str) -> float:
    import argparse
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return v


def _check_workers(args) -> None:
    if getattr(args, "workers", None) is not None and args.workers < 1:
        raise ShardMeterError("--workers must be >= 1")


def _dump(obj) -> None:
    from ..cli import dump_json

    print(dump_json(obj))


# =============================================================================================
# sweep

#: Report fields written to ``sweep --csv`` (after the varied keys), then the breakdown and analysis.
CSV_FIELDS = (
    "feasible",
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "model_tflops_per_gpu",
    "mfu",
    "hfu",
    "memory_per_gpu_gb",
    "compute_utilization",
    "gpus",
    "wall_clock_s",
    "cost_usd",
    "bottleneck",
    "regime",
    "reasons",
)


def add_sweep_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="evaluate a grid of scenario variants (--vary), with scaling analysis",
        description="Vary one or more keys over lists or ranges (a..bxk geometric, a..b+k "
        "arithmetic); several --vary form a grid evaluated in one vectorised pass.",
    )
    _common(p)
    p.add_argument(
        "--vary",
        action="append",
        required=True,
        metavar="KEY=VALUES",
        help="KEY=V1,V2,... or KEY=a..bxk (geometric) or KEY=a..b+k (arithmetic); repeatable",
    )
    p.add_argument("--csv", metavar="OUT", help="write one row per grid point to OUT (atomically)")
    p.add_argument(
        "--plot", metavar="OUT.png", help="plot throughput and efficiency (needs shardmeter[plot])"
    )
    p.add_argument("--resume", action="store_true", help="with --csv: skip grid points already in OUT")
    p.set_defaults(func=_cmd_sweep)


def _flat(report: dict[str, Any]) -> dict[str, Any]:
    row = {}
    for f in CSV_FIELDS:
        v = report.get(f)
        row[f] = " | ".join(v) if isinstance(v, list) else v
    for t in BREAKDOWN_TERMS:
        row[f"breakdown_{t}"] = (
            (report.get("breakdown_s") or {}).get(t, 0.0) if report.get("feasible") else None
        )
    return row


def _csv_header(keys):
    return [*keys, *CSV_FIELDS, *(f"breakdown_{t}" for t in BREAKDOWN_TERMS), "scaling_efficiency"]


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return format_value(v)


def _write_csv(path, keys, rows, analysis) -> None:
    header = _csv_header(keys)
    eff = analysis.get("scaling_efficiency") if analysis else None
    with atomic_write(path) as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for i, r in enumerate(rows):
            flat = r.get("_csv") or _flat(r["report"])
            cells = [format_value(r["vary"][k]) for k in keys]
            cells += [
                flat.get(h) if isinstance(flat.get(h), str) and r.get("_csv") else _cell(flat.get(h))
                for h in header[len(keys) : -1]
            ]
            cells.append(_cell(eff[i]) if eff and i < len(eff) else "")
            w.writerow(cells)


def _read_resume(path, keys) -> dict[tuple, dict[str, Any]]:
    """Rows of an earlier ``--csv`` file, by their formatted vary values."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rd = csv.reader(fh)
            header = next(rd, None)
            lines = list(rd)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ShardMeterError(f"--resume: cannot read {path}: {exc}") from None
    if header is None:
        return {}
    if header[: len(keys)] != list(keys) or header[len(keys) : len(keys) + 1] != ["feasible"]:
        raise ShardMeterError(
            f"--resume: {path} was written by a sweep over other keys "
            f"({', '.join(header[: max(1, header.index('feasible') if 'feasible' in header else 1)])})"
        )
    out = {}
    for line in lines:
        if len(line) != len(header):
            continue  # a damaged line is computed again
        cells = dict(zip(header, line))
        sig = tuple(line[: len(keys)])
        vary = {k: parse_values(k, line[j])[0] if line[j] else "" for j, k in enumerate(keys)}
        rep: dict[str, Any] = {}
        for h in header[len(keys) :]:
            c = cells[h]
            if h == "feasible":
                rep[h] = c == "true"
            elif h in ("bottleneck", "regime"):
                rep[h] = c or None
            elif h == "reasons":
                rep[h] = [x for x in c.split(" | ") if x]
            elif h.startswith("breakdown_") or h == "scaling_efficiency":
                continue
            else:
                try:
                    rep[h] = float(c) if c else None
                except ValueError:
                    rep[h] = None
        if rep.get("gpus") is not None:
            rep["gpus"] = int(rep["gpus"])
        rep["breakdown_s"] = {
            h[10:]: float(cells[h]) for h in header if h.startswith("breakdown_") and cells[h]
        }
        out[sig] = {
            "vary": vary,
            "report": rep,
            "resumed": True,
            "_csv": {h: cells[h] for h in header[len(keys) :]},
        }
    return out


def _sweep_table(res) -> str:
    from ..report import describe_bottleneck  # noqa: F401 - keeps words consistent with estimate

    an = res.analysis
    eff = an.get("scaling_efficiency")
    marks: dict[int, list[str]] = {}
    x = an.get("x")
    for t in an.get("transitions", []):
        for i, r in enumerate(res.rows):
            if r["vary"].get(x) == t["at"] and all(
                r["vary"].get(k) == v for k, v in t.get("series", {}).items()
            ):
                marks.setdefault(i, []).append(f"<- {t['from']} -> {t['to']}")
    knees = an.get("knees") or ([{"knee": an.get("knee")}] if "knee" in an else [])
    for kn in knees:
        if kn["knee"] is None:
            continue
        for i, r in enumerate(res.rows):
            if r["vary"].get(x) == kn["knee"] and all(
                r["vary"].get(k) == v for k, v in kn.get("series", {}).items()
            ):
                marks.setdefault(i, []).append("<- knee")
    headers = [*res.keys, "GPUs", "step", "tokens/s", "tok/s/GPU", "MFU", "util", "mem GB", "regime"]
    priced = any(r["report"].get("cost_usd") is not None for r in res.rows)
    if priced:
        headers += ["wall-clock", "cost"]
    if eff:
        headers.append("efficiency")
    if marks:
        headers.append("")
    rows = []
    for i, r in enumerate(res.rows):
        rep = r["report"]
        cells = [format_value(r["vary"][k]) for k in res.keys]
        if rep.get("feasible"):
            cells += [
                rep.get("gpus"),
                fmt_time(rep.get("step_time_s")),
                fmt_num(rep.get("tokens_per_s")),
                fmt_num(rep.get("tokens_per_s_per_gpu")),
                f"{rep['mfu']:.1%}" if rep.get("mfu") is not None else "-",
                f"{rep['compute_utilization']:.1%}" if rep.get("compute_utilization") is not None else "-",
                f"{rep['memory_per_gpu_gb']:.1f}" if rep.get("memory_per_gpu_gb") is not None else "-",
                rep.get("regime") or "-",
            ]
        else:
            why = ", ".join(sorted({x.split(":")[0] for x in rep.get("reasons") or []})) or "?"
            cells += [
                rep.get("gpus"),
                "-",
                "-",
                "-",
                "-",
                "-",
                f"{rep['memory_per_gpu_gb']:.1f}" if rep.get("memory_per_gpu_gb") is not None else "-",
                f"infeasible ({why})",
            ]
        if priced:
            cells += [
                fmt_time(rep.get("wall_clock_s")) if rep.get("wall_clock_s") else "-",
                f"${rep['cost_usd']:,.0f}" if rep.get("cost_usd") is not None else "-",
            ]
        if eff:
            cells.append(f"{eff[i]:.1%}" if eff[i] is not None else "-")
        if marks:
            cells.append("  ".join(marks.get(i, [])))
        rows.append(cells)
    out = [render_table(headers, rows, title=f"ShardMeter sweep ({len(res.rows)} points)")]
    if "knee" in an:
        for kn in knees:
            ser = ", ".join(f"{k}={format_value(v)}" for k, v in kn.get("series", {}).items())
            ser = f" [{ser}]" if ser else ""
            if kn["knee"] is None:
                out.append(
                    f"knee{ser}: none (every added GPU still buys at least half the average per-GPU "
                    "throughput)"
                )
            else:
                out.append(
                    f"knee{ser}: {x} = {format_value(kn['knee'])} (past it an added GPU buys less than half "
                    "the average tokens/s per GPU)"
                )
    for t in an.get("transitions", []):
        ser = ", ".join(f"{k}={format_value(v)}" for k, v in t.get("series", {}).items())
        out.append(
            f"transition{' [' + ser + ']' if ser else ''}: {t['from']} -> {t['to']} between {x} = "
            f"{format_value(t['after'])} and {format_value(t['at'])}"
        )
    return "\n".join(out)


def _cmd_sweep(args) -> int:
    from .scaling import analyse
    from .sweep import run_sweep

    _check_workers(args)
    vary = [parse_vary(v) for v in args.vary]
    keys = [k for k, _ in vary]
    if args.resume and not args.csv:
        raise ShardMeterError("--resume needs --csv OUT (the file whose rows are kept)")
    skip = _read_resume(args.csv, keys) if args.resume else {}

    def save(rows):
        if args.csv:
            _write_csv(args.csv, keys, rows, analyse(keys, rows))

    try:
        res = run_sweep(
            args.file,
            vary,
            overrides=args.set or (),
            skip=skip,
            workers=args.workers,
            dask=args.dask,
            on_progress=save if args.csv else None,
        )
    except KeyboardInterrupt:
        if args.csv:
            print(
                f"shardmeter: interrupted; the rows done so far are in {args.csv}: rerun with --resume",
                file=sys.stderr,
            )
        raise
    if args.csv:
        _write_csv(args.csv, keys, res.rows, res.analysis)
    if args.plot:
        from .plot import plot_sweep

        plot_sweep(res, args.plot, title=f"{os.path.basename(args.file)}: sweep over {res.analysis.get('x')}")
    if args.json:
        _dump(res.to_dict())
    else:
        print(_sweep_table(res))
        if args.csv:
            print(f"wrote {args.csv}")
        if args.plot:
            print(f"wrote {args.plot}")
    return 0


# =============================================================================================
# sensitivity


def add_sensitivity_parser(sub) -> None:
    p = sub.add_parser("sensitivity", help="rank resources by the throughput 10 % more of each buys")
    _common(p, workers=False)
    p.set_defaults(func=_cmd_sensitivity)


def _cmd_sensitivity(args) -> int:
    from .sensitivity import sensitivity

    doc = sensitivity(args.file, overrides=args.set or ())
    if args.json:
        _dump(doc)
        return 0
    if not doc["feasible"]:
        print("INFEASIBLE plan: nothing to rank")
        for r in doc["reasons"]:
            print(f"  - {r}")
        return 0
    rows = [
        (
            r["rank"],
            r["label"],
            r["change"],
            f"{r['throughput_gain_pct']:+.2f} %" if r["throughput_gain_pct"] is not None else "-",
            f"{r['elasticity']:.3f}" if r["elasticity"] is not None else "-",
        )
        for r in doc["resources"]
    ]
    print(
        render_table(
            ("rank", "resource", "change", "throughput", "elasticity"),
            rows,
            title=f"ShardMeter sensitivity (step {fmt_time(doc['step_time_s'])}, {doc['regime']}, "
            f"bottleneck {doc['bottleneck']})",
        )
    )
    print()
    for r in doc["resources"][:3]:
        print(r["summary"])
    return 0


# =============================================================================================
# plan


def add_plan_parser(sub) -> None:
    p = sub.add_parser("plan", help="search every layout for the fastest, cheapest or Pareto-best plans")
    _common(p)
    p.add_argument(
        "--objective",
        choices=("time", "cost", "pareto"),
        default="time",
        help="rank by wall-clock time, by dollar cost, or return the time/cost Pareto front",
    )
    p.add_argument("--top", type=_positive_int, default=10, metavar="K", help="plans to return (default 10)")
    p.add_argument("--max-gpus", type=_positive_int, metavar="N", help="use at most N GPUs in total")
    p.add_argument(
        "--budget-usd", type=_positive_float, metavar="X", help="drop plans costing more (needs tokens)"
    )
    p.add_argument(
        "--deadline-days",
        type=_positive_float,
        metavar="D",
        help="drop plans taking longer (needs training.tokens)",
    )
    p.add_argument(
        "--only",
        action="append",
        metavar="KNOB=V1,V2",
        help="restrict a knob (tp, pp, dp, cp, ep, sp, mbs, schedule, v, recompute, sharding, strategy, "
        "inner_steps, bits, island[i].nodes); KNOB alone keeps the scenario's value",
    )
    p.add_argument("--chunk", type=_positive_int, default=None, help="candidates per task (default 262144)")
    p.set_defaults(func=_cmd_plan)


def _parse_only(items) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for it in items or ():
        if "=" in it:
            k, v = it.split("=", 1)
            out[k.strip()] = parse_values(k.strip(), v)
        else:
            out[it.strip()] = None
    return out


def _why(plan, best, objective) -> str:
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


def _plan_table(doc) -> str:
    per_tok = doc.get("per_token")
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
    rows = []
    best = plans[0]
    for p in plans:
        par, tr, rep = p["parallelism"], p["training"], p["report"]
        sched = par["schedule"] + (f"(v={par['virtual_stages']})" if par.get("virtual_stages", 1) > 1 else "")
        dp = par["dp"] if not isinstance(par["dp"], list) else "/".join(str(d) for d in par["dp"])
        cells = [
            p["rank"],
            par["tp"],
            par["pp"],
            dp,
            par["cp"],
            par["ep"],
            "y" if par["sequence_parallel"] else "n",
            tr["micro_batch"],
            sched,
            tr["recompute"],
            par["sharding"],
        ]
        if multi:
            s = p.get("sync", {})
            cells += [
                "/".join(str(i["nodes"]) for i in p["islands"]),
                s.get("strategy", "") + (f"(H={s['inner_steps']})" if "inner_steps" in s else ""),
            ]
        if per_tok:
            wall = fmt_time(p.get("time_per_token_s"))
            cost = (
                f"${p['cost_per_token_usd'] * 1e6:,.2f}" if p.get("cost_per_token_usd") is not None else "-"
            )
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
            _why(p, best, doc["objective"]),
        ]
        rows.append(cells)
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


def _cmd_plan(args) -> int:
    from .plan import DEFAULT_CHUNK, search
    from .progress import Progress

    _check_workers(args)
    prog = Progress("plan ", enabled=False if args.json else None)
    try:
        doc = search(
            args.file,
            overrides=args.set or (),
            objective=args.objective,
            top=args.top,
            max_gpus=args.max_gpus,
            budget_usd=args.budget_usd,
            deadline_days=args.deadline_days,
            only=_parse_only(args.only),
            chunk_size=args.chunk or DEFAULT_CHUNK,
            workers=args.workers,
            dask=args.dask,
            progress=prog,
        )
    finally:
        prog.close()
    if args.json:
        _dump(doc)
    else:
        print(_plan_table(doc))
    if doc.get("interrupted"):
        print("shardmeter: interrupted: the plans above are the best found so far", file=sys.stderr)
        return 130
    return 0
