"""Communication of one micro-batch and one step: the core's own (tensor, context and expert
parallel) and the sharding strategy's events, priced on the tiers and overlapped.

Overlap rules (each a window of work the transfer runs beside):

* tensor parallel (Megatron-LM: 2 all-reduces forward, 2 backward per layer, + 2 with full
  recompute) hides, with ``tp_comm_overlap``, under at most half of the layer's GEMMs
  (Transformer Engine's userbuffers pipeline the GEMM with the collective);
* context parallel (ring attention, Liu et al. 2023) passes K/V chunks around the ring under
  the attention kernels;
* expert parallel all-to-alls (dispatch and combine, forward and backward) are exposed;
* a sharding strategy's per-micro-batch events (prefetched gathers) hide under the micro-batch's
  whole work, its exposed TP/CP/EP communication included (a window of compute alone would hide
  the same time twice and make a faster GPU slow the step); their ``exposed_fraction`` never
  hides; an event whose ``window`` is one pass (``forward``, ``recompute``, ``backward``) hides
  only under that pass's share of the micro-batch's work, each pass on its own;
* its per-step events (bucketed gradient reduction) hide, with ``dp_comm_overlap``, under the
  last micro-batch's backward pass and recompute with their exposed communication; the last
  bucket never hides.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..parts import CommEvent
from . import ops
from .compute import ComputeTerms, Shapes
from .formulas import ring_collective_time
from .inputs import ModelShape, Topology
from .ops import Array
from .tiers import collective_time, slowest_link, span_link

__all__ = ["LayerComm", "layer_comm", "PricedTraffic", "price_traffic", "exposed_traffic"]

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


def layer_comm(
    ms: ModelShape, sh: Shapes, ct: ComputeTerms, topo: Topology, tp, cp, ep, tp_overlap, recompute
) -> LayerComm:
    """Tensor, context and expert-parallel communication of one micro-batch on the stage."""
    T, Ls = sh.tokens, sh.layers_per_stage
    act_msg = T * ms.hidden * ACT_BYTES
    t_tp_one = collective_time("all_reduce", act_msg, tp, 1.0, topo)
    n_tp = 4.0 + ops.where(
        recompute == 2, 2.0, 0.0
    )  # 2 fwd + 2 bwd all-reduces (or AG+RS pairs), + recompute fwd
    tp_total = ops.where(tp > 1, Ls * n_tp * t_tp_one, 0.0)
    tp_hidden = ops.where(tp_overlap, ops.minimum(tp_total, 0.5 * Ls * 3.0 * ct.dense_forward), 0.0)
    # context parallel (ring attention): K,V chunks around the ring, overlapped with attention
    kv_msg = 2.0 * T * sh.kv_local * ACT_BYTES
    bw_cp, lat_cp = span_link(cp, tp, topo)
    cp_f = (cp - 1.0) * (kv_msg / bw_cp + lat_cp)
    cp_total = ops.where(cp > 1, Ls * (cp_f + 2.0 * cp_f + ops.where(recompute >= 1, cp_f, 0.0)), 0.0)
    cp_window = Ls * (
        ct.attention_forward + ct.attention_backward + ops.where(recompute >= 1, ct.attention_forward, 0.0)
    )
    cp_exposed = ops.maximum(0.0, cp_total - cp_window)
    # expert parallel all-to-all (dispatch + combine, forward and backward)
    cap = ops.where(sh.moe, ops.maximum(ms.capacity_factor, 1e-9), 1.0)
    a2a_msg = cap * T * ms.experts_per_token * ms.hidden * ACT_BYTES
    t_a2a = collective_time("all_to_all", a2a_msg, ep, tp * cp, topo)
    moe_layers = Ls - sh.dense_layers_local  # the stage's dense layers route no tokens
    ep_exposed = ops.where(
        sh.moe & (ep > 1), moe_layers * (4.0 + ops.where(recompute == 2, 2.0, 0.0)) * t_a2a, 0.0
    )
    return LayerComm(
        tp_exposed=tp_total - tp_hidden,
        tp_hidden=tp_hidden,
        cp_exposed=cp_exposed,
        cp_hidden=cp_total - cp_exposed,
        ep_exposed=ep_exposed,
        act_msg=act_msg,
    )


@attrs.frozen(kw_only=True)
class PricedTraffic:
    """A sharding strategy's events priced, by when they run: ``micro_batch_s`` (per micro-batch,
    every window) and its never-hidden share ``micro_batch_fixed_s``; of it, ``forward_s``,
    ``recompute_s`` and ``backward_s``: the events confined to one pass; ``step_s`` (per step)
    and ``bucket_s`` (its last bucket)."""

    micro_batch_s: Array
    micro_batch_fixed_s: Array
    step_s: Array
    bucket_s: Array
    forward_s: Array = 0.0
    recompute_s: Array = 0.0
    backward_s: Array = 0.0


def price_traffic(events: Sequence[CommEvent], topo: Topology) -> PricedTraffic:
    """Seconds of each event on the topology, summed by when it runs."""
    mb = fixed = step = bucket = 0.0
    passes: dict[str, Array] = {"forward": 0.0, "recompute": 0.0, "backward": 0.0}
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
            continue
        step = step + t
        if ev.bucket_bytes is not None:
            bucket = ops.maximum(
                bucket, ring_collective_time(ev.bucket_bytes, ev.bucket_ranks, slow_bw, outer_lat, 2.0)
            )
    return PricedTraffic(
        micro_batch_s=ops.as_float(mb),
        micro_batch_fixed_s=ops.as_float(fixed),
        step_s=ops.as_float(step),
        bucket_s=ops.as_float(bucket),
        forward_s=ops.as_float(passes["forward"]),
        recompute_s=ops.as_float(passes["recompute"]),
        backward_s=ops.as_float(passes["backward"]),
    )


def exposed_traffic(pt: PricedTraffic, mb_window, bwd_window, dp_overlap, pass_windows=None):
    """``(micro-batch exposed, step exposed, window left)`` seconds of a strategy's traffic.

    The micro-batch events beyond ``mb_window``, plus their fixed share; those confined to one
    pass beyond that pass's window instead (``pass_windows``: the forward, recompute and
    backward shares of ``mb_window``; ``None``: each pass's events hide under the whole window);
    the step events beyond the last backward pass (``bwd_window`` plus the micro-batch's exposed
    events, with ``dp_overlap``), at least the last bucket; and what is left of that window
    after them (where a cross-island all-reduce may still hide).
    """
    mb = pt.micro_batch_s
    if pass_windows is None:
        beyond = ops.maximum(0.0, mb - mb_window)
    else:
        w_f, w_r, w_b = pass_windows
        confined = pt.forward_s + pt.recompute_s + pt.backward_s
        free = mb - confined  # events that may hide anywhere in the micro-batch
        beyond = (
            ops.maximum(0.0, pt.forward_s - w_f)
            + ops.maximum(0.0, pt.recompute_s - w_r)
            + ops.maximum(0.0, pt.backward_s - w_b)
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
