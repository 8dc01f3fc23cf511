"""The report of a heterogeneous pipeline (``[[stage_group]]``): the step, its terms, and each
stage group's GPUs, layers, stage times and memory (:class:`PipelineReport`), as JSON and text."""

from __future__ import annotations

from typing import Any

import attrs

from shardmeter.tables import render_table

__all__ = ["StageGroupReport", "BoundaryReport", "PipelineReport"]


@attrs.frozen(kw_only=True)
class StageGroupReport:
    """One stage group: its ``island`` and ``gpu``, ``stages``, ``tp``, ``gpus`` (all replicas),
    each stage's ``layers`` and ``stage_time_s`` (forward + backward of one micro-batch), its
    busiest GPU's ``memory_per_gpu_gb`` and ``memory_reserved_gb``, ``memory_capacity_gb`` and
    whether it holds the ``pacing`` (slowest) stage."""

    name: str
    island: str
    gpu: str
    stages: int
    tp: int
    gpus: int
    layers: tuple[int, ...]
    stage_time_s: tuple[float, ...]
    memory_per_gpu_gb: float
    memory_reserved_gb: float
    memory_capacity_gb: float
    pacing: bool


@attrs.frozen(kw_only=True)
class BoundaryReport:
    """The boundary between two consecutive groups: the ``link`` joining them and one send's
    seconds (``send_s``, one micro-batch's activation or its gradient)."""

    between: tuple[str, str]
    link: str
    send_s: float


@attrs.frozen(kw_only=True)
class PipelineReport:
    """A heterogeneous pipeline's prediction, with the report fields of ``docs/scenario.md``
    that apply: ``step_time_s`` and its ``breakdown_s`` (the pacing stage's ``compute``,
    ``memory_ops``, ``tp_comm`` and ``offload`` over ``m`` micro-batches, ``pp_bubble`` =
    ``sum t_i - max t_i``, ``pp_comm``, ``dp_comm``, ``optimizer``; zero terms left out, adding
    up to the step), throughput, model and hardware TFLOP/s per GPU, MFU and HFU over every
    GPU's own peak, ``compute_utilization`` (the GPU-weighted share of the step each stage
    works, ``m t_i / step``), the busiest GPU's memory, ``bottleneck`` and ``regime``,
    ``wall_clock_s`` and ``cost_usd`` (GPU-hours of every GPU of the islands used, and the
    activations sent between islands at their egress price) for ``training.tokens``, the
    ``micro_batches`` per step, ``dp`` pipeline replicas, each ``group`` and ``boundary``.
    Infeasible: the figures are ``None`` and ``reasons`` says why."""

    feasible: bool
    reasons: tuple[str, ...]
    step_time_s: float | None
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    model_tflops_per_gpu: float | None
    hardware_tflops_per_gpu: float | None
    mfu: float | None
    hfu: float | None
    compute_utilization: float | None
    memory_per_gpu_gb: float
    memory_reserved_gb: float
    memory_capacity_gb: float
    bottleneck: str | None
    regime: str | None
    wall_clock_s: float | None
    cost_usd: float | None
    gpus: int
    params: float
    model_flops_per_token: float
    dp: int
    micro_batch: int
    micro_batches: int
    breakdown_s: dict[str, float]
    groups: tuple[StageGroupReport, ...]
    boundaries: tuple[BoundaryReport, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return attrs.asdict(self)

    def __str__(self) -> str:
        stages = sum(g.stages for g in self.groups)
        head = [
            f"heterogeneous pipeline: {stages} stages in {len(self.groups)} stage groups x {self.dp} "
            f"replicas, {self.gpus} GPUs"
        ]
        if self.step_time_s is None or self.tokens_per_s is None or self.mfu is None:
            head += [f"INFEASIBLE: {r}" for r in self.reasons]
        else:
            head += [
                f"step time        {self.step_time_s:.4g} s  ({self.micro_batches} micro-batches of "
                f"{self.micro_batch} per replica)",
                f"throughput       {self.tokens_per_s:,.0f} tokens/s  ({self.tokens_per_s_per_gpu:,.1f} per GPU)",
                f"MFU              {100 * self.mfu:.1f} %  (of every GPU's own peak)",
                "breakdown        " + ", ".join(f"{k} {v:.4g} s" for k, v in self.breakdown_s.items()),
                f"bottleneck       {self.bottleneck} ({self.regime})",
            ]
            if self.wall_clock_s is not None:
                head.append(f"wall-clock       {self.wall_clock_s / 86400:.3g} days")
            if self.cost_usd is not None:
                head.append(f"cost             ${self.cost_usd:,.0f}")
        rows = [
            [
                g.name + (" *" if g.pacing else ""),
                g.island,
                g.gpu,
                str(g.stages),
                str(g.tp),
                str(g.gpus),
                "/".join(str(x) for x in g.layers),
                "/".join(f"{t * 1e3:.1f}" for t in g.stage_time_s),
                f"{g.memory_reserved_gb:.1f} / {g.memory_capacity_gb:.0f}",
            ]
            for g in self.groups
        ]
        table = render_table(
            ["group", "island", "gpu", "stages", "tp", "gpus", "layers", "stage ms", "GB reserved"], rows
        )
        links = [
            f"{b.between[0]} -> {b.between[1]}: {b.link}, {b.send_s * 1e3:.3g} ms a send"
            for b in self.boundaries
        ]
        notes = [f"note: {n}" for n in self.notes]
        return "\n".join([*head, table, *links, "(* holds the slowest stage)", *notes])
