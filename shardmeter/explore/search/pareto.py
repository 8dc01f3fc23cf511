"""Running top-K and Pareto fronts over candidate scores (vectorised, mergeable).

Both keep candidate *ids* (flat indices into the search space) next to their
scores and break ties by id, so merging partial results in any order (chunks
finishing on different workers) gives exactly the serial answer.
"""

from __future__ import annotations

import numpy as np

__all__ = ["top_k", "merge_top_k", "pareto_front", "merge_fronts", "dominated_by_any"]


def top_k(score: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` smallest scores (ties: smaller id first), sorted ascending."""
    score = np.asarray(score, dtype=float)
    ids = np.asarray(ids, dtype=np.int64)
    if k <= 0 or score.size == 0:
        return score[:0], ids[:0]
    if score.size > 4 * k:
        # argpartition narrows to the k smallest; keep every tie of the k-th value so the id tie-break holds
        kth = np.partition(score, k - 1)[k - 1]
        keep = score <= kth
        score, ids = score[keep], ids[keep]
    order = np.lexsort((ids, score))[:k]
    return score[order], ids[order]


def merge_top_k(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two ``(score, ids)`` top-k results."""
    return top_k(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]), k)


def pareto_front(x: np.ndarray, y: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-dominated points when minimising both ``x`` and ``y``, sorted by ``x``.

    A point is dominated when another is no worse in both and better in one.
    Of several points with equal ``(x, y)`` the smallest id is kept. O(n log n):
    sort by (x, y, id), keep each point whose ``y`` is below every ``y`` before it.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ids = np.asarray(ids, dtype=np.int64)
    if x.size == 0:
        return x, y, ids
    order = np.lexsort((ids, y, x))
    xs, ys, i = x[order], y[order], ids[order]
    best_before = np.concatenate([[np.inf], np.minimum.accumulate(ys)[:-1]])
    keep = ys < best_before
    return xs[keep], ys[keep], i[keep]


def merge_fronts(
    a: tuple[np.ndarray, np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge two fronts ``(x, y, ids)`` into the front of their union."""
    return pareto_front(*(np.concatenate([p, q]) for p, q in zip(a, b, strict=True)))


def dominated_by_any(x: np.ndarray, y: np.ndarray, px: np.ndarray, py: np.ndarray) -> np.ndarray:
    """For each point ``(px, py)``: is it dominated by some ``(x, y)``? (Brute force, for checks.)"""
    x, y = np.asarray(x, float)[None, :], np.asarray(y, float)[None, :]
    px, py = np.asarray(px, float)[:, None], np.asarray(py, float)[:, None]
    return np.any((x <= px) & (y <= py) & ((x < px) | (y < py)), axis=1)
