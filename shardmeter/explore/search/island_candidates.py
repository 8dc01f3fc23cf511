"""Step 1 of the per-island search (:mod:`.island_search`): every island layout x option scored
by the full model at ``m = d, 2d`` and the largest ``m`` the batch allows (one stacked call:
:func:`~.island_stack.evaluate_stack`), the largest feasible ``m`` found by memory-only probes
(:func:`largest_feasible`), and each candidate's line (step at ``m = d`` and slope per ``d``
micro-batches), kept only at the points evaluated where the third point is off the line."""

from __future__ import annotations

import attrs
import numpy as np

from shardmeter.explore.search import island_stack
from shardmeter.explore.search.island_context import IslandContext
from shardmeter.explore.search.structural import batch_schedule_bits
from shardmeter.model.feasibility import REASONS, Reason

__all__ = ["Candidates", "IslandScores", "island_candidates", "largest_feasible", "primary_counts"]


@attrs.frozen
class Candidates:
    """The live island candidates: ``prefix`` (``L``), per island the largest count ``k_max``
    of ``d`` micro-batches per replica the batch allows and the step ``d`` (``(L, I)``); once
    scored, per (prefix, inner option, island) the step at ``m = d`` (``step_s``), its slope per
    ``d`` micro-batches (``slope_s``), the largest feasible ``m / d`` (``k_mem``, 0: none), the
    all-reduce window (``window_s``), the gradient bytes and the reason bits at ``m = d``
    (``reasons``), and the model's parameters (``(L, R_in, 1)``)."""

    prefix: np.ndarray
    k_max: np.ndarray
    d: np.ndarray
    step_s: np.ndarray | None = None
    slope_s: np.ndarray | None = None
    k_mem: np.ndarray | None = None
    window_s: np.ndarray | None = None
    grad_bytes: np.ndarray | None = None
    params: np.ndarray | None = None
    reasons: np.ndarray | None = None

    @property
    def scored(self) -> bool:
        return self.step_s is not None


@attrs.frozen
class IslandScores:
    """What step 1 found: the live candidates, the structural reason bits per (prefix, island),
    the full-model and memory-only rows scored, the duplicate candidates skipped (in all and,
    ``duplicates_per_island``, per island)."""

    live: Candidates
    reasons: np.ndarray
    model_rows: int
    memory_rows: int
    duplicates: int
    duplicates_per_island: np.ndarray


def island_candidates(ctx: IslandContext) -> IslandScores:
    """Score every island layout x option (see the module docstring): the representative
    island of each class (:func:`~.island_context.island_classes`) only, where their number
    divides the islands', then every island takes its representative's arrays."""
    n, reps = ctx.space.n_islands, ctx.reps
    if len(reps) == n or n % len(reps):
        return _rep_candidates(ctx)
    out = _rep_candidates(ctx.only(reps))
    ridx = [reps.index(k) for k in ctx.rep]

    def spread(v: np.ndarray) -> np.ndarray:
        # one class for all islands: a read-only view of its column (nothing writes these arrays)
        if len(reps) == 1:
            return np.broadcast_to(v[..., :1], (*v.shape[:-1], n))
        return v[..., ridx]

    def spread_or_none(v: np.ndarray | None) -> np.ndarray | None:
        return None if v is None else spread(v)

    live = out.live  # every per-island array spread; the prefixes and parameters are the model's
    spread_live = attrs.evolve(
        live,
        k_max=spread(live.k_max),
        d=spread(live.d),
        step_s=spread_or_none(live.step_s),
        slope_s=spread_or_none(live.slope_s),
        k_mem=spread_or_none(live.k_mem),
        window_s=spread_or_none(live.window_s),
        grad_bytes=spread_or_none(live.grad_bytes),
        reasons=spread_or_none(live.reasons),
    )
    return attrs.evolve(
        out,
        live=spread_live,
        reasons=spread(out.reasons),
        duplicates=int(out.duplicates_per_island @ np.bincount(ridx, minlength=len(reps))),
    )


def _struct_bits(ctx: IslandContext, m: np.ndarray) -> np.ndarray:
    """Per prefix and island, the structural reason bits at ``m`` micro-batches per replica."""
    return batch_schedule_bits(ctx.space, ctx.g, m)


def _rep_candidates(ctx: IslandContext) -> IslandScores:
    """:func:`island_candidates` on the context's islands ``ctx.isl``."""
    sp, gb = ctx.space, ctx.gb
    P, n = sp.n_prefixes, len(ctx.isl)
    valid = sp.layout["_valid"][ctx.li][:, ctx.isl]
    pp = ctx.g("layout.pp").astype(np.int64)
    one = np.ones((P, n), dtype=np.int64)
    ok1 = _struct_bits(ctx, one) == 0
    ok2 = _struct_bits(ctx, 2 * one) == 0
    okp = (_struct_bits(ctx, pp) == 0) & (_struct_bits(ctx, 2 * pp) == 0)
    d = np.where(ok1 & ok2, 1, np.where(okp, pp, 0))
    M = gb // np.maximum(ctx.q, 1)
    K = np.where(d > 0, M // np.maximum(d, 1), 0)
    base_bits = np.where(valid, 0, int(Reason.TOO_MANY_GPUS)) | np.where(K < 1, _struct_bits(ctx, one), 0)
    base_bits = np.where((K < 1) & (base_bits == 0), int(Reason.BATCH_SPLIT), base_bits)
    # an interleaved schedule's virtual-stage options at pp = 1 are exact copies of one scored prefix
    dup = np.broadcast_to(sp.prefix_verdict(np.arange(P, dtype=np.int64))[1][:, None], (P, n))
    alive = (K >= 1) & valid
    dup_alive = alive & dup
    alive &= ~dup
    live = np.flatnonzero(alive.any(axis=1))
    reasons = np.zeros((P, n), dtype=np.int64)
    reasons[:] = base_bits
    dup_isl = np.sum(np.where(dup_alive, M, 0), axis=0) * sp.R_in
    cand = Candidates(prefix=live, k_max=K[live], d=d[live])
    if live.size:
        cand, model_rows, memory_rows = _score_live(ctx, cand, alive[live][:, None, :])
    else:
        model_rows = memory_rows = 0
    return IslandScores(cand, reasons, model_rows, memory_rows, int(np.sum(dup_isl)), dup_isl)


def _score_live(ctx: IslandContext, cand: Candidates, al: np.ndarray) -> tuple[Candidates, int, int]:
    """The live candidates' lines (module docstring), and the full-model and memory-only rows
    scored for them; ``al``: ``(L, 1, I)``, the island holds the candidate."""
    live, Kl, dl = cand.prefix, cand.k_max, np.maximum(cand.d, 1)
    # m = d, 2d and the largest m the batch allows, in one stacked call (where K < 3 the extra
    # counts repeat the last one the batch allows, and are read only where K says so)
    K3 = Kl[:, None, :]
    e1, e2, eK = island_stack.evaluate_stack(ctx, live, [dl, np.minimum(2, Kl) * dl, Kl * dl])
    model_rows = 3 * live.size * ctx.space.R_in
    f1 = e1["ok"] & al
    f2 = e2["ok"] & f1 & (K3 >= 2)
    fK = eK["ok"] & f1
    kmem = np.where(fK, K3, np.where(f2, 2, np.where(f1, 1, 0)))
    # infeasible at K (or at 2d): the largest feasible m lies between the last feasible and it
    hi = np.where(fK | ~f1, kmem, np.where(f2, K3, 2))
    kmem, memory_rows = largest_feasible(ctx, live, dl, kmem, hi, (e1, e2, eK))
    t1 = e1["t"]
    slope = np.where(f2, e2["t"] - t1, 0.0)
    # the line through m = d and 2d must meet the model at the largest m; otherwise keep the points
    pred = t1 + (K3 - 1) * slope
    off = fK & (K3 > 2) & (np.abs(eK["t"] - pred) > 1e-9 * np.abs(eK["t"]))
    kmem = np.where(off, np.minimum(kmem, 2), kmem)
    r_bits = np.where(f1, 0, e1["bits"] | np.where(al, 0, int(Reason.TOO_MANY_GPUS)))
    scored = attrs.evolve(
        cand,
        step_s=t1,
        slope_s=slope,
        k_mem=kmem,
        window_s=e1["win"],
        grad_bytes=e1["gb"],
        params=e1["params"],
        reasons=r_bits,
    )
    return scored, model_rows, memory_rows


def largest_feasible(
    ctx: IslandContext,
    live: np.ndarray,
    dl: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    evals: tuple[island_stack.Figures, island_stack.Figures, island_stack.Figures],
) -> tuple[np.ndarray, int]:
    """The largest feasible ``k`` (``m = k d``) per cell, given ``lo`` feasible (0: none) and
    ``hi`` infeasible (``hi == lo``: settled), feasibility falling once with ``m`` (memory grows
    with it). Bracketing, as bisection does, but each probe is where the line through the
    bracket's two memory figures meets the GPU's memory (regula falsi; exact in one round where
    memory is affine in ``m``, as it is below a schedule's in-flight cap), probed with its
    successor in one stacked call; a cell still open after two such rounds, or whose ``hi`` fails
    for another reason than memory, is bisected. The probes read feasibility and memory only, so
    they run :func:`~.island_stack.evaluate_stack`'s memory path (the full model's reasons and
    memory, no stage timed). Returns ``(lo, probe rows scored)``."""
    rows = np.flatnonzero(((hi - lo) > 1).any(axis=(1, 2)))  # rows with an open cell: a settled
    e1, e2, eK = ({k: e[k][rows] for k in ("mem", "bits")} for e in evals)  # row stays settled
    cap = np.broadcast_to(ctx.g("hardware.memory_bytes")[live[rows]][:, None, :], e1["mem"].shape)

    def at(k: np.ndarray, key: str) -> np.ndarray:  # the figure at k = 1, 2 or K (the points evaluated)
        return np.where(k <= 1, e1[key], np.where(k == 2, e2[key], eK[key]))

    lo_all, open_rows = lo, rows
    lo, hi = lo[rows], hi[rows]
    bracket = _Bracket(
        ctx,
        live[rows],
        dl[rows],
        lo,
        hi,
        at(lo, "mem"),
        at(hi, "mem"),
        at(hi, "bits") == int(Reason.MEMORY),
        cap,
    )
    rows_n = bracket.close()
    lo_all[open_rows] = bracket.lo
    return lo_all, rows_n


@attrs.define
class _Bracket:
    """:func:`largest_feasible`'s open cells: each row's bracket ``lo .. hi`` (feasible,
    infeasible), the memory at both ends, whether ``hi`` fails on memory alone, and the GPU's
    memory ``cap``; :meth:`close` narrows them to ``hi = lo + 1`` in place."""

    ctx: IslandContext
    live: np.ndarray
    dl: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    m_lo: np.ndarray
    m_hi: np.ndarray
    mem_only: np.ndarray
    cap: np.ndarray

    def close(self) -> int:
        """Probe until every bracket is closed; the probe rows scored."""
        R = self.ctx.space.R_in
        rnd = rows_n = 0
        rows = np.arange(len(self.lo))  # positions in the open rows
        while True:
            l_, h_ = self.lo[rows], self.hi[rows]
            t = (h_ - l_) > 1
            keep = t.any(axis=(1, 2))
            rows, t, l_, h_ = rows[keep], t[keep], l_[keep], h_[keep]
            if rows.size == 0:
                return rows_n
            probes = self._probes(rows, t, l_, h_) if rnd < 2 else [np.where(t, (l_ + h_) // 2, l_)]
            es = island_stack.evaluate_stack(
                self.ctx,
                self.live[rows],
                [np.maximum(p, 1) * self.dl[rows][:, None, :] for p in probes],
                memory=True,
            )
            rows_n += len(probes) * rows.size * R
            for p, e in zip(probes, es, strict=True):
                l_, h_ = self._narrow(rows, t & (p > l_) & (p < h_), p, e, l_, h_)
            self.lo[rows], self.hi[rows] = l_, h_
            rnd += 1

    def _probes(self, rows: np.ndarray, t: np.ndarray, l_: np.ndarray, h_: np.ndarray) -> list[np.ndarray]:
        """Regula falsi: where the line through the bracket's memory figures meets the cap, and
        its successor (the midpoint where the figures cannot say)."""
        mid = (l_ + h_) // 2
        ml, mh, c = self.m_lo[rows], self.m_hi[rows], self.cap[rows]
        ok = self.mem_only[rows] & (mh > ml) & np.isfinite(ml) & np.isfinite(mh)
        with np.errstate(all="ignore"):
            guess = l_ + np.floor((c - ml) / np.where(ok, mh - ml, 1.0) * (h_ - l_))
        guess = np.where(ok & np.isfinite(guess), np.clip(guess, l_ + 1, h_ - 1), mid).astype(np.int64)
        return [np.where(t, guess, l_), np.where(t, np.minimum(guess + 1, h_ - 1), l_)]

    def _narrow(
        self,
        rows: np.ndarray,
        sel: np.ndarray,
        p: np.ndarray,
        e: island_stack.Figures,
        l_: np.ndarray,
        h_: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """A feasible probe raises ``lo``, an infeasible one lowers ``hi`` (the probes ascend)."""
        up = sel & e["ok"]
        l_ = np.where(up, p, l_)
        self.m_lo[rows] = np.where(up, e["mem"], self.m_lo[rows])
        dn = sel & ~e["ok"]
        h_ = np.where(dn, p, h_)
        self.m_hi[rows] = np.where(dn, e["mem"], self.m_hi[rows])
        self.mem_only[rows] = np.where(dn, e["bits"] == int(Reason.MEMORY), self.mem_only[rows])
        return l_, h_


def primary_counts(bits: np.ndarray, weight: np.ndarray) -> dict[int, int]:
    """Infeasible candidates per primary reason (the lowest bit: checks run in that order)."""
    out: dict[int, int] = {}
    low = bits & (-bits)
    for b in REASONS:
        sel = low == b
        if np.any(sel):
            out[b] = int(np.sum(np.broadcast_to(weight, bits.shape)[sel]))
    return out
