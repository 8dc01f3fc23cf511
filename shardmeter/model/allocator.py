"""What PyTorch's CUDA caching allocator reserves at the step's peak (``memory_reserved_gb``,
``torch.cuda.max_memory_reserved``) from the memory the step holds (:mod:`.memory`).

Every rule here is the allocator's own, c10/cuda/CUDACachingAllocator.cpp in pytorch/pytorch
@ 001074d25084fdb87a799823e395a50f5ec044d3 (quoted in each function):

* a request is rounded to 512 bytes (``round_size``, ``kMinBlockSize``); a request of at most
  1 MiB goes to the small pool, packed into 2 MiB segments, a larger one to the large pool
  (``get_pool``, ``kSmallSize``, ``kSmallBuffer``);
* without a cached block that fits, the large pool takes a new segment from ``cudaMalloc``:
  20 MiB for a request under 10 MiB (split, the rest shared by later 1-10 MiB requests),
  else the request rounded up to 2 MiB (``get_allocation_size``, ``kLargeBuffer``,
  ``kMinLargeAlloc``, ``kRoundLarge``). The rest of that segment is split off as a free block
  only when more than 1 MiB is left (``should_split``: ``remaining > kSmallSize``); a rest of
  at most 1 MiB stays with the block and counts as allocated. With ``expandable_segments:True``
  each stream has one segment that grows by 20 MiB pages of the large pool and every rest of
  512 bytes or more is split off (``should_split``: ``remaining >= kMinBlockSize``), so
  persistent tensors tile the segment and its last page is the only slack;
* a freed block is cached for later requests on the same stream ("Once freed, blocks can be
  re-allocated on the same stream, but not on any other stream"), best fit, and split; FSDP2's
  all-gather output is allocated on its copy-in stream, so one layer's gathered parameters stay
  reserved there beside those the compute stream holds (:func:`copy_in_pool_bytes`). Were a
  step's requests the same in size and order every micro-batch and step, each would find the
  cached block its predecessor freed and the reserved high-water mark would be the allocated
  peak plus the rounding of the blocks alive at it (:func:`stage_required_bytes`); they are
  not quite, which is the fragmentation below.

What is outside the allocator (the CUDA context, which the report's ``other`` holds) is in
:func:`stage_required_bytes` as it is in ``memory_per_gpu_gb``, so the reserved prediction is never
below the allocated one (SCENARIO.md: "``memory_per_gpu_gb`` plus fragmentation and cached
blocks"); torchtitan's logged ``max_memory_reserved`` leaves it out (about 1 GB on 50-90 GB).

Fragmentation (:func:`fragmentation_bytes`). The requests do not repeat exactly: a step allocates
and frees, in another order than it allocated them, blocks of many sizes (each layer's saved and
recomputed activations, freed in backward in the reverse order of the forward; the loss's
logit-sized transients; FSDP's per-layer all-gather outputs and, under a pipeline, the stage it
keeps unsharded and its gradient accumulators until the last backward), and a freed block is
reused only by a request it fits, on its own stream. So the segments (or, with expandable
segments, the mapped pages) stay above the allocated peak by a share of those bytes, the
*churn*. That share, :data:`FRAGMENTATION`, is not in the allocator's code (it depends on the
program's sizes and order); it is one physical parameter, fitted once over the bundled runs that
report ``max_memory_reserved`` by ``tools/fit_fragmentation.py``, which prints its
leave-one-source-group-out errors. The persistent state (sharded weights, gradients and
optimizer states, allocated once) churns nothing.

The cap (:func:`stage_reserved_bytes`): the allocator reserves no more than the GPU has. When a
``cudaMalloc`` fails it frees every cached block that is not in use and retries (``malloc``:
``release_available_cached_blocks(params, context)`` ... ``|| (release_cached_blocks(context) &&
alloc_block(params, true, context, lock))``), so cached free memory never fails a plan and the
reserved peak of a plan that fits is at most the GPU's memory. Feasibility therefore compares
:func:`stage_required_bytes` (what the step must hold: the allocated peak plus the rounding of its
blocks, which no retry gives back) with the GPU's memory; the reported reserved peak is that plus
the fragmentation, capped at the GPU's memory, and never below what is required.

Measured against the 30 bundled torchtitan / torchao runs that log ``max_memory_reserved``
(``tools/memory_table.py``): 28 within 10 %; under it by 16-18 % are the 2024-12 405B pipeline
rows with 8 micro-batches of 4 (1F1B) and at cp 8, whose siblings (cp 1-4, the same tokens per
micro-batch) are met within 10 %. Not counted: the rounding of the activations' blocks (the
model does not itemise the tensors a layer saves; Llama-shaped activations are multiples of
2 MiB), and a schedule's own share (interleaved pipeline chunks with partial recompute: Huang et
al. 2025, STAlloc, arXiv 2507.16274, measure up to 43 % of memory wasted by the default
allocator on such schedules, without a formula to carry over)."""

from __future__ import annotations

import math

from shardmeter.exchange import ShardInputs, StateBytes
from shardmeter.inputs.bundles import ModelShape, Training
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "K_MIN_BLOCK",
    "K_SMALL_SIZE",
    "K_SMALL_BUFFER",
    "K_LARGE_BUFFER",
    "K_MIN_LARGE_ALLOC",
    "K_ROUND_LARGE",
    "FSDP_SIDE_STREAMS",
    "block_bytes",
    "segment_bytes",
    "held_bytes",
    "state_rounding_bytes",
    "page_slack_bytes",
    "copy_in_pool_bytes",
    "FRAGMENTATION",
    "churn_bytes",
    "fragmentation_bytes",
    "stage_required_bytes",
    "stage_reserved_bytes",
]

MIB = 1048576.0
#: ``kMinBlockSize``: "all sizes are rounded to at least 512 bytes".
K_MIN_BLOCK = 512.0
#: ``kSmallSize``: "largest 'small' allocation is 1 MiB".
K_SMALL_SIZE = MIB
#: ``kSmallBuffer``: "'small' allocations are packed in 2 MiB blocks".
K_SMALL_BUFFER = 2.0 * MIB
#: ``kLargeBuffer``: "'large' allocations may be packed in 20 MiB blocks" (also the large
#: pool's page of an expandable segment).
K_LARGE_BUFFER = 20.0 * MIB
#: ``kMinLargeAlloc``: "allocations between 1 and 10 MiB may use kLargeBuffer".
K_MIN_LARGE_ALLOC = 10.0 * MIB
#: ``kRoundLarge``: "round up large allocations to 2 MiB".
K_ROUND_LARGE = 2.0 * MIB
#: Streams besides the default one on which FSDP2 allocates (``FSDPCommContext``:
#: ``all_gather_copy_in_stream``, ``all_gather_stream``, ``reduce_scatter_stream``;
#: torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py), each with its own cached blocks
#: and, with expandable segments, its own segment.
FSDP_SIDE_STREAMS = 3.0
#: The share of the step's churn (:func:`churn_bytes`) that stays reserved beyond the allocated
#: peak: fitted by ``tools/fit_fragmentation.py`` over the bundled runs reporting
#: ``max_memory_reserved`` (least squares of the relative error; it prints the fit, the
#: leave-one-source-group-out errors and the share within 10 %). Not a constant of PyTorch's.
FRAGMENTATION = 0.256


def block_bytes(request: Array) -> Array:
    """``round_size``: a request rounded up to a multiple of 512 bytes (512 at least)."""
    return ops.maximum(ops.ceil(request / K_MIN_BLOCK) * K_MIN_BLOCK, K_MIN_BLOCK)


def segment_bytes(block: Array) -> Array:
    """``get_allocation_size``: the segment ``cudaMalloc`` gives a block that no cached block
    fits: 2 MiB up to 1 MiB (small pool), 20 MiB under 10 MiB, else the block rounded up to
    2 MiB."""
    large = ops.ceil(block / K_ROUND_LARGE) * K_ROUND_LARGE
    return ops.where(
        block <= K_SMALL_SIZE, K_SMALL_BUFFER, ops.where(block < K_MIN_LARGE_ALLOC, K_LARGE_BUFFER, large)
    )


def held_bytes(request: Array, expandable: Array) -> Array:
    """Bytes one long-lived request holds of the allocator's memory (its block, and what of its
    segment no other request can use).

    * Small pool (at most 1 MiB) and 1-10 MiB requests: the block; the rest of their 2 MiB /
      20 MiB segment is split off and shared by their kind.
    * Without expandable segments, 10 MiB and more: the request's own segment, rounded up to
      2 MiB; the rest (under 2 MiB) either stays with the block (``should_split`` needs more
      than 1 MiB left) or is split off as a free block that only a request of at most its
      size, which the large pool rarely sees, can use.
    * With expandable segments: the block, every rest of 512 bytes or more being split off
      inside the stream's one growing segment."""
    block = block_bytes(request)
    own = ops.where(block < K_MIN_LARGE_ALLOC, block, segment_bytes(block))
    return ops.where(ops.as_bool(expandable), block, own)


def state_rounding_bytes(matrix_bytes: Array, tensors: Array, expandable: Array) -> Array:
    """What the allocator reserves beyond ``tensors`` long-lived tensors of ``matrix_bytes``
    each (:func:`held_bytes` less the request): the per-parameter state of FSDP2, which shards
    each parameter as its own tensor, and its fp32 gradient and optimizer states are one tensor
    per parameter each (``FSDPParam``: "sharded_param", torch.optim's per-parameter state)."""
    return tensors * (held_bytes(matrix_bytes, expandable) - matrix_bytes)


def page_slack_bytes(streams: Array, expandable: Array) -> Array:
    """With expandable segments, each stream's segment maps whole 20 MiB pages of the large
    pool ("we use 2MiB pages for our small pool and 20MiB pages for our large pool"), so its
    last page is partly unused: one page per stream is counted. Without: nothing here (the
    segments' rests are in :func:`held_bytes`)."""
    return ops.where(ops.as_bool(expandable), streams * K_LARGE_BUFFER, 0.0)


def stage_required_bytes(
    ms: ModelShape, tr: Training, shard: ShardInputs, state: StateBytes, allocated_bytes: Array
) -> Array:
    """What the allocator must hold on one GPU at the step's peak, bytes, what feasibility
    compares with the GPU's memory: the step's ``allocated_bytes`` (the
    report's ``memory_per_gpu_gb``, its ``other`` included) plus the rounding of the persistent
    state's blocks (:func:`state_rounding_bytes`) and the last page of each stream's expandable
    segment (:func:`page_slack_bytes`). Cached free blocks add nothing at the peak: a step's
    requests repeat, so each finds the block its predecessor freed, and a failing
    ``cudaMalloc`` releases the cache before it reports out of memory (module docstring).
    Read from the GPU's records: ``allocated_bytes`` (its peak),
    ``state`` (the sharding strategy's bytes) and ``shard`` (its parameters per layer and
    layers). Where parameters are sharded per parameter (``param_shards`` > 1: FSDP, ZeRO-3),
    each weight matrix of each layer (4 of attention, 2 or 3 of the MLP; a MoE layer's local
    experts counted as one MLP of their total size, so its rounding is undercounted) holds its
    shard and its optimizer states as tensors of their own (FSDP2 ``FSDPParam`` allocates each
    sharded parameter, torch.optim each state), counted as ``optimizer / 4`` fp32 tensors plus
    the parameter's, each at the layer's average matrix size; the gradients are one tensor per
    layer, the reduce-scatter output the sharded gradients are views of (``foreach_reduce``:
    ``new_sharded_grad = torch.as_strided(reduce_output, ...)``,
    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py @ 8fc2039d). Elsewhere (DDP,
    Megatron's contiguous gradient and optimizer buffers) the state is a few large buffers
    whose rounding is nothing beside them. FSDP also holds its all-gather buffer in a pool of
    its own (:func:`copy_in_pool_bytes`) and adds :data:`FSDP_SIDE_STREAMS` streams to the
    default one. ``tr.expandable_segments``: the stack's ``PYTORCH_CUDA_ALLOC_CONF``."""
    ps, exp = state.param_shards, tr.expandable_segments
    if (
        type(ps) is float
        and type(allocated_bytes) is float
        and type(exp) in ops.FLOAT_OR_BOOL
        and not ps > 1.0
    ):
        # one plan whose state is not sharded per parameter (max(ps, 1) > 1 is ps > 1, nan
        # neither): nothing held beyond the blocks (max(0, 0)), one stream's page slack; the
        # figures the general code computes and leaves unused cannot raise (shards 1 or nan)
        return allocated_bytes + 0.0 + ((1.0 + 0.0) * K_LARGE_BUFFER if exp else 0.0)
    shards = ops.maximum(ops.as_float(state.param_shards), 1.0)
    per_param = shards > 1.0
    mats = 4.0 + ops.where(ops.as_bool(ms.swiglu), 3.0, 2.0)
    layers = shard.layers_per_stage
    params_sharded = ops.maximum(shard.params_per_gpu / shards, 1.0)
    copies = 1.0 + state.optimizer / (4.0 * params_sharded)
    matrix = 4.0 * shard.params_per_layer / shards / mats
    grads = state.gradients / params_sharded * shard.params_per_layer / shards  # one layer's
    exp = tr.expandable_segments

    def held_per_param() -> Array:
        """The per-parameter state's rounding and FSDP's all-gather pool."""
        rounding = state_rounding_bytes(matrix, layers * mats * copies, exp) + state_rounding_bytes(
            grads, layers, exp
        )
        return rounding + copy_in_pool_bytes(shard)

    streams = 1.0 + ops.where(per_param, FSDP_SIDE_STREAMS, 0.0)
    held_in = (matrix, grads, layers, copies, shard.params_per_layer, shard.param_gather_bytes, exp)
    if type(per_param) is bool and set(map(type, held_in)) <= ops.FLOAT_OR_BOOL:
        # one plan: its rounding only where it shards per parameter
        held = held_per_param() if per_param else 0.0
    else:
        held = ops.where(per_param, held_per_param(), 0.0)
    return allocated_bytes + ops.maximum(held, 0.0) + page_slack_bytes(streams, exp)


def churn_bytes(
    shard: ShardInputs, state: StateBytes, activations_bytes: Array, transient_bytes: Array
) -> Array:
    """The bytes one step allocates and frees again, bytes: the activations and the loss's
    transients, and of the sharding state what is beyond its persistent shard: the gathered
    layers (FSDP's two in flight, or the stage FSDP keeps unsharded under a pipeline) and the
    unsharded gradient accumulators (``state.weights`` and ``state.gradients`` above the
    parameters' shard ``params_per_gpu / param_shards`` in ``weight_bytes`` / ``grad_bytes``).
    The optimizer states and the sharded weights and gradients are allocated once."""
    ps = state.param_shards
    figures = (ps, shard.params_per_gpu, shard.weight_bytes, shard.grad_bytes, state.weights, state.gradients)
    if set(map(type, figures)) <= ops.ONLY_FLOAT:  # one plan: the maxima written out (nan as numpy's)
        nan = math.nan
        shards = ps if ps >= 1.0 else (1.0 if ps < 1.0 else nan)
        own = shard.params_per_gpu / shards
        x = state.weights - own * shard.weight_bytes
        y = state.gradients - own * shard.grad_bytes
        gathered = x if x >= 0.0 else (0.0 if x < 0.0 else nan)
        unsharded = y if y >= 0.0 else (0.0 if y < 0.0 else nan)
        return activations_bytes + transient_bytes + gathered + unsharded
    shards = ops.maximum(ops.as_float(state.param_shards), 1.0)
    own = shard.params_per_gpu / shards
    gathered = ops.maximum(state.weights - own * shard.weight_bytes, 0.0)
    unsharded = ops.maximum(state.gradients - own * shard.grad_bytes, 0.0)
    return activations_bytes + transient_bytes + gathered + unsharded


def fragmentation_bytes(churn: Array) -> Array:
    """What stays reserved beyond the allocated peak from the step's ``churn`` (bytes):
    :data:`FRAGMENTATION` of it (module docstring)."""
    return FRAGMENTATION * churn


def stage_reserved_bytes(required_bytes: Array, churn: Array, capacity_bytes: Array) -> Array:
    """The allocator's reserved peak on one GPU (``max_memory_reserved``, with what is outside
    the allocator as ``memory_per_gpu_gb`` has it), bytes: what is required
    (:func:`stage_required_bytes`) plus the fragmentation of the step's ``churn``
    (:func:`fragmentation_bytes`), capped at the GPU's ``capacity_bytes`` (a failing
    ``cudaMalloc`` frees the cache and retries) and never below what is required."""
    grown = required_bytes + fragmentation_bytes(churn)
    if type(grown) is float and type(required_bytes) is float and type(capacity_bytes) is float:
        # one plan: the minimum and maximum written out (nan where neither side wins, as numpy)
        nan = math.nan
        cap = grown if grown <= capacity_bytes else (capacity_bytes if capacity_bytes < grown else nan)
        return required_bytes if required_bytes >= cap else (cap if cap > required_bytes else nan)
    return ops.maximum(required_bytes, ops.minimum(grown, capacity_bytes))


def copy_in_pool_bytes(shard: ShardInputs) -> Array:
    """FSDP2's all-gather buffer, cached in a stream of its own: one layer's unsharded
    parameters in the gather dtype (``params_per_layer x param_gather_bytes``).

    ``foreach_all_gather`` allocates the all-gather output under ``with
    device_handle.stream(all_gather_copy_in_stream):`` (``all_gather_output =
    all_gather_comm.allocate((all_gather_input_numel * world_size,), ...)``), and
    ``foreach_all_gather_copy_out`` copies it into parameters allocated on the compute stream
    (``fsdp_param.alloc_all_gather_outputs()``, then ``split_with_sizes_copy``):
    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py @ 010ae4a8. The two gathered
    layers the sharding strategy counts are those compute-stream parameters (the layer
    computing and the one prefetched); the prefetched layer's all-gather output lives in the
    copy-in stream's pool, whose cached block the compute stream cannot reuse."""
    return shard.params_per_layer * shard.param_gather_bytes
