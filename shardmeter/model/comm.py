"""Communication of one micro-batch and one step: the core's own (tensor, context and expert
parallel) and the sharding strategy's events, priced on the tiers and overlapped.

Overlap rules (each a window of work the transfer runs beside):

* tensor parallel (Megatron-LM: 2 all-reduces forward, 2 backward per layer, + 2 with full
  recompute, on the recomputed share of the layers; + 1 with op recompute and sequence
  parallelism, whose two all-gathers rerun while the reduce-scatter outputs are saved, + 2
  without it, whose all-reduces are not on torchtitan's save list) hides, with
  ``tp_comm_overlap``, under at most half of the layer's GEMMs (Transformer Engine's
  userbuffers pipeline the GEMM with the collective); with ``async_tp``
  (PyTorch's micro-pipelined all-gather + matmul and matmul + reduce-scatter, sequence parallel
  and compiled only) each collective the pass fuses exposes what its GEMM's other chunks cannot
  cover (:func:`async_tp_exposed`) and the fused op's own copy or reduction; the backward's
  input-gradient reduce-scatters stay plain (:func:`async_tp_layer_s`);
* context parallel (ring attention, Liu et al. 2023) passes K/V chunks around the ring under
  the attention kernels;
* expert parallel all-to-alls (dispatch and combine, forward and backward) are exposed;
* a sharding strategy's per-micro-batch events (prefetched gathers) hide under the micro-batch's
  whole work, its exposed TP/CP/EP communication included (a window of compute alone would hide
  the same time twice and make a faster GPU slow the step); their ``exposed_fraction`` never
  hides; an event whose ``window`` is one pass (``forward``, ``recompute``, ``backward``) hides
  only under that pass's share of the micro-batch's work, each pass on its own; a ``paired``
  one (:func:`paired_exposed_s`) segment by segment, each segment's transfer under its own
  segment's share of that work;
* its per-step events (bucketed gradient reduction) hide, with ``dp_comm_overlap``, under the
  last micro-batch's backward pass and recompute with their exposed communication; the last
  bucket never hides.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import attrs

from shardmeter.inputs.bundles import REC_FULL, REC_OP, REC_SELECTIVE, ModelShape, Topology
from shardmeter.model.branches import where_needed
from shardmeter.model.compute import ComputeTerms
from shardmeter.model.formulas import ring_collective_time
from shardmeter.model.shapes import Shapes
from shardmeter.model.tiers import collective_time, slowest_link, span_link
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.parts import CommEvent

__all__ = [
    "LayerComm",
    "layer_comm",
    "ParallelComm",
    "tp_collectives_per_layer",
    "tp_comm",
    "async_tp_layer_s",
    "async_tp_exposed",
    "async_tp_fixed_s",
    "cp_comm",
    "ep_exposed_s",
    "PricedTraffic",
    "price_traffic",
    "paired_exposed_s",
    "exposed_traffic",
]

#: Bytes per activation element (16-bit activations).
ACT_BYTES = 2.0


@attrs.frozen(kw_only=True)
class LayerComm:
    """Seconds per micro-batch: ``tp_exposed``/``tp_hidden``, ``cp_exposed``/``cp_hidden``,
    ``ep_exposed``; ``act_msg``: bytes of one activation tensor of the micro-batch."""

    tp_exposed: Array
    tp_hidden: Array
    cp_exposed: Array
    cp_hidden: Array
    ep_exposed: Array
    act_msg: Array


def async_tp_exposed(comm: Array, gemm: Array, n: Array) -> Array:
    """Exposed seconds of one collective that PyTorch's async TP fuses with its GEMM.

    ``torch.distributed._symmetric_memory`` (pytorch/pytorch@006b161f, ``__init__.py``)
    splits the GEMM into ``n = tp`` chunks, one per rank's shard: ``fused_all_gather_matmul``
    (``_pipelined_all_gather_and_consume``) first multiplies the local shard, then copies each
    remote shard and multiplies it, copies and GEMMs on two streams; ``fused_matmul_reduce_scatter``
    (``_pipelined_produce_and_all2all``) computes the chunk for each remote rank, which that
    rank pulls while the next is computed, and the local chunk last. So the ``n - 1`` copies,
    ``comm / (n - 1)`` each, run beside ``n - 1`` GEMM chunks of ``gemm / n`` (the local one
    covers the first or the last copy): the pair takes ``gemm + max(0, comm - gemm (n - 1) / n)``,
    and ``max(0, comm - gemm (n - 1) / n)`` of the collective is exposed."""
    return ops.maximum(0.0, comm - gemm * (n - 1.0) / ops.maximum(n, 1.0))


def layer_comm(
    ms: ModelShape,
    sh: Shapes,
    ct: ComputeTerms,
    topo: Topology,
    tp: Array,
    cp: Array,
    ep: Array,
    tp_overlap: Array,
    recompute: Array,
    sp: Array = False,
    share: Array = 1.0,
    async_tp: Array = False,
    *,
    hbm_bytes_s: Array,
    etp: Array | None = None,
) -> LayerComm:
    """Tensor (:func:`tp_comm`), context (:func:`cp_comm`) and expert-parallel
    (:func:`ep_exposed_s`) communication of one micro-batch on the stage. ``share``: the share
    of the stage's layers full recompute recomputes (:func:`~.recompute.full_recompute_share`);
    ``async_tp`` is already false without sequence parallelism or ``compile``; ``hbm_bytes_s``
    (achieved HBM rate) prices async TP's own copies and reductions; ``etp``: the experts'
    tensor parallelism (None: ``tp``)."""
    act_msg = sh.tokens * ms.hidden * ACT_BYTES
    plain = (
        *(act_msg, sh.layers_per_stage, tp, cp, ep, recompute, share, ct.dense_forward),
        *(topo.domain_gpus, ct.attention_forward, ct.attention_backward),
    )
    if (
        set(map(type, (sp, tp_overlap, async_tp, sh.moe))) <= _ONLY_BOOL
        and set(map(type, plain)) <= ops.ONLY_FLOAT
    ):
        return _layer_comm_floats(ms, sh, ct, topo, act_msg, tp, cp, ep, tp_overlap, recompute, sp, share,
                                  async_tp, hbm_bytes_s, tp if etp is None else etp)  # fmt: skip
    tpc = tp_comm(sh, ct, topo, act_msg, tp, tp_overlap, recompute, sp, share, async_tp, hbm_bytes_s)
    cpc = cp_comm(sh, ct, topo, tp, cp, recompute, share)
    return LayerComm(
        tp_exposed=tpc.exposed_s,
        tp_hidden=tpc.hidden_s,
        cp_exposed=cpc.exposed_s,
        cp_hidden=cpc.hidden_s,
        ep_exposed=ep_exposed_s(ms, sh, topo, tp, cp, ep, recompute, share, tp if etp is None else etp),
        act_msg=act_msg,
    )


_ONLY_BOOL = frozenset({bool})


def _layer_comm_floats(
    ms: ModelShape,
    sh: Shapes,
    ct: ComputeTerms,
    topo: Topology,
    act_msg: float,
    tp: float,
    cp: float,
    ep: float,
    tp_overlap: bool,
    recompute: float,
    sp: bool,
    share: float,
    async_tp: bool,
    hbm_bytes_s: Array,
    etp: Array,
) -> LayerComm:
    """:func:`layer_comm` of one plan (plain floats and bools): :func:`tp_comm`,
    :func:`cp_comm` and :func:`ep_exposed_s` written out, the same operations in the same order
    without their records, closures or ops calls (``ops.minimum``/``maximum`` written out, nan
    where neither side is the larger); the branches one plan has only: async TP, a context ring
    and expert all-to-alls through the general functions where the plan has them.
    tests/test_scalar_twins.py holds it to the arrays to the bit."""
    nan = math.nan
    Ls = sh.layers_per_stage
    if async_tp and not tp_overlap and tp > 1 and tp <= topo.domain_gpus:
        tpc = tp_comm(sh, ct, topo, act_msg, tp, tp_overlap, recompute, sp, share, async_tp, hbm_bytes_s)
        tp_exposed, tp_hidden = tpc.exposed_s, tpc.hidden_s
    else:
        # tp_collectives_per_layer
        n_tp = 4.0 + (
            2.0 * share if recompute == REC_FULL else ((1.0 if sp else 2.0) if recompute == REC_OP else 0.0)
        )
        total = Ls * n_tp * collective_time("all_reduce", act_msg, tp, 1.0, topo) if tp > 1 else 0.0
        if tp_overlap:
            x = 0.5 * Ls * 3.0 * ct.dense_forward
            tp_hidden = total if total <= x else (x if x < total else nan)
        else:
            tp_hidden = 0.0
        tp_exposed = total - tp_hidden
    if cp > 1:
        cpc = cp_comm(sh, ct, topo, tp, cp, recompute, share)
        cp_exposed, cp_hidden = cpc.exposed_s, cpc.hidden_s
    else:
        att_rec = 1.0 if recompute == REC_SELECTIVE else (share if recompute == REC_FULL else 0.0)
        window = Ls * (ct.attention_forward + ct.attention_backward + att_rec * ct.attention_forward)
        y = 0.0 - window
        cp_exposed = 0.0 if y <= 0.0 else (y if y > 0.0 else nan)
        cp_hidden = 0.0 - cp_exposed
    ep_s = ep_exposed_s(ms, sh, topo, tp, cp, ep, recompute, share, etp) if sh.moe and ep > 1 else 0.0
    return LayerComm(
        tp_exposed=tp_exposed,
        tp_hidden=tp_hidden,
        cp_exposed=cp_exposed,
        cp_hidden=cp_hidden,
        ep_exposed=ep_s,
        act_msg=act_msg,
    )


@attrs.frozen(kw_only=True)
class ParallelComm:
    """One parallelism's communication of a micro-batch on the stage: ``exposed_s`` and
    ``hidden_s`` (under the work it overlaps), seconds."""

    exposed_s: Array
    hidden_s: Array


def tp_collectives_per_layer(recompute: Array, sp: Array, share: Array) -> Array:
    """All-reduces (or all-gather + reduce-scatter pairs, the same time) of one layer per
    micro-batch: Megatron-LM's 2 forward and 2 backward, + 2 on the recomputed share of the
    layers under full recompute. Op recompute (torchtitan ``SelectiveAC``,
    torchtitan/distributed/activation_checkpoint.py @ b5bcd76c) saves the outputs of SDPA,
    ``reduce_scatter_tensor`` and ``all_to_all_single`` and reruns everything else: + 1 with
    sequence parallelism (its two all-gathers rerun while the reduce-scatter outputs are
    saved), + 2 without it (its all-reduces are not on torchtitan's save list)."""
    op_tp = ops.where(ops.as_bool(sp), 1.0, 2.0)  # two all-gathers = one all-reduce's time
    return 4.0 + ops.where(recompute == REC_FULL, 2.0 * share, ops.where(recompute == REC_OP, op_tp, 0.0))


def tp_comm(
    sh: Shapes,
    ct: ComputeTerms,
    topo: Topology,
    act_msg: Array,
    tp: Array,
    tp_overlap: Array,
    recompute: Array,
    sp: Array,
    share: Array,
    async_tp: Array,
    hbm_bytes_s: Array,
) -> ParallelComm:
    """Tensor-parallel communication of one micro-batch on the stage
    (:func:`tp_collectives_per_layer` collectives of ``act_msg`` bytes per layer). With
    ``tp_comm_overlap`` it hides under at most half of the layers' GEMMs (Transformer Engine's
    userbuffers pipeline the GEMM with the collective); with ``async_tp`` inside one NVLink
    domain, each collective exposes what its GEMM's other chunks cannot cover
    (:func:`async_tp_layer_s`); ``tp_comm_overlap`` wins where both are set."""
    Ls = sh.layers_per_stage
    n_tp = tp_collectives_per_layer(recompute, sp, share)
    total = where_needed(
        tp > 1, lambda: Ls * n_tp * collective_time("all_reduce", act_msg, tp, 1.0, topo), lambda: 0.0
    )
    hidden = ops.where(tp_overlap, ops.minimum(total, 0.5 * Ls * 3.0 * ct.dense_forward), 0.0)
    use_async = (
        ops.as_bool(async_tp) & ops.logical_not(ops.as_bool(tp_overlap)) & (tp > 1) & (tp <= topo.domain_gpus)
    )

    def async_hidden() -> Array:
        exposed = Ls * async_tp_layer_s(sh, ct, topo, act_msg, tp, recompute, share, hbm_bytes_s)
        return total - ops.minimum(total, exposed)

    hidden = where_needed(use_async, async_hidden, lambda: hidden)
    return ParallelComm(exposed_s=total - hidden, hidden_s=hidden)


def async_tp_layer_s(
    sh: Shapes,
    ct: ComputeTerms,
    topo: Topology,
    act_msg: Array,
    tp: Array,
    recompute: Array,
    share: Array,
    hbm_bytes_s: Array,
) -> Array:
    """Exposed seconds of one layer's sequence-parallel collectives per micro-batch under async
    TP. PyTorch's micro-pipelined TP (``torch/_inductor/fx_passes/micro_pipeline_tp.py``,
    pytorch/pytorch@5f65158a) fuses an ``all_gather_into_tensor`` with the matmuls that take its
    result as their left operand (``_find_consumer_matmuls``: ``fused_all_gather_matmul``) and a
    ``reduce_scatter_tensor`` only where its input is produced by one matmul
    (``_find_producer_matmul`` returns ``None`` for anything else: "no producer matmul found for
    reduce scatter, skipping fuse_matmul_reduce_scatter fusion"). With torchtitan's separate
    linears (``wq``, ``wk``, ``wv``; ``w1``, ``w3``) a layer has, per pass:

    * forward: all-gather + Q/K/V, output projection + reduce-scatter, all-gather + MLP up,
      MLP down + reduce-scatter -- four fused pairs;
    * backward: the all-gathered output gradients of the output projection and of the MLP down
      feed their data-gradient GEMMs (``mm(dY, W)``, left operand; the weight-gradient
      ``mm(dY^T, X)`` takes a transpose), two fused pairs beside GEMMs of the forward GEMM's time;
      the input gradients of the attention block and of the MLP are sums of several projections'
      data gradients (``dX = dQ Wq + dK Wk + dV Wv``, ``dX = dH1 W1 + dH3 W3``), an ``add``, not a
      matmul, so those two reduce-scatters stay plain collectives, exposed whole;
    * recompute: full recompute reruns the forward on its share of the layers; op recompute
      (sequence parallel) reruns the two all-gathers, fused with Q/K/V and MLP up again.

    Each fused pair exposes :func:`async_tp_exposed`, a collective half an all-reduce, and its
    fixed copy or reduction (:func:`async_tp_fixed_s`). Not
    rewritten: a TP group outside one NVLink domain (symmetric memory needs peer access), a MoE
    layer's experts (their pairs stay exposed), and everything under ``tp_comm_overlap``
    (Transformer Engine issues its own userbuffers collectives, which the pass does not match)."""
    t_half = collective_time("all_gather", act_msg, tp, 1.0, topo)
    mlp_ok = ops.logical_not(ops.as_bool(sh.moe))
    ag_fixed, rs_fixed = async_tp_fixed_s(act_msg, tp, hbm_bytes_s)
    proj = async_tp_exposed(t_half, ct.proj_forward, tp)
    down = ops.where(mlp_ok, async_tp_exposed(t_half, ct.mlp_down_forward, tp), t_half)
    fused_mlp = ops.where(mlp_ok, 1.0, 0.0)  # a MoE layer's expert pairs stay plain collectives
    qkv = async_tp_exposed(t_half, ct.qkv_forward, tp) + ag_fixed
    up = ops.where(mlp_ok, async_tp_exposed(t_half, ct.mlp_up_forward, tp) + ag_fixed, t_half)
    forward = qkv + up + proj + down + (1.0 + fused_mlp) * rs_fixed
    backward = proj + down + (1.0 + fused_mlp) * ag_fixed + 2.0 * t_half
    rerun = ops.where(recompute == REC_FULL, share * forward, ops.where(recompute == REC_OP, qkv + up, 0.0))
    return forward + backward + rerun


def async_tp_fixed_s(act_msg: Array, tp: Array, hbm_bytes_s: Array) -> tuple[Array, Array]:
    """Seconds a fused pair adds beside its GEMM, ``(all-gather, reduce-scatter)``, from
    ``torch/distributed/_symmetric_memory/__init__.py`` (pytorch/pytorch@006b161f):

    * ``_pipelined_multi_all_gather_and_consume`` first copies the local shard into its
      symmetric buffer and waits on a barrier before the first GEMM chunk ("we are giving up the
      chance to overlap 'mv' and 'b' with the first shard_consumer for now"): a copy reading and
      writing the ``act_msg / tp`` bytes of the shard, exposed;
    * ``_fused_matmul_reduce_scatter_impl`` writes each rank's partial into ``stacked_partials``
      and sums them afterwards (``reduce_partials``, one kernel): it reads the ``tp`` partials
      (``act_msg`` bytes) and writes one (``act_msg / tp``), exposed, where NCCL's reduce-scatter
      reduces inside its own kernel.

    ``hbm_bytes_s``: the achieved HBM rate the elementwise kernels use."""
    shard = act_msg / ops.maximum(tp, 1.0)
    return 2.0 * shard / hbm_bytes_s, (act_msg + shard) / hbm_bytes_s


def cp_comm(
    sh: Shapes, ct: ComputeTerms, topo: Topology, tp: Array, cp: Array, recompute: Array, share: Array
) -> ParallelComm:
    """Context parallelism (ring attention, Liu et al. 2023): each layer passes its K and V
    chunks around the ring of ``cp`` ranks, ``cp - 1`` steps on the innermost tier holding the
    ring, in forward, twice in backward, and again where attention reruns (selective
    recompute; the recomputed share under full; op recompute saves SDPA's output, so the ring
    does not rerun), hidden under the attention kernels."""
    Ls = sh.layers_per_stage
    att_rec = ops.where(
        recompute == REC_SELECTIVE, 1.0, ops.where(recompute == REC_FULL, share, 0.0)
    )  # attention rerun

    def ring_s() -> Array:
        kv_msg = 2.0 * sh.tokens * sh.kv_local * ACT_BYTES
        bw_cp, lat_cp = span_link(cp, tp, topo)
        cp_f = (cp - 1.0) * (kv_msg / bw_cp + lat_cp)
        return Ls * (cp_f + 2.0 * cp_f + att_rec * cp_f)

    total = where_needed(cp > 1, ring_s, lambda: 0.0)
    window = Ls * (ct.attention_forward + ct.attention_backward + att_rec * ct.attention_forward)
    exposed = ops.maximum(0.0, total - window)
    return ParallelComm(exposed_s=exposed, hidden_s=total - exposed)


def ep_exposed_s(
    ms: ModelShape,
    sh: Shapes,
    topo: Topology,
    tp: Array,
    cp: Array,
    ep: Array,
    recompute: Array,
    share: Array,
    etp: Array,
) -> Array:
    """Expert-parallel all-to-alls of one micro-batch, exposed: dispatch and combine, forward
    and backward (4 per MoE layer; + 2 on full recompute's share, op recompute saving
    ``all_to_all_single``'s outputs), of the capacity-padded ``c T k h`` routed activations;
    the stage's dense layers route no tokens.

    Megatron-Core's expert grid orders its ranks ``etp-ep-edp-pp`` with no CP axis
    (megatron/core/parallel_state.py @d98e8a64, ``expert_decoder_rank_generator``: ``cp=1``), so
    an expert-parallel group's ranks are ``etp`` apart; torchtitan's EP mesh likewise spans
    the data-parallel and context-parallel ranks inside a TP group's stride. With the experts'
    tensor parallelism below ``tp`` (parallel folding), each rank dispatches only its
    ``etp / tp`` of the TP group's tokens (the sequence-parallel shard, no gather across TP)."""

    def a2a_s() -> Array:
        cap = ops.where(sh.moe, ops.maximum(ms.capacity_factor, 1e-9), 1.0)
        a2a_msg = cap * sh.tokens * ms.experts_per_token * ms.hidden * ACT_BYTES * etp / tp
        t_a2a = collective_time("all_to_all", a2a_msg, ep, etp, topo)
        moe_layers = sh.layers_per_stage - sh.dense_layers_local
        return moe_layers * (4.0 + ops.where(recompute == REC_FULL, 2.0 * share, 0.0)) * t_a2a

    return where_needed(sh.moe & (ep > 1), a2a_s, lambda: 0.0)


@attrs.frozen(kw_only=True)
class PricedTraffic:
    """A sharding strategy's events priced, by when they run: ``micro_batch_s`` (per micro-batch,
    every window) and its never-hidden share ``micro_batch_fixed_s``; of it, ``forward_s``,
    ``recompute_s`` and ``backward_s``: the events confined to one pass; ``step_s`` (per step)
    and ``bucket_s`` (its last bucket); ``forward_paired_s``, ``recompute_paired_s`` and
    ``backward_paired_s``: what the pass's ``paired`` events leave exposed segment by segment
    (:func:`paired_exposed_s`; 0 without them)."""

    micro_batch_s: Array
    micro_batch_fixed_s: Array
    step_s: Array
    bucket_s: Array
    forward_s: Array = 0.0
    recompute_s: Array = 0.0
    backward_s: Array = 0.0
    forward_paired_s: Array = 0.0
    recompute_paired_s: Array = 0.0
    backward_paired_s: Array = 0.0


def paired_exposed_s(transfer_s: Array, window_s: Array, paired: Sequence[tuple[Array, Array]]) -> Array:
    """Seconds of ``transfer_s`` that the pass's work ``window_s`` leaves exposed when they run
    segment by segment (``paired``: ``(transfer share, work share)`` of each segment):
    ``sum_k max(0, a_k T - c_k W)``. With one segment of shares ``(1, 1)`` this is the
    pass-level ``max(0, T - W)``; splitting never hides more. :func:`price_traffic` sums the
    transfers of a pass's paired events segment by segment first (they run beside the same
    segments; the work shares are the first event's), so two events never hide under the same
    work twice."""
    out: Array = 0.0
    for a, c in paired:
        out = out + ops.maximum(0.0, a * transfer_s - c * window_s)
    return out


def price_traffic(
    events: Sequence[CommEvent], topo: Topology, windows: tuple[Array, Array, Array] | None = None
) -> PricedTraffic:
    """Seconds of each event on the topology, summed by when it runs. ``windows``: the forward,
    recompute and backward passes' work, which a ``paired`` event's segments are set against
    (None: paired events are priced like the others of their pass). Events none of which a
    window pairs take :func:`_price_unpaired`."""
    unpaired = _price_unpaired(events, topo, windows)
    if unpaired is not None:
        return unpaired
    return _price_general(events, topo, windows)


def _price_general(
    events: Sequence[CommEvent], topo: Topology, windows: tuple[Array, Array, Array] | None = None
) -> PricedTraffic:
    """:func:`price_traffic` of any events, paired ones segment by segment."""
    mb = fixed = step = bucket = 0.0
    passes: dict[str, Array] = {"forward": 0.0, "recompute": 0.0, "backward": 0.0}
    # per pass, each segment's transfers summed over the pass's paired events, and its work share
    segments: dict[str, list[list[Array]]] = {}
    pass_window = dict(zip(("forward", "recompute", "backward"), windows or (), strict=False))
    slow_bw, outer_lat = slowest_link(topo)
    for ev in events:
        t = ev.count * collective_time(
            ev.collective, ev.bytes, ev.group_size, ev.group_stride, topo, flat=ev.flat
        )
        if ev.per == "micro_batch":
            mb = mb + t
            fixed = fixed + t * ev.exposed_fraction
            if ev.window in passes:
                passes[ev.window] = passes[ev.window] + t
                if ev.paired and ev.window in pass_window:
                    seg = segments.setdefault(ev.window, [[0.0, c] for _, c in ev.paired])
                    for k, (a, _) in enumerate(ev.paired):
                        seg[k][0] = seg[k][0] + a * t
            continue
        step = step + t
        if ev.bucket_bytes is not None:
            bucket = ops.maximum(
                bucket, ring_collective_time(ev.bucket_bytes, ev.bucket_ranks, slow_bw, outer_lat, 2.0)
            )
    paired = {
        w: paired_exposed_s(1.0, pass_window[w], [(g, c) for g, c in seg]) for w, seg in segments.items()
    }
    figures = (
        mb,
        fixed,
        step,
        bucket,
        passes["forward"],
        passes["recompute"],
        passes["backward"],
        paired.get("forward", 0.0),
        paired.get("recompute", 0.0),
        paired.get("backward", 0.0),
    )
    if not set(map(type, figures)) <= ops.ONLY_FLOAT:  # one plan's are floats already (checked in C)
        figures = tuple(map(ops.as_float, figures))
    mb, fixed, step, bucket, fwd, rec, bwd, fwd_p, rec_p, bwd_p = figures
    return PricedTraffic(
        micro_batch_s=mb,
        micro_batch_fixed_s=fixed,
        step_s=step,
        bucket_s=bucket,
        forward_s=fwd,
        recompute_s=rec,
        backward_s=bwd,
        forward_paired_s=fwd_p,
        recompute_paired_s=rec_p,
        backward_paired_s=bwd_p,
    )


def _price_unpaired(
    events: Sequence[CommEvent], topo: Topology, windows: tuple[Array, Array, Array] | None
) -> PricedTraffic | None:
    """:func:`price_traffic` of events none of which the windows pair (None where one is: the
    general code prices its segments): the same operations in the same order, each pass's sum
    a local instead of a dict's entry, the last bucket's ``ops.maximum`` written out for plain
    floats (nan where neither side is the larger), a bucket of the same bytes and ranks objects
    as the last event's priced once (ZeRO-1/2's two events share theirs) and no paired figures
    (0.0, the record's defaults, as the general code gives without segments). tests/test_scalar_twins.py holds it
    to the general code to the bit."""
    mb = fixed = step = bucket = fwd = rec = bwd = 0.0
    slow_bw, outer_lat = slowest_link(topo)
    last: tuple[Any, Any, Any] | None = None  # the last bucket's (bytes, ranks, seconds)
    for ev in events:
        window = ev.window
        if ev.paired and windows and window != "micro_batch":
            return None
        t = ev.count * collective_time(
            ev.collective, ev.bytes, ev.group_size, ev.group_stride, topo, flat=ev.flat
        )
        if ev.per == "micro_batch":
            mb = mb + t
            fixed = fixed + t * ev.exposed_fraction
            if window == "forward":
                fwd = fwd + t
            elif window == "recompute":
                rec = rec + t
            elif window == "backward":
                bwd = bwd + t
            continue
        step = step + t
        if ev.bucket_bytes is not None:
            b, ranks = ev.bucket_bytes, ev.bucket_ranks
            if last is not None and last[0] is b and last[1] is ranks:  # the same objects: its seconds
                r = last[2]
            else:
                r = ring_collective_time(b, ranks, slow_bw, outer_lat, 2.0)
                last = (b, ranks, r)
            if type(bucket) is float and type(r) is float:
                bucket = bucket if bucket >= r else (r if r > bucket else math.nan)
            else:
                bucket = ops.maximum(bucket, r)
    figures = (mb, fixed, step, bucket, fwd, rec, bwd)
    if not set(map(type, figures)) <= ops.ONLY_FLOAT:  # one plan's are floats already (checked in C)
        mb, fixed, step, bucket, fwd, rec, bwd = map(ops.as_float, figures)
    return PricedTraffic(
        micro_batch_s=mb,
        micro_batch_fixed_s=fixed,
        step_s=step,
        bucket_s=bucket,
        forward_s=fwd,
        recompute_s=rec,
        backward_s=bwd,
    )


#: Every figure of a :class:`PricedTraffic`, in field order (one C call).
_priced_figures = operator.attrgetter(*(f.name for f in attrs.fields(PricedTraffic)))


def exposed_traffic(
    pt: PricedTraffic,
    mb_window: Array,
    bwd_window: Array,
    dp_overlap: Array,
    pass_windows: tuple[Array, Array, Array] | None = None,
) -> tuple[Array, Array, Array]:
    """``(micro-batch exposed, step exposed, window left)`` seconds of a strategy's traffic.

    The micro-batch events beyond ``mb_window``, plus their fixed share; those confined to one
    pass beyond that pass's window instead, or, where more, what its paired events leave
    segment by segment (``pass_windows``: the forward, recompute and backward shares of
    ``mb_window``; ``None``: each pass's events hide under the whole window);
    the step events beyond the last backward pass (``bwd_window`` plus the micro-batch's exposed
    events, with ``dp_overlap``), at least the last bucket; and what is left of that window
    after them (where a cross-island all-reduce may still hide).

    One plan's plain numbers (pass windows given) take :func:`_exposed_floats`, the same
    operations in the same order without a call per operation.
    """
    if type(dp_overlap) is bool and pass_windows is not None and type(mb_window) is float:
        w_f, w_r, w_b = pass_windows
        figures = (*_priced_figures(pt), bwd_window, w_f, w_r, w_b)
        if set(map(type, figures)) <= ops.ONLY_FLOAT:  # every figure a float (checked in C)
            return _exposed_figures(figures, mb_window, dp_overlap)
    return _exposed_ops(pt, mb_window, bwd_window, dp_overlap, pass_windows)


def _exposed_ops(
    pt: PricedTraffic,
    mb_window: Array,
    bwd_window: Array,
    dp_overlap: Array,
    pass_windows: tuple[Array, Array, Array] | None = None,
) -> tuple[Array, Array, Array]:
    """:func:`exposed_traffic` through :mod:`~shardmeter.numeric.ops`."""
    mb = pt.micro_batch_s
    if pass_windows is None:
        beyond = ops.maximum(0.0, mb - mb_window)
    else:
        w_f, w_r, w_b = pass_windows
        confined = pt.forward_s + pt.recompute_s + pt.backward_s
        free = mb - confined  # events that may hide anywhere in the micro-batch
        beyond = (
            ops.maximum(ops.maximum(0.0, pt.forward_s - w_f), pt.forward_paired_s)
            + ops.maximum(ops.maximum(0.0, pt.recompute_s - w_r), pt.recompute_paired_s)
            + ops.maximum(ops.maximum(0.0, pt.backward_s - w_b), pt.backward_paired_s)
        )
        # what the confined events leave of the whole window is where the free ones hide
        hidden = confined - beyond
        beyond = beyond + ops.maximum(0.0, free - ops.maximum(0.0, mb_window - hidden))
    mb_exposed = ops.where(mb > 0, beyond + pt.micro_batch_fixed_s, 0.0)
    step = pt.step_s
    window = ops.where(dp_overlap, bwd_window + mb_exposed, 0.0)
    last_bucket = ops.where(step > 0, ops.minimum(step, pt.bucket_s), 0.0)
    step_exposed = ops.where(dp_overlap, ops.maximum(step - window, last_bucket), step)
    return mb_exposed, step_exposed, ops.maximum(0.0, window - step)


def _exposed_floats(
    pt: PricedTraffic, mb_window: float, bwd_window: float, dp_overlap: bool, pass_windows: tuple[float, ...]
) -> tuple[float, float, float]:
    """:func:`_exposed_ops` of one plan (floats, a plain ``dp_overlap``, the pass windows
    given): :func:`_exposed_figures` of its record's figures and windows.
    tests/test_scalar_twins.py holds it to the general code to the bit."""
    return _exposed_figures((*_priced_figures(pt), bwd_window, *pass_windows), mb_window, dp_overlap)


def _exposed_figures(
    figures: tuple[float, ...], mb_window: float, dp_overlap: bool
) -> tuple[float, float, float]:
    """:func:`_exposed_ops` of one plan: ``figures`` a :class:`PricedTraffic`'s in field order,
    then the backward window and the three pass windows (each read once, as
    :func:`exposed_traffic` has them). The same operations in the same order,
    ``ops.maximum``/``minimum`` written out (nan where neither side is the larger, as numpy),
    each ``where`` the side it picks (no side raises) and the passes' loop unrolled."""
    nan = math.nan
    mb, fixed, step, bucket, fwd, rec, bwd, fwd_p, rec_p, bwd_p, bwd_window, w_f, w_r, w_b = figures
    confined = fwd + rec + bwd
    free = mb - confined
    # beyond = 0.0 + each pass's maximum(maximum(0.0, t - w), paired), in pass order
    x = fwd - w_f
    x = 0.0 if x <= 0.0 else (x if x > 0.0 else nan)
    x = x if x >= fwd_p else (fwd_p if fwd_p > x else nan)
    beyond = 0.0 + x
    x = rec - w_r
    x = 0.0 if x <= 0.0 else (x if x > 0.0 else nan)
    x = x if x >= rec_p else (rec_p if rec_p > x else nan)
    beyond = beyond + x
    x = bwd - w_b
    x = 0.0 if x <= 0.0 else (x if x > 0.0 else nan)
    x = x if x >= bwd_p else (bwd_p if bwd_p > x else nan)
    beyond = beyond + x
    hidden = confined - beyond
    y = mb_window - hidden
    y = 0.0 if y <= 0.0 else (y if y > 0.0 else nan)
    y = free - y
    y = 0.0 if y <= 0.0 else (y if y > 0.0 else nan)
    beyond = beyond + y
    mb_exposed = beyond + fixed if mb > 0 else 0.0
    window = bwd_window + mb_exposed if dp_overlap else 0.0
    last_bucket = (step if step <= bucket else (bucket if bucket < step else nan)) if step > 0 else 0.0
    if dp_overlap:
        z = step - window
        step_exposed = z if z >= last_bucket else (last_bucket if last_bucket > z else nan)
    else:
        step_exposed = step
    left = window - step
    return mb_exposed, step_exposed, 0.0 if left <= 0.0 else (left if left > 0.0 else nan)
