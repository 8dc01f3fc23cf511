"""The attention core of one layer on one GPU: fused (flash) attention at the kernel's efficiency
with a sequence-length ramp, or the materialised score matrix as two batched GEMMs and its
elementwise passes. Attention runs 16-bit whatever the GEMMs' precision."""

from __future__ import annotations

import attrs

from shardmeter.inputs.bundles import Hardware, ModelShape, Training
from shardmeter.model.branches import where_needed
from shardmeter.model.formulas import KERNEL_OVERHEAD_S
from shardmeter.model.gemms import GemmRoof, GemmShapes
from shardmeter.model.shapes import Shapes
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "FLASH_BWD_FACTOR",
    "ATTENTION_RAMP_KEYS",
    "AttentionTime",
    "attention_flops",
    "attention_time",
    "flash_attention_s",
    "materialized_attention_s",
    "FUSED_HEAD_DIM_MULTIPLE",
    "padded_head_dim_share",
    "head_dim_pad_s",
    "HOPPER_FLASH2_OVER_CUDNN",
    "FA3_PAPER_H100_HD128_TFLOPS",
    "flash2_over_cudnn",
]

#: Fused attention kernels run on head dims padded to a multiple of 8 (16 bytes of a 16-bit
#: element): PyTorch SDPA's flash path ``pad_last_dim<8, false>`` on q, k and v before
#: ``_scaled_dot_product_flash_attention`` and the output sliced back
#: (``aten/src/ATen/native/transformers/attention.cpp``, ``scaled_dot_product_attention``), as
#: Dao's ``flash_attn`` interface pads ``head_size_og % 8 != 0``.
FUSED_HEAD_DIM_MULTIPLE = 8.0

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

#: Published A/B of the two fused-attention kernels on one H100 SXM5, head dim 128, bf16, the
#: same inputs (batch x seq = 16k tokens, 2048 wide): TFLOP/s of FlashAttention-2 and of cuDNN by
#: sequence length (Shah et al. 2024, FlashAttention-3, arXiv:2407.08608, Fig. 5 "forward,
#: causal, head dim 128" and Fig. 6 "backward, head dim 128"; the values printed on the bars).
#: ``{seq: ((fa2_fwd, fa2_bwd), (cudnn_fwd, cudnn_bwd))}``.
FA3_PAPER_H100_HD128_TFLOPS: dict[int, tuple[tuple[float, float], tuple[float, float]]] = {
    2048: ((298.0, 291.0), (484.0, 465.0)),
    4096: ((319.0, 310.0), (518.0, 499.0)),
    8192: ((333.0, 318.0), (529.0, 518.0)),
    16384: ((335.0, 322.0), (539.0, 516.0)),
}


def flash2_over_cudnn(table: dict[int, tuple[tuple[float, float], tuple[float, float]]]) -> float:
    """FlashAttention-2's forward+backward rate as a share of cuDNN's, averaged over the
    table's sequence lengths: each kernel's rate is the FLOP-weighted harmonic mean of its
    forward and backward rates, ``(1 + b) / (1 / fwd + b / bwd)`` with ``b =``
    :data:`FLASH_BWD_FACTOR` (a training step runs one of each)."""
    b = FLASH_BWD_FACTOR

    def rate(fwd: float, bwd: float) -> float:
        return (1.0 + b) / (1.0 / fwd + b / bwd)

    shares = [rate(*fa2) / rate(*cudnn) for fa2, cudnn in table.values()]
    return sum(shares) / len(shares)


#: On Hopper the FlashAttention-2 kernels run at this share of the native fused kernel
#: (cuDNN, which Transformer Engine prefers on sm90, and the FA3-class kernels of the same
#: rate): 0.621 from :data:`FA3_PAPER_H100_HD128_TFLOPS` (0.62-0.63 at every length from 2k
#: to 16k, forward and backward alike, so one share serves the ramp of both). The catalogue's
#: ``attention_efficiency_flash2`` is ``attention_efficiency`` times this share, not a figure
#: fitted of its own: one attention efficiency per Hopper chip is fitted
#: (``tools/fit_efficiency.py``), informed by the FA2 and the cuDNN runs together.
HOPPER_FLASH2_OVER_CUDNN = round(flash2_over_cudnn(FA3_PAPER_H100_HD128_TFLOPS), 3)


@attrs.frozen(kw_only=True)
class AttentionTime:
    """One layer's attention core on one GPU: ``flops`` (QK^T and AV, counted in full),
    ``forward_s`` and ``backward_s``."""

    flops: Array
    forward_s: Array
    backward_s: Array


def attention_flops(ms: ModelShape, sh: Shapes, gs: GemmShapes) -> Array:
    """FLOPs of QK^T (``4 T s q``) and AV (``2 T s (o - q)`` more where the value heads are
    narrower, MLA) on this GPU, full count: the keys span the whole sequence (ring attention
    for ``cp > 1``)."""
    T, s = sh.tokens, ms.seq_len
    return 4.0 * T * s * sh.q_local + 2.0 * T * s * (gs.o_local - sh.q_local)


def flash_attention_s(ms: ModelShape, hw: Hardware, sh: Shapes, flops: Array, peak16: Array) -> Array:
    """Forward seconds of fused attention: the FLOPs (halved when causal: blocks above the
    diagonal are skipped) at ``attention_efficiency`` of the 16-bit peak, slowed by the ramp
    :data:`ATTENTION_RAMP_KEYS` at the keys one query row meets per kernel call (the whole local
    sequence, half of it when causal; ring attention calls the kernel once per K/V chunk of
    ``s / cp``), plus two kernels' overhead."""
    causal_frac = ops.where(ms.causal, 0.5, 1.0)
    kv_call = sh.seq_local * causal_frac
    return (
        flops * causal_frac / (peak16 * hw.attention_efficiency) * (1.0 + ATTENTION_RAMP_KEYS / kv_call)
        + 2 * KERNEL_OVERHEAD_S
    )


def materialized_attention_s(ms: ModelShape, tr: Training, sh: Shapes, roof16: GemmRoof, tp: Array) -> Array:
    """Forward seconds of materialised scores: Q K^T and P V as two batched GEMMs over the
    micro-batch's sequences x local heads (Megatron-LM megatron/model/transformer.py,
    CoreAttention: ``torch.baddbmm`` on ``[b * np, sq, hn]`` and ``torch.bmm``), each one kernel
    (:func:`~.formulas.gemm_time` ``batch``), plus the scale-mask-softmax and dropout passes
    over the score matrix (``heads / tp x T x s`` elements, 9 bytes each) at HBM bandwidth."""
    heads_t = ms.heads / tp
    s = ms.seq_len
    products = roof16.seconds(sh.seq_local, s, ms.q_dim / ms.heads, count=2.0, batch=heads_t * tr.micro_batch)
    return products + 9.0 * (heads_t * sh.tokens * s) / roof16.hbm_bytes_s


def padded_head_dim_share(ms: ModelShape) -> Array:
    """``ceil8(d) / d`` of the query head dim ``d`` (:data:`FUSED_HEAD_DIM_MULTIPLE`): the
    share of work a fused kernel does on the padded heads (1 where ``d`` is a multiple of 8)."""
    d = ms.q_dim / ops.maximum(ms.heads, 1.0)
    m = FUSED_HEAD_DIM_MULTIPLE
    return ops.ceil(d / m) * m / ops.maximum(d, 1e-9)


def head_dim_pad_s(sh: Shapes, gs: GemmShapes, share: Array, hbm: Array) -> tuple[Array, Array]:
    """``(forward, backward)`` seconds of the pad copies where the head dim is misaligned
    (``share > 1``): forward q, k and v copied into padded tensors (read 2, write 2 x share
    bytes per element), backward their gradients sliced back (read 2 x share, write 2)."""
    n = sh.tokens * (sh.q_local + sh.kv_local + gs.v_local)
    copy = ops.where(share > 1.0, 2.0 * (1.0 + share) * n / hbm, 0.0)
    return copy, copy


def attention_time(
    ms: ModelShape, tr: Training, hw: Hardware, sh: Shapes, gs: GemmShapes, roof16: GemmRoof, tp: Array
) -> AttentionTime:
    """One layer's attention core: materialised where ``tr.materialized`` (backward twice the
    forward), else fused (backward :data:`FLASH_BWD_FACTOR` x the forward) on head dims padded
    to a multiple of 8 (:func:`padded_head_dim_share`, with :func:`head_dim_pad_s`'s copies);
    the score matrix is priced only where a plan materialises it. ``flops`` stays the model's
    count (the padding is work the kernel does, not model FLOPs)."""
    flops = attention_flops(ms, sh, gs)
    share = padded_head_dim_share(ms)
    pad_f, pad_b = head_dim_pad_s(sh, gs, share, roof16.hbm_bytes_s)
    flash_f = flash_attention_s(ms, hw, sh, flops * share, roof16.peak_flops_s)
    mat = ops.as_bool(tr.materialized)
    mat_f = where_needed(mat, lambda: materialized_attention_s(ms, tr, sh, roof16, tp), lambda: 0.0)
    return AttentionTime(
        flops=flops,
        forward_s=ops.where(mat, mat_f, flash_f + pad_f),
        backward_s=ops.where(mat, 2.0 * mat_f, FLASH_BWD_FACTOR * flash_f + pad_b),
    )
