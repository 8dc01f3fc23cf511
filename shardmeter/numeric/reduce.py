"""Reductions over the island axis (the last): islands are few, so a short loop of whole-array
operations over ``x[..., i]`` beats numpy's reduction along a 2-3 element inner axis by an
order of magnitude; many islands use the ufunc's own reduction."""

from __future__ import annotations

import numpy as np

from shardmeter.numeric.ops import Array

__all__ = ["over_islands"]

#: Above this many islands numpy's own reduction is used.
_LOOP_MAX = 16


def over_islands(op: np.ufunc, x: Array, keepdims: bool = True) -> Array:
    """``op.reduce(x, axis=-1)`` (e.g. ``np.add``, ``np.maximum``, ``np.logical_and``)."""
    if isinstance(x, (float, int, bool)):  # the scalar path: one island
        return x
    x = np.asarray(x)
    n = x.shape[-1] if x.ndim else 1
    if x.ndim == 0:
        r = x
    elif n > _LOOP_MAX or n == 0:
        r = op.reduce(x, axis=-1)
    else:
        r = x[..., 0]
        for i in range(1, n):
            r = op(r, x[..., i])
    return r[..., None] if keepdims else r
