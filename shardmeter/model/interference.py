"""Compute slowed by the collectives hidden under it: NCCL runs on the GPU's own SMs.

NCCL launches each collective as one kernel with one thread block per channel
(``ncclLaunchKernel``: ``dim3 grid = {(unsigned)nChannels, 1, 1}``, src/enqueue.cc,
NVIDIA/nccl@5067397c), each block ``NCCL_MAX_NTHREADS`` (640) threads with NCCL's dynamic shared
memory, so it holds an SM for as long as the collective runs. A data-parallel gather or
reduction that overlaps the forward or backward pass therefore leaves the GEMM and attention
kernels ``sm_count - channels`` SMs: while ``h`` seconds of it run hidden, the compute beside it
advances at ``1 - channels / sm_count`` of its rate, and the step is ``h x channels / sm_count``
longer than perfect overlap would make it. The channels are
:data:`~.overheads.NCCL_CHANNELS` (32, what NCCL builds on 8-GPU NVSwitch nodes), the count
the model's NCCL buffers already use; a GPU of unknown SM count (``sm_count = 0``) is charged
nothing.

What it covers: the sharding strategy's collectives (FSDP / ZeRO parameter gathers and gradient
reduce-scatters, DDP's bucketed all-reduce), NCCL collectives at the communicator's full
channel count. Left out, each for a stated reason: PyTorch's async TP (its SymmetricMemory
micro-pipeline moves the shards with copy-engine copies, not SM kernels), CP's ring
send/receive (NCCL point-to-point runs on a few channels per peer), Transformer Engine's
userbuffers TP overlap (its SM count is a per-recipe setting), and the cross-island sync.
"""

from __future__ import annotations

from shardmeter.model.overheads import NCCL_CHANNELS
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["overlap_slowdown_s", "nccl_sm_share"]


def nccl_sm_share(sm_count: Array) -> Array:
    """The share of the GPU's SMs a full-channel NCCL collective holds: ``channels / sm_count``
    (at most 1; 0 where the SM count is unknown)."""
    sms = ops.as_float(sm_count)
    return ops.where(sms > 0, ops.minimum(NCCL_CHANNELS / ops.maximum(sms, 1.0), 1.0), 0.0)


def overlap_slowdown_s(hidden_s: Array, sm_count: Array) -> Array:
    """Seconds a step loses to ``hidden_s`` seconds of collectives overlapped with compute:
    ``hidden_s x channels / sm_count`` (module docstring)."""
    return hidden_s * nccl_sm_share(sm_count)
