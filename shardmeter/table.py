"""Plain-text tables for the CLI (no dependency; aligned columns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .words import describe_bottleneck

__all__ = ["render_table", "format_report", "fmt_time", "fmt_num"]


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


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 86400 * 2:
        return f"{s / 86400:.1f} d"
    if s >= 7200:
        return f"{s / 3600:.1f} h"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def fmt_num(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1e6:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def format_report(r) -> str:

    out = []
    if not r.feasible:
        out.append("INFEASIBLE plan:")
        out.extend(f"  - {x}" for x in r.reasons)
        if r.memory_per_gpu_gb is not None:
            out.append(f"  memory per GPU: {r.memory_per_gpu_gb:.1f} GB of {r.memory_capacity_gb:.1f} GB")
        out.extend(f"  note: {n}" for n in r.notes)
        return "\n".join(out)
    rows = [
        ("step time", fmt_time(r.step_time_s)),
        ("tokens/s (total)", fmt_num(r.tokens_per_s)),
        ("tokens/s per GPU", fmt_num(r.tokens_per_s_per_gpu)),
        ("model TFLOP/s per GPU", fmt_num(r.model_tflops_per_gpu)),
        ("hardware TFLOP/s per GPU", fmt_num(r.hardware_tflops_per_gpu)),
        ("MFU / HFU", f"{r.mfu:.1%} / {r.hfu:.1%}"),
        ("memory per GPU", f"{r.memory_per_gpu_gb:.1f} GB of {r.memory_capacity_gb:.1f} GB"),
        ("compute utilization", f"{r.compute_utilization:.1%}"),
        ("GPUs", str(r.gpus)),
        ("wall-clock", fmt_time(r.wall_clock_s) if r.wall_clock_s is not None else "- (set training.tokens)"),
        ("cost", f"${r.cost_usd:,.0f}" if r.cost_usd is not None else "-"),
        ("bottleneck", describe_bottleneck(r)),
        ("regime", r.regime),
    ]
    out.append(render_table(("metric", "value"), rows, title="ShardMeter estimate", align_numbers=False))
    out.append("")
    bd_rows = [(k, fmt_time(v), f"{v / r.step_time_s:.1%}") for k, v in r.breakdown_s.items()]
    bd_rows.append(("= step", fmt_time(r.step_time_s), "100.0%"))
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
                        f"{i['idle_fraction']:.1%}",
                        f"{i['memory_per_gpu_gb']:.1f}",
                        f"${i['cost_usd']:,.0f}" if i["cost_usd"] is not None else "-",
                    )
                    for i in r.islands
                ],
            )
        )
    for n in r.notes:
        out.append(f"note: {n}")
    return "\n".join(out)
