"""The caching allocator's reserved peak (shardmeter/model/allocator.py) against PyTorch's own rules,
c10/cuda/CUDACachingAllocator.cpp @ 001074d25084fdb87a799823e395a50f5ec044d3:

    constexpr size_t kMinBlockSize = 512; // all sizes are rounded to at least 512 bytes
    constexpr size_t kSmallSize = 1048576; // largest "small" allocation is 1 MiB
    constexpr size_t kSmallBuffer = 2097152; // "small" allocations are packed in 2 MiB blocks
    constexpr size_t kMinLargeAlloc = 10485760; // allocations between 1 and 10 MiB may use kLargeBuffer
    constexpr size_t kRoundLarge = 2097152; // round up large allocations to 2 MiB
    const size_t kLargeBuffer = 20971520; // "large" allocations may be packed in 20 MiB blocks

    static size_t get_allocation_size(size_t size) {
      if (size <= kSmallSize) { return kSmallBuffer; }
      else if (size < kMinLargeAlloc) { return kLargeBuffer; }
      else { return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge); } }

    bool should_split(const Block* block, size_t size) {
      size_t remaining = block->size - size;
      if (block->pool->is_small || CUDAAllocatorConfig::expandable_segments()) {
        return remaining >= kMinBlockSize; }
      else { return (size < CUDAAllocatorConfig::max_split_size()) && (remaining > kSmallSize); } }
"""

from __future__ import annotations

import os

import attrs
import numpy as np
import pytest

import shardmeter
from shardmeter.exchange import ShardInputs, StateBytes
from shardmeter.model import allocator as al
from shardmeter.validate.run import bundled_validation_dir

MIB = 2**20
TT_8B = os.path.join(bundled_validation_dir(), "torchtitan", "torchtitan-202412-llama3-8b-n8-fsdp.toml")


def test_the_constants_are_pytorchs():
    assert (al.K_MIN_BLOCK, al.K_SMALL_SIZE, al.K_SMALL_BUFFER) == (512, 1048576, 2097152)
    assert (al.K_MIN_LARGE_ALLOC, al.K_ROUND_LARGE, al.K_LARGE_BUFFER) == (10485760, 2097152, 20971520)


@pytest.mark.parametrize(
    "request_bytes, block",
    [(1.0, 512.0), (512.0, 512.0), (513.0, 1024.0), (3 * MIB + 1.0, 3 * MIB + 512.0)],
)
def test_round_size_is_512_byte_blocks(request_bytes, block):
    assert al.block_bytes(request_bytes) == block


@pytest.mark.parametrize(
    "block, segment",
    [
        (512.0, 2 * MIB),  # small pool: packed in 2 MiB
        (1.0 * MIB, 2 * MIB),  # size <= kSmallSize
        (1.0 * MIB + 512, 20 * MIB),  # 1-10 MiB: one 20 MiB block, split
        (10.0 * MIB - 512, 20 * MIB),
        (10.0 * MIB, 10 * MIB),  # >= kMinLargeAlloc: rounded to 2 MiB
        (10.0 * MIB + 512, 12 * MIB),
    ],
)
def test_get_allocation_size(block, segment):
    assert al.segment_bytes(block) == segment


def test_a_large_tensor_holds_its_rounded_segment_unless_segments_expand():
    # 33 MiB + 1 byte: a 34 MiB segment; the 1 MiB - 512 rest stays with the block
    # (remaining > kSmallSize is false) without expandable segments; with them the rest is split
    # off at 512 bytes and reused
    req = 33.0 * MIB + 1.0
    assert al.held_bytes(req, False) == 34 * MIB
    assert al.held_bytes(req, True) == 33 * MIB + 512
    # 1-10 MiB requests share their 20 MiB block: only the 512-byte rounding is theirs
    assert al.held_bytes(3.0 * MIB + 1.0, False) == 3 * MIB + 512


def test_vectorised_and_scalar_paths_agree():
    req = np.array([1.0, 700.0, 2.0 * MIB, 11.0 * MIB + 3.0, 64.0 * MIB])
    for exp in (False, True):
        arr = al.held_bytes(req, exp)
        assert [al.held_bytes(float(r), exp) for r in req] == pytest.approx(list(arr), rel=0, abs=0)


def _shard(params_per_layer: float, layers: float) -> ShardInputs:
    zero = 0.0
    return ShardInputs(
        params_per_gpu=params_per_layer * layers,
        params_per_layer=params_per_layer,
        layers_per_stage=layers,
        weight_bytes=2.0,
        grad_bytes=4.0,
        optimizer_bytes_per_param=12.0,
        tp=1.0,
        dp=8.0,
        cp=1.0,
        domain_gpus=8.0,
        tier_gpus=(8.0,),
        tier_bytes_s=(1.0,),
        tier_latency_s=(zero,),
    )


def test_fsdp_state_rounding_counted_by_hand():
    """A gelu layer of 6 matrices (4 attention, 2 MLP) and 6 x 10.5 MiB / 4 bytes parameters per
    shard: each matrix's fp32 tensors are 10.5 MiB, held in 12 MiB segments (1.5 MiB each left,
    split off but reserved). FSDP2 keeps per parameter its shard and Adam's 12 / 4 = 3 fp32
    states: 4 tensors a matrix, 24 a layer; the gradients are one reduce-scatter output per layer
    (6 x 10.5 = 63 MiB in a 64 MiB segment, the 1 MiB rest kept with the block). Two layers:
    48 x 1.5 MiB + 2 x 1 MiB = 74 MiB. FSDP2's all-gather output of one layer sits in the
    copy-in stream's pool: 6 x 10.5 MiB / 4 x 8 shards parameters x 2 bytes = 252 MiB."""
    est = shardmeter.Estimator()
    inp = est.inputs(est.load(TT_8B))[0]
    ms, tr = inp.model, inp.training
    ms = attrs.evolve(ms, swiglu=np.zeros_like(ms.swiglu))
    tr = attrs.evolve(tr, expandable_segments=np.zeros_like(tr.expandable_segments))
    matrix_elems = 10.5 * MIB / 4.0
    shards = 8.0
    p_layer = 6 * matrix_elems * shards
    shard = _shard(p_layer, 2.0)
    p_sharded = shard.params_per_gpu / shards
    state = StateBytes(
        weights=p_sharded * 2.0, gradients=p_sharded * 4.0, optimizer=p_sharded * 12.0, param_shards=shards
    )
    got = al.stage_reserved_bytes(ms, tr, shard, state, 0.0)
    assert np.all(got == pytest.approx((74 + 252) * MIB, rel=1e-12))
    # with expandable segments: 512-byte rounding only (10.5 MiB is a multiple), one 20 MiB
    # page per stream (the default and FSDP's 3) and the copy-in pool
    tr_e = attrs.evolve(tr, expandable_segments=np.ones_like(tr.expandable_segments))
    assert np.all(
        al.stage_reserved_bytes(ms, tr_e, shard, state, 0.0) == pytest.approx((4 * 20 + 252) * MIB, rel=1e-12)
    )
    # unsharded parameters (DDP, Megatron's contiguous buffers): nothing added
    flat = StateBytes(weights=1.0, gradients=1.0, optimizer=1.0, param_shards=1.0)
    assert np.all(al.stage_reserved_bytes(ms, tr, shard, flat, 5.0) == 5.0)


def test_torchtitan_runs_its_allocator_with_expandable_segments_since_a5e57e4a():
    from shardmeter.plugins.frameworks.torchtitan import EXPANDABLE_SEGMENTS, TorchTitan

    assert EXPANDABLE_SEGMENTS.commit.startswith("a5e57e4a") and EXPANDABLE_SEGMENTS.since == "2024-10-22"
    part = TorchTitan(name="torchtitan-test")
    before = [v for v in part.versions if v.since < "2024-10-22"]
    assert before and not part.expandable_segments(before[-1])
    assert part.expandable_segments(EXPANDABLE_SEGMENTS) and part.expandable_segments()


def test_reserved_is_reported_never_below_allocated_and_decides_feasibility():
    r = shardmeter.estimate(TT_8B)
    assert r.feasible
    # torchtitan 2024-12, FSDP over 8 ranks, expandable segments: one Llama 3 8B layer's bf16
    # all-gather output in the copy-in stream's pool (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x
    # 14336 = 218.1 M parameters, norms aside), the four streams' last pages, and under 512 bytes
    # for each of 32 layers x (7 matrices x 4 fp32 tensors + 1 gradient buffer)
    layer = (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) * 2
    extra = (r.memory_reserved_gb - r.memory_per_gpu_gb) * 1e9
    assert layer + 4 * 20 * MIB <= extra < layer + 4 * 20 * MIB + 512 * 32 * (7 * 4 + 1) + 2 * 2 * 4096
    # a GPU between the allocated and the reserved figure cannot hold the plan
    mid = (r.memory_per_gpu_gb + r.memory_reserved_gb) / 2
    tight = shardmeter.estimate(TT_8B, overrides=[f'island[0].gpu={{name="h100-sxm", memory_gb={mid}}}'])
    assert not tight.feasible
    assert any(f"needs {r.memory_reserved_gb:.1f} GB" in why for why in tight.reasons), tight.reasons
