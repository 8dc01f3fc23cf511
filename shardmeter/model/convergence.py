"""A convergence part run over a batch of plans: what it reads of each plan's sync strategy, and
its tokens factor (``docs/convergence.md``). The host side of :class:`~shardmeter.parts.ConvergencePart`:
the report's ``quality`` object and the planner's to-quality objectives both call it."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardmeter.inputs.bundles import PartTable
from shardmeter.numeric.ops import Array
from shardmeter.parts import ConvergenceInputs, ConvergencePart, SyncHyperparameters, SyncPart
from shardmeter.registry.guard import run_part

__all__ = ["sync_hyperparameters", "convergence_inputs", "tokens_factor"]


def sync_hyperparameters(sync: SyncPart | None, opts: Any) -> dict[str, float]:
    """What a convergence model reads of one sync (part, options) pair, as the part declares it
    (:meth:`~shardmeter.parts.SyncPart.hyperparameters`; a synchronous strategy's by default:
    H = 1, 16 bits, one fragment, no overlap), as floats; ``sync`` None (a batch with no sync
    part): synchronous."""
    h = SyncHyperparameters() if sync is None else sync.hyperparameters(opts)
    return {
        "local_steps": 1.0 if h.local_steps else 0.0,
        "inner_steps": float(h.inner_steps),
        "compression_bits": float(h.compression_bits),
        "fragments": float(h.fragments),
        "overlap_steps": float(h.overlap_steps),
    }


def convergence_inputs(
    table: PartTable, sync_codes: Array, *, params: Array, replicas: Array
) -> ConvergenceInputs:
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
    model: ConvergencePart,
    table: PartTable,
    sync_codes: Array,
    *,
    params: Array,
    replicas: Array,
    opts: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(factor, in_range)`` of every plan (module docstring, "For the planner")."""
    inp = convergence_inputs(table, sync_codes, params=params, replicas=replicas)
    terms = run_part("convergence", model, "terms", inp, opts if opts is not None else model.options())
    shape = np.broadcast_shapes(np.shape(sync_codes), np.shape(params), np.shape(replicas))
    factor = np.broadcast_to(np.asarray(terms.tokens_factor, dtype=float), shape)
    return factor, np.broadcast_to(np.asarray(terms.in_range, dtype=bool), shape)
