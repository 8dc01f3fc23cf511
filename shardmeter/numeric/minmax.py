"""The min-max fold of two finish-time curves, exact and below the square of the batch.

``fold(h, f, total)`` is ``out[s] = min_b max(h[s - b], f[b])`` for ``s = 0 .. total``, with the
``b`` that attains it (ties: the smallest ``b``): one step of the per-island planner's exact
split of a batch between islands (:func:`shardmeter.model.islands.fold_min_max`). Trying every
``b`` for every ``s`` costs ``total^2``; a 64-island plan folds 63 times per class, so that
cost grew with the cube of the island count (the batch grows with the islands).

The fold here is the threshold decomposition of a (min, max) convolution into boolean ones
(Kosaraju 1989, "Efficient tree pattern matching", FOCS; the form used by later (min, max)
convolution work). Sort the finite values of both curves and cut them into ``k`` blocks of
equal size, each block closed at a value (equal values never straddle two blocks). At a
block's top value ``t``, ``out[s] <= t`` exactly when ``s`` is a sum of an ``a`` with
``h[a] <= t`` and a ``b`` with ``f[b] <= t``: one boolean convolution per block (an FFT of the
indicator vectors) finds, for every ``s``, the block its value lies in. The pair that attains
``out[s]``, and every pair that ties with it, has its larger member in that block and its other
member at most the block's top, so trying the ``~2 n / k`` members of that block as one side
of the pair, for each ``s``, finds the value and the smallest ``b`` exactly: ``O(k n log n +
n^2 / k)`` work, ``O(n^1.5 log^0.5 n)`` at the best ``k``, instead of ``n^2``. The results are
the same numbers as the brute fold's, bit for bit (both take a max of two stored values).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["fast_length", "fold", "fold_brute"]

#: Below this many shares the brute fold is as fast (its one matrix fits in cache).
BRUTE_BELOW = 96


def fast_length(m: int) -> int:
    """The smallest ``2^a 3^b 5^c >= m``: a linear convolution of two length-``n`` vectors needs
    a transform of at least ``2 n - 1`` points, and pocketfft (numpy.fft) is fastest on lengths
    with no prime factor above 5 (the rule of scipy.fft.next_fast_len); the next power of two
    can be almost twice as long (8192 against 4320 for n = 2049: three times the time)."""
    best, p5 = 1 << max(0, m - 1).bit_length(), 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            p = p35
            while p < m:
                p *= 2
            best = min(best, p)
            p35 *= 3
        p5 *= 5
    return best


def fold_brute(h: np.ndarray, f: np.ndarray, total: int, last: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fold` by trying every finite ``f[b]`` for every ``s`` (only ``s = total`` with
    ``last``): ``total x finite`` work."""
    bf = np.flatnonzero(np.isfinite(f[: total + 1]))
    s = np.array([total]) if last else np.arange(total + 1)
    out = np.full(s.size, np.inf)
    arg = np.full(s.size, -1, dtype=np.int64)
    if bf.size:
        idx = s[:, None] - bf[None, :]
        hv = np.where(idx >= 0, h[np.clip(idx, 0, total)], np.inf)
        v = np.maximum(hv, f[bf][None, :])
        j = np.argmin(v, axis=1)
        out = v[np.arange(s.size), j]
        arg = np.where(np.isfinite(out), bf[j], -1)
    return out, arg


def fold(h: np.ndarray, f: np.ndarray, total: int, last: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``out[s] = min_b max(h[s - b], f[b])`` for ``s <= total`` (only ``s = total`` with
    ``last``) and the ``b`` that attains it (ties: the smallest ``b``); ``inf`` (and ``-1``)
    where no split exists. ``h`` and ``f`` hold at least ``total + 1`` entries (``inf``: no
    such share). See the module docstring."""
    if last or total < BRUTE_BELOW:
        return fold_brute(h, f, total, last)
    n = total + 1
    h = np.asarray(h, dtype=float)[:n]
    f = np.asarray(f, dtype=float)[:n]
    out = np.full(n, np.inf)
    arg = np.full(n, -1, dtype=np.int64)
    fin_h, fin_f = np.isfinite(h), np.isfinite(f)
    if not fin_h.any() or not fin_f.any():
        return out, arg
    vals = np.sort(np.concatenate((h[fin_h], f[fin_f])))
    k = max(1, math.isqrt(vals.size // 6))
    cuts = np.unique(vals[(np.arange(1, k + 1) * vals.size) // k - 1])  # each block's top value
    nb = cuts.size
    # each entry's block (nb for inf), and, per block top, which sums s reach at most that top
    rh, rf = np.searchsorted(cuts, h), np.searchsorted(cuts, f)
    top = np.arange(nb)[:, None]
    size = fast_length(2 * n - 1)
    # single precision: the counts are integers at most n, whose rounding error in a float32
    # transform (about 1e-7 x log2(size) x n: 3e-4 at n = 2049) stays far below the 0.5 the
    # test needs (numpy >= 2 transforms float32 as such; numpy 1 in double precision)
    ind_h, ind_f = (rh <= top).astype(np.float32), (rf <= top).astype(np.float32)
    hits = np.fft.irfft(np.fft.rfft(ind_h, size) * np.fft.rfft(ind_f, size), size)[:, :n] > 0.5
    covered = hits[-1]
    blk = np.argmax(hits, axis=0)  # the block of out[s]
    # members of each block, as one side of the pair; the other side read with inf past the ends
    pad = np.full(n, np.inf)
    hp, fp = np.concatenate((pad, h)), np.concatenate((pad, f))
    edges = np.arange(nb + 1)
    by_s = np.argsort(blk, kind="stable")
    s_at = np.searchsorted(blk[by_s], edges)
    by_f = np.argsort(rf, kind="stable")
    f_at = np.searchsorted(rf[by_f], edges)
    by_h = np.argsort(rh, kind="stable")
    h_at = np.searchsorted(rh[by_h], edges)
    for j in range(nb):
        s = by_s[s_at[j] : s_at[j + 1]]
        s = s[covered[s]]
        if s.size == 0:
            continue
        b_f = by_f[f_at[j] : f_at[j + 1]]  # f's members: b itself
        a_h = by_h[h_at[j] : h_at[j + 1]]  # h's members: b = s - a
        b = np.concatenate((np.broadcast_to(b_f, (s.size, b_f.size)), s[:, None] - a_h[None, :]), axis=1)
        v = np.maximum(hp[s[:, None] - b + n], fp[b + n])
        best = v.min(axis=1)
        out[s] = best
        arg[s] = np.where(v == best[:, None], b, n).min(axis=1)
    return out, arg
