"""Per-island layouts for ``shardmeter plan`` over several islands, searched by decomposition.

Each island gets its own replica shape (``tp``, ``pp``, ``cp``, ``ep``, ``sp``), data-parallel
size (the nodes it uses, ``0`` = dropped), schedule, sharding and micro-batch size
(``[[island]] micro_batch``), and its own share of the global batch; recompute and the sync
strategy are common to all islands (the scenario has no per-island ``recompute``).

1. **Per island** (:func:`_island_candidates`): every island layout x option is scored by the
   full model in one batch whose rows hold one candidate for *every* island (row ``k`` gives
   island ``j`` its ``k``-th node count), so the cost is that of scoring each island alone. A
   layout's step is affine in its micro-batches per replica ``m`` for the bundled schedules
   (Narayanan et al. 2021: ``m (t_f + t_b) + bubble + dp + optimizer``) and its memory does not
   fall with ``m``: it is evaluated at ``m = d, 2d`` and at the largest ``m`` the batch allows
   (``d`` is 1, or ``pp`` where the schedule needs multiples of ``pp``) in one stacked call
   (:func:`_evaluate_stack`: the ``m``-independent terms computed once), the largest feasible
   ``m`` is bracketed by regula falsi on the memory figures, then bisection
   (:func:`_largest_feasible`, whose probes run the model's memory path only), and a layout
   whose third point is off the line is kept only at the points evaluated (a bound, never a
   wrong claim). Islands whose model inputs are all the
   same (:func:`_island_classes`: same GPU, nodes, links; prices may differ) are scored once,
   their cells packed into the batch's island slots, and share their lines and curves.
2. **Curves**: for each island, node count, micro-batch, recompute, sync option and number of
   islands used, the shortest finish time (:func:`~shardmeter.model.islands.island_finish`) at
   every share ``b`` of the global batch; and the *free* curve (:data:`FREE_MBS`), the
   shortest of those over the island's micro-batches at each share (each island's micro-batch
   is its own, so its best one is taken there, and no product of micro-batches is formed).
3. **Combination**: for every *class* (node count per island, micro-batch common to the
   islands or free, recompute, sync option) the shares are split by an exact min-max
   (:func:`~shardmeter.model.islands.min_max_shares`). The free classes alone are exact (and
   count the plans); the common ones are the alternatives a top-K lists next to them.
   Within a class the cost is ``step x sum of the rented GPUs' prices + egress``, increasing in
   the step, so the class's fastest plan is also its cheapest: the fastest plan, the cheapest
   and the Pareto front over all classes are exact over this space. No product of layouts is
   ever formed; the classes are the product of node counts only.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from shardmeter.errors import ShardMeterError
from shardmeter.explore.search.axes import Axis, plan_axes
from shardmeter.explore.search.knobs import check_only, normalise_only, pick
from shardmeter.explore.search.layouts import _replica_shapes, check_islands
from shardmeter.explore.search.space import Space, plan_raw
from shardmeter.explore.search.to_quality import quality_factor
from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.load.scenario import load_scenario
from shardmeter.model.dispatch import by_code
from shardmeter.model.evaluate import evaluate, island_memory
from shardmeter.model.feasibility import REASONS, Reason, batch_reasons
from shardmeter.model.islands import fold_min_max, island_finish, ring_pace, unfold_min_max
from shardmeter.parts import PipeInputs
from shardmeter.report.pricing import egress_usd, egress_usd_per_gb, gpu_hour_usd, gpu_time_usd

__all__ = ["search_islands", "MAX_CLASSES"]

#: Most classes (node count per island x micro-batch x recompute x sync option) combined.
MAX_CLASSES = 2_000_000
#: Model input cells (candidates x islands) per ``evaluate`` call.
EVAL_CELLS = 1 << 18


def _node_options(sc, only, given=None) -> list[list[int]]:
    """Each island's node counts tried: 0 (dropped), powers of two and all of its nodes, or
    ``given[j]`` (an ``[[offer]]`` scenario: :func:`shardmeter.load.offers.offer_islands`); an
    ``--only island[i].nodes`` keeps its values (and then no 0)."""
    opts = []
    for j, isl in enumerate(sc.islands):
        key = f"island[{j}].nodes"
        default = [0, *sorted({2**k for k in range(int(math.log2(isl.nodes)) + 1)} | {int(isl.nodes)})]
        if given is not None:
            default = [int(v) for v in given[j]]
        opts.append([int(v) for v in pick(only, key, default, int(isl.nodes))])
    return opts


def _layout(sc, islands, only, max_gpus, given=None) -> tuple[dict[str, np.ndarray], list[list[int]]]:
    """Rows = replica shape x node index ``k``; island ``j`` uses its ``k``-th positive node count
    (the last one past its list). ``valid`` (rows, I): the island holds at least one replica."""
    gpn = np.array([isl.gpus_per_node for isl in islands], dtype=np.int64)
    opts = _node_options(sc, only, given)
    pos = [[n for n in o if n > 0] or [0] for o in opts]
    g_max = int(max(n * g for o, g in zip(pos, gpn, strict=True) for n in o))
    if max_gpus is not None:
        g_max = min(g_max, int(max_gpus))
    shapes = _replica_shapes(sc, only, max(g_max, 1))
    rep = shapes["tp"] * shapes["pp"] * shapes["cp"]
    K = max(len(p) for p in pos)
    nodes_k = np.array([[p[min(k, len(p) - 1)] for p in pos] for k in range(K)], dtype=np.int64)  # (K, I)
    si, ki = (a.ravel() for a in np.meshgrid(np.arange(len(rep)), np.arange(K), indexing="ij"))
    nodes = nodes_k[ki]
    dp = (nodes * gpn[None, :]) // rep[si][:, None]
    valid = dp >= 1
    if max_gpus is not None:
        valid &= dp * rep[si][:, None] <= max_gpus
    keep = valid.any(axis=1)
    layout = {k: v[si[keep]] for k, v in shapes.items()}
    layout["dp"] = np.maximum(dp[keep], 1)
    layout["nodes"] = nodes[keep]
    layout["_k"] = ki[keep]
    layout["_valid"] = valid[keep]
    if len(layout["tp"]) == 0:
        raise ShardMeterError("plan: no layout fits (check --max-gpus and --only)")
    return layout, opts


def _check_classes(node_opts, option_counts, n_sync: int) -> None:
    """Refuse, before any scoring, more classes than :data:`MAX_CLASSES` (a Python integer:
    the product of many islands' node counts overflows int64)."""
    combos = math.prod(len(o) for o in node_opts)
    n = combos * math.prod(option_counts) * n_sync
    if n > MAX_CLASSES:
        many = f"{n:,}" if n < 10**15 else f"about 10^{len(str(n)) - 1}"
        raise ShardMeterError(
            f"plan: {many} node combinations x options of {len(node_opts)} islands is too many "
            f"(limit {MAX_CLASSES:,}); restrict with --only island[i].nodes=... (island[i].nodes alone "
            "keeps that island's nodes), --only mbs=..., --only recompute=..."
        )


def _reduced_sync(axis: Axis) -> tuple[Axis, list[int]]:
    """The sync axis with one option per strategy (an island's step and memory depend on the
    strategy, not on ``inner_steps`` or bits), and each full option's reduced index."""
    first: dict[str, int] = {}
    group = []
    for i, ov in enumerate(axis.overrides):
        name = ov["sync.strategy"]
        first.setdefault(name, i)
        group.append(list(first).index(name))
    idx = list(first.values())
    cols = {k: v[idx] for k, v in axis.cols.items()}
    return Axis("sync", [axis.overrides[i] for i in idx], cols), group


class _Ctx:
    """What the per-island scoring needs: the space (layout x axes), the island count, the
    global batch and per-prefix arrays."""

    def __init__(self, space: Space, gb: int):
        self.space, self.gb = space, gb
        li, codes = space._prefix_codes(np.arange(space.n_prefixes, dtype=np.int64))
        self.li, self.codes = li, codes
        cols = space._gather(li, space.axes[: space.n_struct], codes)
        self.cols = cols
        n = space.n_islands

        def g(k):
            return np.broadcast_to(
                np.asarray(cols[k] if k in cols else space.base[k], dtype=float), (len(li), n)
            )

        self.g = g
        self.q = (g("layout.dp") * g("training.micro_batch")).astype(np.int64)  # sequences per m
        self.rep = _island_classes(space)
        self.reps = sorted(set(self.rep))
        self.isl = list(range(n))  # the island columns this context scores

    def only(self, isl: list[int]) -> _Ctx:
        """The same context on islands ``isl`` only (``g``, ``q`` and :func:`_evaluate`'s
        islands are those columns)."""
        c = copy.copy(self)
        g0 = self.g
        c.g = lambda k: g0(k)[:, isl]
        c.q, c.isl = self.q[:, isl], list(isl)
        return c


#: Input columns with a trailing tier axis after the island axis.
_TIER_COLUMNS = ("topology.tier_gpus", "topology.tier_bytes_s", "topology.tier_latency_s")


def _island_classes(space: Space) -> list[int]:
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
        ax = -2 if k in _TIER_COLUMNS else -1
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


def _struct_bits(ctx: _Ctx, m: np.ndarray) -> np.ndarray:
    """Per prefix and island, the structural reason bits at ``m`` micro-batches per replica."""
    g = ctx.g
    pp = g("layout.pp")
    v = np.where(pp > 1, np.maximum(g("layout.virtual_stages"), 1.0), 1.0)
    m = m.astype(float)
    bits = batch_reasons(
        m, pp, v, g("model.layers"), g("layout.first_stage_layers"), g("layout.last_stage_layers")
    )
    pipe = PipeInputs(
        pp=pp,
        micro_batches=m,
        virtual_stages=v,
        stage_s=np.zeros(()),
        forward_s=np.zeros(()),
        weight_grad_s=np.zeros(()),
    )

    def run(code: int) -> dict[str, Any]:
        part, opts = ctx.space.table.get("schedule", code)
        return {"bad": np.asarray(part.infeasible(pipe, opts), dtype=float)}

    bad = np.broadcast_to(by_code(g("layout.schedule"), run)["bad"], bits.shape)
    return np.asarray(bits, dtype=np.int64) | np.where(bad > 0, int(Reason.SCHEDULE), 0)


def _evaluate_stack(
    ctx: _Ctx, prefixes: np.ndarray, ms: list[np.ndarray], memory: bool = False
) -> list[dict[str, np.ndarray]]:
    """:func:`_evaluate` at each of the ``S`` micro-batch counts ``ms`` in one model call: the
    island batch carries a leading axis of ``S``, so every term that does not read it (GEMMs,
    TP/CP/EP communication, the sharding part's state and traffic: most of the model) is
    computed once per cell and broadcast, and only the schedule, activation and ``m``-scaled
    terms are computed ``S`` times (elementwise, so each count's values are those of its own call).

    The inner options are not one axis of ``R_in`` but one broadcast axis per inner axis
    (:func:`_inner_split`: recompute x sharding x sync), so a term reads only the axes it
    depends on: the compute of a prefix at each recompute option, not at every sharding and sync
    option beside it. Row-major, those axes are the options' mixed-radix order, so the outputs
    reshape back to ``R_in`` options; every value is the same elementwise formula on the same
    inputs, only broadcast differently.

    Islands of one class (:func:`_island_classes`) at the same ``m`` are scored once: the cells
    of the representative islands are packed, several prefixes to a row, into the island slots
    of the batch (each island's step, reasons, window and gradient bytes read its own slot's
    inputs only, the parameters the model's alone), then spread back over the islands.

    ``memory``: only ``bits``, ``mem`` and ``ok``, from :func:`~shardmeter.model.evaluate.island_memory`
    (the same reasons and memory as the full model's, no stage timed)."""
    sp = ctx.space
    R, n = sp.R_in, sp.n_islands
    radix = _inner_radix(sp)
    kx = len(radix)
    reps = ctx.isl
    r = len(reps)
    packed = r < n
    S = len(ms)
    m4 = [x[:, None, :] if x.ndim == 2 else x for x in ms]
    per = max(1, EVAL_CELLS // max(1, R * n)) * (n // r)
    P = len(prefixes)
    fields = _MEMORY_FIELDS if memory else _FIELDS
    res = [
        {k: np.empty((P, R, r), dtype=np.int64 if k == "bits" else float) for k in fields}
        | ({} if memory else {"params": np.empty((P, R, 1))})
        for _ in range(S)
    ]
    inner = _inner_split(sp, radix)

    def chunk(lo: int) -> None:
        pb = prefixes[lo : lo + per]
        q = ctx.q[pb][:, None, :]
        batch = [(x[lo : lo + per] * q).astype(float) for x in m4]  # (pb, 1 or R, r)
        wide = max(b.shape[1] for b in batch)
        batch = [np.broadcast_to(b, (len(pb), wide, r)) for b in batch]
        inp = dict(sp.base)
        inp.update(sp.prefix_columns(pb))
        if packed:
            inp = _pack(inp, len(pb), reps, n)
            batch = [_pack_cells(b, n) for b in batch]
        inp = {k: _spread_inner(k, v, kx) for k, v in inp.items()}
        inp.update(inner)
        batch = [b.reshape(b.shape[0], *(radix if wide > 1 else (1,) * kx), b.shape[-1]) for b in batch]
        inp["training.island_batch"] = np.stack(batch) if S > 1 else batch[0]
        with np.errstate(all="ignore"):
            mi = ModelInputs.from_columns(inp)
            if memory:
                probe = island_memory(mi, sp.table)
                got = {"bits": probe.reasons, "mem": probe.memory_bytes}
            else:
                out = evaluate(mi, sp.table, detail=False, islands_only=True)
                isl = out.island
                got = {
                    "t": isl.step_s,
                    "bits": out.reasons,
                    "win": isl.ar_window_s,
                    "gb": isl.grad_bytes,
                    "mem": isl.memory_bytes,
                }
        sl = slice(lo, lo + len(pb))
        for k in fields:
            x = np.asarray(got[k])
            stacked = S > 1 and x.ndim == 3 + kx  # else the same at every count
            for s, rs in enumerate(res):
                _store(rs[k][sl], x[s] if stacked else x, radix, n if packed else r)
        if memory:
            return
        x = np.asarray(out.params)
        x = x[0] if S > 1 and x.ndim == 2 + kx else x  # the model's parameters: the same at every count
        x = _merge_inner(x, radix, 0)
        if packed:
            # each prefix takes its first cell's row
            rows = -(-len(pb) * r // n)
            x = np.broadcast_to(x, (rows, R))[(np.arange(len(pb)) * r) // n]
        for rs in res:
            rs["params"][sl, :, 0] = x

    starts = range(0, P, per)
    _run_chunks(chunk, starts)
    return [rs | {"ok": rs["bits"] == 0} for rs in res]


#: The outputs :func:`_evaluate_stack` keeps: each island's step (``t``), reason bits, all-reduce
#: window (``win``), gradient bytes (``gb``) and memory (``mem``).
_FIELDS = ("t", "bits", "win", "gb", "mem")
#: What a memory probe keeps.
_MEMORY_FIELDS = ("bits", "mem")


#: Threads that score the chunks of one :func:`_evaluate_stack` call side by side. The model is
#: numpy elementwise work on arrays of a few hundred thousand cells, and numpy releases the GIL
#: inside each such operation, so chunks overlap on the cores; each chunk writes its own slice of
#: the outputs and reads only shared inputs, so the values are those of the serial loop.
EVAL_THREADS = min(2, os.cpu_count() or 1)


def _run_chunks(fn, starts) -> None:
    """``fn(lo)`` for every chunk start, on :data:`EVAL_THREADS` threads when there are several."""
    starts = list(starts)
    if EVAL_THREADS <= 1 or len(starts) <= 1:
        for lo in starts:
            fn(lo)
        return
    with ThreadPoolExecutor(max_workers=EVAL_THREADS) as pool:
        for f in [pool.submit(fn, lo) for lo in starts]:
            f.result()


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


def _spread_inner(key: str, v: Any, kx: int) -> Any:
    """An input column of the ``(rows, 1, I[, tiers])`` layout with its option axis (of length 1:
    base and prefix columns do not vary with the inner options) as ``kx`` axes, for
    :func:`_inner_split`'s columns; columns of fewer axes broadcast as they are."""
    a = np.asarray(v)
    ax = -2 if key in _TIER_COLUMNS else -1
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


def _pack(inp: dict[str, Any], P: int, reps: list[int], n: int) -> dict[str, Any]:
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
        ax = -2 if k in _TIER_COLUMNS else -1
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


def _island_candidates(ctx: _Ctx) -> dict[str, Any]:
    """Score every island layout x option (see the module docstring, step 1): the
    representative island of each class (:func:`_island_classes`) only, where their number
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

    out["reasons"] = spread(out["reasons"])
    out["live"] = {k: (v if k in ("prefix", "params") else spread(v)) for k, v in out["live"].items()}
    out["duplicates"] = out["_dup"] @ np.bincount(ridx, minlength=len(reps))
    return out


def _rep_candidates(ctx: _Ctx) -> dict[str, Any]:
    """:func:`_island_candidates` on the context's islands ``ctx.isl``; ``_dup``: per island,
    the duplicate candidates skipped."""
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
    R = sp.R_in
    cand = {"prefix": live, "K": K[live], "d": d[live]}
    reasons = np.zeros((P, n), dtype=np.int64)
    reasons[:] = base_bits
    counts = {"rows": 0}
    dup_isl = np.sum(np.where(dup_alive, M, 0), axis=0) * R
    counts["duplicates"] = int(np.sum(dup_isl))
    if live.size == 0:
        return {
            "live": cand,
            "reasons": reasons,
            "model_rows": 0,
            "memory_rows": 0,
            "R": R,
            "duplicates": counts["duplicates"],
            "_dup": dup_isl,
        }
    Kl, dl = K[live], np.maximum(d[live], 1)
    al = alive[live][:, None, :]
    # m = d, 2d and the largest m the batch allows, in one stacked call (where K < 3 the extra
    # counts repeat the last one the batch allows, and are read only where K says so)
    K3 = Kl[:, None, :]
    e1, e2, eK = _evaluate_stack(ctx, live, [dl, np.minimum(2, Kl) * dl, Kl * dl])
    counts["rows"] = 3 * live.size * R
    f1 = e1["ok"] & al
    f2 = e2["ok"] & f1 & (K3 >= 2)
    fK = eK["ok"] & f1
    kmem = np.where(fK, K3, np.where(f2, 2, np.where(f1, 1, 0)))
    # infeasible at K (or at 2d): the largest feasible m lies between the last feasible and it
    hi = np.where(fK | ~f1, kmem, np.where(f2, K3, 2))
    kmem, counts["memory_rows"] = _largest_feasible(ctx, live, dl, kmem, hi, (e1, e2, eK))
    t1 = e1["t"]
    slope = np.where(f2, e2["t"] - t1, 0.0)
    # the line through m = d and 2d must meet the model at the largest m; otherwise keep the points
    pred = t1 + (Kl[:, None, :] - 1) * slope
    off = fK & (Kl[:, None, :] > 2) & (np.abs(eK["t"] - pred) > 1e-9 * np.abs(eK["t"]))
    kmem = np.where(off, np.minimum(kmem, 2), kmem)
    r_bits = np.where(f1, 0, e1["bits"] | np.where(al, 0, int(Reason.TOO_MANY_GPUS)))
    cand.update(
        t1=t1,
        slope=slope,
        kmem=kmem,
        win=e1["win"],
        gbytes=e1["gb"],
        params=e1["params"],
        rbits=r_bits,
    )
    return {
        "live": cand,
        "reasons": reasons,
        "model_rows": counts["rows"],
        "memory_rows": counts["memory_rows"],
        "R": R,
        "duplicates": counts["duplicates"],
        "_dup": dup_isl,
    }


def _largest_feasible(ctx: _Ctx, live, dl, lo, hi, evals) -> tuple[np.ndarray, int]:
    """The largest feasible ``k`` (``m = k d``) per cell, given ``lo`` feasible (0: none) and
    ``hi`` infeasible (``hi == lo``: settled), feasibility falling once with ``m`` (memory grows
    with it). Bracketing, as bisection does, but each probe is where the line through the
    bracket's two memory figures meets the GPU's memory (regula falsi; exact in one round where
    memory is affine in ``m``, as it is below a schedule's in-flight cap), probed with its
    successor in one stacked call; a cell still open after two such rounds, or whose ``hi`` fails
    for another reason than memory, is bisected. The probes read feasibility and memory only, so
    they run :func:`_evaluate_stack`'s memory path (the full model's reasons and memory, no stage
    timed). Returns ``(lo, probe rows scored)``."""
    R = ctx.space.R_in
    rows = np.flatnonzero(((hi - lo) > 1).any(axis=(1, 2)))  # rows with an open cell: a settled
    e1, e2, eK = ({k: e[k][rows] for k in ("mem", "bits")} for e in evals)  # row stays settled
    cap = np.broadcast_to(ctx.g("hardware.memory_bytes")[live[rows]][:, None, :], e1["mem"].shape)

    def at(k, key):  # the figure at k = 1, 2 or K (the three points evaluated)
        return np.where(k <= 1, e1[key], np.where(k == 2, e2[key], eK[key]))

    lo_all, open_rows = lo, rows
    lo, hi = lo[rows], hi[rows]
    live, dl = live[rows], dl[rows]
    m_lo, m_hi = at(lo, "mem"), at(hi, "mem")
    mem_only = at(hi, "bits") == int(Reason.MEMORY)
    rnd = rows_n = 0
    rows = np.arange(len(lo))  # positions in the open rows
    while True:
        l_, h_ = lo[rows], hi[rows]
        t = (h_ - l_) > 1
        keep = t.any(axis=(1, 2))
        rows, t, l_, h_ = rows[keep], t[keep], l_[keep], h_[keep]
        if rows.size == 0:
            lo_all[open_rows] = lo
            return lo_all, rows_n
        mid = (l_ + h_) // 2
        if rnd < 2:
            ml, mh, c = m_lo[rows], m_hi[rows], cap[rows]
            ok = mem_only[rows] & (mh > ml) & np.isfinite(ml) & np.isfinite(mh)
            with np.errstate(all="ignore"):
                guess = l_ + np.floor((c - ml) / np.where(ok, mh - ml, 1.0) * (h_ - l_))
            guess = np.where(ok & np.isfinite(guess), np.clip(guess, l_ + 1, h_ - 1), mid).astype(np.int64)
            probes = [np.where(t, guess, l_), np.where(t, np.minimum(guess + 1, h_ - 1), l_)]
        else:
            probes = [np.where(t, mid, l_)]
        es = _evaluate_stack(
            ctx, live[rows], [np.maximum(p, 1) * dl[rows][:, None, :] for p in probes], memory=True
        )
        rows_n += len(probes) * rows.size * R
        for p, e in zip(probes, es, strict=True):
            sel = t & (p > l_) & (p < h_)
            # a feasible probe raises lo, an infeasible one lowers hi (the probes ascend)
            up = sel & e["ok"]
            l_ = np.where(up, p, l_)
            m_lo[rows] = np.where(up, e["mem"], m_lo[rows])
            dn = sel & ~e["ok"]
            h_ = np.where(dn, p, h_)
            m_hi[rows] = np.where(dn, e["mem"], m_hi[rows])
            mem_only[rows] = np.where(dn, e["bits"] == int(Reason.MEMORY), mem_only[rows])
        lo[rows], hi[rows] = l_, h_
        rnd += 1


def _primary_counts(bits: np.ndarray, weight: np.ndarray) -> dict[int, int]:
    """Infeasible candidates per primary reason (the lowest bit: checks run in that order)."""
    out: dict[int, int] = {}
    low = bits & (-bits)
    for b in REASONS:
        sel = low == b
        if np.any(sel):
            out[b] = int(np.sum(np.broadcast_to(weight, bits.shape)[sel]))
    return out


def search_islands(sc, est, obj: dict[str, Any], only, max_gpus, node_options=None) -> dict[str, Any]:
    """The decomposed search (module docstring). Returns counts and the chosen plans, each with
    its overrides (islands kept, per-island layout, shares) and its predicted step and cost.
    ``node_options``: each island's node counts to try (default: 0, powers of two and all)."""
    check_islands(len(sc.islands))
    only = normalise_only(only)
    check_only(only, sc, est.registry)
    raw = plan_raw(sc)
    resolved = est.resolve(load_scenario(raw, registry=est.registry))
    islands = resolved.islands
    n = len(islands)
    table = PartTable()
    base = est.inputs(resolved, table)[0].columns()
    layout, node_opts = _layout(sc, islands, only, max_gpus, node_options)
    axes = plan_axes(est, raw, sc, only, base, table, n)
    sync_full = next(a for a in axes if a.name == "sync")
    sync_red, sync_group = _reduced_sync(sync_full)
    axes = [sync_red if a.name == "sync" else a for a in axes]
    layout["_bits"] = np.zeros(len(layout["tp"]), dtype=np.int64)
    n_mbs = next((len(a) for a in axes if a.name == "micro_batch"), 1)
    if n_mbs >= FREE_MBS:
        raise ShardMeterError(f"plan: at most {FREE_MBS - 1} micro-batch sizes per island (--only mbs=...)")
    _check_classes(
        node_opts,
        [n_mbs + (n_mbs > 1), *(len(a) for a in axes if a.name == "recompute")],
        len(sync_full),
    )
    space = Space(
        base,
        {k: v for k, v in layout.items() if k != "_valid" and k != "_k"}
        | {"_valid": layout["_valid"], "_k": layout["_k"]},
        axes,
        n,
        obj,
        [int(i.nodes) for i in islands],
        table,
    )
    gb = int(sc.training.global_batch)
    ctx = _Ctx(space, gb)
    sc_res = _island_candidates(ctx)
    cand = sc_res["live"]
    R = space.R_in
    # per-island structural rejections (whole shares) + model rejections at m = d
    K_all = np.maximum(gb // np.maximum(ctx.q, 1), 1)
    reasons = _primary_counts(sc_res["reasons"], K_all * R)
    evaluated = int(np.sum(K_all)) * R
    feasible = 0
    if "t1" in cand:
        w = np.broadcast_to(cand["K"][:, None, :], cand["rbits"].shape)
        for b, c in _primary_counts(cand["rbits"], w).items():
            reasons[b] = reasons.get(b, 0) + c
        feasible = int(np.sum(cand["kmem"]))
    plans, represented = (
        _combine(sc, est, resolved, space, ctx, cand, node_opts, sync_full, sync_group, obj)
        if "t1" in cand
        else ([], 0.0)
    )
    return {
        "evaluated": evaluated,
        "feasible": feasible,
        "reasons": reasons,
        "model_rows": sc_res["model_rows"],
        "memory_rows": sc_res["memory_rows"],
        "duplicates": sc_res["duplicates"],
        "combined_plans": represented,
        "candidates": plans,
        "space": {a.name: len(a) for a in space.axes} | {"layouts": space.n_layouts, "sync": len(sync_full)},
        "space_size": evaluated,
        "_describe": (space, ctx, sync_full),
    }


#: The micro-batch code of a class whose islands each take their own best micro-batch.
FREE_MBS = 63


def _class_key(node_index, mbs_code, rec_code):
    """One integer per (node index, micro-batch code, recompute code); ``mbs_code`` below
    :data:`FREE_MBS`, or it for the island's best over its micro-batches."""
    return (node_index * 64 + mbs_code) * 64 + rec_code


def _with_free(curves: dict[int, tuple[np.ndarray, np.ndarray]]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
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
        out[_class_key(nk, FREE_MBS, rc)] = (fin[best, cols], arg[best, cols])
    return out


def _lines(ctx: _Ctx, cand, j: int, grp: int) -> dict[str, np.ndarray] | None:
    """Island ``j``'s feasible lines (layout x inner option of sync group ``grp``): step at
    ``m = d`` and slope per ``d`` micro-batches, largest ``m / d``, window, gradient bytes,
    class key (node index, micro-batch code, recompute code: :func:`_class_key`), share
    quantum, and the id of their (key, quantum, largest ``m``) group. ``None`` when none is
    feasible."""
    sp = ctx.space
    r_all = np.arange(sp.R_in, dtype=np.int64)[None, :]
    in_grp = _codes_of(ctx, "sync", cand["prefix"][:, None], r_all) == grp
    kmem = np.where(in_grp, cand["kmem"][:, :, j], 0)
    Lidx, Ridx = np.nonzero(kmem > 0)
    if Lidx.size == 0:
        return None
    p0 = cand["prefix"][Lidx]
    nk0 = sp.layout["_k"][ctx.li[p0]]
    key = _class_key(nk0, _codes_of(ctx, "micro_batch", p0, Ridx), _codes_of(ctx, "recompute", p0, Ridx))
    q = cand["d"][Lidx, j] * ctx.q[p0, j]
    km = kmem[Lidx, Ridx]
    w = np.int64(ctx.gb + 1)  # q and km are at most the global batch
    _, gid = np.unique((key * w + q) * w + km, return_inverse=True)
    return {
        "L": Lidx,
        "R": Ridx,
        "t1": cand["t1"][Lidx, Ridx, j],
        "sl": cand["slope"][Lidx, Ridx, j],
        "km": km,
        "win": cand["win"][Lidx, Ridx, j],
        "gb": cand["gbytes"][Lidx, Ridx, j],
        "params": cand["params"][Lidx, 0, 0],
        "key": key,
        "q": q,
        "gid": gid.ravel(),
    }


def _curves(ctx: _Ctx, lines, table: PartTable, sync_code: int, n_used: int, net):
    """An island's shortest finish time at every share, per class key: ``{key: (finish (gb+1,),
    pair index (gb+1,))}`` and the pair arrays, from its :func:`_lines`.

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
        if "_env" not in ln:
            ln["_env"] = _envelope(ctx, ln, ln["t1"], None)
        ukeys, best_t, arg, pairs = ln["_env"]
        idx = arg[arg >= 0]
        rows = pairs["rows"][idx]
        fin = np.full(best_t.shape, np.inf)
        egress = np.full(pairs["t"].shape, np.nan)
        fin[arg >= 0], egress[idx] = island_finish(
            table,
            sync_code,
            n_used,
            pairs["t"][idx],
            ln["win"][rows],
            ln["params"][rows],
            ln["gb"][rows],
            net,
        )
        pairs = pairs | {"egress": egress}
    else:
        a, _ = island_finish(table, sync_code, n_used, ln["t1"], ln["win"], ln["params"], ln["gb"], net)

        def finish(rows, t):
            return island_finish(
                table, sync_code, n_used, t, ln["win"][rows], ln["params"][rows], ln["gb"][rows], net
            )

        ukeys, fin, arg, pairs = _envelope(ctx, ln, a, finish)
    width = ctx.gb + 1
    f2, a2 = fin.reshape(len(ukeys), width), arg.reshape(len(ukeys), width)
    return _with_free({int(kk): (f2[i], a2[i]) for i, kk in enumerate(ukeys)}), pairs


def _common_finish(table: PartTable, sync_code: int, n_used: int, net, ln) -> bool:
    """Whether island ``finish`` reads neither the window nor the gradient bytes of the lines
    (the same values with those of the first line, at each line's smallest and largest step)."""
    if n_used < 2:
        return True
    one = {k: ln[k][:1] for k in ("win", "params", "gb")}
    # a few lines first: one that differs settles it without the full check
    for sel in (slice(0, 1024), slice(None)):
        for t in (ln["t1"][sel], (ln["t1"] + (ln["km"] - 1) * ln["sl"])[sel]):
            f, e = island_finish(
                table, sync_code, n_used, t, ln["win"][sel], ln["params"][sel], ln["gb"][sel], net
            )
            g, h = island_finish(table, sync_code, n_used, t, one["win"], one["params"], one["gb"], net)
            if not (np.array_equal(f, g) and np.array_equal(e, h)):
                return False
    return True


def _envelope(ctx: _Ctx, ln, a: np.ndarray, finish):
    """The smallest value per (class key, share) over the lines ``ln`` (ranked by ``a``, their
    value at ``m = d``): ``(keys, best (keys x (gb + 1),), pair index (same), pairs)``.

    Lines of one (key, quantum, largest ``m``) group that are no lower at ``m = d`` and no
    flatter than another are never the smallest, so only each group's 2-D front is expanded to
    every share; the smallest per (key, share) is one ``np.minimum.at`` over the expanded pairs
    (ties: the first pair). ``finish(rows, step)``: ``(value, egress)`` of the pairs; ``None``:
    the step itself (and no egress)."""
    order = _front_order(ln["gid"], a, ln["sl"])
    g_sorted = ln["gid"][order]
    new_g = np.ones(order.size, dtype=bool)
    new_g[1:] = g_sorted[1:] != g_sorted[:-1]
    s_sorted = ln["sl"][order]
    run = _segmented_running_min(s_sorted, new_g)
    prev = np.concatenate([[np.inf], run[:-1]])
    prev[new_g] = np.inf
    keep = np.sort(order[s_sorted < prev])
    reps = ln["km"][keep]
    rows = np.repeat(keep, reps)
    # k - 1 = 0 .. km - 1 along each kept line: a running count that restarts at each line
    # (the values of arange - repeat(starts)); per-line values repeated, not gathered per pair
    k1 = np.ones(rows.size, dtype=np.int64)
    if rows.size:
        k1[0] = 0
        ends = np.cumsum(reps)[:-1]
        nz = ends[ends < rows.size]
        k1[nz] = 1 - reps[: nz.size]
    np.cumsum(k1, out=k1)
    k = k1 + 1
    share = k * np.repeat(ln["q"][keep], reps)
    t = np.repeat(ln["t1"][keep], reps) + k1 * np.repeat(ln["sl"][keep], reps)
    val, egress = (t, None) if finish is None else finish(rows, t)
    ukeys, kidx = np.unique(ln["key"][keep], return_inverse=True)
    width = ctx.gb + 1
    cell = np.repeat(kidx.ravel(), reps) * width + share
    best = np.full(len(ukeys) * width, np.inf)
    np.minimum.at(best, cell, val)
    win = np.flatnonzero((val == best[cell]) & np.isfinite(val))
    ucell, first = np.unique(cell[win], return_index=True)
    arg = np.full(len(ukeys) * width, -1, dtype=np.int64)
    arg[ucell] = win[first]
    # a pair's layout and inner option are its line's: ``line_L[rows[i]]``, read for the few
    # pairs a plan picks, not expanded for all
    pairs = {
        "rows": rows,
        "line_L": ln["L"],
        "line_R": ln["R"],
        "k": k,
        "t": t,
        "egress": egress,
    }
    return ukeys, best, arg, pairs


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


def _share_counts(ctx: _Ctx, ln) -> dict[int, np.ndarray]:
    """Per class key, how many of the island's feasible lines can take each share ``b``
    (``0 .. gb``): a line of quantum ``q`` and largest ``m / d`` = ``km`` takes ``q .. km q``."""
    _, first, n = np.unique(ln["gid"], return_index=True, return_counts=True)
    key, q, km = ln["key"][first], ln["q"][first], ln["km"][first]
    g = np.repeat(np.arange(first.size), km)
    k = np.arange(g.size) - np.repeat(np.cumsum(km) - km, km) + 1
    ukeys, kidx = np.unique(key, return_inverse=True)
    width = ctx.gb + 1
    flat = np.bincount(kidx.ravel()[g] * width + k * q[g], weights=n[g], minlength=ukeys.size * width)
    out = {int(kk): flat[i * width : (i + 1) * width] for i, kk in enumerate(ukeys)}
    for kk in list(out):  # the free class: the lines of every micro-batch
        free = _class_key(kk // 4096, FREE_MBS, kk % 64)
        out[free] = out.get(free, 0) + out[kk]
    return out


def _plans_at(total: int, counts: list[np.ndarray]) -> float:
    """How many plans (one line per island, shares summing to ``total``) the counts make."""
    acc = counts[0][: total + 1]
    for c in counts[1:]:
        acc = np.convolve(acc, c[: total + 1])[: total + 1]
    return float(acc[total])


def _codes_of(ctx: _Ctx, name: str, prefixes, inner) -> np.ndarray:
    """The option code on axis ``name`` of (prefix, inner option) pairs (arrays that broadcast),
    whether the axis is structural (part of the prefix) or inner; zeros where it is absent."""
    sp = ctx.space
    shape = np.broadcast_shapes(np.shape(prefixes), np.shape(inner))
    names = [a.name for a in sp.axes]
    if name not in names:
        return np.zeros(shape, dtype=np.int64)
    i = names.index(name)
    out = ctx.codes[i][prefixes] if i < sp.n_struct else _inner_codes(sp)[name][inner]
    return np.broadcast_to(out, shape)


def _inner_codes(sp: Space) -> dict[str, np.ndarray]:
    """Each inner option's code on each inner axis (``recompute``, ``sharding``, ``sync``)."""
    r = np.arange(sp.R_in, dtype=np.int64)
    out = {"recompute": np.zeros(sp.R_in, np.int64), "sync": np.zeros(sp.R_in, np.int64)}
    for axis, s, m in zip(
        sp.axes[sp.n_struct :], sp.strides[sp.n_struct :], sp.radix[sp.n_struct :], strict=True
    ):
        out[axis.name] = (r // s) % m
    return out


def _combine(sc, est, resolved, space, ctx, cand, node_opts, sync_full, sync_group, obj):
    """Every class's exact min-max split (module docstring, step 3) -> candidate plans, and
    how many whole plans (a feasible line per island used, shares summing to the global batch)
    the classes hold: what a search scoring every combination would score."""
    n = space.n_islands
    islands = resolved.islands
    table = space.table
    # each island's own uplink; a ring over the islands used runs at their slowest (ring_pace)
    up = np.broadcast_to(np.asarray(space.base["network.wan_bytes_s"], dtype=float), (1, n))[0]
    lat = np.broadcast_to(np.asarray(space.base["network.wan_latency_s"], dtype=float), (1, n))[0]
    sync_codes = [
        int(np.asarray(sync_full.cols["network.sync"][i]).ravel()[0])
        if "network.sync" in sync_full.cols
        else int(np.asarray(space.base["network.sync"]).ravel()[0])
        for i in range(len(sync_full))
    ]
    pos = [[v for v in o if v > 0] for o in node_opts]
    price = np.array([gpu_hour_usd(isl) for isl in islands], dtype=float)
    e_price = np.array([egress_usd_per_gb(isl, resolved.network) for isl in islands], dtype=float)
    gpn = np.array([isl.gpus_per_node for isl in islands], dtype=float)
    mbs = ctx.g("training.micro_batch")  # (prefixes, islands): each island's own micro-batch
    mbs_axis = next((a for a in space.axes if a.name == "micro_batch"), None)
    mbs_n = len(mbs_axis) if mbs_axis is not None else 1
    # every micro-batch common to the islands (the alternatives top-K lists), then each island
    # its own best (the exact optimum; it alone counts the plans, which it all covers)
    mbs_classes = [*range(mbs_n), FREE_MBS] if mbs_n > 1 else [0]
    rec_axis = next((a for a in space.axes if a.name == "recompute"), None)
    rec_n = len(rec_axis) if rec_axis is not None else 1
    choices = [[-1 if v == 0 else pos[j].index(v) for v in node_opts[j]] for j in range(n)]
    cache: dict[tuple, Any] = {}
    line_cache: dict[tuple, Any] = {}
    folds: dict[tuple, Any] = {}
    factors: dict[tuple, float] = {}

    def factor(o, n_used, params):
        """The class's tokens factor (1 unless the objective prices quality; :mod:`.to_quality`)."""
        if obj.get("quality") is None:
            return 1.0
        if (o, n_used) not in factors:
            f = quality_factor(obj["quality"], table, sync_codes[o], params, n_used)
            factors[(o, n_used)] = float(np.asarray(f).reshape(-1)[0])
        return factors[(o, n_used)]

    def curves(j, o, used):
        n_used = len(used)
        net = ring_pace(up[used], lat[used]) if n_used > 1 else (1.0, 0.0)
        rj = ctx.rep[j]  # an island of the same class has the same lines and curves
        key = (rj, sync_group[o], sync_codes[o] if n_used > 1 else -1, n_used, net)
        if key not in cache:
            lk = (rj, sync_group[o])
            if lk not in line_cache:
                line_cache[lk] = _lines(ctx, cand, rj, sync_group[o])
            cache[key] = _curves(ctx, line_cache[lk], table, sync_codes[o], n_used, net)
        return cache[key]

    # Every class's curves, computed before the combination loop reads them from the cache: each
    # is its own numpy work on the class's lines, so they run side by side (:func:`_run_chunks`)
    jobs: dict[tuple, tuple] = {}
    for o in range(len(sync_full)):
        for combo in itertools.product(*choices):
            used = [j for j in range(n) if combo[j] >= 0]
            n_used = len(used)
            net = ring_pace(up[used], lat[used]) if n_used > 1 else (1.0, 0.0)
            for j in used:
                rj = ctx.rep[j]
                key = (rj, sync_group[o], sync_codes[o] if n_used > 1 else -1, n_used, net)
                jobs.setdefault(key, (rj, o, n_used, net))
    for lk in dict.fromkeys((rj, sync_group[o]) for rj, o, _, _ in jobs.values()):
        line_cache[lk] = _lines(ctx, cand, *lk)
    todo = list(jobs.items())

    def one_curve(i: int) -> None:
        key, (rj, o, n_used, net) = todo[i]
        cache[key] = _curves(ctx, line_cache[(rj, sync_group[o])], table, sync_codes[o], n_used, net)

    _run_chunks(one_curve, range(len(todo)))

    out = []
    represented = 0.0
    share_counts: dict[tuple, Any] = {}

    def counts(j, o, k):
        lk = (ctx.rep[j], sync_group[o])
        if lk not in share_counts:
            share_counts[lk] = _share_counts(ctx, line_cache[lk])
        return share_counts[lk][k]

    for o in range(len(sync_full)):
        for combo in itertools.product(*choices):
            used = [j for j in range(n) if combo[j] >= 0]
            if not used:
                continue
            n_used = len(used)
            per = [curves(j, o, used) for j in used]
            pace = ring_pace(up[used], lat[used]) if n_used > 1 else None
            if any(c[1] is None for c in per):
                continue
            for mc in mbs_classes:
                for rc in range(rec_n):
                    ck = [_class_key(combo[j], mc, rc) for j in used]
                    if any(k not in c[0] for k, c in zip(ck, per, strict=True)):
                        continue
                    cs = [c[0][k][0] for k, c in zip(ck, per, strict=True)]
                    # the fold of all islands but the last (one island: that island's curve)
                    head = len(used) - 1 if n_used > 1 else 1
                    fk = (o, n_used, pace, tuple(zip(used[:head], ck[:head], strict=True)))
                    if fk not in folds:
                        h, args = cs[0], []
                        for cur in cs[1:-1]:
                            h, arg = fold_min_max(h, cur, ctx.gb)
                            args.append(arg)
                        folds[fk] = (h, args)
                    h, args = folds[fk]
                    fin, shares = unfold_min_max(h, args, cs[-1] if n_used > 1 else None, ctx.gb)
                    if mc == mbs_classes[-1]:
                        represented += _plans_at(
                            ctx.gb, [counts(j, o, k) for j, k in zip(used, ck, strict=True)]
                        )
                    if shares is None:
                        continue
                    picks: list[dict[str, Any]] = []
                    for j, k, c, b in zip(used, ck, per, shares, strict=True):
                        idx = int(c[0][k][1][b])
                        pr = c[1]
                        pl, pr_inner = pr["line_L"][pr["rows"][idx]], pr["line_R"][pr["rows"][idx]]
                        p = int(cand["prefix"][pl])
                        picks.append(
                            {
                                "prefix": p,
                                "micro_batch": int(mbs[p, j]),
                                "inner": int(pr_inner),
                                "m": int(pr["k"][idx] * cand["d"][pl, j]),
                                "share": int(b),
                                "step": float(pr["t"][idx]),
                                "egress": float(pr["egress"][idx]),
                            }
                        )
                    billed = np.array([pos[j][combo[j]] * gpn[j] for j in used])
                    gpu = float(np.sum(gpu_time_usd(billed, price[used], fin)))
                    egress = (
                        float(egress_usd(picks[0]["egress"], float(np.sum(e_price[used]))))
                        if n_used > 1
                        else 0.0
                    )
                    p0 = per[0][1]
                    first = p0["line_L"][
                        p0["rows"][int(per[0][0][ck[0]][1][shares[0]])]
                    ]  # the model's parameters
                    params = float(cand["params"][first, 0, 0])
                    out.append(
                        {
                            "step": fin,
                            "cost_step": gpu + egress,
                            "factor": factor(o, n_used, params),
                            "sync": o,
                            "recompute": rc,
                            "islands": dict(zip(used, picks, strict=True)),
                            "nodes": {j: pos[j][combo[j]] for j in used},
                        }
                    )
    return out, represented


def select(cands: list[dict[str, Any]], obj: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The plans to report from the classes' optima: deadline and budget applied, plans of equal
    time and cost collapsed into one, then the top-K by time or cost, or the Pareto front."""
    steps = obj.get("steps") or 1.0
    counts = {"over_deadline": 0, "over_budget": 0, "equivalent": 0}
    keep = []
    for c in cands:
        if obj.get("deadline_s") is not None and c["step"] * steps > obj["deadline_s"]:
            counts["over_deadline"] += 1
            continue
        if obj.get("budget_usd") is not None and c["cost_step"] * steps > obj["budget_usd"]:
            counts["over_budget"] += 1
            continue
        keep.append(c)
    raw_cost = (lambda c: c["cost_step"]) if obj.get("price") is not None else (lambda c: 0.0)
    kind = obj["kind"]
    if obj.get("quality") is not None and kind != "pareto":  # to quality: both scaled by the factor

        def time_of(c):
            return c["step"] * c["factor"]

        def cost_of(c):
            return raw_cost(c) * c["factor"]
    else:
        time_of, cost_of = (lambda c: c["step"]), raw_cost
    rank = (lambda c: (time_of(c), cost_of(c))) if kind != "cost" else (lambda c: (cost_of(c), time_of(c)))
    keep.sort(key=rank)
    out: list[dict[str, Any]] = []
    for c in keep:
        if out and all(
            math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0) for a, b in zip(rank(c), rank(out[-1]), strict=True)
        ):
            counts["equivalent"] += 1
            continue
        out.append(c)
    if kind == "pareto":
        front, best = [], math.inf
        for c in sorted(out, key=lambda c: (c["step"], cost_of(c))):
            if cost_of(c) < best:
                front.append(c)
                best = cost_of(c)
        return front, counts
    return out[: obj["k"]], counts


def describe(raw: dict[str, Any], sc, c: dict[str, Any], ctx_data) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scenario ``estimate`` takes for plan ``c`` (islands kept, each with its nodes, its
    own ``parallelism`` table and, where the islands' differ, its own ``micro_batch``;
    ``batch_split = "balanced"``) and the plan's readable dict."""
    import copy

    space, ctx, sync_full = ctx_data
    data = copy.deepcopy(raw)
    isl_raw = data["island"]
    axes = {a.name: a for a in space.axes}
    kept, entries, pars = [], [], []
    for j, isl in enumerate(sc.islands):
        if j not in c["islands"]:
            entries.append({"name": isl.name, "nodes": 0, "nodes_available": int(isl.nodes), "dropped": True})
            continue
        pk = c["islands"][j]
        p, r = pk["prefix"], pk["inner"]
        li = int(ctx.li[p])
        lay = space.layout
        ov: dict[str, Any] = {}
        for name in ("schedule", "sharding"):
            if name in axes:
                ov.update(axes[name].overrides[int(_codes_of(ctx, name, p, r))])
        par = {
            "tp": int(lay["tp"][li]),
            "pp": int(lay["pp"][li]),
            "dp": int(lay["dp"][li, j]),
            "cp": int(lay["cp"][li]),
            "ep": int(lay["ep"][li]),
            "sequence_parallel": bool(lay["sp"][li]),
            "sharding": ov.get("parallelism.sharding", sc.parallelism.sharding),
            "schedule": ov.get("parallelism.schedule", sc.parallelism.schedule),
            "virtual_stages": int(ov.get("parallelism.virtual_stages", 1)),
        }
        par.update({k[12:]: v for k, v in ov.items() if k[12:] not in par})  # a part's searched options
        pars.append(par)
        d = dict(isl_raw[j])
        d["nodes"] = int(c["nodes"][j])
        d["parallelism"] = dict(par)
        d["micro_batch"] = pk["micro_batch"]
        kept.append(d)
        entries.append(
            {
                "name": isl.name,
                "nodes": int(c["nodes"][j]),
                "nodes_available": int(isl.nodes),
                "dp": par["dp"],
                "gpus": par["dp"] * par["tp"] * par["pp"] * par["cp"],
                "batch_share": pk["share"],
                "micro_batch": pk["micro_batch"],
                "micro_batches": pk["m"],
                "parallelism": par,
            }
        )
    data["island"] = kept
    tr = data.setdefault("training", {})
    mbs = [d["micro_batch"] for d in kept]
    if len(set(mbs)) == 1:  # one micro-batch: the scenario's own key, as without per-island ones
        tr["micro_batch"] = mbs[0]
        for d in kept:
            del d["micro_batch"]
    if "recompute" in axes:
        tr.update({k.split(".", 1)[1]: v for k, v in axes["recompute"].overrides[c["recompute"]].items()})
    sync_ov = sync_full.overrides[c["sync"]]
    if len(kept) > 1:
        sy = data.setdefault("sync", {})
        sy.update({k.split(".", 1)[1]: v for k, v in sync_ov.items()})
        sy["batch_split"] = "balanced"
    else:
        conv = data.pop("sync", {}).get("convergence")
        data.pop("network", None)
        if conv is not None:  # one island: factor 1, but the report still carries its quality
            data["sync"] = {"convergence": conv}
    common = {
        k: (pars[0][k] if all(q[k] == pars[0][k] for q in pars) else [q[k] for q in pars]) for k in pars[0]
    }
    plan = {
        "parallelism": common,
        # one micro-batch, or one per island kept where they differ (as ``parallelism``'s keys)
        "training": {"micro_batch": mbs[0] if len(set(mbs)) == 1 else mbs, "recompute": tr.get("recompute")},
        "islands": entries,
        "scenario": data,
    }
    if len(kept) > 1:
        plan["sync"] = {k[5:]: v for k, v in sync_ov.items()} | {"batch_split": "balanced"}
    return data, plan
