"""Compute slowed by the collectives hidden under it: NCCL runs on the GPU's own SMs.

NCCL launches each collective as one kernel with one thread block per channel
(``ncclLaunchKernel``: ``dim3 grid = {(unsigned)nChannels, 1, 1}``, src/enqueue.cc,
NVIDIA/nccl@5067397c), each block ``NCCL_MAX_NTHREADS`` (640) threads with NCCL's dynamic shared
memory, so it holds an SM for as long as the collective runs. A data-parallel gather or
reduction that overlaps the forward or backward pass therefore leaves the GEMM and attention
kernels ``sm_count - channels`` SMs: while ``h`` seconds of it run hidden, the compute beside it
advances at ``1 - channels / sm_count`` of its rate, and the step is ``h x channels / sm_count``
longer than perfect overlap would make it. A GPU of unknown SM count (``sm_count = 0``) is
charged nothing.

The channels are NCCL's own count for a ring on an NVSwitch node (:func:`nccl_channels`, NVIDIA/nccl
@5067397c): the ring search runs at the architecture's top intra-node speed per channel
(src/graph/search.cc ``speedArrayIntra`` 40 GB/s before Hopper, ``sm90SpeedArrayIntra`` 60,
``sm100SpeedArrayIntra`` 90) over the GPU's NVLinks (src/graph/topo.h ``SM80_NVLINK_BW`` 20.0,
``SM90_NVLINK_BW`` 20.6, ``SM100_NVLINK_BW`` 40.1 GB/s a link; 12 links on an A100, 18 on an
H100 or B200): 240 / 40 = 6, 371 / 60 = 6 and 722 / 90 = 8 search channels. src/graph/connect.cc
then duplicates them (``nChannels = min(MAXCHANNELS, nChannels * 2)``) and, on Hopper and later
across nodes with fewer than 16, doubles them again ("Use 4 compute channels per search channel to
reach peak BW"): 12 on an A100 (6 on a V100: 6 links), 12 on an H100 in one node and 24 across
nodes, 16 on a B200.

What it covers: the sharding strategy's collectives (FSDP / ZeRO parameter gathers and gradient
reduce-scatters, DDP's bucketed all-reduce), NCCL collectives at the communicator's full
channel count. Left out, each for a stated reason: PyTorch's async TP (its SymmetricMemory
micro-pipeline moves the shards with copy-engine copies, not SM kernels), CP's ring
send/receive (NCCL point-to-point runs on a few channels per peer), Transformer Engine's
userbuffers TP overlap (its SM count is a per-recipe setting), and the cross-island sync.
"""

from __future__ import annotations

import math

from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["overlap_slowdown_s", "nccl_channels", "nccl_sm_share"]


def nccl_channels(compute_capability: Array, multi_node: Array) -> Array:
    """NCCL's ring channels on an NVSwitch node of this compute capability, ``multi_node``
    where the communicator spans nodes (module docstring): 6 before Ampere, 12 on Ampere and on
    Hopper in one node, 24 on Hopper across nodes, 16 from Blackwell; 0 (nothing charged) where
    the compute capability is unknown (0: a GPU not NVIDIA's, or a profile that does not say)."""
    cc = ops.as_float(compute_capability)
    if type(cc) is float and type(multi_node) is bool:  # one plan: the same choices as plain ifs
        one = 16.0 if cc >= 10.0 else (12.0 if cc >= 8.0 else (6.0 if cc > 0.0 else 0.0))
        return 2.0 * one if (cc >= 9.0) & multi_node & (one < 16.0) else one
    base = ops.where(cc >= 10.0, 16.0, ops.where(cc >= 8.0, 12.0, ops.where(cc > 0.0, 6.0, 0.0)))
    return ops.where((cc >= 9.0) & ops.as_bool(multi_node) & (base < 16.0), 2.0 * base, base)


def nccl_sm_share(sm_count: Array, channels: Array) -> Array:
    """The share of the GPU's SMs a full-channel NCCL collective holds: ``channels / sm_count``
    (at most 1; 0 where the SM count is unknown)."""
    sms = ops.as_float(sm_count)
    if type(sms) is float and type(channels) is float:  # one plan: ops written out
        d = sms if sms >= 1.0 else (1.0 if sms < 1.0 else math.nan)
        x = channels / d
        return (x if x <= 1.0 else (1.0 if x > 1.0 else math.nan)) if sms > 0 else 0.0
    return ops.where(sms > 0, ops.minimum(channels / ops.maximum(sms, 1.0), 1.0), 0.0)


def overlap_slowdown_s(hidden_s: Array, sm_count: Array, channels: Array) -> Array:
    """Seconds a step loses to ``hidden_s`` seconds of collectives overlapped with compute:
    ``hidden_s x channels / sm_count`` (module docstring)."""
    return hidden_s * nccl_sm_share(sm_count, channels)
