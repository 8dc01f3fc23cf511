"""Islands combined: the sync strategy's exposed time, idle time of faster islands, and the
report's arrays (throughput, utilisation, the GPU-weighted breakdown).

Each island's global-batch share is proportional to its data-parallel replicas, so faster
islands finish their (inner) steps early and wait for the slowest: at every step (allreduce) or
at the outer sync (DiLoCo), the same idle time per step either way. The breakdown of the global
step is the average GPU's: each island's own terms and idle time, GPU-weighted, plus the exposed
island sync; it sums to the step. Compute utilisation is as the DiLoCo papers define it
(INTELLECT-1, Table 2): the share of wall time GPUs work on their island's step,
``1 - (island_sync + idle) / step``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import attrs
import numpy as np

from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.model.dispatch import by_code
from shardmeter.model.outputs import (
    Breakdown,
    HiddenTerms,
    IslandOutputs,
    MemoryParts,
    Outputs,
    Overlapped,
    StepTerms,
    field_values,
    map_fields,
)
from shardmeter.numeric import minmax, ops
from shardmeter.numeric.ops import Array
from shardmeter.numeric.reduce import over_islands
from shardmeter.parts import WanInputs

__all__ = [
    "combine_islands",
    "cross_island",
    "ring_pace",
    "IslandSteps",
    "IslandDetail",
    "CrossIsland",
    "island_finish",
    "min_max_shares",
    "fold_min_max",
    "unfold_min_max",
]


@attrs.frozen(kw_only=True)
class CrossIsland:
    """The sync strategy's terms: ``exposed_s`` (seconds per step the islands wait for it),
    ``wan_s`` (its transfer time per step, exposed + hidden), ``round_s`` (the WAN's busy time
    per outer round), each ``(rows..., 1)``, and ``egress_bytes`` (per island per step,
    ``(rows...)``); numbers on the scalar path."""

    exposed_s: Array
    wan_s: Array
    round_s: Array
    egress_bytes: Array


def cross_island(
    parts: PartTable,
    inp: ModelInputs,
    n_isl: int,
    slow: Array,
    island_step: Array,
    params: Array,
    grad_bytes: Array,
    ar_window: Array,
    full: tuple[int, ...],
) -> CrossIsland:
    """The sync strategy's terms (zeros with one island; see :class:`CrossIsland`).

    The part gets every island's own uplink (``network.wan_bytes_s`` and ``wan_latency_s``,
    rows x islands; the ``[network]`` link on every island unless an island gives its own) and
    prices each island's transfer with it; the bundled parts take the largest over islands, so
    the slowest uplink paces the ring (:func:`ring_pace`)."""
    if not full:  # the scalar path: one island
        return CrossIsland(exposed_s=0.0, wan_s=0.0, round_s=0.0, egress_bytes=0.0)
    col = (*full[:-1], 1)
    if n_isl < 2:
        z = np.zeros(col)
        return CrossIsland(exposed_s=z, wan_s=z, round_s=z, egress_bytes=z[..., 0])
    net = inp.network
    wan = WanInputs(
        islands=n_isl,
        slowest_step_s=slow,
        island_step_s=island_step,
        params=params,
        grad_bytes=grad_bytes,
        uplink_bytes_s=np.asarray(net.wan_bytes_s, dtype=float),
        latency_s=np.asarray(net.wan_latency_s, dtype=float),
        overlap_window_s=np.broadcast_to(ar_window, full),
    )

    def run(code: int) -> CrossIsland:
        part, opts = parts.get("sync", code)
        t = part.exchange(wan, opts)
        return CrossIsland(
            exposed_s=t.exposed_s,
            wan_s=t.wan_s,
            round_s=t.round_s,
            egress_bytes=np.asarray(t.egress_bytes)[..., None],
        )

    res = map_fields(lambda v: np.broadcast_to(v, col), by_code(np.broadcast_to(net.sync, col), run))
    return attrs.evolve(res, egress_bytes=res.egress_bytes[..., 0])


def ring_pace(uplink_bytes_s: Array, latency_s: Array) -> tuple[float, float]:
    """One ``(bytes/s, latency s)`` pair for a ring over islands with uplinks of their own: the
    slowest bandwidth and the largest latency. A ring step moves ``S / I`` bytes through every
    uplink at once and ends with its slowest transfer, so a ring all-reduce takes ``2 (I-1)
    max_i(S / (I B_i) + alpha_i)`` (Thakur, Rabenseifner and Gropp 2005; Patarasuk and Yuan
    2009); :func:`cross_island` prices exactly that (each sync part takes the largest island
    term). This pair bounds it from above and equals it when one uplink is the slowest on both
    counts (always with one link for all, as ``[network] link``); :func:`island_finish` takes it
    to choose batch shares and per-island layouts before the islands are known."""
    return float(np.min(np.asarray(uplink_bytes_s, dtype=float))), float(
        np.max(np.asarray(latency_s, dtype=float))
    )


def _first(x: Array, shape: tuple[int, ...]) -> Array:
    """Column 0 of a per-island array whose value is global (same on every island)."""
    if ops.is_scalar(x):
        return x
    return np.broadcast_to(x, shape)[..., :1]


@attrs.frozen(kw_only=True)
class IslandDetail:
    """What the report adds per island (``(rows..., islands)`` or broadcastable): the busiest
    GPU's ``memory_parts``, the pacing stage's ``params_per_gpu`` and what the sharding strategy
    leaves of them (``params_per_gpu_sharded``), and ``layers_per_stage`` of the largest stage."""

    memory_parts: MemoryParts
    params_per_gpu: Array
    params_per_gpu_sharded: Array
    layers_per_stage: Array


@attrs.frozen(kw_only=True)
class IslandSteps:
    """Each island's composed step (arrays over rows x islands): the breakdown ``terms`` and
    their ``hidden`` time (``None`` without ``detail``), the reason bits, the window left for a
    global all-reduce (``ar_window``), and what the report needs: ``grad_bytes``, ``params``,
    ``island_batch``, ``micro_batches``, ``memory_bytes``, ``memory_reserved_bytes`` (what the
    caching allocator reserves at the peak, :mod:`.allocator`), ``peak_flops``, the model and
    hardware FLOPs per token, ``gpus`` per island and the ``detail`` of :class:`IslandDetail`
    (``None`` without ``detail``)."""

    reasons: Array
    terms: StepTerms
    hidden: HiddenTerms | None
    ar_window: Array
    grad_bytes: Array
    params: Array
    island_batch: Array
    micro_batches: Array
    memory_bytes: Array
    memory_reserved_bytes: Array
    peak_flops: Array
    model_flops_per_token: Array
    hardware_flops_per_token: Array
    gpus: Array
    detail: IslandDetail | None = None


def combine_islands(
    parts: PartTable,
    inp: ModelInputs,
    shape: tuple[int, ...],
    st: IslandSteps,
    detail: bool = True,
    islands_only: bool = False,
) -> Outputs:
    """The :class:`~.outputs.Outputs` of :func:`~.evaluate.evaluate` (see the module docstring);
    without ``detail`` only what a search ranks by (the report's fields ``None``).
    ``islands_only`` (with ``detail`` false): only the per-island outputs, skipping the sync
    strategy's cross-island terms (``step_time_s`` and ``egress_bytes_per_step`` ``None``); the
    same values as without it."""
    if not shape:
        one = _combine_one(parts, inp, st, detail, islands_only)
        if one is not None:
            return one
    return _combine_ops(parts, inp, shape, st, detail, islands_only)


#: :func:`cross_island` of one island on the scalar path: no sync terms (frozen, shared).
_NO_WAN = CrossIsland(exposed_s=0.0, wan_s=0.0, round_s=0.0, egress_bytes=0.0)


def _combine_one(
    parts: PartTable, inp: ModelInputs, st: IslandSteps, detail: bool, islands_only: bool
) -> Outputs | None:
    """:func:`combine_islands` of one plan on one island (its step a plain float, its reasons an
    int, its parameters a float), or None where it is not: :func:`_combine_ops`' scalar branch
    written out (nothing to broadcast or fold over islands, each ``ops.where`` the value it
    picks, the sync strategy's terms zero). tests/test_scalar_twins_busiest.py holds it to
    :func:`_combine_ops` to the bit."""
    island_step = st.terms.total()
    reasons, params = st.reasons, st.params
    if type(island_step) is not float or type(reasons) is not int or type(params) is not float:
        return None
    feasible_isl = reasons == 0
    slow = island_step if feasible_isl else 0.0
    island: dict[str, Array] = {
        "feasible": feasible_isl,
        "step_s": island_step,
        "gpus": st.gpus,
        "memory_bytes": st.memory_bytes,
        "memory_reserved_bytes": st.memory_reserved_bytes,
        "memory_capacity_bytes": inp.hardware.memory_bytes,
        "ar_window_s": st.ar_window,
        "grad_bytes": st.grad_bytes,
    }
    if islands_only and not detail:
        return Outputs(feasible=feasible_isl, reasons=reasons, params=params, island=IslandOutputs(**island))
    wan = _NO_WAN
    step = slow + 0.0  # + the sync's exposed seconds, none
    more = _details(inp, st, island, (), slow, step, wan) if detail else {}
    return Outputs(
        feasible=feasible_isl,
        reasons=reasons,
        params=params,
        island=IslandOutputs(**island),
        step_time_s=step,
        egress_bytes_per_step=0.0,
        **more,
    )


def _combine_ops(
    parts: PartTable,
    inp: ModelInputs,
    shape: tuple[int, ...],
    st: IslandSteps,
    detail: bool = True,
    islands_only: bool = False,
) -> Outputs:
    """:func:`combine_islands` of a batch, or of any numbers."""
    island_step = st.terms.total()
    n_isl = shape[-1] if shape else 1
    # the scalar path (shape ()): every figure a plain number, nothing to broadcast
    full = np.broadcast_shapes(shape, np.shape(st.reasons), np.shape(island_step)) if shape else ()
    reasons, island_step = ops.broadcast(st.reasons, full), ops.broadcast(island_step, full)
    feasible_isl = reasons == 0
    feasible = over_islands(np.logical_and, feasible_isl)
    slow = over_islands(np.maximum, ops.where(feasible_isl, island_step, 0.0))
    island: dict[str, Array] = {
        "gpus": st.gpus,
        "memory_bytes": st.memory_bytes,
        "memory_reserved_bytes": st.memory_reserved_bytes,
        "memory_capacity_bytes": inp.hardware.memory_bytes,
        "ar_window_s": st.ar_window,
        "grad_bytes": st.grad_bytes,
    }
    if full:  # a batch: each to the islands' shape (a scalar broadcasts to itself)
        island = {k: ops.broadcast(v, full) for k, v in island.items()}
    island = {"feasible": feasible_isl, "step_s": island_step, **island}
    params = ops.col0(ops.broadcast(_first(st.params, full), np.shape(slow) if full else ()))
    if islands_only and not detail:
        return Outputs(
            feasible=ops.col0(feasible), reasons=reasons, params=params, island=IslandOutputs(**island)
        )
    wan = cross_island(
        parts,
        inp,
        n_isl,
        slow,
        ops.where(feasible_isl, island_step, 0.0),
        _first(st.params, full),
        island["grad_bytes"],
        st.ar_window,
        full,
    )
    step = slow + wan.exposed_s
    more = _details(inp, st, island, full, slow, step, wan) if detail else {}
    return Outputs(
        feasible=ops.col0(feasible),
        reasons=reasons,
        params=params,
        island=IslandOutputs(**island),
        step_time_s=ops.col0(step),
        egress_bytes_per_step=wan.egress_bytes,
        **more,
    )


def _details(
    inp: ModelInputs,
    st: IslandSteps,
    island: dict[str, Array],
    full: tuple[int, ...],
    slow: Array,
    step: Array,
    wan: CrossIsland,
) -> dict[str, Array]:
    """The report's fields of :class:`~.outputs.Outputs`: the breakdown of the average GPU,
    throughput, FLOP rates, utilisation and memory; each island's are added to ``island`` (the
    :class:`~.outputs.IslandOutputs` fields so far). One plan on one island takes
    :func:`_details_floats`."""
    if not full and _all_floats(inp, st, island, slow, step, wan):
        return _details_floats(inp, st, island, slow, step, wan)
    return _details_ops(inp, st, island, full, slow, step, wan)


def _details_ops(
    inp: ModelInputs,
    st: IslandSteps,
    island: dict[str, Array],
    full: tuple[int, ...],
    slow: Array,
    step: Array,
    wan: CrossIsland,
) -> dict[str, Array]:
    """:func:`_details` of a batch, or of any numbers (its scalar branch: one island)."""
    assert st.hidden is not None and st.detail is not None
    island_step, sync = island["step_s"], wan.exposed_s
    idle = slow - island_step
    isl_gpus_full = island["gpus"]
    total_gpus = over_islands(np.add, isl_gpus_full)
    w_gpu = isl_gpus_full / total_gpus

    col = np.shape(slow) if full else ()
    if full:

        def _mean(x: Array) -> Array:
            return ops.col0(over_islands(np.add, ops.broadcast(x, full) * w_gpu))

        def g(x: Array) -> Array:  # a global (N, 1) value as (N,)
            return ops.col0(ops.broadcast(x, col))

        def b(x: Array) -> Array:
            return ops.broadcast(x, full)

        def means(d: dict[str, Array]) -> dict[str, Array]:
            return {k: _mean(v) for k, v in d.items()}

        def globals_(d: dict[str, Array]) -> dict[str, Array]:
            return {k: g(v) for k, v in d.items()}

        def per_island(d: dict[str, Array]) -> dict[str, Array]:
            return {k: b(v) for k, v in d.items()}

    else:  # the scalar path, one island: each figure its plain number (GPU weight 1), no call each

        def means(d: dict[str, Array]) -> dict[str, Array]:
            return {k: v * w_gpu for k, v in d.items()}

        def globals_(d: dict[str, Array]) -> dict[str, Array]:
            return d

        per_island = globals_

    tokens_step = _first(inp.training.global_batch * inp.model.seq_len, full)
    mf_tok, hw_tok = _first(st.model_flops_per_token, full), _first(st.hardware_flops_per_token, full)
    tps = ops.divide(tokens_step, step)  # step 0: an infeasible plan (numpy's inf or nan)
    tps_gpu = tps / total_gpus
    model_tf = tps_gpu * mf_tok / 1e12
    hw_tf = tps_gpu * hw_tok / 1e12
    gpu_peak_mean = over_islands(np.add, ops.broadcast(st.peak_flops * st.gpus, full)) / total_gpus
    cu_isl = ops.divide(island_step, step)
    cu = over_islands(np.add, ops.broadcast(cu_isl * st.gpus, full)) / total_gpus
    terms = _values(st.terms)
    island.update(
        breakdown=Breakdown(**per_island({**terms, "island_sync_s": sync, "idle_s": idle})),
        **per_island(
            {
                "utilization": cu_isl,
                "idle_s": idle,
                "tokens_per_s": ops.divide(st.island_batch * inp.model.seq_len, step),
                "batch_sequences": st.island_batch,
                "micro_batches": st.micro_batches,
            }
        ),
        **_island_layout(st.detail, full),
    )
    return {
        "breakdown": Breakdown(
            **means(terms), **globals_({"island_sync_s": sync}), **means({"idle_s": idle})
        ),
        "overlapped": Overlapped(
            **means(_values(st.hidden)),
            **globals_({"island_sync_s": ops.maximum(wan.wan_s - sync, 0.0)}),
        ),
        **globals_(
            {
                "tokens_per_s": tps,
                "tokens_per_s_per_gpu": tps_gpu,
                "model_tflops_per_gpu": model_tf,
                "hardware_tflops_per_gpu": hw_tf,
                "mfu": model_tf * 1e12 / gpu_peak_mean,
                "hfu": hw_tf * 1e12 / gpu_peak_mean,
                "compute_utilization": cu,
            }
        ),
        "memory_bytes": over_islands(np.maximum, island["memory_bytes"], keepdims=False),
        "memory_reserved_bytes": over_islands(np.maximum, island["memory_reserved_bytes"], keepdims=False),
        **globals_(
            {
                "gpus": total_gpus,
                "wan_s": wan.wan_s,
                "wan_round_s": wan.round_s,
                "model_flops_per_token": mf_tok,
            }
        ),
    }


def _all_floats(
    inp: ModelInputs, st: IslandSteps, island: dict[str, Array], slow: Array, step: Array, wan: CrossIsland
) -> bool:
    """Whether every number :func:`_details_floats` reads is a plain float (one plan on one
    island, the scalar path)."""
    tr = inp.training
    figures = (
        island["step_s"],
        island["gpus"],
        island["memory_bytes"],
        island["memory_reserved_bytes"],
        slow,
        step,
        wan.exposed_s,
        wan.wan_s,
        wan.round_s,
        tr.global_batch,
        inp.model.seq_len,
        st.model_flops_per_token,
        st.hardware_flops_per_token,
        st.peak_flops,
        st.gpus,
        st.island_batch,
    )
    return set(map(type, figures)) <= ops.ONLY_FLOAT


def _details_floats(
    inp: ModelInputs,
    st: IslandSteps,
    island: dict[str, Array],
    slow: float,
    step: float,
    wan: CrossIsland,
) -> dict[str, Array]:
    """:func:`_details` of one plan on one island (:func:`_all_floats`): the scalar branch's
    operations in the same order (every figure its plain number, GPU weight ``gpus / gpus``),
    written out without a closure or a dict per group. tests/test_scalar_twins.py holds it to
    the general code to the bit."""
    assert st.hidden is not None and st.detail is not None
    island_step, sync = island["step_s"], wan.exposed_s
    idle = slow - island_step
    total_gpus = island["gpus"]
    w_gpu = total_gpus / total_gpus
    seq = inp.model.seq_len
    tokens = inp.training.global_batch * seq
    # step 0: an infeasible plan (ops.divide's numpy answer); a nonzero step divides here
    tps = tokens / step if step and type(tokens) is float else ops.divide(tokens, step)
    tps_gpu = tps / total_gpus
    model_tf = tps_gpu * st.model_flops_per_token / 1e12
    hw_tf = tps_gpu * st.hardware_flops_per_token / 1e12
    gpu_peak_mean = st.peak_flops * st.gpus / total_gpus
    cu_isl = island_step / step if step and type(island_step) is float else ops.divide(island_step, step)
    cu = cu_isl * st.gpus / total_gpus
    terms = field_values(st.terms)  # _values
    own = Breakdown(**terms, island_sync_s=sync, idle_s=idle)
    isl_tokens = st.island_batch * seq
    island.update(
        breakdown=own,
        utilization=cu_isl,
        idle_s=idle,
        tokens_per_s=isl_tokens / step
        if step and type(isl_tokens) is float
        else ops.divide(isl_tokens, step),
        batch_sequences=st.island_batch,
        micro_batches=st.micro_batches,
        **_island_layout(st.detail, ()),
    )
    hid = st.hidden
    t = wan.wan_s - sync
    hidden_sync = t if t >= 0.0 else ops.maximum(t, 0.0)
    if w_gpu == 1.0:
        # the GPU weight of one island (x * 1.0 is x, to the bit): the island's own breakdown
        # is the average GPU's, and the hidden terms are the island's
        mean = own
        overlapped = Overlapped(
            tp_comm_s=hid.tp_comm_s,
            cp_comm_s=hid.cp_comm_s,
            dp_comm_s=hid.dp_comm_s,
            island_sync_s=hidden_sync,
        )
    else:
        mean = Breakdown(**{k: v * w_gpu for k, v in terms.items()}, island_sync_s=sync, idle_s=idle * w_gpu)
        overlapped = Overlapped(**{k: v * w_gpu for k, v in _values(hid).items()}, island_sync_s=hidden_sync)
    return {
        "breakdown": mean,
        "overlapped": overlapped,
        "tokens_per_s": tps,
        "tokens_per_s_per_gpu": tps_gpu,
        "model_tflops_per_gpu": model_tf,
        "hardware_tflops_per_gpu": hw_tf,
        "mfu": model_tf * 1e12 / gpu_peak_mean,
        "hfu": hw_tf * 1e12 / gpu_peak_mean,
        "compute_utilization": cu,
        "memory_bytes": island["memory_bytes"],
        "memory_reserved_bytes": island["memory_reserved_bytes"],
        "gpus": total_gpus,
        "wan_s": wan.wan_s,
        "wan_round_s": wan.round_s,
        "model_flops_per_token": st.model_flops_per_token,
    }


def _values(rec: StepTerms | HiddenTerms) -> dict[str, Array]:
    """``{field: value}`` of a record of terms (what its subclass with more terms is built from)."""
    return field_values(rec)


def _island_layout(d: IslandDetail, full: tuple[int, ...]) -> dict[str, Array]:
    """:class:`IslandDetail` broadcast to the islands' shape, as :class:`~.outputs.IslandOutputs`
    fields."""

    def broadcast(x: Array) -> Array:
        return ops.broadcast(ops.as_float(x), full)

    # the scalar path: the plain numbers as floats (a scalar broadcasts to itself); memory parts
    # that are floats already are the record as it is, not rebuilt
    b: Callable[[Array], Array] = broadcast if full else ops.as_float
    parts = d.memory_parts
    if full or not set(map(type, _PART_VALUES(parts))) <= ops.ONLY_FLOAT:
        parts = map_fields(b, parts)
    layout = (d.params_per_gpu, d.params_per_gpu_sharded, d.layers_per_stage)
    if not full and set(map(type, layout)) <= ops.ONLY_FLOAT:  # as_float of a float is itself
        p_gpu, p_sharded, layers = layout
    else:
        p_gpu, p_sharded, layers = map(b, layout)
    return {
        "memory_parts": parts,
        "params_per_gpu": p_gpu,
        "params_per_gpu_sharded": p_sharded,
        "layers_per_stage": layers,
    }


#: Every field's value of a :class:`~.outputs.MemoryParts`, in field order (one C call).
_PART_VALUES = operator.attrgetter(*(f.name for f in attrs.fields(MemoryParts)))


def island_finish(
    parts: PartTable,
    sync_code: int,
    n_used: int,
    step: Array,
    window: Array,
    params: Array,
    grad_bytes: Array,
    net: tuple[Array, Array],
) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate island's finish time in a ring of ``n_used`` islands: its own step plus the
    exposed sync the sync part gives when that island is the slowest (arrays of one shape).

    For both bundled parts the step of a set of islands is the largest of its islands' finish
    times (allreduce: ``max_i(step_i + exposed_i)``; DiLoCo: ``T + exposed(T)``, non-decreasing
    in the slowest step ``T``), so a per-island search can combine islands by a min-max
    (:func:`min_max_shares`). ``net``: ``(uplink bytes/s, latency s)``. Returns ``(finish,
    egress bytes per step)``."""
    step = np.asarray(step, dtype=float)
    if n_used < 2:
        return step, np.zeros_like(step)
    shape = step.shape
    col = (int(np.prod(shape)), 1)

    def c(x: Array) -> np.ndarray:
        return np.broadcast_to(np.asarray(x, dtype=float), shape).reshape(col)

    wan = WanInputs(
        islands=n_used,
        slowest_step_s=c(step),
        island_step_s=c(step),
        params=c(params),
        grad_bytes=c(grad_bytes),
        uplink_bytes_s=np.asarray(net[0], dtype=float),
        latency_s=np.asarray(net[1], dtype=float),
        overlap_window_s=c(window),
    )
    part, opts = parts.get("sync", sync_code)
    t = part.exchange(wan, opts)
    exposed = np.broadcast_to(np.asarray(t.exposed_s, dtype=float), col).reshape(shape)
    egress = np.broadcast_to(np.asarray(t.egress_bytes, dtype=float).reshape(-1, 1), col).reshape(shape)
    return step + exposed, egress


def fold_min_max(
    h: np.ndarray, f: np.ndarray, total: int, last: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``out[s] = min_b max(h[s - b], f[b])`` for ``s <= total`` (only ``s = total`` with
    ``last``) and the ``b`` that attains it (ties: the smallest ``b``); ``inf`` (and ``-1``)
    where no split exists. Only the finite entries of ``f`` are tried. Exact, in less than
    ``total^2`` work (:func:`shardmeter.numeric.minmax.fold`)."""
    return minmax.fold(h, f, total, last)


def min_max_shares(curves: Sequence[Array], total: int) -> tuple[float, list[int] | None]:
    """Split ``total`` sequences between islands to minimise the largest finish time.

    ``curves[j][b]``: island ``j``'s finish time with share ``b`` (``0 .. total``; ``inf`` where
    it cannot take ``b``, so ``curves[j][0] = inf`` keeps the island in). Exact: the min-max is
    folded island by island (``h_j[s] = min_b max(h_{j-1}[s - b], curves[j][b])``) over every
    finite share, then unfolded. Returns ``(finish, shares)``, ``(inf, None)`` if no split sums
    to ``total``."""
    h = np.asarray(curves[0], dtype=float)[: total + 1]
    args = []
    for cur in curves[1:-1]:
        h, arg = fold_min_max(h, np.asarray(cur, dtype=float), total)
        args.append(arg)
    return unfold_min_max(h, args, curves[-1] if len(curves) > 1 else None, total)


def unfold_min_max(
    h: np.ndarray, args: list[np.ndarray], f_last: Array | None, total: int
) -> tuple[float, list[int] | None]:
    """Finish :func:`min_max_shares` from the fold ``h`` of all islands but the last (``args``:
    each fold's choices) and the last island's curve ``f_last`` (``None``: one island)."""
    if f_last is None:
        return (float(h[total]), [total]) if np.isfinite(h[total]) else (float("inf"), None)
    best, b_last = fold_min_max(h, np.asarray(f_last, dtype=float), total, last=True)
    if not np.isfinite(best[0]):
        return float("inf"), None
    shares = [int(b_last[0])]
    s = total - shares[0]
    for arg in reversed(args):
        b = int(arg[s])
        shares.append(b)
        s -= b
    shares.append(s)
    return float(best[0]), shares[::-1]
