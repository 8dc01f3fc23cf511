"""Compute time of one micro-batch on one GPU of the largest pipeline stage, composed of its parts:
a layer's dense GEMMs (:mod:`.gemms`, a roofline with wave quantisation), the attention core
(:mod:`.attention`: fused at the kernel's efficiency with a sequence-length ramp, or
materialised), what recompute runs again (:mod:`.recompute`), the memory-bound elementwise
kernels at HBM bandwidth (:mod:`.elementwise`) and FP8 casts (:mod:`.fp8`), and the output
head on the last stage.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from shardmeter.inputs.bundles import REC_FULL, REC_OP, REC_SELECTIVE, Hardware, ModelShape, Training
from shardmeter.model.attention import (
    ATTENTION_RAMP_KEYS,
    FLASH_BWD_FACTOR,
    FUSED_HEAD_DIM_MULTIPLE,
    attention_time,
)
from shardmeter.model.branches import any_row
from shardmeter.model.elementwise import layer_elementwise
from shardmeter.model.formulas import KERNEL_OVERHEAD_S, _gemm_time_floats
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
    if _plain_compute(ms, tr, hw, sh, tp, ep, sp, peak, peak16):
        return _micro_batch_floats(ms, tr, hw, sh, tp, ep, sp, peak, peak16)
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


def _plain_compute(
    ms: ModelShape,
    tr: Training,
    hw: Hardware,
    sh: Shapes,
    tp: Array,
    ep: Array,
    sp: Array,
    peak: Array,
    peak16: Array,
) -> bool:
    """Whether :func:`micro_batch_compute` reads plain numbers only (one plan; the flags
    ``ops.where`` takes as they are bools) of a model and mode :func:`_micro_batch_floats`
    writes out: not op recompute, no multi-head latent attention (those take the general code).
    What the model, training and hardware records say is checked once for the last three
    records (:func:`_plain_records`; held, so compared by identity: frozen)."""
    global _LAST_PLAIN
    last = _LAST_PLAIN
    if last is not None and last[0] is ms and last[1] is tr and last[2] is hw:
        records = last[3]
    else:
        records = _plain_records(ms, tr, hw)
        _LAST_PLAIN = (ms, tr, hw, records)
    if not records:
        return False
    sizes = (
        *(sh.tokens, sh.seq_local, sh.q_local, sh.kv_local, sh.ffn_local, sh.mlp_up),
        *(sh.layers_per_stage, sh.dense_layers_local, sh.virtual_stages, tp, ep, peak, peak16),
    )
    return type(sp) is bool and type(sh.moe) is bool and set(map(type, sizes)) <= ops.ONLY_FLOAT


def _plain_records(ms: ModelShape, tr: Training, hw: Hardware) -> bool:
    """:func:`_plain_compute`'s checks of the model, training and hardware records: plain
    floats and bools only, not op recompute, no multi-head latent attention."""
    sizes = (
        *(ms.hidden, ms.heads, ms.q_dim, ms.kv_dim, ms.v_dim, ms.o_dim, ms.ffn_hidden, ms.vocab),
        *(ms.seq_len, ms.experts, ms.experts_per_token, ms.capacity_factor, ms.shared_experts),
        *(ms.kv_rank, tr.micro_batch, tr.recompute, tr.recompute_layers, tr.lora_rank),
        *(hw.hbm_bytes_s, hw.hbm_efficiency, hw.gemm_efficiency, hw.sm_count, hw.attention_efficiency),
    )
    flags = (tr.fp8, tr.materialized, tr.compile, ms.dropout, tr.rc_core_attn, tr.rc_mlp, tr.rc_moe)
    return (
        type(ms.swiglu) is bool
        and type(ms.causal) is bool
        and set(map(type, sizes)) <= ops.ONLY_FLOAT
        and set(map(type, (*flags, tr.rc_shared_experts))) <= ops.FLOAT_OR_BOOL
        and tr.recompute != REC_OP
        and not ms.kv_rank > 0
    )


#: The last records :func:`_plain_compute` checked, ``(ms, tr, hw, whether they pass)``.
_LAST_PLAIN: tuple[Any, Any, Any, bool] | None = None


def _micro_batch_floats(
    ms: ModelShape,
    tr: Training,
    hw: Hardware,
    sh: Shapes,
    tp: float,
    ep: float,
    sp: bool,
    peak: float,
    peak16: float,
) -> ComputeTerms:
    """:func:`micro_batch_compute` of one plan (:func:`_plain_compute`): gemm_shapes,
    layer_gemms, attention_time, recompute_time and head_time written out, the same operations
    in the same order without their records, closures or ops calls: each GEMM
    :func:`~.formulas._gemm_time_floats` (what ``GemmRoof.seconds`` takes for plain numbers),
    each ``where_needed`` branch only where the plan has it, each ``ops.where`` both sides as
    there (the side it picks kept) and ``ops.maximum`` written out. tests/test_scalar_twins.py
    holds it to the arrays to the bit."""
    nan = math.nan
    hbm = hw.hbm_bytes_s * hw.hbm_efficiency
    fp8 = float(tr.fp8) > 0
    eff, sms = hw.gemm_efficiency, hw.sm_count
    bpe = 1.0 if fp8 else 2.0
    moe, T, h = sh.moe, sh.tokens, ms.hidden
    # gemm_shapes
    cf = ms.capacity_factor
    cap = (cf if cf >= 1e-9 else (1e-9 if cf < 1e-9 else nan)) if moe else 1.0
    v_local = sh.kv_local + (ms.v_dim - ms.kv_dim) / tp
    o_local = sh.q_local + (ms.o_dim - ms.q_dim) / tp
    e_loc = ms.experts / ep
    e_loc = e_loc if moe else 1.0
    m_exp = cap * T * ms.experts_per_token * ep / ms.experts
    m_exp = m_exp if moe else T
    dense_ffn = ms.ffn_hidden / tp  # GemmShapes' dense_ffn_local (the record only for fp8's casts)
    # layer_gemms (no MLA: _plain_compute)
    qkv_n = sh.q_local + 2.0 * sh.kv_local + (v_local - sh.kv_local)
    qkv = _gemm_time_floats(T, qkv_n, h, peak, eff, hbm, sms, bpe, 1.0, 1.0)
    proj = _gemm_time_floats(T, h, o_local, peak, eff, hbm, sms, bpe, 1.0, 1.0)
    mlp_up = _gemm_time_floats(m_exp, sh.mlp_up, h, peak, eff, hbm, sms, bpe, e_loc, 1.0)
    mlp_down = _gemm_time_floats(m_exp, h, sh.ffn_local, peak, eff, hbm, sms, bpe, e_loc, 1.0)
    router = _gemm_time_floats(T, ms.experts, h, peak16, eff, hbm, sms, 2.0, 1.0, 1.0) if moe else 0.0
    up_w = 2.0 if ms.swiglu else 1.0  # mlp_seconds' up projection width

    def mlp_s(ffn: float) -> float:
        return _gemm_time_floats(T, up_w * ffn, h, peak, eff, hbm, sms, bpe, 1.0, 1.0) + _gemm_time_floats(
            T, h, ffn, peak, eff, hbm, sms, bpe, 1.0, 1.0
        )

    shared = mlp_s(ms.shared_experts * sh.ffn_local) if moe and ms.shared_experts > 0 else 0.0
    g_fwd = qkv + proj + (mlp_up + mlp_down) + router + shared
    Ls, Ld = sh.layers_per_stage, sh.dense_layers_local
    dense_delta = qkv + proj + mlp_s(dense_ffn) - g_fwd if Ld > 0 else 0.0
    # attention_time
    s = ms.seq_len
    flops = 4.0 * T * s * sh.q_local + 2.0 * T * s * (o_local - sh.q_local)
    heads = ms.heads
    d = ms.q_dim / (heads if heads >= 1.0 else (1.0 if heads < 1.0 else nan))
    x = d / FUSED_HEAD_DIM_MULTIPLE
    x = float(math.ceil(x)) if x - x == 0.0 else x
    share = x * FUSED_HEAD_DIM_MULTIPLE / (d if d >= 1e-9 else (1e-9 if d < 1e-9 else nan))
    n_pad = T * (sh.q_local + sh.kv_local + v_local)
    copy = 2.0 * (1.0 + share) * n_pad / hbm
    pad = copy if share > 1.0 else 0.0
    causal_frac = 0.5 if ms.causal else 1.0
    kv_call = sh.seq_local * causal_frac
    flash_f = (
        flops
        * share
        * causal_frac
        / (peak16 * hw.attention_efficiency)
        * (1.0 + ATTENTION_RAMP_KEYS / kv_call)
        + 2 * KERNEL_OVERHEAD_S
    )
    if tr.materialized:
        heads_t = heads / tp
        products = _gemm_time_floats(
            sh.seq_local, s, ms.q_dim / heads, peak16, eff, hbm, sms, 2.0, 2.0, heads_t * tr.micro_batch
        )
        mat_f = products + 9.0 * (heads_t * T * s) / hbm
        att_f, att_b = mat_f, 2.0 * mat_f
    else:
        att_f, att_b = flash_f + pad, FLASH_BWD_FACTOR * flash_f + pad
    forward = Ls * (g_fwd + att_f) + Ld * dense_delta
    bwd = 1.0 + (0.0 if float(tr.lora_rank) > 0 else 1.0)  # lora.weight_grad_share
    backward = Ls * (bwd * g_fwd + att_b) + Ld * bwd * dense_delta
    # recompute_time (not op recompute: _plain_compute)
    rec = tr.recompute
    rshare = full_recompute_share(tr, sh)
    full = rec == REC_FULL
    full_s = rshare * forward
    # selective_rerun_s, computed whatever the mode (ops.where's side)
    attn = float(tr.rc_core_attn) * Ls * att_f
    dense_mlp = Ld * (g_fwd + dense_delta - qkv - proj) if moe else Ls * (mlp_up + mlp_down)
    moe_layers = Ls - Ld if moe else 0.0
    moe_s = (
        mlp_up + mlp_down + router + shared if float(tr.rc_moe) > 0 else float(tr.rc_shared_experts) * shared
    )
    sel_s = attn + float(tr.rc_mlp) * dense_mlp + moe_layers * moe_s
    rc_s = full_s if full else (sel_s if rec == REC_SELECTIVE else 0.0)
    rerun = rshare if full else 0.0
    # head_time
    v_t = ms.vocab / tp
    head_f = _gemm_time_floats(T, v_t, h, peak16, eff, hbm, sms, 2.0, 1.0, 1.0) + T * v_t * 12.0 / hbm
    head = (1.0 + bwd) * head_f
    # memory_ops_time: elementwise_stage_s with each ops.where the side it picks (its
    # quotient still taken), the fp8 casts only with fp8
    inv_tp = 1.0 / tp  # taken either way, as ops.where(sp, 1.0 / tp, 1.0)
    n_h = T * h * (inv_tp if sp else 1.0)
    n_q, n_kv = T * sh.q_local, T * sh.kv_local
    k_act = ms.experts_per_token + ms.shared_experts if moe else 1.0
    el_f, el_b = layer_elementwise(
        n_h, n_q, n_kv, T * sh.ffn_local * k_act, ms.swiglu, ms.dropout, tr.compile, hbm
    )
    d_f = d_b = 0.0  # a dense layer's kernels less a MoE layer's
    if Ld > 0:
        dl_f, dl_b = layer_elementwise(n_h, n_q, n_kv, T * dense_ffn, ms.swiglu, ms.dropout, tr.compile, hbm)
        d_f, d_b = dl_f - el_f, dl_b - el_b
    el_f, el_b = Ls * el_f + Ld * d_f, Ls * el_b + Ld * d_b
    cast_f = cast_b = 0.0
    if fp8:
        gs = GemmShapes(
            v_local=v_local,
            o_local=o_local,
            experts_local=e_loc,
            tokens_per_expert=m_exp,
            dense_ffn_local=dense_ffn,
        )
        cast_f, cast_b = cast_layer_s(ms, tr, sh, gs, hbm)
    memory_ops = el_f + el_b + rerun * el_f + Ls * (cast_f * (1.0 + rerun) + cast_b)
    return ComputeTerms(
        forward=forward,
        backward=backward,
        recompute=rc_s,
        head=head,
        compute=forward + backward + rc_s + head,
        memory_ops=memory_ops,
        dense_forward=g_fwd,
        attention_forward=att_f,
        attention_backward=att_b,
        qkv_forward=qkv,
        proj_forward=proj,
        mlp_up_forward=mlp_up,
        mlp_down_forward=mlp_down,
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
