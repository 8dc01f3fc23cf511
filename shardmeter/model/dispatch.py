"""Call each distinct strategy once per group of rows that uses it, never once per plan.

A row carries a part code (an index into the :class:`~.inputs.PartTable`). When every row of
the batch uses one (part, options) pair, its method runs once on the whole arrays; otherwise
once per distinct code on that group's elements (``np.unique``), and the results are scattered
back. Elementwise arithmetic is the same either way, so a row's result does not depend on its
neighbours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["by_code", "by_row_code", "Take"]

#: ``take(x, trailing=0)``: the current group's part of ``x`` (``trailing`` axes, e.g. tiers, kept).
Take = Callable[..., Any]


def _identity(x: Any, trailing: int = 0) -> Any:
    return x


def _scatter(results: list[tuple[np.ndarray, dict[str, Any]]], shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for mask, res in results:
        for k, v in res.items():
            if k not in out:
                out[k] = np.zeros(shape)
            out[k][mask] = v
    return out


def by_code(codes: Any, shape: tuple[int, ...], fn: Callable[[int, Take], dict[str, Any]]) -> dict[str, Any]:
    """``fn(code, take)`` once per distinct code of ``codes`` (broadcast to ``shape``); returns its
    dict of arrays, scattered to ``shape`` when there was more than one code."""
    codes = np.broadcast_to(np.asarray(codes), shape)
    first = codes.flat[0] if codes.size else 0
    if codes.size == 0 or np.all(codes == first):
        return fn(int(first), _identity)
    results = []
    for c in np.unique(codes):
        mask = codes == c

        def take(x: Any, trailing: int = 0, mask: np.ndarray = mask) -> Any:
            x = np.asarray(x)
            full = shape + x.shape[x.ndim - trailing:] if trailing else shape
            return np.broadcast_to(x, full)[mask]

        results.append((mask, fn(int(c), take)))
    return _scatter(results, shape)


def by_row_code(codes: Any, shape: tuple[int, int], fn: Callable[[int, Take], dict[str, Any]],
                out_shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """Like :func:`by_code` for a per-row code (``(N, 1)``) whose part sees all islands of its
    rows: ``take`` gives the group's rows of an ``(N, I, ...)`` array; ``out_shapes`` names each
    result's shape (``(N, 1)`` or ``(N,)``)."""
    n = shape[0]
    codes = np.broadcast_to(np.asarray(codes), (n, 1))[:, 0]
    first = codes[0] if n else 0
    if n == 0 or np.all(codes == first):
        return fn(int(first), _identity)
    out: dict[str, np.ndarray] = {}
    for c in np.unique(codes):
        rows = codes == c

        def take(x: Any, trailing: int = 0, rows: np.ndarray = rows) -> Any:
            x = np.asarray(x)
            if x.ndim == 0:
                return x
            return np.broadcast_to(x, (n,) + tuple(x.shape[1:]))[rows]

        res = fn(int(c), take)
        for k, v in res.items():
            if k not in out:
                out[k] = np.zeros(out_shapes[k])
            out[k][rows] = np.broadcast_to(v, (int(rows.sum()),) + out_shapes[k][1:])
    return out
