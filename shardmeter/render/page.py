"""``shardmeter report FILE --html OUT.html``: one self-contained HTML page of an estimate.

The page holds the headline figures, the layout of each island, the notes (or the reasons a plan
is infeasible), the step breakdown and memory charts and, with ``--validation PATH``, the
predicted-vs-measured scatter and the error tables of ``shardmeter validate``. It has no script,
no external URL and no font: the charts are inline SVG (:mod:`shardmeter.render.charts`), the style
is inline CSS. Every text from a scenario is escaped. Each figure's cell carries its exact value
in ``data-value`` (``repr`` of the float, empty for a null).
"""

from __future__ import annotations

import math
import os
from html import escape
from typing import Any

__all__ = ["build_page", "HEADLINE", "LAYOUT"]

#: The headline table: report key, label, how it is shown.
HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("feasible", "feasible", "text"),
    ("step_time_s", "step time", "s"),
    ("tokens_per_s", "throughput (tokens/s)", "num"),
    ("tokens_per_s_per_gpu", "tokens/s per GPU", "num"),
    ("mfu", "MFU", "pct"),
    ("hfu", "HFU", "pct"),
    ("model_tflops_per_gpu", "model TFLOP/s per GPU", "num"),
    ("hardware_tflops_per_gpu", "hardware TFLOP/s per GPU", "num"),
    ("memory_per_gpu_gb", "memory per GPU (GB)", "num"),
    ("memory_capacity_gb", "GPU capacity (GB)", "num"),
    ("compute_utilization", "compute utilisation", "pct"),
    ("wall_clock_s", "wall-clock time", "s"),
    ("cost_usd", "cost (USD)", "usd"),
    ("gpus", "GPUs used", "num"),
    ("params", "parameters", "num"),
    ("model_flops_per_token", "model FLOPs per token", "num"),
    ("bottleneck", "bottleneck", "text"),
    ("regime", "regime", "text"),
)

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:1.5em;margin-bottom:4px}h2{font-size:1.15em;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:14px}
th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#b03030}.ok{color:#2d7a4a}.muted{color:#777}
.charts{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}
"""


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def fmt(v: Any, kind: str = "num") -> str:
    """A figure as the page shows it (``n/a`` for a null)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if kind == "text" or not _num(v):
        return str(v).lower() if isinstance(v, bool) else str(v)
    if kind == "pct":
        return f"{v:.1%}"
    if kind == "usd":
        return f"${v:,.0f}" if abs(v) >= 100 else f"${v:,.2f}"
    if kind == "s":
        days = f" ({v / 86400:.1f} days)" if v >= 86400 else ""
        return (f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}") + f" s{days}"
    if isinstance(v, int) or (abs(v) < 1e15 and float(v).is_integer() and abs(v) >= 1):
        return f"{int(v):,}"
    return f"{v:,.0f}" if 1e4 <= abs(v) < 1e15 else f"{v:.4g}"


def _value(v: Any) -> str:
    """``data-value``: the exact figure (``repr`` of a number, the text of a string, empty for null)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    return repr(float(v)) if _num(v) else escape(str(v))


def _cell(v: Any, kind: str = "num") -> str:
    cls = ' class="n"' if kind != "text" else ""
    return f'<td{cls} data-value="{_value(v)}">{escape(fmt(v, kind))}</td>'


def _table(head: tuple[str, ...], rows: list[str], cls: str) -> str:
    ths = "".join(f"<th>{escape(h)}</th>" for h in head)
    return f'<table class="{cls}"><thead><tr>{ths}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _headline(d: dict[str, Any]) -> str:
    rows = [
        f'<tr data-key="{k}"><th>{escape(label)}</th>{_cell(d.get(k), kind)}</tr>'
        for k, label, kind in HEADLINE
    ]
    return f'<table class="headline">{"".join(rows)}</table>'


#: The layout table's rows: the report's ``layout`` key, its label, how it is shown.
LAYOUT: tuple[tuple[str, str, str], ...] = (
    ("tp", "tensor parallel (tp)", "num"),
    ("pp", "pipeline parallel (pp)", "num"),
    ("dp", "data parallel (dp)", "num"),
    ("cp", "context parallel (cp)", "num"),
    ("ep", "expert parallel (ep)", "num"),
    ("sequence_parallel", "sequence parallel", "text"),
    ("sharding", "sharding", "text"),
    ("schedule", "schedule", "text"),
    ("virtual_stages", "virtual stages", "num"),
    ("micro_batch", "micro-batch", "num"),
    ("grad_accumulation", "micro-batches per step", "num"),
    ("layers_per_stage", "layers per stage", "num"),
    ("params_per_gpu", "parameters per GPU", "num"),
    ("params_per_gpu_sharded", "parameters per GPU, sharded", "num"),
)


def _island_layout(res: Any, d: dict[str, Any], j: int) -> dict[str, Any]:
    """Island ``j``'s layout: the report's (``layout``, or its ``islands`` entry where islands
    differ), else what the resolved scenario says."""
    isl = res.islands[j]
    par = isl.parallelism
    own = {
        "tp": par.tp,
        "pp": par.pp,
        "dp": isl.dp,
        "cp": par.cp,
        "ep": par.ep,
        "sequence_parallel": par.sequence_parallel,
        "sharding": isl.sharding.name,
        "schedule": isl.schedule.name,
        "virtual_stages": par.virtual_stages,
        "micro_batch": res.scenario.training.micro_batch,
    }
    layout = d.get("layout") or {}
    per = layout.get("islands")
    rep = per[j] if isinstance(per, list) and j < len(per) else layout
    return own | {k: v for k, v in rep.items() if k != "islands"}


def _layout(res: Any, d: dict[str, Any]) -> str:
    """One column per island: its GPUs and the layout it runs."""
    sc = res.scenario
    lays = [_island_layout(res, d, j) for j in range(len(res.islands))]
    head = ("", *(isl.name for isl in res.islands))
    rows = [
        "<tr><th>GPU</th>" + "".join(f"<td>{escape(isl.gpu.name)}</td>" for isl in res.islands) + "</tr>",
        "<tr><th>nodes x GPUs per node</th>"
        + "".join(f'<td class="n">{isl.nodes} x {isl.gpus_per_node}</td>' for isl in res.islands)
        + "</tr>",
    ]
    rows += [
        f'<tr data-key="{k}"><th>{escape(label)}</th>'
        + "".join(_cell(lay.get(k), kind) for lay in lays)
        + "</tr>"
        for k, label, kind in LAYOUT
    ]
    m, t = sc.model, sc.training
    model = (
        f"{m.preset or 'model'}: {m.layers} layers, hidden {m.hidden}, {m.heads} heads, sequence {m.seq_len}"
        + (f", {m.experts} experts (top-{m.experts_per_token})" if m.experts > 1 else "")
        + f"; global batch {t.global_batch}, {t.precision}, recompute {t.recompute}"
        + (f"; sync {res.sync.name} between islands" if len(res.islands) > 1 else "")
    )
    return f'<p class="model">{escape(model)}</p>' + _table(head, rows, "layout")


def _islands(d: dict[str, Any]) -> str:
    """The per-island figures (with several islands)."""
    islands = d.get("islands") or []
    if len(islands) < 2:
        return ""
    keys = (
        ("tokens_per_s", "num"),
        ("step_time_s", "s"),
        ("idle_fraction", "pct"),
        ("memory_per_gpu_gb", "num"),
        ("cost_usd", "usd"),
    )
    rows = [
        f'<tr data-island="{escape(str(i.get("name")))}"><td>{escape(str(i.get("name")))}</td>'
        + "".join(_cell(i.get(k), kind) for k, kind in keys)
        + "</tr>"
        for i in islands
    ]
    return "<h2>Islands</h2>" + _table(
        ("island", "tokens/s", "own step", "idle", "memory per GPU (GB)", "cost (USD)"), rows, "islands"
    )


def _list(items: list[str], cls: str) -> str:
    return f'<ul class="{cls}">' + "".join(f"<li>{escape(str(x))}</li>" for x in items) + "</ul>"


def _validation(val: dict[str, Any]) -> str:
    from shardmeter.render.charts import scatter_svg

    def err(c: dict[str, Any]) -> str:
        e = c.get("error")
        ok = isinstance(e, float) and abs(e) <= 0.10
        text = f"{e:+.1%}" if isinstance(e, float) and math.isfinite(e) else "n/a"
        return f'<td class="n {"ok" if ok else "bad"}" data-value="{_value(e)}">{escape(text)}</td>'

    cases = [
        f"<tr><td>{escape(os.path.basename(str(c['file'])))}</td><td>{escape(str(c['group']))}</td>"
        f"<td>{escape(str(c['field']))}</td>{_cell(c['measured'])}{_cell(c['predicted'])}{err(c)}</tr>"
        for c in val["cases"]
    ]
    counts: dict[str, int] = {}
    for c in val["cases"]:
        counts[str(c["group"])] = counts.get(str(c["group"]), 0) + 1
    groups = [
        f"<tr><td>{escape(g)}</td>{_cell(counts.get(g, 0))}{_cell(m, 'pct')}</tr>"
        for g, m in val["mape_by_group"].items()
    ]
    failures = [
        f"<tr><td>{escape(os.path.basename(str(f['file'])))}</td><td>{escape(str(f['group']))}</td>"
        f"<td>{escape(str(f['error']))}</td></tr>"
        for f in val["failures"]
    ]
    overall = val.get("overall_mape")
    return (
        "<h2>Validation</h2>"
        f'<p class="overall" data-value="{_value(overall)}">overall MAPE {escape(fmt(overall, "pct"))} over '
        f"{len(val['cases'])} comparisons in {val['n_files']} files, {val['n_failed']} failed</p>"
        f'<div class="charts">{scatter_svg(val["cases"])}'
        + _table(("source group", "cases", "MAPE"), groups, "groups")
        + "</div>"
        + _table(("case", "group", "field", "measured", "predicted", "error"), cases, "cases")
        + (
            ("<h3>Failed cases</h3>" + _table(("case", "group", "error"), failures, "failures"))
            if failures
            else ""
        )
    )


def build_page(report: Any, res: Any, *, source: str = "", validation: dict[str, Any] | None = None) -> str:
    """The whole page: ``report`` (a :class:`~shardmeter.report.build.Report`) of the resolved scenario
    ``res``, named ``source``; ``validation`` is :func:`~shardmeter.validate.run.validate_paths`' result."""
    from shardmeter.render.charts import breakdown_svg, memory_svg
    from shardmeter.report.words import describe_bottleneck

    d = report.to_dict()
    for isl, entry in zip(
        res.islands, d["islands"], strict=True
    ):  # each island's own GPU for its capacity line
        entry.setdefault("memory_capacity_gb", isl.gpu.memory_gb)
    name = os.path.basename(source) or "scenario"
    if d["feasible"]:
        status = f'<p class="status ok">{escape(describe_bottleneck(report))}</p>'
    else:
        status = '<p class="status bad">infeasible:</p>' + _list(d["reasons"], "reasons")
    if d["confidence"]:  # the band and the envelope verdict (shardmeter.report.confidence)
        from shardmeter.report.confidence import confidence_line

        cls = "ok" if d["confidence"]["within_envelope"] else "bad"
        status += f'<p class="confidence {cls}">confidence: {escape(confidence_line(d["confidence"]))}</p>'
    notes = _list(d["notes"], "notes") if d["notes"] else '<p class="muted">none</p>'
    src = res.scenario.source
    cite = (
        f'<p class="source muted">source: {escape(", ".join(f"{k}: {v}" for k, v in src.items()))}</p>'
        if src
        else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>ShardMeter report: {escape(name)}</title><style>{_CSS}</style></head><body>"
        f"<h1>ShardMeter report: {escape(name)}</h1>{cite}{status}"
        f"<h2>Estimate</h2>{_headline(d)}"
        f"<h2>Layout</h2>{_layout(res, d)}"
        f'<h2>Breakdown and memory</h2><div class="charts">{breakdown_svg(d)}{memory_svg(d)}</div>'
        f"{_islands(d)}<h2>Notes</h2>{notes}"
        f"{_validation(validation) if validation is not None else ''}"
        "</body></html>\n"
    )
