"""The ``deepspeed``, ``fms-fsdp`` and ``llm-foundry`` profiles with their dated states.

Read: deepspeedai/DeepSpeed ``deepspeed/runtime/zero/config.py``, ``runtime/engine.py``@edaa7221
(2026-08-22; the ZeRO stage default since f2ac7eaf, 2020-05-19); foundation-model-stack/fms-fsdp
``fms_fsdp/config/training.py`` and ``fms_fsdp/policies/ac_handler.py``@5a296afe (2025-07-10; its
history from the first code, 7c926a19, 2024-02-06); mosaicml/llm-foundry
``scripts/train/yamls/pretrain/mpt-*.yaml`` and ``scripts/train/benchmarking/submit_benchmarks.py``
@5e85bd62 (2024-01-06, the commit of the published benchmark tables; their A100 and <= 64-GPU
H100 rows ran from ``sweep.sh`` at b2a43a14, 2023-10-19, with the launcher's default
``--attn_impl triton``).
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from shardmeter.parts import FrameworkDefaults, FrameworkPart, StackVersion
from shardmeter.plugins.frameworks.common import SDPA, read_at, training

__all__ = [
    "DeepSpeed",
    "FmsFsdp",
    "LlmFoundry",
    "DEEPSPEED_VERSIONS",
    "FMS_FSDP_VERSIONS",
    "LLM_FOUNDRY_VERSIONS",
]

DS = "DeepSpeed deepspeed/runtime/{}@edaa7221"
FMS = "fms-fsdp fms_fsdp/config/training.py@5a296afe (2025-07-10)"
LF = "llm-foundry scripts/train/yamls/pretrain/mpt-125m.yaml@5e85bd62 (2024-01-06)"

#: DeepSpeed's states: ZeRO off by default since the stage key came (ZeRO-2), and the commit read.
DEEPSPEED_VERSIONS: tuple[StackVersion, ...] = (
    StackVersion(
        since="2020-05-19",
        commit="f2ac7eafd54c49acb8981650637dedd939e96c14",
        change='ZeRO-2 (#217): "+ZERO_OPTIMIZATION_STAGE_DEFAULT = ZERO_OPTIMIZATION_DISABLED" '
        "(stage 0, ZeRO off)",
    ),
    read_at(
        "2026-08-22",
        "edaa7221267243c7be7fb49c5d5f5c4fb97b4641",
        "deepspeed/runtime/zero/config.py, runtime/engine.py",
    ),
)


@attrs.frozen(kw_only=True)
class DeepSpeed(FrameworkPart):
    """DeepSpeed's engine with its config defaults, on eager PyTorch (the model code, a Hugging
    Face model say, chooses the attention kernel: not set here), by version
    (:data:`DEEPSPEED_VERSIONS`: no default changed between them)."""

    versions: ClassVar[tuple[StackVersion, ...]] = DEEPSPEED_VERSIONS

    def defaults(self, tables, gpus, version=None) -> FrameworkDefaults:
        return {
            "parallelism.sharding": (
                "none",
                DS.format("zero/config.py") + ": DeepSpeedZeroConfig stage = 0 (ZeRO disabled)",
            ),
            "parallelism.dp_comm_overlap": (
                False,
                DS.format("engine.py") + ": _backward_epilogue all-reduces the gradients after "
                "the backward pass (stage 0)",
            ),
            "training.compile": (
                False,
                DS.format("engine.py") + ": eager PyTorch unless compile() is called",
            ),
        }


FMS_COMPILE = StackVersion(
    since="2024-04-11",
    commit="1d0396b6fcf274d6e09827f9b03c98201d771a14",
    change='update default configs: "- use_torch_compile: bool = False" / "+ use_torch_compile: bool = True"',
)

#: fms-fsdp's states: its first code, torch.compile on by default, and the commit read.
FMS_FSDP_VERSIONS: tuple[StackVersion, ...] = (
    StackVersion(
        since="2024-02-06",
        commit="7c926a1906428a735f9b72466fde5b29542758f1",
        change='code init: pretraining/config/training.py "sharding_strategy: str = "hsdp"", '
        '"fsdp_activation_checkpointing: bool = False", "use_torch_compile: bool = False"',
    ),
    FMS_COMPILE,
    read_at("2025-07-10", "5a296afe42f9932f590783cb053fa0f9384e01fc", "fms_fsdp/config/training.py"),
)


@attrs.frozen(kw_only=True)
class FmsFsdp(FrameworkPart):
    """IBM fms-fsdp (FSDP1 with HSDP, torch.compile from 1d0396b6), by version
    (:data:`FMS_FSDP_VERSIONS`)."""

    versions: ClassVar[tuple[StackVersion, ...]] = FMS_FSDP_VERSIONS

    def defaults(self, tables, gpus, version=None) -> FrameworkDefaults:
        v = version or self.versions[-1]
        compile_ = (
            (True, f"{FMS}: use_torch_compile = True")
            if v.at_least(FMS_COMPILE)
            else (
                False,
                "fms-fsdp pretraining/config/training.py@7c926a19 (2024-02-06): use_torch_compile = False",
            )
        )
        return {
            "parallelism.sharding": ("hsdp", f"{FMS}: sharding_strategy = 'hsdp'"),
            "training.recompute": (
                "none",
                f"{FMS}: fsdp_activation_checkpointing = False (selective_checkpointing = 1 applies "
                "only when it is on)",
            ),
            "training.compile": compile_,
            "training.attention": ("flash2", f"fms models call F.scaled_dot_product_attention; {SDPA}"),
        }


#: llm-foundry's one state: the commit of the published benchmark tables.
LLM_FOUNDRY_VERSIONS: tuple[StackVersion, ...] = (
    StackVersion(
        since="2024-01-06",
        commit="5e85bd62d4ec9e13353ca95877477602ab538e5b",
        change="Shashank/new benchmarks (#838): sweep.py \"'--attn_impl flash',\" for the 1b, 3b, 7b "
        "and 70b rows of the >= 128-GPU H100 table it adds (the other tables are from b2a43a14, "
        "2023-10-19, with the same launcher defaults), the commit of the published benchmark "
        "tables, which this profile was read at",
    ),
)


@attrs.frozen(kw_only=True)
class LlmFoundry(FrameworkPart):
    """MosaicML llm-foundry on Composer (FSDP FULL_SHARD), as its benchmark tables ran it
    (:data:`LLM_FOUNDRY_VERSIONS`)."""

    versions: ClassVar[tuple[StackVersion, ...]] = LLM_FOUNDRY_VERSIONS
    #: MPT's ``loss_fn`` defaults to ``fused_crossentropy`` (flash-attn's Triton
    #: ``CrossEntropyLoss``: saves the 16-bit logits and their log-sum-exp, writes a 16-bit
    #: gradient): 2 + 2 bytes a logit, which the in-place count (4 saved, none added) equals
    fused_loss = True

    def defaults(self, tables, gpus, version=None) -> FrameworkDefaults:
        out: FrameworkDefaults = {
            "parallelism.sharding": ("fsdp", f"{LF}: fsdp_config.sharding_strategy = FULL_SHARD"),
            "training.recompute": ("none", f"{LF}: fsdp_config.activation_checkpointing = false"),
            "training.attention": (
                "flash2",
                "llm-foundry scripts/train/benchmarking/submit_benchmarks.py@5e85bd62: "
                "\"parser.add_argument('--attn_impl', type=str, default='triton')\", which the "
                "tables' sweep.sh@b2a43a14 leaves (sweep.py@5e85bd62 passes 'flash', "
                "FlashAttention-2 from '.[gpu-flash2]', for some >= 128-GPU rows): "
                "llm-foundry's Triton FlashAttention, approximated as flash2 (both non-Hopper kernels)",
            ),
        }
        if training(tables).get("precision") == "fp8":
            out["training.fp8_recipe"] = (
                "delayed",
                "llm-foundry precision amp_fp8: Composer's Transformer Engine fp8_autocast with "
                "DelayedScaling (an amax history)",
            )
        return out
