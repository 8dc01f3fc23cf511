"""One pipeline stage: its shapes, compute, the core's TP/CP/EP communication, the sharding
strategy's state and traffic and what of them is exposed, and the time of one micro-batch
through it (:class:`StageTerms`).

The step's pace is the slower of the largest of the first and middle stages (the embedding on
the first) and the last (its layers, the output layer and the loss); :func:`~.evaluate.evaluate`
times both (see :mod:`.stages`).
"""

from __future__ import annotations

import math

import attrs

from shardmeter.inputs.bundles import Hardware, ModelInputs, ModelShape, PartTable, Training
from shardmeter.model.comm import LayerComm, PricedTraffic, exposed_traffic, layer_comm
from shardmeter.model.compute import (
    ComputeTerms,
    Shapes,
    full_recompute_share,
    local_shapes,
    micro_batch_compute,
)
from shardmeter.model.degrees import Degrees
from shardmeter.model.formulas import offload_exposed_s
from shardmeter.model.interference import nccl_channels, overlap_slowdown_s
from shardmeter.model.memory import layer_activations
from shardmeter.model.outputs import evolved
from shardmeter.model.sharding import shard_inputs, sharding_terms
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.parts import ShardInputs, StateBytes

__all__ = ["stage_compute", "StageCompute", "Peaks", "peaks", "StageTerms", "stage_terms"]

_f = ops.as_float


@attrs.frozen(kw_only=True)
class Peaks:
    """The GPU's peak FLOP/s at the training precision (``flops``) and at 16 bits
    (``flops16``), a missing rate (0) replaced by 1.0 and by ``flops`` so that the rows it makes
    infeasible divide safely."""

    flops: Array
    flops16: Array


def peaks(hw: Hardware) -> Peaks:
    """:class:`Peaks` of the hardware bundle."""
    peak, peak16 = hw.peak_flops, hw.peak16_flops
    if type(peak) is float and type(peak16) is float:  # one plan: the sides ops.where picks
        peak = peak if peak > 0 else 1.0
        return Peaks(flops=peak, flops16=peak16 if peak16 > 0 else peak)
    peak, peak16 = _f(peak), _f(peak16)
    peak = ops.where(peak > 0, peak, 1.0)
    return Peaks(flops=peak, flops16=ops.where(peak16 > 0, peak16, peak))


@attrs.frozen(kw_only=True)
class StageTerms:
    """One stage of ``layers`` layers (``(rows..., islands)``): its ``shapes``, ``compute``
    (seconds per micro-batch), the core's ``comm`` (TP/CP/EP, seconds per micro-batch), what
    the sharding strategy sees (``shard``), its ``state`` (bytes) and ``traffic`` (priced,
    seconds), and of that traffic the exposed ``fsdp_exposed_s`` (per micro-batch) and
    ``dp_exposed_s`` (per step) and ``ar_window_s`` (the window left after the last backward
    pass); ``fsdp_slowdown_s`` (per micro-batch) and ``dp_slowdown_s`` (per step), what the
    hidden part of that traffic costs the compute beside it (:mod:`.interference`);
    ``offload_exposed_s`` (activation offload not hidden, per micro-batch) and
    ``micro_batch_s``, one micro-batch through the stage."""

    shapes: Shapes
    compute: ComputeTerms
    comm: LayerComm
    shard: ShardInputs
    state: StateBytes
    traffic: PricedTraffic
    fsdp_exposed_s: Array
    dp_exposed_s: Array
    fsdp_slowdown_s: Array
    dp_slowdown_s: Array
    ar_window_s: Array
    offload_exposed_s: Array
    micro_batch_s: Array


@attrs.frozen(kw_only=True)
class StageCompute:
    """What two stages of as many layers share (:func:`stage_compute`): their local ``shapes``,
    one micro-batch's ``compute`` through them with the output layer and loss (``head``; each
    stage takes it out where it does not hold it), the core's TP/CP/EP ``comm`` and the
    activation offload not hidden in the forward and backward passes (``offload_forward_s``,
    ``offload_backward_s``, per micro-batch). None of these reads the head's seconds, so a stage
    with the head and one without share them."""

    shapes: Shapes
    compute: ComputeTerms
    comm: LayerComm
    offload_forward_s: Array
    offload_backward_s: Array


def stage_compute(inp: ModelInputs, deg: Degrees, pk: Peaks, layers: Array) -> StageCompute:
    """The local shapes of a stage of ``layers`` layers, one micro-batch's compute through them
    (the output layer and loss included), its TP/CP/EP communication and exposed activation
    offload: what two stages of as many layers share (:class:`StageCompute`)."""
    ms, tr, hw, topo, lay = inp.model, inp.training, inp.hardware, inp.topology, inp.layout
    sh = local_shapes(ms, tr, deg.tp, deg.pp, deg.cp, deg.v, layers=layers)
    ct = micro_batch_compute(ms, tr, hw, sh, deg.tp, deg.ep, deg.sp, pk.flops, pk.flops16)
    lc = layer_comm(
        ms,
        sh,
        ct,
        topo,
        deg.tp,
        deg.cp,
        deg.ep,
        ops.as_bool(lay.tp_comm_overlap),
        _f(tr.recompute),
        deg.sp,
        full_recompute_share(tr, sh),
        async_tp=ops.as_bool(lay.async_tp) & deg.sp & ops.as_bool(tr.compile),
        hbm_bytes_s=hw.hbm_bytes_s * hw.hbm_efficiency,
        etp=deg.etp,
    )
    off_f, off_b = _offload_exposed(ms, tr, hw, sh, ct, deg, lc.tp_exposed + lc.cp_exposed + lc.ep_exposed)
    return StageCompute(shapes=sh, compute=ct, comm=lc, offload_forward_s=off_f, offload_backward_s=off_b)


def stage_terms(
    inp: ModelInputs,
    parts: PartTable,
    deg: Degrees,
    pk: Peaks,
    layers: Array,
    *,
    emb: Array,
    head: Array,
    compute: StageCompute | None = None,
) -> StageTerms:
    """One pipeline stage of ``layers`` layers, holding the embedding (``emb``) and the output
    layer and loss (``head``); see :class:`StageTerms`. ``compute``: :func:`stage_compute` of
    ``layers``, when another stage of as many layers has it already."""
    ms, tr, topo, lay = inp.model, inp.training, inp.topology, inp.layout
    core = compute if compute is not None else stage_compute(inp, deg, pk, layers)
    sh, ct, lc = core.shapes, core.compute, core.comm
    off_f, off_b = core.offload_forward_s, core.offload_backward_s
    offload_mb = off_f + off_b
    if not (type(head) is bool and head):  # a plain True (one plan holding the head) takes out 0
        if type(head) is bool and type(ct.head) is float:  # a plain False: the head's own seconds
            no_head = ct.head
        else:
            no_head = ops.where(ops.as_bool(head), 0.0, ct.head)  # the logits and loss run on the last stage
        ct = evolved(ct, compute=ct.compute - no_head, head=ct.head - no_head)
    mb_comm = lc.tp_exposed + lc.cp_exposed + lc.ep_exposed
    work = ct.compute + ct.memory_ops + mb_comm
    # each pass's share of the micro-batch's work: its compute, with the elementwise kernels and
    # exposed TP/CP/EP communication shared out in proportion (the head runs with the backward).
    # The activation offload's stalls are in the windows too: Transformer Engine's compute
    # stream waits on the copy stream's event (``current_stream().wait_event``,
    # ``OffloadSynchronizer._start_reloads_finish_offloads`` and ``bwd_step``,
    # transformer_engine/pytorch/cpu_offload.py @ 00382b96) while the collectives on their own
    # NCCL streams run on, so a stall hides sharding traffic as compute does. Left out, faster
    # compute exposed the traffic and the copies each against the same shrinking compute, and a
    # step with 100x the FLOP/s came out slower.
    c = ct.compute
    if type(c) is float:  # one plan: ops.maximum written out (nan where neither side is the larger)
        scale = work / (c if c >= 1e-30 else (1e-30 if c < 1e-30 else math.nan))
    else:
        scale = work / ops.maximum(c, 1e-30)
    passes = (ct.forward * scale + off_f, ct.recompute * scale, (ct.backward + ct.head) * scale + off_b)
    mb_window = work + offload_mb
    shard = shard_inputs(ms, tr, sh, topo, deg, emb_here=emb, head=head)
    sd = sharding_terms(parts, shard, topo, lay.sharding, windows=passes)
    priced = sd.traffic  # price_traffic's figures are floats already (ops.as_float)
    dp_overlap = lay.dp_comm_overlap
    fsdp_mb, dp_exposed, ar_window = exposed_traffic(
        priced,
        mb_window,
        ct.backward + ct.recompute + mb_comm + off_b,
        dp_overlap if type(dp_overlap) is bool else ops.as_bool(dp_overlap),
        pass_windows=passes,
    )
    # the data-parallel group spans nodes where the ranks it strides over outgrow one node
    sms, node = inp.hardware.sm_count, topo.gpus_per_node
    ch = nccl_channels(
        inp.hardware.compute_capability,
        deg.tp * deg.cp * deg.dp > (node if type(node) is float else _f(node)),
    )
    fsdp_hidden, dp_hidden = priced.micro_batch_s - fsdp_mb, priced.step_s - dp_exposed
    if type(fsdp_hidden) is float and type(dp_hidden) is float:  # one plan: maximum(x, 0.0) written out
        fsdp_hidden = fsdp_hidden if fsdp_hidden >= 0.0 else (0.0 if fsdp_hidden < 0.0 else math.nan)
        dp_hidden = dp_hidden if dp_hidden >= 0.0 else (0.0 if dp_hidden < 0.0 else math.nan)
    else:
        fsdp_hidden, dp_hidden = ops.maximum(fsdp_hidden, 0.0), ops.maximum(dp_hidden, 0.0)
    fsdp_slow = overlap_slowdown_s(fsdp_hidden, sms, ch)
    dp_slow = overlap_slowdown_s(dp_hidden, sms, ch)
    return StageTerms(
        shapes=sh,
        compute=ct,
        comm=lc,
        shard=shard,
        state=sd.state,
        traffic=priced,
        fsdp_exposed_s=fsdp_mb,
        dp_exposed_s=dp_exposed,
        fsdp_slowdown_s=fsdp_slow,
        dp_slowdown_s=dp_slow,
        ar_window_s=ar_window,
        offload_exposed_s=offload_mb,
        micro_batch_s=ct.compute + ct.memory_ops + mb_comm + fsdp_mb + fsdp_slow + offload_mb,
    )


def _offload_exposed(
    ms: ModelShape, tr: Training, hw: Hardware, sh: Shapes, ct: ComputeTerms, deg: Degrees, waits: Array
) -> tuple[Array, Array]:
    """Seconds per micro-batch that activation offload (``offload_layers``) does not hide,
    ``(forward, backward)``: :func:`~.formulas.offload_exposed_s` with one layer's stored
    activations over the GPU's own host link (``host_bytes_s``, one direction: a PCIe x16 link
    per GPU, NVLink-C2C on a superchip; GPUs that share a PCIe switch are not divided) against
    one layer's GEMMs and attention, forward (offload) and backward with its recompute (reload).

    The copies run on their own stream (``OffloadSynchronizer.offload_stream``,
    transformer_engine/pytorch/cpu_offload.py @ 00382b96), so they also progress while the
    compute stream runs the layers' elementwise kernels or waits on exposed TP/CP/EP
    communication (``waits``, per micro-batch). Spread evenly over the ``L`` layers, those
    widen each layer's window by ``waits / L``, which takes at most ``(L - 2) / L x waits`` off
    the stall (the formula's ``L - 2`` windows); the stall is
    ``max(0, stall - (L - 2) / L x waits)``, shared between the passes as before it. (Left out,
    faster compute exposed the communication and the stall against the same shrinking compute,
    and a step with twice the 16-bit FLOP/s came out slower.) The copies' HBM traffic is not
    charged to the kernels beside them. One plan that offloads no layer (``offload_layers`` not
    above 0: :func:`~.formulas.offload_exposed_s` is 0 whatever the rest) computes none of it."""
    if ops.is_scalar(tr.offload_layers) and not tr.offload_layers > 0:
        return 0.0, 0.0
    Ls = sh.layers_per_stage
    stored, _ = layer_activations(ms, tr, sh, deg.tp, deg.sp)
    tau = stored / Ls / hw.host_bytes_s
    k = tr.offload_layers
    fwd = offload_exposed_s(k, Ls, tau, ct.forward / Ls)
    bwd = offload_exposed_s(k, Ls, tau, (ct.backward + ct.recompute) / Ls)
    stall = fwd + bwd
    hide = ops.maximum(Ls - 2.0, 0.0) / ops.maximum(Ls, 1.0) * (ct.memory_ops + waits)
    left = ops.maximum(0.0, stall - hide) / ops.maximum(stall, 1e-300)
    return fwd * left, bwd * left
