"""Quality-adjusted figures: a report's time and cost to the loss data-parallel training reaches.

With ``[sync] convergence = "NAME"`` the report gains a ``quality`` object (``docs/convergence.md``)
computed from the report's own figures and the convergence part (``Resolved.convergence``):

* ``tokens_factor``: tokens the sync strategy needs to reach the loss that data-parallel
  training reaches with ``training.tokens``, over ``training.tokens`` (the part's ``terms``);
* ``tokens_to_quality`` = ``training.tokens x tokens_factor``; ``wall_clock_to_quality_s`` =
  ``wall_clock_s x tokens_factor``; ``cost_to_quality_usd`` = ``cost_usd x tokens_factor``
  (GPU time and egress both grow with the steps); null where the raw figure is null;
* ``effective_tokens_per_s`` = ``tokens_per_s / tokens_factor`` (data-parallel-equivalent);
* ``in_validity_range``, ``validity`` (the ranges the model's sources cover), ``outside`` (the
  inputs out of range), ``inputs`` (what the model read), ``model`` and ``source``.

With ``[training] critical_batch`` (:mod:`~shardmeter.report.batch_price`) the object also
carries ``batch`` (the global batch against the critical batch) and ``sync_tokens_factor`` (the
sync strategy's factor alone; 1 without a convergence model, ``model`` then ``"none"``), and
``tokens_factor`` is the product of the two: the tokens over those a small batch needs.

The raw figures are never changed. Without either model nothing here runs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shardmeter.model.convergence import convergence_inputs
from shardmeter.parts import ConvergencePart
from shardmeter.registry.guard import run_part
from shardmeter.report.batch_price import batch_figures

__all__ = ["quality_figures", "apply_quality"]

#: The assumption the report states when convergence is not priced (``words.assumption_notes``).
_NOT_PRICED = "convergence not priced"


def _scaled(x: float | None, factor: float) -> float | None:
    return None if x is None or not math.isfinite(factor) else x * factor


def _outside(inputs: dict[str, float], validity: dict[str, Any]) -> list[str]:
    out = []
    for key, rng in validity.items():
        if key not in inputs or not isinstance(rng, (list, tuple)) or len(rng) != 2:
            continue
        low, high = rng
        x = inputs[key]
        if x < low:
            out.append(f"{key} {x:g} < {low:g}")
        elif x > high:
            out.append(f"{key} {x:g} > {high:g}")
    return out


def quality_figures(res: Any, report: Any) -> dict[str, Any]:
    """The ``quality`` object of a feasible ``report`` of ``res`` (``{}`` without a convergence
    model and without a critical-batch model)."""
    from shardmeter.inputs.bundles import PartTable

    model: ConvergencePart | None = getattr(res, "convergence", None)
    if not report.feasible:
        return {}
    batch = batch_figures(res, report)
    if model is None and not batch:
        return {}
    table = PartTable()
    code = table.code("sync", res.sync, res.sync_options)
    replicas = float(len(res.islands))
    inp = convergence_inputs(table, np.array([code]), params=np.array([report.params]), replicas=replicas)
    local = bool(np.asarray(inp.local_steps).reshape(-1)[0])
    if model is not None:
        terms = run_part("convergence", model, "terms", inp, model.options())
        factor = float(np.asarray(terms.tokens_factor, dtype=float).reshape(-1)[0])
        in_range = bool(np.asarray(terms.in_range).reshape(-1)[0])
    else:  # the batch alone: the sync strategy is not priced
        factor, in_range = 1.0, True
    inputs = {
        "params": float(report.params),
        "replicas": replicas,
        **{
            k: float(np.asarray(getattr(inp, k)).reshape(-1)[0])
            for k in ("inner_steps", "compression_bits", "fragments", "overlap_steps")
        },
    }
    validity = model.validity() if model is not None else {}
    outside = [] if in_range or not local else _outside(inputs, validity)
    sync_factor = factor
    if batch:  # the batch's factor multiplies the sync strategy's (both count tokens)
        factor = sync_factor * batch["batch_factor"]
        outside = outside + [f"batch: {o}" for o in batch["outside"]]
        in_range = in_range and batch["in_validity_range"]
    tokens = res.scenario.training.tokens
    extra = {"sync_tokens_factor": sync_factor, "batch": batch} if batch else {}
    return {
        "model": model.name if model is not None else "none",
        "source": model.source if model is not None else "",
        "tokens_factor": factor,
        "tokens_to_quality": _scaled(float(tokens) if tokens else None, factor),
        "wall_clock_to_quality_s": _scaled(report.wall_clock_s, factor),
        "cost_to_quality_usd": _scaled(report.cost_usd, factor),
        "effective_tokens_per_s": report.tokens_per_s / factor if factor > 0 else None,
        "in_validity_range": in_range,
        "outside": outside,
        "validity": validity,
        "inputs": {**inputs, "local_steps": local},
        **extra,
    }


def apply_quality(res: Any, report: Any) -> None:
    """Add the ``quality`` object to ``report`` (in place), a note with its headline figures, a
    note when the plan lies outside the model's validity range, and drop the "convergence not
    priced" assumption (it is priced now). Nothing happens without a convergence model."""
    q = quality_figures(res, report)
    tr = res.scenario.training
    if report.feasible and tr.critical_batch != "none" and not tr.tokens:
        report.notes.append(
            f"training.critical_batch = '{tr.critical_batch}' is not priced: its target loss needs training.tokens"
        )
    if not q:
        return
    report.quality = q
    if q["model"] != "none":  # the sync strategy's convergence is priced now
        report.assumptions[:] = [a for a in report.assumptions if not a.startswith(_NOT_PRICED)]
    head = f"quality ({q['model']}): {q['tokens_factor']:.3f}x the tokens to reach the data-parallel loss"
    if q.get("batch"):
        b = q["batch"]
        head = (
            f"quality ({q['model']}, batch {b['model']}): {q['tokens_factor']:.3f}x the tokens a small "
            f"batch needs (batch {b['batch_tokens']:,.0f} tokens against a critical batch of "
            f"{b['critical_batch_tokens']:,.0f}: x{b['batch_factor']:.3f})"
        )
    if q["wall_clock_to_quality_s"] is not None:
        head += f"; {q['wall_clock_to_quality_s'] / 86400:.2f} days to quality"
    if q["cost_to_quality_usd"] is not None:
        head += f", {q['cost_to_quality_usd']:,.0f} USD"
    report.notes.append(head)
    if not q["in_validity_range"]:
        why = ", ".join(q["outside"]) or "this sync strategy is not one its sources cover"
        report.notes.append(
            f"quality: the plan lies outside the validity range of convergence model '{q['model']}'"
            + (f" or batch model '{q['batch']['model']}'" if q.get("batch") else "")
            + f" "
            f"({why}); the tokens factor is extrapolated"
        )
