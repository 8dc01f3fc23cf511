"""Text tables for the CLI, laid out by rich (https://rich.readthedocs.io, ``rich.table``), and
the number formats their columns use.

Off a terminal (a pipe, a file, a test) a table is plain ASCII: a ``-`` rule under the header,
columns two spaces apart, never wrapped or truncated, so its text is stable. On a terminal the
rule is a box-drawing line. There is never colour, so the text can go to a file as it is.

One format per column: counts and rates with thousands separators (:func:`fmt_num`), a
column's durations in one unit with fixed decimals (:func:`fmt_times`), whole dollars
(:func:`fmt_usd`), percentages to one decimal (:func:`fmt_pct`), GB to one decimal
(:func:`fmt_gb`). Every formatter prints ``-`` for an unknown or non-finite number.
"""

from __future__ import annotations

import io
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, TypeGuard

__all__ = [
    "render_table",
    "fmt_time",
    "fmt_times",
    "fmt_num",
    "fmt_count",
    "fmt_usd",
    "fmt_pct",
    "fmt_gb",
    "safe_text",
    "SCI_ABOVE",
]

#: Cells that stand for "no number" and do not make a column textual.
_BLANK = ("", "-")


#: A table cell's length before it is shortened (only a cell from a hostile file is this long).
_CELL_LIMIT = 400


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    align_numbers: bool = True,
    terminal: bool | None = None,
) -> str:
    """``rows`` under ``headers`` as text (``title`` on the line above). With ``align_numbers``
    a column whose cells are all numbers (or ``-``) is right-aligned, header included.
    ``terminal`` (default: whether stdout is one, and ``TERM`` is not ``dumb``) draws the
    header rule with a box-drawing line instead of ``-``."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # every cell escaped (safe_text): names from a file (islands, offers, parts) reach a terminal
    cells = [["" if c is None else safe_text(c, limit=_CELL_LIMIT) for c in r] for r in rows]
    heads = [safe_text(h, limit=_CELL_LIMIT) for h in headers]
    if terminal is None:
        terminal = sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
    rule = box.SIMPLE_HEAD if terminal else _ascii_rule(box)
    table = Table(box=rule, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1), header_style="none")
    for i, h in enumerate(heads):
        col = [r[i] for r in cells if i < len(r)]
        numeric = align_numbers and any(c not in _BLANK for c in col)
        numeric = numeric and all(c in _BLANK or _numeric(c) for c in col)
        table.add_column(Text(h), justify="right" if numeric else "left", no_wrap=True)
    for r in cells:
        table.add_row(*(Text(c) for c in r[: len(heads)]))
    width = sum(max([len(h)] + [len(r[i]) for r in cells if i < len(r)]) + 2 for i, h in enumerate(heads))
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width + 8,
        color_system=None,
        force_terminal=False,
        highlight=False,
        markup=False,
        emoji=False,
        legacy_windows=False,
    )
    console.print(table)
    lines = [ln.rstrip() for ln in buf.getvalue().splitlines()]
    return "\n".join(([title] if title else []) + lines)


def _ascii_rule(box: Any) -> Any:
    """A rich box that draws only a ``-`` rule under the header (columns joined by spaces)."""
    return box.Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)


def _numeric(s: str) -> bool:
    t = s.replace(",", "").replace("%", "").replace("$", "").strip()
    for suf in (" s", " ms", " us", " GB", " h", " d"):
        if t.endswith(suf):
            t = t[: -len(suf)]
    try:
        float(t)
        return True
    except ValueError:
        return False


#: Above this magnitude a number is printed in scientific notation, never with all its digits
#: (a step time of 1e300 s is 300 digits in fixed notation).
SCI_ABOVE = 1e15


def _finite(x: Any) -> TypeGuard[float]:
    """Whether ``x`` is a number that can be printed (not None, nan or inf)."""
    try:
        return x is not None and math.isfinite(x)
    except (TypeError, OverflowError):
        return False


def fmt_time(s: float | None) -> str:
    """A duration in the unit that suits it (``us`` to ``d``); ``-`` when unknown or not finite,
    scientific days beyond 100 000 days."""
    if not _finite(s):
        return "-"
    a = abs(s)
    if a >= 86400 * 1e5:
        return f"{s / 86400:.3g} d"
    if a >= 86400 * 2:
        return f"{s / 86400:.1f} d"
    if a >= 7200:
        return f"{s / 3600:.1f} h"
    if a >= 1:
        return f"{s:.3f} s"
    if a >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


#: The units of :func:`fmt_times`: (from this largest value, unit, seconds per unit, decimals).
_TIME_UNITS = ((1.0, "s", 1.0, 3), (1e-3, "ms", 1e-3, 2), (0.0, "us", 1e-6, 1))


def fmt_times(values: Sequence[float | None]) -> tuple[str, list[str]]:
    """A column of durations in one unit: ``(unit, cells)``, the unit (``s``, ``ms``, ``us``)
    the one :func:`fmt_time` gives the largest value, with its fixed decimals (``3.389``,
    ``0.168`` in seconds); ``-`` for an unknown value, scientific above :data:`SCI_ABOVE`."""
    big = max((abs(v) for v in values if _finite(v)), default=0.0)
    unit, scale, dec = next((u, k, d) for lo, u, k, d in _TIME_UNITS if big >= lo)
    cells = []
    for v in values:
        if not _finite(v):
            cells.append("-")
        elif abs(v / scale) >= SCI_ABOVE:
            cells.append(f"{v / scale:.3e}")
        else:
            cells.append(f"{v / scale:,.{dec}f}")
    return unit, cells


def fmt_num(x: float | None, digits: int = 4) -> str:
    """A count or rate: ``-`` when unknown or not finite, scientific above :data:`SCI_ABOVE`,
    whole with thousands separators from 1,000 (``62,800``, ``1,243,695``), else ``digits``
    significant digits, trailing zeros kept (``760.4``, ``338.0``)."""
    if not _finite(x):
        return "-"
    if abs(x) >= SCI_ABOVE:
        return f"{x:.{max(digits - 1, 0)}e}"
    if abs(x) >= 1e3:
        return f"{x:,.0f}"
    return f"{x:#.{digits}g}".rstrip(".")


def fmt_count(x: float | None) -> str:
    """A count, whole with thousands separators (``1,024``); scientific above
    :data:`SCI_ABOVE`; ``-`` when unknown."""
    if not _finite(x):
        return "-"
    return f"{x:.3e}" if abs(x) >= SCI_ABOVE else f"{x:,.0f}"


def fmt_usd(x: float | None) -> str:
    """Dollars, whole (``$1,234``); scientific above :data:`SCI_ABOVE`; ``-`` when unknown."""
    if not _finite(x):
        return "-"
    return f"${x:.3e}" if abs(x) >= SCI_ABOVE else f"${x:,.0f}"


def fmt_pct(x: float | None) -> str:
    """A fraction as a percentage (``12.3%``); ``-`` when unknown or not finite."""
    if not _finite(x):
        return "-"
    if abs(x) < 1e4:
        return f"{x:.1%}"
    mantissa, _, exp = f"{x:.3e}".partition("e")  # x * 100 could overflow
    return f"{mantissa}e{int(exp) + 2:+03d}%"


def fmt_gb(x: float | None) -> str:
    """Gigabytes to one decimal (``80.0``); scientific from a billion; ``-`` when unknown."""
    if not _finite(x):
        return "-"
    return f"{x:.3e}" if abs(x) >= 1e9 else f"{x:.1f}"


def safe_text(text: object, limit: int = 200) -> str:
    """``text`` from a file, fit for a terminal line: every character that is not printable
    (``str.isprintable``: control characters such as ESC, newlines, tabs, and Unicode format
    characters such as the bidirectional overrides) written as its Python escape (``\\x1b``,
    ``\\n``, ``\\u202e``), and the whole shortened past ``limit`` characters."""
    out = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))
    return out if len(out) <= limit else out[: limit - 3] + "..."
