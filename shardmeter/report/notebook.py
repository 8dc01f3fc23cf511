"""What a notebook shows: short ``repr`` lines, small escaped HTML tables (IPython's
``_repr_html_`` protocol) and pandas, an optional extra (``pip install 'shardmeter[dataframe]'``)."""

from __future__ import annotations

import html
import importlib
import math
from collections.abc import Sequence
from typing import Any

from shardmeter.errors import ShardMeterError

__all__ = [
    "html_table",
    "report_repr",
    "report_html",
    "require_pandas",
    "fmt_cell",
    "flat_report",
    "REPORT_COLUMNS",
]

#: The report's scalar fields a table or a data frame row shows, in order.
REPORT_COLUMNS = (
    "feasible",
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "hfu",
    "memory_per_gpu_gb",
    "memory_capacity_gb",
    "compute_utilization",
    "gpus",
    "wall_clock_s",
    "cost_usd",
    "bottleneck",
    "regime",
)

_NUMBERS = [k for k in REPORT_COLUMNS if k not in ("feasible", "gpus", "bottleneck", "regime")]


def require_pandas():
    """The ``pandas`` module, else a one-line :class:`ShardMeterError` naming the extra."""
    try:
        return importlib.import_module("pandas")  # no stubs needed: an optional extra
    except ImportError:
        raise ShardMeterError(
            "to_dataframe() needs pandas, which is not installed: pip install 'shardmeter[dataframe]'"
        ) from None


def fmt_cell(v: Any) -> str:
    """One table cell: ``-`` for None or a non-finite number, 4 significant digits otherwise."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else "-"
    return str(v)


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, caption: str | None = None) -> str:
    """A small HTML table, every header, cell and the caption escaped."""
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(fmt_cell(c))}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def flat_report(report: Any) -> dict[str, Any]:
    """A report's scalar fields (:data:`REPORT_COLUMNS`), ``reasons`` joined by ``"; "`` and
    each breakdown term as ``breakdown_s.<term>``: one data frame row."""
    row = {k: getattr(report, k) for k in REPORT_COLUMNS}
    for k in _NUMBERS:
        if row[k] is None:
            row[k] = math.nan  # a float column in pandas, not an object one
    row["reasons"] = "; ".join(report.reasons)
    row.update({f"breakdown_s.{k}": v for k, v in report.breakdown_s.items()})
    return row


def _si(x: float | None, unit: str) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3g} {unit}"


def report_repr(r: Any) -> str:
    """One line: ``<Report 1.23e+06 tok/s, 41.2 % MFU, 62.1 GB/GPU, bottleneck=compute>``, or
    ``<Report infeasible: first reason (+ n more)>``."""
    if not r.feasible:
        more = f" (+{len(r.reasons) - 1} more)" if len(r.reasons) > 1 else ""
        return f"<Report infeasible: {r.reasons[0] if r.reasons else 'no reason given'}{more}>"
    mfu = f"{r.mfu * 100:.1f} % MFU" if r.mfu is not None else "- MFU"
    return (
        f"<Report {r.tokens_per_s:.3g} tok/s, {mfu}, {_si(r.memory_per_gpu_gb, 'GB/GPU')}, "
        f"bottleneck={r.bottleneck}>"
    )


def report_html(r: Any) -> str:
    """The headline figures, then the exposed breakdown with each term's share of the step."""
    rows: list[tuple[Any, ...]] = [(k, getattr(r, k)) for k in REPORT_COLUMNS]
    if not r.feasible:
        rows += [("reason", x) for x in r.reasons]
    out = html_table(("field", "value"), rows, caption="ShardMeter report")
    if r.breakdown_s:
        step = r.step_time_s or 0.0
        bd = [(k, v, f"{v / step:.1%}" if step else "-") for k, v in r.breakdown_s.items()]
        out += html_table(("breakdown", "time (s)", "share"), bd)
    return out
