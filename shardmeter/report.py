"""The report of one scenario (SCENARIO.md, "Report")."""

from __future__ import annotations

import json
import math
from typing import Any

import attrs
import numpy as np

from .model.step import BREAKDOWN_TERMS, reason_messages

__all__ = ["Report", "build_report", "regime_of"]

_COMM = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "island_sync")

_WORDS = {
    "compute": "matrix multiplies and attention (compute-bound)",
    "memory_ops": "memory-bound elementwise kernels (norms, activations, dropout)",
    "tp_comm": "tensor-parallel communication",
    "cp_comm": "context-parallel (ring attention) communication",
    "ep_comm": "expert-parallel all-to-all",
    "pp_comm": "pipeline point-to-point transfers",
    "pp_bubble": "the pipeline bubble",
    "dp_comm": "data-parallel gradient / parameter communication",
    "optimizer": "the optimizer step",
    "island_sync": "synchronisation between islands over the WAN",
    "idle": "waiting for slower islands",
}


def regime_of(breakdown: dict[str, float]) -> str:
    """``compute-bound``, ``communication-bound``, ``memory-bound`` or ``bubble-bound``:
    whichever group of breakdown terms is largest (communication sums every
    exposed ``*_comm`` term and the island sync)."""
    groups = {
        "compute-bound": breakdown.get("compute", 0.0) + breakdown.get("optimizer", 0.0),
        "communication-bound": sum(breakdown.get(k, 0.0) for k in _COMM),
        "memory-bound": breakdown.get("memory_ops", 0.0),
        "bubble-bound": breakdown.get("pp_bubble", 0.0) + breakdown.get("idle", 0.0),
    }
    return max(groups, key=groups.get)


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


@attrs.define
class Report:
    """A prediction. Every field of SCENARIO.md's report, plus ``reasons``,
    ``notes``, ``regime``, ``overlapped_s``, ``gpus`` and the model's size."""

    feasible: bool
    reasons: list[str]
    step_time_s: float | None
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    model_tflops_per_gpu: float | None
    hardware_tflops_per_gpu: float | None
    mfu: float | None
    hfu: float | None
    memory_per_gpu_gb: float | None
    memory_capacity_gb: float | None
    compute_utilization: float | None
    wall_clock_s: float | None
    cost_usd: float | None
    bottleneck: str | None
    regime: str | None
    breakdown_s: dict[str, float]
    overlapped_s: dict[str, float]
    islands: list[dict[str, Any]]
    gpus: int
    params: float
    model_flops_per_token: float
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **({"indent": 2} | kw))

    def __str__(self) -> str:
        from .table import format_report

        return format_report(self)


def build_report(sc, islands, out: dict[str, Any], estimator, row: int = 0) -> Report:
    """Turn row ``row`` of :func:`evaluate`'s output into a :class:`Report`."""
    feasible = bool(out["feasible"][row])
    reasons: list[str] = []
    n_isl = len(islands)
    for j, isl in enumerate(islands):
        bits = int(out["reasons"][row, j])
        if not bits:
            continue
        par = isl.parallelism
        vals = {
            "tp": par.tp, "heads": sc.model.heads, "cp": par.cp, "s": sc.model.seq_len, "ep": par.ep,
            "E": sc.model.experts, "dpcp": isl.dp * par.cp, "used": par.tp * par.pp * par.cp * isl.dp,
            "gpus": isl.nodes * isl.gpus_per_node, "bi": _fmt_int(out["island_batch"][row, j]),
            "mbs_dp": sc.training.micro_batch * isl.dp, "mem_gb": float(out["island_memory_gb"][row, j]),
            "cap_gb": float(out["_mem_cap_gb"][row, j]), "m": _fmt_int(out["micro_batches"][row, j]),
            "pp": par.pp, "pv": par.pp * par.virtual_stages, "L": sc.model.layers,
        }
        prefix = f"island[{j}]." if n_isl > 1 and isl.parallelism is not sc.parallelism else ""
        for key, msg in reason_messages(bits, vals):
            label = f"{prefix}{key}" if not key.startswith("training") else key
            where = f" (island '{isl.name}')" if n_isl > 1 else ""
            reasons.append(f"{label}: {msg}{where}")
    notes = list(sc.notes)
    gpus = int(sum(isl.parallelism.tp * isl.parallelism.pp * isl.parallelism.cp * isl.dp for isl in islands))
    for isl in islands:
        total = isl.nodes * isl.gpus_per_node
        used = isl.parallelism.tp * isl.parallelism.pp * isl.parallelism.cp * isl.dp
        if feasible and used < total:
            notes.append(f"island '{isl.name}' uses {used} of its {total} GPUs")

    mem = _num(out["memory_per_gpu_gb"][row])
    cap = min(isl.gpu.memory_gb for isl in islands)
    if not feasible:
        return Report(
            feasible=False, reasons=reasons, step_time_s=None, tokens_per_s=None, tokens_per_s_per_gpu=None,
            model_tflops_per_gpu=None, hardware_tflops_per_gpu=None, mfu=None, hfu=None,
            memory_per_gpu_gb=mem, memory_capacity_gb=cap, compute_utilization=None, wall_clock_s=None,
            cost_usd=None, bottleneck=None, regime=None, breakdown_s={}, overlapped_s={},
            islands=[{"name": isl.name, "gpus": isl.nodes * isl.gpus_per_node, "tokens_per_s": None,
                      "step_time_s": None, "memory_per_gpu_gb": _num(out["island_memory_gb"][row, j]),
                      "cost_usd": None, "feasible": bool(out["feasible_island"][row, j])}
                     for j, isl in enumerate(islands)],
            gpus=gpus, params=float(out["params"][row]),
            model_flops_per_token=float(out["model_flops_per_token"][row]), notes=notes,
        )

    step = float(out["step_time_s"][row])
    bd = {k: max(0.0, float(out["breakdown"][k][row])) for k in BREAKDOWN_TERMS}
    bd = {k: v for k, v in bd.items() if v > 0 or k in ("compute",)}
    ov = {k: float(out["overlapped"][k][row]) for k in out["overlapped"]}
    ov = {k: v for k, v in ov.items() if v > 0}
    bottleneck = max(bd, key=bd.get)
    tps = float(out["tokens_per_s"][row])
    tokens = sc.training.tokens
    wall = tokens / tps if tokens else None
    isl_reports = []
    total_cost = 0.0 if wall is not None else None
    egress_step = float(out["egress_bytes_per_step"][row])
    steps = (tokens / (sc.training.global_batch * sc.model.seq_len)) if tokens else None
    net = estimator.network_link(sc)
    for j, isl in enumerate(islands):
        g = int(out["island_gpus"][row, j])
        cost = None
        if wall is not None:
            price = isl.cost.gpu_hour_usd(isl.gpu) if isl.cost is not None else float("nan")
            if math.isfinite(price):
                egress_price = (net.egress_usd_per_gb if net is not None and net.egress_usd_per_gb
                                else (isl.cost.egress_usd_per_gb if isl.cost else 0.0))
                cost = g * wall / 3600.0 * price + egress_step * steps / 1e9 * egress_price
            else:
                notes.append(f"island '{isl.name}': no GPU-hour price for '{isl.gpu.name}' in cost source "
                             f"'{isl.cost.name if isl.cost else 'none'}'; cost_usd is null")
        if total_cost is not None:
            total_cost = None if cost is None else total_cost + cost
        isl_reports.append({
            "name": isl.name,
            "gpus": g,
            "gpu": isl.gpu.name,
            "tokens_per_s": float(out["island_tokens_per_s"][row, j]),
            "step_time_s": float(out["island_step_s"][row, j]),
            "idle_fraction": max(0.0, float(out["island_idle_s"][row, j]) / step),
            "memory_per_gpu_gb": float(out["island_memory_gb"][row, j]),
            "cost_usd": cost,
            "batch_per_step": float(out["island_batch"][row, j]),
        })
    return Report(
        feasible=True, reasons=[], step_time_s=step, tokens_per_s=tps,
        tokens_per_s_per_gpu=float(out["tokens_per_s_per_gpu"][row]),
        model_tflops_per_gpu=float(out["model_tflops_per_gpu"][row]),
        hardware_tflops_per_gpu=float(out["hardware_tflops_per_gpu"][row]),
        mfu=float(out["mfu"][row]), hfu=float(out["hfu"][row]), memory_per_gpu_gb=mem, memory_capacity_gb=cap,
        compute_utilization=float(out["compute_utilization"][row]), wall_clock_s=wall, cost_usd=total_cost,
        bottleneck=bottleneck, regime=regime_of(bd), breakdown_s=bd, overlapped_s=ov, islands=isl_reports,
        gpus=gpus, params=float(out["params"][row]),
        model_flops_per_token=float(out["model_flops_per_token"][row]), notes=notes,
    )


def _fmt_int(x) -> str:
    x = float(x)
    return str(int(round(x))) if abs(x - round(x)) < 1e-9 else f"{x:.3g}"


def describe_bottleneck(report: Report) -> str:
    if not report.feasible or not report.bottleneck:
        return "infeasible"
    share = report.breakdown_s[report.bottleneck] / report.step_time_s
    return f"{report.bottleneck}: {_WORDS.get(report.bottleneck, report.bottleneck)}, {share:.0%} of the step"


np.seterr(all="ignore")
