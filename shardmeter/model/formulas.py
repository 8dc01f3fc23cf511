"""Closed-form formulas of the model, elementwise on numpy arrays or scalars.

Each function is a formula from the literature, named in its docstring. All
take and return numpy-broadcastable values, so one call scores a whole batch
of candidate plans. Units: bytes, FLOPs, seconds, bytes/s.
"""

from __future__ import annotations

from shardmeter.inputs.bundles import Recompute
from shardmeter.model.branches import where_needed
from shardmeter.numeric import ops

__all__ = [
    "attention_params",
    "layer_flops_per_token",
    "layers_forward_flops",
    "model_flops_per_token",
    "params_per_layer",
    "model_params",
    "active_params",
    "activation_bytes_per_layer",
    "kept_activation_bytes",
    "full_recompute_bytes",
    "op_recompute_bytes",
    "op_recompute_flops_per_token",
    "offload_exposed_s",
    "gemm_time",
    "ring_collective_time",
    "KERNEL_OVERHEAD_S",
]

#: Fixed cost of one GPU kernel (launch + ramp), seconds. Measured on an H200
#: (benchmarks/results/h200-2026-11-30): GEMMs too small to fill the GPU take
#: 6-8 us whatever their size; 5 us is the floor we charge per kernel.
KERNEL_OVERHEAD_S = 5e-6


def attention_params(h, q_dim, kv_dim, v_dim=None, o_dim=None, q_rank=0, kv_rank=0):
    """Parameters of one layer's attention projections: Q ``h q`` (``h r_q + r_q q`` through a
    rank-``r_q`` bottleneck), K and V ``h (k + v)`` (``h r_kv + r_kv (k + v)`` from a rank-``r_kv``
    latent) and the output projection ``o h``; ``v_dim`` defaults to ``kv_dim``, ``o_dim`` (heads x
    the value head width) to ``q_dim``.

    The low ranks are DeepSeek-V2's multi-head latent attention (MLA; arXiv 2405.04434, Sec. 2.1:
    ``W^DQ, W^UQ, W^DKV, W^UK, W^UV``), approximated: the decoupled RoPE key (``h d_rope``,
    shared by the heads) is counted as part of every head's key, and the latent's RMSNorms are
    left out. Without them this is ``h (q + 2 kv) + q h``, Megatron-LM's count.
    """
    v_dim = kv_dim if v_dim is None else v_dim
    o_dim = q_dim if o_dim is None else o_dim
    q_proj = ops.where(q_rank > 0, q_rank * (h + q_dim), h * q_dim)
    kv_proj = ops.where(kv_rank > 0, kv_rank * (h + kv_dim + v_dim), h * (kv_dim + v_dim))
    return q_proj + kv_proj + o_dim * h


def layer_flops_per_token(
    h, q_dim, kv_dim, ffn, swiglu, seq, experts_per_token=1, experts=1, *, shared_experts=0, **attn
):
    """Forward FLOPs of one transformer layer per token, split in parts.

    Returns ``(dense, attention)``: the dense matrix multiplies (QKV,
    attention output projection, MLP, router) and the attention score terms
    (QK^T and attention-over-values, full non-causal count ``2 s q_dim + 2 s o_dim``,
    ``4 s q_dim`` when the value heads are as wide as the query heads).

    Narayanan et al. 2021 (arXiv 2104.04473), Appendix / Eq. 3: per layer and
    token the forward pass costs ``24 h^2 + 4 s h`` for MHA with a 4h GELU MLP;
    here generalised to GQA (``kv_dim < q_dim``), SwiGLU (three MLP matrices),
    top-k MoE routing with ``shared_experts`` always-active experts of the same width
    (DeepSeekMoE, arXiv 2401.06066), and the projections of :func:`attention_params`
    (``attn``: ``v_dim``, ``o_dim``, ``q_rank``, ``kv_rank``), as in Megatron-LM's
    ``num_floating_point_operations``: 2 FLOPs per weight per token.
    """
    mlp_mats = ops.where(swiglu, 3.0, 2.0)
    o_dim = attn.get("o_dim")
    o_dim = q_dim if o_dim is None else o_dim
    proj = 2.0 * attention_params(h, q_dim, kv_dim, **attn)
    mlp = 2.0 * h * ffn * mlp_mats * (experts_per_token + shared_experts)
    router = ops.where(experts > 1, 2.0 * h * experts, 0.0)
    att = 2.0 * seq * (q_dim + o_dim)
    return proj + mlp + router, att


def layers_forward_flops(
    layers,
    h,
    q_dim,
    kv_dim,
    ffn,
    swiglu,
    seq,
    experts_per_token=1,
    experts=1,
    *,
    moe_ffn=None,
    shared_experts=0,
    dense_layers=0,
    **attn,
):
    """``(dense, attention)`` forward FLOPs per token of all layers: ``dense_layers`` leading
    dense layers (MLP width ``ffn``; DeepSeek-V3's ``first_k_dense_replace``) and the rest MoE
    layers (experts ``moe_ffn`` wide, default ``ffn``) when ``experts > 1``."""
    moe_ffn = ffn if moe_ffn is None else moe_ffn
    d_moe, att = layer_flops_per_token(
        h,
        q_dim,
        kv_dim,
        moe_ffn,
        swiglu,
        seq,
        experts_per_token,
        experts,
        shared_experts=shared_experts,
        **attn,
    )
    d_dense, _ = layer_flops_per_token(h, q_dim, kv_dim, ffn, swiglu, seq, **attn)
    n_dense = ops.where(experts > 1, dense_layers, 0.0)
    return layers * d_moe + n_dense * (d_dense - d_moe), layers * att


def model_flops_per_token(
    layers, h, q_dim, kv_dim, ffn, swiglu, vocab, seq, experts_per_token=1, experts=1, **shape
):
    """Model FLOPs per trained token (forward + backward = 3 x forward, no recompute).

    ``3 * (L * (dense + 4 s q_dim) + 2 h V)``; for MHA with a 4h MLP this is
    Narayanan et al. 2021's ``72 l h^2 (1 + s/(6h) + V/(12 l h))`` per token
    and equals the PaLM (Chowdhery et al. 2022, App. B) ``6N + 12 L H Q T``
    convention (attention scores counted in full, not halved for causality).
    ``shape``: the MoE and attention keywords of :func:`layers_forward_flops`.
    """
    dense, att = layers_forward_flops(
        layers, h, q_dim, kv_dim, ffn, swiglu, seq, experts_per_token, experts, **shape
    )
    return 3.0 * (dense + att + 2.0 * h * vocab)


def params_per_layer(h, q_dim, kv_dim, ffn, swiglu, experts=1, *, shared_experts=0, **attn):
    """Parameters of one layer: attention (:func:`attention_params`; ``h(q + 2kv) + q h`` for
    standard attention), MLP ``(2 or 3) h ffn`` per expert and per shared expert, two
    LayerNorms ``4h`` (scale and bias), router ``h E`` when MoE."""
    mlp_mats = ops.where(swiglu, 3.0, 2.0)
    att = attention_params(h, q_dim, kv_dim, **attn)
    mlp = mlp_mats * h * ffn * (experts + shared_experts)
    router = ops.where(experts > 1, h * experts, 0.0)
    return att + mlp + router + 4.0 * h


def model_params(
    layers,
    h,
    q_dim,
    kv_dim,
    ffn,
    swiglu,
    vocab,
    tied,
    experts=1,
    *,
    moe_ffn=None,
    shared_experts=0,
    dense_layers=0,
    **attn,
):
    """All parameters: layers + input embedding ``V h`` + output head ``V h`` unless tied (+ the
    final norm ``2h``). With ``experts > 1`` the first ``dense_layers`` layers are dense (MLP
    ``ffn`` wide) and the others MoE (``experts`` + ``shared_experts`` experts ``moe_ffn`` wide,
    default ``ffn``)."""
    moe_ffn = ffn if moe_ffn is None else moe_ffn
    emb = vocab * h * ops.where(tied, 1.0, 2.0)
    p_moe = params_per_layer(
        h, q_dim, kv_dim, moe_ffn, swiglu, experts, shared_experts=shared_experts, **attn
    )
    p_dense = params_per_layer(h, q_dim, kv_dim, ffn, swiglu, **attn)
    n_dense = ops.where(experts > 1, dense_layers, 0.0)
    return layers * p_moe + n_dense * (p_dense - p_moe) + emb + 2.0 * h


def active_params(
    layers, h, q_dim, kv_dim, ffn, swiglu, vocab, tied, experts=1, experts_per_token=1, **shape
):
    """Parameters one token passes through: :func:`model_params` less the ``experts -
    experts_per_token`` routed experts each MoE layer does not use (the "activated parameters"
    of Mixtral and DeepSeek-V3; embedding and output head included)."""
    moe_ffn = shape.get("moe_ffn")
    moe_ffn = ffn if moe_ffn is None else moe_ffn
    n_moe = ops.where(experts > 1, layers - shape.get("dense_layers", 0), 0.0)
    unused = ops.where(swiglu, 3.0, 2.0) * h * moe_ffn * (experts - experts_per_token)
    return model_params(layers, h, q_dim, kv_dim, ffn, swiglu, vocab, tied, experts, **shape) - n_moe * unused


def activation_bytes_per_layer(
    s,
    b,
    h,
    heads,
    q_dim,
    kv_dim,
    ffn,
    swiglu,
    tp,
    sp,
    recompute,
    materialized,
    experts_per_token=1,
    s_kv=None,
    dropout=True,
    compiled=False,
    saves_attention=True,
):
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
    scores = materialized & (recompute == Recompute.NONE)
    per_layer = kept_activation_bytes(*shape, scores, experts_per_token, s_kv, dropout)
    op = recompute == Recompute.OP
    op_store = where_needed(
        op,
        lambda: op_recompute_bytes(*shape, materialized, experts_per_token, s_kv, compiled, saves_attention),
        lambda: 0.0,
    )
    stored = ops.where(
        recompute == Recompute.FULL, full_recompute_bytes(s, b, h, tp, sp), ops.where(op, op_store, per_layer)
    )
    return stored, per_layer


def kept_activation_bytes(
    s, b, h, heads, q_dim, kv_dim, ffn, swiglu, tp, sp, scores, experts_per_token=1, s_kv=None, dropout=True
):
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


def full_recompute_bytes(s, b, h, tp, sp):
    """Bytes one layer keeps under full recompute: only its input ``2 s b h``, ``/ t`` with
    sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4)."""
    sbh = s * b * h
    return ops.where(sp, 2.0 * sbh / tp, 2.0 * sbh)


def op_recompute_bytes(
    s,
    b,
    h,
    heads,
    q_dim,
    kv_dim,
    ffn,
    swiglu,
    tp,
    sp,
    materialized,
    experts_per_token=1,
    s_kv=None,
    compiled=False,
    saves_attention=True,
):
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
    * Under torch.compile (``compiled``): torchtitan checkpoint-wraps each block,
      then compiles it whole (``apply_ac`` before ``apply_compile``, ``torch.compile(block,
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
      saved-tensor hooks on a torchtitan-shaped Llama block under Inductor (``benchmarks/saved_tensors_check.py``,
      torch 2.14.1 on CPU): eager op SAC keeps exactly this count, compiled the count less
      w2's output. Without recompute and with full recompute the compiled block keeps what
      this count already holds (the 16-bit tensors and two fp32 norm scalars per token; full:
      the block input), so ``compiled`` changes nothing there; eager PyTorch keeps more (the
      fp32 copies of its composite RMSNorm and rotary embedding), not counted.
    * With an attention kernel the save list leaves out (``saves_attention`` false): SDPA's
      output and log-sum-exp (``2 q + 4 heads`` per token) are not kept and attention runs
      again in the backward (one more attention forward per layer,
      :func:`~.recompute.op_recompute_layer_s`). torchtitan's ``ScaledDotProductAttention`` puts cuDNN
      attention first on compute capability 10.0 (torchtitan/models/attention.py @ accc7027,
      since 3b85aa31, 2025-05-14), and its ``_save_list`` (distributed/activation_checkpoint.py
      @ accc7027; models/llama3/infra/parallelize.py @ 6fc499f6) names
      ``_scaled_dot_product_flash_attention`` and ``_efficient_attention`` but not
      ``_scaled_dot_product_cudnn_attention`` (added in b39377f9, 2025-12-01): Llama 3 8B on
      B200 keeps ``63 616 - 8 320 = 55 296`` bytes per token per layer eager, ``47 104``
      compiled (the partitioner's ``must_recompute`` counts the policy's ``PREFER_RECOMPUTE``
      with ``MUST_RECOMPUTE``, torch/_functorch/partitioners.py; not measured here).
    """
    s_kv = s if s_kv is None else s_kv
    sbh = s * b * h
    saved_mm = s * b * (2.0 * q_dim + 2.0 * kv_dim + 2.0 * ffn * experts_per_token)  # wq, wv, w1
    sdpa = s * b * (2.0 * q_dim + 4.0 * heads) + ops.where(materialized, 2.0 * heads * s * s_kv * b, 0.0)
    sdpa = ops.where(ops.as_bool(saves_attention), sdpa, 0.0)
    w2 = ops.where(
        ops.as_bool(swiglu) & ops.logical_not(ops.as_bool(compiled)), 2.0 * sbh * experts_per_token, 0.0
    )
    rs = ops.where(sp & (tp > 1), 4.0 * sbh / tp, 0.0)
    return full_recompute_bytes(s, b, h, tp, sp) + (saved_mm + sdpa) / tp + w2 + rs


def op_recompute_flops_per_token(
    h, q_dim, kv_dim, ffn, swiglu, experts_per_token=1, experts=1, *, shared_experts=0, o_dim=None, **_
):
    """Forward FLOPs per token of one layer that op recompute (torchtitan ``SelectiveAC``,
    torchtitan/distributed/activation_checkpoint.py @ b5bcd76c) runs again in backward: the
    matrix multiplies it does not save, every second in forward order (wk ``2 h kv``, wo
    ``2 o h``, and w3 with SwiGLU or c_proj without it: one MLP matrix ``2 h ffn`` per active
    expert), and the MoE router ``2 h E``, whose shape torchtitan forces to recompute
    (``force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]``). Attention is saved, not
    recomputed; elementwise kernels are recomputed at no FLOPs (their HBM traffic is in
    ``memory_ops``). Low-rank (MLA) projections are counted as the standard K projection."""
    o = q_dim if o_dim is None else o_dim
    router = ops.where(experts > 1, 2.0 * h * experts, 0.0)
    return 2.0 * h * kv_dim + 2.0 * o * h + 2.0 * h * ffn * (experts_per_token + shared_experts) + router


def offload_exposed_s(k, layers, transfer_s, layer_s):
    """Seconds one direction of activation offload (forward: to host; backward: back) adds to a
    micro-batch, Transformer Engine's default schedule (``DefaultOffloadSynchronizer``,
    transformer_engine/pytorch/cpu_offload.py @ d0067d0d): layers ``0 .. k-1`` of the ``L`` are
    offloaded one after another on one stream, layer i's copy queued when layer i+1 starts and
    finished before layer ``L - k + i`` starts (the reload mirrors it in backward), so that at
    most ``L - k`` layers' activations are on the GPU. With ``tau`` the copy of one layer and
    ``c`` one layer's compute, the n-th copy is done at ``c + n tau`` and due at
    ``(L - k - 1 + n) c``; the stall is the largest shortfall, at n = 1 or n = k:
    ``max(0, tau - (L - k - 1) c, k tau - (L - 2) c)``. ``k`` is clipped to ``L - 1`` (TE
    refuses to offload the last layer); 0 when ``k`` is 0."""
    k = ops.minimum(ops.maximum(k, 0.0), ops.maximum(layers - 1.0, 0.0))
    one = transfer_s - (layers - k - 1.0) * layer_s
    many = k * transfer_s - (layers - 2.0) * layer_s
    return ops.where(k > 0, ops.maximum(0.0, ops.maximum(one, many)), 0.0)


def gemm_time(m, n, k, peak_flops, efficiency, hbm_bytes_s, sm_count, bytes_per_el=2.0, count=1.0, batch=1.0):
    """Time of ``count`` kernels, each ``batch`` GEMMs ``[m,k] @ [k,n]`` (seconds).

    ``count`` kernels run one after another (each pays its own waves and overhead); the
    ``batch`` GEMMs of one batched kernel (cuBLAS ``gemmStridedBatched``, what ``torch.bmm`` and
    ``torch.baddbmm`` launch: one grid whose z dimension is the batch) share its waves and its
    one kernel overhead: their ``batch x tiles`` tiles fill the SMs together.

    A roofline with tile and wave quantisation (NVIDIA, "Matrix Multiplication Background
    User's Guide", Sec. 3.1-3.2): the output is cut into ``tm x tn`` tiles and every tile does a
    whole tile's work, so ``m`` and ``n`` are in effect padded up to tile multiples (tile
    quantisation: ``n = 50257`` on 128-wide tiles computes ``393 x 128 = 50304`` columns), and
    ``k`` up to the K block the main loop steps through (128 bytes of each operand: 64 16-bit or
    128 8-bit elements; CUTLASS's ``DefaultGemmConfiguration`` for Sm80/Sm89 tensor ops,
    ``include/cutlass/gemm/device/default_gemm_configuration.h``: threadblock ``128x256x64``);
    the tiles then run in waves over the SMs, a partly filled last wave wasting the rest (wave
    quantisation). The better of two tile shapes (128x256 and 128x128, the CUTLASS/cuBLAS
    classes) is taken; when there are fewer tiles than SMs the K loop is split (split-K, at
    least 512 deep per split) as cuBLAS does. Compute runs at ``efficiency`` of the peak (the
    large-GEMM ceiling, MAMF) and overlaps with reading the inputs; the output write and a fixed
    kernel overhead are added. Shapes that are multiples of 256 (``m``, ``n``) and of the K block
    lose nothing to padding. Misaligned shapes (not a multiple of 8 16-bit elements) also take
    slower kernels (the guide, Sec. 2.2), a penalty left out: no published ratio for it.

    Checked against bf16 GEMMs measured on an H200 over 342 transformer-layer shapes
    (``benchmarks/gemm_model_check.py``): 8 % mean absolute error.
    """
    m = ops.as_float(m)
    n = ops.as_float(n)
    k = ops.as_float(k)
    flops = 2.0 * m * n * k
    sms = ops.maximum(ops.as_float(sm_count), 0.0)
    k_block = 128.0 / bytes_per_el
    k_pad = ops.ceil(k / k_block) * k_block / ops.maximum(k, 1.0)
    best = None
    for tm, tn in ((128.0, 256.0), (128.0, 128.0)):
        per_gemm = ops.ceil(m / tm) * ops.ceil(n / tn)
        tiles = per_gemm * batch
        split = ops.maximum(ops.minimum(ops.floor(sms / tiles), ops.floor(k / 512.0)), 1.0)
        work = tiles * split
        waves = ops.ceil(work / ops.maximum(sms, 1.0))
        q = ops.where(sms > 0, work / ops.maximum(waves * sms, 1.0), 1.0)
        useful = m * n / (per_gemm * tm * tn)  # tile quantisation: the share of tile work kept
        q = q * useful
        best = q if best is None else ops.maximum(best, q)
    t_flop = batch * flops * k_pad / (peak_flops * efficiency * best)
    t_in = batch * bytes_per_el * (m * k + k * n) / hbm_bytes_s
    t_out = batch * 2.0 * m * n / hbm_bytes_s
    return count * (ops.maximum(t_flop, t_in) + t_out + KERNEL_OVERHEAD_S)


def ring_collective_time(nbytes, n, bw, lat, steps_factor=1.0):
    """Ring all-gather / reduce-scatter of ``nbytes`` (total) over ``n`` ranks.

    Thakur, Rabenseifner and Gropp 2005: ``(n-1) alpha + (n-1)/n * S beta``
    (all-reduce = 2x). ``bw`` is the achieved per-rank bandwidth in bytes/s,
    ``lat`` the per-step latency in seconds.
    """
    n = ops.as_float(n)
    frac = ops.where(n > 1, (n - 1.0) / ops.maximum(n, 1.0), 0.0)
    return steps_factor * (ops.maximum(n - 1.0, 0.0) * lat + frac * nbytes / bw)
