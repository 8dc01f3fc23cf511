"""The report's reliability and variability fields (SCENARIO.md, "Failures, checkpoints and
variability"), from the report's own figures and the resolved failure and variability parts.

* ``step_time_p50_s``, ``step_time_p90_s``: the step's quantiles when ranks vary
  (:func:`shardmeter.model.variability.step_quantile`); without ``[variability]`` both are
  ``step_time_s``.
* ``checkpoint_s``, ``checkpoint_interval_s``: one checkpoint's stall and the seconds of work
  between two (:mod:`shardmeter.model.reliability`); null without ``[reliability]``.
* ``goodput``: the useful fraction of wall time (1 without ``[reliability]``).
* ``expected_wall_clock_s``: ``wall_clock_s`` at the step quantile ``[variability] quantile``
  (P50 by default), over ``goodput``; ``expected_cost_usd``: ``cost_usd`` scaled alike (every
  GPU is billed through restarts; egress is scaled the same way, an upper bound since a
  restart sends nothing). Null without ``training.tokens``.
* ``reliability``: the figures behind them (the job's MTBF and interruption rates, the
  checkpoint's size and write time, the restart, the expected interruptions over the run).

The raw ``step_time_s``, ``wall_clock_s`` and ``cost_usd`` are never changed.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from shardmeter.model.reliability import Checkpoint, checkpoint_bytes_per_param, checkpoint_terms, goodput
from shardmeter.model.variability import step_quantile
from shardmeter.parts import FailureInputs
from shardmeter.registry.guard import run_part
from shardmeter.resolve.resolver import Resolved

__all__ = ["apply_reliability", "job_reliability", "JobReliability", "step_at", "nodes_used"]


def nodes_used(res: Resolved) -> list[int]:
    """Each island's nodes that the plan runs on (``ceil(GPUs used / GPUs per node)``)."""
    return [math.ceil(isl.gpus_used / isl.gpus_per_node) for isl in res.islands]


@attrs.frozen
class JobReliability:
    """What :func:`job_reliability` finds for a batch of plans (arrays over its rows): the job's
    MTBF, unexpected and planned interruptions per hour, the restart, the checkpoint's bytes and
    its :class:`~shardmeter.model.reliability.Checkpoint`, and the ``goodput``."""

    mtbf_s: Any
    unexpected_per_h: Any
    planned_per_h: Any
    restart_s: Any
    checkpoint_bytes: Any
    checkpoint: Checkpoint
    goodput: Any


def job_reliability(res: Resolved, gpus_used: Any, params: Any) -> JobReliability:
    """The failures, checkpoint and goodput of plans that use ``gpus_used`` GPUs on each island
    (``(..., islands)``) of a model of ``params`` parameters (``(...)``), by the resolved
    failure part and ``[reliability]`` (module docstring of :mod:`shardmeter.model.reliability`):
    the plan runs on ``ceil(gpus / gpus_per_node)`` nodes of each island, each node's
    preemptions adding to the part's rate; the slowest island's write and host copy set the
    checkpoint's figures."""
    spec = res.scenario.reliability
    assert res.failures is not None and spec is not None
    gpn = np.array([isl.gpus_per_node for isl in res.islands], dtype=float)
    used = np.asarray(gpus_used, dtype=float)
    nodes = np.ceil(used / gpn - 1e-9)
    inp = FailureInputs(
        gpus=(nodes * gpn).sum(axis=-1), nodes=nodes.sum(axis=-1), gpus_per_node=float(gpn.max())
    )
    terms = run_part("failures", res.failures, "terms", inp, res.failure_options)
    pre = np.array([float(isl.preemption_per_h or 0.0) for isl in res.scenario.islands], dtype=float)
    unexpected = np.asarray(terms.failures_per_h, dtype=float) + (pre * nodes).sum(axis=-1)
    with np.errstate(divide="ignore"):
        mtbf = np.where(unexpected > 0, 3600.0 / np.where(unexpected > 0, unexpected, 1.0), np.inf)
    wb = 4.0 if res.scenario.training.precision in ("fp32", "tf32") else 2.0
    sync_state = res.sync.state_bytes_per_param(res.sync_options) if len(res.islands) > 1 else 0.0  # type: ignore[attr-defined]
    ckpt = checkpoint_bytes_per_param(wb, sync_state) * np.asarray(params, dtype=float)
    host = np.array([isl.gpu.host_link_gb_s * 1e9 for isl in res.islands], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        write = np.where(nodes > 0, ckpt[..., None] / (nodes * spec.checkpoint_write_gb_s * 1e9), 0.0).max(
            axis=-1
        )
        snap = np.where(used > 0, ckpt[..., None] / used / host, 0.0).max(axis=-1)
    ck = checkpoint_terms(
        write_s=write,
        snapshot_s=snap,
        async_checkpoint=spec.async_checkpoint,
        interval_s=spec.checkpoint_interval_s,
        restart_s=terms.restart_s,
        mtbf_s=mtbf,
    )
    planned = np.asarray(terms.planned_per_h, dtype=float)
    g = goodput(ck.interval_s, ck.stall_s, ck.restart_s, mtbf, planned / 3600.0)
    return JobReliability(mtbf, unexpected, planned, np.asarray(terms.restart_s, float), ckpt, ck, g)


def step_at(res: Resolved, step_s: Any, terms_s: Any, gpus: Any, islands: Any, q: float) -> Any:
    """The step's ``q``-quantile by the resolved variability part; ``step_s`` without one."""
    if res.variability is None:
        return step_s
    return step_quantile(step_s, terms_s, gpus, islands, q, res.variability, res.variability_options)  # type: ignore[arg-type]


def _quantiles(res: Resolved, report: Any) -> tuple[float, float, float]:
    """``(p50, p90, at the [variability] quantile)`` of the step."""
    step = report.step_time_s
    spec = res.scenario.variability
    if res.variability is None or spec is None:
        return step, step, step
    isl = float(sum(1 for i in res.islands if i.gpus_used > 0))

    def at(p: float) -> float:
        return float(step_at(res, step, report.breakdown_s, float(report.gpus), isl, p))

    return at(0.5), at(0.9), at(spec.quantile)


def apply_reliability(res: Resolved, report: Any) -> None:
    """Set the fields of the module docstring on a feasible ``report``."""
    p50, p90, pq = _quantiles(res, report)
    report.step_time_p50_s, report.step_time_p90_s = p50, p90
    g = 1.0
    if res.failures is not None:
        used = np.array([isl.gpus_used for isl in res.islands], dtype=float)
        jr = job_reliability(res, used, np.asarray(report.params))
        g = float(jr.goodput)
        report.checkpoint_s = float(jr.checkpoint.stall_s)
        report.checkpoint_interval_s = float(jr.checkpoint.interval_s)
        report.reliability = {
            "model": res.failures.name,
            "source": res.failures.source,
            "job_mtbf_h": float(jr.mtbf_s) / 3600.0,
            "interruptions_per_day": float(jr.unexpected_per_h) * 24.0,
            "planned_per_day": float(jr.planned_per_h) * 24.0,
            "restart_s": float(jr.restart_s),
            "checkpoint_gb": float(jr.checkpoint_bytes) / 1e9,
            "checkpoint_write_s": float(jr.checkpoint.write_s),
            "async_checkpoint": bool(res.scenario.reliability.async_checkpoint),  # type: ignore[union-attr]
        }
    report.goodput = g
    if report.wall_clock_s is None:
        return
    wall = report.wall_clock_s * pq / report.step_time_s
    report.expected_wall_clock_s = wall / g if g > 0 else math.inf
    if report.cost_usd is not None:
        report.expected_cost_usd = report.cost_usd * report.expected_wall_clock_s / report.wall_clock_s
    if res.failures is not None:
        days = report.expected_wall_clock_s / 86400.0
        r = report.reliability
        r["expected_interruptions"] = (r["interruptions_per_day"] + r["planned_per_day"]) * days
        r["expected_unexpected"] = r["interruptions_per_day"] * days
        r["expected_planned"] = r["planned_per_day"] * days
