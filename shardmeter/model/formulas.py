"""Closed-form formulas of the model, elementwise on numpy arrays or scalars.

Each function is a formula from the literature, named in its docstring. All
take and return numpy-broadcastable values, so one call scores a whole batch
of candidate plans. Units: bytes, FLOPs, seconds, bytes/s.
"""

from __future__ import annotations

import math

from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "attention_params",
    "layer_flops_per_token",
    "layers_forward_flops",
    "model_flops_per_token",
    "flops_per_token_of",
    "params_per_layer",
    "model_params",
    "active_params",
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


def attention_params(
    h: Array,
    q_dim: Array,
    kv_dim: Array,
    v_dim: Array | None = None,
    o_dim: Array | None = None,
    q_rank: Array = 0,
    kv_rank: Array = 0,
) -> Array:
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
    if type(h) is float and type(q_dim) is float and type(q_rank) in _PLAIN and type(kv_rank) in _PLAIN:
        # one plan: the low-rank projections only where the model has them (plain ifs)
        q_proj = q_rank * (h + q_dim) if q_rank > 0 else h * q_dim
        kv_proj = kv_rank * (h + kv_dim + v_dim) if kv_rank > 0 else h * (kv_dim + v_dim)
        return q_proj + kv_proj + o_dim * h
    q_proj = ops.where(q_rank > 0, q_rank * (h + q_dim), h * q_dim)
    kv_proj = ops.where(kv_rank > 0, kv_rank * (h + kv_dim + v_dim), h * (kv_dim + v_dim))
    return q_proj + kv_proj + o_dim * h


def layer_flops_per_token(
    h: Array,
    q_dim: Array,
    kv_dim: Array,
    ffn: Array,
    swiglu: Array,
    seq: Array,
    experts_per_token: Array = 1,
    experts: Array = 1,
    *,
    shared_experts: Array = 0,
    **attn: Array,
) -> tuple[Array, Array]:
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
    one = type(swiglu) is bool and type(h) is float and type(experts) in _PLAIN  # one plan: plain ifs
    mlp_mats = (3.0 if swiglu else 2.0) if one else ops.where(swiglu, 3.0, 2.0)
    o_dim = attn.get("o_dim")
    o_dim = q_dim if o_dim is None else o_dim
    proj = 2.0 * attention_params(h, q_dim, kv_dim, **attn)
    mlp = 2.0 * h * ffn * mlp_mats * (experts_per_token + shared_experts)
    if one:
        router = 2.0 * h * experts if experts > 1 else 0.0
    else:
        router = ops.where(experts > 1, 2.0 * h * experts, 0.0)
    att = 2.0 * seq * (q_dim + o_dim)
    return proj + mlp + router, att


def layers_forward_flops(
    layers: Array,
    h: Array,
    q_dim: Array,
    kv_dim: Array,
    ffn: Array,
    swiglu: Array,
    seq: Array,
    experts_per_token: Array = 1,
    experts: Array = 1,
    *,
    moe_ffn: Array | None = None,
    shared_experts: Array = 0,
    dense_layers: Array = 0,
    **attn: Array,
) -> tuple[Array, Array]:
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
    if type(experts) is float and _same_dense_layer(
        ffn, moe_ffn, experts, experts_per_token + shared_experts
    ):
        # one plan of a dense model: the dense layer's call has the MoE layer's arguments' values
        # (experts_per_token + shared_experts of 1, no router), so its FLOPs are those, not
        # computed again; n_dense is where(experts > 1, ...)'s 0.0
        return layers * d_moe + 0.0 * (d_moe - d_moe), layers * att
    d_dense, _ = layer_flops_per_token(h, q_dim, kv_dim, ffn, swiglu, seq, **attn)
    n_dense = ops.where(experts > 1, dense_layers, 0.0)
    return layers * d_moe + n_dense * (d_dense - d_moe), layers * att


def _same_dense_layer(ffn: Array, moe_ffn: Array, experts: Array, per_token: Array) -> bool:
    """Whether one plan's dense layer (:func:`layer_flops_per_token` / :func:`params_per_layer`
    with their defaults: one expert, no shared ones) is its MoE layer to the bit: plain numbers,
    no router (``experts`` not above 1), the same nonzero MLP width and ``per_token`` (the
    experts a token visits, or the layer's experts) 1."""
    return (
        type(experts) is float
        and type(ffn) is float
        and type(moe_ffn) is float
        and type(per_token) is float
        and not experts > 1
        and per_token == 1.0
        and moe_ffn == ffn
        and ffn != 0.0
    )


def model_flops_per_token(
    layers: Array,
    h: Array,
    q_dim: Array,
    kv_dim: Array,
    ffn: Array,
    swiglu: Array,
    vocab: Array,
    seq: Array,
    experts_per_token: Array = 1,
    experts: Array = 1,
    **shape: Array,
) -> Array:
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
    return flops_per_token_of(dense, att, h, vocab)


def flops_per_token_of(dense: Array, att: Array, h: Array, vocab: Array) -> Array:
    """:func:`model_flops_per_token` of the layers' forward ``(dense, attention)`` FLOPs per
    token (:func:`layers_forward_flops`): ``3 (dense + attention + 2 h V)``."""
    return 3.0 * (dense + att + 2.0 * h * vocab)


def params_per_layer(
    h: Array,
    q_dim: Array,
    kv_dim: Array,
    ffn: Array,
    swiglu: Array,
    experts: Array = 1,
    *,
    shared_experts: Array = 0,
    **attn: Array,
) -> Array:
    """Parameters of one layer: attention (:func:`attention_params`; ``h(q + 2kv) + q h`` for
    standard attention), MLP ``(2 or 3) h ffn`` per expert and per shared expert, two
    LayerNorms ``4h`` (scale and bias), router ``h E`` when MoE."""
    if type(swiglu) is bool and type(h) is float and type(experts) in _PLAIN:  # one plan: plain ifs
        att = attention_params(h, q_dim, kv_dim, **attn)
        mlp = (3.0 if swiglu else 2.0) * h * ffn * (experts + shared_experts)
        return att + mlp + (h * experts if experts > 1 else 0.0) + 4.0 * h
    mlp_mats = ops.where(swiglu, 3.0, 2.0)
    att = attention_params(h, q_dim, kv_dim, **attn)
    mlp = mlp_mats * h * ffn * (experts + shared_experts)
    router = ops.where(experts > 1, h * experts, 0.0)
    return att + mlp + router + 4.0 * h


def model_params(
    layers: Array,
    h: Array,
    q_dim: Array,
    kv_dim: Array,
    ffn: Array,
    swiglu: Array,
    vocab: Array,
    tied: Array,
    experts: Array = 1,
    *,
    moe_ffn: Array | None = None,
    shared_experts: Array = 0,
    dense_layers: Array = 0,
    **attn: Array,
) -> Array:
    """All parameters: layers + input embedding ``V h`` + output head ``V h`` unless tied (+ the
    final norm ``2h``). With ``experts > 1`` the first ``dense_layers`` layers are dense (MLP
    ``ffn`` wide) and the others MoE (``experts`` + ``shared_experts`` experts ``moe_ffn`` wide,
    default ``ffn``)."""
    moe_ffn = ffn if moe_ffn is None else moe_ffn
    emb = vocab * h * ((1.0 if tied else 2.0) if type(tied) is bool else ops.where(tied, 1.0, 2.0))
    p_moe = params_per_layer(
        h, q_dim, kv_dim, moe_ffn, swiglu, experts, shared_experts=shared_experts, **attn
    )
    if type(experts) is float and _same_dense_layer(ffn, moe_ffn, experts, experts + shared_experts):
        # one plan of a dense model: its dense layer is its MoE layer (see layers_forward_flops)
        return layers * p_moe + 0.0 * (p_moe - p_moe) + emb + 2.0 * h
    p_dense = params_per_layer(h, q_dim, kv_dim, ffn, swiglu, **attn)
    n_dense = ops.where(experts > 1, dense_layers, 0.0)
    return layers * p_moe + n_dense * (p_dense - p_moe) + emb + 2.0 * h


def active_params(
    layers: Array,
    h: Array,
    q_dim: Array,
    kv_dim: Array,
    ffn: Array,
    swiglu: Array,
    vocab: Array,
    tied: Array,
    experts: Array = 1,
    experts_per_token: Array = 1,
    **shape: Array,
) -> Array:
    """Parameters one token passes through: :func:`model_params` less the ``experts -
    experts_per_token`` routed experts each MoE layer does not use (the "activated parameters"
    of Mixtral and DeepSeek-V3; embedding and output head included)."""
    moe_ffn = shape.get("moe_ffn")
    moe_ffn = ffn if moe_ffn is None else moe_ffn
    n_moe = ops.where(experts > 1, layers - shape.get("dense_layers", 0), 0.0)
    unused = ops.where(swiglu, 3.0, 2.0) * h * moe_ffn * (experts - experts_per_token)
    return model_params(layers, h, q_dim, kv_dim, ffn, swiglu, vocab, tied, experts, **shape) - n_moe * unused


def op_recompute_flops_per_token(
    h: Array,
    q_dim: Array,
    kv_dim: Array,
    ffn: Array,
    swiglu: Array,
    experts_per_token: Array = 1,
    experts: Array = 1,
    *,
    shared_experts: Array = 0,
    o_dim: Array | None = None,
    **_: Array,
) -> Array:
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


def offload_exposed_s(k: Array, layers: Array, transfer_s: Array, layer_s: Array) -> Array:
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


def gemm_time(
    m: Array,
    n: Array,
    k: Array,
    peak_flops: Array,
    efficiency: Array,
    hbm_bytes_s: Array,
    sm_count: Array,
    bytes_per_el: Array = 2.0,
    count: Array = 1.0,
    batch: Array = 1.0,
) -> Array:
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

    One plan's plain numbers take :func:`_gemm_time_floats`, the same operations in the same
    order without a call per operation (the scalar path, :func:`~.evaluate.evaluate`).
    """
    if not (type(m) is float and type(n) is float and type(k) is float and type(sm_count) is float):
        m, n, k, sm_count = ops.as_float(m), ops.as_float(n), ops.as_float(k), ops.as_float(sm_count)
    if (
        type(m) is float
        and type(n) is float
        and type(k) is float
        and type(sm_count) is float
        and type(peak_flops) in _PLAIN
        and type(efficiency) in _PLAIN
        and type(hbm_bytes_s) in _PLAIN
        and type(bytes_per_el) in _PLAIN
        and type(count) in _PLAIN
        and type(batch) in _PLAIN
    ):
        return _gemm_time_floats(
            m, n, k, peak_flops, efficiency, hbm_bytes_s, sm_count, bytes_per_el, count, batch
        )
    return _gemm_time_ops(m, n, k, peak_flops, efficiency, hbm_bytes_s, sm_count, bytes_per_el, count, batch)


#: The plain Python numbers :func:`_gemm_time_floats` takes (not bool, not numpy's).
_PLAIN = (float, int)


def _gemm_time_ops(
    m: Array,
    n: Array,
    k: Array,
    peak_flops: Array,
    efficiency: Array,
    hbm_bytes_s: Array,
    sm_count: Array,
    bytes_per_el: Array,
    count: Array,
    batch: Array,
) -> Array:
    """:func:`gemm_time` through :mod:`~shardmeter.numeric.ops` (arrays, or any numbers)."""
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


def _gemm_time_floats(
    m: float,
    n: float,
    k: float,
    peak_flops: float,
    efficiency: float,
    hbm_bytes_s: float,
    sm_count: float,
    bytes_per_el: float,
    count: float,
    batch: float,
) -> float:
    """:func:`_gemm_time_ops` of plain numbers, operation for operation, with :mod:`.ops`'
    scalar semantics written out (``ceil``/``floor`` of a non-finite number is itself;
    ``maximum``/``minimum`` propagate nan); a zero divisor raises as it does there."""
    ceil, floor, nan = math.ceil, math.floor, math.nan
    flops = 2.0 * m * n * k
    sms = sm_count if sm_count >= 0.0 else (0.0 if sm_count < 0.0 else nan)
    k_block = 128.0 / bytes_per_el
    x = k / k_block
    k1 = k if k >= 1.0 else (1.0 if k < 1.0 else nan)
    k_pad = (float(ceil(x)) if x - x == 0.0 else x) * k_block / k1
    sms1 = sms if sms >= 1.0 else (1.0 if sms < 1.0 else nan)
    x = k / 512.0
    k_splits = float(floor(x)) if x - x == 0.0 else x
    # the two tile shapes (128 x 256, then 128 x 128) one after the other: the operations of
    # _gemm_time_ops' loop in its order, the rows' tile count (m / 128, both shapes') taken once
    a = m / 128.0
    tiles_m = float(ceil(a)) if a - a == 0.0 else a
    b = n / 256.0
    per_gemm = tiles_m * (float(ceil(b)) if b - b == 0.0 else b)
    tiles = per_gemm * batch
    x = sms / tiles
    x = float(floor(x)) if x - x == 0.0 else x
    x = x if x <= k_splits else (k_splits if k_splits < x else nan)
    split = x if x >= 1.0 else (1.0 if x < 1.0 else nan)
    work = tiles * split
    x = work / sms1
    waves = float(ceil(x)) if x - x == 0.0 else x
    x = waves * sms
    x = x if x >= 1.0 else (1.0 if x < 1.0 else nan)
    best = (work / x if sms > 0 else 1.0) * (m * n / (per_gemm * 128.0 * 256.0))
    b = n / 128.0
    per_gemm = tiles_m * (float(ceil(b)) if b - b == 0.0 else b)
    tiles = per_gemm * batch
    x = sms / tiles
    x = float(floor(x)) if x - x == 0.0 else x
    x = x if x <= k_splits else (k_splits if k_splits < x else nan)
    split = x if x >= 1.0 else (1.0 if x < 1.0 else nan)
    work = tiles * split
    x = work / sms1
    waves = float(ceil(x)) if x - x == 0.0 else x
    x = waves * sms
    x = x if x >= 1.0 else (1.0 if x < 1.0 else nan)
    q = (work / x if sms > 0 else 1.0) * (m * n / (per_gemm * 128.0 * 128.0))
    best = best if best >= q else (q if q > best else nan)
    t_flop = batch * flops * k_pad / (peak_flops * efficiency * best)
    t_in = batch * bytes_per_el * (m * k + k * n) / hbm_bytes_s
    t_out = batch * 2.0 * m * n / hbm_bytes_s
    return count * (
        (t_flop if t_flop >= t_in else (t_in if t_in > t_flop else nan)) + t_out + KERNEL_OVERHEAD_S
    )


def ring_collective_time(nbytes: Array, n: Array, bw: Array, lat: Array, steps_factor: Array = 1.0) -> Array:
    """Ring all-gather / reduce-scatter of ``nbytes`` (total) over ``n`` ranks.

    Thakur, Rabenseifner and Gropp 2005: ``(n-1) alpha + (n-1)/n * S beta``
    (all-reduce = 2x). ``bw`` is the achieved per-rank bandwidth in bytes/s,
    ``lat`` the per-step latency in seconds.
    """
    n = ops.as_float(n)
    if type(n) is float and set(map(type, (nbytes, bw, lat, steps_factor))) <= ops.ONLY_FLOAT:
        # one plan: ops.where/maximum written out (every quotient taken, as there)
        r = (n - 1.0) / (n if n >= 1.0 else (1.0 if n < 1.0 else math.nan))
        y = n - 1.0
        y = y if y >= 0.0 else (0.0 if y < 0.0 else math.nan)
        return steps_factor * (y * lat + (r if n > 1 else 0.0) * nbytes / bw)
    frac = ops.where(n > 1, (n - 1.0) / ops.maximum(n, 1.0), 0.0)
    return steps_factor * (ops.maximum(n - 1.0, 0.0) * lat + frac * nbytes / bw)
