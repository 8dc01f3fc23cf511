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

The raw figures are never changed. Without a convergence model nothing here runs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .model.ops import Array
from .parts import ConvergenceInputs, ConvergencePart

__all__ = ["quality_figures", "apply_quality", "sync_hyperparameters", "convergence_inputs"]

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


def sync_hyperparameters(sync: Any, opts: Any) -> dict[str, float]:
    """What a convergence model reads of one sync (part, options) pair: a strategy with an
    ``inner_steps`` option is DiLoCo-family (``local_steps`` 1.0), anything else synchronises
    every step (H = 1, 16 bits, one fragment, no overlap). ``overlap_steps = -1`` resolves as
    :class:`~shardmeter.strategies.sync.DiLoCo` does: 1 with fragments, else 0."""
    if not hasattr(opts, "inner_steps"):
        return {
            "local_steps": 0.0,
            "inner_steps": 1.0,
            "compression_bits": 16.0,
            "fragments": 1.0,
            "overlap_steps": 0.0,
        }
    frags = float(getattr(opts, "fragments", 1))
    tau = float(getattr(opts, "overlap_steps", 0))
    return {
        "local_steps": 1.0,
        "inner_steps": float(opts.inner_steps),
        "compression_bits": float(getattr(opts, "compression_bits", 16)),
        "fragments": frags,
        "overlap_steps": (1.0 if frags > 1 else 0.0) if tau < 0 else tau,
    }


def convergence_inputs(table: Any, sync_codes: Array, *, params: Array, replicas: Array) -> ConvergenceInputs:
    """The :class:`~shardmeter.parts.ConvergenceInputs` of a batch: each plan's sync
    hyperparameters gathered from its code in ``table`` (a ``PartTable``), with ``params`` and
    ``replicas`` (one island: synchronous whatever the strategy, as the sync part is unused)."""
    codes = np.asarray(sync_codes, dtype=np.intp)
    pairs = table.entries["sync"]
    hyper = [sync_hyperparameters(p, o) for p, o in pairs] or [sync_hyperparameters(None, None)]
    cols = {k: np.array([h[k] for h in hyper])[codes] for k in hyper[0]}
    m = np.asarray(replicas, dtype=float)
    cols["local_steps"] = (cols["local_steps"] > 0) & (m > 1)
    return ConvergenceInputs(params=np.asarray(params, dtype=float), replicas=m, **cols)


def quality_figures(res: Any, report: Any) -> dict[str, Any]:
    """The ``quality`` object of a feasible ``report`` of ``res`` (``{}`` without a model)."""
    from .model.inputs import PartTable

    model: ConvergencePart | None = getattr(res, "convergence", None)
    if model is None or not report.feasible:
        return {}
    table = PartTable()
    code = table.code("sync", res.sync, res.sync_options)
    replicas = float(len(res.islands))
    inp = convergence_inputs(table, np.array([code]), params=np.array([report.params]), replicas=replicas)
    terms = model.terms(inp, model.options())
    factor = float(np.asarray(terms.tokens_factor, dtype=float).reshape(-1)[0])
    in_range = bool(np.asarray(terms.in_range).reshape(-1)[0])
    local = bool(np.asarray(inp.local_steps).reshape(-1)[0])
    inputs = {
        "params": float(report.params),
        "replicas": replicas,
        **{
            k: float(np.asarray(getattr(inp, k)).reshape(-1)[0])
            for k in ("inner_steps", "compression_bits", "fragments", "overlap_steps")
        },
    }
    validity = model.validity()
    tokens = res.scenario.training.tokens
    return {
        "model": model.name,
        "source": model.source,
        "tokens_factor": factor,
        "tokens_to_quality": _scaled(float(tokens) if tokens else None, factor),
        "wall_clock_to_quality_s": _scaled(report.wall_clock_s, factor),
        "cost_to_quality_usd": _scaled(report.cost_usd, factor),
        "effective_tokens_per_s": report.tokens_per_s / factor if factor > 0 else None,
        "in_validity_range": in_range,
        "outside": [] if in_range or not local else _outside(inputs, validity),
        "validity": validity,
        "inputs": {**inputs, "local_steps": local},
    }


def apply_quality(res: Any, report: Any) -> None:
    """Add the ``quality`` object to ``report`` (in place), a note with its headline figures, a
    note when the plan lies outside the model's validity range, and drop the "convergence not
    priced" assumption (it is priced now). Nothing happens without a convergence model."""
    q = quality_figures(res, report)
    if not q:
        return
    report.quality = q
    report.assumptions[:] = [a for a in report.assumptions if not a.startswith(_NOT_PRICED)]
    head = f"quality ({q['model']}): {q['tokens_factor']:.3f}x the tokens to reach the data-parallel loss"
    if q["wall_clock_to_quality_s"] is not None:
        head += f"; {q['wall_clock_to_quality_s'] / 86400:.2f} days to quality"
    if q["cost_to_quality_usd"] is not None:
        head += f", {q['cost_to_quality_usd']:,.0f} USD"
    report.notes.append(head)
    if not q["in_validity_range"]:
        why = ", ".join(q["outside"]) or "this sync strategy is not one its sources cover"
        report.notes.append(
            f"quality: the plan lies outside the validity range of convergence model '{q['model']}' "
            f"({why}); the tokens factor is extrapolated"
        )
