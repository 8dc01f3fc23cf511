"""The HTML report's charts as inline SVG, built by hand (no matplotlib, no script, no font):
the step breakdown, the memory per GPU and the predicted-vs-measured scatter.

Every mark carries its figure in a ``data-`` attribute and a ``<title>`` (the browser's tooltip);
every text from a scenario is escaped. The charts' data is :mod:`shardmeter.render.plots`', so
the page and ``estimate --plot`` draw the same bars.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

from shardmeter.render.plots import MEMORY_COLOURS, TERM_COLOURS, breakdown_rows, colour, memory_bars
from shardmeter.report.words import TERM_WORDS

__all__ = ["breakdown_svg", "memory_svg", "scatter_svg"]

_FONT = 'font-family="sans-serif" font-size="12"'
_GROUP_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _n(x: float) -> str:
    """A coordinate, short."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _g(x: float) -> str:
    return f"{x:.4g}"


def _ticks(top: float) -> list[float]:
    """Round ticks from 0 to at least ``top`` (steps of 1, 2 or 5 x 10^k, about five)."""
    if not (top > 0 and math.isfinite(top)):
        return [0.0, 1.0]
    raw = top / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _svg(width: int, height: int, chart: str, label: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{chart}" role="img" '
        f'aria-label="{escape(label)}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" {_FONT}>'
        + "".join(body)
        + "</svg>"
    )


def _legend(items: Sequence[tuple[str, str]], x0: float, y0: float, width: float) -> tuple[list[str], float]:
    """Swatches and names in rows that fit ``width``; returns the marks and the height used."""
    out, x, y = [], x0, y0
    for name, fill in items:
        w = 30 + 7.5 * len(name)
        if x > x0 and x + w > x0 + width:
            x, y = x0, y + 18
        out.append(
            f'<rect class="swatch" x="{_n(x)}" y="{_n(y)}" width="12" height="12" fill="{fill}"/>'
            f'<text x="{_n(x + 16)}" y="{_n(y + 10)}">{escape(name)}</text>'
        )
        x += w
    return out, (y - y0 + 18 if items else 0)


def breakdown_svg(report: Any) -> str:
    """A stacked horizontal bar per row of :func:`~shardmeter.render.plots.breakdown_rows`:
    ``<rect class="seg" data-row data-term data-s>``; the hidden row is hatched."""
    rows = breakdown_rows(report)
    width, left, right, top, bar, gap = 780, 170, 20, 12, 26, 12
    if not rows:
        body = ['<text class="empty" x="20" y="30">infeasible: no step time to break down</text>']
        return _svg(width, 50, "breakdown", "step time breakdown", body)
    scale_top = max(sum(t.values()) for _, _, t in rows) or 1.0
    ticks = _ticks(scale_top)
    span = ticks[-1] or 1.0
    plot_w = width - left - right
    body = [
        '<defs><pattern id="hidden-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="white" fill-opacity="0.45"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#333" stroke-width="1.5"/></pattern></defs>'
    ]
    for r, (label, kind, terms) in enumerate(rows):
        y = top + r * (bar + gap)
        body.append(
            f'<text x="{left - 8}" y="{_n(y + bar / 2 + 4)}" text-anchor="end">{escape(label)}</text>'
        )
        x = float(left)
        for term, s in terms.items():
            w = s / span * plot_w
            tip = f"{label}: {term} {_g(s)} s ({s / scale_top:.0%})"
            if term in TERM_WORDS:
                tip += f", {TERM_WORDS[term]}"
            body.append(
                f'<rect class="seg" data-row="{kind}" data-term="{escape(term)}" data-s="{s!r}" '
                f'x="{_n(x)}" y="{y}" width="{_n(w)}" height="{bar}" fill="{colour(term, TERM_COLOURS)}" '
                f'stroke="white" stroke-width="0.5"><title>{escape(tip)}</title></rect>'
            )
            if kind == "hidden":
                body.append(
                    f'<rect x="{_n(x)}" y="{y}" width="{_n(w)}" height="{bar}" fill="url(#hidden-hatch)" '
                    'pointer-events="none"/>'
                )
            x += w
    axis_y = top + len(rows) * (bar + gap) - gap / 2
    body.append(
        f'<line class="axis" x1="{left}" y1="{_n(axis_y)}" x2="{left + plot_w}" y2="{_n(axis_y)}" stroke="#333"/>'
    )
    for t in ticks:
        tx = left + t / span * plot_w
        body.append(
            f'<line x1="{_n(tx)}" y1="{_n(axis_y)}" x2="{_n(tx)}" y2="{_n(axis_y + 5)}" stroke="#333"/>'
            f'<text x="{_n(tx)}" y="{_n(axis_y + 18)}" text-anchor="middle">{_g(t)}</text>'
        )
    body.append(
        f'<text x="{left + plot_w / 2}" y="{_n(axis_y + 34)}" text-anchor="middle">seconds per step</text>'
    )
    terms_seen: dict[str, str] = {}
    for _, _, terms in rows:
        for term in terms:
            terms_seen.setdefault(term, colour(term, TERM_COLOURS))
    marks, used = _legend(list(terms_seen.items()), left, axis_y + 46, plot_w)
    body += marks
    return _svg(width, int(axis_y + 50 + used), "breakdown", "step time breakdown", body)


def memory_svg(report: Any) -> str:
    """A stacked vertical bar per island (:func:`~shardmeter.render.plots.memory_bars`):
    ``<rect class="seg" data-bar data-part data-gb>``, the capacity ``<line class="capacity" data-gb>``."""
    bars = memory_bars(report)
    left, top, plot_h, slot = 56, 14, 220, 110
    width = max(300, left + 20 + slot * len(bars))
    if not bars:
        return _svg(
            width,
            50,
            "memory",
            "memory per GPU",
            ['<text class="empty" x="20" y="30">no memory figure</text>'],
        )
    top_gb = max([sum(p.values()) for _, p, _ in bars] + [c for _, _, c in bars if c is not None])
    ticks = _ticks(top_gb * 1.05)
    span = ticks[-1] or 1.0
    base = top + plot_h

    def y_of(gb: float) -> float:
        return base - gb / span * plot_h

    body = []
    for t in ticks:
        body.append(
            f'<line x1="{left - 4}" y1="{_n(y_of(t))}" x2="{width - 10}" y2="{_n(y_of(t))}" stroke="#ddd"/>'
            f'<text x="{left - 8}" y="{_n(y_of(t) + 4)}" text-anchor="end">{_g(t)}</text>'
        )
    body.append(
        f'<text x="14" y="{top + plot_h / 2}" transform="rotate(-90 14 {top + plot_h / 2})" text-anchor="middle">GB</text>'
    )
    for i, (label, parts, cap) in enumerate(bars):
        x = left + 20 + i * slot
        bottom = 0.0
        for part, gb in parts.items():
            body.append(
                f'<rect class="seg" data-bar="{escape(label)}" data-part="{escape(part)}" data-gb="{gb!r}" '
                f'x="{x}" y="{_n(y_of(bottom + gb))}" width="60" height="{_n(gb / span * plot_h)}" '
                f'fill="{colour(part, MEMORY_COLOURS)}" stroke="white" stroke-width="0.5">'
                f"<title>{escape(f'{label}: {part} {_g(gb)} GB')}</title></rect>"
            )
            bottom += gb
        if cap is not None:
            body.append(
                f'<line class="capacity" data-gb="{cap!r}" x1="{x - 8}" y1="{_n(y_of(cap))}" x2="{x + 68}" '
                f'y2="{_n(y_of(cap))}" stroke="#c0392b" stroke-width="2" stroke-dasharray="6 3">'
                f"<title>{escape(f'{label}: capacity {_g(cap)} GB')}</title></line>"
            )
        body.append(f'<text x="{x + 30}" y="{base + 16}" text-anchor="middle">{escape(label)}</text>')
    body.append(f'<line class="axis" x1="{left}" y1="{base}" x2="{width - 10}" y2="{base}" stroke="#333"/>')
    parts_seen: dict[str, str] = {}
    for _, parts, _ in bars:
        for part in parts:
            parts_seen.setdefault(part, colour(part, MEMORY_COLOURS))
    items = list(parts_seen.items())
    if any(c is not None for _, _, c in bars):
        items.append(("capacity", "#c0392b"))
    marks, used = _legend(items, left, base + 30, width - left - 10)
    body += marks
    return _svg(width, int(base + 34 + used), "memory", "memory per GPU", body)


def scatter_svg(cases: Sequence[dict[str, Any]]) -> str:
    """Predicted against measured on log-log axes, one ``<circle class="point" data-measured
    data-predicted>`` per case with both values > 0, the ``y = x`` line (``class="identity"``) and
    the +/-10 % band (``class="band"``); points coloured by source group."""
    pts = [
        c
        for c in cases
        if all(
            isinstance(c.get(k), (int, float)) and c[k] > 0 and math.isfinite(c[k])
            for k in ("measured", "predicted")
        )
    ]
    size, pad = 440, 56
    if not pts:
        return _svg(
            size,
            50,
            "scatter",
            "predicted vs measured",
            ['<text class="empty" x="20" y="30">no case with values > 0 to plot</text>'],
        )
    vals = [c[k] for c in pts for k in ("measured", "predicted")]
    lo = math.floor(math.log10(min(vals)) - 0.15)
    hi = math.ceil(math.log10(max(vals)) + 0.15)
    plot = size - pad - 16

    def pos(v: float) -> float:
        return (math.log10(v) - lo) / (hi - lo) * plot

    def xy(m: float, p: float) -> tuple[float, float]:
        return pad + pos(m), 16 + plot - pos(p)

    a, b = 10.0**lo, 10.0**hi
    band = " ".join(
        f"{_n(x)},{_n(y)}" for x, y in (xy(a, a * 0.9), xy(b, b * 0.9), xy(b, b * 1.1), xy(a, a * 1.1))
    )
    body = [
        f'<defs><clipPath id="scatter-area"><rect x="{pad}" y="16" width="{plot}" height="{plot}"/></clipPath></defs>',
        f'<rect x="{pad}" y="16" width="{plot}" height="{plot}" fill="none" stroke="#333"/>',
    ]
    for k in range(lo, hi + 1):
        gx, gy = xy(10.0**k, 10.0**k)
        body.append(
            f'<line x1="{_n(gx)}" y1="16" x2="{_n(gx)}" y2="{16 + plot}" stroke="#eee"/>'
            f'<line x1="{pad}" y1="{_n(gy)}" x2="{pad + plot}" y2="{_n(gy)}" stroke="#eee"/>'
            f'<text x="{_n(gx)}" y="{16 + plot + 16}" text-anchor="middle">1e{k}</text>'
            f'<text x="{pad - 6}" y="{_n(gy + 4)}" text-anchor="end">1e{k}</text>'
        )
    (x0, y0), (x1, y1) = xy(a, a), xy(b, b)
    body += [
        f'<polygon class="band" points="{band}" fill="#4c9f70" fill-opacity="0.18" clip-path="url(#scatter-area)">'
        "<title>within 10 % of the measurement</title></polygon>",
        f'<line class="identity" x1="{_n(x0)}" y1="{_n(y0)}" x2="{_n(x1)}" y2="{_n(y1)}" stroke="#333" stroke-dasharray="4 3"/>',
    ]
    groups = list(dict.fromkeys(str(c.get("group")) for c in pts))
    fills = {g: _GROUP_COLOURS[i % len(_GROUP_COLOURS)] for i, g in enumerate(groups)}
    for c in pts:
        cx, cy = xy(c["measured"], c["predicted"])
        tip = (
            f"{c.get('file')}: {c.get('field')} measured {_g(c['measured'])}, predicted {_g(c['predicted'])}"
        )
        if isinstance(c.get("error"), float) and math.isfinite(c["error"]):
            tip += f" ({c['error']:+.1%})"
        body.append(
            f'<circle class="point" data-group="{escape(str(c.get("group")))}" data-measured="{c["measured"]!r}" '
            f'data-predicted="{c["predicted"]!r}" cx="{_n(cx)}" cy="{_n(cy)}" r="4.5" '
            f'fill="{fills[str(c.get("group"))]}" fill-opacity="0.85" stroke="#222" stroke-width="0.5">'
            f"<title>{escape(tip)}</title></circle>"
        )
    body += [
        f'<text x="{pad + plot / 2}" y="{size - 8}" text-anchor="middle">measured</text>',
        f'<text x="14" y="{16 + plot / 2}" transform="rotate(-90 14 {16 + plot / 2})" text-anchor="middle">predicted</text>',
    ]
    marks, used = _legend([(g, fills[g]) for g in groups], pad, size + 6, plot)
    body += marks
    return _svg(size, int(size + 10 + used), "scatter", "predicted vs measured", body)
