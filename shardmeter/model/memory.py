"""Memory of the busiest GPU: model state (the sharding strategy's), activations in flight (the
schedule's count) and the framework's own reservation."""

from __future__ import annotations

from . import ops
from .compute import Shapes
from .formulas import activation_bytes_per_layer
from .inputs import ModelShape, Training
from .ops import Array

__all__ = ["activation_memory", "total_memory", "RESERVED_BYTES", "FRAGMENTATION"]

#: Memory the framework holds besides tensors (CUDA context, NCCL buffers, cuBLAS workspaces),
#: bytes; and the allocator's fragmentation allowance.
RESERVED_BYTES = 1.0e9
FRAGMENTATION = 0.05


def activation_memory(ms: ModelShape, tr: Training, sh: Shapes, tp, sp, pp, in_flight) -> Array:
    """Activation bytes of the busier of the first stage (``in_flight`` micro-batches through
    the stage, as the schedule says) and the last (one micro-batch, plus the fp32 logits of the
    fused cross-entropy); full recompute adds one layer's working set while recomputing
    (Korthikanti et al. 2022, Sec. 4 and 4.2.3)."""
    rec = tr.recompute
    stored, full = activation_bytes_per_layer(
        sh.seq_local,
        tr.micro_batch,
        ms.hidden,
        ms.heads,
        ms.q_dim,
        ms.kv_dim,
        ms.ffn_hidden,
        ms.swiglu,
        tp,
        sp,
        rec,
        ops.as_bool(tr.materialized),
        ops.where(sh.moe, ms.experts_per_token, 1.0),
        s_kv=ms.seq_len,
        dropout=ops.as_bool(ms.dropout),
    )
    Ls = sh.layers_per_stage
    working = ops.where(rec == 2, full, 0.0)
    logits = sh.tokens * ms.vocab / tp * 4.0  # logits in fp32 for the (fused, in-place) cross-entropy
    first = stored * (Ls * in_flight) + working + ops.where(pp == 1, logits, 0.0)
    last = stored * Ls + working + logits
    return ops.maximum(first, ops.where(pp > 1, last, 0.0))


def total_memory(weights, gradients, optimizer, extra, activations) -> Array:
    """Bytes per GPU: tensors with the fragmentation allowance, plus the reservation."""
    return (weights + gradients + optimizer + extra + activations) * (1.0 + FRAGMENTATION) + RESERVED_BYTES
