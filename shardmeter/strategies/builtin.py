"""Bundled strategies: ZeRO/FSDP sharding, pipeline schedules, island sync, a convergence model,
failure and variability models.

Registered through the ``shardmeter`` entry-point group like any third-party plugin. Each is a
behaviour part: it computes its own memory and communication terms (:mod:`.zero`,
:mod:`.schedules`, :mod:`.sync`); the core prices and composes them.
"""

from __future__ import annotations

import shardmeter
from shardmeter.strategies.convergence import DiLoCoFits
from shardmeter.strategies.failures import bundled_failure_models
from shardmeter.strategies.schedules import ClassicSchedule, DeepSpeedSchedule, InterleavedOptions
from shardmeter.strategies.sync import DiLoCo, GlobalAllReduce
from shardmeter.strategies.variability import LogNormalRanks
from shardmeter.strategies.zero import (
    DEEPSPEED_MAX_LIVE_PARAMETERS,
    DEEPSPEED_PREFETCH_PARAMETERS,
    DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
    ZeroSharding,
    ZeroThreeOptions,
)

_ZERO = "Rajbhandari et al. 2020, ZeRO (arXiv 1910.02054), Sec. 5"


@shardmeter.hookimpl
def shardmeter_sharding_strategies():
    yield ZeroSharding(
        name="none",
        description="Plain data parallelism: every replica keeps full weights, gradients and optimizer state; "
        "gradients all-reduced once per step (bucketed, overlapped with backward).",
        source="PyTorch DDP / Megatron-LM DDP",
    )
    yield ZeroSharding(
        name="zero1",
        shard_optimizer=True,
        description="ZeRO-1 / Megatron distributed optimizer: optimizer states sharded; gradients "
        "reduce-scattered, updated parameters all-gathered after the step.",
        source=_ZERO,
    )
    yield ZeroSharding(
        name="zero2",
        shard_optimizer=True,
        shard_gradients=True,
        description="ZeRO-2: optimizer states and gradients sharded.",
        source=_ZERO,
    )
    yield ZeroSharding(
        name="zero3",
        shard_optimizer=True,
        shard_gradients=True,
        shard_parameters=True,
        gather_per_layer=True,
        flat_collectives=True,
        max_live_parameters=DEEPSPEED_MAX_LIVE_PARAMETERS,
        prefetch_parameters=DEEPSPEED_PREFETCH_PARAMETERS,
        reduce_bucket_elements=DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
        regather_recompute=True,
        options=ZeroThreeOptions,
        description="DeepSpeed ZeRO-3: parameters too; all-gathered per layer in forward and backward "
        "(prefetched), and again for a full recompute's forward, gradients reduce-scattered per layer, "
        "as flat rings over the data-parallel group; fetch_sync = true: DeepSpeed before 4912e0ad7 "
        "(v0.3.13-v0.5.10), each pass hides only its own transfers.",
        source=_ZERO + "; flat collectives: Narayanan et al. 2021, Table 2 (ZeRO-3 per-GPU throughput halves "
        "as GPUs double at a fixed batch)",
    )
    yield ZeroSharding(
        name="fsdp",
        shard_optimizer=True,
        shard_gradients=True,
        shard_parameters=True,
        gather_per_layer=True,
        unsharded_under_pp=True,
        description="PyTorch FSDP FULL_SHARD (same traffic as ZeRO-3).",
        source="Zhao et al. 2023, PyTorch FSDP (arXiv 2304.11277)",
    )
    yield ZeroSharding(
        name="hsdp",
        shard_optimizer=True,
        shard_gradients=True,
        shard_parameters=True,
        gather_per_layer=True,
        unsharded_under_pp=True,
        shard_group="node",
        description="FSDP HYBRID_SHARD: full sharding inside a node, replicas across nodes "
        "(gradients all-reduced across nodes once per step).",
        source="Zhao et al. 2023, PyTorch FSDP (arXiv 2304.11277), Sec. 3.2.2",
    )


@shardmeter.hookimpl
def shardmeter_pipeline_schedules():
    yield ClassicSchedule(
        name="gpipe",
        in_flight="all",
        description="GPipe (all-forward all-backward): bubble (p-1)/m, holds all m micro-batches.",
        source="Huang et al. 2019 (GPipe); Narayanan et al. 2021, Sec. 2.2.1",
    )
    yield ClassicSchedule(
        name="1f1b",
        description="PipeDream-Flush 1F1B: bubble (p-1)/m, at most p micro-batches in flight.",
        source="Narayanan et al. 2021, Sec. 2.2.1",
    )
    yield ClassicSchedule(
        name="interleaved",
        options=InterleavedOptions,
        bubble_over_virtual=True,
        description="Interleaved 1F1B with v model chunks per GPU: bubble (p-1)/(v m), v times the p2p traffic.",
        source="Narayanan et al. 2021, Sec. 2.2.2",
    )
    yield DeepSpeedSchedule(
        name="deepspeed-1f1b",
        searched=False,
        description="DeepSpeed PipelineEngine (Megatron-DeepSpeed): non-interleaved 1F1B, bubble (p-1)/m; "
        "each send and receive a blocking instruction of its own between the compute steps (4m one-way "
        "messages on a middle stage, 2m on the first and last, plus the fill and drain); activations and "
        "gradients partitioned over TP ranks unless pipe_partitioned / grad_partitioned = false; "
        "virtual_stages > 1 infeasible.",
        source="deepspeedai/DeepSpeed deepspeed/runtime/pipe/schedule.py (TrainSchedule) and engine.py "
        "@edaa7221; runtime/config.py default_pipeline",
    )


@shardmeter.hookimpl
def shardmeter_sync_strategies():
    # The model of both lives in shardmeter/strategies/sync.py; docs/multi-island.md explains the keys.
    yield GlobalAllReduce(
        name="allreduce",
        description="One global data-parallel group across islands: gradients all-reduced every step, "
        "hierarchically (inside each island, then a ring over the islands' uplinks moving 2(I-1)/I x the "
        "gradient per uplink and paying 2(I-1) WAN latencies), bucketed and overlapped with the last "
        "backward pass; the last 25 MB bucket is always exposed.",
        source="Thakur, Rabenseifner and Gropp 2005; NCCL hierarchical rings; PyTorch DDP bucketing",
    )
    yield DiLoCo(
        name="diloco",
        description="DiLoCo: inner_steps local AdamW steps, then an outer all-reduce (ring over the islands) of "
        "the pseudo-gradients at compression_bits per element, blocking unless overlapped; the outer "
        "Nesterov optimizer keeps an fp32 momentum and an fp32 copy of the weights (8 bytes per parameter, "
        "sharded like the parameters). fragments > 1 is Streaming DiLoCo: the parameters are split into "
        "fragments exchanged in turn (payload / fragments each, staggered every inner_steps / fragments "
        "steps), each overlapped with overlap_steps inner steps (at most inner_steps / fragments). "
        "overlap_steps defaults to 0 with fragments = 1 (blocking, as INTELLECT-1 measured) and 1 otherwise.",
        source="Douillard et al. 2023 (arXiv 2311.08105); Streaming DiLoCo, Douillard et al. 2025 "
        "(arXiv 2501.18512); INTELLECT-1, Jaghouar et al. 2024 (arXiv 2412.01152)",
    )


@shardmeter.hookimpl
def shardmeter_convergence_models():
    # The model and every constant's citation live in shardmeter/strategies/convergence.py;
    # docs/convergence.md shows what it does to DiLoCo's best inner_steps.
    yield DiLoCoFits(
        name="diloco-fits",
        description="Tokens a DiLoCo-family strategy needs to reach the data-parallel loss: the DiLoCo/DP "
        "loss ratio from the joint power law in parameters N and replicas M (at H = 30), log-linear in the "
        "inner steps H (H = 1 is data-parallel; +2.9 % perplexity from H = 50 to 1000 at 150M), turned into "
        "tokens with Chinchilla's data term; compression to 4 bits, fragments and overlap under 5 steps are "
        "free. Valid for N 35M-10B, M 1-8, H 1-1000, 4-32 bits, overlap 0-4 steps.",
        source="Charles et al. 2025 (arXiv 2503.09799), Tables 7 and 10; Douillard et al. 2023 (arXiv "
        "2311.08105), H sweep; Hoffmann et al. 2022 (arXiv 2203.15556), Eq. 10; Streaming DiLoCo, Douillard "
        "et al. 2025 (arXiv 2501.18512), Table 1; OpenDiLoCo (arXiv 2407.07852); INTELLECT-1 (arXiv 2412.01152)",
    )


@shardmeter.hookimpl
def shardmeter_failure_models():
    # Every figure's citation lives in shardmeter/strategies/failures.py.
    yield from bundled_failure_models()


@shardmeter.hookimpl
def shardmeter_variability_models():
    # The order-statistics model and its defaults: shardmeter/strategies/variability.py.
    yield LogNormalRanks(
        name="lognormal",
        description="Each rank's time for a phase is log-normal around the model's figure (mean 1, CV "
        "gpu_step_cv for compute, link_cv for transfers, or sigma from a measured P90/P50); a phase ends "
        "with the slowest of its N ranks: q-quantile exp(mu + sigma Phi^-1(q^(1/N))).",
        source="David and Nagaraja, Order Statistics (3rd ed., 2003), Eq. 2.1.1; CVs: SCENARIO.md example",
    )
