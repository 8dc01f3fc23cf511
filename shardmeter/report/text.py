"""The text of a report (``shardmeter estimate`` without ``--json``): the summary, the layout,
the memory by part, the step's breakdown, the time hidden under compute, the islands, notes."""

from __future__ import annotations

import math
from typing import Any

from shardmeter.model.memory import MEMORY_PARTS
from shardmeter.report.confidence import confidence_line
from shardmeter.report.words import describe_bottleneck
from shardmeter.tables import (
    SCI_ABOVE,
    fmt_count,
    fmt_gb,
    fmt_num,
    fmt_pct,
    fmt_time,
    fmt_times,
    fmt_usd,
    render_table,
    safe_text,
)

__all__ = ["format_report", "cost_line", "layout_table"]

#: Decimal suffixes of :func:`_scaled` (one per line: every amount of a line shares its suffix).
_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))


def _scale(*values: float | None) -> tuple[float, str]:
    """The divisor and suffix that suit the largest of ``values``."""
    big = max((abs(v) for v in values if v is not None and math.isfinite(v)), default=0.0)
    return next(((k, f" {s}") for k, s in _SUFFIXES if big >= k), (1.0, ""))


def _fixed(x: float | None, dec: int = 2) -> str:
    """``x`` to ``dec`` decimals with thousands separators; scientific above
    :data:`~shardmeter.tables.SCI_ABOVE`; ``-`` when unknown or not finite."""
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.3e}" if abs(x) >= SCI_ABOVE else f"{x:,.{dec}f}"


def _scaled(x: float | None, scale: tuple[float, str], dec: int = 2) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.3e}" if abs(x) >= SCI_ABOVE * scale[0] else f"{_fixed(x / scale[0], dec)}{scale[1]}"


def _bytes_gb(gb: float) -> str:
    """Decimal bytes given in GB (``65.8 PB``)."""
    for k, unit in ((1e6, "PB"), (1e3, "TB"), (1.0, "GB")):
        if gb >= k:
            return f"{_fixed(gb / k, 1)} {unit}"
    return f"{_fixed(gb * 1e3, 1)} MB"


def _price(i: dict[str, Any]) -> str:
    return ", ".join(x for x in (i["price_source"], i["price_date"]) if x)


def cost_line(r: Any) -> str:
    """The cost as rate x GPU-hours + egress, dollars in the total's suffix: on one island
    ``$1.05 M = 1.05 M (2.00 $/GPU-h x 522.9 k GPU-h, cloud-on-demand, 2026-06)``; between
    islands ``$7.24 M = 1.32 M GPU time + egress 5.92 M (131.6 PB sent between islands)``,
    each island's rate, GPU-hours and price source in the islands table."""
    cb = r.cost_breakdown_usd
    if not cb or cb.get("total_usd") is None:
        return fmt_usd(r.cost_usd)
    usd = _scale(cb["total_usd"])
    text = f"${_scaled(cb['total_usd'], usd)} = {_scaled(cb['compute_usd'], usd)}"
    if len(cb["islands"]) == 1:
        i = cb["islands"][0]
        hours = _scaled(i["gpu_hours"], _scale(i["gpu_hours"]), 1)
        text += f" ({_fixed(i['rate_usd_per_gpu_hour'])} $/GPU-h x {hours} GPU-h, {_price(i)})"
    else:
        text += " GPU time (rate x GPU-hours per island below)"
    if cb["egress_gb"] > 0:
        text += (
            f" + egress {_scaled(cb['egress_usd'], usd)} ({_bytes_gb(cb['egress_gb'])} sent between islands)"
        )
    return text


def _params(x: float) -> str:
    """Parameters with a suffix (``174.6 B``, ``2.7 B``)."""
    return _scaled(x, _scale(x), 1)


def _one_layout(lay: dict[str, Any], islands: int, dp_total: int) -> list[tuple[str, str]]:
    """The layout rows of one island (or of every island, when they agree)."""
    dp = f"dp {lay['dp']}" + (f" per island ({dp_total} in all)" if islands > 1 else "")
    degrees = f"tp {lay['tp']} x pp {lay['pp']} x cp {lay['cp']} x {dp}"
    degrees += f", ep {lay['ep']}" if lay["ep"] > 1 else ""
    gpus = lay["gpus"] * islands if islands > 1 else lay["gpus"]
    schedule = lay["schedule"] + (
        f", {lay['virtual_stages']} virtual stages" if lay["virtual_stages"] > 1 else ""
    )
    extras = [f"{lay['layers_per_virtual_stage']} per virtual stage"] if lay["virtual_stages"] > 1 else []
    if "first_stage_layers" in lay:
        extras.append(f"first {lay['first_stage_layers']}, last {lay['last_stage_layers']}")
    stages = f"{lay['layers_per_stage']}" + (f" ({'; '.join(extras)})" if extras else "")
    sharded = lay["params_per_gpu_sharded"]
    held = f"{_params(lay['params_per_gpu'])} per GPU"
    if sharded < lay["params_per_gpu"]:
        held += f", {_params(sharded)} after {lay['sharding']} sharding"
    return [
        (
            "parallelism",
            f"{degrees} = {gpus:,} GPUs" + (" (sequence parallel)" if lay["sequence_parallel"] else ""),
        ),
        ("schedule / sharding", f"{schedule} / {lay['sharding']}"),
        (
            "micro-batches",
            f"{lay['grad_accumulation']} per step per pipeline (micro_batch {lay['micro_batch']} x "
            f"{lay['grad_accumulation']} x dp {lay['dp']} = {lay['batch_per_step']:,.0f} sequences per step"
            f"{' per island' if islands > 1 else ''})",
        ),
        ("layers per stage", stages),
        ("parameters", held),
    ]


def layout_table(r: Any) -> str:
    """The layout block: one column of values where the islands agree, else one per island."""
    lay = r.layout
    model = f"{_params(lay['params'])} parameters, global batch {lay['global_batch']:,}"
    if "islands" not in lay:
        rows = [*_one_layout(lay, max(len(r.islands), 1), lay["dp_total"]), ("model", model)]
        return render_table(("layout", ""), rows, align_numbers=False)
    cols = [_one_layout(i, 1, lay["dp_total"]) for i in lay["islands"]]
    per: list[tuple[str, ...]] = [(label, *(c[n][1] for c in cols)) for n, (label, _) in enumerate(cols[0])]
    per.append(("model", model, *([""] * (len(cols) - 1))))
    return render_table(("layout", *(i["name"] for i in lay["islands"])), per, align_numbers=False)


def _memory_table(r: Any) -> str:
    mb, total = r.memory_breakdown_gb, r.memory_per_gpu_gb
    rows = [(k, fmt_gb(mb[k]), fmt_pct(mb[k] / total if total else None)) for k in MEMORY_PARTS]
    rows.append(("= per GPU", fmt_gb(total), "100.0%"))
    return render_table((f"memory (busiest GPU, of {fmt_gb(r.memory_capacity_gb)} GB)", "GB", "share"), rows)


def _islands_table(r: Any) -> str:
    """One row per island: its share of the work, and its cost as rate x GPU-hours + egress."""
    unit, steps = fmt_times([i["step_time_s"] for i in r.islands])
    priced = r.cost_breakdown_usd.get("islands") or [None] * len(r.islands)
    rows = []
    for i, step, c in zip(r.islands, steps, priced, strict=True):
        rate = c["rate_usd_per_gpu_hour"] if c else None
        rows.append(
            (
                i["name"],
                i["gpu"],
                fmt_count(i["gpus"]),
                fmt_num(i["tokens_per_s"]),
                step,
                fmt_pct(i["idle_fraction"]),
                fmt_gb(i["memory_per_gpu_gb"]),
                _fixed(rate),
                fmt_count(c["gpu_hours"]) if c else "-",
                fmt_usd(i["gpu_cost_usd"]),
                fmt_usd(i["egress_cost_usd"]),
                fmt_usd(i["cost_usd"]),
                _price(c) if c else "-",
            )
        )
    heads = ("island", "gpu", "GPUs", "tokens/s", f"own step ({unit})", "idle", "mem GB", "$/GPU-h")
    return render_table((*heads, "GPU-h", "GPU cost", "egress", "cost", "price"), rows)


def _infeasible(r: Any) -> str:
    out = ["INFEASIBLE plan:"]
    out.extend(f"  - {x}" for x in r.reasons)
    if r.memory_per_gpu_gb is not None:
        out.append(f"  memory per GPU: {fmt_gb(r.memory_per_gpu_gb)} GB of {fmt_gb(r.memory_capacity_gb)} GB")
        out.append(f"  memory reserved (caching allocator): {fmt_gb(r.memory_reserved_gb)} GB")
        if r.memory_breakdown_gb:
            parts = ", ".join(f"{k} {fmt_gb(v)}" for k, v in r.memory_breakdown_gb.items())
            out.append(f"  memory by part (GB): {parts}")
    out.extend(f"  note: {n}" for n in r.notes)
    return "\n".join(out)


def _reliability_rows(r: Any) -> list[tuple[str, str]]:
    """The ``[variability]`` and ``[reliability]`` lines (none without the tables)."""
    rows = []
    varies = r.step_time_p50_s is not None and r.step_time_p50_s != r.step_time_s
    if varies:
        rows.append(("step P50 / P90", f"{fmt_time(r.step_time_p50_s)} / {fmt_time(r.step_time_p90_s)}"))
    if r.reliability:
        rel = r.reliability
        rows.append(
            (
                "goodput",
                f"{fmt_pct(r.goodput)} (job MTBF {fmt_time(rel['job_mtbf_h'] * 3600.0)}, checkpoint "
                f"{fmt_time(r.checkpoint_s)} every {fmt_time(r.checkpoint_interval_s)})",
            )
        )
    if (varies or r.reliability) and r.expected_wall_clock_s is not None:
        cost = "-" if r.expected_cost_usd is None else fmt_usd(r.expected_cost_usd)
        rows.append(("expected wall-clock / cost", f"{fmt_time(r.expected_wall_clock_s)} / {cost}"))
    return rows


def format_report(r: Any) -> str:
    """The CLI's text of a :class:`~shardmeter.report.build.Report` (unknown or non-finite numbers
    as ``-``, absurd ones in scientific notation). Compute utilisation is shown only between
    islands: on one island it is 100 % by definition. Every line is escaped for a terminal
    (:func:`~shardmeter.tables.safe_text`): reasons and notes quote names from the scenario."""
    text = _infeasible(r) if not r.feasible else _feasible(r)
    return "\n".join(safe_text(line, limit=_LINE_LIMIT) for line in text.split("\n"))


#: A report line's length before it is shortened (only text from a hostile file is this long).
_LINE_LIMIT = 2000


def _feasible(r: Any) -> str:
    rows = [
        ("step time", fmt_time(r.step_time_s)),
        ("tokens/s (total)", fmt_num(r.tokens_per_s)),
        ("tokens/s per GPU", fmt_num(r.tokens_per_s_per_gpu)),
        ("model TFLOP/s per GPU", fmt_num(r.model_tflops_per_gpu)),
        ("hardware TFLOP/s per GPU", fmt_num(r.hardware_tflops_per_gpu)),
        ("MFU / HFU", f"{fmt_pct(r.mfu)} / {fmt_pct(r.hfu)}"),
        ("memory per GPU", f"{fmt_gb(r.memory_per_gpu_gb)} GB of {fmt_gb(r.memory_capacity_gb)} GB"),
        ("memory reserved", f"{fmt_gb(r.memory_reserved_gb)} GB (PyTorch's caching allocator)"),
    ]
    if len(r.islands) > 1:
        rows.append(("compute utilization", fmt_pct(r.compute_utilization)))
    rows += [
        ("GPUs", fmt_count(r.gpus)),
        ("wall-clock", fmt_time(r.wall_clock_s) if r.wall_clock_s is not None else "- (set training.tokens)"),
        ("cost", cost_line(r)),
        ("bottleneck", describe_bottleneck(r)),
        ("regime", r.regime),
    ]
    rows += _reliability_rows(r)
    if r.confidence:
        rows.append(("confidence", confidence_line(r.confidence)))
    out = [render_table(("metric", "value"), rows, title="ShardMeter estimate", align_numbers=False)]
    if r.layout:
        out += ["", layout_table(r)]
    if r.memory_breakdown_gb:
        out += ["", _memory_table(r)]
    step = r.step_time_s
    unit, times = fmt_times([*r.breakdown_s.values(), step])
    bd_rows = [
        (k, t, fmt_pct(v / step if step else None))
        for (k, v), t in zip(r.breakdown_s.items(), times, strict=False)
    ]
    bd_rows.append(("= step", times[-1], "100.0%"))
    out += ["", render_table(("breakdown", f"time ({unit})", "share"), bd_rows)]
    if r.overlapped_s:
        unit, hidden = fmt_times(list(r.overlapped_s.values()))
        out += [
            "",
            render_table(
                ("hidden under compute", f"time ({unit})"), list(zip(r.overlapped_s, hidden, strict=True))
            ),
        ]
    if len(r.islands) > 1:
        out += ["", _islands_table(r)]
    out.extend(f"note: {n}" for n in (*r.notes, *r.assumptions))
    return "\n".join(out)
