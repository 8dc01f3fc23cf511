"""Activation memory of one transformer layer for one micro-batch, by recompute mode and tensor
group: what the layer keeps for its backward pass without recompute (Korthikanti et al. 2022),
under full recompute (its input) and under op recompute (torchtitan's per-operator save list),
eager or compiled. Bytes, 16-bit activations; numpy arrays or scalars alike.
"""

from __future__ import annotations

from shardmeter.inputs.bundles import REC_FULL, REC_NONE, REC_OP
from shardmeter.model.branches import where_needed
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "activation_bytes_per_layer",
    "kept_activation_bytes",
    "full_recompute_bytes",
    "op_recompute_bytes",
    "op_w2_output_bytes",
    "op_sdpa_bytes",
]


def activation_bytes_per_layer(
    s: Array,
    b: Array,
    h: Array,
    heads: Array,
    q_dim: Array,
    kv_dim: Array,
    ffn: Array,
    swiglu: Array,
    tp: Array,
    sp: Array,
    recompute: Array,
    materialized: Array,
    experts_per_token: Array = 1,
    s_kv: Array | None = None,
    dropout: Array = True,
    compiled: Array = False,
    saves_attention: Array = True,
) -> tuple[Array, Array]:
    """Activation memory of one layer for one micro-batch (bytes, 16-bit activations), by
    recompute mode: :func:`kept_activation_bytes` without recompute (the score matrix kept
    where attention is ``materialized``) and with selective recompute,
    :func:`full_recompute_bytes` and :func:`op_recompute_bytes` (priced only where a plan
    recomputes per operator).

    ``recompute`` is a :class:`~shardmeter.inputs.bundles.Recompute` code (0 none, 1 selective,
    2 full, 3 op); ``compiled``: a dense block runs under torch.compile (only op recompute
    changes); ``s`` is the sequence length held by this GPU (``seq/cp``), ``s_kv`` the keys each
    query attends to (default ``s``). ``dropout=False`` (models trained without dropout, e.g.
    Llama, MPT) drops the 1-byte masks; ``saves_attention=False``: op recompute's save list
    leaves the attention kernel out.

    Returns ``(stored, full)``: bytes kept per layer under the recompute mode, and the full
    per-layer activations (the working set while recomputing).
    """
    s_kv = s if s_kv is None else s_kv
    tp = ops.as_float(tp)
    shape = (s, b, h, heads, q_dim, kv_dim, ffn, swiglu, tp, sp)
    scores = materialized & (recompute == REC_NONE)
    per_layer = kept_activation_bytes(*shape, scores, experts_per_token, s_kv, dropout)
    op = recompute == REC_OP
    op_store = where_needed(
        op,
        lambda: op_recompute_bytes(*shape, materialized, experts_per_token, s_kv, compiled, saves_attention),
        lambda: 0.0,
    )
    stored = ops.where(
        recompute == REC_FULL, full_recompute_bytes(s, b, h, tp, sp), ops.where(op, op_store, per_layer)
    )
    return stored, per_layer


def kept_activation_bytes(
    s: Array,
    b: Array,
    h: Array,
    heads: Array,
    q_dim: Array,
    kv_dim: Array,
    ffn: Array,
    swiglu: Array,
    tp: Array,
    sp: Array,
    scores: Array,
    experts_per_token: Array = 1,
    s_kv: Array | None = None,
    dropout: Array = True,
) -> Array:
    """Bytes one layer keeps without recompute, per micro-batch, by tensor group.

    Korthikanti et al. 2022 (arXiv 2205.05198), Sec. 4, Table 2, generalised to
    GQA and SwiGLU term by term (for MHA with a 4h GELU MLP it reduces exactly
    to the paper's formulas):

    * no parallelism: ``s b h (34 + 5 a s / h)``;
    * tensor parallel ``t``: ``s b h (10 + 24/t + 5 a s/(h t))``;
    * + sequence parallel: ``s b h / t (34 + 5 a s / h)``;
    * selective recompute (or fused/flash attention) drops the ``5 a s^2 b``
      score/softmax/dropout storage: ``scores`` false.

    The groups: replicated across tensor-parallel ranks unless sequence parallel (the two
    LayerNorm inputs ``4 s b h``, the QKV and MLP inputs ``2 + 2``, the dropout masks ``2``),
    attention (Q and the output projection's input ``2 q + 2 q``, K and V ``2 kv + 2 kv``:
    ``8 s b h`` for MHA), the MLP (``4 ffn``, ``6 ffn`` for SwiGLU's three matrices, per active expert)
    and the score matrix (softmax output 2, dropout mask 1 and output 2 per score).
    ``dropout=False`` drops the paper's 1-byte masks: ``2 s b h`` of the 34 and the
    attention-dropout mask and output (``3 a s^2 b`` of the 5).
    """
    s_kv = s if s_kv is None else s_kv
    sbh = s * b * h
    drop = ops.where(dropout, 1.0, 0.0)
    repl = (8.0 + 2.0 * drop) * sbh  # LayerNorm inputs 4, QKV input 2, MLP input 2, dropout masks 2
    att = s * b * (4.0 * q_dim + 4.0 * kv_dim)  # Q, K (4), V (2), out-proj input (2) -> 8 s b h for MHA
    mlp = s * b * ffn * ops.where(swiglu, 6.0, 4.0) * experts_per_token
    score = (2.0 + 3.0 * drop) * heads * s * s_kv * b  # softmax out (2) + dropout mask (1) + dropout out (2)
    score = ops.where(scores, score, 0.0)
    return ops.where(sp, repl / tp, repl) + (att + mlp + score) / tp


def full_recompute_bytes(s: Array, b: Array, h: Array, tp: Array, sp: Array) -> Array:
    """Bytes one layer keeps under full recompute: only its input ``2 s b h``, ``/ t`` with
    sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4)."""
    sbh = s * b * h
    return ops.where(sp, 2.0 * sbh / tp, 2.0 * sbh)


def op_recompute_bytes(
    s: Array,
    b: Array,
    h: Array,
    heads: Array,
    q_dim: Array,
    kv_dim: Array,
    ffn: Array,
    swiglu: Array,
    tp: Array,
    sp: Array,
    materialized: Array,
    experts_per_token: Array = 1,
    s_kv: Array | None = None,
    compiled: Array = False,
    saves_attention: Array = True,
) -> Array:
    """Bytes one layer keeps under op recompute (torchtitan's per-operator selective
    checkpointing, ``SelectiveAC`` in torchtitan/distributed/activation_checkpoint.py
    @ b5bcd76c; the same policy as ``_apply_op_sac`` with llama3's ``_op_sac_save_list``
    @ e61f2cce).

    * Eager: it keeps the layer input (the checkpoint's argument) and the outputs of the ops
      it must save: the matrix multiplies counted in forward order, every second one
      recomputed (``mm_count % 2 == 0``; the count restarts with each block's checkpoint),
      SDPA's outputs (the output and its fp32 log-sum-exp per head and token; the math
      backend's attention weights too) and the reduce-scatters. Per token, with torchtitan's
      separate wq, wk, wv, wo and w1, w3, w2 (SwiGLU) or c_fc, c_proj: saved wq ``2 q``, wv
      ``2 kv``, w1 / c_fc ``2 ffn``, w2 ``2 h`` (SwiGLU only: the 7th matrix multiply; under TP
      its full-width partial sum, before the reduce-scatter or all-reduce), SDPA ``2 q + 4
      heads``, the layer input ``2 h``, and with SP the two reduce-scatter outputs ``2 x 2 h /
      t``; wk, wo, w3 / c_proj, norms, rotary embedding, activation and residual adds are
      recomputed and hold memory only while their layer's backward runs. Llama 3 8B (h = q =
      4096, kv = 1024, ffn = 14336, 32 heads, no TP): ``63 616`` bytes per token per layer,
      against ``139 264`` that the fused-attention selective count keeps. A MoE layer scales
      the MLP terms by its active experts.
    * Under torch.compile, the w2 output is not kept (:func:`op_w2_output_bytes`); with an
      attention kernel the save list leaves out, neither are SDPA's outputs
      (:func:`op_sdpa_bytes`).
    """
    s_kv = s if s_kv is None else s_kv
    sbh = s * b * h
    saved_mm = s * b * (2.0 * q_dim + 2.0 * kv_dim + 2.0 * ffn * experts_per_token)  # wq, wv, w1
    sdpa = op_sdpa_bytes(s, b, heads, q_dim, materialized, s_kv, saves_attention)
    w2 = op_w2_output_bytes(sbh, swiglu, compiled, experts_per_token)
    rs = ops.where(sp & (tp > 1), 4.0 * sbh / tp, 0.0)
    return full_recompute_bytes(s, b, h, tp, sp) + (saved_mm + sdpa) / tp + w2 + rs


def op_w2_output_bytes(sbh: Array, swiglu: Array, compiled: Array, experts_per_token: Array = 1) -> Array:
    """The w2 output op recompute keeps (SwiGLU's 7th matrix multiply, ``2 s b h`` per active
    expert), eager only.

    Under torch.compile (``compiled``): torchtitan checkpoint-wraps each block, then compiles
    it whole (``apply_ac`` before ``apply_compile``, ``torch.compile(block,
    fullgraph=True)``, torchtitan/models/llama3/infra/parallelize.py @ 6fc499f6), so the SAC
    policy only tags the traced ops and AOTAutograd's min-cut partitioner picks what is saved
    (``min_cut_rematerialization_partition``, torch/_functorch/partitioners.py at
    pytorch/pytorch@5c488690, v2.14.1): ``MUST_SAVE`` bans a node's recomputation
    (``should_ban_recomputation``: "marked MUST_SAVE"), the cut saves only forward values
    the backward reads, and ``_extract_fwd_bwd_modules`` drops any saved value with no
    backward user. Eager SAC instead stores every ``MUST_SAVE`` output as it runs
    (``_CachingTorchDispatchMode``, torch/utils/checkpoint.py, same commit). The w2 output
    is read by no backward op (the residual add's backward saves nothing; w2's matrix
    multiply needs its input and weight), so compiled it is not kept: ``63 616 - 2 h =
    55 424`` bytes per token per layer for Llama 3 8B. Every other saved-list output is read
    (wq's through the rotary embedding into SDPA's backward, wv's and SDPA's output and
    log-sum-exp by SDPA's backward, SDPA's output by wo's weight gradient, w1's by SiLU's
    and the gate product's backward, the block input by the recomputed norms and
    residual). A MoE layer is left as counted: torchtitan's routed experts run
    ``torch._grouped_mm`` (torchtitan/models/moe.py @ 6fc499f6), an op its save list does
    not name, so the count above is not theirs either, compiled or not. Measured with
    saved-tensor hooks on a torchtitan-shaped Llama block under Inductor
    (``benchmarks/saved_tensors_check.py``, torch 2.14.1 on CPU): eager op SAC keeps exactly
    this count, compiled the count less w2's output. Without recompute and with full
    recompute the compiled block keeps what this count already holds (the 16-bit tensors and
    two fp32 norm scalars per token; full: the block input), so ``compiled`` changes nothing
    there; eager PyTorch keeps more (the fp32 copies of its composite RMSNorm and rotary
    embedding), not counted.
    """
    eager = ops.logical_not(ops.as_bool(compiled))
    return ops.where(ops.as_bool(swiglu) & eager, 2.0 * sbh * experts_per_token, 0.0)


def op_sdpa_bytes(
    s: Array,
    b: Array,
    heads: Array,
    q_dim: Array,
    materialized: Array,
    s_kv: Array | None = None,
    saves_attention: Array = True,
) -> Array:
    """SDPA's outputs op recompute keeps: the output and its fp32 log-sum-exp per head and
    token (``2 q + 4 heads`` bytes per token), and the math backend's attention weights
    (``2 heads s_kv``) where attention is ``materialized``.

    With an attention kernel the save list leaves out (``saves_attention`` false): SDPA's
    output and log-sum-exp (``2 q + 4 heads`` per token) are not kept and attention runs
    again in the backward (one more attention forward per layer,
    :func:`~.recompute.op_recompute_layer_s`). torchtitan's ``ScaledDotProductAttention`` puts
    cuDNN attention first on compute capability 10.0 (torchtitan/models/attention.py @ accc7027,
    since 3b85aa31, 2025-05-14), and its ``_save_list`` (distributed/activation_checkpoint.py
    @ accc7027; models/llama3/infra/parallelize.py @ 6fc499f6) names
    ``_scaled_dot_product_flash_attention`` and ``_efficient_attention`` but not
    ``_scaled_dot_product_cudnn_attention`` (added in b39377f9, 2025-12-01): Llama 3 8B on
    B200 keeps ``63 616 - 8 320 = 55 296`` bytes per token per layer eager, ``47 104``
    compiled (the partitioner's ``must_recompute`` counts the policy's ``PREFER_RECOMPUTE``
    with ``MUST_RECOMPUTE``, torch/_functorch/partitioners.py; not measured here).
    """
    s_kv = s if s_kv is None else s_kv
    sdpa = s * b * (2.0 * q_dim + 4.0 * heads) + ops.where(materialized, 2.0 * heads * s * s_kv * b, 0.0)
    return ops.where(ops.as_bool(saves_attention), sdpa, 0.0)
