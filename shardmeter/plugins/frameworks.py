"""Bundled software-stack profiles (``training.framework``; ``docs/frameworks.md``).

Each profile is the set of defaults its stack applies when its user writes nothing, read from
the stack's own code at a recorded commit, plus the parts that carry behaviour no key states
(``megatron-deepspeed`` names the ``deepspeed-1f1b`` schedule). Keys the scenario writes always
win; the loader notes every value a profile sets. No profile carries a speed multiplier.

Code read (the commit and date of each is in the ``why`` of every default):

* NVIDIA/Megatron-LM ``megatron/arguments.py``@d4878ef0 (2023-06-01, before Megatron-Core
  became the default path); ``--overlap-grad-reduce`` came in 2d5220a4 (2023-08-16),
  ``--use-flash-attn`` in d693034e (2022-12-08).
* NVIDIA-NeMo/Megatron-Bridge ``src/megatron/bridge/recipes/common.py``,
  ``recipes/utils/optimizer_utils.py``, ``scripts/performance/utils/utils.py``@067f987d
  (2026-08-22); NVIDIA/TransformerEngine
  ``transformer_engine/pytorch/attention/dot_product_attention/utils.py``@d0067d0d (2026-08-22).
* deepspeedai/DeepSpeed ``deepspeed/runtime/zero/config.py``, ``runtime/engine.py``,
  ``runtime/pipe/engine.py``, ``runtime/pipe/schedule.py``@edaa7221 (2026-08-22).
* pytorch/torchtitan ``torchtitan/config/job_config.py`` and
  ``torchtitan/distributed/activation_checkpoint.py``@accc7027 (2025-08-30).
* foundation-model-stack/fms-fsdp ``fms_fsdp/config/training.py`` and
  ``fms_fsdp/policies/ac_handler.py``@5a296afe (2025-07-10).
* mosaicml/llm-foundry ``scripts/train/yamls/pretrain/mpt-*.yaml`` and
  ``scripts/train/benchmarking/submit_benchmarks.py``@5e85bd62 (2024-01-06, the commit of the
  published benchmark tables).
* SDPA's flash backend is FlashAttention-2; cuDNN attention is opt-in since pytorch/pytorch
  #138522 (torch 2.5), so SDPA on Hopper in 2024-2025 means FlashAttention-2.
* pytorch/torchtitan ``torchtitan/models/attention.py``@accc7027: ``ScaledDotProductAttention``
  puts ``SDPBackend.CUDNN_ATTENTION`` first when ``has_cuda_capability(10, 0)`` (Blackwell),
  else FLASH, EFFICIENT, MATH (since 3b85aa31, 2025-05-14, "Use cudnn backend on B200"); its
  op save list (``_save_list``, ``distributed/activation_checkpoint.py``@accc7027; the same set
  in ``models/llama3/infra/parallelize.py``@6fc499f6) names the flash and efficient SDPA ops
  but not ``_scaled_dot_product_cudnn_attention``, added only in b39377f9 (2025-12-01, "add all
  SDPA backends to op_sac_save_list").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

import shardmeter
from shardmeter.parts import FrameworkDefaults, FrameworkPart
from shardmeter.records import HardwareProfile

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

_MLM = "Megatron-LM megatron/arguments.py@d4878ef0 (2023-06-01)"
_BRIDGE = "Megatron-Bridge src/megatron/bridge/recipes/common.py@067f987d"
_DS = "DeepSpeed deepspeed/runtime/{}@edaa7221"
_TT = "torchtitan torchtitan/config/job_config.py@accc7027 (2025-08-30)"
_FMS = "fms-fsdp fms_fsdp/config/training.py@5a296afe (2025-07-10)"
_LF = "llm-foundry scripts/train/yamls/pretrain/mpt-125m.yaml@5e85bd62 (2024-01-06)"
_TT_ATT = "torchtitan torchtitan/models/attention.py@accc7027 (2025-08-30)"
_SDPA = "SDPA's flash backend is FlashAttention-2; cuDNN attention opt-in since pytorch/pytorch #138522"


def blackwell(gpus: Sequence[HardwareProfile]) -> bool:
    """Whether any island's GPU is an NVIDIA part of compute capability 10.0 or newer
    (B200, GB200; the profile's ``compute_capability``, NVIDIA's CUDA GPUs page)."""
    return any(g.vendor == "nvidia" and (g.compute_capability or 0.0) >= 10.0 for g in gpus)


def pre_ampere(gpus: Sequence[HardwareProfile]) -> bool:
    """Whether any island's GPU is an NVIDIA part older than Ampere (sm < 80), told by its
    tensor cores: bf16 came with Ampere (sm80), so an NVIDIA profile without a bf16 peak is
    Volta or Turing."""
    return any(g.vendor == "nvidia" and "bf16" not in g.peak_tflops for g in gpus)


def _training(tables: Mapping[str, Any]) -> Mapping[str, Any]:
    t = tables.get("training")
    return t if isinstance(t, Mapping) else {}


def _largest_stage_layers(tables: Mapping[str, Any]) -> int:
    """Layers of the largest pipeline stage (of one model chunk) for the scenario's written
    ``pp`` and ``virtual_stages``: ``ceil(layers / (pp v))``."""
    par = tables.get("parallelism")
    par = par if isinstance(par, Mapping) else {}
    layers = int(tables["model"]["layers"])
    pp, v = par.get("pp", 1), par.get("virtual_stages", 1)
    chunks = pp * v if isinstance(pp, int) and isinstance(v, int) and pp >= 1 and v >= 1 else 1
    return max(1, math.ceil(layers / chunks))


@attrs.frozen(kw_only=True)
class MegatronLM(FrameworkPart):
    """Megatron-LM before Megatron-Core (2020-2023)."""

    def defaults(self, tables, gpus) -> FrameworkDefaults:
        return {
            "training.attention": (
                "materialized",
                f"{_MLM}: score GEMMs and a fused scale-mask-softmax unless --use-flash-attn "
                "(store_true, from d693034e 2022-12-08)",
            ),
            "parallelism.sequence_parallel": (False, f"{_MLM}: --sequence-parallel is store_true"),
            "parallelism.sharding": ("none", f"{_MLM}: --use-distributed-optimizer is store_true"),
            "parallelism.dp_comm_overlap": (
                False,
                f"{_MLM}: --DDP-impl local reduces the gradients after the backward pass; "
                "--overlap-grad-reduce came in 2d5220a4 (2023-08-16)",
            ),
            "parallelism.tp_comm_overlap": (False, f"{_MLM}: no userbuffers overlap before Megatron-Core"),
        }


@attrs.frozen(kw_only=True)
class MegatronCore(FrameworkPart):
    """Megatron-Core with Transformer Engine (NeMo 2, Megatron-Bridge recipes)."""

    def defaults(self, tables, gpus) -> FrameworkDefaults:
        if pre_ampere(gpus):
            attention: tuple[Any, str] = (
                "materialized",
                "TransformerEngine dot_product_attention/utils.py@d0067d0d: FlashAttention and "
                "FusedAttention disabled below sm80, so unfused attention",
            )
        else:
            attention = ("flash", "Transformer Engine fused attention (cuDNN, or flash-attn), sm80 and newer")
        return {
            "training.attention": attention,
            "training.compile": (True, "Transformer Engine fused norm, activation and bias kernels"),
            "training.fp8_recipe": (
                "delayed",
                "Megatron-LM megatron/training/arguments.py@d98e8a6: --fp8-recipe defaults to "
                "'delayed' (Transformer Engine DelayedScaling, amax history)",
            ),
            "parallelism.sequence_parallel": (
                True,
                "Megatron-Bridge scripts/performance/utils/utils.py@067f987d WorkloadBaseConfig: "
                "sequence parallelism whenever tp > 1 (Megatron-LM turns it off at tp = 1)",
            ),
            "parallelism.sharding": (
                "zero1",
                f"{_BRIDGE} and recipes/utils/optimizer_utils.py: use_distributed_optimizer=True",
            ),
            "parallelism.dp_comm_overlap": (
                True,
                f"{_BRIDGE}: DistributedDataParallelConfig(overlap_grad_reduce=True)",
            ),
        }


@attrs.frozen(kw_only=True)
class MegatronDeepSpeed(FrameworkPart):
    """Megatron-DeepSpeed (BLOOM, MT-NLG): Megatron-LM's model code of 2021-2022 on DeepSpeed's
    PipelineEngine with ZeRO-1."""

    def defaults(self, tables, gpus) -> FrameworkDefaults:
        return {
            "training.attention": (
                "materialized",
                "Megatron-LM model code of 2021-2022: score GEMMs and a fused scale-mask-softmax",
            ),
            "parallelism.schedule": (
                "deepspeed-1f1b",
                _DS.format("pipe/schedule.py") + " TrainSchedule and pipe/engine.py: non-interleaved "
                "1F1B, every send and receive a blocking instruction of its own",
            ),
            "parallelism.sharding": (
                "zero1",
                _DS.format("pipe/engine.py") + ": ZeRO-2 and ZeRO-3 are incompatible with pipeline "
                "parallelism, so ZeRO-1 is the sharding it runs with",
            ),
            "parallelism.sequence_parallel": (False, "Megatron-LM of 2021-2022 had no sequence parallelism"),
            "parallelism.dp_comm_overlap": (
                False,
                _DS.format("pipe/schedule.py") + ": the ReduceGrads instruction runs after the last step",
            ),
        }


@attrs.frozen(kw_only=True)
class DeepSpeed(FrameworkPart):
    """DeepSpeed's engine with its config defaults, on eager PyTorch (the model code, a Hugging
    Face model say, chooses the attention kernel: not set here)."""

    def defaults(self, tables, gpus) -> FrameworkDefaults:
        return {
            "parallelism.sharding": (
                "none",
                _DS.format("zero/config.py") + ": DeepSpeedZeroConfig stage = 0 (ZeRO disabled)",
            ),
            "parallelism.dp_comm_overlap": (
                False,
                _DS.format("engine.py") + ": _backward_epilogue all-reduces the gradients after "
                "the backward pass (stage 0)",
            ),
            "training.compile": (
                False,
                _DS.format("engine.py") + ": eager PyTorch unless compile() is called",
            ),
        }


@attrs.frozen(kw_only=True)
class TorchTitan(FrameworkPart):
    """torchtitan (FSDP2, PyTorch-native TP/PP/CP). With ``compile`` its loss is compiled too:
    ``build_cross_entropy_loss`` wraps it in ``torch.compile`` when ``training.compile`` is set
    (torchtitan/components/loss.py at 6fc499f6; since bbb1b616, 2025-04-02).

    Attention: ``ScaledDotProductAttention`` (torchtitan/models/attention.py at accc7027, since
    3b85aa31, 2025-05-14) runs SDPA with cuDNN attention first on compute capability 10.0
    (Blackwell), so there the default is ``"flash"`` (the GPU's own fused kernel), elsewhere
    ``"flash2"`` (SDPA's flash backend, FlashAttention-2). Its op save list at that commit
    (``_save_list``, distributed/activation_checkpoint.py) does not name the cuDNN SDPA op, so
    with ``recompute = "op"`` on such a GPU attention is recomputed, not saved
    (:meth:`op_saves_attention`; the save list names it since b39377f9, 2025-12-01)."""

    compiled_loss: ClassVar[bool] = True

    def op_saves_attention(self, attention: str, gpu: HardwareProfile) -> bool:
        """False where torchtitan's SDPA runs cuDNN (``attention = "flash"`` on compute
        capability 10.0 and newer), whose op its op-SAC save list at accc7027 leaves out."""
        return not (attention == "flash" and blackwell([gpu]))

    def defaults(self, tables, gpus) -> FrameworkDefaults:
        out: FrameworkDefaults = {
            "parallelism.sharding": (
                "fsdp",
                f"{_TT}: data_parallel_shard_degree = -1 (FSDP2 fully_shard over the rest)",
            ),
            "parallelism.sequence_parallel": (
                True,
                "torchtitan parallelize plans: SequenceParallel on the norms whenever TP is on",
            ),
            "training.attention": (
                (
                    "flash",
                    f"{_TT_ATT}: ScaledDotProductAttention puts SDPBackend.CUDNN_ATTENTION first "
                    "when has_cuda_capability(10, 0) (since 3b85aa31, 2025-05-14): cuDNN fused attention",
                )
                if blackwell(gpus)
                else ("flash2", f"torchtitan uses F.scaled_dot_product_attention; {_SDPA}")
            ),
            "training.compile": (False, f"{_TT}: Compile.enable = False"),
            "training.fp8_recipe": (
                "tensorwise",
                f"{_TT}: Float8.recipe_name = None, torchao Float8LinearConfig() (tensorwise scaling)",
            ),
        }
        tr = _training(tables)
        if "recompute" not in tr:
            out["training.recompute"] = (
                "full",
                f"{_TT}: ActivationCheckpoint mode = 'selective', selective_ac_option = '2' "
                "(full checkpointing of every second block)",
            )
        if tr.get("recompute", "full") == "full" and "recompute_layers" not in tr:
            half = _largest_stage_layers(tables) // 2
            out["training.recompute_layers"] = (
                max(1, half),
                "torchtitan distributed/activation_checkpoint.py@accc7027: a block is wrapped when "
                "its count % 2 == 0, so half of a stage's blocks",
            )
        return out


@attrs.frozen(kw_only=True)
class FmsFsdp(FrameworkPart):
    """IBM fms-fsdp (FSDP1 with HSDP, torch.compile)."""

    def defaults(self, tables, gpus) -> FrameworkDefaults:
        return {
            "parallelism.sharding": ("hsdp", f"{_FMS}: sharding_strategy = 'hsdp'"),
            "training.recompute": (
                "none",
                f"{_FMS}: fsdp_activation_checkpointing = False (selective_checkpointing = 1 applies "
                "only when it is on)",
            ),
            "training.compile": (True, f"{_FMS}: use_torch_compile = True"),
            "training.attention": ("flash2", f"fms models call F.scaled_dot_product_attention; {_SDPA}"),
        }


@attrs.frozen(kw_only=True)
class LlmFoundry(FrameworkPart):
    """MosaicML llm-foundry on Composer (FSDP FULL_SHARD), as its benchmark tables ran it."""

    def defaults(self, tables, gpus) -> FrameworkDefaults:
        out: FrameworkDefaults = {
            "parallelism.sharding": ("fsdp", f"{_LF}: fsdp_config.sharding_strategy = FULL_SHARD"),
            "training.recompute": ("none", f"{_LF}: fsdp_config.activation_checkpointing = false"),
            "training.attention": (
                "flash2",
                "llm-foundry scripts/train/benchmarking/submit_benchmarks.py@5e85bd62 installs "
                "'.[gpu-flash2]' (flash-attn 2)",
            ),
        }
        if _training(tables).get("precision") == "fp8":
            out["training.fp8_recipe"] = (
                "delayed",
                "llm-foundry precision amp_fp8: Composer's Transformer Engine fp8_autocast with "
                "DelayedScaling (an amax history)",
            )
        return out


@shardmeter.hookimpl
def shardmeter_frameworks():
    yield MegatronLM(
        name="megatron-lm",
        description="Megatron-LM before Megatron-Core (2020-2023): materialized attention, no sequence "
        "parallelism, no distributed optimizer, gradients reduced after the backward pass; pipeline "
        "sends after scatter (1/t per TP rank, the 1f1b and interleaved schedules).",
        source=_MLM,
    )
    yield MegatronCore(
        name="megatron-core",
        description="Megatron-Core with Transformer Engine (NeMo 2, Megatron-Bridge): fused attention "
        "(unfused below sm80), sequence parallelism with TP, distributed optimizer, overlapped "
        "gradient reduction, fused kernels.",
        source=_BRIDGE,
    )
    yield MegatronDeepSpeed(
        name="megatron-deepspeed",
        description="Megatron-DeepSpeed: materialized attention, ZeRO-1, DeepSpeed's PipelineEngine "
        "(schedule deepspeed-1f1b), gradients reduced after the last micro-batch.",
        source=_DS.format("pipe/engine.py"),
    )
    yield DeepSpeed(
        name="deepspeed",
        description="DeepSpeed engine with its config defaults: ZeRO stage 0, gradients all-reduced "
        "after the backward pass, eager PyTorch.",
        source=_DS.format("zero/config.py"),
    )
    yield TorchTitan(
        name="torchtitan",
        description="torchtitan: FSDP2, sequence parallelism with TP, SDPA (FlashAttention-2), eager "
        "(compile off), full checkpointing of every second block, tensorwise fp8.",
        source=_TT,
    )
    yield FmsFsdp(
        name="fms-fsdp",
        description="IBM fms-fsdp: HSDP, no activation checkpointing, torch.compile, SDPA (FlashAttention-2).",
        source=_FMS,
    )
    yield LlmFoundry(
        name="llm-foundry",
        description="MosaicML llm-foundry on Composer: FSDP FULL_SHARD, no activation checkpointing, "
        "flash-attn 2, fp8 by Transformer Engine delayed scaling.",
        source=_LF,
    )
