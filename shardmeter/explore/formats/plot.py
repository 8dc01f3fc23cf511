"""``sweep --plot OUT.png``: throughput and scaling efficiency against the varied
key, with the regime of each point shaded (matplotlib, the extra ``shardmeter[plot]``)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from shardmeter.errors import ShardMeterError
from shardmeter.explore.search.values import fields_of, format_value
from shardmeter.io import atomic_write

if TYPE_CHECKING:  # an optional dependency (shardmeter[plot])
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from shardmeter.explore.search.sweep import SweepResult

#: A sweep row (a dict, or a :class:`~shardmeter.explore.search.sweep_rows.SweepRow`).
Row = Mapping[str, Any]

__all__ = ["plot_sweep", "sweep_figure", "require_matplotlib", "REGIME_COLOURS", "MAX_SHADED"]

#: Series whose regimes are shaded (each in its own strip of the axes).
MAX_SHADED = 12

REGIME_COLOURS = {
    "compute-bound": "#4c9f70",
    "communication-bound": "#e0803a",
    "memory-bound": "#6f7fd1",
    "bubble-bound": "#c95c8a",
}


def _matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ShardMeterError("--plot needs matplotlib: pip install 'shardmeter[plot]'") from None
    return plt


def require_matplotlib() -> None:
    """A one-line :class:`ShardMeterError` now if ``--plot`` cannot be drawn (checked before a
    sweep, so its work is not lost to a missing extra)."""
    _matplotlib()


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def sweep_figure(result: SweepResult, *, title: str | None = None) -> Figure:
    """The matplotlib figure of ``result``: throughput (left axis) and scaling efficiency or MFU
    (right) per series, each series' regimes shaded in its own strip (up to
    :data:`MAX_SHADED` series), the knee marked, the legend below the axes."""
    plt = _matplotlib()
    from matplotlib.patches import Patch  # optional dependency (shardmeter[plot]), checked just above

    an = result.analysis
    x_key = an.get("x", result.keys[0])
    rows = result.rows
    xaxis = _XAxis(rows, x_key)
    series = _series(rows, [k for k in result.keys if k != x_key])
    xs_all = sorted({xaxis.pos(r) for r in rows})
    logx = xaxis.numeric and len(xs_all) > 2 and xs_all[0] > 0 and xs_all[-1] / xs_all[0] >= 8

    fig, ax = plt.subplots(figsize=(9.5, 5.6), dpi=110)
    ax2 = ax.twinx()
    eff = an.get("scaling_efficiency")
    if eff and all(e is None for e in eff):
        eff = None  # the GPU count does not vary (analysis' scaling_note): plot MFU
    right_label = "scaling efficiency (tokens/s per GPU vs smallest)" if eff else "MFU"

    # regime shading: per series, a band around each of its points coloured by the point's
    # regime; with several series each gets its own horizontal strip of the axes
    seen: set[str] = set()
    shaded = list(series.items())[:MAX_SHADED]
    for n, (_, idx) in enumerate(shaded):
        strip = (n / len(shaded), (n + 1) / len(shaded))
        pts = sorted((xaxis.pos(rows[i]), an["regime"][i]) for i in idx)
        seen |= _shade_regimes(ax, pts, logx, strip)
    _plot_series(ax, ax2, rows, series, xaxis, eff)
    k = an.get("knee")
    if k is not None and _num(k) and xaxis.numeric:
        _mark_knee(ax, k)
    _set_x_scale(ax, xaxis, xs_all, logx)
    ax.set_xlabel(x_key)
    ax.set_ylabel("throughput (tokens/s, whole system)")
    ax2.set_ylabel(right_label)
    ax.set_ylim(bottom=0)
    ax2.set_ylim(0, max(1.05, max([v for v in (eff or []) if v is not None] or [1.0]) * 1.05))
    ax.grid(alpha=0.3)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    regs = [Patch(color=REGIME_COLOURS[r], alpha=0.35, label=r) for r in REGIME_COLOURS if r in seen]
    # the legend goes below the axes, never on the data
    ax.legend(
        h1 + h2 + regs,
        l1 + l2 + [p.get_label() for p in regs],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=3,
        fontsize=8,
        framealpha=0.9,
    )
    ax.set_title(title or f"ShardMeter sweep over {x_key}")
    fig.tight_layout()
    return fig


def plot_sweep(
    result: SweepResult, path: str | os.PathLike, *, title: str | None = None, label: str = ""
) -> None:
    """Write a PNG of ``result`` (a :class:`~shardmeter.explore.search.sweep.SweepResult`) to ``path``,
    atomically (:func:`~shardmeter.io.atomic_write`: a special file is refused, a symlink
    followed); ``label`` (``"--plot"``) goes before ``path`` in error messages."""
    plt = _matplotlib()
    fig = sweep_figure(result, title=title)
    try:
        with atomic_write(path, "wb", label=label) as fh:
            fig.savefig(fh, format="png", bbox_inches="tight")
    finally:
        plt.close(fig)


class _XAxis:
    """Where each grid point sits on the x axis: its value of ``x_key`` when every value is a
    number, else the index of its formatted value among ``cats`` (in order of appearance)."""

    def __init__(self, rows: Sequence[Row], x_key: str) -> None:
        self.x_key = x_key
        self.numeric = all(_num(r["vary"][x_key]) for r in rows)
        self.cats: list[str] = []
        if not self.numeric:
            for r in rows:
                s = format_value(r["vary"][x_key])
                if s not in self.cats:
                    self.cats.append(s)

    def pos(self, r: Row) -> float:
        v = r["vary"][self.x_key]
        return float(v) if self.numeric else float(self.cats.index(format_value(v)))


def _series(rows: Sequence[Row], others: Sequence[str]) -> dict[str, list[int]]:
    """Row indices by series: one series per combination of the other varied keys."""
    series: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        label = ", ".join(f"{k}={format_value(r['vary'][k])}" for k in others)
        series.setdefault(label, []).append(i)
    return series


def _shade_regimes(
    ax: Axes, pts: Sequence[tuple[float, str]], logx: bool, strip: tuple[float, float] = (0.0, 1.0)
) -> set[str]:
    """Shade a band around each ``(x, regime)`` point (halfway to its neighbours, geometrically on
    a log axis) over the ``strip`` of the axes' height; returns the regimes shaded."""
    seen = set()
    for j, (xv, reg) in enumerate(pts):
        if reg is None:
            continue
        if logx:
            lo = math.sqrt(xv * pts[j - 1][0]) if j > 0 else xv / 1.4
            hi = math.sqrt(xv * pts[j + 1][0]) if j + 1 < len(pts) else xv * 1.4
        else:
            lo = (xv + pts[j - 1][0]) / 2 if j > 0 else xv - 0.5 * ((pts[1][0] - xv) if len(pts) > 1 else 1)
            hi = (
                (xv + pts[j + 1][0]) / 2
                if j + 1 < len(pts)
                else xv + 0.5 * ((xv - pts[j - 1][0]) if j else 1)
            )
        ax.axvspan(lo, hi, *strip, color=REGIME_COLOURS.get(reg, "#cccccc"), alpha=0.16, lw=0)
        seen.add(reg)
    return seen


def _plot_series(
    ax: Axes,
    ax2: Axes,
    rows: Sequence[Row],
    series: Mapping[str, list[int]],
    xaxis: _XAxis,
    eff: Sequence[float | None] | None,
) -> None:
    """Per series: tokens/s (left axis, feasible points), scaling efficiency or MFU (right axis)
    and a red cross at 0 for each infeasible point."""
    for n, (label, idx) in enumerate(series.items()):
        pts = sorted((xaxis.pos(rows[i]), i) for i in idx)
        fx = [p for p, i in pts if fields_of(rows[i]).get("feasible")]
        ty = [fields_of(rows[i])["tokens_per_s"] for p, i in pts if fields_of(rows[i]).get("feasible")]
        colour = f"C{n % 10}"
        ax.plot(fx, ty, "o-", color=colour, lw=2, label=f"tokens/s {label}".strip())
        ey: list[Any] = [  # None: a gap (matplotlib draws none)
            (eff[i] if eff else fields_of(rows[i]).get("mfu"))
            for p, i in pts
            if fields_of(rows[i]).get("feasible")
        ]
        ax2.plot(
            fx,
            ey,
            "s--",
            color=colour,
            alpha=0.75,
            lw=1.4,
            label=f"{'efficiency' if eff else 'MFU'} {label}".strip(),
        )
        bad = [p for p, i in pts if not fields_of(rows[i]).get("feasible")]
        if bad:
            ax.plot(
                bad, [0] * len(bad), "x", color="red", ms=9, mew=2, label="infeasible" if n == 0 else None
            )


def _mark_knee(ax: Axes, k: Any) -> None:
    """A dotted vertical line at the knee, labelled."""
    ax.axvline(float(k), color="black", ls=":", lw=1.5)
    ax.annotate(
        f"knee: {format_value(k)}",
        xy=(float(k), 0.97),
        xycoords=("data", "axes fraction"),
        ha="right",
        va="top",
        fontsize=9,
        rotation=90,
    )


def _set_x_scale(ax: Axes, xaxis: _XAxis, xs_all: Sequence[float], logx: bool) -> None:
    """A log x axis (base 2 for integers) over a wide numeric range; category or value ticks."""
    if logx:
        ax.set_xscale("log", base=2 if all(float(v).is_integer() for v in xs_all) else 10)
    if not xaxis.numeric:
        cats = xaxis.cats
        ax.set_xticks(range(len(cats)), cats, rotation=30 if max(len(c) for c in cats) > 8 else 0)
    elif logx:
        ax.set_xticks(xs_all, [format_value(int(v) if float(v).is_integer() else v) for v in xs_all])
