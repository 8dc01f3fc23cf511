"""Call each distinct strategy once per batch, never once per plan.

A row carries a part code (an index into the :class:`~.inputs.PartTable`). When every row of
the batch uses one (part, options) pair, its method runs once on the batch's arrays. Otherwise
it runs once per distinct code (``np.unique``) on the same arrays, each at their own (often
smaller, broadcastable) shape, and each row takes its own code's result. Terms that depend only
on the layout therefore stay at the layout's shape however many strategy options the batch
crosses it with. Elementwise arithmetic is the same either way, so a row's result does not
depend on its neighbours.

Taking each row's result is a gather along the one axis the codes vary along (the planner's
option axis, or a sweep's rows); codes that vary along several axes fall back to a chain of
``np.where`` (a few codes) or ``np.choose``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import numpy as np

__all__ = ["by_code"]

R = TypeVar("R")

#: Most choices one ``np.choose`` takes (numpy's NPY_MAXARGS is 32 before 2.0, 64 after).
_CHOOSE_MAX = 32
#: Up to this many choices a chain of ``np.where`` selects instead: the same values, and a
#: few times faster than ``np.choose`` for two to four (measured on numpy 2.x, float64).
_WHERE_MAX = 4


def _varying_axis(codes: np.ndarray) -> tuple[int, np.ndarray] | None:
    """``(axis, 1-D codes)`` when ``codes`` changes along one axis only, else None."""
    axes = [
        a for a in range(codes.ndim) if codes.shape[a] > 1 and not np.all(codes == codes.take([0], axis=a))
    ]
    if len(axes) != 1:
        return None
    a = axes[0]
    index = tuple(slice(None) if i == a else 0 for i in range(codes.ndim))
    return a, codes[index]


def _gather(vals: list[Any], pos: np.ndarray, axis: int, ndim: int, length: int) -> np.ndarray:
    """Each position ``j`` along ``axis`` takes ``vals[pos[j]]`` there."""
    shapes = [np.shape(v) for v in vals]
    full = np.broadcast_shapes(*shapes, (1,) * ndim)
    full = full[len(full) - ndim :] if len(full) > ndim else full
    if len(full) == ndim and full[axis] == 1:  # results do not vary along the codes' axis
        if all(v is vals[0] for v in vals):  # one value for every code (a constant of the part)
            return np.broadcast_to(vals[0], full).take(np.zeros_like(pos), axis=axis)
        size = math.prod(full)
        arrs = [np.asarray(v) for v in vals]
        # each value as the full shape: a reshape (no copy) where it holds every element
        stacked = np.concatenate(
            [a.reshape(full) if a.size == size else np.broadcast_to(a, full) for a in arrs], axis=axis
        )
        return stacked.take(pos, axis=axis)
    shape = list(np.broadcast_shapes(*shapes, (1,) * ndim))
    shape[len(shape) - ndim + axis] = length
    out = np.empty(shape)
    lead = len(shape) - ndim
    for i, v in enumerate(vals):
        sel = pos == i
        index = (slice(None),) * (lead + axis) + (sel,)
        out[index] = np.broadcast_to(v, shape)[index]
    return out


def by_code(codes: Any, fn: Callable[[int], R]) -> R:
    """``fn(code)`` -> an attrs record of arrays (records nested in it too) or a dict of them,
    once per distinct code of ``codes``; each output field holds each row's own code's value
    (broadcast against ``codes``), in a record of the first code's type. A field that is
    ``None`` for every code stays ``None``."""
    if isinstance(codes, (int, float)):  # the scalar path
        return fn(int(codes))
    codes = np.asarray(codes)
    if codes.size == 0:
        return fn(0)
    uniq = np.unique(codes)
    if len(uniq) == 1:
        return fn(int(uniq[0]))
    results = [fn(int(c)) for c in uniq]
    one_axis = _varying_axis(codes)
    idx = np.searchsorted(uniq, codes)
    # along the one varying axis: each position's index into ``uniq`` (the same for every field)
    pos = None if one_axis is None else np.searchsorted(uniq, one_axis[1])

    def take(vals: list[Any]) -> Any:
        """Each row's own code's value of one field."""
        if one_axis is not None and pos is not None and all(np.ndim(v) <= codes.ndim for v in vals):
            return _gather(vals, pos, one_axis[0], codes.ndim, len(pos))
        if _WHERE_MAX < len(vals) <= _CHOOSE_MAX:
            shape = np.broadcast_shapes(idx.shape, *(np.shape(v) for v in vals))
            return np.choose(np.broadcast_to(idx, shape), [np.broadcast_to(v, shape) for v in vals])
        acc = vals[0]
        for i, v in enumerate(vals[1:], start=1):
            acc = np.where(idx == i, v, acc)
        return acc

    return _merge(results, take)


def _merge(results: list[Any], take: Callable[[list[Any]], Any]) -> Any:
    """One value of ``results`` (one per code), merged field by field through nested attrs
    records and dicts; ``take`` merges the leaves."""
    first = results[0]
    if attrs.has(type(first)):
        return type(first)(
            **{
                f.name: _merge([getattr(r, f.name) for r in results], take)
                for f in attrs.fields(type(first))
                if f.init
            }
        )
    if isinstance(first, dict):
        return {k: _merge([r[k] for r in results], take) for k in first}
    if all(v is None for v in results):
        return None
    return take(results)
