"""Memory of the busiest GPU: of the first, middle (rank 1) and last pipeline stages, the one
that holds the most (its sharding state, activations in flight and a sync strategy's extra
state; :mod:`.memory`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.model.compute import local_shapes
from shardmeter.model.degrees import Degrees
from shardmeter.model.dispatch import by_code
from shardmeter.model.memory import (
    activation_memory,
    layer_activations,
    logits_bytes_per_element,
    loss_transient_bytes,
    offload_kept,
    total_memory,
)
from shardmeter.model.outputs import MemoryParts
from shardmeter.model.overheads import cublas_workspace_bytes, outside_allocator_bytes, overhead_bytes
from shardmeter.model.pick import pick
from shardmeter.model.pipeline import ScheduleTerms
from shardmeter.model.sharding import shard_inputs, sharding_state
from shardmeter.model.stages import StageLayers
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.parts import ShardInputs, StateBytes

__all__ = ["BusiestGpu", "busiest_gpu", "busiest_parts", "rank_memory"]

_f = ops.as_float


@attrs.frozen(kw_only=True)
class BusiestGpu:
    """The busiest GPU of an island (``(rows..., islands)``): its sharding ``state`` (bytes),
    ``activations_bytes``, ``extra_state_bytes`` (a sync strategy's outer state) and
    ``memory_bytes`` (the total at the step's peak, :func:`~.memory.total_memory`: with the
    loss's ``transient_bytes`` and the process's ``other_bytes``, of which
    ``outside_allocator_bytes`` are outside PyTorch's caching allocator, :mod:`.overheads`) and
    ``shard`` (what its sharding strategy saw: parameters per layer, layers; the caching
    allocator's rounding reads it, :func:`~.allocator.stage_reserved_bytes`)."""

    state: StateBytes
    activations_bytes: Array
    extra_state_bytes: Array
    memory_bytes: Array
    shard: ShardInputs | None = None
    transient_bytes: Array = 0.0
    other_bytes: Array = 0.0
    outside_allocator_bytes: Array = 0.0


#: A stage already timed: ``(layers, emb, head, its StageTerms)`` (:func:`busiest_gpu`'s ``known``).
Known = tuple[Array, Array, Array, Any]


def busiest_gpu(
    inp: ModelInputs,
    parts: PartTable,
    deg: Degrees,
    stl: StageLayers,
    sch: ScheduleTerms,
    islands: int,
    known: Sequence[Known] = (),
) -> BusiestGpu:
    """The busiest GPU of the first, middle (rank 1) and last stages (``stl``), with the
    schedule's micro-batches in flight per rank (``sch``); ``islands``: of the batch (a sync
    strategy keeps state only between several). ``known``: stages the step has timed already
    (:func:`~.stage.stage_terms`); a rank of one plan with the same layers, embedding and head
    takes its shapes, sharding inputs and state from there instead of computing them again."""
    if islands <= 1:
        one_plan = _busiest_floats(inp, parts, deg, stl, sch, known)
        if one_plan is not None:
            return one_plan
    return _busiest_ops(inp, parts, deg, stl, sch, islands, known)


def _busiest_ops(
    inp: ModelInputs,
    parts: PartTable,
    deg: Degrees,
    stl: StageLayers,
    sch: ScheduleTerms,
    islands: int,
    known: Sequence[Known] = (),
) -> BusiestGpu:
    """:func:`busiest_gpu` of a batch, or of any numbers: :func:`rank_memory` of each rank, the
    busiest picked."""
    pp = deg.pp
    one = pp == 1
    outer = _outer_state_bytes(parts, inp) if islands > 1 else 0.0
    ranks = (
        (stl.first, True, one, sch.held_first),
        (stl.middle, one, pp <= 2, sch.held_middle),
        (stl.last, one, True, sch.held_last),
    )
    outside = outside_allocator_bytes(deg.tp, deg.cp, deg.dp, deg.pp, deg.ep)
    other = outside + cublas_workspace_bytes(inp.hardware.compute_capability)  # overhead_bytes
    loss_held = _f(sch.loss_held)
    memo: dict[int, tuple[Any, tuple[Array, Array]]] = {}
    busiest: BusiestGpu | None = None
    for layers_r, emb_r, head_r, held_r in ranks:
        stage = _same_stage(known, layers_r, emb_r, head_r)
        cand = rank_memory(
            inp,
            parts,
            deg,
            layers_r,
            emb_r,
            head_r,
            held_r,
            loss_held,
            outer,
            stage=stage,
            overheads=(outside, other),
            shapes=None if stage is not None else _same_shapes(known, layers_r),
            memo=memo,
        )
        busiest = cand if busiest is None else pick(cand.memory_bytes > busiest.memory_bytes, cand, busiest)
    assert busiest is not None
    return busiest


def _busiest_floats(
    inp: ModelInputs,
    parts: PartTable,
    deg: Degrees,
    stl: StageLayers,
    sch: ScheduleTerms,
    known: Sequence[Known],
) -> BusiestGpu | None:
    """:func:`busiest_gpu` of one plan on one island (its ranks' layers, degrees and in-flight
    counts plain floats), or None where it is not: :func:`rank_memory`'s operations in the same
    order for each rank, what the ranks of one shape share (the layers' stored activations as
    offload keeps them, the working set, one micro-batch's logits and the loss's transient:
    :func:`~.memory.activation_memory`) computed once per shape, the ranks compared by their
    totals and one :class:`BusiestGpu` built, the busiest's (the comparison :func:`pick` makes of
    a plain bool). tests/test_scalar_twins_busiest.py holds it to the general code to the bit."""
    pp, tp, sp = deg.pp, deg.tp, deg.sp
    loss_held = sch.loss_held
    figures = (pp, tp, stl.first, stl.middle, stl.last, sch.held_first, sch.held_middle, sch.held_last)
    if type(sp) is not bool or type(loss_held) is not float or not set(map(type, figures)) <= ops.ONLY_FLOAT:
        return None
    ms, tr, topo, codes = inp.model, inp.training, inp.topology, inp.layout.sharding
    one = pp == 1
    ranks = (
        (stl.first, True, one, sch.held_first),
        (stl.middle, one, pp <= 2, sch.held_middle),
        (stl.last, one, True, sch.held_last),
    )
    outside = outside_allocator_bytes(tp, deg.cp, deg.dp, pp, deg.ep)
    other = outside + cublas_workspace_bytes(inp.hardware.compute_capability)  # overhead_bytes
    # activation_memory's parts of each shape: (shapes, stored kept, working, logits, loss or None)
    seen: list[list[Any]] = []
    best: tuple[Any, ...] | None = None
    for layers_r, emb_r, head_r, held_r in ranks:
        for k_layers, k_emb, k_head, stage in known:  # _same_stage, written out
            if (
                type(k_layers) is float
                and k_layers == layers_r
                and type(k_emb) is bool
                and k_emb is emb_r
                and type(k_head) is bool
                and k_head is head_r
            ):
                sh_r, shard_r, st_r = stage.shapes, stage.shard, stage.state
                break
        else:
            sh_r = _same_shapes(known, layers_r)
            if sh_r is None:
                sh_r = local_shapes(ms, tr, tp, pp, deg.cp, deg.v, layers=layers_r)
            shard_r = shard_inputs(ms, tr, sh_r, topo, deg, emb_here=emb_r, head=head_r)
            st_r = sharding_state(parts, shard_r, codes)
        for acts in seen:
            if acts[0] is sh_r:
                break
        else:
            stored, working = layer_activations(ms, tr, sh_r, tp, sp)
            logits = sh_r.tokens * ms.vocab / tp * logits_bytes_per_element(tr)
            acts = [sh_r, stored * offload_kept(tr, sh_r), working, logits, None]
            seen.append(acts)
        _, stored, working, logits, loss = acts
        if head_r:
            if loss is None:
                loss = acts[4] = loss_transient_bytes(ms, tr, sh_r, tp)
            logits_r = loss_held
        else:
            loss, logits_r = 0.0, 0.0
        act_r = stored * held_r + working + logits * logits_r
        t = loss - working
        loss_r = t if t >= 0.0 else ops.maximum(t, 0.0)
        extra_r = shard_r.params_per_gpu * 0.0 / st_r.param_shards  # a sync strategy's: none
        mem_r = (
            st_r.weights + st_r.gradients + (st_r.optimizer + extra_r) + st_r.extra + act_r + loss_r + other
        )
        if best is not None:
            bigger = mem_r > best[0]
            if type(bigger) is not bool:
                return None
            if not bigger:
                continue
        best = (mem_r, st_r, act_r, extra_r, shard_r, loss_r)
    assert best is not None
    mem, st, act, extra, shard, loss = best
    return BusiestGpu(
        state=st,
        activations_bytes=act,
        extra_state_bytes=extra,
        memory_bytes=mem,
        shard=shard,
        transient_bytes=loss,
        other_bytes=other + 0.0 * mem,
        outside_allocator_bytes=outside + 0.0 * mem,
    )


def _same_shapes(known: Sequence[Known], layers: Array) -> Any:
    """The :class:`~.shapes.Shapes` of a ``known`` stage of one plan with as many ``layers``
    (:func:`~.shapes.local_shapes` reads nothing else of the stage), or None."""
    if type(layers) is not float:
        return None
    for k_layers, _, _, stage in known:
        if type(k_layers) is float and k_layers == layers:
            return stage.shapes
    return None


def _same_stage(known: Sequence[Known], layers: Array, emb: Array, head: Array) -> Any:
    """The :class:`~.stage.StageTerms` of ``known`` with these ``layers``, ``emb`` and ``head``
    (one plan: plain numbers and bools), or None."""
    if type(layers) is not float:
        return None
    for k_layers, k_emb, k_head, stage in known:
        if (
            type(k_layers) is float
            and k_layers == layers
            and type(k_emb) is bool
            and k_emb is bool(emb)
            and type(k_head) is bool
            and k_head is bool(head)
        ):
            return stage
    return None


def rank_memory(
    inp: ModelInputs,
    parts: PartTable,
    deg: Degrees,
    layers: Array,
    emb: Array,
    head: Array,
    held: Array,
    loss_held: Array,
    outer: Array,
    *,
    stage: Any = None,
    overheads: tuple[Array, Array] | None = None,
    shapes: Any = None,
    memo: dict[int, tuple[Any, tuple[Array, Array]]] | None = None,
) -> BusiestGpu:
    """One pipeline rank's GPU: ``layers`` layers, the embedding (``emb``) and the output layer
    (``head``) if it holds them, ``held`` micro-batches' activations in flight (``loss_held``
    saved logits on the head's rank, and the loss's transient on it) and ``outer`` bytes per
    parameter of a sync strategy; the process's ``other`` bytes (:mod:`.overheads`) on every rank.
    ``stage``: a :class:`~.stage.StageTerms` of the same layers, embedding and head (its shapes,
    sharding inputs and state are this rank's); ``overheads``: ``(outside, other)`` of the
    layout, computed once for every rank; ``shapes``: this rank's local shapes, where a stage of
    as many layers has them; ``memo``: the layers' activations (:func:`~.memory.layer_activations`)
    of shapes a rank before it had, one plan's (they read the shapes, not the rank)."""
    ms, tr, topo, lay = inp.model, inp.training, inp.topology, inp.layout
    if overheads is None:
        outside = outside_allocator_bytes(deg.tp, deg.cp, deg.dp, deg.pp, deg.ep)
        other = overhead_bytes(deg.tp, deg.cp, deg.dp, deg.pp, deg.ep, inp.hardware.compute_capability)
    else:
        outside, other = overheads
    if stage is not None:
        sh_r, shard_r, st_r = stage.shapes, stage.shard, stage.state
    else:
        sh_r = (
            shapes
            if shapes is not None
            else local_shapes(ms, tr, deg.tp, deg.pp, deg.cp, deg.v, layers=layers)
        )
        shard_r = shard_inputs(ms, tr, sh_r, topo, deg, emb_here=emb, head=head)
        st_r = sharding_state(parts, shard_r, lay.sharding)
    logits_r = ops.where(ops.as_bool(head), loss_held, 0.0)
    layer = None
    if memo is not None and type(layers) is float:
        seen = memo.get(id(sh_r))
        if seen is not None and seen[0] is sh_r:
            layer = seen[1]
        else:
            layer = layer_activations(ms, tr, sh_r, deg.tp, deg.sp)
            memo[id(sh_r)] = (sh_r, layer)
    act_r, loss_r = activation_memory(ms, tr, sh_r, deg.tp, deg.sp, held, logits_r, head, layer=layer)
    extra_r = shard_r.params_per_gpu * outer / st_r.param_shards  # a sync strategy's
    mem_r = total_memory(
        st_r.weights, st_r.gradients, st_r.optimizer + extra_r, st_r.extra, act_r, loss_r, other
    )
    return BusiestGpu(
        state=st_r,
        activations_bytes=act_r,
        extra_state_bytes=extra_r,
        memory_bytes=mem_r,
        shard=shard_r,
        transient_bytes=loss_r,
        other_bytes=other + 0.0 * mem_r,
        outside_allocator_bytes=outside + 0.0 * mem_r,
    )


def busiest_parts(b: BusiestGpu) -> MemoryParts:
    """The busiest GPU's memory by part (:func:`~.memory.memory_parts`, the sync strategy's
    extra state with the optimizer's), bytes."""
    st = b.state
    # memory_parts' parts, written out (no dict to build and read back)
    return MemoryParts(
        weights_bytes=st.weights,
        gradients_bytes=st.gradients,
        optimizer_bytes=st.optimizer + b.extra_state_bytes,
        activations_bytes=b.activations_bytes,
        transient_bytes=b.transient_bytes + st.extra,
        other_bytes=b.other_bytes,
        outside_allocator_bytes=b.outside_allocator_bytes,
    )


def _outer_state_bytes(parts: PartTable, inp: ModelInputs) -> Array:
    """The sync strategy's extra state per parameter, per row."""

    def run(code: int) -> Array:
        part, opts = parts.get("sync", code)
        return part.state_bytes_per_param(opts)

    return by_code(inp.network.sync, run)
