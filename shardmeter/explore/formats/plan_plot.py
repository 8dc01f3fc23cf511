"""``plan --plot OUT.png``: the time/cost scatter of a plan search (matplotlib's ``Figure`` on
the Agg canvas, never pyplot): the Pareto front the search kept, and the returned plans
marked and labelled by rank. Wall-clock days against cost in USD; per-step time against cost
per step without ``training.tokens``."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from shardmeter.io import atomic_write
from shardmeter.render.plots import check_plot_path

if TYPE_CHECKING:  # an optional dependency (shardmeter[plot])
    from matplotlib.figure import Figure

__all__ = ["plan_figure", "plot_plan", "check_plan_plot", "plan_points", "front_points", "axis_labels"]


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_plan_plot(path: str | os.PathLike, *, label: str = "--plot") -> None:
    """A one-line error now if ``path`` cannot be drawn to (its suffix is not ``.png`` or
    ``.svg``, matplotlib missing), before the search runs."""
    check_plot_path(path, label=label)


def axis_labels(doc: dict[str, Any]) -> tuple[str, str]:
    """The x and y axis labels of ``doc``'s plot."""
    if doc.get("per_token"):
        return "time per step (s)", "cost per step (USD)"
    return "wall-clock (days)", "cost (USD)"


def _per_step(plan: dict[str, Any]) -> tuple[Any, Any]:
    """A plan's step time and cost per step (``cost_per_token_usd`` x tokens per step)."""
    step: Any = plan["report"]["step_time_s"]
    cpt: Any = plan.get("cost_per_token_usd")
    tpt: Any = plan.get("time_per_token_s")
    if not (_finite(step) and _finite(cpt) and _finite(tpt) and tpt > 0):
        return step, None
    return step, cpt * step / tpt


def plan_points(doc: dict[str, Any]) -> list[tuple[int, float, float]]:
    """``(rank, x, y)`` of each returned plan with a known time and cost, in the plot's units."""
    pts = []
    for p in doc["plans"]:
        rep = p["report"]
        x: Any
        y: Any
        if doc.get("per_token"):
            x, y = _per_step(p)
        else:
            wall, y = rep.get("wall_clock_s"), rep.get("cost_usd")
            x = wall / 86400.0 if _finite(wall) else None
        if _finite(x) and _finite(y):
            pts.append((int(p["rank"]), float(x), float(y)))
    return pts


def _steps_and_tokens_per_step(doc: dict[str, Any]) -> tuple[float | None, float | None]:
    """Steps of the run and tokens per step, read off the first plan (``None`` when unknown)."""
    for p in doc["plans"]:
        rep = p["report"]
        step, wall, tpt = rep.get("step_time_s"), rep.get("wall_clock_s"), p.get("time_per_token_s")
        steps = wall / step if _finite(wall) and _finite(step) and step > 0 else None
        tps = step / tpt if _finite(step) and _finite(tpt) and tpt > 0 else None
        return steps, tps
    return None, None


def front_points(doc: dict[str, Any]) -> list[tuple[float, float]]:
    """The search's Pareto front ``doc["front"]`` in the plot's units, fastest first: per step
    (``time``, ``cost``: one layout on every island), whole run (``time_s``, ``cost_usd``) or per
    token (``time_per_token_s``, ``cost_usd_per_token``). Empty without a front (``time`` and
    ``cost`` objectives) or in a form this version does not know."""
    fr = doc.get("front") or {}
    steps, tps = _steps_and_tokens_per_step(doc)
    if "time" in fr and "cost" in fr:  # per step
        t, c = fr["time"], fr["cost"]
        if doc.get("per_token"):
            scale = (1.0, 1.0)
        elif steps is None:
            return []
        else:
            scale = (steps / 86400.0, steps)
    elif "time_s" in fr and "cost_usd" in fr:  # the whole run
        t, c = fr["time_s"], fr["cost_usd"]
        scale = (1 / 86400.0, 1.0)
    elif "time_per_token_s" in fr and "cost_usd_per_token" in fr:
        if tps is None:
            return []
        t, c = fr["time_per_token_s"], fr["cost_usd_per_token"]
        scale = (tps, tps)
    else:
        return []
    pts = [(x * scale[0], y * scale[1]) for x, y in zip(t, c, strict=False) if _finite(x) and _finite(y)]
    return sorted(pts)


def plan_figure(doc: dict[str, Any], *, title: str | None = None) -> Figure:
    """The matplotlib ``Figure`` of ``doc``: the front as a grey step line with its points, each
    returned plan a marker labelled ``#rank``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.5, 5.4), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    front = front_points(doc)
    pts = plan_points(doc)
    if front:
        fx, fy = zip(*front, strict=True)
        ax.plot(
            fx,
            fy,
            color="#9a9a9a",
            marker="o",
            markersize=4,
            linewidth=1,
            drawstyle="steps-post",
            label=f"Pareto front kept by the search ({len(front)} plans)",
            zorder=1,
        )
    if pts:
        _, px, py = zip(*pts, strict=True)
        ax.scatter(px, py, color="#d1495b", s=36, zorder=3, label=f"returned plans ({len(pts)})")
        for n, (r, x, y) in enumerate(pts):  # alternate sides, so neighbours' labels do not collide
            off = (6, 4) if n % 2 == 0 else (-6, -10)
            ha = "left" if n % 2 == 0 else "right"
            ax.annotate(f"#{r}", (x, y), textcoords="offset points", xytext=off, ha=ha, fontsize=8, zorder=4)
    else:
        ax.text(
            0.5, 0.5, "no plan with a known time and cost", ha="center", va="center", transform=ax.transAxes
        )
    xs = [x for x, _ in front] + [x for _, x, _ in pts]
    if xs and min(xs) > 0 and max(xs) / min(xs) >= 10:
        from matplotlib.ticker import FuncFormatter  # the plot extra, imported with Figure above

        ax.set_xscale("log")  # a slow, cheap corner would squeeze the rest of the front
        plain = FuncFormatter(lambda v, _pos: f"{v:g}")
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(plain)
    xl, yl = axis_labels(doc)
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    ax.grid(alpha=0.3)
    if front or pts:
        ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    ax.set_title(title or f"ShardMeter plan ({doc.get('objective')})")
    fig.tight_layout()
    return fig


def plot_plan(
    doc: dict[str, Any], path: str | os.PathLike, *, title: str | None = None, label: str = "--plot"
) -> None:
    """Write :func:`plan_figure` of ``doc`` to ``path`` (PNG or SVG by its suffix), atomically
    (:func:`~shardmeter.io.atomic_write`: a special file is refused, a symlink followed)."""
    user = os.fspath(path)
    check_plan_plot(user, label=label)
    fmt = os.path.splitext(user)[1].lower()[1:]
    fig = plan_figure(doc, title=title)
    with atomic_write(user, "wb", label=label) as fh:
        extra: dict[str, Any] = {"metadata": {"Date": None}} if fmt == "svg" else {}
        fig.savefig(fh, format=fmt, **extra)
