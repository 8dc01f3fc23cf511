"""Rerun the commands of docs/planning-questions.md and paste their output into the page.

Usage: python tools/refresh_doc_outputs.py [--check]

Each ```sh block followed by a ```text block is run from the repository root; every piece of
the text block (pieces are separated by ``...`` lines, which stand for lines left out) is
replaced by as many output lines, starting at the output line of the same shape (its figures
aside) as the piece's first line. ``tests/test_plan_output.py`` checks the figures; this writes
them after a model change moves them. ``--check`` only says whether the page is current.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "planning-questions.md"
FIGURE = re.compile(r"\$[\d,]+(?:\.\d+)?|\d[\d,]*(?:\.\d+)?(?:\s?(?:d|h|s|ms|%))?")
BLOCK = re.compile(r"(```sh\n(.*?)```\s*```text\n)(.*?)(```)", re.S)


def _shape(line: str) -> str:
    return re.sub(r"\s+", " ", FIGURE.sub("#", line)).strip()


def _run(command: str) -> list[str]:
    shell = re.sub(r"^shardmeter ", f"{sys.executable} -m shardmeter ", command.replace("\\\n", " "))
    shell = re.sub(r"\|\s*python ", f"| {sys.executable} ", shell)
    p = subprocess.run(["bash", "-o", "pipefail", "-c", shell], cwd=ROOT, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"`{command}` failed: {p.stderr[-800:]}")
    return p.stdout.splitlines()


def _refresh(command: str, shown: str) -> str:
    got = _run(command.strip())
    pieces, out, at = re.split(r"^\.\.\.\n", shown, flags=re.M), [], 0
    for piece in pieces:
        want = piece.rstrip("\n").splitlines()
        starts = [i for i in range(at, len(got)) if _shape(got[i]) == _shape(want[0])]
        if not starts:
            raise SystemExit(f"`{command.strip()}` no longer prints a line like {want[0]!r}")
        at = starts[0]
        out.append("\n".join(got[at : at + len(want)]) + "\n")
        at += len(want)
    return "...\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text = DOC.read_text(encoding="utf-8")
    new = BLOCK.sub(lambda m: m.group(1) + _refresh(m.group(2), m.group(3)) + m.group(4), text)
    if args.check:
        print("current" if new == text else "stale: run python tools/refresh_doc_outputs.py")
        return int(new != text)
    DOC.write_text(new, encoding="utf-8")
    print(f"{DOC.relative_to(ROOT)}: {'unchanged' if new == text else 'refreshed'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
