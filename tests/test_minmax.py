"""The min-max fold below the batch squared (numeric/minmax.py) gives the brute fold's numbers
and choices exactly, ties, gaps and non-monotone curves included."""

from __future__ import annotations

import numpy as np
import pytest

from shardmeter.numeric.minmax import BRUTE_BELOW, fast_length, fold, fold_brute


def _curve(rng, n, *, ties: bool, gaps: float) -> np.ndarray:
    # a rising finish time with the saw of micro-batch divisibility, gaps (shares an island
    # cannot take) and, with ``ties``, values rounded so many are equal
    b = np.arange(n, dtype=float)
    f = 5.0 + 0.05 * b + rng.uniform(0, 3, n) * (b % rng.integers(2, 9) != 0)
    if ties:
        f = np.round(f, 0)
    f[rng.random(n) < gaps] = np.inf
    f[0] = np.inf  # share 0 keeps the island in
    return f


@pytest.mark.parametrize("seed", range(12))
def test_fold_is_the_brute_fold(seed):
    rng = np.random.default_rng(seed)
    total = int(rng.integers(BRUTE_BELOW, 700))
    ties, gaps = bool(seed % 2), (0.0, 0.2, 0.9)[seed % 3]
    h = _curve(rng, total + 1, ties=ties, gaps=gaps)
    f = _curve(rng, total + 1 + int(rng.integers(0, 5)), ties=ties, gaps=gaps)
    for _ in range(3):  # a chain, as the per-island planner folds island after island
        out, arg = fold(h, f, total)
        want_out, want_arg = fold_brute(h, f, total)
        assert np.array_equal(out, want_out) and np.array_equal(arg, want_arg)
        h = out


def test_fold_by_hand():
    total = BRUTE_BELOW
    h = np.full(total + 1, np.inf)
    f = np.full(total + 1, np.inf)
    h[[10, 40]] = [1.0, 3.0]
    f[[30, 56, 86]] = [2.0, 1.0, 1.0]
    out, arg = fold(h, f, total)
    # total = 96 = 10 + 86 (max 1) or 40 + 56 (max 3); 40 = 10 + 30 (max 2); 66 = 10 + 56 (max 1)
    assert (out[96], arg[96]) == (1.0, 86)
    assert (out[40], arg[40]) == (2.0, 30) and (out[66], arg[66]) == (1.0, 56)
    assert out[70] == 3.0 and arg[70] == 30  # 40 + 30
    assert np.isinf(out[0]) and arg[0] == -1
    assert np.flatnonzero(np.isfinite(out)).tolist() == [40, 66, 70, 96]  # 40 + 86 is past the total


def test_fold_at_a_64_island_batch():
    # the 64-island benchmark folds shares up to 2048; its single-precision transform must still
    # separate every count from zero (one seed, at a larger total than the chain above)
    rng = np.random.default_rng(7)
    total = 3000
    h = _curve(rng, total + 1, ties=True, gaps=0.05)
    f = _curve(rng, total + 1, ties=False, gaps=0.0)
    out, arg = fold(h, f, total)
    want_out, want_arg = fold_brute(h, f, total)
    assert np.array_equal(out, want_out) and np.array_equal(arg, want_arg)


def _smooth(p: int) -> bool:
    for q in (2, 3, 5):
        while p % q == 0:
            p //= q
    return p == 1


def test_fast_length_is_the_next_5_smooth_length():
    for m in range(1, 3000):
        n = fast_length(m)
        assert n >= m and _smooth(n), m
        assert not any(_smooth(x) for x in range(m, n)), m
    assert fast_length(2 * 2049 - 1) == 4320  # against 8192, the next power of two
