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
    """A heterogeneous pipeline's prediction: ``step_time_s`` and its ``breakdown_s``
    (``pipeline_s`` = ``sum t_i + (m - 1) max t_i``, of which ``bubble_s``; ``pp_comm_s``,
    ``dp_comm_s``, ``optimizer_s``), throughput, MFU over every GPU's own peak, the
    ``micro_batches`` per step, ``dp`` pipeline replicas, each ``group`` and ``boundary``."""

    feasible: bool
    reasons: tuple[str, ...]
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    gpus: int
    dp: int
    micro_batch: int
    micro_batches: int
    breakdown_s: dict[str, float]
    groups: tuple[StageGroupReport, ...]
    boundaries: tuple[BoundaryReport, ...]
    wall_clock_s: float | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json`` (tuples as lists)."""
        return attrs.asdict(self)

    def __str__(self) -> str:
        head = [
            f"heterogeneous pipeline: {sum(g.stages for g in self.groups)} stages in "
            f"{len(self.groups)} stage groups x {self.dp} replicas, {self.gpus} GPUs"
            + ("" if self.feasible else "  INFEASIBLE: " + "; ".join(self.reasons)),
            f"step time        {self.step_time_s:.4g} s  ({self.micro_batches} micro-batches of {self.micro_batch})",
            f"throughput       {self.tokens_per_s:,.0f} tokens/s  ({self.tokens_per_s_per_gpu:,.1f} per GPU)",
            f"MFU              {100 * self.mfu:.1f} %  (of every GPU's own peak)",
            "breakdown        " + ", ".join(f"{k} {v:.4g} s" for k, v in self.breakdown_s.items()),
        ]
        if self.wall_clock_s is not None:
            head.append(f"wall-clock       {self.wall_clock_s / 86400:.3g} days")
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
