"""What the ``sweep``, ``plan`` and ``sensitivity`` sub-commands run (their arguments are
defined in :mod:`.cli`): each calls the Python API and prints a table, or one JSON
document with ``--json``."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

from shardmeter.errors import ShardMeterError
from shardmeter.explore.execution.progress import Progress, sweep_progress
from shardmeter.explore.formats.plan_table import plan_table
from shardmeter.explore.formats.plot import plot_sweep, require_matplotlib
from shardmeter.explore.formats.sweep_csv import read_resume, write_csv
from shardmeter.explore.formats.sweep_table import sweep_table
from shardmeter.explore.search.scaling import analyse
from shardmeter.explore.search.values import parse_values, parse_vary
from shardmeter.io import check_output
from shardmeter.render.json import dump_json
from shardmeter.tables import fmt_time, render_table

__all__ = ["cmd_sweep", "cmd_plan", "cmd_sensitivity", "sensitivity_table", "check_outputs", "OUTPUT_OPTIONS"]


def _check_workers(args: argparse.Namespace) -> None:
    if getattr(args, "workers", None) is not None and args.workers < 1:
        raise ShardMeterError("--workers must be >= 1")


def _dump(obj: Any) -> None:
    print(dump_json(obj))


#: The options of ``sweep``, ``plan`` and ``sensitivity`` that name a file they write.
OUTPUT_OPTIONS = (("--csv", "csv"), ("--plot", "plot"))


def check_outputs(args: argparse.Namespace) -> None:
    """Before any work: every output path of ``args`` can be written (not a device, a FIFO, a
    socket or a folder; its folder exists and takes a file; see :func:`shardmeter.io.check_output`),
    is not the scenario file (through a symlink or a hard link too) and is not another
    output's file; else a one-line :class:`ShardMeterError` (exit code 2)."""
    seen: dict[str, str] = {}
    for label, attr in OUTPUT_OPTIONS:
        path = getattr(args, attr, None)
        if not path:
            continue
        target = check_output(path, label=label, inputs=[args.file])
        key = os.path.normcase(target)
        if key in seen:
            raise ShardMeterError(
                f"{label} {path}: is also the {seen[key]} file; give each output its own file"
            )
        seen[key] = label


def _interrupted(csv: str, saved: int | None, existed: bool, resumed: int) -> str:
    """What an interrupted ``sweep --csv`` left in ``csv`` (``saved``: the rows this run wrote
    there, ``None`` before its first save)."""
    if saved is not None:
        return f"shardmeter: interrupted; the {saved} rows done so far are in {csv}: rerun with --resume"
    if not existed:
        return f"shardmeter: interrupted before the first rows were saved; {csv} was not written"
    if resumed:
        return f"shardmeter: interrupted before new rows were saved; {csv} is unchanged ({resumed} rows)"
    return f"shardmeter: interrupted before the first rows were saved; {csv} is unchanged"


def cmd_sweep(args: argparse.Namespace) -> int:
    """``shardmeter sweep``: evaluate the ``--vary`` grid, with ``--csv``, ``--resume``, ``--plot``."""
    # deferred: the sweep loads the model, reports and executors (~40 ms), and every command
    # line imports this module to build its parser
    from shardmeter.explore.search.sweep import run_sweep

    _check_workers(args)
    vary = [parse_vary(v) for v in args.vary]
    keys = [k for k, _ in vary]
    if args.resume and not args.csv:
        raise ShardMeterError("--resume needs --csv OUT (the file whose rows are kept)")
    check_outputs(args)
    if args.plot:
        require_matplotlib()  # before the sweep, not after its work is done
    existed = bool(args.csv) and os.path.lexists(args.csv)
    skip = read_resume(args.csv, keys) if args.resume else {}
    saved: list[int] = []  # rows in args.csv written by this run, after each save
    total = math.prod(max(1, len(v)) for _, v in vary)

    def save(rows: list[Any]) -> None:
        if len(rows) < total:  # the last chunk's rows are written once, after the sweep
            write_csv(args.csv, keys, rows, analyse(keys, rows), label="--csv")
            saved.append(len(rows))

    bar = sweep_progress(enabled=not args.json and sys.stderr.isatty())
    try:
        with bar:
            res = run_sweep(
                args.file,
                vary,
                overrides=args.set or (),
                skip=skip,
                workers=args.workers,
                dask=args.dask,
                on_progress=save if args.csv else None,
                progress=bar.update,
            )
    except KeyboardInterrupt:
        if args.csv:
            print(_interrupted(args.csv, saved[-1] if saved else None, existed, len(skip)), file=sys.stderr)
        raise
    if args.csv:
        write_csv(args.csv, keys, res.rows, res.analysis, label="--csv")
    if args.plot:
        title = f"{os.path.basename(args.file)}: sweep over {res.analysis.get('x')}"
        plot_sweep(res, args.plot, title=title, label="--plot")
    if args.json:
        _dump(res.to_dict())
    else:
        print(sweep_table(res))
        if args.csv:
            print(f"wrote {args.csv}")
        if args.plot:
            print(f"wrote {args.plot}")
    return 0


def cmd_sensitivity(args: argparse.Namespace) -> int:
    """``shardmeter sensitivity``: rank the inputs by the throughput ``--step`` more of each buys."""
    # deferred: it loads the model and reports (~20 ms), and every command line imports this
    # module to build its parser
    from shardmeter.explore.search.sensitivity import STEP, sensitivity

    check_outputs(args)  # none today; any output option added later is checked the same way
    doc = sensitivity(args.file, overrides=args.set or (), step=args.step if args.step is not None else STEP)
    if args.json:
        _dump(doc)
        return 0
    print(sensitivity_table(doc))
    print()
    for r in doc["resources"][:3]:
        print(r["summary"])
    return 0


def _signed(x: float | None, digits: int, unit: str = "") -> str:
    return f"{x:+.{digits}f}{unit}" if x is not None else "-"


def sensitivity_table(doc: dict[str, Any]) -> str:
    """The text table of a ``sensitivity`` document (an infeasible scenario: its reasons first,
    then which changes make it feasible)."""
    head = []
    if not doc["feasible"]:
        head = ["INFEASIBLE plan:", *(f"  - {r}" for r in doc["reasons"]), ""]
        title = "ShardMeter sensitivity: which change makes the plan feasible"
    else:
        title = (
            f"ShardMeter sensitivity (step {fmt_time(doc['step_time_s'])}, {doc['regime']}, "
            f"bottleneck {doc['bottleneck']}, change {doc['change_pct']:g} %)"
        )
    rows = [
        (
            r["rank"],
            r["label"],
            r["change"],
            _signed(r["throughput_gain_pct"], 2, " %"),
            f"{r['elasticity']:.3f}" if r["elasticity"] is not None else "-",
            f"{r['cost_elasticity']:.3f}" if r["cost_elasticity"] is not None else "-",
            f"{r['memory_headroom_gb']:.1f} GB" if r["memory_headroom_gb"] is not None else "-",
            "yes" if r["feasible"] else "no",
        )
        for r in doc["resources"]
    ]
    headers = ("rank", "input", "change", "throughput", "elasticity", "cost elast.", "mem free", "feasible")
    return "\n".join([*head, render_table(headers, rows, title=title)])


def _parse_only(items: list[str] | None) -> dict[str, Any]:
    """``--only KEY=V1,V2`` (or ``--only KEY``: the scenario's value) items; a key given twice
    is an error rather than one of them silently winning."""
    out: dict[str, Any] = {}
    for it in items or ():
        key, has_values, text = (s.strip() for s in it.partition("="))
        if key in out:
            raise ShardMeterError(f"--only {key} is given twice: give its values once ({key}=A,B)")
        if not has_values:
            out[key] = None
        elif not text:
            raise ShardMeterError(f"--only {key}=: no values")
        else:
            try:
                out[key] = parse_values(key, text)
            except ShardMeterError as exc:  # the parser speaks of --vary, its first user
                raise ShardMeterError(str(exc).replace("--vary", "--only", 1)) from None
    return out


def cmd_plan(args: argparse.Namespace) -> int:
    """``shardmeter plan``: search the scenario's layouts; exit code 130 when interrupted."""
    # deferred: the planner loads the model, the space compiler and executors (~50 ms), and
    # every command line imports this module to build its parser
    from shardmeter.explore.search.plan import DEFAULT_CHUNK, search

    _check_workers(args)
    check_outputs(args)
    from shardmeter.estimator import Estimator

    est = Estimator()
    sc = est.load(args.file, overrides=args.set or ())
    if sc.stage_groups:
        return _plan_stage_groups(est, sc, args)
    if getattr(args, "plot", None):
        from shardmeter.explore.formats.plan_plot import check_plan_plot

        check_plan_plot(args.plot, label="--plot")  # its suffix and matplotlib, before the search
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
            layouts=getattr(args, "layouts", None),
        )
    finally:
        prog.close()
    _write_plan_outputs(args, doc)
    if args.json:
        _dump(doc)
    else:
        print(plan_table(doc))
        for opt in ("csv", "plot"):
            if getattr(args, opt, None):
                print(f"wrote {getattr(args, opt)}")
    if doc.get("interrupted"):
        print("shardmeter: interrupted: the plans above are the best found so far", file=sys.stderr)
        return 130
    return 0


def _plan_stage_groups(est: Any, sc: Any, args: argparse.Namespace) -> int:
    """``plan`` of a ``[[stage_group]]`` scenario: the heterogeneous pipelines, fastest first,
    and the per-island planner's best on the same islands beside them."""
    from shardmeter.explore.formats.stage_group_table import stage_group_table
    from shardmeter.explore.search.stage_group_plan import per_island_best, search_stage_groups

    for opt in ("csv", "plot", "only", "budget_usd", "deadline_days", "max_gpus", "layouts"):
        if getattr(args, opt, None):
            raise ShardMeterError(f"--{opt.replace('_', '-')} does not apply to a plan of stage groups yet")
    if args.objective != "time":
        raise ShardMeterError("a plan of stage groups ranks by time per step only (--objective time)")
    doc = search_stage_groups(est, sc, top=args.top)
    doc["per_island"] = per_island_best(est, sc)
    if args.json:
        _dump({**doc, "plans": [{k: v for k, v in p.items() if k != "groups"} for p in doc["plans"]]})
    else:
        print(stage_group_table(doc))
    return 0


def _write_plan_outputs(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """``plan --csv`` and ``--plot``: the returned plans (the best so far when interrupted)."""
    if getattr(args, "csv", None):
        from shardmeter.explore.formats.plan_csv import write_plan_csv

        write_plan_csv(args.csv, doc, label="--csv")
    if getattr(args, "plot", None):
        from shardmeter.explore.formats.plan_plot import plot_plan

        plot_plan(
            doc, args.plot, title=f"{os.path.basename(args.file)}: plan ({args.objective})", label="--plot"
        )
