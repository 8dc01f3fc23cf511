"""One optimizer step of a batch of plans, vectorised over plans and islands.

:func:`evaluate` takes a mapping of input arrays (see :data:`INPUTS`), each
broadcastable to shape ``(N, I)`` (N candidate plans, I islands), and returns
output arrays: step time and its breakdown, memory, throughput, feasibility
(a bit mask of :data:`REASONS`). No Python loop runs per plan.

The composition (per island, per pipeline stage; Narayanan et al. 2021):

``step = m (t_f + t_b + exposed TP/CP/EP/FSDP comm) + bubble (t_f + t_b + ...)
+ pipeline p2p + exposed data-parallel comm + optimizer``, then islands are
combined by the sync strategy (global all-reduce every step, or DiLoCo's
outer all-reduce every ``inner_steps`` steps).
"""

from __future__ import annotations

import numpy as np

from .islands import island_sync
from .formulas import (
    KERNEL_OVERHEAD_S,
    activation_bytes_per_layer,
    gemm_time,
    group_span,
    hierarchical_collective_time,
    layer_flops_per_token,
    model_flops_per_token,
    model_params,
    params_per_layer,
    pipeline_bubble_fraction,
    ring_collective_time,
)

__all__ = ["evaluate", "INPUTS", "REASONS", "BREAKDOWN_TERMS", "reason_messages"]

#: Input arrays of :func:`evaluate` (all broadcast to (N, I)).
INPUTS = (
    # model
    "L", "h", "heads", "kv_heads", "q_dim", "kv_dim", "ffn", "swiglu", "V", "s", "tied", "E", "k_top",
    "causal", "dropout", "capacity",
    # training
    "gbs", "mbs", "recompute", "materialized", "w_bytes", "peak", "peak16", "fp8",
    # hardware
    "mem", "hbm", "gemm_eff", "att_eff", "hbm_eff", "sms",
    # topology (achieved bandwidth in bytes/s per GPU, latency in s)
    "gpn", "nodes", "bw0", "lat0", "bw1", "lat1",
    # parallelism
    "tp", "pp", "dp", "cp", "ep", "sp", "v", "sched_all", "over_v", "bubble_frac",
    "sh_opt", "sh_grad", "sh_param", "sh_node", "gather_layer", "flat", "tp_ovl", "dp_ovl",
    # multi-island
    "wan_bw", "wan_lat", "local_steps", "H", "bits", "F", "ovl_steps", "outer_bytes",
)

#: Infeasibility reasons: bit -> (scenario key, message template).
REASONS = {
    1: ("parallelism.tp", "tp ({tp}) must divide model.heads ({heads})"),
    2: ("parallelism.cp", "cp ({cp}) must divide model.seq_len ({s})"),
    4: ("parallelism.ep", "ep ({ep}) must divide model.experts ({E}) and dp x cp ({dpcp})"),
    8: ("parallelism", "tp x pp x cp x dp = {used} exceeds the island's {gpus} GPUs"),
    16: ("training.global_batch", "the island's share of global_batch ({bi}) is not a multiple of "
                                  "micro_batch x dp ({mbs_dp})"),
    32: ("island[{j}].gpu.memory_gb", "the plan needs {mem_gb:.1f} GB per GPU, more than the {cap_gb:.1f} GB the GPU has "
                   "(shard more: parallelism.tp/pp/sharding, training.recompute, or a smaller "
                   "training.micro_batch)"),
    64: ("training.precision", "the GPU has no tensor-core rate for this precision"),
    128: ("parallelism.virtual_stages", "the interleaved schedule needs the micro-batches ({m}) to be a "
                                        "multiple of pp ({pp})"),
    256: ("parallelism.pp", "pp x virtual_stages ({pv}) exceeds model.layers ({L})"),
}

#: Names of the breakdown terms, in report order.
BREAKDOWN_TERMS = ("compute", "memory_ops", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "pp_bubble", "dp_comm",
                   "optimizer", "island_sync", "idle")

#: Memory the framework holds besides tensors (CUDA context, NCCL buffers,
#: cuBLAS workspaces), bytes; and the allocator's fragmentation allowance.
RESERVED_BYTES = 1.0e9
FRAGMENTATION = 0.05

#: Bytes moved per parameter by the Adam update (read fp32 grad 4, master
#: weight, m and v 3 x (4 + 4), write 16-bit weight 2): a memory-bound kernel.
ADAM_BYTES_PER_PARAM = 30.0

#: FlashAttention's backward executes 2.5x the forward FLOPs (it recomputes the
#: scores: 5 matrix products against 2; Dao 2023, FlashAttention-2, Sec. 3).
FLASH_BWD_FACTOR = 2.5

#: Fused attention's ramp, in keys per query row per kernel call: a fixed cost per
#: query tile (loading Q, the online-softmax rescale, writing O and the log-sum-exp;
#: in backward the dO.O pre-pass and the dQ accumulation) equal to this many keys
#: of work. Attention efficiency at ``kv`` keys is ``attention_efficiency / (1 +
#: ATTENTION_RAMP_KEYS / kv)``, so short sequences run less efficiently than long ones
#: (FlashAttention-2, Dao 2023, Fig. 4-7: throughput rises with sequence length).
#: Measured, not fitted to training runs: torch SDPA forward+backward on one H200,
#: head_dim 64 and 128, causal and not, 1k-32k tokens
#: (benchmarks/results/h200-2026-11-30/attention.csv); a least-squares fit of
#: ``E / (1 + k / kv)`` to those 24 points gives k = 730 (752 at head_dim 128,
#: 704 at 64), mean error 3.5 %.
ATTENTION_RAMP_KEYS = 730.0

#: Gradient bucket (Megatron-LM DDP default 40M elements; PyTorch DDP 25 MB)
#: whose reduction cannot hide under backward: the last one.
LAST_BUCKET_BYTES = 25e6


def _f(x):
    return np.asarray(x, dtype=float)


def evaluate(inp) -> dict[str, np.ndarray]:
    """Score every plan in the batch. See the module docstring.

    Infeasible rows may divide by zero on the way; their outputs are masked by
    ``feasible``/``reasons``, so those floating-point warnings are silenced here
    (and only here, not process-wide).
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _evaluate(inp)


def _evaluate(inp) -> dict[str, np.ndarray]:
    g = {k: np.asarray(inp[k]) for k in INPUTS}
    L, h, heads, kvh = _f(g["L"]), _f(g["h"]), _f(g["heads"]), _f(g["kv_heads"])
    q_dim, kv_dim, ffn, V, s = _f(g["q_dim"]), _f(g["kv_dim"]), _f(g["ffn"]), _f(g["V"]), _f(g["s"])
    swiglu, tied, causal = g["swiglu"].astype(bool), g["tied"].astype(bool), g["causal"].astype(bool)
    E, ktop = _f(g["E"]), _f(g["k_top"])
    gbs, mbs, rec = _f(g["gbs"]), _f(g["mbs"]), _f(g["recompute"])
    mat = g["materialized"].astype(bool)
    wb, peak, peak16 = _f(g["w_bytes"]), _f(g["peak"]), _f(g["peak16"])
    mem_cap, hbm = _f(g["mem"]), _f(g["hbm"]) * _f(g["hbm_eff"])
    eff, sms, att_eff = _f(g["gemm_eff"]), _f(g["sms"]), _f(g["att_eff"])
    gpn, nodes = _f(g["gpn"]), _f(g["nodes"])
    bw0, lat0, bw1, lat1 = _f(g["bw0"]), _f(g["lat0"]), _f(g["bw1"]), _f(g["lat1"])
    tp, pp, dp, cp, ep = _f(g["tp"]), _f(g["pp"]), _f(g["dp"]), _f(g["cp"]), _f(g["ep"])
    sp = g["sp"].astype(bool)
    v = np.maximum(_f(g["v"]), 1.0)
    sched_all, over_v = g["sched_all"].astype(bool), g["over_v"].astype(bool)
    sh_opt, sh_grad, sh_param = g["sh_opt"].astype(bool), g["sh_grad"].astype(bool), g["sh_param"].astype(bool)
    sh_node, gather_layer = g["sh_node"].astype(bool), g["gather_layer"].astype(bool)
    flat = g["flat"].astype(bool)
    tp_ovl, dp_ovl = g["tp_ovl"].astype(bool), g["dp_ovl"].astype(bool)
    moe = E > 1
    v = np.where(pp > 1, v, 1.0)  # one stage: interleaving is a no-op (as 1F1B), not an error

    # ---- batch split and micro-batches ---------------------------------------------------------
    n_isl = np.broadcast_shapes(*(np.shape(x) for x in g.values()))[-1] if g["dp"].ndim else 1
    dp_total = np.sum(np.broadcast_to(dp, np.broadcast_shapes(dp.shape, gbs.shape, (1, n_isl))), axis=-1,
                      keepdims=True)
    b_isl = gbs * dp / dp_total  # sequences per step on this island (proportional to its replicas)
    m = b_isl / (dp * mbs)  # micro-batches per pipeline per step
    m_int = np.maximum(np.floor(m + 1e-9), 1.0)

    # ---- feasibility ----------------------------------------------------------------------------
    gpus = nodes * gpn
    reasons = np.zeros(np.broadcast_shapes(*(np.shape(x) for x in (tp, pp, dp, gbs, heads, nodes))), dtype=np.int64)
    reasons |= np.where(np.mod(heads, tp) != 0, 1, 0)
    reasons |= np.where(np.mod(s, cp) != 0, 2, 0)
    reasons |= np.where(moe & ((np.mod(E, ep) != 0) | (np.mod(dp * cp, ep) != 0)) | (~moe & (ep > 1)), 4, 0)
    reasons |= np.where(tp * pp * cp * dp > gpus, 8, 0)
    reasons |= np.where(np.abs(m - np.round(m)) > 1e-9, 16, 0) | np.where(m < 1 - 1e-9, 16, 0)
    reasons |= np.where(peak <= 0, 64, 0)
    reasons |= np.where(over_v & (v > 1) & (np.mod(m_int, pp) != 0), 128, 0)
    reasons |= np.where(pp * v > L, 256, 0)
    peak = np.where(peak > 0, peak, 1.0)
    peak16 = np.where(peak16 > 0, peak16, peak)

    # ---- shapes on one GPU ----------------------------------------------------------------------
    s_loc = s / cp  # sequence held by one context-parallel rank
    T = mbs * s_loc  # tokens of one micro-batch on one GPU
    Ls = np.ceil(L / (pp * v)) * v  # layers of the largest stage (unequal splits allowed)
    q_t, kv_t = q_dim / tp, np.maximum(kv_dim / tp, kv_dim / np.maximum(kvh, 1.0))  # KV heads replicate past kv_heads
    ffn_t = ffn / tp
    mlp_up = np.where(swiglu, 2.0, 1.0) * ffn_t
    act_b = 2.0  # 16-bit activations

    # ---- compute time per layer per micro-batch (forward) ---------------------------------------
    # Dense GEMMs (fp8 where the precision says so; attention stays 16-bit).
    qkv_n = q_t + 2.0 * kv_t
    el = np.where(_f(g["fp8"]) > 0, 1.0, 2.0)  # bytes per GEMM input element
    t_qkv = gemm_time(T, qkv_n, h, peak, eff, hbm, sms, el)
    t_proj = gemm_time(T, h, q_t, peak, eff, hbm, sms, el)
    e_loc = np.where(moe, E / ep, 1.0)  # experts on this GPU
    # Tokens per local expert: top-k routing spreads T k tokens of each EP rank over E experts; a
    # capacity factor c pads every expert's buffer to c x the even share (Fedus et al. 2022, Switch
    # Transformers, Sec. 2.2; c = 1 is dropless-balanced).
    cap = np.where(moe, np.maximum(_f(g["capacity"]), 1e-9), 1.0)
    m_exp = np.where(moe, cap * T * ktop * ep / E, T)
    t_mlp = gemm_time(m_exp, mlp_up, h, peak, eff, hbm, sms, el, count=e_loc) + gemm_time(
        m_exp, h, ffn_t, peak, eff, hbm, sms, el, count=e_loc)
    t_router = np.where(moe, gemm_time(T, E, h, peak16, eff, hbm, sms), 0.0)
    t_dense_f = t_qkv + t_proj + t_mlp + t_router
    # Attention core: flash (causal blocks skipped) or materialised scores.
    heads_t = heads / tp
    att_flops = 4.0 * T * s * q_t  # full count; keys span the whole sequence (ring attention for cp > 1)
    causal_frac = np.where(causal, 0.5, 1.0)
    # Keys one query row meets per kernel call: the whole local sequence, half of it when causal
    # (ring attention calls the kernel once per K/V chunk of s / cp).
    kv_call = s_loc * causal_frac
    t_flash_f = att_flops * causal_frac / (peak16 * att_eff) * (1.0 + ATTENTION_RAMP_KEYS / kv_call) + \
        2 * KERNEL_OVERHEAD_S
    score_el = heads_t * T * s  # score matrix elements of this GPU
    t_mat_f = gemm_time(s_loc, s, q_dim / heads, peak16, eff, hbm, sms, count=2.0 * heads_t * mbs) + \
        9.0 * score_el / hbm
    t_att_f = np.where(mat, t_mat_f, t_flash_f)
    t_att_b = np.where(mat, 2.0 * t_mat_f, FLASH_BWD_FACTOR * t_flash_f)
    # Memory-bound elementwise ops (LayerNorms, bias-dropout-add, activation), bytes per token:
    # 2 LN (4h each), 2 dropout+residual (7h each), activation (4 ffn GELU / 6 ffn SwiGLU).
    repl_bytes = 22.0 * h * np.where(sp, 1.0 / tp, 1.0)
    act_bytes = np.where(swiglu, 6.0, 4.0) * ffn_t * np.where(moe, ktop, 1.0)
    t_elem_f = T * (repl_bytes + act_bytes) / hbm + 6 * KERNEL_OVERHEAD_S
    # FP8 GEMMs need their 16-bit inputs cast (and, on Hopper, transposed) first: Transformer Engine
    # reads 2 bytes and writes 1 + 1 per element of every GEMM input, in forward and for the output
    # gradients in backward (Micikevicius et al. 2022, "FP8 Formats for Deep Learning"; TE docs).
    fp8 = _f(g["fp8"]) > 0
    cast_f = np.where(fp8, T * 4.0 * (2.0 * h + q_t + ffn_t) / hbm, 0.0)
    cast_b = np.where(fp8, T * 4.0 * (qkv_n + 2.0 * h + mlp_up) / hbm, 0.0)
    # Output head (last stage): logits GEMM and a fp32 vocab-parallel cross-entropy.
    t_head_f = gemm_time(T, V / tp, h, peak16, eff, hbm, sms) + T * (V / tp) * 12.0 / hbm
    t_head = 3.0 * t_head_f  # forward + backward

    # Per micro-batch, per stage (largest stage, which also carries the head).
    comp_f = Ls * (t_dense_f + t_att_f)
    comp_b = Ls * (2.0 * t_dense_f + t_att_b)
    recomp = np.where(rec == 2, comp_f, np.where(rec == 1, Ls * t_att_f, 0.0))
    elem_f = Ls * t_elem_f
    elem = 3.0 * elem_f + np.where(rec == 2, elem_f, 0.0) + Ls * (cast_f * np.where(rec == 2, 2.0, 1.0) + cast_b)
    t_compute_mb = comp_f + comp_b + recomp + t_head
    t_elem_mb = elem

    # ---- tensor-parallel communication per micro-batch -----------------------------------------
    act_msg = T * h * act_b  # one activation tensor of the micro-batch
    t_tp_one = hierarchical_collective_time("ar", act_msg, tp, 1.0, gpn, bw0, lat0, bw1, lat1)
    n_tp = 4.0 + np.where(rec == 2, 2.0, 0.0)  # 2 fwd + 2 bwd all-reduces (or AG+RS pairs), + recompute fwd
    tp_total = np.where(tp > 1, Ls * n_tp * t_tp_one, 0.0)
    tp_hidden = np.where(tp_ovl, np.minimum(tp_total, 0.5 * Ls * 3.0 * t_dense_f), 0.0)
    tp_exposed = tp_total - tp_hidden

    # ---- context parallel (ring attention): K,V chunks around the ring, overlapped with attention ---
    kv_msg = 2.0 * T * kv_t * act_b
    k_cp, nodes_cp = group_span(cp, tp, gpn)
    bw_cp = np.where(nodes_cp > 1, bw1, bw0)
    lat_cp = np.where(nodes_cp > 1, lat1, lat0)
    cp_f = (cp - 1.0) * (kv_msg / bw_cp + lat_cp)
    cp_total = np.where(cp > 1, Ls * (cp_f + 2.0 * cp_f + np.where(rec >= 1, cp_f, 0.0)), 0.0)
    cp_window = Ls * (t_att_f + t_att_b + np.where(rec >= 1, t_att_f, 0.0))
    cp_exposed = np.maximum(0.0, cp_total - cp_window)
    cp_hidden = cp_total - cp_exposed

    # ---- expert parallel all-to-all (dispatch + combine, forward and backward) -----------------------
    a2a_msg = cap * T * ktop * h * act_b
    t_a2a = hierarchical_collective_time("a2a", a2a_msg, ep, tp * cp, gpn, bw0, lat0, bw1, lat1)
    ep_exposed = np.where(moe & (ep > 1), Ls * (4.0 + np.where(rec == 2, 2.0, 0.0)) * t_a2a, 0.0)

    # ---- parameters and sharded state on one GPU -------------------------------------------------
    p_layer_dense = params_per_layer(h, q_dim, kv_dim, ffn, swiglu, 1.0) - np.where(swiglu, 3.0, 2.0) * h * ffn
    p_layer_exp = np.where(swiglu, 3.0, 2.0) * h * ffn * np.where(moe, E / ep, 1.0)
    p_layer = (p_layer_dense + p_layer_exp) / tp
    emb = V * h / tp
    p_gpu = Ls * p_layer + emb * (1.0 + np.where((pp == 1) & ~tied, 1.0, 0.0))
    p_total = model_params(L, h, q_dim, kv_dim, ffn, swiglu, V, tied, E)
    dpcp = dp * cp
    shard_n = np.where(sh_node, np.clip(np.floor(gpn / (tp * cp)), 1.0, dp) * cp, dpcp)
    shard_n = np.maximum(shard_n, 1.0)
    grad_b = np.where(wb > 2, 4.0, 2.0)
    opt_bytes_pp = np.where(wb > 2, 8.0, 12.0)  # fp32 training has no separate master copy

    # ---- data-parallel / sharding communication --------------------------------------------------
    grad_msg = p_gpu * grad_b
    param_msg = p_gpu * np.where(wb > 2, 4.0, 2.0)
    t_ar_dp = hierarchical_collective_time("ar", grad_msg, dpcp, tp, gpn, bw0, lat0, bw1, lat1)
    t_ag_dp = hierarchical_collective_time("ag", param_msg, dpcp, tp, gpn, bw0, lat0, bw1, lat1)
    t_rs_dp = hierarchical_collective_time("rs", grad_msg, dpcp, tp, gpn, bw0, lat0, bw1, lat1)
    # ZeRO-3 / FSDP: per micro-batch AG (fwd) + AG (bwd) + RS (grads) over the shard group, prefetched.
    t_ag_sh = hierarchical_collective_time("ag", param_msg, shard_n, tp, gpn, bw0, lat0, bw1, lat1, flat=flat)
    t_rs_sh = hierarchical_collective_time("rs", grad_msg, shard_n, tp, gpn, bw0, lat0, bw1, lat1, flat=flat)
    fsdp_mb = np.where(gather_layer & (shard_n > 1), 2.0 * t_ag_sh + t_rs_sh, 0.0)
    # Prefetched gathers run beside everything else of the micro-batch, its exposed TP/CP/EP
    # communication included (a window of compute alone would hide the same time twice and make a
    # faster GPU slow the step).
    fsdp_window = t_compute_mb + t_elem_mb + tp_exposed + cp_exposed + ep_exposed
    fsdp_exposed_mb = np.where(fsdp_mb > 0, np.maximum(0.0, fsdp_mb - fsdp_window) + fsdp_mb / (3.0 * Ls), 0.0)
    fsdp_hidden_mb = fsdp_mb - fsdp_exposed_mb
    # HSDP replicas across nodes: one all-reduce of the gradient shard per step.
    repl_n = dpcp / shard_n
    t_hsdp = np.where(gather_layer & (repl_n > 1), hierarchical_collective_time(
        "ar", grad_msg / shard_n, repl_n, tp * shard_n, gpn, bw0, lat0, bw1, lat1), 0.0)
    # Per-step gradient synchronisation (DDP / ZeRO-1/2), bucketed and overlapped with the last backward.
    dp_step = np.where(gather_layer, t_hsdp, np.where(sh_opt, t_rs_dp + t_ag_dp, t_ar_dp))
    dp_step = np.where(dpcp > 1, dp_step, 0.0)
    # Hidden under the last micro-batch's backward (and recompute), whose wall time includes its exposed
    # TP/CP/EP/FSDP communication: counting compute alone would hide the same time twice, and a faster
    # GPU would then slow the step (tests/test_properties.py).
    window = np.where(dp_ovl, comp_b + recomp + tp_exposed + cp_exposed + ep_exposed + fsdp_exposed_mb, 0.0)
    last_bucket = np.where(dp_step > 0, np.minimum(dp_step, ring_collective_time(
        LAST_BUCKET_BYTES, dpcp, np.minimum(bw0, bw1), lat1, 2.0)), 0.0)
    dp_exposed = np.where(dp_ovl, np.maximum(dp_step - window, last_bucket), dp_step)
    dp_hidden = dp_step - dp_exposed

    # ---- pipeline -----------------------------------------------------------------------------------
    p2p_bytes = act_msg / tp  # Megatron's scatter-gather optimisation sends 1/t per TP rank
    _, pp_nodes = group_span(pp, tp * cp * dp, gpn)
    bw_pp = np.where(pp_nodes > 1, bw1, bw0)
    lat_pp = np.where(pp_nodes > 1, lat1, lat0)
    t_p2p = p2p_bytes / bw_pp + lat_pp
    pp_comm = np.where(pp > 1, 2.0 * (v * m_int + pp - 1.0) * t_p2p, 0.0)

    t_mb = t_compute_mb + t_elem_mb + tp_exposed + cp_exposed + ep_exposed + fsdp_exposed_mb
    inflight_bub = pipeline_bubble_fraction(pp, m_int, v, over_v, _f(g["bubble_frac"]))
    bubble = inflight_bub * t_mb

    # ---- optimizer (memory-bound Adam over this GPU's optimizer shard) -----------------------------
    opt_shard = np.where(sh_opt, shard_n, 1.0)
    t_opt = p_gpu / opt_shard * ADAM_BYTES_PER_PARAM / hbm + 10 * KERNEL_OVERHEAD_S

    # ---- island step (before cross-island sync) -------------------------------------------------------
    terms = {
        "compute": m_int * t_compute_mb,
        "memory_ops": m_int * t_elem_mb,
        "tp_comm": m_int * tp_exposed,
        "cp_comm": m_int * cp_exposed,
        "ep_comm": m_int * ep_exposed,
        "pp_comm": pp_comm,
        "pp_bubble": bubble,
        "dp_comm": dp_exposed + m_int * fsdp_exposed_mb,
        "optimizer": t_opt,
    }
    island_step = sum(terms.values())

    # ---- memory of the busiest GPU ------------------------------------------------------------------
    w_mem = p_gpu * wb / np.where(sh_param, shard_n, 1.0) + np.where(sh_param, 2.0 * p_layer * wb, 0.0)
    g_mem = p_gpu * grad_b / np.where(sh_grad, shard_n, 1.0)
    o_mem = p_gpu * opt_bytes_pp / np.where(sh_opt, shard_n, 1.0)
    o_mem = o_mem + p_gpu * _f(g["outer_bytes"]) / np.where(sh_param, shard_n, 1.0)
    act_stored, act_full = activation_bytes_per_layer(s_loc, mbs, h, heads, q_dim, kv_dim, ffn, swiglu, tp, sp,
                                                      rec, mat, np.where(moe, ktop, 1.0), s_kv=s,
                                                      dropout=g["dropout"].astype(bool))
    # Micro-batches whose activations the first stage holds: all m (GPipe) or min(m, p) (1F1B: p in
    # flight, i.e. L layers' worth); interleaving adds (1 + (p-1)/(p v)) (Korthikanti et al. 2022, Sec. 4.2.3).
    inflight = np.where(sched_all, m_int, np.minimum(m_int, pp))
    interleave = np.where(~sched_all & over_v & (v > 1), 1.0 + (pp - 1.0) / (pp * v), 1.0)
    layers_held = Ls * inflight * interleave
    act_first = act_stored * layers_held + np.where(rec == 2, act_full, 0.0)
    logits = T * V / tp * 4.0  # logits in fp32 for the (fused, in-place) cross-entropy
    act_first = act_first + np.where(pp == 1, logits, 0.0)
    act_last = act_stored * Ls + np.where(rec == 2, act_full, 0.0) + logits
    act_mem = np.maximum(act_first, np.where(pp > 1, act_last, 0.0))
    mem_used = (w_mem + g_mem + o_mem + act_mem) * (1.0 + FRAGMENTATION) + RESERVED_BYTES
    reasons |= np.where(mem_used > mem_cap, 32, 0)

    # ---- FLOPs ----------------------------------------------------------------------------------
    mf_tok = model_flops_per_token(L, h, q_dim, kv_dim, ffn, swiglu, V, s, ktop, E)
    dense_l, att_l = layer_flops_per_token(h, q_dim, kv_dim, ffn, swiglu, s, ktop, E)
    hw_tok = mf_tok + L * np.where(rec == 2, dense_l + att_l, np.where(rec == 1, att_l, 0.0))

    # ---- combine islands --------------------------------------------------------------------------
    # Every input may vary along the plan axis (e.g. only the WAN bandwidth): work on the full (N, I).
    full = np.broadcast_shapes(*(np.shape(x) for x in g.values()), reasons.shape, np.shape(island_step))
    reasons, island_step = np.broadcast_to(reasons, full), np.broadcast_to(island_step, full)
    feasible_isl = reasons == 0
    feasible = np.all(feasible_isl, axis=-1, keepdims=True)
    slow = np.max(np.where(feasible_isl, island_step, 0.0), axis=-1, keepdims=True)
    # A global all-reduce's WAN stage hides under what is left of each island's last backward pass once
    # that island's own data-parallel reduction is done (hierarchical: inside the island first); the
    # step ends when the last island's WAN stage does. (The slowest island's window alone would switch
    # with the argmax and hide the intra-island reduction's time twice: a faster GPU slowed the step.)
    ar_window = np.broadcast_to(np.maximum(0.0, window - dp_step), island_step.shape)
    wan = island_sync(
        n_isl, slow, p_total, grad_b, _f(g["wan_bw"]), _f(g["wan_lat"]), _f(g["local_steps"]) > 0, _f(g["H"]),
        _f(g["F"]), _f(g["ovl_steps"]), _f(g["bits"]), ar_window, reasons.shape,
        island_step=np.where(feasible_isl, island_step, 0.0))
    sync, sync_hidden, egress_bytes_step = wan["exposed"], wan["hidden"], wan["egress"]
    step = slow + sync
    # Heterogeneous islands: each island's global batch share is proportional to its data-parallel
    # replicas (b_isl above), so faster islands finish their inner steps early and wait (DiLoCo: at
    # the outer sync; allreduce: at every step) -- the same idle time per step either way.
    idle = slow - island_step

    isl_gpus = tp * pp * cp * dp
    total_gpus = np.sum(np.broadcast_to(isl_gpus, island_step.shape), axis=-1, keepdims=True)

    # Breakdown of the global step, as seen by the average GPU: each island's own terms and its idle
    # time (waiting for the slowest island), GPU-weighted over islands, + the exposed island sync.
    # Sums to slow + sync = step; with one island (or identical ones) it is that island's breakdown,
    # and compute_utilization = 1 - (island_sync + idle) / step.
    w_gpu = np.broadcast_to(isl_gpus, island_step.shape) / total_gpus

    def _mean(x):
        return np.sum(np.broadcast_to(x, island_step.shape) * w_gpu, axis=-1, keepdims=True)

    bd = {k: _mean(val) for k, val in terms.items()}
    bd["island_sync"] = np.broadcast_to(sync, slow.shape)
    bd["idle"] = _mean(idle)
    overlapped = {
        "tp_comm": _mean(m_int * tp_hidden),
        "cp_comm": _mean(m_int * cp_hidden),
        "dp_comm": _mean(dp_hidden + m_int * fsdp_hidden_mb),
        "island_sync": np.broadcast_to(sync_hidden, slow.shape),
    }

    tokens_step = _first(gbs * s, reasons.shape)
    mf_tok, hw_tok, p_total = (_first(x, reasons.shape) for x in (mf_tok, hw_tok, p_total))
    tps = tokens_step / step
    tps_isl = b_isl * s / step
    tps_gpu = tps / total_gpus
    model_tf = tps_gpu * mf_tok / 1e12
    hw_tf = tps_gpu * hw_tok / 1e12
    gpu_peak_mean = np.sum(np.broadcast_to(peak * isl_gpus, island_step.shape), axis=-1,
                           keepdims=True) / total_gpus
    mfu = model_tf * 1e12 / gpu_peak_mean
    hfu = hw_tf * 1e12 / gpu_peak_mean
    # Compute utilisation as the DiLoCo papers define it (INTELLECT-1 Table 2: inner time / (inner time +
    # outer all-reduce)): the share of wall time the GPUs work on their own island's step rather than
    # wait on the WAN sync or on slower islands, GPU-weighted over islands:
    # 1 - (exposed island sync + mean idle) / step. Communication inside an island counts as working.
    cu_isl = island_step / step
    cu = np.sum(np.broadcast_to(cu_isl * isl_gpus, island_step.shape), axis=-1, keepdims=True) / total_gpus

    return {
        "feasible": feasible[..., 0],
        "feasible_island": feasible_isl,
        "reasons": reasons,
        "step_time_s": step[..., 0],
        "island_step_s": np.broadcast_to(island_step, reasons.shape),
        "island_idle_s": np.broadcast_to(idle, reasons.shape),
        "island_breakdown": {k: np.broadcast_to(val, reasons.shape) for k, val in terms.items()},
        "island_util": np.broadcast_to(cu_isl, reasons.shape),
        "breakdown": {k: np.asarray(val)[..., 0] for k, val in bd.items()},
        "overlapped": {k: np.asarray(val)[..., 0] for k, val in overlapped.items()},
        "tokens_per_s": np.broadcast_to(tps, slow.shape)[..., 0],
        "tokens_per_s_per_gpu": np.broadcast_to(tps_gpu, slow.shape)[..., 0],
        "island_tokens_per_s": np.broadcast_to(tps_isl, reasons.shape),
        "model_tflops_per_gpu": np.broadcast_to(model_tf, slow.shape)[..., 0],
        "hardware_tflops_per_gpu": np.broadcast_to(hw_tf, slow.shape)[..., 0],
        "mfu": np.broadcast_to(mfu, slow.shape)[..., 0],
        "hfu": np.broadcast_to(hfu, slow.shape)[..., 0],
        "compute_utilization": np.broadcast_to(cu, slow.shape)[..., 0],
        "memory_per_gpu_gb": np.max(np.broadcast_to(mem_used, reasons.shape), axis=-1) / 1e9,
        "island_memory_gb": np.broadcast_to(mem_used, reasons.shape) / 1e9,
        "island_gpus": np.broadcast_to(isl_gpus, reasons.shape),
        "island_batch": np.broadcast_to(b_isl, reasons.shape),
        "gpus": np.broadcast_to(total_gpus, slow.shape)[..., 0],
        "egress_bytes_per_step": egress_bytes_step,
        "wan_s": np.broadcast_to(wan["wan_s"], slow.shape)[..., 0],
        "wan_round_s": np.broadcast_to(wan["round_s"], slow.shape)[..., 0],
        "model_flops_per_token": np.broadcast_to(mf_tok, slow.shape)[..., 0],
        "params": np.broadcast_to(p_total, slow.shape)[..., 0],
        "micro_batches": np.broadcast_to(m_int, reasons.shape),
        # details for reason messages
        "_mem_cap_gb": np.broadcast_to(mem_cap, reasons.shape) / 1e9,
    }


def _first(x, shape):
    """Column 0 of a per-island array whose value is global (same on every island)."""
    return np.broadcast_to(x, shape)[..., :1]



def reason_messages(bits: int, values: dict) -> list[tuple[str, str]]:
    """(key, message) for each reason bit set, formatted with ``values``."""
    out = []
    for bit, (key, tmpl) in REASONS.items():
        if bits & bit:
            try:
                out.append((key, tmpl.format(**values)))
            except (KeyError, ValueError, IndexError):
                out.append((key, tmpl))
    return out
