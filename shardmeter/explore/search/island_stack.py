"""The stacked model calls of the per-island search (:mod:`.island_search`): each island
candidate scored by the full model (or its memory path alone) at several micro-batch counts in
one call, the inner options on one broadcast axis each, islands of one class packed into the
batch's island slots, and the chunks of a call on :data:`EVAL_THREADS` threads."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import attrs
import numpy as np

from shardmeter.explore.search.island_context import TIER_COLUMNS, IslandContext
from shardmeter.explore.search.space import Space
from shardmeter.inputs.bundles import ModelInputs
from shardmeter.model.evaluate import evaluate, island_memory

__all__ = ["evaluate_stack", "run_chunks", "EVAL_CELLS", "EVAL_THREADS", "FIELDS", "MEMORY_FIELDS"]

#: Model input cells (candidates x islands) per ``evaluate`` call.
EVAL_CELLS = 1 << 18
#: The outputs :func:`evaluate_stack` keeps: each island's step (``t``), reason bits, all-reduce
#: window (``win``), gradient bytes (``gb``) and memory (``mem``).
FIELDS = ("t", "bits", "win", "gb", "mem")
#: What a memory probe keeps.
MEMORY_FIELDS = ("bits", "mem")
#: Threads that score the chunks of one :func:`evaluate_stack` call side by side. The model is
#: numpy elementwise work on arrays of a few hundred thousand cells, and numpy releases the GIL
#: inside each such operation, so chunks overlap on the cores; each chunk writes its own slice of
#: the outputs and reads only shared inputs, so the values are those of the serial loop.
EVAL_THREADS = min(2, os.cpu_count() or 1)

#: One micro-batch count's figures per field (``(P, R_in, islands)``; ``params``: ``(P, R_in, 1)``).
Figures = dict[str, np.ndarray]


def run_chunks(fn: Callable[[int], None], starts: Iterable[int]) -> None:
    """``fn(lo)`` for every chunk start, on :data:`EVAL_THREADS` threads when there are several."""
    starts = list(starts)
    if EVAL_THREADS <= 1 or len(starts) <= 1:
        for lo in starts:
            fn(lo)
        return
    with ThreadPoolExecutor(max_workers=EVAL_THREADS) as pool:
        for f in [pool.submit(fn, lo) for lo in starts]:
            f.result()


@attrs.frozen
class _Stack:
    """One :func:`evaluate_stack` call's shape: the inner axes' option counts (``radix``) and
    columns (``inner``), the island columns scored (``reps``), whether they are packed into the
    batch's ``n`` island slots, prefixes per chunk (``per``) and the micro-batch counts ``m4``
    (each ``(P, 1 or R_in, islands)``)."""

    ctx: IslandContext
    prefixes: np.ndarray
    m4: list[np.ndarray]
    memory: bool
    radix: tuple[int, ...]
    inner: dict[str, np.ndarray]
    per: int

    @property
    def packed(self) -> bool:
        return len(self.ctx.isl) < self.ctx.space.n_islands


def evaluate_stack(
    ctx: IslandContext, prefixes: np.ndarray, ms: list[np.ndarray], memory: bool = False
) -> list[Figures]:
    """The island candidates of ``prefixes`` scored at each of the ``S`` micro-batch counts ``ms``
    in one model call: the island batch carries a leading axis of ``S``, so every term that does
    not read it (GEMMs, TP/CP/EP communication, the sharding part's state and traffic: most of
    the model) is computed once per cell and broadcast, and only the schedule, activation and
    ``m``-scaled terms are computed ``S`` times (elementwise, so each count's values are those of
    its own call).

    The inner options are not one axis of ``R_in`` but one broadcast axis per inner axis
    (:func:`_inner_split`: recompute x sharding x sync), so a term reads only the axes it
    depends on: the compute of a prefix at each recompute option, not at every sharding and sync
    option beside it. Row-major, those axes are the options' mixed-radix order, so the outputs
    reshape back to ``R_in`` options; every value is the same elementwise formula on the same
    inputs, only broadcast differently.

    Islands of one class (:func:`~.island_context.island_classes`) at the same ``m`` are scored
    once: the cells of the representative islands are packed, several prefixes to a row, into the
    island slots of the batch (each island's step, reasons, window and gradient bytes read its
    own slot's inputs only, the parameters the model's alone), then spread back over the islands.

    ``memory``: only ``bits``, ``mem`` and ``ok``, from :func:`~shardmeter.model.evaluate.island_memory`
    (the same reasons and memory as the full model's, no stage timed)."""
    sp = ctx.space
    R, n, r = sp.R_in, sp.n_islands, len(ctx.isl)
    radix = _inner_radix(sp)
    stack = _Stack(
        ctx=ctx,
        prefixes=prefixes,
        m4=[x[:, None, :] if x.ndim == 2 else x for x in ms],
        memory=memory,
        radix=radix,
        inner=_inner_split(sp, radix),
        per=max(1, EVAL_CELLS // max(1, R * n)) * (n // r),
    )
    P = len(prefixes)
    fields = MEMORY_FIELDS if memory else FIELDS
    res = [
        {k: np.empty((P, R, r), dtype=np.int64 if k == "bits" else float) for k in fields}
        | ({} if memory else {"params": np.empty((P, R, 1))})
        for _ in ms
    ]
    run_chunks(lambda lo: _chunk(stack, lo, res), range(0, P, stack.per))
    return [rs | {"ok": rs["bits"] == 0} for rs in res]


def _chunk(stack: _Stack, lo: int, res: list[Figures]) -> None:
    """Score prefixes ``lo .. lo + per - 1`` of the call and write their slice of ``res``."""
    ctx, radix, S = stack.ctx, stack.radix, len(stack.m4)
    n, r, kx = ctx.space.n_islands, len(ctx.isl), len(radix)
    pb = stack.prefixes[lo : lo + stack.per]
    with np.errstate(all="ignore"):
        mi = _chunk_inputs(stack, pb, lo)
        if stack.memory:
            probe = island_memory(mi, ctx.space.table)
            got = {"bits": probe.reasons, "mem": probe.memory_bytes}
            params = None
        else:
            out = evaluate(mi, ctx.space.table, detail=False, islands_only=True)
            isl = out.island
            got = {
                "t": isl.step_s,
                "bits": out.reasons,
                "win": isl.ar_window_s,
                "gb": isl.grad_bytes,
                "mem": isl.memory_bytes,
            }
            params = np.asarray(out.params)
    sl = slice(lo, lo + len(pb))
    for k in got:
        x = np.asarray(got[k])
        stacked = S > 1 and x.ndim == 3 + kx  # else the same at every count
        for s, rs in enumerate(res):
            _store(rs[k][sl], x[s] if stacked else x, radix, n if stack.packed else r)
    if params is None:
        return
    x = params[0] if S > 1 and params.ndim == 2 + kx else params  # the same at every count
    x = _merge_inner(x, radix, 0)
    if stack.packed:  # each prefix takes its first cell's row
        rows = -(-len(pb) * r // n)
        x = np.broadcast_to(x, (rows, ctx.space.R_in))[(np.arange(len(pb)) * r) // n]
    for rs in res:
        rs["params"][sl, :, 0] = x


def _chunk_inputs(stack: _Stack, pb: np.ndarray, lo: int) -> ModelInputs:
    """The model inputs of prefixes ``pb`` (chunk ``lo``): base and prefix columns, packed when
    the call scores class representatives, spread over the inner axes, and the island batch of
    each micro-batch count (stacked on a leading axis when there are several)."""
    ctx, radix = stack.ctx, stack.radix
    sp, n, r, kx = ctx.space, ctx.space.n_islands, len(ctx.isl), len(radix)
    q = ctx.q[pb][:, None, :]
    batch = [(x[lo : lo + stack.per] * q).astype(float) for x in stack.m4]  # (pb, 1 or R, r)
    wide = max(b.shape[1] for b in batch)
    batch = [np.broadcast_to(b, (len(pb), wide, r)) for b in batch]
    inp = dict(sp.base)
    inp.update(sp.prefix_columns(pb))
    if stack.packed:
        inp = _pack(inp, len(pb), ctx.isl, n)
        batch = [_pack_cells(b, n) for b in batch]
    inp = {k: _spread_inner(k, v, kx) for k, v in inp.items()}
    inp.update(stack.inner)
    batch = [b.reshape(b.shape[0], *(radix if wide > 1 else (1,) * kx), b.shape[-1]) for b in batch]
    inp["training.island_batch"] = np.stack(batch) if len(batch) > 1 else batch[0]
    return ModelInputs.from_columns(inp)


def _store(dst: np.ndarray, x: np.ndarray, radix: tuple[int, ...], slots: int) -> None:
    """Write one count's model output ``x`` (what broadcasts to ``(rows, *radix, slots)``) into
    ``dst`` (``(P, R_in, r)``, C-contiguous): row ``g``'s slot ``s`` is cell ``g slots + s``, that
    is prefix ``(g slots + s) // r`` on island ``s % r`` (:func:`_pack_cells`' numbering; without
    packing ``slots = r`` and a row is a prefix), the inner axes row-major as ``R_in``. One strided
    copy, in place of merging, unpacking and assigning."""
    P, r = dst.shape[0], dst.shape[2]
    nr = slots // r  # prefixes per row
    rows = -(-P // nr)
    d = dst.reshape(P, *radix, r)
    src = np.broadcast_to(x, (rows, *radix, slots)).reshape(rows, *radix, nr, r)
    src = np.moveaxis(src, -2, 1)  # (rows, prefixes of the row, *radix, r)
    full = P // nr
    np.copyto(d[: full * nr].reshape(full, nr, *radix, r), src[:full], casting="unsafe")
    if full * nr < P:
        np.copyto(d[full * nr :], src[full, : P - full * nr], casting="unsafe")


def _inner_radix(sp: Space) -> tuple[int, ...]:
    """The option counts of the inner axes, outermost first (``(1,)`` without inner axes)."""
    return tuple(int(m) for m in sp.radix[sp.n_struct :]) or (1,)


def _inner_split(sp: Space, radix: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The inner axes' input columns, axis ``i`` of them along broadcast axis ``1 + i`` of
    ``(1, *radix, I[, tiers])``: :meth:`~.space.Space.inner_columns` with its ``R_in`` axis
    split into one axis per inner axis (strides are row-major, so option ``r``'s codes are its
    position in that grid)."""
    cols: dict[str, np.ndarray] = {}
    kx = len(radix)
    for i, axis in enumerate(sp.axes[sp.n_struct :]):
        for k, arr in axis.cols.items():
            a = np.asarray(arr)
            cols[k] = a.reshape((1,) * (1 + i) + a.shape[:1] + (1,) * (kx - 1 - i) + a.shape[1:])
    return cols


def _spread_inner(key: str, v: np.ndarray, kx: int) -> np.ndarray:
    """An input column of the ``(rows, 1, I[, tiers])`` layout with its option axis (of length 1:
    base and prefix columns do not vary with the inner options) as ``kx`` axes, for
    :func:`_inner_split`'s columns; columns of fewer axes broadcast as they are."""
    a = np.asarray(v)
    ax = -2 if key in TIER_COLUMNS else -1
    core = a.ndim + ax + 1
    if core < 3 or kx == 1:
        return v
    if a.shape[core - 2] != 1:  # pragma: no cover - base and prefix columns never vary along it
        raise AssertionError(f"{key}: input column varies along the inner options")
    return a.reshape(a.shape[: core - 2] + (1,) * kx + a.shape[core - 1 :])


def _merge_inner(x: np.ndarray, radix: tuple[int, ...], tail: int) -> np.ndarray:
    """An output over ``(..., rows, *radix[, islands])`` (``tail`` trailing island axes: 1 or 0)
    as ``(..., rows, R_in[, islands])``, broadcast where it does not vary."""
    kx = len(radix)
    if kx == 1:
        return x
    lead = x.shape[: x.ndim - kx - tail]
    shape = (*lead, *radix, *x.shape[x.ndim - tail :])
    y = np.broadcast_to(x, shape)
    return y.reshape(*lead, int(np.prod(radix)), *x.shape[x.ndim - tail :])


def _pack(inp: Mapping[str, np.ndarray], P: int, reps: list[int], n: int) -> dict[str, np.ndarray]:
    """Input columns of ``P`` prefixes (``(P or 1, R_in or 1, I[, tiers])``) on the islands
    ``reps`` only, packed into rows of ``n`` island slots: slot ``s`` of row ``g`` holds cell
    ``c = g n + s``, that is prefix ``c // len(reps)`` on island ``reps[c % len(reps)]`` (the
    last cell repeated past the end); ``n`` is a multiple of ``len(reps)``."""
    r = len(reps)
    G = -(-P * r // n)
    c = np.minimum(np.arange(G * n), P * r - 1).reshape(G, n)
    pi, ii = c // r, np.asarray(reps, dtype=np.int64)[c % r]
    slot = np.asarray([reps[s % r] for s in range(n)], dtype=np.int64)
    out = {}
    for k, v in inp.items():
        a = np.asarray(v)
        ax = -2 if k in TIER_COLUMNS else -1
        core = a.shape[: a.ndim + ax + 1]
        c3 = (1,) * (3 - len(core)) + core
        if c3[2] == 1 and c3[0] == 1:
            out[k] = a  # the same in every cell of a row
        elif c3[0] == 1:
            out[k] = np.take(a, slot, axis=ax)  # slot s is island reps[s % r] in every row
        else:
            a = a.reshape(c3 + a.shape[len(core) :])
            x = a[pi, :, ii if c3[2] > 1 else 0]  # (G, n, R, tiers...)
            out[k] = np.moveaxis(x, 1, 2)
    return out


def _pack_cells(x: np.ndarray, n: int) -> np.ndarray:
    """Cells ``(P, R, r)`` (prefix-major, as :func:`_pack` numbers them) into rows of ``n``
    slots: ``(G, R, n)``, the last cell repeated past the end."""
    P, R, r = x.shape
    G = -(-P * r // n)
    c = np.minimum(np.arange(G * n), P * r - 1)
    flat = np.moveaxis(x, 2, 1).reshape(P * r, R)[c]
    return np.moveaxis(flat.reshape(G, n, R), 1, 2)
