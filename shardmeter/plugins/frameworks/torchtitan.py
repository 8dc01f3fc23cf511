"""The ``torchtitan`` profile (pytorch/torchtitan: FSDP2, PyTorch-native TP/PP/CP) and its dated
states, each the commit on torchtitan's main branch that changed a default (committer date),
quoted from its diff.

Read: ``torchtitan/config/job_config.py`` and ``torchtitan/distributed/activation_checkpoint.py``
at accc7027 (2025-08-30); the later and earlier states from the history of those files,
``torchtitan/models/attention.py``, ``torchtitan/distributed/pipeline*.py``,
``torchtitan/components/{loss,quantization/float8}.py`` and ``torchtitan/config/configs.py``
up to b5bcd76c (2026-08-21).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from shardmeter.parts import FrameworkDefaults, FrameworkPart, StackVersion
from shardmeter.plugins.frameworks.common import (
    SDPA,
    blackwell,
    data_parallel_size,
    largest_stage_layers,
    nvidia_fused_attention,
    parallelism,
    read_at,
    release,
    training,
)
from shardmeter.records import HardwareProfile

__all__ = ["TorchTitan", "TORCHTITAN_VERSIONS"]

_TT = "torchtitan torchtitan/config/job_config.py@accc7027 (2025-08-30)"
_TT_ATT = "torchtitan torchtitan/models/attention.py@accc7027 (2025-08-30)"

PP_DEGREE = StackVersion(
    since="2024-05-21",
    commit="aafe0e8703c77e036cf877568a65f1c964abdc85",
    change='Add Pipeline Parallel (and 2D PP+FSDP) support: "microbatches = '
    '(job_config.experimental.pipeline_parallel_microbatches or parallel_dims.pp)", the local '
    "batch in pp micro-batches",
)
SPLIT_OPTIONAL = StackVersion(
    since="2024-10-10",
    commit="cec7fb6fc8b7b3612fe371d27df0b57d3847399d",
    change='Make pp split points optional: "elif issubclass(schedule_class, PipelineScheduleMulti): '
    '... num_stages_per_rank = 2", two stages per rank for an interleaved schedule',
)
EXPANDABLE_SEGMENTS = StackVersion(
    since="2024-10-22",
    commit="a5e57e4a9a263056cf7bc65b4987adf2ae489e01",
    change='Use expandable segments in `run_llama_train.sh` (#643): "+PYTORCH_CUDA_ALLOC_CONF='
    '"expandable_segments:True"", the caching allocator with expandable segments',
)
PP_TOTAL_STAGES = StackVersion(
    since="2025-01-07",
    commit="90567fc9827ffdf17bdd0349cd5276c662d0769a",
    change='fix num_microbatches input for PP: "- n_microbatches = '
    'job_config.experimental.pipeline_parallel_degree" / "+ n_microbatches = num_total_stages", '
    "the local batch in pp x stages-per-rank micro-batches",
)
LOSS_COMPILED = StackVersion(
    since="2025-04-02",
    commit="bbb1b616ef4d01b0ea745c13b03c192910a166c9",
    change='refactor train_spec.loss_fn to build_loss_fn & chunked loss (#1033): "if '
    'job_config.training.compile: ... loss_fn = torch.compile(loss_fn)", the loss compiled with compile',
)
PP_MICROBATCH_SIZE = StackVersion(
    since="2025-04-07",
    commit="5e2033c75c3c6e82882f87631942b942fde2c0d3",
    change="[PP] Add microbatch_size and remove num_microbatches config (#1073): "
    '"--parallelism.pipeline_parallel_microbatch_size", default=1, "n_microbatches = batch_size '
    '// microbatch_size", pipeline micro-batches of one sequence',
)
CUDNN_ON_BLACKWELL = StackVersion(
    since="2025-05-14",
    commit="3b85aa31fffc46ecbf785a57ee314a01614f572f",
    change='Use cudnn backend on B200 (#1196): "if has_cuda_capability(10, 0): self.backends = '
    '[SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION] + base_backends", cuDNN attention '
    "first on Blackwell",
)
READ = read_at(
    "2025-08-30",
    "accc7027faa5ca41ed8a4fb8847694d439899014",
    "torchtitan/config/job_config.py, distributed/activation_checkpoint.py, models/attention.py",
)
CUDNN_EVERYWHERE = StackVersion(
    since="2025-10-09",
    commit="6a3a9da9564d82a1120c7639ef6236bb4cffa049",
    change='Refactor attention and make attention mask an argument to the model (#1776): "- if '
    'has_cuda_capability(10, 0): - cls.backends.insert(0, SDPBackend.CUDNN_ATTENTION)" / "+ '
    'self.sdpa_backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, ...", cuDNN '
    "attention first on every GPU",
)
SAC_SAVES_CUDNN = StackVersion(
    since="2025-12-01",
    commit="b39377f9fe33865fefb9bf64a33f6d74a598be87",
    change='add all SDPA backends to op_sac_save_list (#2095): "+ '
    'torch.ops.aten._scaled_dot_product_cudnn_attention.default,", op SAC saves cuDNN attention',
)
OP_SAC_DEFAULT = StackVersion(
    since="2026-03-23",
    commit="114151ad4d3cbe71464f9d709f910fc4cd332027",
    change='[SAC] Centralize selective AC policy and remove per-model op save lists (#2357): "- '
    'selective_ac_option: str = "2"" ("per-op SAC is now the only selective mode")',
)
ROWWISE_DEFAULT = StackVersion(
    since="2026-04-27",
    commit="6348d93d1da3f29e14918ad08b286eb21af1e03d",
    change='quantize on config instead of on model (#3127): "+ recipe_name: Literal["rowwise", '
    '"rowwise_with_gw_hp"] = "rowwise"" (tensorwise removed)',
)
FLEX_DEFAULT = StackVersion(
    since="2026-06-09",
    commit="16954571245f17d4eccabb896360d7bd6d788ff5",
    change='[BE] deprecate SDPA and causal mask_type for language models (#3571): "- attn_backend: '
    'str = "sdpa"" / "+ attn_backend: str = "flex"" ("Making FlexAttention the default")',
)
ONE_PP_MICROBATCH = StackVersion(
    since="2026-08-20",
    commit="73aed7f6c09c04041dae2d2c185bb4c6384ebb3f",
    change='fold batch dim (#4121): "- pipeline_parallel_microbatch_size: int = 1" / "+ '
    'num_pp_microbatches: int = 1", one pipeline micro-batch per DP rank',
)

#: torchtitan's dated states, oldest first (docs/frameworks.md has the table).
TORCHTITAN_VERSIONS: tuple[StackVersion, ...] = (
    PP_DEGREE,
    SPLIT_OPTIONAL,
    EXPANDABLE_SEGMENTS,
    PP_TOTAL_STAGES,
    LOSS_COMPILED,
    PP_MICROBATCH_SIZE,
    CUDNN_ON_BLACKWELL,
    release("2025-06-17", "f7084fc78567f865d0c411f2c7b9bbbef6b155ac", "v0.1.0"),
    READ,
    CUDNN_EVERYWHERE,
    release("2025-10-17", "29624e37fa6dd319fd671b009338651b5c665da2", "v0.2.0"),
    SAC_SAVES_CUDNN,
    release("2025-12-26", "81af8833ddeff9b5f1874dc7e20594aa17da6b86", "v0.2.1"),
    release("2026-02-20", "73a0e6979dd10b6b1904098eb3c8f62c18ab87ce", "v0.2.2"),
    OP_SAC_DEFAULT,
    ROWWISE_DEFAULT,
    FLEX_DEFAULT,
    ONE_PP_MICROBATCH,
)


def _cudnn_runs(gpus: Sequence[HardwareProfile], version: StackVersion) -> bool:
    """Whether torchtitan's SDPA puts cuDNN attention first on these GPUs at ``version``:
    on Blackwell since 3b85aa31, on every NVIDIA GPU of sm80 and newer since 6a3a9da9."""
    if version.at_least(CUDNN_EVERYWHERE):
        return nvidia_fused_attention(gpus)
    return version.at_least(CUDNN_ON_BLACKWELL) and blackwell(gpus)


def _attention(gpus: Sequence[HardwareProfile], version: StackVersion) -> tuple[str, str]:
    """The attention kernel torchtitan runs by default at ``version``, as a scenario value."""
    if version.at_least(FLEX_DEFAULT):
        return (
            "flash2",
            "torchtitan torchtitan/models/llama3/__init__.py@16954571 (2026-06-09): attn_backend = "
            '"flex", FlexAttention (Triton), approximated as "flash2": like FlashAttention-2 it '
            "skips masked blocks and keeps only the output and log-sum-exp, at about FA2's speed "
            "(pytorch.org/blog/flexattention: 90% of FA2 forward, 85% backward)",
        )
    if version.at_least(CUDNN_EVERYWHERE) and _cudnn_runs(gpus, version):
        return (
            "flash",
            "torchtitan torchtitan/models/attention.py@6a3a9da9 (2025-10-09): sdpa_backends = "
            "[CUDNN_ATTENTION, FLASH_ATTENTION, ...] on every GPU: cuDNN fused attention",
        )
    if _cudnn_runs(gpus, version):
        return (
            "flash",
            f"{_TT_ATT}: ScaledDotProductAttention puts SDPBackend.CUDNN_ATTENTION first "
            "when has_cuda_capability(10, 0) (since 3b85aa31, 2025-05-14): cuDNN fused attention",
        )
    return ("flash2", f"torchtitan uses F.scaled_dot_product_attention; {SDPA}")


def _fp8_recipe(version: StackVersion) -> tuple[str, str]:
    """The float8 converter's default recipe: tensorwise (torchao ``Float8LinearConfig()``),
    rowwise since 6348d93d."""
    if version.at_least(ROWWISE_DEFAULT):
        return (
            "rowwise",
            "torchtitan components/quantization/float8.py@6348d93d (2026-04-27): "
            'recipe_name = "rowwise" (tensorwise removed)',
        )
    return (
        "tensorwise",
        f"{_TT}: Float8.recipe_name = None, torchao Float8LinearConfig() (tensorwise scaling)",
    )


def _virtual_stages(tables: Mapping[str, Any], version: StackVersion) -> int | None:
    """The stages per rank torchtitan splits an interleaved schedule into when the scenario
    writes none: 2 since cec7fb6f (before it the split points had to be given); None when the
    schedule is not interleaved or ``virtual_stages`` is written."""
    par = parallelism(tables)
    if par.get("schedule") != "interleaved" or "virtual_stages" in par:
        return None
    return 2 if version.at_least(SPLIT_OPTIONAL) else None


def _micro_batch(
    tables: Mapping[str, Any], gpus: Sequence[HardwareProfile], version: StackVersion, stages_per_rank: int
) -> tuple[int, str] | None:
    """``training.micro_batch`` with a pipeline (``pp > 1``) where the scenario writes none: the
    local batch ``global_batch / dp`` in pp micro-batches (to 90567fc9), in pp x stages-per-rank
    (to 5e2033c7), micro-batches of one sequence (to 73aed7f6), then one micro-batch."""
    tr, pp = training(tables), parallelism(tables).get("pp", 1)
    batch, dp = tr.get("global_batch"), data_parallel_size(tables, gpus)
    if "micro_batch" in tr or not isinstance(pp, int) or pp < 2 or not isinstance(batch, int) or not dp:
        return None
    local = max(1, batch // dp)
    if version.at_least(ONE_PP_MICROBATCH):
        return local, (
            "torchtitan torchtitan/config/configs.py@73aed7f6 (2026-08-20): num_pp_microbatches = 1, "
            f"the local batch global_batch / dp = {batch} / {dp} in one pipeline micro-batch "
            "(assumed: one gradient-accumulation step)"
        )
    if version.at_least(PP_MICROBATCH_SIZE):
        return 1, (
            "torchtitan config_manager.py@5e2033c7 (2025-04-07): "
            "parallelism.pipeline_parallel_microbatch_size = 1"
        )
    if version.at_least(PP_TOTAL_STAGES):
        n, how = pp * stages_per_rank, f"num_total_stages = pp x {stages_per_rank} stages per rank"
        where = "pipelining_utils.py@90567fc9 (2025-01-07)"
    else:
        n, how, where = pp, "pipeline_parallel_degree", "parallelize_llama.py@aafe0e87 (2024-05-21)"
    return max(1, local // n), (
        f"torchtitan {where}: n_microbatches = {how} = {n}, the local batch "
        f"global_batch / dp = {batch} / {dp} split in {n}"
    )


def _recompute(tables: Mapping[str, Any], version: StackVersion, v: int | None) -> FrameworkDefaults:
    """Activation checkpointing where the scenario writes none: selective option "2" (every
    second block fully recomputed: ``recompute = "full"`` with half of each stage's layers)
    until 114151ad, then per-op SAC (``recompute = "op"``)."""
    tr = training(tables)
    out: FrameworkDefaults = {}
    if version.at_least(OP_SAC_DEFAULT):
        if "recompute" not in tr:
            out["training.recompute"] = (
                "op",
                "torchtitan config@114151ad (2026-03-23): selective_ac_option removed, 'per-op SAC is "
                "now the only selective mode'; the default is SelectiveAC (trainer.py@b5bcd76c)",
            )
        return out
    if "recompute" not in tr:
        out["training.recompute"] = (
            "full",
            f"{_TT}: ActivationCheckpoint mode = 'selective', selective_ac_option = '2' "
            "(full checkpointing of every second block)",
        )
    if tr.get("recompute", "full") == "full" and "recompute_layers" not in tr:
        half = largest_stage_layers(tables, v) // 2
        out["training.recompute_layers"] = (
            max(1, half),
            "torchtitan distributed/activation_checkpoint.py@accc7027: a block is wrapped when "
            "its count % 2 == 0, so half of a stage's blocks",
        )
    return out


@attrs.frozen(kw_only=True)
class TorchTitan(FrameworkPart):
    """torchtitan (FSDP2, PyTorch-native TP/PP/CP), by version (:data:`TORCHTITAN_VERSIONS`).

    Behaviour no key states: with ``compile`` its loss is compiled too since bbb1b616
    (2025-04-02; :meth:`loss_compiled`), and its op-SAC save list names cuDNN's SDPA op only
    since b39377f9 (2025-12-01), so where SDPA runs cuDNN before that (``attention = "flash"``
    on Blackwell from 3b85aa31, on every NVIDIA GPU from 6a3a9da9) ``recompute = "op"``
    recomputes attention instead of saving it (:meth:`op_saves_attention`).

    Not expressed (no scenario key): the first and last pipeline stage one layer lighter
    (8b737fe3, 2025-04-07), the chunked lm_head + loss of the shipped llama3 configs (786e26f8,
    2026-04-27), FSDP's ``reshard_after_forward`` rules (5940ddeb, 83e69410)."""

    #: its float8 training is torchao's ``Float8Linear`` (``[model] converters = ["float8"]``),
    #: which keeps the high-precision input for backward
    fp8_backend_default = "torchao"

    versions: ClassVar[tuple[StackVersion, ...]] = TORCHTITAN_VERSIONS
    #: with TP its train context enters ``torch.distributed.tensor.parallel.loss_parallel()``:
    #: ``loss_parallel_enabled = self.tp > 1 and self.enable_loss_parallel``, the latter ``not
    #: --training.disable_loss_parallel`` (default off), and the output projection then keeps
    #: ``output_layouts=Shard(-1)`` (torchtitan/parallelisms/parallel_dims.py, utils.py
    #: ``get_train_context``, parallelize_llama.py @ 9dec370; the same in torchtitan/distributed
    #: since 82afc842)
    loss_parallel: ClassVar[bool] = True
    compiled_loss: ClassVar[bool] = True  # at the newest state; loss_compiled() by state

    def loss_compiled(self, version: StackVersion | None = None) -> bool:
        """``torch.compile(loss_fn)`` under ``training.compile`` since bbb1b616 (2025-04-02;
        before it: "TODO: compiling loss function causes CUDA errors, turning off for now")."""
        return (version or self.versions[-1]).at_least(LOSS_COMPILED)

    def grad_accumulation_fused(self, precision: str, version: StackVersion | None = None) -> bool:
        """Never: FSDP2 adds each micro-batch's gradient to the one it holds in a pass of its own,
        the unsharded accumulator in the reduce dtype while a pipeline schedule defers the
        reduction (``FSDPParam.accumulate_unsharded_grad_if_needed``: ``self.unsharded_accumulated_grad
        += self.unsharded_param.grad``, torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
        pytorch/pytorch@010ae4a8), the sharded gradient after each reduce-scatter otherwise."""
        return False

    def expandable_segments(self, version: StackVersion | None = None) -> bool:
        """Its launcher sets ``PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"`` since
        a5e57e4a (2024-10-22, ``run_llama_train.sh``; kept in ``run_train.sh``, as
        ``PYTORCH_ALLOC_CONF`` since e629fe58, 2025-08-15)."""
        return (version or self.versions[-1]).at_least(EXPANDABLE_SEGMENTS)

    def op_saves_attention(
        self, attention: str, gpu: HardwareProfile, version: StackVersion | None = None
    ) -> bool:
        """False where SDPA runs cuDNN (``attention = "flash"`` on a GPU where torchtitan puts
        cuDNN first) and the op save list does not name its op yet (before b39377f9)."""
        v = version or self.versions[-1]
        return not (attention == "flash" and _cudnn_runs([gpu], v) and not v.at_least(SAC_SAVES_CUDNN))

    def defaults(self, tables, gpus, version=None) -> FrameworkDefaults:
        v = version or self.versions[-1]
        out: FrameworkDefaults = {
            "parallelism.sharding": (
                "fsdp",
                f"{_TT}: data_parallel_shard_degree = -1 (FSDP2 fully_shard over the rest)",
            ),
            "parallelism.sequence_parallel": (
                True,
                "torchtitan parallelize plans: SequenceParallel on the norms whenever TP is on",
            ),
            "training.attention": _attention(gpus, v),
            "training.compile": (False, f"{_TT}: Compile.enable = False"),
            "training.fp8_recipe": _fp8_recipe(v),
        }
        stages = _virtual_stages(tables, v)
        if stages is not None:
            out["parallelism.virtual_stages"] = (
                stages,
                "torchtitan pipelining_utils.py@cec7fb6f (2024-10-10): num_stages_per_rank = 2 for a "
                "multi-stage (interleaved) schedule without split points",
            )
        if parallelism(tables).get("schedule") == "interleaved" and v.at_least(SPLIT_OPTIONAL):
            out["parallelism.microbatch_rule"] = (
                "pytorch",
                "torchtitan runs torch.distributed.pipelining's ScheduleInterleaved1F1B: micro-batches a "
                "multiple of its rounds, max(1, m // pp), not of pp (pytorch/pytorch #137783, 2024-10-11)",
            )
        per_rank = stages or parallelism(tables).get("virtual_stages", 1)
        micro = _micro_batch(tables, gpus, v, per_rank if isinstance(per_rank, int) else 1)
        if micro is not None:
            out["training.micro_batch"] = micro
        out.update(_recompute(tables, v, stages))
        return out
