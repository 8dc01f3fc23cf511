"""Compute time of one micro-batch on one GPU of the largest pipeline stage.

Dense GEMMs through :func:`~.formulas.gemm_time` (a roofline with wave quantisation), fused
attention at the kernel's efficiency with a sequence-length ramp, memory-bound elementwise
kernels at HBM bandwidth, FP8 casts, and the output head on the last stage.
"""

from __future__ import annotations

import attrs
import numpy as np

from shardmeter.inputs.bundles import Hardware, ModelShape, Training
from shardmeter.model.elementwise import layer_elementwise
from shardmeter.model.formulas import KERNEL_OVERHEAD_S, gemm_time
from shardmeter.model.fp8 import layer_cast_time
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "Shapes",
    "ComputeTerms",
    "local_shapes",
    "micro_batch_compute",
    "FLASH_BWD_FACTOR",
    "ATTENTION_RAMP_KEYS",
    "full_recompute_share",
]

#: FlashAttention's backward executes 2.5x the forward FLOPs (it recomputes the scores: 5 matrix
#: products against 2; Dao 2023, FlashAttention-2, Sec. 3).
FLASH_BWD_FACTOR = 2.5

#: Fused attention's ramp, in keys per query row per kernel call: a fixed cost per query tile
#: (loading Q, the online-softmax rescale, writing O and the log-sum-exp; in backward the dO.O
#: pre-pass and the dQ accumulation) equal to this many keys of work. Attention efficiency at
#: ``kv`` keys is ``attention_efficiency / (1 + ATTENTION_RAMP_KEYS / kv)`` (FlashAttention-2,
#: Dao 2023, Fig. 4-7: throughput rises with sequence length). Measured, not fitted to training
#: runs: torch SDPA forward+backward on one H200, head_dim 64 and 128, causal and not, 1k-32k
#: tokens (benchmarks/results/h200-2026-11-30/attention.csv); a least-squares fit of
#: ``E / (1 + k / kv)`` to those 24 points gives k = 730 (752 at head_dim 128, 704 at 64), mean
#: error 3.5 %.
ATTENTION_RAMP_KEYS = 730.0


@attrs.frozen(kw_only=True)
class Shapes:
    """Per-GPU shapes: ``seq_local`` (s / cp), ``tokens`` of one micro-batch, ``layers_per_stage``
    (the largest stage), tensor-parallel slices ``q_local``, ``kv_local`` (KV heads replicate
    past ``kv_heads``), ``ffn_local`` (an expert's slice in a MoE layer), ``mlp_up`` (2 x
    ffn_local for SwiGLU), ``moe`` (bool), ``dense_layers_local``: the stage's dense layers of a
    MoE model (its leading ``dense_layers`` sit on the first stages, so the largest stage holds
    only those that do not fit before it)."""

    seq_local: Array
    tokens: Array
    layers_per_stage: Array
    q_local: Array
    kv_local: Array
    ffn_local: Array
    mlp_up: Array
    moe: Array
    virtual_stages: Array
    dense_layers_local: Array = 0.0


def local_shapes(ms: ModelShape, tr: Training, tp, pp, cp, v, layers=None) -> Shapes:
    """The shapes one GPU computes on (``v`` already 1 where ``pp = 1``), for a stage of
    ``layers`` layers (default: ``ceil(L / (p v)) v``, at least the largest stage's)."""
    s_loc = ms.seq_len / cp
    moe = ms.experts > 1
    ffn_t = ops.where(moe, ms.moe_ffn_hidden, ms.ffn_hidden) / tp
    ls = ops.ceil(ms.layers / (pp * v)) * v if layers is None else layers  # unequal splits allowed
    return Shapes(
        seq_local=s_loc,
        tokens=tr.micro_batch * s_loc,
        layers_per_stage=ls,
        q_local=ms.q_dim / tp,
        kv_local=ops.maximum(ms.kv_dim / tp, ms.kv_dim / ops.maximum(ms.kv_heads, 1.0)),
        ffn_local=ffn_t,
        mlp_up=ops.where(ms.swiglu, 2.0, 1.0) * ffn_t,
        moe=moe,
        virtual_stages=v,
        dense_layers_local=ops.where(
            moe, ops.minimum(ops.maximum(ms.dense_layers - (ms.layers - ls), 0.0), ls), 0.0
        ),
    )


def full_recompute_share(tr: Training, sh: Shapes) -> Array:
    """The share of the stage's layers that ``recompute = "full"`` recomputes (1 in every other
    mode): Megatron-LM's block method (``--recompute-method block --recompute-num-layers k``,
    ``checkpointed_forward`` in megatron/core/recompute.py @ d98e8a64, formerly
    ``TransformerBlock._checkpointed_forward``) checkpoints layers ``0 .. k-1`` of each model
    chunk (``num_layers_per_pipeline_rank``: one virtual stage's layers) and runs the rest
    without checkpointing. ``recompute_layers = 0`` (the default) or ``k`` at least the chunk's
    layers recomputes all of them: ``min(k, L_chunk) / L_chunk``."""
    chunk = sh.layers_per_stage / sh.virtual_stages
    k = tr.recompute_layers
    share = ops.where(k > 0, ops.minimum(k, chunk) / chunk, 1.0)
    return ops.where(tr.recompute == 2, share, 1.0)


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
    ms: ModelShape, tr: Training, hw: Hardware, sh: Shapes, tp, ep, sp, peak, peak16
) -> ComputeTerms:
    """Compute time of one micro-batch (see the module docstring); ``peak``/``peak16`` are the
    precision's and the 16-bit FLOP/s with missing rates replaced (infeasible rows)."""
    T, h = sh.tokens, ms.hidden
    hbm = hw.hbm_bytes_s * hw.hbm_efficiency
    eff, sms = hw.gemm_efficiency, hw.sm_count
    rec = tr.recompute
    moe = sh.moe
    q_t, kv_t, ffn_t = sh.q_local, sh.kv_local, sh.ffn_local
    # Dense GEMMs (fp8 where the precision says so; attention stays 16-bit). V and the output
    # projection's input are ``v_dim`` and ``o_dim`` wide (narrower than K and Q under MLA).
    v_t = kv_t + (ms.v_dim - ms.kv_dim) / tp
    o_t = q_t + (ms.o_dim - ms.q_dim) / tp
    qkv_n = q_t + 2.0 * kv_t + (v_t - kv_t)
    fp8 = ops.as_float(tr.fp8) > 0
    el = ops.where(fp8, 1.0, 2.0)  # bytes per GEMM input element
    t_qkv = ops.where(
        ms.kv_rank > 0,
        _mla_projections(ms, T, q_t, kv_t + v_t, peak, eff, hbm, sms, el),
        gemm_time(T, qkv_n, h, peak, eff, hbm, sms, el),
    )
    t_proj = gemm_time(T, h, o_t, peak, eff, hbm, sms, el)
    e_loc = ops.where(moe, ms.experts / ep, 1.0)  # experts on this GPU
    # Tokens per local expert: top-k routing spreads T k tokens of each EP rank over E experts; a
    # capacity factor c pads every expert's buffer to c x the even share (Fedus et al. 2022, Switch
    # Transformers, Sec. 2.2; c = 1 is dropless-balanced).
    cap = ops.where(moe, ops.maximum(ms.capacity_factor, 1e-9), 1.0)
    m_exp = ops.where(moe, cap * T * ms.experts_per_token * ep / ms.experts, T)
    t_mlp_up = gemm_time(m_exp, sh.mlp_up, h, peak, eff, hbm, sms, el, count=e_loc)
    t_mlp_down = gemm_time(m_exp, h, ffn_t, peak, eff, hbm, sms, el, count=e_loc)
    t_mlp = t_mlp_up + t_mlp_down
    t_router = ops.where(moe, gemm_time(T, ms.experts, h, peak16, eff, hbm, sms), 0.0)
    # Shared experts (DeepSeekMoE): one MLP of shared x the expert width over every token.
    shared_t = ms.shared_experts * ffn_t
    t_shared = ops.where(
        moe & (ms.shared_experts > 0),
        gemm_time(T, ops.where(ms.swiglu, 2.0, 1.0) * shared_t, h, peak, eff, hbm, sms, el)
        + gemm_time(T, h, shared_t, peak, eff, hbm, sms, el),
        0.0,
    )
    t_dense_f = t_qkv + t_proj + t_mlp + t_router + t_shared
    # A dense layer of a MoE model: its MLP (``ffn_hidden`` wide) in place of the experts.
    dffn_t = ms.ffn_hidden / tp
    t_dense_mlp = gemm_time(
        T, ops.where(ms.swiglu, 2.0, 1.0) * dffn_t, h, peak, eff, hbm, sms, el
    ) + gemm_time(T, h, dffn_t, peak, eff, hbm, sms, el)
    Ld = sh.dense_layers_local
    d_dense = ops.where(Ld > 0, t_qkv + t_proj + t_dense_mlp - t_dense_f, 0.0)  # dense minus MoE layer
    # Attention core: flash (causal blocks skipped) or materialised scores.
    heads_t = ms.heads / tp
    s = ms.seq_len
    # full count (QK^T and AV); keys span the whole sequence (ring attention for cp > 1)
    att_flops = 4.0 * T * s * q_t + 2.0 * T * s * (o_t - q_t)
    causal_frac = ops.where(ms.causal, 0.5, 1.0)
    # Keys one query row meets per kernel call: the whole local sequence, half of it when causal
    # (ring attention calls the kernel once per K/V chunk of s / cp).
    kv_call = sh.seq_local * causal_frac
    t_flash_f = (
        att_flops * causal_frac / (peak16 * hw.attention_efficiency) * (1.0 + ATTENTION_RAMP_KEYS / kv_call)
        + 2 * KERNEL_OVERHEAD_S
    )
    score_el = heads_t * T * s  # score matrix elements of this GPU
    # Materialised scores: Q K^T and P V as two batched GEMMs over the micro-batch's sequences x
    # local heads (Megatron-LM megatron/model/transformer.py, CoreAttention: ``torch.baddbmm`` on
    # ``[b * np, sq, hn]`` and ``torch.bmm``), each one kernel (formulas.gemm_time ``batch``),
    # plus the scale-mask-softmax and dropout passes over the scores at HBM bandwidth.
    t_mat_f = (
        gemm_time(
            sh.seq_local,
            s,
            ms.q_dim / ms.heads,
            peak16,
            eff,
            hbm,
            sms,
            count=2.0,
            batch=heads_t * tr.micro_batch,
        )
        + 9.0 * score_el / hbm
    )
    mat = ops.as_bool(tr.materialized)
    t_att_f = ops.where(mat, t_mat_f, t_flash_f)
    t_att_b = ops.where(mat, 2.0 * t_mat_f, FLASH_BWD_FACTOR * t_flash_f)
    # Memory-bound elementwise kernels (norms, rotary, activation, residual adds, dropout), eager
    # or fused (elementwise.py), and the fp8 recipe's quantisation passes (fp8.py).
    n_h = T * h * ops.where(sp, 1.0 / tp, 1.0)
    k_act = ops.where(moe, ms.experts_per_token + ms.shared_experts, 1.0)
    el_f, el_b = layer_elementwise(
        n_h, T * q_t, T * kv_t, T * ffn_t * k_act, ms.swiglu, ms.dropout, tr.compile, hbm
    )
    dl_f, dl_b = layer_elementwise(n_h, T * q_t, T * kv_t, T * dffn_t, ms.swiglu, ms.dropout, tr.compile, hbm)
    d_elem_f = ops.where(Ld > 0, dl_f - el_f, 0.0)
    d_elem_b = ops.where(Ld > 0, dl_b - el_b, 0.0)
    if fp8 if ops.is_scalar(fp8) else np.any(fp8):
        cf, cb = layer_cast_time(
            tr.fp8_recipe, tr.compile, T, m_exp, h, q_t, kv_t, v_t, o_t, ffn_t, e_loc, ms.swiglu, hbm
        )
        cast_f = ops.where(fp8, cf, 0.0)
        cast_b = ops.where(fp8, cb, 0.0)
    else:  # no fp8 row: every cast time is the 0.0 the where above picks (the recipes are not priced)
        cast_f = cast_b = 0.0
    # Output head (last stage): logits GEMM and a fp32 vocab-parallel cross-entropy.
    t_head_f = gemm_time(T, ms.vocab / tp, h, peak16, eff, hbm, sms) + T * (ms.vocab / tp) * 12.0 / hbm
    t_head = 3.0 * t_head_f  # forward + backward

    Ls = sh.layers_per_stage
    comp_f = Ls * (t_dense_f + t_att_f) + Ld * d_dense
    comp_b = Ls * (2.0 * t_dense_f + t_att_b) + Ld * 2.0 * d_dense
    # Per-operator selective checkpointing (torchtitan ``SelectiveAC``): the matrix multiplies
    # are counted in forward order (wq, wk, wv, wo, w1, w3, w2; c_fc, c_proj without SwiGLU) and
    # every second one is recomputed: wk, wo and w3 (c_proj), plus the MoE router, which
    # torchtitan forces to recompute (``force_recompute_mm_shapes_by_fqns``). Attention is saved,
    # unless the save list leaves its kernel out (``tr.op_saves_attention`` = 0: torchtitan's
    # cuDNN SDPA on compute capability 10.0, absent from ``_save_list`` at accc7027 and added in
    # b39377f9, 2025-12-01): then it runs once more per layer, as selective recompute runs it.
    t_wk = gemm_time(T, kv_t, h, peak, eff, hbm, sms, el)
    t_mlp_rec = ops.where(
        ms.swiglu,
        gemm_time(m_exp, ffn_t, h, peak, eff, hbm, sms, el, count=e_loc),
        gemm_time(m_exp, h, ffn_t, peak, eff, hbm, sms, el, count=e_loc),
    )
    t_shared_rec = ops.where(
        moe & (ms.shared_experts > 0),
        ops.where(
            ms.swiglu,
            gemm_time(T, shared_t, h, peak, eff, hbm, sms, el),
            gemm_time(T, h, shared_t, peak, eff, hbm, sms, el),
        ),
        0.0,
    )
    t_op_att = ops.where(ops.as_bool(tr.op_saves_attention), 0.0, t_att_f)
    t_op = t_wk + t_proj + t_mlp_rec + t_router + t_shared_rec + t_op_att
    t_dense_op = (
        t_wk
        + t_proj
        + t_op_att
        + ops.where(
            ms.swiglu,
            gemm_time(T, dffn_t, h, peak, eff, hbm, sms, el),
            gemm_time(T, h, dffn_t, peak, eff, hbm, sms, el),
        )
    )
    d_op = ops.where(Ld > 0, t_dense_op - t_op, 0.0)
    share = full_recompute_share(tr, sh)
    recomp = ops.where(
        rec == 2,
        share * comp_f,
        ops.where(rec == 1, Ls * t_att_f, ops.where(rec == 3, Ls * t_op + Ld * d_op, 0.0)),
    )
    # Full and op recompute rerun every elementwise kernel (and fp8 cast) of what they recompute.
    elem_f = Ls * el_f + Ld * d_elem_f
    elem_b = Ls * el_b + Ld * d_elem_b
    rerun = ops.where(rec == 2, share, ops.where(rec == 3, 1.0, 0.0))
    elem = elem_f + elem_b + rerun * elem_f + Ls * (cast_f * (1.0 + rerun) + cast_b)
    return ComputeTerms(
        forward=comp_f,
        backward=comp_b,
        recompute=recomp,
        head=t_head,
        compute=comp_f + comp_b + recomp + t_head,
        memory_ops=elem,
        dense_forward=t_dense_f,
        attention_forward=t_att_f,
        attention_backward=t_att_b,
        qkv_forward=t_qkv,
        proj_forward=t_proj,
        mlp_up_forward=t_mlp_up,
        mlp_down_forward=t_mlp_down,
    )


def _mla_projections(ms: ModelShape, T, q_t, kv_t, peak, eff, hbm, sms, el) -> Array:
    """Q, K and V projections of multi-head latent attention (DeepSeek-V2, arXiv 2405.04434,
    Sec. 2.1): the down-projections to the query and KV latents (``h -> r_q + r_kv``, replicated
    on every tensor-parallel rank as in Megatron-LM's MLA), then the up-projections of this
    rank's heads (``r_q -> q``, ``r_kv -> k + v``); a query of full rank (``r_q = 0``) is one
    ``h -> q`` GEMM. ``kv_t`` is this rank's K and V width together."""
    h = ms.hidden
    q_low = ms.q_rank > 0
    down = gemm_time(T, ms.q_rank + ms.kv_rank, h, peak, eff, hbm, sms, el)
    q_up = gemm_time(T, q_t, ops.where(q_low, ms.q_rank, h), peak, eff, hbm, sms, el)
    kv_up = gemm_time(T, kv_t, ops.maximum(ms.kv_rank, 1.0), peak, eff, hbm, sms, el)
    return down + q_up + kv_up
