"""Bundled software-stack profiles (``training.framework``; ``docs/frameworks.md``).

Each profile is the set of defaults its stack applies when its user writes nothing, read from
the stack's own code at a recorded commit, plus the parts that carry behaviour no key states
(``megatron-deepspeed`` names the ``deepspeed-1f1b`` schedule). Keys the scenario writes always
win; the loader notes every value a profile sets. No profile carries a speed multiplier.

Stacks change their defaults: each profile keeps a dated table of its states
(:attr:`~shardmeter.parts.FrameworkPart.versions`, one :class:`~shardmeter.parts.StackVersion`
per change or release, citing the commit and quoting its diff), and ``training.framework_version``
picks one (the newest when unset). The profiles live in :mod:`.megatron` (``megatron-lm``,
``megatron-core``, ``megatron-deepspeed``), :mod:`.torchtitan` and :mod:`.others` (``deepspeed``,
``fms-fsdp``, ``llm-foundry``); :mod:`.common` holds what they share.
"""

from __future__ import annotations

import shardmeter
from shardmeter.plugins.frameworks.common import blackwell, pre_ampere
from shardmeter.plugins.frameworks.megatron import (
    BRIDGE,
    DS,
    MLM,
    MegatronCore,
    MegatronDeepSpeed,
    MegatronLM,
)
from shardmeter.plugins.frameworks.others import FMS, LF, DeepSpeed, FmsFsdp, LlmFoundry
from shardmeter.plugins.frameworks.torchtitan import TorchTitan

__all__ = [
    "MegatronLM",
    "MegatronCore",
    "MegatronDeepSpeed",
    "DeepSpeed",
    "TorchTitan",
    "FmsFsdp",
    "LlmFoundry",
    "pre_ampere",
    "blackwell",
]

_TT = "torchtitan torchtitan/config/job_config.py@accc7027 (2025-08-30) and its history to b5bcd76c (2026-08-21)"


@shardmeter.hookimpl
def shardmeter_frameworks():
    yield MegatronLM(
        name="megatron-lm",
        description="Megatron-LM before Megatron-Core (2020-2023): materialized attention, no sequence "
        "parallelism, no distributed optimizer, gradients reduced after the backward pass; pipeline "
        "sends of 1/t per TP rank (scatter-gather, until 2023-03-23; the 1f1b and interleaved schedules).",
        source=MLM,
    )
    yield MegatronCore(
        name="megatron-core",
        description="Megatron-Core with Transformer Engine (NeMo 2, Megatron-Bridge): fused attention "
        "(unfused below sm80), sequence parallelism with TP, distributed optimizer, overlapped "
        "gradient reduction, fused kernels; TP communication overlap with tp > 1 from 2025-11-06.",
        source=BRIDGE,
    )
    yield MegatronDeepSpeed(
        name="megatron-deepspeed",
        description="Megatron-DeepSpeed: materialized attention, ZeRO-1, DeepSpeed's PipelineEngine "
        "(schedule deepspeed-1f1b), gradients reduced after the last micro-batch.",
        source=DS.format("pipe/engine.py"),
    )
    yield DeepSpeed(
        name="deepspeed",
        description="DeepSpeed engine with its config defaults: ZeRO stage 0, gradients all-reduced "
        "after the backward pass, eager PyTorch.",
        source=DS.format("zero/config.py"),
    )
    yield TorchTitan(
        name="torchtitan",
        description="torchtitan by version: FSDP2, sequence parallelism with TP, SDPA (cuDNN or "
        "FlashAttention-2) then FlexAttention, eager (compile off), every second block then per-op "
        "SAC, tensorwise then rowwise fp8, its pipeline micro-batches.",
        source=_TT,
    )
    yield FmsFsdp(
        name="fms-fsdp",
        description="IBM fms-fsdp: HSDP, no activation checkpointing, torch.compile, SDPA (FlashAttention-2).",
        source=FMS,
    )
    yield LlmFoundry(
        name="llm-foundry",
        description="MosaicML llm-foundry on Composer: FSDP FULL_SHARD, no activation checkpointing, "
        "flash-attn 2, fp8 by Transformer Engine delayed scaling.",
        source=LF,
    )
