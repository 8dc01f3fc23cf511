"""Running the command line in a test and reading its one-line errors (imported as a plain module:
pytest puts ``tests/`` on ``sys.path`` for the test files in it)."""

from __future__ import annotations

from shardmeter.cli.app import main


def run(capsys, *argv) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``shardmeter ARGV`` in-process (argparse exits too)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    """The one ``shardmeter: error: ...`` line of ``err`` (no traceback, nothing else)."""
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("shardmeter: error: ")
    return lines[0]
