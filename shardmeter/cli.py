"""The ``shardmeter`` command line.

Every error a user can cause ends as one line on stderr and exit code 2;
never a traceback. ``--json`` prints exactly one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Sequence

from .errors import ShardMeterError

__all__ = ["main", "build_parser", "COMMANDS"]

#: Sub-command name -> module:function that adds its arguments and runs it.
COMMANDS: dict[str, str] = {}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        print(f"shardmeter: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return _finite(o.item())
    if isinstance(o, np.ndarray):
        return _finite(o.tolist())
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dump_json(obj) -> str:
    """Strict JSON: non-finite floats (numpy's too) as null, never ``NaN`` or ``Infinity``."""
    return json.dumps(_finite(obj), default=_json_default, indent=2, allow_nan=False)


def _finite(o):
    if isinstance(o, float):  # numpy's float64 too
        return float(o) if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _cmd_estimate(args) -> int:
    from .estimator import Estimator

    report = Estimator().estimate(args.file, overrides=args.set or ())
    if args.json:
        print(dump_json(report.to_dict()))
    else:
        print(report)
    return 0


def _cmd_plugins(args) -> int:
    from .plugins_core import get_registry

    reg = get_registry()
    rows = []
    for kind in reg.kinds():
        for name, prov in reg.items(kind):
            rows.append(
                {"kind": kind, "name": name, "plugin": prov.plugin, "distribution": prov.distribution}
            )
    if args.json:
        print(dump_json({"parts": rows}))
    else:
        from .table import render_table

        print(
            render_table(
                ("kind", "name", "plugin", "distribution"),
                [(r["kind"], r["name"], r["plugin"], r["distribution"]) for r in rows],
            )
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="shardmeter", description="Analytical performance model for distributed LLM training.")
    from . import __version__

    p.add_argument("--version", action="version", version=f"shardmeter {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    e = sub.add_parser("estimate", help="predict one scenario")
    e.add_argument("file")
    e.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario key (repeatable)")
    e.add_argument("--json", action="store_true", help="print the report as JSON")
    e.set_defaults(func=_cmd_estimate)

    pl = sub.add_parser("plugins", help="list every registered part and its provider")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=_cmd_plugins)

    import importlib

    for target in COMMANDS.values():
        mod_name, fn = target.split(":")
        mod = importlib.import_module(mod_name)
        getattr(mod, fn)(sub)
    return p


def _register_optional_commands() -> None:
    """Commands that live in their own modules (validate, sweep, plan, sensitivity)."""
    import importlib.util

    for name, target in (
        ("validate", "shardmeter.validate:add_parser"),
        ("sweep", "shardmeter.explore.cli:add_sweep_parser"),
        ("plan", "shardmeter.explore.cli:add_plan_parser"),
        ("sensitivity", "shardmeter.explore.cli:add_sensitivity_parser"),
    ):
        mod = target.split(":")[0]
        if importlib.util.find_spec(mod) is not None:
            COMMANDS.setdefault(name, target)


def one_line(msg, limit: int = 380) -> str:
    """``msg`` as one short line: whitespace runs become one space, a run of more than 160
    characters without a space (a pasted value, a long key path) is shortened in its middle,
    and the whole is cut at ``limit`` characters."""
    text = " ".join(str(msg).split())
    text = re.sub(r"\S{161,}", lambda m: f"{m.group(0)[:100]}...{m.group(0)[-40:]}", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    _register_optional_commands()
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = os.environ.get("SHARDMETER_DEBUG")
    try:
        return int(args.func(args) or 0)
    except ShardMeterError as exc:
        if debug:
            raise
        print(f"shardmeter: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shardmeter: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # an output path that is a folder, a missing folder, a full disk
        if debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"shardmeter: error: {one_line(where + (exc.strerror or str(exc)))}", file=sys.stderr)
        return 2
    except (MemoryError, RecursionError) as exc:
        print(f"shardmeter: error: {type(exc).__name__}: input too large", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
