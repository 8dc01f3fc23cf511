"""Step 2 of the per-island search (:mod:`.island_search`): each island's feasible lines
(:func:`island_lines`) and, per class of lines, its shortest finish time at every share ``b``
of the global batch (:func:`finish_curves`), with the *free* curve (:data:`FREE_MBS`): the
shortest over the island's micro-batches at each share. Also how many whole plans the lines
make (:func:`share_counts`, :func:`plans_at`)."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np

from shardmeter.explore.search.island_candidates import Candidates
from shardmeter.explore.search.island_context import FREE_MBS, IslandContext, class_key, codes_of
from shardmeter.inputs.bundles import PartTable
from shardmeter.model.islands import island_finish

__all__ = ["Lines", "Pairs", "Curves", "island_lines", "finish_curves", "share_counts", "plans_at"]

#: A ring's ``(uplink bytes/s, latency s)`` (:func:`~shardmeter.model.islands.ring_pace`).
Net = tuple[float, float]
#: Per class key: the shortest finish at every share ``0 .. gb`` and the pair that attains it.
CurveMap = dict[int, tuple[np.ndarray, np.ndarray]]


@attrs.frozen
class Pairs:
    """The (line, micro-batch count) pairs an envelope expanded: each pair's line (``rows``,
    into the lines), ``k`` (``m / d``), step and egress bytes; a pair's layout and inner option
    are its line's (``line_L[rows[i]]``, ``line_R[rows[i]]``), read for the few pairs a plan
    picks, not expanded for all."""

    rows: np.ndarray
    line_L: np.ndarray
    line_R: np.ndarray
    k: np.ndarray
    step_s: np.ndarray
    egress_bytes: np.ndarray | None


#: An island's curves and their pairs (``({}, None)``: no feasible line).
Curves = tuple[CurveMap, Pairs | None]


@attrs.define
class Lines:
    """Island ``j``'s feasible lines (layout ``L`` x inner option ``R`` of one sync group): step
    at ``m = d`` and slope per ``d`` micro-batches, largest ``m / d`` (``km``), window, gradient
    bytes, the model's parameters, class key (:func:`~.island_context.class_key`), share quantum
    ``q`` and the id of their (key, quantum, largest ``m``) group; ``envelope``: the step
    envelope, computed once and shared by every sync option and island count that can use it."""

    L: np.ndarray
    R: np.ndarray
    step_s: np.ndarray
    slope_s: np.ndarray
    km: np.ndarray
    window_s: np.ndarray
    grad_bytes: np.ndarray
    params: np.ndarray
    key: np.ndarray
    q: np.ndarray
    gid: np.ndarray
    envelope: tuple[np.ndarray, np.ndarray, np.ndarray, Pairs] | None = None


def island_lines(ctx: IslandContext, cand: Candidates, j: int, grp: int) -> Lines | None:
    """Island ``j``'s feasible lines of sync group ``grp``; ``None`` when none is feasible."""
    assert cand.k_mem is not None and cand.step_s is not None and cand.slope_s is not None
    assert cand.window_s is not None and cand.grad_bytes is not None and cand.params is not None
    sp = ctx.space
    r_all = np.arange(sp.R_in, dtype=np.int64)[None, :]
    in_grp = codes_of(ctx, "sync", cand.prefix[:, None], r_all) == grp
    kmem = np.where(in_grp, cand.k_mem[:, :, j], 0)
    Lidx, Ridx = np.nonzero(kmem > 0)
    if Lidx.size == 0:
        return None
    p0 = cand.prefix[Lidx]
    nk0 = sp.layout["_k"][ctx.li[p0]]
    key = class_key(nk0, codes_of(ctx, "micro_batch", p0, Ridx), codes_of(ctx, "recompute", p0, Ridx))
    q = cand.d[Lidx, j] * ctx.q[p0, j]
    km = kmem[Lidx, Ridx]
    w = np.int64(ctx.gb + 1)  # q and km are at most the global batch
    _, gid = np.unique((key * w + q) * w + km, return_inverse=True)
    return Lines(
        L=Lidx,
        R=Ridx,
        step_s=cand.step_s[Lidx, Ridx, j],
        slope_s=cand.slope_s[Lidx, Ridx, j],
        km=km,
        window_s=cand.window_s[Lidx, Ridx, j],
        grad_bytes=cand.grad_bytes[Lidx, Ridx, j],
        params=cand.params[Lidx, 0, 0],
        key=key,
        q=q,
        gid=gid.ravel(),
    )


def finish_curves(
    ctx: IslandContext, lines: Lines | None, table: PartTable, sync_code: int, n_used: int, net: Net
) -> Curves:
    """An island's shortest finish time at every share, per class key, and the pairs behind it,
    from its :func:`island_lines`.

    When the finish is one non-decreasing function of the step for all lines (one island;
    DiLoCo, whose exposed time reads the step and the parameters only; checked on every line
    at its smallest and largest ``m``), the shortest finish is that function of the shortest
    step, so the step envelope (:func:`_envelope`) is computed once per island and sync group
    and shared by every sync option and island count. Otherwise (all-reduce: each layout has its
    own overlap window) the envelope is taken over the lines' own finish times."""
    if lines is None:
        return {}, None
    ln = lines
    if _common_finish(table, sync_code, n_used, net, ln):
        if ln.envelope is None:
            ln.envelope = _envelope(ctx, ln, ln.step_s, None)
        ukeys, best_t, arg, pairs = ln.envelope
        idx = arg[arg >= 0]
        rows = pairs.rows[idx]
        fin = np.full(best_t.shape, np.inf)
        egress = np.full(pairs.step_s.shape, np.nan)
        fin[arg >= 0], egress[idx] = island_finish(
            table,
            sync_code,
            n_used,
            pairs.step_s[idx],
            ln.window_s[rows],
            ln.params[rows],
            ln.grad_bytes[rows],
            net,
        )
        pairs = attrs.evolve(pairs, egress_bytes=egress)
    else:
        a, _ = island_finish(table, sync_code, n_used, ln.step_s, ln.window_s, ln.params, ln.grad_bytes, net)

        def finish(rows: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return island_finish(
                table, sync_code, n_used, t, ln.window_s[rows], ln.params[rows], ln.grad_bytes[rows], net
            )

        ukeys, fin, arg, pairs = _envelope(ctx, ln, a, finish)
    width = ctx.gb + 1
    f2, a2 = fin.reshape(len(ukeys), width), arg.reshape(len(ukeys), width)
    return _with_free({int(kk): (f2[i], a2[i]) for i, kk in enumerate(ukeys)}), pairs


def _with_free(curves: CurveMap) -> CurveMap:
    """``curves`` plus, per (node index, recompute code), the :data:`FREE_MBS` curve: the
    shortest of its micro-batches' curves at every share, and that curve's pair (ties: the
    lowest code)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for k in sorted(curves):
        groups.setdefault((k // 4096, k % 64), []).append(k)
    out = dict(curves)
    for (nk, rc), ks in groups.items():
        fin = np.stack([curves[k][0] for k in ks])
        arg = np.stack([curves[k][1] for k in ks])
        best = np.argmin(fin, axis=0)  # the first of equal minima
        cols = np.arange(fin.shape[1])
        out[class_key(nk, FREE_MBS, rc)] = (fin[best, cols], arg[best, cols])
    return out


def _common_finish(table: PartTable, sync_code: int, n_used: int, net: Net, ln: Lines) -> bool:
    """Whether island ``finish`` reads neither the window nor the gradient bytes of the lines
    (the same values with those of the first line, at each line's smallest and largest step)."""
    if n_used < 2:
        return True
    one_win, one_params, one_gb = ln.window_s[:1], ln.params[:1], ln.grad_bytes[:1]
    # a few lines first: one that differs settles it without the full check
    for sel in (slice(0, 1024), slice(None)):
        for t in (ln.step_s[sel], (ln.step_s + (ln.km - 1) * ln.slope_s)[sel]):
            f, e = island_finish(
                table, sync_code, n_used, t, ln.window_s[sel], ln.params[sel], ln.grad_bytes[sel], net
            )
            g, h = island_finish(table, sync_code, n_used, t, one_win, one_params, one_gb, net)
            if not (np.array_equal(f, g) and np.array_equal(e, h)):
                return False
    return True


def _envelope(
    ctx: IslandContext,
    ln: Lines,
    a: np.ndarray,
    finish: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Pairs]:
    """The smallest value per (class key, share) over the lines ``ln`` (ranked by ``a``, their
    value at ``m = d``): ``(keys, best (keys x (gb + 1),), pair index (same), pairs)``.

    Lines of one (key, quantum, largest ``m``) group that are no lower at ``m = d`` and no
    flatter than another are never the smallest, so only each group's 2-D front is expanded to
    every share; the smallest per (key, share) is one ``np.minimum.at`` over the expanded pairs
    (ties: the first pair). ``finish(rows, step)``: ``(value, egress)`` of the pairs; ``None``:
    the step itself (and no egress)."""
    keep = _front(ln, a)
    reps = ln.km[keep]
    rows = np.repeat(keep, reps)
    k1 = _restarting_count(reps, rows.size)
    k = k1 + 1
    share = k * np.repeat(ln.q[keep], reps)
    t = np.repeat(ln.step_s[keep], reps) + k1 * np.repeat(ln.slope_s[keep], reps)
    val, egress = (t, None) if finish is None else finish(rows, t)
    ukeys, kidx = np.unique(ln.key[keep], return_inverse=True)
    width = ctx.gb + 1
    cell = np.repeat(kidx.ravel(), reps) * width + share
    best = np.full(len(ukeys) * width, np.inf)
    np.minimum.at(best, cell, val)
    win = np.flatnonzero((val == best[cell]) & np.isfinite(val))
    ucell, first = np.unique(cell[win], return_index=True)
    arg = np.full(len(ukeys) * width, -1, dtype=np.int64)
    arg[ucell] = win[first]
    return ukeys, best, arg, Pairs(rows, ln.L, ln.R, k, t, egress)


def _front(ln: Lines, a: np.ndarray) -> np.ndarray:
    """The lines on their group's 2-D front (lowest at ``m = d``, then flattest), ascending."""
    order = _front_order(ln.gid, a, ln.slope_s)
    g_sorted = ln.gid[order]
    new_g = np.ones(order.size, dtype=bool)
    new_g[1:] = g_sorted[1:] != g_sorted[:-1]
    s_sorted = ln.slope_s[order]
    run = _segmented_running_min(s_sorted, new_g)
    prev = np.concatenate([[np.inf], run[:-1]])
    prev[new_g] = np.inf
    return np.sort(order[s_sorted < prev])


def _restarting_count(reps: np.ndarray, size: int) -> np.ndarray:
    """``0 .. reps[i] - 1`` for each line ``i`` in turn (``size`` = ``sum(reps)``): a running
    count that restarts at each line (the values of ``arange - repeat(starts)``)."""
    k1 = np.ones(size, dtype=np.int64)
    if size:
        k1[0] = 0
        ends = np.cumsum(reps)[:-1]
        nz = ends[ends < size]
        k1[nz] = 1 - reps[: nz.size]
    np.cumsum(k1, out=k1)
    return k1


def _front_order(gid: np.ndarray, a: np.ndarray, sl: np.ndarray) -> np.ndarray:
    """``np.lexsort((sl, a, gid))`` restricted to the lines that can be on their group's 2-D
    front, in the same order: a line above (in ``a``) its group's flattest line at its lowest
    ``a`` sorts after it and is no flatter, so it is never kept (nor moves the running minimum
    of the lines before it). Every line where a value is not finite."""
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(sl))) or gid.size == 0:
        return np.lexsort((sl, a, gid))
    ng = int(gid.max()) + 1
    smin = np.full(ng, np.inf)
    np.minimum.at(smin, gid, sl)
    amin = np.full(ng, np.inf)
    at = sl == smin[gid]
    np.minimum.at(amin, gid[at], a[at])
    cand = np.flatnonzero(a <= amin[gid])
    return cand[np.lexsort((sl[cand], a[cand], gid[cand]))]


def _segmented_running_min(x: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Running minimum of ``x`` restarting where ``new`` is true."""
    seg = np.cumsum(new) - 1
    big = float(np.nanmax(np.abs(x[np.isfinite(x)]))) * 4 + 1.0 if np.any(np.isfinite(x)) else 1.0
    shifted = np.where(np.isfinite(x), x, big) - seg * (2 * big + 1.0)  # later segments lower
    return np.minimum.accumulate(shifted) + seg * (2 * big + 1.0)


def share_counts(ctx: IslandContext, ln: Lines) -> dict[int, np.ndarray]:
    """Per class key, how many of the island's feasible lines can take each share ``b``
    (``0 .. gb``): a line of quantum ``q`` and largest ``m / d`` = ``km`` takes ``q .. km q``."""
    _, first, n = np.unique(ln.gid, return_index=True, return_counts=True)
    key, q, km = ln.key[first], ln.q[first], ln.km[first]
    g = np.repeat(np.arange(first.size), km)
    k = np.arange(g.size) - np.repeat(np.cumsum(km) - km, km) + 1
    ukeys, kidx = np.unique(key, return_inverse=True)
    width = ctx.gb + 1
    flat = np.bincount(kidx.ravel()[g] * width + k * q[g], weights=n[g], minlength=ukeys.size * width)
    out = {int(kk): flat[i * width : (i + 1) * width] for i, kk in enumerate(ukeys)}
    for kk in list(out):  # the free class: the lines of every micro-batch
        free = class_key(kk // 4096, FREE_MBS, kk % 64)
        out[free] = out.get(free, 0) + out[kk]
    return out


def plans_at(total: int, counts: list[np.ndarray]) -> float:
    """How many plans (one line per island, shares summing to ``total``) the counts make."""
    acc = counts[0][: total + 1]
    for c in counts[1:]:
        acc = np.convolve(acc, c[: total + 1])[: total + 1]
    return float(acc[total])
