"""MoE model state is sharded over the expert-data-parallel group (issue 22, item 3), checked
against Megatron-LM's own estimate, ``compute_weight_and_optimizer_memory`` in
megatron/training/theoretical_memory_usage.py, EP/ETP-aware since NVIDIA/Megatron-LM#4687
(a7c9e8c44ae89bea013a085ef33ab52a9b7a19b4, 2026-05-14; unchanged for these shapes at
d98e8a64ddf34856e74b24714e3bedb2f5a39553). Its rule, quoted:

    expert_tensor_model_pipeline_parallel_size = (
        expert_tensor_parallel_size * expert_model_parallel_size * args.pipeline_model_parallel_size)
    expert_data_parallel_size = args.world_size // expert_tensor_model_pipeline_parallel_size
    ...
    def num_bytes_per_parameter(data_parallel_size):
        return 18 if not args.use_distributed_optimizer else 6 + (12 / data_parallel_size)

    weight_and_optimizer_memory = (
        (tp_sharded_params_on_most_loaded_shard + replicated_params_on_most_loaded_shard)
        * num_bytes_per_parameter(args.data_parallel_size)
        + expert_sharded_params_on_most_loaded_shard
        * num_bytes_per_parameter(expert_data_parallel_size))

:func:`megatron_state` reimplements it for non-MLA models (GQA, SwiGLU, RMSNorm, shared experts,
leading dense layers, no MTP). Megatron's 6 bytes are the bf16 weight and its fp32 main gradient;
the 12 / dp the distributed optimizer's fp32 master, m and v. The test compares the model's
``optimizer`` part with the 12 / dp terms and its ``weights`` with 2 bytes of the most loaded
shard's parameters (the gradient dtype is a separate mechanism)."""

from __future__ import annotations

import pytest

import shardmeter

GB = 1e9


def megatron_params(m: dict, tp: int, pp: int, ep: int, etp: int | None = None) -> tuple[float, float]:
    """``(dense, expert)`` parameters on Megatron's most loaded shard (the first stage, with the
    embedding), as ``compute_weight_and_optimizer_memory`` splits them (``etp``: the experts'
    tensor parallelism, default tp)."""
    etp = tp if etp is None else etp
    h, heads, kv, ffn = m["hidden"], m["heads"], m["kv_heads"], m["ffn_hidden"]
    moe_ffn, experts, shared = m.get("moe_ffn_hidden", ffn), m["experts"], m.get("shared_experts", 0)
    layers, dense_layers = m["layers"], m.get("dense_layers", 0)
    kv_channels = h // heads
    glu = 3 / 2  # gated_linear_multiplier (swiglu)
    query_ratio = kv_channels * heads / h
    attention = 2 * h * h * ((1 + kv / heads) * query_ratio)
    dense_mlp = 2 * h * ffn * glu
    shared_mlp = 2 * h * moe_ffn * shared * glu  # moe_shared_expert_intermediate_size
    routed = 2 * h * moe_ffn * experts * glu
    norms = 2 * h * 1  # RMSNorm: norm_size 1
    router = h * experts
    n_moe = layers - dense_layers
    tp_sharded = (attention + dense_mlp) * dense_layers + (attention + shared_mlp) * n_moe
    replicated = norms * dense_layers + (norms + router) * n_moe + h
    expert_sharded = routed * n_moe
    embedding = h * m["vocab"]
    tp_shard = (tp_sharded / pp + embedding) / tp
    if pp == 1:  # untie_embeddings_and_output_weights
        tp_shard += embedding / tp
    return tp_shard + replicated / pp, expert_sharded / pp / (etp * ep)


def megatron_state(
    m: dict, tp: int, pp: int, dp: int, ep: int, etp: int | None = None
) -> tuple[float, float]:
    """``(weights, optimizer)`` bytes of the most loaded shard with the distributed optimizer:
    2 bytes per parameter, and 12 / dp (dense) or 12 / expert_data_parallel_size (experts)."""
    etp = tp if etp is None else etp
    dense, expert = megatron_params(m, tp, pp, ep, etp)
    world = tp * pp * dp
    assert world % (etp * ep * pp) == 0
    edp = world // (etp * ep * pp)
    return 2 * (dense + expert), 12 * dense / dp + 12 * expert / edp


MIXTRAL_8X7B = dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=32000, experts=8)
MIXTRAL_8X22B = dict(layers=56, hidden=6144, heads=48, kv_heads=8, ffn_hidden=16384, vocab=32768, experts=8)
#: Qwen3-30B-A3B's shapes (Qwen/Qwen3-30B-A3B config.json), head_dim = hidden / heads here
QWEN3_30B = dict(
    layers=48,
    hidden=2048,
    heads=32,
    kv_heads=4,
    ffn_hidden=6144,
    moe_ffn_hidden=768,
    vocab=151936,
    experts=128,
)
#: DeepSeek-V3's MoE layer (one shared expert, 256 routed ones 2048 wide) with standard attention
#: (MLA is another count), in 64 MoE layers, so that the pipeline stages hold the same layers:
#: Megatron's estimate takes the layers / pp average (its 3 dense layers spread over every
#: stage), the model the busiest stage
DSV3_GQA = dict(
    layers=64,
    hidden=7168,
    heads=128,
    kv_heads=128,
    ffn_hidden=18432,
    moe_ffn_hidden=2048,
    shared_experts=1,
    vocab=129280,
    experts=256,
)

#: (model, tp, pp, dp, ep): expert parallelism from none to all of dp
LAYOUTS = [
    (MIXTRAL_8X7B, 1, 1, 8, 1),
    (MIXTRAL_8X7B, 1, 1, 8, 8),
    (MIXTRAL_8X7B, 2, 4, 16, 8),
    (MIXTRAL_8X7B, 4, 1, 16, 4),
    (MIXTRAL_8X22B, 2, 8, 16, 8),
    (MIXTRAL_8X22B, 4, 4, 32, 4),
    (QWEN3_30B, 1, 2, 64, 32),
    (QWEN3_30B, 2, 1, 32, 16),
    (DSV3_GQA, 1, 16, 64, 64),
    (DSV3_GQA, 2, 8, 128, 64),
]


def _scenario(m: dict, tp: int, pp: int, dp: int, ep: int, etp: int | None = None) -> dict:
    model = {k: v for k, v in m.items()}
    model.update(ffn="swiglu", seq_len=4096, experts_per_token=2)
    gpus = tp * pp * dp
    return {
        "model": model,
        "training": {"global_batch": dp * pp * 4, "micro_batch": 1, "precision": "bf16", "recompute": "full"},
        "island": [
            {"gpu": {"name": "h100-sxm", "memory_gb": 10000.0}, "nodes": gpus // 8, "gpus_per_node": 8}
        ],
        "parallelism": {
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "ep": ep,
            "sharding": "zero1",
            "sequence_parallel": tp > 1,
            **({} if etp is None else {"expert_tp": etp}),
        },
    }


def _id(layout: tuple) -> str:
    m, tp, pp, dp, ep = layout
    return f"L{m['layers']}h{m['hidden']}E{m['experts']}-tp{tp}pp{pp}dp{dp}ep{ep}"


@pytest.mark.parametrize("layout", LAYOUTS, ids=_id)
def test_moe_state_matches_megatrons_theoretical_memory(layout):
    m, tp, pp, dp, ep = layout
    r = shardmeter.estimate(_scenario(m, tp, pp, dp, ep))
    parts = r.memory_breakdown_gb
    weights, optimizer = megatron_state(m, tp, pp, dp, ep)
    assert parts["optimizer"] * GB == pytest.approx(optimizer, rel=0.02)
    assert parts["weights"] * GB == pytest.approx(weights, rel=0.02)


def test_expert_state_grows_with_ep_at_a_fixed_dp():
    """More expert parallelism leaves fewer replicas of each expert to shard its optimizer state
    over (dp / ep): at dp 64 the routed experts' share per GPU is the same at any ep (E / ep of
    them, over 64 / ep ranks), not divided by ep once more."""
    m = DSV3_GQA
    got = [
        shardmeter.estimate(_scenario(m, 1, 16, 64, ep)).memory_breakdown_gb["optimizer"] for ep in (8, 64)
    ]
    _, expert8 = megatron_params(m, 1, 16, 8)
    _, expert64 = megatron_params(m, 1, 16, 64)
    assert expert8 == pytest.approx(8 * expert64)
    assert got[1] == pytest.approx(got[0], rel=0.02)


#: (model, tp, pp, dp, ep, etp): Megatron-Core's MoE parallel folding, the experts' ``etp x ep``
#: laid over a stage's ``tp x dp`` ranks, ``ep`` above ``dp`` (Qwen3-235B's Megatron-Bridge
#: recipe: tp 4, cp 2, ep 8, etp 1) and the experts' TP apart from the attention's
FOLDED = [
    (QWEN3_30B, 4, 2, 8, 16, 1),
    (QWEN3_30B, 2, 1, 4, 8, 1),
    (MIXTRAL_8X22B, 8, 4, 2, 8, 2),
    (MIXTRAL_8X7B, 4, 1, 2, 8, 1),
    (DSV3_GQA, 2, 8, 64, 64, 1),
]


@pytest.mark.parametrize("layout", FOLDED, ids=lambda t: _id(t[:5]) + f"etp{t[5]}")
def test_folded_expert_state_matches_megatrons_theoretical_memory(layout):
    m, tp, pp, dp, ep, etp = layout
    r = shardmeter.estimate(_scenario(m, tp, pp, dp, ep, etp))
    assert r.feasible, r.reasons
    weights, optimizer = megatron_state(m, tp, pp, dp, ep, etp)
    assert r.memory_breakdown_gb["optimizer"] * GB == pytest.approx(optimizer, rel=0.02)
    assert r.memory_breakdown_gb["weights"] * GB == pytest.approx(weights, rel=0.02)


def test_an_expert_grid_that_does_not_divide_the_stage_is_refused_as_megatron_refuses_it():
    """initialize_model_parallel (megatron/core/parallel_state.py @d98e8a64) raises "world_size
    (W) is not divisible by expert_tensor_model_pipeline_parallel size (etp x ep x pp)"."""
    ok = shardmeter.estimate(_scenario(QWEN3_30B, 4, 2, 8, 32, 1))  # 1 x 32 x 2 = 64 = world
    assert ok.feasible, ok.reasons
    bad = shardmeter.estimate(_scenario(QWEN3_30B, 4, 2, 8, 32, 2))  # 2 x 32 x 2 = 128 > 64
    assert not bad.feasible
    assert any("expert_tp x ep (64) a stage's tp x cp x dp ranks (32" in r for r in bad.reasons), bad.reasons
