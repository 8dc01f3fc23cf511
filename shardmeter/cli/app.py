"""The ``shardmeter`` command line.

Every error a user can cause ends as one line on stderr and exit code 2;
never a traceback. ``--json`` prints exactly one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from shardmeter.errors import ShardMeterError
from shardmeter.render.json import dump_json

__all__ = ["main", "build_parser", "COMMANDS", "OPTIONAL_COMMANDS", "SUMMARIES", "dump_json", "one_line"]

#: Sub-command name -> module:function that adds its arguments and runs it.
COMMANDS: dict[str, str] = {}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        print(f"shardmeter: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _cmd_estimate(args) -> int:
    from shardmeter.estimator import Estimator

    est = Estimator()
    sc = est.load(args.file, overrides=args.set or ())
    if sc.stage_groups:
        return _estimate_pipeline(est, sc, args)
    if args.plot is not None:
        _check_plot(args)
    report = est.estimate(sc)
    if args.plot is not None:
        _plot(report, args.plot)
    if args.json:
        print(dump_json(report.to_dict()))
    else:
        print(report)
        if args.plot is not None:
            print(f"wrote {args.plot}")
    return 0


def _estimate_pipeline(est, sc, args) -> int:
    """``estimate`` of a ``[[stage_group]]`` scenario: the heterogeneous pipeline's report."""
    from shardmeter.hetero import estimate_pipeline

    if args.plot is not None:
        raise ShardMeterError("--plot does not draw a pipeline of stage groups yet; use --json")
    report = estimate_pipeline(est, sc)
    print(dump_json(report.to_dict()) if args.json else report)
    return 0


#: What a missing matplotlib is told (the extra that brings it).
PLOT_EXTRA = "--plot needs matplotlib: pip install 'shardmeter[plot]'"


def _check_plot(args) -> None:
    """Before the estimate: matplotlib is importable and ``--plot`` may be written (not a special
    file, not the scenario file), so the error comes first and alone."""
    import importlib.util

    from shardmeter.io import check_output

    if importlib.util.find_spec("matplotlib") is None:
        raise ShardMeterError(PLOT_EXTRA)
    check_output(args.plot, label="--plot", inputs=[args.file])


def _plot(report, path: str) -> None:
    """``shardmeter.render.plots.plot_report``, imported only when ``--plot`` is given."""
    try:
        from shardmeter.render.plots import plot_report
    except ImportError as exc:
        if "matplotlib" in str(exc):
            raise ShardMeterError(PLOT_EXTRA) from None
        raise ShardMeterError(f"--plot is not available in this installation ({exc})") from None
    plot_report(report, path, label="--plot")


def _cmd_plugins(args) -> int:
    from shardmeter.registry.manager import get_registry

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
        from shardmeter.tables import render_table

        print(
            render_table(
                ("kind", "name", "plugin", "distribution"),
                [(r["kind"], r["name"], r["plugin"], r["distribution"]) for r in rows],
            )
        )
    return 0


MAIN_EPILOG = """\
start here:
  shardmeter init --preset llama3-8b --gpu h100-sxm --gpus 16 -o run.toml
  shardmeter estimate run.toml
  shardmeter import torchtitan llama3_8b.toml --gpu h100-sxm --gpus 64 -o run.toml

FILE may be - (standard input) for estimate, sweep, plan and sensitivity.

environment:
  SHARDMETER_DEBUG=1   show the full traceback instead of the one-line error
shell completion:
  shardmeter completion bash|zsh|tcsh   (how to install it: docs/cli.md)
"""

ESTIMATE_EPILOG = """\
examples:
  shardmeter estimate examples/gpt3-175b-a100.toml
  shardmeter estimate run.toml --set parallelism.tp=4 --set training.micro_batch=2 --json
  shardmeter estimate run.toml --plot run.png
  shardmeter init --preset llama3-8b | shardmeter estimate -
"""

PLUGINS_EPILOG = """\
examples:
  shardmeter plugins
  shardmeter plugins --json
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    """Help with the description wrapped and the epilog's example lines kept as written."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=30)


def _add_estimate(sub) -> None:
    from shardmeter.io import FILE

    e = sub.add_parser(
        "estimate",
        help="predict one scenario",
        description="Predict the step time, throughput, MFU, memory per GPU and cost of the "
        "scenario in FILE, with the breakdown of each step and what bounds it.",
        epilog=ESTIMATE_EPILOG,
        formatter_class=_formatter,
    )
    e.add_argument("file", help="scenario TOML file, or - to read it from standard input").complete = FILE
    e.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario key (repeatable)")
    e.add_argument("--json", action="store_true", help="print the report as JSON")
    e.add_argument(
        "--plot",
        metavar="OUT.png",
        help="also draw the step breakdown and the memory per GPU (PNG or SVG; needs shardmeter[plot])",
    )
    e.set_defaults(func=_cmd_estimate)


def _add_plugins(sub) -> None:
    pl = sub.add_parser(
        "plugins",
        help="list every registered part and its provider",
        description="List every registered GPU, link, cost source and strategy with the plugin "
        "and distribution that provides it (the bundled ones included).",
        epilog=PLUGINS_EPILOG,
        formatter_class=_formatter,
    )
    pl.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    pl.set_defaults(func=_cmd_plugins)


#: Where each sub-command goes in the command list: first contact, prediction, exploration,
#: checks, then the tools around them (a command this list lacks comes last).
ORDER = (
    "init",
    "import",
    "estimate",
    "sweep",
    "plan",
    "sensitivity",
    "report",
    "validate",
    "calibrate",
    "plugins",
    "completion",
)


#: Each sub-command's line in ``shardmeter --help``: what :func:`build_parser` shows for the
#: commands it does not build (tests/test_first_contact.py holds each to its parser's own help).
SUMMARIES = {
    "init": "write a commented starter scenario (a preset or a config.json, on your GPUs)",
    "import": "write a scenario from a torchtitan, Megatron-LM/Bridge/NeMo or Hugging Face config",
    "estimate": "predict one scenario",
    "sweep": "evaluate a grid of scenario variants (--vary), with scaling analysis",
    "plan": "search every layout for the fastest, cheapest or Pareto-best plans",
    "sensitivity": "rank inputs (GPU, memory, links, price) by the throughput a small change of each buys",
    "report": "write one self-contained HTML page of an estimate (charts, layout, validation)",
    "validate": "compare predictions with published measurements",
    "calibrate": "fit link and GPU efficiencies to nccl-tests logs, GEMM timings and measured steps",
    "plugins": "list every registered part and its provider",
    "completion": "print the shell completion script (bash, zsh, tcsh)",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command``, that sub-command's parser in full and every other
    one by its line of :data:`SUMMARIES` alone, so that ``shardmeter --help`` or one command
    imports only what it runs (no numpy, no other command's module)."""
    p = _Parser(
        prog="shardmeter",
        description="Analytical performance model for distributed LLM training.",
        epilog=MAIN_EPILOG,
        formatter_class=_formatter,
    )
    from shardmeter import __version__

    p.add_argument("--version", action="version", version=f"shardmeter {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    import importlib

    def lazy(target: str) -> Callable[[Any], None]:
        mod_name, fn = target.split(":")
        return lambda sub: getattr(importlib.import_module(mod_name), fn)(sub)

    adders: dict[str, Callable[[Any], None]] = {"estimate": _add_estimate, "plugins": _add_plugins}
    for name, target in COMMANDS.items():
        adders.setdefault(name, lazy(target))
    rank = {n: i for i, n in enumerate(ORDER)}
    for name in sorted(adders, key=lambda n: rank.get(n, len(ORDER))):
        if command is not None and name != command and name in SUMMARIES:
            sub.add_parser(name, help=SUMMARIES[name])
            continue
        adders[name](sub)
    return p


def _command_in(argv: Sequence[str]) -> str:
    """The sub-command ``argv`` names: its first word that is not an option ('' when none)."""
    return next((a for a in argv if not a.startswith("-")), "")


#: Commands that live in their own modules: name -> module:function adding its parser.
OPTIONAL_COMMANDS = (
    ("validate", "shardmeter.validate.run:add_parser"),
    ("sweep", "shardmeter.explore.cli:add_sweep_parser"),
    ("plan", "shardmeter.explore.cli:add_plan_parser"),
    ("sensitivity", "shardmeter.explore.cli:add_sensitivity_parser"),
    ("init", "shardmeter.importers.starter:add_init_parser"),
    ("import", "shardmeter.importers.cli:add_import_parser"),
    ("report", "shardmeter.cli.report_page:add_report_parser"),
    ("calibrate", "shardmeter.calibrate.cli:add_calibrate_parser"),
    ("completion", "shardmeter.cli.completion:add_completion_parser"),
)


def _register_optional_commands() -> None:
    """Register each of :data:`OPTIONAL_COMMANDS` whose module exists (a missing module, or a
    missing package above it, is skipped: ``find_spec`` raises for the latter)."""
    for name, target in OPTIONAL_COMMANDS:
        if _module_exists(target.split(":")[0]):
            COMMANDS.setdefault(name, target)


def _module_exists(mod: str) -> bool:
    """Whether module ``mod`` of this package can be found, without importing it or the
    packages above it (``importlib.util.find_spec`` imports those: every command's package)."""
    import importlib.util
    from importlib.machinery import PathFinder

    names = mod.split(".")
    top = importlib.util.find_spec(names[0])  # a top-level name: nothing is imported
    path: Any = top.submodule_search_locations if top is not None else None
    if path is None:
        return top is not None and len(names) == 1
    for i in range(1, len(names)):
        spec = PathFinder.find_spec(".".join(names[: i + 1]), path)
        if spec is None:
            return False
        path = spec.submodule_search_locations
        if path is None and i < len(names) - 1:  # a module where a package was meant
            return False
    return True


def one_line(msg, limit: int = 380) -> str:
    """``msg`` as one short line: whitespace runs become one space, a run of more than 160
    characters without a space (a pasted value, a long key path) is shortened in its middle,
    and the whole is cut at ``limit`` characters."""
    text = " ".join(str(msg).split())
    text = re.sub(r"\S{161,}", lambda m: f"{m.group(0)[:100]}...{m.group(0)[-40:]}", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    _register_optional_commands()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_in(argv))
    if not argv:  # bare ``shardmeter``: what it can do, not an error
        parser.print_help()
        return 0
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
