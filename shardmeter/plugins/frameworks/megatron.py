"""The Megatron profiles: ``megatron-lm`` (before Megatron-Core), ``megatron-core`` (Megatron-Core
with Transformer Engine as NeMo and Megatron-Bridge run it) and ``megatron-deepspeed`` (Megatron-LM's
model code on DeepSpeed's PipelineEngine), each with its dated states (committer dates on the
main branch of the repository named; for GitLab-era Megatron-LM, the merge commit).

Read: NVIDIA/Megatron-LM ``megatron/arguments.py``@d4878ef0 (2023-06-01) and
``megatron/training/arguments.py``@d98e8a64 (2026-08-22); NVIDIA-NeMo/Megatron-Bridge
``src/megatron/bridge/recipes/common.py``, ``recipes/utils/optimizer_utils.py``,
``scripts/performance/utils/utils.py``@067f987d (2026-08-22); NVIDIA/TransformerEngine
``transformer_engine/pytorch/attention/dot_product_attention/utils.py``@d0067d0d (2026-08-22);
deepspeedai/DeepSpeed ``runtime/pipe/engine.py``, ``runtime/pipe/schedule.py``@edaa7221
(2026-08-22).
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from shardmeter.parts import FrameworkDefaults, FrameworkPart, StackVersion
from shardmeter.plugins.frameworks.common import parallelism, pre_ampere, read_at, release

__all__ = [
    "MegatronLM",
    "MegatronCore",
    "MegatronDeepSpeed",
    "MEGATRON_LM_VERSIONS",
    "MEGATRON_CORE_VERSIONS",
    "MEGATRON_DEEPSPEED_VERSIONS",
]

MLM = "Megatron-LM megatron/arguments.py@d4878ef0 (2023-06-01)"
BRIDGE = "Megatron-Bridge src/megatron/bridge/recipes/common.py@067f987d"
DS = "DeepSpeed deepspeed/runtime/{}@edaa7221"
_MEGATRON = "NVIDIA/Megatron-LM"
_BRIDGE_REPO = "NVIDIA-NeMo/Megatron-Bridge"
_DS_REPO = "deepspeedai/DeepSpeed"

# ---- megatron-lm ----------------------------------------------------------------------------

DDP_LOCAL = StackVersion(
    since="2020-04-16",
    commit="22c0e300670672e4e0a8604bd6ab89bc28c970a6",
    change="Merge branch 'staging' into 'master': megatron/arguments.py \"group.add_argument("
    "'--DDP-impl', default='local',\", gradients all-reduced after the backward pass",
)
FUSED_ELEMENTWISE = StackVersion(
    since="2020-09-11",
    commit="51a2e6b0ff6fa830b0234b598ecc19f71e6e49d7",
    change='Various speed optimizations: megatron/model/transformer.py "def bias_dropout_add_fused_train" '
    '(torch.jit.script) and megatron/model/fused_bias_gelu.py "def bias_gelu": the bias, dropout and '
    "residual add in one kernel, the bias and GeLU in another; before, transformer.py "
    '"output = self.output_dropout(output)" (torch.nn.Dropout), the residual add and F.gelu ran eager',
)
NO_PIPELINE_SCATTER = StackVersion(
    since="2023-03-23",
    commit="edca71da3733587377e6ad5c54125f3968466947",
    change="Merge branch 'core-pipeline' into 'main': \"- tensor_send_next = core.tensor_parallel."
    'split_tensor_into_1d_equal_chunks(tensor_send_next)", without --sequence-parallel every TP '
    "rank now sends the whole activation (the bundled 1f1b and interleaved schedules still send "
    "1/t: not expressed)",
)
GRAD_ACC_FUSION = StackVersion(
    since="2022-02-13",
    commit="83b1e42f3012da2f3674b118e83d9d33d9aba633",
    change="gradient accumulation fusion: megatron/arguments.py \"'--no-gradient-accumulation-fusion', "
    "action='store_false'\", the weight-gradient GEMM accumulates into the fp32 main_grad; off "
    'without fp32 accumulation ("supported only with fp32 gradient accumulation. Setting '
    'gradient_accumulation_fusion to False"), which --bf16 forces and --fp16 does not',
)
GRAD_ACC_FUSION_FP16 = StackVersion(
    since="2022-09-27",
    commit="07916bf24553f0d635c4083a8dd5b31755caa82b",
    change='Support gradient accumulation fusion in fp16: megatron/arguments.py "-        if '
    'args.gradient_accumulation_fusion:" / "-            args.gradient_accumulation_fusion = False", '
    "the fp32-only check removed, so the fusion is on at every precision",
)

#: Megatron-LM before Megatron-Core: its key defaults did not change over these states (each a
#: store_true flag off by default) but one: the elementwise kernels were fused on 2020-09-11
#: (``training.compile``); the weight gradients' accumulation went into the GEMM on
#: 2022-02-13 (bf16) and 2022-09-27 (fp16); the pipeline's scatter-gather went on 2023-03-23.
MEGATRON_LM_VERSIONS: tuple[StackVersion, ...] = (
    DDP_LOCAL,
    release("2020-04-21", "03d2880923ffeec494cb0ef0cfc3d7234b2bacc7", "v1.0"),
    FUSED_ELEMENTWISE,
    release("2021-01-12", "be473a5bd22e9adefb076d65c4a2950b05536a6f", "v2.0"),
    release("2021-08-10", "e269e200649555069454bf78335466f9658b2044", "v2.5"),
    release("2021-08-27", "3860e995269df61d234ed910d4756e104e1ab844", "v2.6"),
    GRAD_ACC_FUSION,
    GRAD_ACC_FUSION_FP16,
    NO_PIPELINE_SCATTER,
    release("2023-05-11", "2360d732a399dd818d40cbe32828f65b260dee11", "23.04"),
    read_at("2023-06-01", "d4878ef015eec842d97f907ffddead7ad86d3f56", "megatron/arguments.py"),
)


@attrs.frozen(kw_only=True)
class MegatronLM(FrameworkPart):
    """Megatron-LM before Megatron-Core (2020-2023), by version (:data:`MEGATRON_LM_VERSIONS`).

    Its pipeline sent each activation scattered over the TP ranks (1/t from each, gathered at
    the receiver; ``--no-scatter-gather-tensors-in-pipeline`` is ``store_false``) until
    edca71da (2023-03-23), and never under ``--sequence-parallel``; from then on, without
    sequence parallelism, every TP rank sends the whole activation. The bundled ``1f1b`` and
    ``interleaved`` schedules send 1/t per TP rank, which is what Megatron-LM sent before
    2023-03-23 (or with sequence parallelism); the later whole-tensor sends have no key, so the
    profile's states from edca71da say so in their note and change nothing."""

    #: Megatron's ``vocab_parallel_cross_entropy`` keeps its fp32 softmax and writes the
    #: gradient into it (megatron/core/tensor_parallel/cross_entropy.py, ``calculate_gradients``:
    #: ``grad_input = softmax`` ... ``grad_input.mul_(grad_output)``, NVIDIA/Megatron-LM@d98e8a64)
    fused_loss = True
    fp8_backend_default = "transformer-engine"

    versions: ClassVar[tuple[StackVersion, ...]] = MEGATRON_LM_VERSIONS

    def grad_accumulation_fused(self, precision: str, version: StackVersion | None = None) -> bool:
        """The weight-gradient GEMM accumulates into ``main_grad`` (``fused_weight_gradient_mlp_cuda``)
        from 07916bf2 (2022-09-27) at every precision, from 83b1e42f (2022-02-13) with bf16
        (which forces fp32 accumulation), never before: until then autograd's ``AccumulateGrad``
        (or, with contiguous buffers, ``param.main_grad.add_(param.grad.data)`` in
        megatron/model/distributed.py ``param_hook``@de7dc40f) adds each micro-batch's
        gradient in a pass of its own."""
        v = version or self.versions[-1]
        return v.at_least(GRAD_ACC_FUSION_FP16) or (v.at_least(GRAD_ACC_FUSION) and precision == "bf16")

    def defaults(self, tables, gpus, version=None) -> FrameworkDefaults:
        fused = (version or self.versions[-1]).at_least(FUSED_ELEMENTWISE)
        return {
            "training.compile": (
                fused,
                "Megatron-LM megatron/model/transformer.py@51a2e6b0 (2020-09-11): jit-fused "
                "bias-dropout-add and bias-GeLU kernels"
                if fused
                else "Megatron-LM megatron/model/transformer.py@5281919 (2020-09-11, before 51a2e6b0): "
                "torch.nn.Dropout, the residual add and F.gelu eager",
            ),
            "training.attention": (
                "materialized",
                f"{MLM}: score GEMMs and a fused scale-mask-softmax unless --use-flash-attn "
                "(store_true, from d693034e 2022-12-08)",
            ),
            "parallelism.sequence_parallel": (False, f"{MLM}: --sequence-parallel is store_true"),
            "parallelism.sharding": ("none", f"{MLM}: --use-distributed-optimizer is store_true"),
            "parallelism.dp_comm_overlap": (
                False,
                f"{MLM}: --DDP-impl local reduces the gradients after the backward pass; "
                "--overlap-grad-reduce came in 2d5220a4 (2023-08-16)",
            ),
            "parallelism.tp_comm_overlap": (False, f"{MLM}: no userbuffers overlap before Megatron-Core"),
        }


# ---- megatron-core --------------------------------------------------------------------------

GRAD_OVERLAP = StackVersion(
    since="2023-09-07",
    commit="e801b2bb2f24ad12b2b21efb0c07a717d82335d0",
    change="Merge branch 'new_grad_overlap' into 'main': \"+ group.add_argument('--overlap-grad-"
    "reduce', action='store_true',\", Megatron-Core's DDP overlaps the gradient reduction",
    repo=_MEGATRON,
)
TP_OVERLAP_WITH_TP = StackVersion(
    since="2025-11-06",
    commit="bf75c658ca3e728638cd3b655401510fdb2be74b",
    change='dataclass cfgs - perf (#971): "+ cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap='
    'bool(cfg.model.tensor_model_parallel_size > 1))", TP communication overlapped whenever tp > 1',
    repo=_BRIDGE_REPO,
)

_CORE_RELEASES = (
    ("2023-12-11", "38879f8b3f0edc4ed4f50ac2f3271010b12c549f", "core_v0.4.0"),
    ("2024-02-26", "0acc240ebd2877b4ca5f5b471ea7554bbc62c1b9", "core_v0.5.0"),
    ("2024-04-18", "cac60ce4c8203e2ed18912be63d4dd577b46830d", "core_v0.6.0"),
    ("2024-05-30", "a645f89671be698612170539f2089dc15db66a80", "core_v0.7.0"),
    ("2024-08-12", "baf94af3c667248865f23df73b9fb8e2395e6fd0", "core_v0.8.0"),
    ("2024-10-24", "1afee592e85ac7994887eb5f4ef3998f76384333", "core_v0.9.0"),
    ("2025-02-17", "7ee599a25ca15f042c1087176b73ebddb0566d02", "core_v0.10.0"),
    ("2025-03-14", "aa6207e2da6bca789375f591c9124aa408d2509a", "core_v0.11.0"),
    ("2025-05-06", "d580efc68a9f0dbf1945f834f6f6200cd01d3343", "core_v0.12.0"),
    ("2025-07-25", "c550cf6c41c31cd3ec72e05c25ea0c979f2b6631", "core_v0.13.0"),
    ("2025-10-08", "23e00ed0963c35382dfe8a5a94fb3cda4d21e133", "core_v0.14.0"),
    ("2025-12-05", "0d7e02bd26d3eb347ad8d1bef625002babfa6df7", "core_v0.15.0"),
    ("2026-02-26", "3bec9aa97dda898d16ff5a89bac0ed2b6682b172", "core_v0.16.0"),
    ("2026-04-14", "9539a12e1b04a68423f57b3eb41d6125161dca24", "core_v0.17.0"),
    ("2026-06-22", "ba7b5ebce12af60627a80985792a1449ce45f46c", "core_v0.18.0"),
    ("2026-08-19", "5be9626709af2722333bf54797c954c09edeada3", "core_v0.19.0"),
)

#: Megatron-Core's dated states with its release tags (NVIDIA/Megatron-LM ``core_v*``).
MEGATRON_CORE_VERSIONS: tuple[StackVersion, ...] = tuple(
    sorted(
        (
            GRAD_OVERLAP,
            TP_OVERLAP_WITH_TP,
            *(release(d, c, n, repo=_MEGATRON) for d, c, n in _CORE_RELEASES),
            read_at(
                "2026-08-22",
                "067f987df03b8355b03192d88d70f1709fedf51a",
                "src/megatron/bridge/recipes/common.py, scripts/performance/utils/utils.py",
                repo=_BRIDGE_REPO,
            ),
        ),
        key=lambda s: s.since,
    )
)


def _tp_comm_overlap(tables, version: StackVersion) -> tuple[bool, str] | None:
    """Megatron-Bridge's rule from bf75c658 (2025-11-06): TP communication overlap whenever
    tp > 1 (its guard turns it off without sequence parallelism); before it off (NeMo 2 turned
    it on only with ``performance_mode``, default False): not set, the scenario's false."""
    par = parallelism(tables)
    tp = par.get("tp", 1)
    if not version.at_least(TP_OVERLAP_WITH_TP) or not isinstance(tp, int) or tp < 2:
        return None
    if par.get("sequence_parallel", True) is not True:
        return None
    return True, (
        "Megatron-Bridge scripts/performance/configs/llama3/llama3_llm_pretrain.py@bf75c658 "
        "(2025-11-06): CommOverlapConfig(tp_comm_overlap=bool(tensor_model_parallel_size > 1)), "
        "with sequence parallelism (training/comm_overlap.py disables it without)"
    )


@attrs.frozen(kw_only=True)
class MegatronCore(FrameworkPart):
    """Megatron-Core with Transformer Engine as its recipes run it (NeMo 2, Megatron-Bridge), by
    version (:data:`MEGATRON_CORE_VERSIONS`).

    The profile follows the recipes, not Megatron-LM's bare argument defaults (which leave
    sequence parallelism, the distributed optimizer and the overlaps off): its sequence
    parallelism, ZeRO-1 and gradient overlap are the recipes'. So for TP communication overlap it
    follows them too: NeMo 2 turned it on only with ``pretrain_recipe(performance_mode=True)``
    (default False; 1d5de594, 2024-09-05), so it stays off until Megatron-Bridge's rule
    ``tp_comm_overlap=bool(tp > 1)`` (bf75c658, 2025-11-06; its llama3 recipes with TP set it
    by hand from ab225da7), on from then whenever tp > 1 with sequence parallelism.

    The fp8 recipe stays ``"delayed"`` at every state: it is Megatron-Core's own default
    (``--fp8-recipe`` default 'delayed' since 70e5bf0b, 2025-03-22; delayed scaling only before)
    and NeMo 2's (``bf16_with_fp8_mixed``). Megatron-Bridge's ``MixedPrecisionConfig.fp8_recipe``
    became ``"tensorwise"`` in 15bf28de (2025-09-05), but Bridge turns fp8 on through a preset
    that names its recipe (``bf16_with_fp8_current_scaling_mixed``, ``..._delayed_scaling_...``):
    for such a run write ``fp8_recipe``."""

    #: Megatron's ``vocab_parallel_cross_entropy`` keeps its fp32 softmax and writes the
    #: gradient into it (megatron/core/tensor_parallel/cross_entropy.py, ``calculate_gradients``:
    #: ``grad_input = softmax`` ... ``grad_input.mul_(grad_output)``, NVIDIA/Megatron-LM@d98e8a64)
    fused_loss = True
    fp8_backend_default = "transformer-engine"

    versions: ClassVar[tuple[StackVersion, ...]] = MEGATRON_CORE_VERSIONS

    def defaults(self, tables, gpus, version=None) -> FrameworkDefaults:
        v = version or self.versions[-1]
        if pre_ampere(gpus):
            attention: tuple[Any, str] = (
                "materialized",
                "TransformerEngine dot_product_attention/utils.py@d0067d0d: FlashAttention and "
                "FusedAttention disabled below sm80, so unfused attention",
            )
        else:
            attention = ("flash", "Transformer Engine fused attention (cuDNN, or flash-attn), sm80 and newer")
        out: FrameworkDefaults = {
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
                f"{BRIDGE} and recipes/utils/optimizer_utils.py: use_distributed_optimizer=True",
            ),
            "parallelism.dp_comm_overlap": (
                True,
                f"{BRIDGE}: DistributedDataParallelConfig(overlap_grad_reduce=True)",
            ),
        }
        overlap = _tp_comm_overlap(tables, v)
        if overlap is not None:
            out["parallelism.tp_comm_overlap"] = overlap
        return out


# ---- megatron-deepspeed ---------------------------------------------------------------------

WHOLE_GRADIENTS = StackVersion(
    since="2020-09-09",
    commit="65c2f974d8308b3bd13036623fb1474caa535f82",
    change='Pipeline parallel training engine. (#392): "self.is_grad_partitioned = False", '
    "gradients sent back whole from every TP rank",
    repo=_DS_REPO,
)
GRADIENTS_PARTITIONED = StackVersion(
    since="2021-09-29",
    commit="e2fdd254edff5780d00c04111572c913ee698719",
    change='Big science related changes (#1407): "- self.is_grad_partitioned = False" / "+ '
    'self.is_grad_partitioned = self.is_model_parallel", gradients partitioned over the TP ranks',
    repo=_DS_REPO,
)

#: Megatron-DeepSpeed's states: DeepSpeed's PipelineEngine as first released, its partitioned
#: gradients, and the DeepSpeed commit read.
MEGATRON_DEEPSPEED_VERSIONS: tuple[StackVersion, ...] = (
    WHOLE_GRADIENTS,
    GRADIENTS_PARTITIONED,
    read_at(
        "2026-08-22",
        "edaa7221267243c7be7fb49c5d5f5c4fb97b4641",
        "deepspeed/runtime/pipe/engine.py, pipe/schedule.py, runtime/config.py",
        repo=_DS_REPO,
    ),
)


@attrs.frozen(kw_only=True)
class MegatronDeepSpeed(FrameworkPart):
    """Megatron-DeepSpeed (BLOOM, MT-NLG): Megatron-LM's model code of 2021-2022 on DeepSpeed's
    PipelineEngine with ZeRO-1, by version (:data:`MEGATRON_DEEPSPEED_VERSIONS`): before
    e2fdd254 (2021-09-29) the engine sent gradients whole from every TP rank
    (``grad_partitioned = false``, an option of the ``deepspeed-1f1b`` schedule)."""

    #: Megatron's ``vocab_parallel_cross_entropy`` keeps its fp32 softmax and writes the
    #: gradient into it (megatron/core/tensor_parallel/cross_entropy.py, ``calculate_gradients``:
    #: ``grad_input = softmax`` ... ``grad_input.mul_(grad_output)``, NVIDIA/Megatron-LM@d98e8a64)
    fused_loss = True
    fp8_backend_default = "transformer-engine"

    versions: ClassVar[tuple[StackVersion, ...]] = MEGATRON_DEEPSPEED_VERSIONS

    def defaults(self, tables, gpus, version=None) -> FrameworkDefaults:
        v = version or self.versions[-1]
        out: FrameworkDefaults = {
            "training.attention": (
                "materialized",
                "Megatron-LM model code of 2021-2022: score GEMMs and a fused scale-mask-softmax",
            ),
            "parallelism.schedule": (
                "deepspeed-1f1b",
                DS.format("pipe/schedule.py") + " TrainSchedule and pipe/engine.py: non-interleaved "
                "1F1B, every send and receive a blocking instruction of its own",
            ),
            "parallelism.sharding": (
                "zero1",
                DS.format("pipe/engine.py") + ": ZeRO-2 and ZeRO-3 are incompatible with pipeline "
                "parallelism, so ZeRO-1 is the sharding it runs with",
            ),
            "parallelism.sequence_parallel": (False, "Megatron-LM of 2021-2022 had no sequence parallelism"),
            "parallelism.dp_comm_overlap": (
                False,
                DS.format("pipe/schedule.py") + ": the ReduceGrads instruction runs after the last step",
            ),
        }
        engine = parallelism(tables).get("schedule", "deepspeed-1f1b") == "deepspeed-1f1b"
        if engine and not v.at_least(GRADIENTS_PARTITIONED):
            out["parallelism.grad_partitioned"] = (
                False,
                "DeepSpeed deepspeed/runtime/pipe/engine.py@65c2f974 (2020-09-09): "
                "self.is_grad_partitioned = False (partitioned from e2fdd254, 2021-09-29)",
            )
        return out
