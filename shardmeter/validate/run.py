"""``shardmeter validate``: predictions against published measurements.

Every ``[measured]`` field of every scenario is compared with the prediction;
the relative error is ``(predicted - measured) / measured``. The summary gives
the mean absolute percentage error per field, per folder (source group) and
overall. A scenario that is invalid or infeasible is a failed case: listed,
counted, never skipped.

Memory (SCENARIO.md, "Validation"): ``[measured] memory_per_gpu_gb`` is a peak of allocated
tensors (PyTorch's ``max_memory_allocated``) and ``[measured] memory_reserved_gb`` what the
caching allocator reserved (``max_memory_reserved``); each is compared with the report field of
the same name like any field (a case with its relative error). Both are PyTorch's counters, which
leave out what the process holds outside its allocator (the CUDA context and NCCL's buffers, the
report's ``memory_outside_allocator_gb``), so the predictions they meet are taken without it
(:func:`_torch_view`). A reserved peak also bounds the
allocated prediction: it is a ``memory_bounds`` entry with its slack (measured reserved less
predicted ``memory_per_gpu_gb``, GB), and a predicted allocated peak above it is a failed case.
``memory`` summarises them: per kind (allocated, reserved) the count, the mean absolute error and
the share within 10 %, and the count of bound violations. The memory fields are not in
``overall_mape`` and ``mape_by_group``, which summarise the speed fields (``mape`` has every
field), so a memory figure added to a run does not move its group's speed error.

Files are found once each (a file named twice, or named and inside a folder named, is one
file: compared by real path). A folder's ``*.toml`` entry that is a FIFO, a device or a socket
is a failed case and is never opened (opening a FIFO waits for a writer); such a path named
on the command line is an error. A file without ``[measured]`` values is not a case: one named
on the command line is listed under ``no_measured``; when no file has any (and none failed)
there is nothing to compare, an error (exit code 2).
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Iterable
from importlib import resources

from shardmeter.errors import ShardMeterError

__all__ = ["validate_paths", "collect_files", "bundled_validation_dir", "add_parser", "RESERVED_FIELD"]

#: The ``[measured]`` key of an allocator's reserved peak: compared with the report's field of
#: that name, and a bound on ``memory_per_gpu_gb``.
RESERVED_FIELD = "memory_reserved_gb"
#: The prediction a reserved peak bounds (and an allocated peak is compared with).
MEMORY_FIELD = "memory_per_gpu_gb"
#: Fields summarised under ``memory``, not in the overall and per-group speed errors.
MEMORY_FIELDS = (MEMORY_FIELD, RESERVED_FIELD)
#: The share of memory cases within this relative error is reported (issue 22's bar).
WITHIN = 0.10


def bundled_validation_dir() -> str:
    """The published runs shipped with ShardMeter (``shardmeter/validation_data/published``)."""
    return str(resources.files("shardmeter.validation_data").joinpath("published"))


#: What a path that is not a regular file is, for messages.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _special(path: str) -> str:
    """What ``path`` is when it is something other than a regular file or a folder (``""`` for
    those, and for a path that cannot be stat()ed: reading it reports why). Never opens it."""
    try:
        mode = os.stat(path).st_mode  # through symlinks: a link to a FIFO is a FIFO
    except (OSError, ValueError):
        return ""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return ""
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def _collect(paths: Iterable[str]) -> tuple[list[str], dict[str, str], set[str]]:
    """The scenario files of ``paths`` (files given, and every ``*.toml`` under folders given),
    each once (by real path, first spelling kept), sorted; the folder entries that cannot be
    read as scenario files (``{path: why}``: FIFOs, devices and sockets, never opened, and
    folders that cannot be listed; each a failed case); the files given explicitly. A missing
    path, or one given explicitly that is a FIFO, a device or a socket, is a
    :class:`ShardMeterError`."""
    found: dict[str, str] = {}  # real path -> path as found
    explicit: set[str] = set()
    special: dict[str, str] = {}

    def add(path: str, given: bool) -> None:
        key = os.path.normcase(os.path.realpath(path))
        found.setdefault(key, path)
        if given:
            explicit.add(found[key])

    def unreadable(exc: OSError) -> None:
        special.setdefault(str(exc.filename), f"cannot read the folder: {exc.strerror or exc}")

    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p, onerror=unreadable):
                dirs.sort()
                for f in sorted(files):
                    if f.endswith(".toml"):
                        path = os.path.join(root, f)
                        what = _special(path)
                        if what:
                            special.setdefault(path, f"is {what}, not a scenario file (not read)")
                        else:
                            add(path, False)
        elif os.path.exists(p):
            what = _special(p)
            if what:
                raise ShardMeterError(f"{p}: is {what}, not a scenario file")
            add(p, True)
        else:
            raise ShardMeterError(f"{p}: no such file or directory")
    return sorted(found.values()), special, explicit


def collect_files(paths: Iterable[str]) -> list[str]:
    """The scenario files of ``paths``: files given, and every ``*.toml`` under folders given
    (not those that are FIFOs, devices or sockets), each once, sorted."""
    return _collect(paths)[0]


def _group(path: str) -> str:
    return os.path.basename(os.path.dirname(os.path.abspath(path)))


def validate_paths(paths: Iterable[str], *, estimator=None) -> dict:
    """Validate scenario files / folders. Returns the ``--json`` document."""
    from shardmeter.errors import ScenarioError
    from shardmeter.estimator import Estimator
    from shardmeter.validate.coverage import case_band, case_coverage, held_out_coverage

    est = estimator or Estimator()
    files, special, explicit = _collect(paths)
    if not files and not special:
        raise ShardMeterError("no scenario files found")
    cases, failures, bounds = [], [], []
    unmeasured: list[str] = []  # files that load but have no [measured] values

    def fail(f: str, error: str) -> None:
        failures.append({"file": f, "group": _group(f), "error": error})

    for f, why in sorted(special.items()):
        fail(f, why)
    for f in files:
        try:
            sc = est.load(f)
            if not sc.measured:  # not a case, but a broken file is reported whichever stage finds the fault
                est.inputs(sc)
                unmeasured.append(f)
                continue
            rep = est.estimate(sc)
        except ScenarioError as exc:
            fail(f, str(exc))
            continue
        if not rep.feasible:
            fail(f, "infeasible: " + "; ".join(rep.reasons))
            continue
        d = _torch_view(rep.to_dict())
        for field, measured in sc.measured.items():
            if field == RESERVED_FIELD:
                bound = _reserved_bound(f, measured, d.get(MEMORY_FIELD))
                bounds.append(bound)
                if not bound["within"]:
                    fail(f, _over_reserved(bound))
            pred = d.get(field)
            if not isinstance(pred, (int, float)) or isinstance(pred, bool):
                fail(f, f"no predicted value for '{field}'")
                continue
            err = (pred - measured) / measured if measured else float("nan")
            cases.append(
                {
                    "file": f,
                    "group": _group(f),
                    "field": field,
                    "measured": measured,
                    "predicted": float(pred),
                    "error": err,
                    **case_band(field, measured, float(pred), d.get("confidence") or {}),
                }
            )
    if not cases and not failures and not bounds:
        raise ShardMeterError(_nothing_to_compare(unmeasured))
    return {
        "cases": cases,
        "failures": failures,
        **_mapes(cases),
        "n_files": len(files) + len(special),
        "n_failed": len(failures),
        "memory_bounds": bounds,
        "memory": _memory_summary(cases, bounds),
        # files given by name (not found in a folder) that have nothing to compare
        "no_measured": [f for f in unmeasured if f in explicit],
        # the confidence band's coverage: these cases, and the bundled runs held out by group
        "band_coverage": case_coverage(cases),
        "band_coverage_held_out": held_out_coverage(),
    }


def _torch_view(d: dict) -> dict:
    """The report ``d`` with its memory figures as PyTorch's counters see them: less
    ``memory_outside_allocator_gb`` (the CUDA context and NCCL's buffers, which
    ``max_memory_allocated`` and ``max_memory_reserved`` leave out)."""
    outside = d.get("memory_outside_allocator_gb")
    if not isinstance(outside, (int, float)) or isinstance(outside, bool):
        return d
    out = dict(d)
    for field in MEMORY_FIELDS:
        v = d.get(field)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[field] = float(v) - float(outside)
    return out


def _mapes(cases: list[dict]) -> dict:
    """The mean absolute relative error per field (``mape``), per source group
    (``mape_by_group``) and over every case (``overall_mape``; None without cases); the memory
    fields count in ``mape`` only (their own summary is ``memory``)."""
    by_field: dict[str, list[float]] = {}
    by_group: dict[str, list[float]] = {}
    for c in cases:
        err_abs = abs(float(c["error"]))
        by_field.setdefault(str(c["field"]), []).append(err_abs)
        if c["field"] not in MEMORY_FIELDS:  # a group's error is its speed error
            by_group.setdefault(str(c["group"]), []).append(err_abs)
    all_err = [abs(float(c["error"])) for c in cases if c["field"] not in MEMORY_FIELDS]
    return {
        "mape": {k: sum(v) / len(v) for k, v in by_field.items()},
        "mape_by_group": {k: sum(v) / len(v) for k, v in sorted(by_group.items())},
        "overall_mape": sum(all_err) / len(all_err) if all_err else None,
    }


def _reserved_bound(f: str, measured: float, pred) -> dict:
    """One reserved-memory bound: the predicted need against the reserved peak, its slack
    (reserved less predicted, GB; negative when the prediction exceeds the bound)."""
    p = float(pred) if isinstance(pred, (int, float)) and not isinstance(pred, bool) else float("nan")
    slack = measured - p
    return {
        "file": f,
        "group": _group(f),
        "field": RESERVED_FIELD,
        "measured": measured,
        "predicted": p,
        "slack_gb": slack,
        "within": bool(slack >= 0.0),  # nan (no prediction) is not within
    }


def _over_reserved(b: dict) -> str:
    """The failure of a violated reserved bound."""
    if b["predicted"] != b["predicted"]:
        return f"no predicted value for '{MEMORY_FIELD}' to check against '{RESERVED_FIELD}'"
    return (
        f"predicted {MEMORY_FIELD} {b['predicted']:.1f} GB exceeds the measured {RESERVED_FIELD} "
        f"{b['measured']:.1f} GB (what the allocator reserved bounds the need)"
    )


def _memory_summary(cases: list[dict], bounds: list[dict]) -> dict:
    """Memory at a glance: allocated and reserved peaks compared (per kind: their count, mean
    absolute error and the share within :data:`WITHIN`) and reserved bounds checked (their
    count, violations, and the smallest slack)."""
    out: dict = {}
    for kind, field in (("allocated", MEMORY_FIELD), ("reserved", RESERVED_FIELD)):
        errs = [abs(float(c["error"])) for c in cases if c["field"] == field]
        out[f"{kind}_cases"] = len(errs)
        out[f"{kind}_mape"] = sum(errs) / len(errs) if errs else None
        out[f"{kind}_within_10pct"] = sum(e <= WITHIN for e in errs) / len(errs) if errs else None
    return {
        **out,
        "reserved_bounds": len(bounds),
        "reserved_violations": sum(1 for b in bounds if not b["within"]),
        "min_slack_gb": min((b["slack_gb"] for b in bounds if b["within"]), default=None),
    }


def _nothing_to_compare(unmeasured: list[str]) -> str:
    """The error when no file has a ``[measured]`` value (every file loaded, none failed)."""
    if len(unmeasured) == 1:
        where = unmeasured[0]
    else:
        shown = ", ".join(unmeasured[:3]) + (", ..." if len(unmeasured) > 3 else "")
        where = f"any of the {len(unmeasured)} files ({shown})"
    return (
        f"no [measured] values in {where}: nothing to compare (shardmeter estimate reports "
        "a scenario without measurements)"
    )


def _run(args) -> int:
    from shardmeter.render.json import dump_json
    from shardmeter.tables import render_table

    paths = args.paths or [bundled_validation_dir()]
    res = validate_paths(paths)
    if args.json:
        print(dump_json(res))
        return 0
    rows = [
        (
            _shown(c["file"]),
            c["field"],
            f"{c['measured']:.4g}",
            f"{c['predicted']:.4g}",
            f"{c['error']:+.1%}",
        )
        for c in res["cases"]
    ]
    rows += [
        (
            _shown(b["file"]),
            b["field"],
            f"<= {b['measured']:.4g}",
            f"{b['predicted']:.4g}",
            f"slack {b['slack_gb']:+.1f} GB" if b["within"] else "OVER",
        )
        for b in res["memory_bounds"]
    ]
    print(render_table(("case", "field", "measured", "predicted", "error"), rows))
    if res["failures"]:
        print()
        print(f"FAILED ({len(res['failures'])}):")
        for f in res["failures"]:
            print(f"  {_shown(f['file'])}: {f['error']}")
    if res["no_measured"]:
        print()
        print(f"NOT CASES ({len(res['no_measured'])}):")
        for f in res["no_measured"]:
            print(f"  {_shown(f)}: no [measured] values")
    print()
    print(render_table(("group", "MAPE"), [(g, f"{v:.1%}") for g, v in res["mape_by_group"].items()]))
    print()
    print(render_table(("field", "MAPE"), [(k, f"{v:.1%}") for k, v in res["mape"].items()]))
    mem = res["memory"]
    if mem["allocated_cases"] or mem["reserved_cases"] or mem["reserved_bounds"]:
        print("memory: " + _memory_line(mem))
    print(
        _coverage_line("band coverage of these cases (each against its report's band)", res["band_coverage"])
    )
    print(
        _coverage_line(
            "band coverage held out (each bundled run predicted by the fit without its group, "
            "against the band of a table without its group)",
            res["band_coverage_held_out"],
        )
    )
    om = res["overall_mape"]
    print(
        f"overall MAPE: {om:.2%} over {_speed_cases(res)} comparisons (memory apart), "
        f"{res['n_failed']} failed cases"
        if om is not None
        else f"overall MAPE: n/a, {res['n_failed']} failed cases"
    )
    return 0


def _speed_cases(res: dict) -> int:
    """The comparisons ``overall_mape`` averages (every field but the memory ones)."""
    return sum(1 for c in res["cases"] if c["field"] not in MEMORY_FIELDS)


def _memory_line(mem: dict) -> str:
    """The summary's memory line: per kind its count, MAPE and share within 10 %, then the
    reserved bounds."""
    parts = []
    for kind in ("allocated", "reserved"):
        n, mape, share = mem[f"{kind}_cases"], mem[f"{kind}_mape"], mem[f"{kind}_within_10pct"]
        text = f"{n} {kind} peaks"
        if mape is not None:
            text += f", MAPE {mape:.1%}, {share:.0%} within {WITHIN:.0%}"
        parts.append(text)
    bounds = f"{mem['reserved_bounds']} reserved bounds, {mem['reserved_violations']} exceeded"
    return "; ".join([*parts, bounds])


def _coverage_line(what: str, c: dict) -> str:
    """One coverage summary: the share of runs inside their 80 % band and the median band."""
    if not c["runs"]:
        return f"{what}: no case with a band"
    return (
        f"{what}: {c['inside']} of {c['runs']} inside ({c['coverage']:.1%}; nominal 80 %), "
        f"median band {c['median_band_pct']:.1f}%"
    )


def _shown(path: str) -> str:
    """A file's name for the table: its base name, control characters escaped (a name with a
    newline must not forge a line of the report)."""
    name = os.path.basename(path)
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in name)


def add_parser(sub) -> None:
    v = sub.add_parser(
        "validate",
        help="compare predictions with published measurements",
        description="Predict every scenario that carries [measured] (files or folders; none: the "
        "bundled published runs) and print the error of each measured field, with the mean "
        "absolute percentage error per field, per folder and overall.",
        epilog="examples:\n  shardmeter validate\n  shardmeter validate my_runs/ --json\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="scenario files or folders with [measured] (default: the bundled published runs)",
    )
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=_run)
