"""``shardmeter report FILE --html OUT.html``: estimate, optionally validate, and write the page
that :func:`shardmeter.render.page.build_page` renders."""

from __future__ import annotations

import argparse
import sys

from shardmeter.errors import ShardMeterError
from shardmeter.render.page import build_page

__all__ = ["add_report_parser"]


def _run(args) -> int:
    from shardmeter.estimator import Estimator
    from shardmeter.io import atomic_write, check_output
    from shardmeter.validate.run import collect_files, validate_paths

    val_paths = list(args.validation or ())
    try:
        val_files = collect_files(val_paths) if val_paths else []
    except ShardMeterError as exc:
        raise ShardMeterError(f"--validation {exc}") from None
    check_output(args.html, label="--html", inputs=[args.file, *val_files])
    est = Estimator()
    sc = est.load(args.file, overrides=args.set or ())
    res = est.resolve(sc)
    report = est.estimate(sc)
    validation = None
    if val_paths:
        try:
            validation = validate_paths(val_paths, estimator=est)
        except ShardMeterError as exc:
            raise ShardMeterError(f"--validation: {exc}") from None
    page = build_page(report, res, source=args.file, validation=validation)
    with atomic_write(args.html, "w", label="--html") as fh:
        fh.write(page)
    print(f"wrote {args.html}")
    failed = (validation or {}).get("failures") or []
    if failed:  # the page lists them; say so where a script or a person running it looks too
        file, error = str(failed[0]["file"]), str(failed[0]["error"])
        first = error if error.startswith(file) else f"{file}: {error}"
        more = f" (and {len(failed) - 1} more cases)" if len(failed) > 1 else ""
        print(
            f"warning: {len(failed)} --validation case(s) failed, listed on the page: {first}{more}",
            file=sys.stderr,
        )
    return 0


def add_report_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="write one self-contained HTML page of an estimate (charts, layout, validation)",
        description="Estimate FILE and write one HTML page: the headline figures, the layout, the "
        "notes, the step breakdown and memory charts (inline SVG, no script or external file) and, "
        "with --validation, predictions against measurements.",
        epilog="examples:\n  shardmeter report examples/gpt3-175b-1536-a100.toml --html gpt3.html\n"
        "  shardmeter report examples/gpt3-175b-1536-a100.toml --html gpt3.html "
        "--validation shardmeter/validation_data/published/narayanan2021\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", help="scenario TOML file")
    p.add_argument(
        "--html", required=True, metavar="OUT.html", help="the page to write (never the scenario file)"
    )
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario key (repeatable)")
    p.add_argument(
        "--validation",
        action="append",
        metavar="PATH",
        help="scenario files or folders with [measured] to compare, as `shardmeter validate` takes (repeatable)",
    )
    p.set_defaults(func=_run)
