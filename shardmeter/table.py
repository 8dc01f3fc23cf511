"""Plain-text tables for the CLI (no dependency; aligned columns)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeGuard

from .words import describe_bottleneck

__all__ = ["render_table", "format_report", "fmt_time", "fmt_num", "fmt_usd", "fmt_pct", "fmt_gb"]


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    align_numbers: bool = True,
) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    if title:
        lines.append(title)
    for n, r in enumerate(cells):
        lines.append(
            "  ".join(
                c.rjust(w) if align_numbers and _numeric(c) else c.ljust(w)
                for c, w in zip(r, widths, strict=False)
            ).rstrip()
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


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


def fmt_num(x: float | None, digits: int = 4) -> str:
    """A number: ``-`` when unknown or not finite, scientific above :data:`SCI_ABOVE`, with
    thousands separators from a million, else ``digits`` significant digits."""
    if not _finite(x):
        return "-"
    if abs(x) >= SCI_ABOVE:
        return f"{x:.{max(digits - 1, 0)}e}"
    if abs(x) >= 1e6:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


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


def format_report(r) -> str:
    """The CLI's text of a :class:`~shardmeter.report.Report` (unknown or non-finite numbers
    as ``-``, absurd ones in scientific notation)."""
    out = []
    if not r.feasible:
        out.append("INFEASIBLE plan:")
        out.extend(f"  - {x}" for x in r.reasons)
        if r.memory_per_gpu_gb is not None:
            out.append(
                f"  memory per GPU: {fmt_gb(r.memory_per_gpu_gb)} GB of {fmt_gb(r.memory_capacity_gb)} GB"
            )
        out.extend(f"  note: {n}" for n in r.notes)
        return "\n".join(out)
    rows = [
        ("step time", fmt_time(r.step_time_s)),
        ("tokens/s (total)", fmt_num(r.tokens_per_s)),
        ("tokens/s per GPU", fmt_num(r.tokens_per_s_per_gpu)),
        ("model TFLOP/s per GPU", fmt_num(r.model_tflops_per_gpu)),
        ("hardware TFLOP/s per GPU", fmt_num(r.hardware_tflops_per_gpu)),
        ("MFU / HFU", f"{fmt_pct(r.mfu)} / {fmt_pct(r.hfu)}"),
        ("memory per GPU", f"{fmt_gb(r.memory_per_gpu_gb)} GB of {fmt_gb(r.memory_capacity_gb)} GB"),
        ("compute utilization", fmt_pct(r.compute_utilization)),
        ("GPUs", str(r.gpus)),
        ("wall-clock", fmt_time(r.wall_clock_s) if r.wall_clock_s is not None else "- (set training.tokens)"),
        ("cost", fmt_usd(r.cost_usd)),
        ("bottleneck", describe_bottleneck(r)),
        ("regime", r.regime),
    ]
    out.append(render_table(("metric", "value"), rows, title="ShardMeter estimate", align_numbers=False))
    out.append("")
    step = r.step_time_s
    bd_rows = [(k, fmt_time(v), fmt_pct(v / step if step else None)) for k, v in r.breakdown_s.items()]
    bd_rows.append(("= step", fmt_time(step), "100.0%"))
    out.append(render_table(("breakdown", "time", "share"), bd_rows))
    if r.overlapped_s:
        out.append("")
        out.append(
            render_table(
                ("hidden under compute", "time"), [(k, fmt_time(v)) for k, v in r.overlapped_s.items()]
            )
        )
    if len(r.islands) > 1:
        out.append("")
        out.append(
            render_table(
                ("island", "gpu", "GPUs", "tokens/s", "own step", "idle", "mem GB", "cost"),
                [
                    (
                        i["name"],
                        i["gpu"],
                        i["gpus"],
                        fmt_num(i["tokens_per_s"]),
                        fmt_time(i["step_time_s"]),
                        fmt_pct(i["idle_fraction"]),
                        fmt_gb(i["memory_per_gpu_gb"]),
                        fmt_usd(i["cost_usd"]),
                    )
                    for i in r.islands
                ],
            )
        )
    for n in r.notes:
        out.append(f"note: {n}")
    return "\n".join(out)
