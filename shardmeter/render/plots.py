"""``estimate --plot OUT.png``: one report as two charts (matplotlib, the extra ``shardmeter[plot]``).

The breakdown chart is a stacked bar of the step's exposed terms (``breakdown_s``, adding up to
``step_time_s``) above a hatched bar of the time hidden under other work (``overlapped_s``); with
several islands, one more bar per island (its own terms, its idle time and the island sync). The
memory chart is one stacked bar per island of ``memory_breakdown_gb`` (weights, gradients,
optimizer, activations, other), or of the total ``memory_per_gpu_gb`` where a report has no split,
against the GPU's capacity. :func:`breakdown_rows` and :func:`memory_bars` are the charts' data,
shared with the HTML page's own SVG (:mod:`shardmeter.render.charts`).
"""

from __future__ import annotations

import math
import os
from typing import Any

from shardmeter.errors import ShardMeterError
from shardmeter.io import atomic_write

__all__ = ["plot_report", "breakdown_rows", "memory_bars", "TERM_COLOURS", "MEMORY_COLOURS", "MEMORY_PARTS"]

TERM_COLOURS = {
    "compute": "#4c9f70",
    "memory_ops": "#8fbf5a",
    "tp_comm": "#e0803a",
    "cp_comm": "#d9a03f",
    "ep_comm": "#c9674a",
    "pp_comm": "#b5838d",
    "pp_bubble": "#c95c8a",
    "dp_comm": "#6f7fd1",
    "offload": "#a0785a",
    "optimizer": "#7a7a7a",
    "island_sync": "#3a8fb7",
    "idle": "#cccccc",
}
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "other")
MEMORY_COLOURS = {
    "weights": "#4c72b0",
    "gradients": "#dd8452",
    "optimizer": "#8172b3",
    "activations": "#55a868",
    "other": "#937860",
    "total": "#4c72b0",
}
_SPARE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def colour(name: str, table: dict[str, str]) -> str:
    """The colour of a term or memory part (a plugin's unknown one gets a stable spare colour)."""
    return table.get(name) or _SPARE[sum(name.encode()) % len(_SPARE)]


def _as_dict(report: Any) -> dict[str, Any]:
    return report.to_dict() if hasattr(report, "to_dict") else dict(report)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _positive(terms: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in (terms or {}).items() if _finite(v) and v > 0}


def breakdown_rows(report: Any) -> list[tuple[str, str, dict[str, float]]]:
    """The breakdown chart's bars, top first: ``(label, kind, {term: seconds})`` with kind
    ``"exposed"`` (the step), ``"hidden"`` (overlapped time; absent when nothing is hidden) or
    ``"island"`` (with several islands, each island's own terms). Empty when infeasible."""
    d = _as_dict(report)
    if not d.get("feasible"):
        return []
    rows = [("step (exposed)", "exposed", _positive(d.get("breakdown_s")))]
    hidden = _positive(d.get("overlapped_s"))
    if hidden:
        rows.append(("hidden (overlapped)", "hidden", hidden))
    islands = d.get("islands") or []
    if len(islands) > 1:
        rows += [
            (f"island {isl.get('name')}", "island", _positive(isl.get("breakdown_s"))) for isl in islands
        ]
    return rows


def memory_bars(report: Any) -> list[tuple[str, dict[str, float], float | None]]:
    """The memory chart's bars: ``(label, {part: GB}, capacity GB)``, one per island with several,
    else one for the report. A bar's parts are its ``memory_breakdown_gb`` (the report's is the
    busiest island's), else one ``total`` part (``memory_per_gpu_gb``); its capacity is its own
    ``memory_capacity_gb``, else the report's (the smallest GPU's). A bar whose memory is not a
    finite number is left out."""
    d = _as_dict(report)
    cap = d.get("memory_capacity_gb")
    islands = d.get("islands") or []
    sources = [(f"island {i.get('name')}", i) for i in islands] if len(islands) > 1 else [("per GPU", d)]
    busiest = _busiest(islands) if len(islands) > 1 else 0
    bars = []
    for j, (label, src) in enumerate(sources):
        split = src.get("memory_breakdown_gb") or (d.get("memory_breakdown_gb") if j == busiest else None)
        parts = _ordered(split) if isinstance(split, dict) and split else None
        if parts is None:
            total = src.get("memory_per_gpu_gb")
            if not _finite(total):
                continue
            parts = {"total": float(total)}
        own_cap = src.get("memory_capacity_gb", cap)
        bars.append((label, parts, float(own_cap) if _finite(own_cap) else None))
    return bars


def _busiest(islands: list[dict[str, Any]]) -> int:
    """The island whose GPU the report's own ``memory_breakdown_gb`` describes: the first with the
    most memory (a non-finite figure counts as the most)."""
    mem = [_or_inf(i.get("memory_per_gpu_gb")) for i in islands]
    return max(range(len(mem)), key=lambda j: mem[j])


def _or_inf(v: Any) -> float:
    return float(v) if _finite(v) else math.inf


def _ordered(split: dict[str, Any]) -> dict[str, float]:
    """``split`` in the order of :data:`MEMORY_PARTS`, other keys after; non-finite values as 0."""
    keys = [k for k in MEMORY_PARTS if k in split] + [k for k in split if k not in MEMORY_PARTS]
    return {str(k): float(split[k]) if _finite(split[k]) else 0.0 for k in keys}


def _figure_class(label: str):
    """matplotlib's ``Figure`` and its Agg canvas (never pyplot, never a display)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ShardMeterError(
            f"{label or 'plot_report'} needs matplotlib: pip install 'shardmeter[plot]'"
        ) from None
    return Figure, FigureCanvasAgg


def _format_of(path: str, label: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".png", ".svg"):
        where = f"{label} {path}" if label else path
        raise ShardMeterError(f"{where}: the file name must end in .png or .svg (got {ext or 'no suffix'!r})")
    return ext[1:]


def check_plot_path(path: str | os.PathLike, *, label: str = "--plot") -> None:
    """A one-line :class:`ShardMeterError` now if :func:`plot_report` cannot draw to ``path``
    (its suffix, matplotlib missing), before the estimate is made."""
    _format_of(os.fspath(path), label)
    _figure_class(label)


def plot_report(report: Any, path: str | os.PathLike, *, label: str = "--plot") -> None:
    """Write the breakdown and memory charts of ``report`` (a :class:`~shardmeter.report.build.Report`
    or its ``to_dict()``) to ``path``: PNG or SVG by its suffix, atomically
    (:func:`~shardmeter.io.atomic_write`: a special file is refused, a symlink followed).
    ``label`` goes before ``path`` in error messages."""
    user = os.fspath(path)
    fmt = _format_of(user, label)
    figure, canvas = _figure_class(label)
    d = _as_dict(report)
    fig = figure(figsize=(11, 4.8), dpi=110)
    canvas(fig)
    ax_bd, ax_mem = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.4, 1]})
    _draw_breakdown(ax_bd, d)
    _draw_memory(ax_mem, d)
    fig.tight_layout()
    with atomic_write(user, "wb", label=label) as fh:
        fig.savefig(fh, format=fmt, **({"metadata": {"Date": None}} if fmt == "svg" else {}))


def _draw_breakdown(ax, d: dict[str, Any]) -> None:
    rows = breakdown_rows(d)
    ax.set_title("step time breakdown")
    if not rows:
        ax.text(0.5, 0.5, "infeasible: no step time", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    from matplotlib.patches import Patch  # the plot extra, imported by _figure_class already

    seen: dict[str, None] = {}
    for y, (_, kind, terms) in enumerate(rows):
        left = 0.0
        for term, s in terms.items():
            ax.barh(
                y,
                s,
                left=left,
                color=colour(term, TERM_COLOURS),
                hatch="//" if kind == "hidden" else None,
                alpha=0.55 if kind == "hidden" else 1.0,
                edgecolor="white" if kind != "hidden" else "#333333",
            )
            seen.setdefault(term)
            left += s
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds per step")
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=colour(t, TERM_COLOURS), label=t) for t in seen]
    if any(kind == "hidden" for _, kind, _ in rows):
        handles.append(
            Patch(facecolor="white", edgecolor="#333333", hatch="//", label="hidden under other work")
        )
    ax.legend(
        handles=handles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, frameon=False
    )


def _draw_memory(ax, d: dict[str, Any]) -> None:
    bars = memory_bars(d)
    ax.set_title("memory per GPU")
    if not bars:
        ax.text(0.5, 0.5, "no memory figure", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    seen: set[str] = set()
    for x, (_, parts, cap) in enumerate(bars):
        bottom = 0.0
        for part, gb in parts.items():
            ax.bar(
                x,
                gb,
                bottom=bottom,
                color=colour(part, MEMORY_COLOURS),
                label=part if part not in seen else None,
            )
            seen.add(part)
            bottom += gb
        if cap is not None:
            ax.hlines(cap, x - 0.45, x + 0.45, colors="#c0392b", linestyles="--", lw=2)
    caps = sorted({c for _, _, c in bars if c is not None})
    if caps:
        ax.plot(
            [], [], color="#c0392b", ls="--", lw=2, label=f"capacity ({', '.join(f'{c:g}' for c in caps)} GB)"
        )
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], rotation=20 if len(bars) > 2 else 0)
    ax.set_ylabel("GB")
    ax.set_ylim(0, max([sum(p.values()) for _, p, _ in bars] + caps) * 1.25 or 1)
    ax.legend(fontsize=8, loc="upper right", framealpha=0.9)
