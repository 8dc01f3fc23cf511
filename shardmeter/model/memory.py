"""Memory of a pipeline stage's GPU (the evaluator keeps the busiest): model state (the sharding
strategy's), activations in flight (the schedule's count) and the framework's own reservation."""

from __future__ import annotations

import math

from shardmeter.inputs.bundles import REC_FULL, REC_NONE, REC_OP, REC_SELECTIVE, ModelShape, Training
from shardmeter.model.activations import activation_bytes_per_layer, op_recompute_bytes
from shardmeter.model.branches import where_needed
from shardmeter.model.fp8 import activation_saving, full_layer_saving
from shardmeter.model.recompute import full_recompute_share
from shardmeter.model.selective import selective_saving_bytes
from shardmeter.model.shapes import Shapes
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "activation_memory",
    "layer_activations",
    "logits_bytes_per_element",
    "loss_transient_bytes",
    "offload_kept",
    "total_memory",
    "memory_parts",
    "MEMORY_PARTS",
]


#: The parts of :func:`memory_parts`, in report order (SCENARIO.md, ``memory_breakdown_gb``).
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "transient", "other")


def layer_activations(ms: ModelShape, tr: Training, sh: Shapes, tp: Array, sp: Array) -> tuple[Array, Array]:
    """``(stored, working)``: activation bytes one micro-batch keeps for the stage's layers
    (under the recompute mode, before any offload; :func:`~.activations.activation_bytes_per_layer`),
    and the working set of the layer being recomputed in backward. Op recompute under
    ``compile`` keeps only the saved-list outputs the backward reads (no dense w2 output;
    :func:`~.activations.activation_bytes_per_layer`). With ``recompute_layers``
    (full recompute of the first k layers of each chunk, :func:`~.recompute.full_recompute_share`)
    the recomputed share keeps its input and the rest all their activations. Full recompute's
    working set is the layer's full activations (Korthikanti et al. 2022, Sec. 4.2.3); op
    recompute's is what it recomputes of them (the full set less what it saved). Op recompute
    keeps no attention output where the stack's save list leaves its kernel out
    (``tr.op_saves_attention``: torchtitan's cuDNN SDPA on Blackwell). A MoE layer
    stores the MLP activations of its ``experts_per_token`` routed and ``shared_experts``
    experts (each ``ffn_local`` wide); the stage's dense layers (``dense_layers_local``) those
    of one ``ffn_hidden`` MLP. Multi-head latent attention is counted as standard attention at
    the query/key head width."""
    if _plain_layer(ms, tr, sh, tp, sp):
        return _layer_activations_floats(ms, tr, sh, tp, sp)
    rec = tr.recompute
    compiled = ops.as_bool(tr.compile)
    share = full_recompute_share(tr, sh)
    h_rep = ms.hidden * ops.where(sp, 1.0 / tp, 1.0)

    def kept(ffn: Array, k: Array, compiled: Array, ffn_k: Array, moe_layer: Array) -> tuple[Array, Array]:
        """``(stored, full)`` of one layer whose MLP is ``ffn`` wide (``k`` of them active)."""
        stored, full = activation_bytes_per_layer(
            sh.seq_local,
            tr.micro_batch,
            ms.hidden,
            ms.heads,
            ms.q_dim,
            ms.kv_dim,
            ffn,
            ms.swiglu,
            tp,
            sp,
            rec,
            ops.as_bool(tr.materialized),
            k,
            s_kv=ms.seq_len,
            dropout=ops.as_bool(ms.dropout),
            compiled=compiled,
            saves_attention=ops.as_bool(tr.op_saves_attention),
        )
        # fp8 GEMMs whose recipe keeps the fp8 copy of their inputs for backward (fp8.py)
        stored = stored - activation_saving(tr, sh.tokens, h_rep, sh.q_local, ffn_k, rec)
        # Megatron's selective recompute of more modules than the attention core (selective.py)
        stored = stored - selective_saving_bytes(ms, tr, sh, tp, sp, ffn, moe_layer)
        # a layer full recompute leaves alone, or re-runs in backward, saves them the same way
        full = full - full_layer_saving(tr, sh.tokens, h_rep, sh.q_local, ffn_k)
        return share * stored + (1.0 - share) * full, full

    k_act = ops.where(sh.moe, ms.experts_per_token + ms.shared_experts, 1.0)
    stored, full = kept(
        sh.ffn_local * tp, k_act, compiled & ops.logical_not(sh.moe), sh.ffn_local * k_act, sh.moe
    )
    Ld = sh.dense_layers_local
    dense = Ld > 0
    stored_d, full_d = where_needed(  # a MoE model's dense layer, where the stage holds one
        dense, lambda: kept(ms.ffn_hidden, 1.0, compiled, ms.ffn_hidden / tp, False), lambda: (stored, full)
    )
    d_stored = ops.where(dense, stored_d - stored, 0.0)  # a dense layer's less a MoE layer's
    working = ops.where(
        rec == REC_FULL,
        ops.where(dense, ops.maximum(full, full_d), full),
        ops.where(
            rec == REC_OP,
            ops.where(dense, ops.maximum(full - stored, full_d - stored_d), full - stored),
            0.0,
        ),
    )
    return stored * sh.layers_per_stage + d_stored * Ld, ops.maximum(working, 0.0)


def _plain_layer(ms: ModelShape, tr: Training, sh: Shapes, tp: Array, sp: Array) -> bool:
    """Whether :func:`layer_activations` reads plain numbers only (one plan): its sizes floats,
    the flags ``ops.where`` takes as they are bools, the rest floats or bools (read through
    ``ops.as_bool`` / ``ops.as_float``)."""
    # one tuple each (a literal, not a concatenation of groups)
    sizes = (
        tp, tr.recompute, tr.micro_batch, tr.recompute_layers, sh.seq_local, sh.tokens,
        sh.q_local, sh.ffn_local, sh.dense_layers_local, sh.layers_per_stage, sh.virtual_stages,
        ms.hidden, ms.heads, ms.q_dim, ms.kv_dim, ms.seq_len, ms.experts_per_token,
        ms.shared_experts, ms.ffn_hidden, ms.kv_rank, ms.q_rank,
    )  # fmt: skip
    flags = (
        tr.compile, tr.materialized, ms.dropout, tr.op_saves_attention, tr.fp8, tr.fp8_te,
        tr.rc_moe, tr.rc_moe_act, tr.rc_shared_experts, tr.rc_layernorm, tr.rc_mlp, tr.rc_mla_up_proj,
    )  # fmt: skip
    return (
        type(sp) is bool
        and type(sh.moe) is bool
        and type(ms.swiglu) is bool
        and set(map(type, sizes)) <= ops.ONLY_FLOAT
        and set(map(type, flags)) <= ops.FLOAT_OR_BOOL
    )


def _layer_activations_floats(
    ms: ModelShape, tr: Training, sh: Shapes, tp: float, sp: bool
) -> tuple[float, float]:
    """:func:`layer_activations` of one plan (:func:`_plain_layer`): the same operations in the
    same order, each ``ops.where`` the side it picks (only that side computed: the recompute
    mode's bytes, the routed or dense layer's selective saving, fp8's only with fp8, a dense
    layer's only where the stage holds one) and ``ops.maximum`` written out (nan where neither
    side is the larger, as numpy). tests/test_scalar_twins.py holds it to the arrays to the bit."""
    nan = math.nan
    rec = tr.recompute
    full_mode, op_mode = rec == REC_FULL, rec == REC_OP
    none_mode, sel_mode = rec == REC_NONE, rec == REC_SELECTIVE
    compiled = bool(tr.compile)
    share = full_recompute_share(tr, sh)
    h, s, b = ms.hidden, sh.seq_local, tr.micro_batch
    h_rep = h * (1.0 / tp if sp else 1.0)
    materialized, dropout, saves = bool(tr.materialized), bool(ms.dropout), bool(tr.op_saves_attention)
    fp8_keep = float(tr.fp8) > 0  # fp8.full_layer_saving's share kept for backward
    frac = 1.0 - (0.5 if tr.fp8_te else 1.0)
    sb = s * float(b)  # selective.selective_saving_bytes
    mats_sel = 6.0 if ms.swiglu else 4.0

    def kept(ffn: float, k: float, compiled_k: bool, ffn_k: float, moe_layer: bool) -> tuple[float, float]:
        # activations.activation_bytes_per_layer
        sbh = s * b * h
        drop = 1.0 if dropout else 0.0
        repl = (8.0 + 2.0 * drop) * sbh
        att = s * b * (4.0 * ms.q_dim + 4.0 * ms.kv_dim)
        mlp = s * b * ffn * (6.0 if ms.swiglu else 4.0) * k
        score = (2.0 + 3.0 * drop) * ms.heads * s * ms.seq_len * b if materialized and none_mode else 0.0
        per_layer = (repl / tp if sp else repl) + (att + mlp + score) / tp
        if full_mode:
            stored = 2.0 * sbh / tp if sp else 2.0 * sbh  # activations.full_recompute_bytes
        elif op_mode:
            stored = op_recompute_bytes(
                s, b, h, ms.heads, ms.q_dim, ms.kv_dim, ffn, ms.swiglu, tp, sp, materialized, k,
                ms.seq_len, compiled_k, saves,
            )  # fmt: skip
        else:
            stored = per_layer
        full = per_layer
        # fp8.activation_saving / full_layer_saving
        fp8_saving = frac * 2.0 * sh.tokens * (2.0 * h_rep + sh.q_local + ffn_k) if fp8_keep else 0.0
        stored = stored - (fp8_saving if none_mode or sel_mode else 0.0)
        stored = stored - (
            _selective_floats(ms, tr, sb, mats_sel, ffn, tp, sp, moe_layer) if sel_mode else 0.0
        )
        full = full - fp8_saving
        return share * stored + (1.0 - share) * full, full

    k_act = ms.experts_per_token + ms.shared_experts if sh.moe else 1.0
    stored, full = kept(sh.ffn_local * tp, k_act, compiled and not sh.moe, sh.ffn_local * k_act, sh.moe)
    Ld = sh.dense_layers_local
    dense = Ld > 0
    if dense:
        stored_d, full_d = kept(ms.ffn_hidden, 1.0, compiled, ms.ffn_hidden / tp, False)
        d_stored = stored_d - stored
    else:
        stored_d, full_d, d_stored = stored, full, 0.0
    if full_mode:
        working = (full if full >= full_d else (full_d if full_d > full else nan)) if dense else full
    elif op_mode:
        x, y = full - stored, full_d - stored_d
        working = (x if x >= y else (y if y > x else nan)) if dense else x
    else:
        working = 0.0
    return stored * sh.layers_per_stage + d_stored * Ld, (
        working if working >= 0.0 else (0.0 if working < 0.0 else nan)
    )


def _selective_floats(
    ms: ModelShape, tr: Training, sb: float, mats: float, ffn: float, tp: float, sp: bool, moe: bool
) -> float:
    """:func:`~.selective.selective_saving_bytes` of one plan's layer under selective recompute
    (``sb``: its ``seq_local x micro_batch``, ``mats``: 6 or 4), the routed or dense layer's
    saving only."""
    per_mlp = sb * ffn / tp
    if moe:
        k, shared = ms.experts_per_token, ms.shared_experts
        rep = 1.0 / tp if sp else 1.0
        whole_moe = float(tr.rc_moe) > 0
        routed = mats * k if whole_moe else float(tr.rc_moe_act) * 2.0 * k
        shared_b = mats * shared if whole_moe or float(tr.rc_shared_experts) > 0 else 0.0
        saving = per_mlp * (routed + shared_b) + float(tr.rc_layernorm) * 2.0 * sb * ms.hidden * rep
    else:
        saving = float(tr.rc_mlp) * per_mlp * mats
    q_rank, kv_rank = ms.q_rank, ms.kv_rank
    if (kv_rank > 0 or q_rank > 0) and float(tr.rc_mla_up_proj) > 0:
        up = sb * (2.0 * ms.q_dim + 4.0 * ms.kv_dim) / tp - 2.0 * sb * (q_rank + kv_rank)
    else:
        up = 0.0
    return saving + (up if up >= 0.0 else (0.0 if up < 0.0 else math.nan))


def offload_kept(tr: Training, sh: Shapes) -> Array:
    """The share of the stage's activations that stays on the GPU with ``offload_layers = k``:
    ``(L - k) / L``, Transformer Engine's bound of ``L - k`` layers' activations on the GPU at
    any time (``DefaultOffloadSynchronizer``, transformer_engine/pytorch/cpu_offload.py
    @ d0067d0d; its ``double_buffering`` argument is unused there); k is clipped to ``L - 1``."""
    Ls, off = sh.layers_per_stage, tr.offload_layers
    if type(Ls) is float and type(off) is float:  # one plan: ops.maximum/minimum written out
        a = off if off >= 0.0 else (0.0 if off < 0.0 else math.nan)
        y = Ls - 1.0
        b = y if y >= 0.0 else (0.0 if y < 0.0 else math.nan)
        return (Ls - (a if a <= b else (b if b < a else math.nan))) / Ls
    k = ops.minimum(ops.maximum(off, 0.0), ops.maximum(Ls - 1.0, 0.0))
    return (Ls - k) / Ls


def logits_bytes_per_element(tr: Training) -> Array:
    """Bytes per logit that the loss keeps for the backward pass: 4 for an fp32 cross-entropy,
    2 for a torch.compiled one (``tr.compiled_loss``).

    * fp32: Megatron's vocab-parallel cross-entropy upcasts the logits and keeps its softmax
      in place of them (``s b V / t x 4``); eager PyTorch's
      ``F.cross_entropy(pred.float(), ...)`` keeps ``log_softmax``'s fp32 output (its
      backward reads its output; the upcast's backward reads nothing).
    * torch.compile: torchtitan compiles its loss with ``training.compile``
      (``build_cross_entropy_loss``: ``torch.compile(cross_entropy_loss)``,
      torchtitan/components/loss.py @ 6fc499f6, since bbb1b616, 2025-04-02; ``[compile]
      components`` to compile the model and the loss separately came in 08b8b244,
      2025-08-20), and its ``train.py`` deletes ``pred`` before ``loss.backward()``. Inductor
      fuses the upcast, log-softmax and gather; the partitioner saves the bf16 logits (the
      graph's input) and two fp32 numbers per token (row max, log-sum-exp), not an fp32 copy.
      Measured with saved-tensor hooks (``benchmarks/saved_tensors_check.py``, torch 2.14.1 on
      CPU): eager 4.00, compiled 2.00 bytes per logit.

    The loss's backward adds its gradients for a moment: :func:`loss_transient_bytes`."""
    c = tr.compiled_loss
    if type(c) is float or type(c) is bool:  # one plan: its truth picks (as ops.as_bool's)
        return 2.0 if c else 4.0
    return ops.where(ops.as_bool(c), 2.0, 4.0)


def loss_transient_bytes(ms: ModelShape, tr: Training, sh: Shapes, tp: Array) -> Array:
    """What the loss's backward holds beside the saved logits (:func:`logits_bytes_per_element`)
    before the output layer's backward frees them, bytes, on the stage with the head: ``s b V / t``
    logits of

    * 8 bytes with eager ``F.cross_entropy(pred.float(), ...)``: ``nll_loss``'s fp32 gradient
      of the log-softmax and ``log_softmax``'s fp32 gradient of its input (its backward,
      ``_log_softmax_backward_data``, reads its saved output and writes a new tensor), both
      alive at once beside the saved fp32 log-softmax;
    * 12 bytes with the same loss on vocab-sharded logits under DTensor's ``loss_parallel()``
      (``tr.loss_parallel`` and ``tp`` > 1: torchtitan's TP): its ``nll_loss_backward`` handler
      computes both backwards at once, unfused, ``grad_input = torch.zeros_like(x)`` ...
      ``return (grad_input + torch.exp(x)) * grad_output`` with ``x`` the saved log-softmax
      (``_nll_loss_and_log_softmax_backward``, torch/distributed/tensor/parallel/loss.py @
      02eef6b8), so ``grad_input``, ``exp(x)`` and their sum (then the sum and the product) are
      three fp32 copies alive at once beside ``x``;
    * 2 under a compiled loss (``tr.compiled_loss``): Inductor's fused backward reads the bf16
      logits and the saved row statistics and writes the bf16 gradient of the logits;
    * 0 with a loss that writes the gradient in place (``tr.fused_loss``: Megatron's
      vocab-parallel cross-entropy, ``grad_input = softmax`` ... ``grad_input.mul_(grad_output)``,
      megatron/core/tensor_parallel/cross_entropy.py @ d98e8a64)."""
    flags = (tr.loss_parallel, tr.fused_loss, tr.compiled_loss)
    if type(tp) is float and set(map(type, flags)) <= ops.FLOAT_OR_BOOL:
        # one plan: each where the side its flag's truth picks (ops.as_bool's), as numbers
        parallel, fused, compiled = flags
        per_one = 0.0 if fused else (2.0 if compiled else (12.0 if parallel and tp > 1 else 8.0))
        return sh.tokens * ms.vocab / tp * per_one
    eager = ops.where(ops.as_bool(tr.loss_parallel) & (tp > 1), 12.0, 8.0)
    per = ops.where(ops.as_bool(tr.fused_loss), 0.0, ops.where(ops.as_bool(tr.compiled_loss), 2.0, eager))
    return sh.tokens * ms.vocab / tp * per


def activation_memory(
    ms: ModelShape,
    tr: Training,
    sh: Shapes,
    tp: Array,
    sp: Array,
    in_flight: Array,
    logits_held: Array = 0.0,
    head: Array = False,
    layer: tuple[Array, Array] | None = None,
) -> tuple[Array, Array]:
    """Activation bytes of one pipeline stage of ``sh.layers_per_stage`` layers holding
    ``in_flight`` micro-batches through them (the schedule's count for its rank) and, on the
    last stage, ``logits_held`` micro-batches' logits as the loss keeps them (``s b V / t``
    elements of :func:`logits_bytes_per_element` bytes: fp32, or bf16 under a compiled loss);
    recompute adds one layer's working set while recomputing (Korthikanti et al. 2022, Sec. 4
    and 4.2.3; :func:`layer_activations`). Offloaded layers (:func:`offload_kept`) leave the
    GPU for each micro-batch in flight.

    Returns ``(activations, transient)``: the transient is what the loss's backward adds on the
    stage with the ``head`` (:func:`loss_transient_bytes`) beyond the recompute working set
    already counted, since the two never coexist (the loss's gradients are freed by the output
    layer's backward, before any layer recomputes): ``max(loss - working, 0)``. ``layer``:
    :func:`layer_activations` of these same arguments, where the caller has it."""
    stored, working = layer if layer is not None else layer_activations(ms, tr, sh, tp, sp)
    stored = stored * offload_kept(tr, sh)
    logits = sh.tokens * ms.vocab / tp * logits_bytes_per_element(tr)
    loss_in = (tp, sh.tokens, ms.vocab, tr.loss_parallel, tr.fused_loss, tr.compiled_loss)
    if (
        type(head) is bool and set(map(type, loss_in)) <= ops.FLOAT_OR_BOOL
    ):  # one plan's rank: the loss only where it is
        loss = loss_transient_bytes(ms, tr, sh, tp) if head else 0.0
    else:
        loss = ops.where(ops.as_bool(head), loss_transient_bytes(ms, tr, sh, tp), 0.0)
    return stored * in_flight + working + logits * logits_held, ops.maximum(loss - working, 0.0)


def total_memory(
    weights: Array,
    gradients: Array,
    optimizer: Array,
    extra: Array,
    activations: Array,
    transient: Array,
    other: Array,
) -> Array:
    """Bytes per GPU at the step's peak: the tensors alive during the last backward pass
    (model state, the strategy's ``extra`` buffers and the activations in flight), what exists
    only around that peak (``transient``: the loss's gradients, :func:`loss_transient_bytes`),
    and what the process holds besides its tensors (``other``: :mod:`.overheads`). The
    optimizer step comes after the activations are freed, so its transient fp32 gradient shard
    never sets the peak."""
    return weights + gradients + optimizer + extra + activations + transient + other


def memory_parts(
    weights: Array,
    gradients: Array,
    optimizer: Array,
    extra: Array,
    activations: Array,
    transient: Array,
    other: Array,
) -> dict[str, Array]:
    """:func:`total_memory` by part, bytes: the four tensor kinds as they are, ``transient``
    with the strategy's ``extra`` buffers (communication buffers, SCENARIO.md), and ``other``
    (CUDA context, NCCL buffers, cuBLAS workspaces), so the parts add up to the total."""
    parts = (weights, gradients, optimizer, activations, transient + extra, other)
    return dict(zip(MEMORY_PARTS, parts, strict=True))
