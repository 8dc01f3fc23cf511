"""A convergence part run over a batch of plans: what it reads of each plan's sync strategy, and
its tokens factor (``docs/convergence.md``). The host side of :class:`~shardmeter.parts.ConvergencePart`:
the report's ``quality`` object and the planner's to-quality objectives both call it."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardmeter.numeric.ops import Array
from shardmeter.parts import ConvergenceInputs, ConvergencePart

__all__ = ["sync_hyperparameters", "convergence_inputs", "tokens_factor"]


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


def tokens_factor(
    model: ConvergencePart, table: Any, sync_codes: Array, *, params: Array, replicas: Array, opts: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(factor, in_range)`` of every plan (module docstring, "For the planner")."""
    inp = convergence_inputs(table, sync_codes, params=params, replicas=replicas)
    terms = model.terms(inp, opts if opts is not None else model.options())
    shape = np.broadcast_shapes(np.shape(sync_codes), np.shape(params), np.shape(replicas))
    factor = np.broadcast_to(np.asarray(terms.tokens_factor, dtype=float), shape)
    return factor, np.broadcast_to(np.asarray(terms.in_range, dtype=bool), shape)
