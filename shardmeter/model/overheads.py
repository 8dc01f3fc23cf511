"""What a training process holds on its GPU besides its tensors (the report's ``other``): the
CUDA context, NCCL's buffers for each communicator, and cuBLAS's workspaces. The first two are
outside PyTorch's caching allocator (``max_memory_allocated`` and ``max_memory_reserved`` leave
them out: :func:`outside_allocator_bytes`); the cuBLAS workspaces are allocated through it.

* CUDA context: :data:`CUDA_CONTEXT_BYTES`, about 0.5 GB with lazily loaded modules (the
  default on Linux since CUDA 12.2, ``CUDA_MODULE_LOADING=LAZY``; the HF Ultra-Scale
  Playbook's "1-2 GB" for CUDA kernels is without it). An estimate, not a measurement: no
  bundled source states it for these stacks.
* NCCL: each connection of each channel holds one buffer per protocol (``computeBuffSizes``,
  src/init.cc, NVIDIA/nccl@5067397c): ``DEFAULT_LL_BUFFSIZE = NCCL_LL_LINES_PER_THREAD x
  NCCL_LL_MAX_NTHREADS x NCCL_STEPS x sizeof(ncclLLFifoLine)`` = 8 x 512 x 8 x 16 = 512 KiB,
  ``DEFAULT_LL128_BUFFSIZE = NCCL_LL128_ELEMS_PER_THREAD x NCCL_LL128_MAX_NTHREADS x NCCL_STEPS
  x sizeof(uint64_t)`` = 120 x 640 x 8 x 8 = 4.6875 MiB and ``DEFAULT_BUFFSIZE`` (Simple) =
  4 MiB (src/include/device.h for the constants): :data:`NCCL_CONNECTION_BYTES`, 9,633,792
  bytes. A ring connects each rank to its neighbour on every channel; with
  :data:`NCCL_CHANNELS` channels (32, what NCCL builds on 8-GPU NVSwitch nodes; ``MAXCHANNELS``
  = 64 caps it) a communicator holds 308 MB (:func:`nccl_communicator_bytes`). NCCL allocates
  them with ``cudaMalloc`` / ``cuMem*``, not through PyTorch.
* cuBLAS: PyTorch gives each (handle, stream) pair a workspace from its caching allocator
  (``getNewWorkspace``: ``CUDACachingAllocator::get()->allocate(getChosenWorkspaceSize())``)
  of ``":4096:2:16:8 default, 32MiB for Hopper"`` (``parseChosenWorkspaceSize``: ``sm90 ?
  4096 x 8 x 1024 : 4096 x 1024 x 2 + 16 x 1024 x 8``) and a cuBLASLt workspace of 1 MiB
  (``parseCUDABlasLtWorkspaceSize``: "default size in KiB according to #73328" = 1024),
  aten/src/ATen/cuda/CublasHandlePool.cpp, pytorch/pytorch@26a39059. Handles are per thread
  (``thread_local ... myPoolWindow``), and autograd runs the backward pass on its own device
  thread: :data:`CUBLAS_HANDLES` = 2 (the forward's and the backward's) on the compute stream.
"""

from __future__ import annotations

from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "NCCL_CONNECTION_BYTES",
    "NCCL_CHANNELS",
    "CUBLAS_HANDLES",
    "CUBLASLT_WORKSPACE_BYTES",
    "nccl_communicator_bytes",
    "communicators",
    "cublas_workspace_bytes",
    "outside_allocator_bytes",
    "overhead_bytes",
]

#: The CUDA context and its lazily loaded kernels, bytes (module docstring: an estimate).
CUDA_CONTEXT_BYTES = 0.5e9
_NCCL_STEPS = 8
_LL = 8 * 512 * _NCCL_STEPS * 16
_LL128 = 120 * 640 * _NCCL_STEPS * 8
_SIMPLE = 1 << 22
#: NCCL's buffers for one connection of one channel: LL, LL128 and Simple, bytes.
NCCL_CONNECTION_BYTES = float(_LL + _LL128 + _SIMPLE)
#: Channels of a communicator (module docstring).
NCCL_CHANNELS = 32.0
#: cuBLAS handles that run GEMMs on the compute stream: the forward's thread and autograd's.
CUBLAS_HANDLES = 2.0
#: PyTorch's cuBLASLt workspace per handle and stream, bytes (1024 KiB).
CUBLASLT_WORKSPACE_BYTES = 1024.0 * 1024.0


def nccl_communicator_bytes() -> float:
    """NCCL's buffers of one communicator on one rank: a ring connection per channel."""
    return NCCL_CHANNELS * NCCL_CONNECTION_BYTES


def communicators(tp: Array, cp: Array, dp: Array, pp: Array, ep: Array) -> Array:
    """The NCCL communicators one rank uses: one per parallel group of more than one rank
    (tensor, context, data x context for the gradients, pipeline for its sends, expert)."""
    one = ops.as_float

    def n(x: Array) -> Array:
        return ops.where(one(x) > 1, 1.0, 0.0)

    groups = (tp, cp, dp * cp, pp, ep)
    if set(map(type, groups)) <= ops.ONLY_FLOAT:  # one plan: each group's condition a plain if
        t, c, d, p, e = groups
        return (
            (1.0 if t > 1 else 0.0)
            + (1.0 if c > 1 else 0.0)
            + (1.0 if d > 1 else 0.0)
            + (1.0 if p > 1 else 0.0)
            + (1.0 if e > 1 else 0.0)
        )
    return n(tp) + n(cp) + n(dp * cp) + n(pp) + n(ep)


def cublas_workspace_bytes(compute_capability: Array) -> Array:
    """PyTorch's cuBLAS and cuBLASLt workspaces on the compute stream, bytes: 32 MiB per
    handle on sm90 (Hopper), else 8 MiB + 128 KiB, plus 1 MiB of cuBLASLt's each."""
    cc = ops.as_float(compute_capability)
    sm90 = (cc >= 8.95) & (cc < 9.05)
    per = ops.where(sm90, 4096.0 * 8 * 1024, 4096.0 * 1024 * 2 + 16.0 * 1024 * 8)
    return CUBLAS_HANDLES * (per + CUBLASLT_WORKSPACE_BYTES)


def outside_allocator_bytes(tp: Array, cp: Array, dp: Array, pp: Array, ep: Array) -> Array:
    """What the process holds outside PyTorch's caching allocator: the CUDA context and the
    NCCL buffers of its communicators."""
    return CUDA_CONTEXT_BYTES + communicators(tp, cp, dp, pp, ep) * nccl_communicator_bytes()


def overhead_bytes(tp: Array, cp: Array, dp: Array, pp: Array, ep: Array, compute_capability: Array) -> Array:
    """The report's ``other``: :func:`outside_allocator_bytes` and the cuBLAS workspaces."""
    return outside_allocator_bytes(tp, cp, dp, pp, ep) + cublas_workspace_bytes(compute_capability)
