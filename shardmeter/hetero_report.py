"""The :class:`~shardmeter.report.stage_groups.PipelineReport` of an evaluated heterogeneous
pipeline (:func:`shardmeter.hetero.run_pipeline`): its figures, breakdown, reasons and cost."""

from __future__ import annotations

import math
from typing import Any

from shardmeter.hetero import PipelineResult, PipelineSetup
from shardmeter.load.stage_groups import group_gpus_per_replica
from shardmeter.model.feasibility import reason_messages
from shardmeter.model.flops import model_flops
from shardmeter.report.pricing import egress_usd_per_gb, gpu_hour_usd
from shardmeter.report.stage_groups import BoundaryReport, PipelineReport, StageGroupReport

__all__ = ["pipeline_report"]

#: Breakdown terms and the regime each makes the largest into (docs/scenario.md's words).
_REGIMES = {
    "compute": "compute-bound",
    "memory_ops": "memory-bound",
    "tp_comm": "communication-bound",
    "offload": "memory-bound",
    "pp_bubble": "bubble-bound",
    "pp_comm": "communication-bound",
    "dp_comm": "communication-bound",
    "optimizer": "memory-bound",
}


def _num(x: Any) -> float:
    import numpy as np

    return float(np.asarray(x).reshape(-1)[0])


def pipeline_report(setup: PipelineSetup, result: PipelineResult) -> PipelineReport:
    """The report of one evaluated pipeline (see :class:`~shardmeter.report.stage_groups.PipelineReport`)."""
    sc, step = setup.scenario, result.step
    msgs = _reasons(setup, result)
    gpus_of = [group_gpus_per_replica(g.spec, sc.parallelism) * setup.dp for g in setup.groups]
    gpus = sum(gpus_of)
    first = setup.groups[0].inputs
    flops = model_flops(first.model, first.training)
    peak = sum(n * _num(g.inputs.hardware.peak_flops) for n, g in zip(gpus_of, setup.groups, strict=True))
    m = _num(result.stages[0].micro_batches)
    pacing = int(_num(step.pacing_stage))
    groups = _groups(setup, result, pacing)
    worst = max(groups, key=lambda g: g.memory_reserved_gb / g.memory_capacity_gb)
    common: dict[str, Any] = {
        "memory_per_gpu_gb": worst.memory_per_gpu_gb,
        "memory_reserved_gb": worst.memory_reserved_gb,
        "memory_capacity_gb": worst.memory_capacity_gb,
        "gpus": gpus,
        "params": _num(flops.params),
        "model_flops_per_token": _num(flops.model_flops_per_token),
        "dp": setup.dp,
        "micro_batch": setup.groups[0].spec.micro_batch or sc.training.micro_batch,
        "micro_batches": int(m),
        "groups": groups,
        "boundaries": _boundaries(setup, result),
        "notes": sc.notes,
    }
    if msgs:
        return PipelineReport(
            feasible=False,
            reasons=msgs,
            step_time_s=None,
            tokens_per_s=None,
            tokens_per_s_per_gpu=None,
            model_tflops_per_gpu=None,
            hardware_tflops_per_gpu=None,
            mfu=None,
            hfu=None,
            compute_utilization=None,
            bottleneck=None,
            regime=None,
            wall_clock_s=None,
            cost_usd=None,
            breakdown_s={},
            **common,
        )
    step_s = _num(step.step_s)
    tps = sc.training.global_batch * sc.model.seq_len / step_s
    pc = result.stages[pacing]
    terms = {
        "compute": m * _num(pc.compute_s),
        "memory_ops": m * _num(pc.memory_ops_s),
        "tp_comm": m * _num(pc.tp_comm_s),
        "offload": m * _num(pc.offload_s),
        "pp_bubble": _num(step.bubble_s),
        "pp_comm": _num(step.p2p_s),
        "dp_comm": _num(step.dp_comm_s) + m * _num(pc.fsdp_s),
        "optimizer": _num(step.optimizer_s),
    }
    breakdown = {k: v for k, v in terms.items() if v > 0}
    largest = max(breakdown, key=lambda k: breakdown[k])
    busy, r = 0.0, 0
    for n, g in zip(gpus_of, setup.groups, strict=True):
        busy += sum(
            n / g.spec.stages * m * _num(c.micro_batch_s) for c in result.stages[r : r + g.spec.stages]
        )
        r += g.spec.stages
    wall = sc.training.tokens / tps if sc.training.tokens else None
    return PipelineReport(
        feasible=True,
        reasons=(),
        step_time_s=step_s,
        tokens_per_s=tps,
        tokens_per_s_per_gpu=tps / gpus,
        model_tflops_per_gpu=tps * _num(flops.model_flops_per_token) / gpus / 1e12,
        hardware_tflops_per_gpu=tps * _num(flops.hardware_flops_per_token) / gpus / 1e12,
        mfu=tps * _num(flops.model_flops_per_token) / peak,
        hfu=tps * _num(flops.hardware_flops_per_token) / peak,
        compute_utilization=min(1.0, busy / (gpus * step_s)),
        bottleneck=largest,
        regime=_REGIMES[largest],
        wall_clock_s=wall,
        cost_usd=_cost(setup, result, wall, step_s),
        breakdown_s=breakdown,
        **common,
    )


def _groups(setup: PipelineSetup, result: PipelineResult, pacing: int) -> tuple[StageGroupReport, ...]:
    out, r = [], 0
    for g in setup.groups:
        cs = result.stages[r : r + g.spec.stages]
        out.append(
            StageGroupReport(
                name=g.spec.name,
                island=g.island.name,
                gpu=g.island.gpu.name,
                stages=g.spec.stages,
                tp=g.tp,
                gpus=group_gpus_per_replica(g.spec, setup.scenario.parallelism) * setup.dp,
                layers=tuple(g.spec.layers),
                stage_time_s=tuple(_num(c.micro_batch_s) for c in cs),
                memory_per_gpu_gb=max(_num(c.memory_bytes) for c in cs) / 1e9,
                memory_reserved_gb=max(_num(c.memory_reserved_bytes) for c in cs) / 1e9,
                memory_capacity_gb=g.island.gpu.memory_gb,
                pacing=r <= pacing < r + g.spec.stages,
            )
        )
        r += g.spec.stages
    return tuple(out)


def _boundaries(setup: PipelineSetup, result: PipelineResult) -> tuple[BoundaryReport, ...]:
    out, r = [], 0
    for k, (a, b) in enumerate(zip(setup.groups, setup.groups[1:], strict=False)):
        r += a.spec.stages
        link = setup.links[k]
        name = link[0] if link is not None else f"inside {a.island.name}"
        out.append(
            BoundaryReport(between=(a.spec.name, b.spec.name), link=name, send_s=_num(result.sends[r - 1]))
        )
    return tuple(out)


def _cost(setup: PipelineSetup, result: PipelineResult, wall: float | None, step_s: float) -> float | None:
    """Every GPU of the islands used, for the wall-clock (``report.pricing``), and the
    activations and their gradients each island sends across a site link: ``m x dp``
    activations a step each way per boundary, at the sending island's egress price. ``None``
    without ``training.tokens`` or with a price unknown."""
    if wall is None:
        return None
    used = {g.island.name: g.island for g in setup.groups}
    gpu_usd = sum(isl.gpus * gpu_hour_usd(isl) for isl in used.values()) * wall / 3600.0
    steps = wall / step_s
    per_send_gb = (
        _num(result.stages[0].activation_bytes) * setup.dp * _num(result.stages[0].micro_batches) / 1e9
    )
    egress = 0.0
    for k, (a, b) in enumerate(zip(setup.groups, setup.groups[1:], strict=False)):
        if setup.links[k] is None:
            continue
        net = setup.network
        egress += per_send_gb * steps * (egress_usd_per_gb(a.island, net) + egress_usd_per_gb(b.island, net))
    total = gpu_usd + egress
    return total if math.isfinite(total) else None


def _reasons(setup: PipelineSetup, result: PipelineResult) -> tuple[str, ...]:
    """Each group's reason bits as one-line messages naming the group and the key."""
    out: list[str] = []
    r = 0
    ms = setup.scenario.model
    for k, g in enumerate(setup.groups):
        cs = result.stages[r : r + g.spec.stages]
        r += g.spec.stages
        bits = 0
        for c in cs:
            bits |= int(_num(c.reasons))
        values = {
            "tp": g.tp,
            "heads": ms.heads,
            "mem_gb": max(_num(c.memory_reserved_bytes) for c in cs) / 1e9,
            "cap_gb": g.island.gpu.memory_gb,
            "bi": setup.scenario.training.global_batch,
            "mbs_dp": (g.spec.micro_batch or setup.scenario.training.micro_batch) * setup.dp,
        }
        for key, msg in reason_messages(bits, values):
            key = {"parallelism.tp": "tp", "island[{j}].gpu.memory_gb": "layers"}.get(key, key)
            out.append(f"stage_group[{k}] ({g.spec.name}) {key}: {msg}")
    return tuple(out)
