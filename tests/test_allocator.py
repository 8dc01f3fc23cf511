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
    got = al.stage_required_bytes(ms, tr, shard, state, 0.0)
    assert np.all(got == pytest.approx((74 + 252) * MIB, rel=1e-12))
    # with expandable segments: 512-byte rounding only (10.5 MiB is a multiple), one 20 MiB
    # page per stream (the default and FSDP's 3) and the copy-in pool
    tr_e = attrs.evolve(tr, expandable_segments=np.ones_like(tr.expandable_segments))
    assert np.all(
        al.stage_required_bytes(ms, tr_e, shard, state, 0.0) == pytest.approx((4 * 20 + 252) * MIB, rel=1e-12)
    )
    # unsharded parameters (DDP, Megatron's contiguous buffers): nothing added
    flat = StateBytes(weights=1.0, gradients=1.0, optimizer=1.0, param_shards=1.0)
    assert np.all(al.stage_required_bytes(ms, tr, shard, flat, 5.0) == 5.0)


def test_torchtitan_runs_its_allocator_with_expandable_segments_since_a5e57e4a():
    from shardmeter.plugins.frameworks.torchtitan import EXPANDABLE_SEGMENTS, TorchTitan

    assert EXPANDABLE_SEGMENTS.commit.startswith("a5e57e4a") and EXPANDABLE_SEGMENTS.since == "2024-10-22"
    part = TorchTitan(name="torchtitan-test")
    before = [v for v in part.versions if v.since < "2024-10-22"]
    assert before and not part.expandable_segments(before[-1])
    assert part.expandable_segments(EXPANDABLE_SEGMENTS) and part.expandable_segments()


def _without_fragmentation(monkeypatch, path, overrides=()):
    """The report with :data:`~shardmeter.model.allocator.FRAGMENTATION` at 0: its reserved peak is
    then what the step requires (:func:`~shardmeter.model.allocator.stage_required_bytes`)."""
    monkeypatch.setattr(al, "FRAGMENTATION", 0.0)
    r = shardmeter.estimate(path, overrides=list(overrides))
    monkeypatch.undo()
    return r


LAYER_8B = (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) * 2  # one Llama 3 8B layer, bf16


def test_required_is_allocated_plus_rounding(monkeypatch):
    q = _without_fragmentation(monkeypatch, TT_8B)
    # torchtitan 2024-12, FSDP over 8 ranks, expandable segments: one Llama 3 8B layer's bf16
    # all-gather output in the copy-in stream's pool (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x
    # 14336 = 218.1 M parameters, norms aside), the four streams' last pages, and under 512 bytes
    # for each of 32 layers x (7 matrices x 4 fp32 tensors + 1 gradient buffer)
    extra = (q.memory_reserved_gb - q.memory_per_gpu_gb) * 1e9
    assert LAYER_8B + 4 * 20 * MIB <= extra < LAYER_8B + 4 * 20 * MIB + 512 * 32 * (7 * 4 + 1) + 2 * 2 * 4096


def test_reserved_adds_the_fragmentation_of_the_steps_churn(monkeypatch):
    """Churn of FSDP without a pipeline: the activations, the loss's transient and the two
    gathered layers (FSDP's rate limiter: the layer computing and the one prefetched; their
    norms' 64 kB aside); the sharded state churns nothing."""
    r = shardmeter.estimate(TT_8B)
    q = _without_fragmentation(monkeypatch, TT_8B)
    b = r.memory_breakdown_gb
    churn = (b["activations"] + b["transient"]) * 1e9 + 2 * LAYER_8B
    got = (r.memory_reserved_gb - q.memory_reserved_gb) * 1e9
    assert got == pytest.approx(al.FRAGMENTATION * churn, rel=2e-6)
    assert 0.0 < al.FRAGMENTATION < 1.0


def test_churn_counts_only_what_is_beyond_the_persistent_shard():
    """DDP (one shard): the state churns nothing. FSDP over 8 under a pipeline: the unsharded
    stage in bf16 (2 bytes a parameter beyond the 2 / 8 of its shard) and its fp32
    accumulators (4 bytes beyond the 4 / 8 of the sharded gradient)."""
    shard = _shard(1.0e6, 2.0)
    p = shard.params_per_gpu
    ddp = StateBytes(weights=p * 2.0, gradients=p * 4.0, optimizer=p * 12.0, param_shards=1.0)
    assert np.all(al.churn_bytes(shard, ddp, 3.0, 4.0) == pytest.approx(7.0))
    pp = StateBytes(
        weights=p * 2.0 / 8 + p * 2.0,
        gradients=p * 4.0 / 8 + p * 4.0,
        optimizer=p * 12.0 / 8,
        param_shards=8.0,
    )
    assert np.all(al.churn_bytes(shard, pp, 0.0, 0.0) == pytest.approx(p * 6.0, rel=1e-12))


def test_the_reserved_peak_is_capped_at_the_gpus_memory_and_only_what_is_required_decides(monkeypatch):
    """PyTorch frees its cache and retries before it reports out of memory, so a GPU between the
    required and the grown reserved peak holds the plan, reserving all it has; below the
    required figure the plan is infeasible, and the reason names that figure."""
    r = shardmeter.estimate(TT_8B)
    q = _without_fragmentation(monkeypatch, TT_8B)
    assert r.feasible and r.memory_reserved_gb > q.memory_reserved_gb > r.memory_per_gpu_gb
    mid = (q.memory_reserved_gb + r.memory_reserved_gb) / 2
    capped = shardmeter.estimate(TT_8B, overrides=[f'island[0].gpu={{name="h100-sxm", memory_gb={mid}}}'])
    assert capped.feasible, capped.reasons
    assert capped.memory_reserved_gb == pytest.approx(mid, rel=1e-12)
    low = (r.memory_per_gpu_gb + q.memory_reserved_gb) / 2
    tight = shardmeter.estimate(TT_8B, overrides=[f'island[0].gpu={{name="h100-sxm", memory_gb={low}}}'])
    assert not tight.feasible
    assert tight.memory_reserved_gb == pytest.approx(q.memory_reserved_gb, rel=1e-12)  # not capped below
    assert any(f"needs {q.memory_reserved_gb:.1f} GB" in why for why in tight.reasons), tight.reasons


def test_the_bundled_share_is_the_fit_of_tools_fit_fragmentation():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "fit_fragmentation", os.path.join(os.path.dirname(__file__), "..", "tools", "fit_fragmentation.py")
    )
    assert spec is not None and spec.loader is not None
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    pts = fit.points()
    assert len(pts) >= 30
    assert round(fit.fit(pts), fit.DECIMALS) == al.FRAGMENTATION
