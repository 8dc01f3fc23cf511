"""``shardmeter validate``: predictions against published measurements.

Every ``[measured]`` field of every scenario is compared with the prediction;
the relative error is ``(predicted - measured) / measured``. The summary gives
the mean absolute percentage error per field, per folder (source group) and
overall. A scenario that is invalid or infeasible is a failed case: listed,
counted, never skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from importlib import resources

from .errors import ShardMeterError

__all__ = ["validate_paths", "collect_files", "bundled_validation_dir", "add_parser"]


def bundled_validation_dir() -> str:
    """The published runs shipped with ShardMeter (``shardmeter/validation_data/published``)."""
    return str(resources.files("shardmeter.validation_data").joinpath("published"))


def collect_files(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            for root, _dirs, files in os.walk(p):
                out.extend(os.path.join(root, f) for f in files if f.endswith(".toml"))
        elif os.path.exists(p):
            out.append(p)
        else:
            raise ShardMeterError(f"{p}: no such file or directory")
    return sorted(out)


def _group(path: str) -> str:
    return os.path.basename(os.path.dirname(os.path.abspath(path)))


def validate_paths(paths: Iterable[str], *, estimator=None) -> dict:
    """Validate scenario files / folders. Returns the ``--json`` document."""
    from .errors import ScenarioError
    from .estimator import Estimator

    est = estimator or Estimator()
    files = collect_files(paths)
    if not files:
        raise ShardMeterError("no scenario files found")
    cases, failures = [], []

    def fail(f: str, error: str) -> None:
        failures.append({"file": f, "group": _group(f), "error": error})

    for f in files:
        try:
            sc = est.load(f)
            if not sc.measured:  # not a case, but a broken file is reported whichever stage finds the fault
                est.inputs(sc)
                continue
            rep = est.estimate(sc)
        except ScenarioError as exc:
            fail(f, str(exc))
            continue
        if not rep.feasible:
            fail(f, "infeasible: " + "; ".join(rep.reasons))
            continue
        d = rep.to_dict()
        for field, measured in sc.measured.items():
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
                }
            )
    mape: dict[str, float] = {}
    by_field: dict[str, list[float]] = {}
    by_group: dict[str, list[float]] = {}
    for c in cases:
        err_abs = abs(float(c["error"]))
        by_field.setdefault(str(c["field"]), []).append(err_abs)
        by_group.setdefault(str(c["group"]), []).append(err_abs)
    for k, v in by_field.items():
        mape[k] = sum(v) / len(v)
    all_err = [abs(float(c["error"])) for c in cases]
    return {
        "cases": cases,
        "failures": failures,
        "mape": mape,
        "mape_by_group": {k: sum(v) / len(v) for k, v in sorted(by_group.items())},
        "overall_mape": sum(all_err) / len(all_err) if all_err else None,
        "n_files": len(files),
        "n_failed": len(failures),
    }


def _run(args) -> int:
    from .cli import dump_json
    from .table import render_table

    paths = args.paths or [bundled_validation_dir()]
    res = validate_paths(paths)
    if args.json:
        print(dump_json(res))
        return 0
    rows = [
        (
            os.path.basename(c["file"]),
            c["field"],
            f"{c['measured']:.4g}",
            f"{c['predicted']:.4g}",
            f"{c['error']:+.1%}",
        )
        for c in res["cases"]
    ]
    print(render_table(("case", "field", "measured", "predicted", "error"), rows))
    if res["failures"]:
        print()
        print(f"FAILED ({len(res['failures'])}):")
        for f in res["failures"]:
            print(f"  {os.path.basename(f['file'])}: {f['error']}")
    print()
    print(render_table(("group", "MAPE"), [(g, f"{v:.1%}") for g, v in res["mape_by_group"].items()]))
    print()
    print(render_table(("field", "MAPE"), [(k, f"{v:.1%}") for k, v in res["mape"].items()]))
    om = res["overall_mape"]
    print(
        f"overall MAPE: {om:.2%} over {len(res['cases'])} comparisons, {res['n_failed']} failed cases"
        if om is not None
        else f"overall MAPE: n/a, {res['n_failed']} failed cases"
    )
    return 0


def add_parser(sub) -> None:
    v = sub.add_parser("validate", help="compare predictions with published measurements")
    v.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="scenario files or folders with [measured] (default: the bundled published runs)",
    )
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=_run)
