"""What every step of the per-island search (:mod:`.island_search`) reads: the space's prefixes
and their input columns (:class:`IslandContext`), the classes of islands whose model inputs are
all the same (:func:`island_classes`), each (prefix, inner option)'s code on an axis
(:func:`codes_of`) and the integer key of a class of lines (:func:`class_key`)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from shardmeter.explore.search.space import Space

__all__ = ["IslandContext", "island_classes", "codes_of", "class_key", "FREE_MBS", "TIER_COLUMNS"]

#: Input columns with a trailing tier axis after the island axis.
TIER_COLUMNS = ("topology.tier_gpus", "topology.tier_bytes_s", "topology.tier_latency_s")
#: An integer or an integer array (every argument of :func:`class_key` alike).
Code = TypeVar("Code", int, np.ndarray)
#: The micro-batch code of a class whose islands each take their own best micro-batch.
FREE_MBS = 63


class IslandContext:
    """What the per-island scoring needs: the space (layout x axes), the global batch, per
    prefix its layout index ``li``, axis codes and input columns (``g(name)``: ``(prefixes,
    islands)``), ``q`` (sequences per micro-batch count: ``dp x micro_batch``), each island's
    class representative ``rep`` (:func:`island_classes`) and the island columns ``isl`` this
    context scores."""

    def __init__(self, space: Space, gb: int):
        self.space, self.gb = space, gb
        li, codes = space._prefix_codes(np.arange(space.n_prefixes, dtype=np.int64))
        self.li, self.codes = li, codes
        cols = space._gather(li, space.axes[: space.n_struct], codes)
        self.cols = cols
        n = space.n_islands

        def g(k: str) -> np.ndarray:
            return np.broadcast_to(
                np.asarray(cols[k] if k in cols else space.base[k], dtype=float), (len(li), n)
            )

        self.g: Callable[[str], np.ndarray] = g
        self.q = (g("layout.dp") * g("training.micro_batch")).astype(np.int64)  # sequences per m
        self.rep = island_classes(space)
        self.reps = sorted(set(self.rep))
        self.isl = list(range(n))  # the island columns this context scores

    def only(self, isl: list[int]) -> IslandContext:
        """The same context on islands ``isl`` only (``g``, ``q`` and the stacked model calls'
        islands are those columns)."""
        c = copy.copy(self)
        g0 = self.g
        c.g = lambda k: g0(k)[:, isl]
        c.q, c.isl = self.q[:, isl], list(isl)
        return c


def island_classes(space: Space) -> list[int]:
    """``rep[j]``: the first island whose every model input equals island ``j``'s (base columns,
    per-island layout columns such as ``dp`` and ``nodes``, axis columns), so that every
    candidate cell of island ``j`` is that of island ``rep[j]``: its scores, lines and curves are
    the same, and only the representatives are scored. An array whose island axis cannot be
    told apart makes every island its own class."""
    n = space.n_islands
    rep = list(range(n))
    if n < 2:
        return rep
    arrays: list[tuple[np.ndarray, int]] = []
    named = [(k, v) for k, v in space.base.items()] + [(k, v) for a in space.axes for k, v in a.cols.items()]
    named += [(k, v) for k, v in space.layout.items() if np.ndim(v) >= 2]
    for k, v in named:
        a = np.asarray(v)
        ax = -2 if k in TIER_COLUMNS else -1
        if a.ndim < 1 - ax or a.shape[ax] not in (1, n):
            return rep
        if a.shape[ax] == n:
            arrays.append((a, ax))
    for j in range(1, n):
        for i in range(j):
            if rep[i] != i:
                continue
            if all(np.array_equal(np.take(a, i, axis=ax), np.take(a, j, axis=ax)) for a, ax in arrays):
                rep[j] = i
                break
    return rep


def codes_of(
    ctx: IslandContext, name: str, prefixes: np.ndarray | int, inner: np.ndarray | int
) -> np.ndarray:
    """The option code on axis ``name`` of (prefix, inner option) pairs (arrays that broadcast),
    whether the axis is structural (part of the prefix) or inner; zeros where it is absent."""
    sp = ctx.space
    shape = np.broadcast_shapes(np.shape(prefixes), np.shape(inner))
    names = [a.name for a in sp.axes]
    if name not in names:
        return np.zeros(shape, dtype=np.int64)
    i = names.index(name)
    out = ctx.codes[i][prefixes] if i < sp.n_struct else inner_codes(sp)[name][inner]
    return np.broadcast_to(out, shape)


def inner_codes(sp: Space) -> dict[str, np.ndarray]:
    """Each inner option's code on each inner axis (``recompute``, ``sharding``, ``sync``)."""
    r = np.arange(sp.R_in, dtype=np.int64)
    out = {"recompute": np.zeros(sp.R_in, np.int64), "sync": np.zeros(sp.R_in, np.int64)}
    for axis, s, m in zip(
        sp.axes[sp.n_struct :], sp.strides[sp.n_struct :], sp.radix[sp.n_struct :], strict=True
    ):
        out[axis.name] = (r // s) % m
    return out


def class_key(node_index: Code, mbs_code: Code, rec_code: Code) -> Code:
    """One integer per (node index, micro-batch code, recompute code) (integers or integer
    arrays); ``mbs_code`` below :data:`FREE_MBS`, or it for the island's best over its
    micro-batches."""
    return (node_index * 64 + mbs_code) * 64 + rec_code
