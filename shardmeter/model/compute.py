"""Compute time of one micro-batch on one GPU of the largest pipeline stage, composed of its parts:
a layer's dense GEMMs (:mod:`.gemms`, a roofline with wave quantisation), the attention core
(:mod:`.attention`: fused at the kernel's efficiency with a sequence-length ramp, or
materialised), what recompute runs again (:mod:`.recompute`), the memory-bound elementwise
kernels at HBM bandwidth (:mod:`.elementwise`) and FP8 casts (:mod:`.fp8`), and the output
head on the last stage.
"""

from __future__ import annotations

import attrs

from shardmeter.inputs.bundles import Hardware, ModelShape, Training
from shardmeter.model.attention import attention_time
from shardmeter.model.branches import any_row
from shardmeter.model.elementwise import layer_elementwise
from shardmeter.model.fp8 import layer_cast_time
from shardmeter.model.gemms import GemmRoof, GemmShapes, gemm_shapes, layer_gemms
from shardmeter.model.lora import weight_grad_share
from shardmeter.model.recompute import full_recompute_share, recompute_time
from shardmeter.model.shapes import Shapes, local_shapes
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "Shapes",
    "ComputeTerms",
    "HeadTime",
    "MemoryOpsTime",
    "local_shapes",
    "micro_batch_compute",
    "head_time",
    "memory_ops_time",
    "elementwise_stage_s",
    "cast_layer_s",
    "full_recompute_share",
]


@attrs.frozen(kw_only=True)
class ComputeTerms:
    """Seconds per micro-batch on the stage: ``forward`` and ``backward`` (GEMMs and attention),
    ``recompute``, ``head`` (logits, forward + backward), ``compute`` (their sum),
    ``memory_ops`` (elementwise kernels and FP8 casts), and per layer ``dense_forward`` (the
    GEMMs of one layer's forward: the weight-gradient share of its backward) and
    ``attention_forward`` / ``attention_backward``; and the forward GEMMs next to a
    sequence-parallel collective: ``qkv_forward`` and ``mlp_up_forward`` (after an all-gather),
    ``proj_forward`` and ``mlp_down_forward`` (before a reduce-scatter)."""

    forward: Array
    backward: Array
    recompute: Array
    head: Array
    compute: Array
    memory_ops: Array
    dense_forward: Array
    attention_forward: Array
    attention_backward: Array
    qkv_forward: Array = 0.0
    proj_forward: Array = 0.0
    mlp_up_forward: Array = 0.0
    mlp_down_forward: Array = 0.0


def micro_batch_compute(
    ms: ModelShape,
    tr: Training,
    hw: Hardware,
    sh: Shapes,
    tp: Array,
    ep: Array,
    sp: Array,
    peak: Array,
    peak16: Array,
) -> ComputeTerms:
    """Compute time of one micro-batch (see the module docstring); ``peak``/``peak16`` are the
    precision's and the 16-bit FLOP/s with missing rates replaced (infeasible rows). The
    layers' GEMMs are fp8 where the precision says so (one byte per input element); attention,
    the router and the head stay 16-bit. Backward is twice the GEMMs' forward (data and weight
    gradients; the data gradient only for LoRA's frozen weights, :func:`~.lora.weight_grad_share`)
    and the attention core's own backward."""
    hbm = hw.hbm_bytes_s * hw.hbm_efficiency
    fp8 = ops.as_float(tr.fp8) > 0
    eff, sms = hw.gemm_efficiency, hw.sm_count
    roof = GemmRoof(
        peak_flops_s=peak,
        efficiency=eff,
        hbm_bytes_s=hbm,
        sm_count=sms,
        bytes_per_element=ops.where(fp8, 1.0, 2.0),
    )
    roof16 = GemmRoof(peak_flops_s=peak16, efficiency=eff, hbm_bytes_s=hbm, sm_count=sms)
    gs = gemm_shapes(ms, sh, tp, ep)
    g = layer_gemms(ms, sh, gs, roof, roof16)
    att = attention_time(ms, tr, hw, sh, gs, roof16, tp)
    Ls, Ld = sh.layers_per_stage, sh.dense_layers_local
    forward = Ls * (g.forward_s + att.forward_s) + Ld * g.dense_delta_s
    bwd = 1.0 + weight_grad_share(tr)  # data + weight gradients; frozen (LoRA): data only
    backward = Ls * (bwd * g.forward_s + att.backward_s) + Ld * bwd * g.dense_delta_s
    rc = recompute_time(ms, tr, sh, gs, roof, g, att, forward)
    head = head_time(ms, sh, tp, roof16, bwd)
    mo = memory_ops_time(ms, tr, sh, gs, tp, sp, hbm, fp8)
    # Full and op recompute rerun every elementwise kernel (and fp8 cast) of what they recompute.
    rerun = rc.rerun_share
    memory_ops = (
        mo.elementwise_forward_s
        + mo.elementwise_backward_s
        + rerun * mo.elementwise_forward_s
        + Ls * (mo.cast_forward_s * (1.0 + rerun) + mo.cast_backward_s)
    )
    return ComputeTerms(
        forward=forward,
        backward=backward,
        recompute=rc.stage_s,
        head=head.total_s,
        compute=forward + backward + rc.stage_s + head.total_s,
        memory_ops=memory_ops,
        dense_forward=g.forward_s,
        attention_forward=att.forward_s,
        attention_backward=att.backward_s,
        qkv_forward=g.qkv_s,
        proj_forward=g.proj_s,
        mlp_up_forward=g.mlp_up_s,
        mlp_down_forward=g.mlp_down_s,
    )


@attrs.frozen(kw_only=True)
class HeadTime:
    """The output layer and loss of one micro-batch on the last stage: ``forward_s`` and
    ``total_s`` (forward and backward, 3 x the forward)."""

    forward_s: Array
    total_s: Array


def head_time(ms: ModelShape, sh: Shapes, tp: Array, roof16: GemmRoof, backward: Array = 2.0) -> HeadTime:
    """The logits GEMM (``h -> V / tp``, 16-bit) and a vocab-parallel fp32 cross-entropy over
    the logits (12 bytes of HBM traffic per logit); its backward is ``backward`` forwards
    (twice; once for a frozen output layer, :func:`~.lora.weight_grad_share`)."""
    T, v_t = sh.tokens, ms.vocab / tp
    forward = roof16.seconds(T, v_t, ms.hidden) + T * v_t * 12.0 / roof16.hbm_bytes_s
    return HeadTime(forward_s=forward, total_s=(1.0 + backward) * forward)


@attrs.frozen(kw_only=True)
class MemoryOpsTime:
    """Memory-bound kernels of one micro-batch: ``elementwise_forward_s`` and
    ``elementwise_backward_s`` of the stage's layers (:func:`~.elementwise.layer_elementwise`),
    and per layer the fp8 recipe's quantisation passes ``cast_forward_s`` and
    ``cast_backward_s`` (:func:`~.fp8.layer_cast_time`; 0 without fp8)."""

    elementwise_forward_s: Array
    elementwise_backward_s: Array
    cast_forward_s: Array
    cast_backward_s: Array


def memory_ops_time(
    ms: ModelShape, tr: Training, sh: Shapes, gs: GemmShapes, tp: Array, sp: Array, hbm: Array, fp8: Array
) -> MemoryOpsTime:
    """The stage's elementwise kernels (:func:`elementwise_stage_s`) and each layer's fp8 casts
    (:func:`cast_layer_s`, priced only where a plan trains in fp8)."""
    el_f, el_b = elementwise_stage_s(ms, tr, sh, gs, tp, sp, hbm)
    if any_row(fp8):
        cf, cb = cast_layer_s(ms, tr, sh, gs, hbm)
        cast_f, cast_b = ops.where(fp8, cf, 0.0), ops.where(fp8, cb, 0.0)
    else:  # no fp8 row: every cast time is the 0.0 the where above picks (the recipes are not priced)
        cast_f = cast_b = 0.0
    return MemoryOpsTime(
        elementwise_forward_s=el_f, elementwise_backward_s=el_b, cast_forward_s=cast_f, cast_backward_s=cast_b
    )


def elementwise_stage_s(
    ms: ModelShape, tr: Training, sh: Shapes, gs: GemmShapes, tp: Array, sp: Array, hbm: Array
) -> tuple[Array, Array]:
    """``(forward, backward)`` seconds of the stage's elementwise kernels (norms, rotary,
    activation, residual adds, dropout; eager or fused: :func:`~.elementwise.layer_elementwise`)
    over the hidden states (``/ tp`` under sequence parallelism), the local query and key
    widths and the MLP width of the experts a token visits; a MoE model's dense layers over
    their ``ffn_hidden`` MLP, priced only where the stage holds one."""
    T = sh.tokens
    n_h = T * ms.hidden * ops.where(sp, 1.0 / tp, 1.0)
    n_q, n_kv = T * sh.q_local, T * sh.kv_local
    k_act = ops.where(sh.moe, ms.experts_per_token + ms.shared_experts, 1.0)
    el_f, el_b = layer_elementwise(
        n_h, n_q, n_kv, T * sh.ffn_local * k_act, ms.swiglu, ms.dropout, tr.compile, hbm
    )
    Ls, Ld = sh.layers_per_stage, sh.dense_layers_local
    dense = Ld > 0
    d_f = d_b = 0.0  # a dense layer's kernels less a MoE layer's
    if any_row(dense):
        dl_f, dl_b = layer_elementwise(
            n_h, n_q, n_kv, T * gs.dense_ffn_local, ms.swiglu, ms.dropout, tr.compile, hbm
        )
        d_f, d_b = ops.where(dense, dl_f - el_f, 0.0), ops.where(dense, dl_b - el_b, 0.0)
    return Ls * el_f + Ld * d_f, Ls * el_b + Ld * d_b


def cast_layer_s(ms: ModelShape, tr: Training, sh: Shapes, gs: GemmShapes, hbm: Array) -> tuple[Array, Array]:
    """``(forward, backward)`` seconds of one layer's fp8 quantisation passes under the
    row's recipe (:func:`~.fp8.layer_cast_time`): the attention projections over the
    micro-batch's tokens, the MLP's linears over each local expert's tokens."""
    return layer_cast_time(
        tr.fp8_recipe,
        tr.compile,
        sh.tokens,
        gs.tokens_per_expert,
        ms.hidden,
        sh.q_local,
        sh.kv_local,
        gs.v_local,
        gs.o_local,
        sh.ffn_local,
        gs.experts_local,
        ms.swiglu,
        hbm,
    )
