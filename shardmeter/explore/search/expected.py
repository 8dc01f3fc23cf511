"""The ``expected-time``, ``expected-cost`` and ``p90-time`` objectives of ``plan``: plans ranked
by the report's ``expected_wall_clock_s`` / ``expected_cost_usd`` (failures, checkpoints,
preemption and stragglers) or its ``step_time_p90_s``.

A candidate's figure is its raw time or cost times :func:`expected_factor`: the step at the
objective's quantile over the raw step (``[variability] quantile`` for the expected objectives,
0.9 for ``p90-time``; 1 without ``[variability]``), over the goodput of the nodes it runs on
(1 without ``[reliability]``, and for ``p90-time``), computed by the same functions the report
uses (:mod:`shardmeter.report.reliability`). Goodput depends on a plan's GPUs per island and
the model's parameters only, so the per-island planner ranks its classes' optima by it too
(:func:`class_factor`); the quantile of the step needs each candidate's breakdown, which the
per-island planner does not keep: there ``[variability]`` is refused with one line.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from shardmeter.errors import ShardMeterError
from shardmeter.model.outputs import Outputs
from shardmeter.report.reliability import job_reliability, step_at

__all__ = [
    "EXPECTED_OBJECTIVES",
    "Expected",
    "expected_context",
    "expected_factor",
    "class_factor",
    "check_per_island",
]

#: Objective -> the raw figure it scales.
EXPECTED_OBJECTIVES = {"expected-time": "time", "expected-cost": "cost", "p90-time": "time"}


@attrs.frozen
class Expected:
    """What every candidate of an expected objective shares: the resolved scenario, the step
    quantile ``q`` (None: the raw step), whether goodput applies, and the model's parameters."""

    res: Any
    q: float | None
    failures: bool
    params: float


def expected_context(res: Any, objective: str, params: float) -> Expected | None:
    """The context of an expected ``objective`` (None for any other)."""
    if objective not in EXPECTED_OBJECTIVES:
        return None
    spec = res.scenario.variability
    if objective == "p90-time":
        q = 0.9 if res.variability is not None else None
    else:
        q = spec.quantile if res.variability is not None and spec is not None else None
    return Expected(res, q, res.failures is not None and objective != "p90-time", float(params))


def expected_factor(ctx: Expected, out: Outputs) -> np.ndarray | float:
    """Each candidate's expected figure over its raw one (module docstring); ``out`` is a batch
    of one row per candidate (``island.gpus`` ``(rows, islands)``), with its breakdown when the
    step's quantile is needed."""
    step = np.asarray(out.step_time_s, dtype=float)
    gpus = np.asarray(out.island.gpus, dtype=float)
    factor: np.ndarray | float = 1.0
    if ctx.q is not None:
        assert out.breakdown is not None  # evaluated with detail
        terms = {k: np.asarray(v, dtype=float) for k, v in out.breakdown.terms().items()}
        islands = np.count_nonzero(gpus > 0, axis=-1).astype(float)
        with np.errstate(all="ignore"):
            factor = np.asarray(step_at(ctx.res, step, terms, gpus.sum(axis=-1), islands, ctx.q)) / step
    if ctx.failures:
        g = np.asarray(job_reliability(ctx.res, gpus, np.full(step.shape, ctx.params)).goodput)
        with np.errstate(divide="ignore"):
            factor = factor / g
    return factor


def class_factor(ctx: Expected, gpus_per_island: list[float]) -> float:
    """The factor of one class of the per-island planner, from its GPUs per island (goodput
    only; :func:`check_per_island` refuses a step quantile there)."""
    if not ctx.failures:
        return 1.0
    g = job_reliability(ctx.res, np.array([gpus_per_island], float), np.array([ctx.params])).goodput
    return float(1.0 / np.asarray(g).reshape(-1)[0])


def check_per_island(ctx: Expected | None, objective: str) -> None:
    """The per-island planner keeps no candidate's breakdown: a step quantile is refused there."""
    if ctx is not None and ctx.q is not None:
        raise ShardMeterError(
            f"plan --objective {objective} with [variability]: the per-island planner keeps no breakdown "
            "to price stragglers; use --layouts shared, or drop [variability]"
        )
