"""``sweep --plot OUT.png``: throughput and scaling efficiency against the varied
key, with the regime of each point shaded (matplotlib, the extra ``shardmeter[plot]``)."""

from __future__ import annotations

import math
import os

from ..errors import ShardMeterError
from ..io import atomic_write
from .values import format_value

__all__ = ["plot_sweep", "REGIME_COLOURS"]

REGIME_COLOURS = {
    "compute-bound": "#4c9f70",
    "communication-bound": "#e0803a",
    "memory-bound": "#6f7fd1",
    "bubble-bound": "#c95c8a",
}


def _matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ShardMeterError("--plot needs matplotlib: pip install 'shardmeter[plot]'") from None
    return plt


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def plot_sweep(result, path: str | os.PathLike, *, title: str | None = None) -> None:
    """Write a PNG of ``result`` (a :class:`~shardmeter.explore.sweep.SweepResult`)."""
    plt = _matplotlib()
    from matplotlib.patches import Patch

    an = result.analysis
    x_key = an.get("x", result.keys[0])
    rows = result.rows
    others = [k for k in result.keys if k != x_key]
    numeric = all(_num(r["vary"][x_key]) for r in rows)
    cats: list[str] = []
    if not numeric:
        for r in rows:
            s = format_value(r["vary"][x_key])
            if s not in cats:
                cats.append(s)

    def xpos(r):
        return float(r["vary"][x_key]) if numeric else float(cats.index(format_value(r["vary"][x_key])))

    series: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        label = ", ".join(f"{k}={format_value(r['vary'][k])}" for k in others)
        series.setdefault(label, []).append(i)
    xs_all = sorted({xpos(r) for r in rows})
    logx = numeric and len(xs_all) > 2 and xs_all[0] > 0 and xs_all[-1] / xs_all[0] >= 8

    fig, ax = plt.subplots(figsize=(9.5, 5.6), dpi=110)
    ax2 = ax.twinx()
    eff = an.get("scaling_efficiency")
    right_label = "scaling efficiency (tokens/s per GPU vs smallest)" if eff else "MFU"

    # regime shading: bands around each point of the first series, coloured by its regime
    first = series[next(iter(series))]
    pts = sorted((xpos(rows[i]), an["regime"][i]) for i in first)
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
        ax.axvspan(lo, hi, color=REGIME_COLOURS.get(reg, "#cccccc"), alpha=0.16, lw=0)
        seen.add(reg)

    for n, (label, idx) in enumerate(series.items()):
        pts = sorted((xpos(rows[i]), i) for i in idx)
        fx = [p for p, i in pts if rows[i]["report"].get("feasible")]
        ty = [rows[i]["report"]["tokens_per_s"] for p, i in pts if rows[i]["report"].get("feasible")]
        colour = f"C{n % 10}"
        ax.plot(fx, ty, "o-", color=colour, lw=2, label=f"tokens/s {label}".strip())
        ey = [
            (eff[i] if eff else rows[i]["report"].get("mfu"))
            for p, i in pts
            if rows[i]["report"].get("feasible")
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
        bad = [p for p, i in pts if not rows[i]["report"].get("feasible")]
        if bad:
            ax.plot(
                bad, [0] * len(bad), "x", color="red", ms=9, mew=2, label="infeasible" if n == 0 else None
            )
    k = an.get("knee")
    if k is not None and _num(k) and numeric:
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
    if logx:
        ax.set_xscale("log", base=2 if all(float(v).is_integer() for v in xs_all) else 10)
    if not numeric:
        ax.set_xticks(range(len(cats)), cats, rotation=30 if max(len(c) for c in cats) > 8 else 0)
    elif logx:
        ax.set_xticks(xs_all, [format_value(int(v) if float(v).is_integer() else v) for v in xs_all])
    ax.set_xlabel(x_key)
    ax.set_ylabel("throughput (tokens/s, whole system)")
    ax2.set_ylabel(right_label)
    ax.set_ylim(bottom=0)
    ax2.set_ylim(0, max(1.05, max([v for v in (eff or []) if v is not None] or [1.0]) * 1.05))
    ax.grid(alpha=0.3)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    regs = [Patch(color=REGIME_COLOURS[r], alpha=0.35, label=r) for r in REGIME_COLOURS if r in seen]
    ax.legend(
        h1 + h2 + regs, l1 + l2 + [p.get_label() for p in regs], loc="lower right", fontsize=8, framealpha=0.9
    )
    ax.set_title(title or f"ShardMeter sweep over {x_key}")
    fig.tight_layout()
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png")
    plt.close(fig)
