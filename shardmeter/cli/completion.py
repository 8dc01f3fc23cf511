"""``shardmeter completion SHELL``: the shell completion script of the whole command line,
generated from its argparse parser by shtab (https://github.com/iterative/shtab), so it never
lags behind a new command or option. How to install it: docs/cli.md."""

from __future__ import annotations

import argparse

from shardmeter.errors import ShardMeterError
from shardmeter.io import FILE

__all__ = ["add_completion_parser", "completion_script", "SHELLS", "FILE"]

#: Shells the script is written for (the three shtab's own documentation supports fully).
SHELLS = ("bash", "zsh", "tcsh")


EPILOG = """\
examples:
  shardmeter completion bash > ~/.local/share/bash-completion/completions/shardmeter
  shardmeter completion zsh > ~/.zfunc/_shardmeter
  shardmeter completion tcsh > ~/.shardmeter.completion.csh
"""


def completion_script(shell: str, parser: argparse.ArgumentParser | None = None) -> str:
    """The completion script of ``parser`` (default: the whole ``shardmeter`` command line) for
    ``shell``."""
    if shell not in SHELLS:
        raise ShardMeterError(f"completion: unknown shell {shell!r}; choose one of {', '.join(SHELLS)}")
    try:
        import shtab
    except ImportError:  # pragma: no cover - a dependency
        raise ShardMeterError("completion needs shtab: pip install shtab") from None
    if parser is None:
        from shardmeter.cli.app import _register_optional_commands, build_parser

        _register_optional_commands()
        parser = build_parser()
    return shtab.complete(parser, shell=shell)


def _run(args) -> int:
    print(completion_script(args.shell), end="")
    return 0


def add_completion_parser(sub) -> None:
    c = sub.add_parser(
        "completion",
        help="print the shell completion script (bash, zsh, tcsh)",
        description="Print a completion script for SHELL on stdout: sub-commands, options and "
        "file names complete with TAB. Save it where the shell looks (see the examples and "
        "docs/cli.md), then open a new shell.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("shell", metavar="SHELL", choices=SHELLS, help="bash, zsh or tcsh")
    c.set_defaults(func=_run)
