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

from shardmeter.model.reliability import checkpoint_bytes_per_param, checkpoint_terms, goodput
from shardmeter.model.variability import step_quantile
from shardmeter.parts import FailureInputs
from shardmeter.resolve.resolver import Resolved

__all__ = ["apply_reliability", "job_rates", "nodes_used"]


def nodes_used(res: Resolved) -> list[int]:
    """Each island's nodes that the plan runs on (``ceil(GPUs used / GPUs per node)``)."""
    return [math.ceil(isl.gpus_used / isl.gpus_per_node) for isl in res.islands]


def job_rates(res: Resolved, nodes: list[int]) -> tuple[float, float, float]:
    """``(unexpected, planned, restart_s)``: the job's interruptions per hour (the failure part's
    plus every island's ``preemption_per_h x nodes``), planned stops per hour, and the restart."""
    assert res.failures is not None
    gpn = [isl.gpus_per_node for isl in res.islands]
    gpus = float(sum(n * g for n, g in zip(nodes, gpn, strict=True)))
    inp = FailureInputs(gpus=gpus, nodes=float(sum(nodes)), gpus_per_node=float(max(gpn)))
    terms = res.failures.terms(inp, res.failure_options)  # type: ignore[attr-defined]
    sc = res.scenario
    preempt = sum(float(isl.preemption_per_h or 0.0) * n for isl, n in zip(sc.islands, nodes, strict=True))
    return float(terms.failures_per_h) + preempt, float(terms.planned_per_h), float(terms.restart_s)


def _quantiles(res: Resolved, report: Any) -> tuple[float, float, float]:
    """``(p50, p90, at the [variability] quantile)`` of the step."""
    step = report.step_time_s
    spec = res.scenario.variability
    if res.variability is None or spec is None:
        return step, step, step
    q = spec.quantile
    isl = float(sum(1 for i in res.islands if i.gpus_used > 0))

    def at(p: float) -> float:
        part, opts = res.variability, res.variability_options
        return float(step_quantile(step, report.breakdown_s, float(report.gpus), isl, p, part, opts))  # type: ignore[arg-type]

    return at(0.5), at(0.9), at(q)


def _checkpoint(res: Resolved, report: Any, nodes: list[int], mtbf_s: float, restart_s: float):
    """The checkpoint's bytes per island, and its :class:`~shardmeter.model.reliability.Checkpoint`."""
    spec = res.scenario.reliability
    assert spec is not None
    wb = 4.0 if res.scenario.training.precision in ("fp32", "tf32") else 2.0
    sync_state = res.sync.state_bytes_per_param(res.sync_options) if len(res.islands) > 1 else 0.0  # type: ignore[attr-defined]
    ckpt_bytes = float(checkpoint_bytes_per_param(wb, sync_state)) * report.params
    used = [(isl, n) for isl, n in zip(res.islands, nodes, strict=True) if n > 0]
    write_s = max(ckpt_bytes / (n * spec.checkpoint_write_gb_s * 1e9) for _, n in used)
    snapshot_s = max(ckpt_bytes / isl.gpus_used / (isl.gpu.host_link_gb_s * 1e9) for isl, _ in used)
    ck = checkpoint_terms(
        write_s=write_s,
        snapshot_s=snapshot_s,
        async_checkpoint=spec.async_checkpoint,
        interval_s=spec.checkpoint_interval_s,
        restart_s=restart_s,
        mtbf_s=mtbf_s,
    )
    return ckpt_bytes, ck


def apply_reliability(res: Resolved, report: Any) -> None:
    """Set the fields of the module docstring on a feasible ``report``."""
    p50, p90, pq = _quantiles(res, report)
    report.step_time_p50_s, report.step_time_p90_s = p50, p90
    g = 1.0
    if res.failures is not None:
        nodes = nodes_used(res)
        unexpected_h, planned_h, restart_s = job_rates(res, nodes)
        mtbf_s = 3600.0 / unexpected_h if unexpected_h > 0 else math.inf
        ckpt_bytes, ck = _checkpoint(res, report, nodes, mtbf_s, restart_s)
        g = float(goodput(ck.interval_s, ck.stall_s, ck.restart_s, mtbf_s, planned_h / 3600.0))
        report.checkpoint_s = float(ck.stall_s)
        report.checkpoint_interval_s = float(ck.interval_s)
        report.reliability = {
            "model": res.failures.name,
            "source": res.failures.source,
            "job_mtbf_h": mtbf_s / 3600.0,
            "interruptions_per_day": unexpected_h * 24.0,
            "planned_per_day": planned_h * 24.0,
            "restart_s": restart_s,
            "checkpoint_gb": ckpt_bytes / 1e9,
            "checkpoint_write_s": float(ck.write_s),
            "async_checkpoint": res.scenario.reliability.async_checkpoint,  # type: ignore[union-attr]
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
