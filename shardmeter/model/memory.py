"""Memory of a pipeline stage's GPU (the evaluator keeps the busiest): model state (the sharding strategy's), activations in flight (the
schedule's count) and the framework's own reservation."""

from __future__ import annotations

from . import ops
from .compute import Shapes
from .formulas import activation_bytes_per_layer
from .inputs import ModelShape, Training
from .ops import Array

__all__ = [
    "activation_memory",
    "total_memory",
    "memory_parts",
    "MEMORY_PARTS",
    "RESERVED_BYTES",
    "FRAGMENTATION",
]

#: Memory the framework holds besides tensors (CUDA context, NCCL buffers, cuBLAS workspaces),
#: bytes; and the allocator's fragmentation allowance.
RESERVED_BYTES = 1.0e9
FRAGMENTATION = 0.05

#: The parts of :func:`memory_parts`, in report order (SCENARIO.md, ``memory_breakdown_gb``).
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "other")


def activation_memory(ms: ModelShape, tr: Training, sh: Shapes, tp, sp, in_flight, logits_held=0.0) -> Array:
    """Activation bytes of one pipeline stage of ``sh.layers_per_stage`` layers holding
    ``in_flight`` micro-batches through them (the schedule's count for its rank) and, on the
    last stage, ``logits_held`` micro-batches' fp32 logits (``s b V / t x 4`` bytes: the
    vocab-parallel cross-entropy saves its softmax for the backward pass); full recompute adds
    one layer's working set while recomputing (Korthikanti et al. 2022, Sec. 4 and 4.2.3). A MoE layer stores the MLP activations of its
    ``experts_per_token`` routed and ``shared_experts`` experts (each ``ffn_local`` wide); the
    stage's dense layers (``dense_layers_local``) those of one ``ffn_hidden`` MLP. Multi-head
    latent attention is counted as standard attention at the query/key head width."""
    rec = tr.recompute

    def per_layer(ffn, k):
        return activation_bytes_per_layer(
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
        )

    stored, full = per_layer(
        sh.ffn_local * tp, ops.where(sh.moe, ms.experts_per_token + ms.shared_experts, 1.0)
    )
    Ld = sh.dense_layers_local
    stored_d, full_d = per_layer(ms.ffn_hidden, 1.0)
    d_stored = ops.where(Ld > 0, stored_d - stored, 0.0)  # a dense layer's less a MoE layer's
    Ls = sh.layers_per_stage
    working = ops.where(rec == 2, ops.where(Ld > 0, ops.maximum(full, full_d), full), 0.0)
    logits = sh.tokens * ms.vocab / tp * 4.0  # logits in fp32 for the (fused, in-place) cross-entropy
    return stored * (Ls * in_flight) + d_stored * (Ld * in_flight) + working + logits * logits_held


def total_memory(weights, gradients, optimizer, extra, activations) -> Array:
    """Bytes per GPU: tensors with the fragmentation allowance, plus the reservation."""
    return (weights + gradients + optimizer + extra + activations) * (1.0 + FRAGMENTATION) + RESERVED_BYTES


def memory_parts(weights, gradients, optimizer, extra, activations) -> dict[str, Array]:
    """:func:`total_memory` by part, bytes: the four tensor kinds as they are, and ``other`` =
    the total less them (the strategy's ``extra`` buffers, the fragmentation allowance and the
    reservation), so the parts add up to the total."""
    total = total_memory(weights, gradients, optimizer, extra, activations)
    other = total - (weights + gradients + optimizer + activations)
    return dict(zip(MEMORY_PARTS, (weights, gradients, optimizer, activations, other), strict=True))
