"""The records of a scenario: one frozen attrs class per table (``[model]``,
``[training]``, ``[parallelism]``, ``[sync]``, ``[[island]]`` and its ``tiers``,
``[[offer]]``, ``[network]``) and the validators of their fields (see SCENARIO.md).

:mod:`shardmeter.load.scenario` structures raw tables into these records with the strict
converter; a validator's ``ValueError`` starts with the field name, so the message
is mapped onto the key path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from shardmeter.frozen import FrozenDict, freeze
from shardmeter.records import PRECISIONS
from shardmeter.registry.convert import CONVERTER

__all__ = [
    "QUALIFIES",
    "qualified_key",
    "Scenario",
    "ModelSpec",
    "TrainingSpec",
    "ParallelismSpec",
    "SyncSpec",
    "ReliabilitySpec",
    "VariabilitySpec",
    "TierSpec",
    "IslandSpec",
    "OfferSpec",
    "NetworkSpec",
    "StageGroupSpec",
    "MAX_COUNT",
]


def _count(inst, attribute, value):
    if value is None:
        return
    if value < 1:
        raise ValueError(f"{attribute.name}: expected an integer >= 1, got {value!r}")


def _count_or_none(inst, attribute, value):
    _count(inst, attribute, value)


def _pos(inst, attribute, value):
    if value is None:
        return
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{attribute.name}: expected a finite number > 0, got {value!r}")


def _one_of(*options):
    def check(inst, attribute, value):
        if value not in options:
            import difflib

            close = difflib.get_close_matches(str(value), options, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"{attribute.name}: expected one of {', '.join(repr(o) for o in options)}, got {value!r}{hint}"
            )

    return check


#: Largest count a scenario may give (absurdly large counts are errors, not overflows).
MAX_COUNT = 2**40


def _bounded(inst, attribute, value):
    if value is not None and value > MAX_COUNT:
        raise ValueError(f"{attribute.name}: {value!r} is absurdly large (limit {MAX_COUNT})")


def _kv_heads(inst, attribute, value):
    """Grouped-query attention: every key/value head serves the same number of query heads."""
    if value is None or value < 1 or inst.heads < 1:
        return
    if value > inst.heads:
        raise ValueError(f"{attribute.name}: expected at most heads ({inst.heads}), got {value!r}")
    if inst.heads % value:
        raise ValueError(
            f"{attribute.name}: heads ({inst.heads}) must be a multiple of kv_heads, got {value!r}"
        )


def _experts_per_token(inst, attribute, value):
    if value >= 1 and inst.experts >= 1 and value > inst.experts:
        raise ValueError(f"{attribute.name}: expected at most experts ({inst.experts}), got {value!r}")


def _moe_only(inst, attribute, value):
    """A MoE shape key means nothing for a dense model."""
    if value and inst.experts == 1:
        raise ValueError(f"{attribute.name}: applies to MoE models only (experts > 1), got {value!r}")


def _dense_layers(inst, attribute, value):
    if value < 0:
        raise ValueError(f"{attribute.name}: expected an integer >= 0, got {value!r}")
    if value >= inst.layers >= 1:
        raise ValueError(f"{attribute.name}: expected fewer than layers ({inst.layers}), got {value!r}")
    _moe_only(inst, attribute, value)


#: ``training.recompute`` values (SCENARIO "What the training keys mean").
RECOMPUTE_MODES = ("none", "selective", "op", "full")
#: ``training.recompute_modules`` values: Megatron-Core's ``recompute_modules`` that the model
#: prices (megatron/core/transformer/transformer_config.py @d98e8a64; :mod:`shardmeter.model.selective`)
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe", "shared_experts", "moe_act", "layernorm", "mla_up_proj")
#: ``training.fp8_recipe`` values.
FP8_RECIPES = ("tensorwise", "rowwise", "delayed", "blockwise", "mxfp8")
#: ``training.peft`` values: full training, or LoRA adapters on frozen weights (Hu et al. 2021)
PEFT_METHODS = ("none", "lora")
#: ``training.lora_targets`` names: Megatron-Core's linear modules (Megatron-Bridge's LoRA
#: ``target_modules``; all four are its default, megatron/bridge/peft/lora.py @067f987)
LORA_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
#: ``training.lora_rank`` when not written: Megatron-Bridge's ``LoRA.dim`` default (@067f987)
LORA_DEFAULT_RANK = 32
#: ``training.optimizer`` values (the model's codes: ``shardmeter.inputs.bundles.Optimizer``)
OPTIMIZERS = ("adam", "adamw", "sgd", "sgd-momentum", "adafactor", "adam8bit", "muon")


def _with_full_recompute(inst, attribute, value):
    if value is not None and inst.recompute != "full":
        raise ValueError(
            f'{attribute.name}: only with recompute = "full" (got recompute = {inst.recompute!r})'
        )


def _with_lora(inst, attribute, value):
    if value is not None and inst.peft != "lora":
        raise ValueError(f'{attribute.name}: only with peft = "lora" (got peft = {inst.peft!r})')


def _lora_targets(inst, attribute, value):
    if value is None:
        return
    bad = [t for t in value if t not in LORA_TARGETS]
    if bad or not value or len(set(value)) != len(value):
        raise ValueError(
            f"{attribute.name}: expected distinct names among {', '.join(repr(t) for t in LORA_TARGETS)}, "
            f"got {list(value)!r}"
        )


def _recompute_modules(inst, attribute, value):
    if value is None:
        return
    if inst.recompute != "selective":
        raise ValueError(
            f'{attribute.name}: only with recompute = "selective" (got recompute = {inst.recompute!r})'
        )
    bad = [m for m in value if m not in RECOMPUTE_MODULES]
    if bad or len(set(value)) != len(value):
        raise ValueError(
            f"{attribute.name}: expected distinct names among {', '.join(repr(m) for m in RECOMPUTE_MODULES)}, "
            f"got {list(value)!r}"
        )


def _non_negative(inst, attribute, value):
    if value < 0:
        raise ValueError(f"{attribute.name}: expected an integer >= 0, got {value!r}")


def _non_negative_or_none(inst, attribute, value):
    if value is not None:
        _non_negative(inst, attribute, value)


def _price(inst, attribute, value):
    """A price in US dollars: finite and >= 0 (0: free, such as an owned site's uplink)."""
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{attribute.name}: expected a finite number >= 0, got {value!r}")


def _rate_or_none(inst, attribute, value):
    """A rate or a duration: finite and >= 0, or None (not given)."""
    if value is not None and (not math.isfinite(value) or value < 0):
        raise ValueError(f"{attribute.name}: expected a finite number >= 0, got {value!r}")


def _label(inst, attribute, value):
    if not value.strip():
        raise ValueError(f"{attribute.name}: expected a non-empty string, got {value!r}")


@attrs.frozen(kw_only=True)
class ModelSpec:
    """``[model]``: the transformer (``kv_heads`` must divide ``heads``, ``experts_per_token``
    be at most ``experts``). Defaults: ``kv_heads = heads``,
    ``head_dim = hidden / heads``, ``ffn_hidden = 4 * hidden``, ``ffn = "gelu"``,
    untied embeddings, dense (``experts = 1``; ``capacity_factor = 1.0`` pads each
    expert's token buffer for MoE), causal attention, no dropout
    (``dropout = true`` stores Megatron-style dropout masks, as in Korthikanti
    et al. 2022's activation formulas).

    MoE shapes (DeepSeekMoE, Qwen-MoE; each needs ``experts > 1``): ``moe_ffn_hidden`` (each
    expert's width, default ``ffn_hidden``, which then sizes the dense layers),
    ``shared_experts`` (always-active experts of that width, default 0), ``dense_layers``
    (leading dense layers, default 0). Multi-head latent attention (DeepSeek-V2/V3):
    ``q_lora_rank`` / ``kv_lora_rank`` (default none: full projections), ``v_head_dim``
    (default ``head_dim``). ``hf_config``: the Hugging Face ``config.json`` the other keys
    were read from (:mod:`shardmeter.load.hf_config`)."""

    preset: str | None = None
    hf_config: str | None = None
    layers: int = attrs.field(validator=[_count, _bounded])
    hidden: int = attrs.field(validator=[_count, _bounded])
    heads: int = attrs.field(validator=[_count, _bounded])
    vocab: int = attrs.field(validator=[_count, _bounded])
    seq_len: int = attrs.field(validator=[_count, _bounded])
    kv_heads: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded, _kv_heads])
    head_dim: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    ffn_hidden: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    ffn: str = attrs.field(default="gelu", validator=_one_of("gelu", "swiglu"))
    tied_embeddings: bool = False
    experts: int = attrs.field(default=1, validator=[_count, _bounded])
    experts_per_token: int = attrs.field(default=1, validator=[_count, _bounded, _experts_per_token])
    capacity_factor: float = attrs.field(default=1.0, validator=_pos)
    causal: bool = True
    dropout: bool = False
    moe_ffn_hidden: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded, _moe_only])
    shared_experts: int = attrs.field(default=0, validator=[_non_negative, _bounded, _moe_only])
    dense_layers: int = attrs.field(default=0, validator=[_dense_layers, _bounded])
    q_lora_rank: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    kv_lora_rank: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    v_head_dim: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or max(1, self.hidden // self.heads)

    @property
    def d_ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def d_moe_ffn(self) -> int:
        return self.moe_ffn_hidden or self.d_ffn

    @property
    def d_v_head(self) -> int:
        return self.v_head_dim or self.d_head


#: Field metadata naming the key of the same table whose written value this key's absence
#: qualifies: ``recompute_layers`` unset means "every layer" of a written ``recompute = "full"``.
#: A software-stack profile never fills such a key where the scenario writes the key it
#: qualifies (SCENARIO.md, "Software stacks": a written key keeps its documented meaning).
QUALIFIES = "shardmeter.qualifies"
#: Field metadata: the values of the key it qualifies under which a qualifier means anything
#: (``recompute_layers`` only with ``recompute = "full"``). A variant that sets the qualified key
#: to another value (a plan's ``recompute = "none"``, a sweep's ``--vary training.recompute``)
#: drops the qualifier it does not set itself (:func:`stale_qualifiers`), as a user editing the
#: file would: the two keys are coupled, not independent.
QUALIFIES_WHEN = "shardmeter.qualifies_when"


#: ``training.critical_batch`` values: not priced, or Kaplan et al. 2020's critical batch.
CRITICAL_BATCH_MODELS = ("none", "kaplan-2020")


@attrs.frozen(kw_only=True)
class TrainingSpec:
    """``[training]``. Defaults: ``micro_batch = 1``, ``precision = "bf16"``,
    ``recompute = "none"``, ``optimizer = "adam"``, ``attention = "flash"``
    (the GPU's current fused-attention kernel, which skips masked blocks:
    FlashAttention-2 on Ampere, FlashAttention-3 / cuDNN on Hopper and later;
    ``"flash2"`` the FlashAttention-2 kernels on any GPU, as stacks of 2023-2024 ran
    them on H100; ``"materialized"`` stores and computes the full score matrix, as
    Megatron-LM did before FlashAttention)."""

    global_batch: int = attrs.field(validator=[_count, _bounded])
    micro_batch: int = attrs.field(default=1, validator=[_count, _bounded])
    precision: str = attrs.field(default="bf16", validator=_one_of(*PRECISIONS))
    recompute: str = attrs.field(default="none", validator=_one_of(*RECOMPUTE_MODES))
    #: with ``recompute = "full"``: layers recomputed per pipeline stage (per model chunk); None = all.
    #: It qualifies ``recompute``: its absence is part of what a written ``recompute = "full"``
    #: means (every layer), so no profile may fill it under a written ``recompute``
    #: (:data:`QUALIFIES`).
    recompute_layers: int | None = attrs.field(
        default=None,
        validator=[_non_negative_or_none, _bounded, _with_full_recompute],
        metadata={QUALIFIES: "recompute", QUALIFIES_WHEN: ("full",)},
    )
    #: with ``recompute = "selective"``: the submodules recomputed (Megatron-Core's
    #: ``recompute_modules``); None: ``["core_attn"]``, the attention core, Megatron's default
    recompute_modules: tuple[str, ...] | None = attrs.field(
        default=None,
        validator=_recompute_modules,
        metadata={QUALIFIES: "recompute", QUALIFIES_WHEN: ("selective",)},
    )
    #: layers per stage whose activations wait in host memory (Megatron-Core cpu_offloading_num_layers)
    offload_layers: int = attrs.field(default=0, validator=[_non_negative, _bounded])
    #: fused elementwise kernels (torch.compile, Transformer Engine, Apex); false = eager PyTorch
    compile: bool = True
    #: with ``precision = "fp8"``: how scaling factors are found (SCENARIO "What the training keys mean")
    fp8_recipe: str = attrs.field(default="tensorwise", validator=_one_of(*FP8_RECIPES))
    #: weights held and all-gathered in fp8 (Megatron --fp8-param-gather, torchao fp8 all-gather)
    fp8_params: bool = False
    #: whose state the optimizer keeps per parameter (:mod:`shardmeter.model.optimizers`)
    optimizer: str = attrs.field(default="adam", validator=_one_of(*OPTIMIZERS))
    attention: str = attrs.field(default="flash", validator=_one_of("flash", "flash2", "materialized"))
    #: the loss writes the logits' gradient in place of what it saved (Megatron's vocab-parallel
    #: cross-entropy, a fused or chunked loss): no transient copies in its backward; None: the
    #: framework profile's behaviour (``FrameworkPart.loss_fused``), else ``F.cross_entropy``
    fused_loss: bool | None = None
    #: the weight gradients of successive micro-batches are summed inside the weight-gradient
    #: GEMM (Megatron's ``--gradient-accumulation-fusion``): no pass of their own; False: one
    #: elementwise add per micro-batch after the first over the gradient buffer
    #: (:mod:`shardmeter.model.grad_accumulation`); None: the framework profile's behaviour
    #: (``FrameworkPart.grad_accumulation_fused``), else True (not priced)
    grad_accumulation_fusion: bool | None = None
    #: whose fp8 linears: ``"transformer-engine"`` (keeps the fp8 copy of each input for the
    #: weight-gradient GEMM) or ``"torchao"`` (keeps the 16-bit input); None: the framework
    #: profile's, else Transformer Engine for ``delayed`` and torchao for the other recipes
    fp8_backend: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(_one_of("transformer-engine", "torchao"))
    )
    #: ``"lora"``: the model's weights are frozen and low-rank adapters on ``lora_targets`` are
    #: trained (no gradients or optimizer state for the frozen weights, no weight-gradient GEMMs
    #: for them; ``docs/scenario.md``, "Fine-tuning with LoRA"); ``"none"``: full training
    peft: str = attrs.field(default="none", validator=_one_of(*PEFT_METHODS))
    #: with ``peft = "lora"``: the adapters' rank; None: :data:`LORA_DEFAULT_RANK`
    lora_rank: int | None = attrs.field(
        default=None,
        validator=[_count_or_none, _bounded, _with_lora],
        metadata={QUALIFIES: "peft", QUALIFIES_WHEN: ("lora",)},
    )
    #: with ``peft = "lora"``: the linears given adapters; None: all of :data:`LORA_TARGETS`
    lora_targets: tuple[str, ...] | None = attrs.field(
        default=None,
        validator=[_lora_targets, _with_lora],
        metadata={QUALIFIES: "peft", QUALIFIES_WHEN: ("lora",)},
    )
    tokens: float | None = attrs.field(default=None, validator=_pos)
    #: the global batch priced against a critical batch (``docs/convergence.md``, "The global
    #: batch"): ``"kaplan-2020"`` (McCandlish et al. 2018 with Kaplan et al. 2020's B_crit(L)) adds
    #: its factor to the report's ``quality``; ``"none"`` (default): not priced
    critical_batch: str = attrs.field(default="none", validator=_one_of(*CRITICAL_BATCH_MODELS))
    #: a software-stack profile (``docs/frameworks.md``) whose defaults filled the keys not written
    framework: str | None = None
    #: the profile's state: ``"YYYY-MM"`` (as of the month's last day), ``"YYYY-MM-DD"`` or a
    #: release name; None: the newest state the profile knows (only with ``framework``)
    framework_version: str | None = None


@attrs.frozen(kw_only=True)
class ParallelismSpec:
    """``[parallelism]`` inside one island. ``dp`` defaults to what fills the island.

    ``tp_comm_overlap`` (default false) hides tensor-parallel communication
    under GEMMs (Transformer Engine userbuffers); ``dp_comm_overlap`` (default
    true) overlaps bucketed gradient reduction with the backward pass.
    ``options`` holds keys read by registered sharding/schedule strategies.
    """

    tp: int = attrs.field(default=1, validator=[_count, _bounded])
    pp: int = attrs.field(default=1, validator=[_count, _bounded])
    dp: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    cp: int = attrs.field(default=1, validator=[_count, _bounded])
    ep: int = attrs.field(default=1, validator=[_count, _bounded])
    #: the routed experts' own tensor parallelism (Megatron-Core ``expert_tensor_parallel_size``);
    #: None: ``tp``, Megatron-Core's default. The experts' ``expert_tp x ep`` ranks are laid over
    #: a stage's ``tp x cp x dp`` ("MoE parallel folding"), so ``ep`` may exceed ``dp x cp``
    expert_tp: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    sequence_parallel: bool = False
    sharding: str = "none"
    schedule: str = "1f1b"
    virtual_stages: int = attrs.field(default=1, validator=[_count, _bounded])
    #: layers on the first / last pipeline stage (Megatron --decoder-first/last-pipeline-num-layers);
    #: None = as even a split as the layers allow
    first_stage_layers: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    last_stage_layers: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    #: the input embedding / the output layer and loss count as one layer each of the pipeline
    #: split (Megatron --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split)
    embedding_in_split: bool = False
    loss_in_split: bool = False
    tp_comm_overlap: bool = False
    #: PyTorch asynchronous TP (micro-pipelined all-gather/reduce-scatter with the GEMMs)
    async_tp: bool = False
    dp_comm_overlap: bool = True
    options: Mapping[str, Any] = attrs.field(factory=FrozenDict, converter=freeze)


@attrs.frozen(kw_only=True)
class SyncSpec:
    """``[sync]``: how islands synchronise and ``batch_split`` (``"replicas"`` or
    ``"balanced"``); ``options`` holds the chosen (or any registered) sync strategy's keys such as
    ``inner_steps``."""

    strategy: str = "allreduce"
    #: how ``global_batch`` is split between islands: by data-parallel replicas, or "balanced"
    #: (integer micro-batches per island, so that the islands finish together)
    batch_split: str = attrs.field(
        default="replicas", validator=attrs.validators.in_(("replicas", "balanced"))
    )
    #: a registered convergence model (``docs/convergence.md``); None or "none": not priced
    convergence: str | None = None
    options: Mapping[str, Any] = attrs.field(factory=FrozenDict, converter=freeze)


def _at_least_one(inst, attribute, value):
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 1
    ):
        raise ValueError(f"{attribute.name}: expected a number >= 1, got {value!r}")


@attrs.frozen(kw_only=True)
class TierSpec:
    """One network tier of an island (``tiers = [...]``, innermost first): ``link`` (a registered
    interconnect or an inline table), ``gpus`` joined by one domain of it (omit on the last:
    the whole island) and ``oversubscription`` (>= 1; bandwidth across the tier divided by it)."""

    link: Any
    gpus: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    oversubscription: float = attrs.field(default=1.0, validator=_at_least_one)


@attrs.frozen(kw_only=True)
class IslandSpec:
    """``[[island]]``: one cluster. Parts (``gpu``, links, ``price``) are a
    registered name or an inline table ``{ name = "...", field = value }``."""

    name: str | None = None
    gpu: Any = None
    nodes: int = attrs.field(validator=[_count, _bounded])
    gpus_per_node: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    intra_node: Any = None
    inter_node: Any = None
    nics_per_node: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    price: Any = None
    tiers: tuple[TierSpec, ...] | None = None
    parallelism: ParallelismSpec | None = None
    #: this island's own uplink to the other islands (a link name or table); None: ``[network] link``
    uplink: Any = None
    #: this island's own sequences per micro-batch (ShardMeter's extension of the contract);
    #: None: ``training.micro_batch``
    micro_batch: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    #: interruptions per node-hour (a preemptible island; an offer's ``preemption_per_h``)
    preemption_per_h: float | None = attrs.field(default=None, validator=_rate_or_none)


@attrs.frozen(kw_only=True)
class OfferSpec:
    """``[[offer]]``: a candidate island to rent (a cloud region, a provider): up to
    ``max_nodes`` nodes of ``gpu`` at ``price_usd_per_gpu_hour`` (billed per GPU the island
    has), ``egress_usd_per_gb`` for the bytes it sends to other islands (default 0), its own
    ``uplink`` (default ``[network] link``) and the island's links (``gpus_per_node``,
    ``intra_node``, ``inter_node``, ``nics_per_node``; defaults from the GPU, as for an island).
    ``price_date`` says when the price was read. ``shardmeter.load.offers`` turns offers into
    islands."""

    name: str = attrs.field(validator=_label)
    gpu: Any
    max_nodes: int = attrs.field(validator=[_count, _bounded])
    gpus_per_node: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    intra_node: Any = None
    inter_node: Any = None
    nics_per_node: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    price_usd_per_gpu_hour: float = attrs.field(validator=_price)
    egress_usd_per_gb: float = attrs.field(default=0.0, validator=_price)
    uplink: Any = None
    price_date: str | None = None
    #: interruptions per node-hour of a preemptible (spot) offer; 0: on-demand
    preemption_per_h: float | None = attrs.field(default=None, validator=_rate_or_none)


def _quantile(inst, attribute, value):
    if not 0.0 < value < 1.0:
        raise ValueError(f"{attribute.name} must lie between 0 and 1 (exclusive), got {value}")


@attrs.frozen(kw_only=True)
class ReliabilitySpec:
    """``[reliability]``: the failure ``model`` (a registered failure part; its keys, such as
    ``gpu_mtbf_h`` and ``restart_s``, are in ``options``), the checkpoint store's write
    bandwidth per node, the checkpoint interval (0: the Young/Daly optimum) and whether the
    write overlaps training (``async_checkpoint``)."""

    model: str = "llama3-h100"
    checkpoint_write_gb_s: float = attrs.field(default=20.0, validator=_pos)
    checkpoint_interval_s: float = attrs.field(default=0.0, validator=_rate_or_none)
    async_checkpoint: bool = False
    options: Mapping[str, Any] = attrs.field(factory=FrozenDict, converter=freeze)


@attrs.frozen(kw_only=True)
class VariabilitySpec:
    """``[variability]``: the variability ``model`` (a registered variability part; its keys,
    such as ``gpu_step_cv`` and ``link_cv``, are in ``options``) and the step ``quantile`` that
    the expected wall-clock and cost use."""

    model: str = "lognormal"
    quantile: float = attrs.field(default=0.5, validator=_quantile)
    options: Mapping[str, Any] = attrs.field(factory=FrozenDict, converter=freeze)


@attrs.frozen(kw_only=True)
class NetworkSpec:
    """``[network]``: the link between islands (each island's uplink)."""

    link: Any = "internet"


@attrs.frozen(kw_only=True)
class StageGroupSpec:
    """``[[stage_group]]``: consecutive pipeline stages of one heterogeneous pipeline on one
    island's GPUs (Metis's *device group* running a *stage partition*, Sailor's per-stage GPU
    type and TP degree): ``island`` (the ``[[island]]`` whose GPUs run them), ``stages`` (how
    many), ``tp`` (each stage's tensor parallel degree; None: ``parallelism.tp``), ``layers``
    (each stage's transformer layers, one count per stage, as loaded) and ``micro_batch``
    (None: ``training.micro_batch``). :mod:`shardmeter.load.stage_groups` checks them."""

    name: str = attrs.field(validator=_label)
    island: str = attrs.field(validator=_label)
    stages: int = attrs.field(validator=[_count, _bounded])
    layers: tuple[int, ...]
    tp: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    micro_batch: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])


@attrs.frozen(kw_only=True)
class Scenario:
    """A whole scenario. ``notes`` collects accepted-but-unused keys. ``islands`` ends with one
    island per ``offers`` entry (at its ``max_nodes``, named as the offer), which
    :meth:`to_dict` writes back as ``[[offer]]`` only."""

    model: ModelSpec
    training: TrainingSpec
    islands: tuple[IslandSpec, ...]
    offers: tuple[OfferSpec, ...] = ()
    parallelism: ParallelismSpec = attrs.field(factory=ParallelismSpec)
    network: NetworkSpec | None = None
    sync: SyncSpec = attrs.field(factory=SyncSpec)
    #: ``[reliability]`` / ``[variability]``; None: a run never fails, every rank is alike
    reliability: ReliabilitySpec | None = None
    variability: VariabilitySpec | None = None
    measured: Mapping[str, float] = attrs.field(factory=FrozenDict, converter=freeze)
    source: Mapping[str, Any] = attrs.field(factory=FrozenDict, converter=freeze)
    #: ``catalog``: overlay files (paths relative to the scenario's file), applied at resolve
    catalog: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()
    #: the ``table.key`` values ``training.framework``'s profile set (not written in the file)
    framework_keys: tuple[str, ...] = ()
    file: str | None = None
    #: ``[[stage_group]]``: one pipeline whose stages run on several islands (empty: none)
    stage_groups: tuple[StageGroupSpec, ...] = ()

    def micro_batch(self, j: int) -> int:
        """Island ``j``'s sequences per micro-batch: its own ``micro_batch``, else
        ``training.micro_batch``."""
        own = self.islands[j].micro_batch
        return self.training.micro_batch if own is None else own

    def to_dict(self) -> dict[str, Any]:
        """The scenario as plain tables (inverse of loading, presets expanded)."""
        d = CONVERTER.unstructure(self)
        d.pop("notes", None)
        d.pop("file", None)
        d.pop("framework_keys", None)
        groups = d.pop("stage_groups", None)
        if groups:
            d["stage_group"] = groups
        offered = {o.name for o in self.offers}
        d["island"] = [isl for isl in d.pop("islands") if isl.get("name") not in offered]
        if not d["island"]:
            del d["island"]
        offers = d.pop("offers")
        if offers:
            d["offer"] = offers
        for isl in d.get("island", ()):
            if isl.get("parallelism") is not None:
                isl["parallelism"].update(isl["parallelism"].pop("options", {}))
        d["parallelism"].update(d["parallelism"].pop("options", {}))
        d["sync"].update(d["sync"].pop("options", {}))
        for table in ("reliability", "variability"):
            if d.get(table) is not None:
                d[table].update(d[table].pop("options", {}))
        if d["sync"].get("batch_split") == "replicas":  # the default: written only when chosen
            del d["sync"]["batch_split"]
        return _drop_none(d)


def _drop_none(x):
    if isinstance(x, dict):
        return {k: _drop_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_drop_none(v) for v in x]
    return x


def stale_qualifiers(table: str, field: str, value: Any) -> tuple[str, ...]:
    """The keys of ``table`` that qualify ``table.field`` (:data:`QUALIFIES`) and mean nothing
    when it is ``value`` (:data:`QUALIFIES_WHEN`): what a variant setting it must drop."""
    spec = {"training": TrainingSpec, "parallelism": ParallelismSpec}.get(table)
    if spec is None:
        return ()
    return tuple(
        a.name
        for a in attrs.fields(spec)
        if a.metadata.get(QUALIFIES) == field and value not in a.metadata.get(QUALIFIES_WHEN, (value,))
    )


def qualified_key(table: str, field: str) -> str | None:
    """The ``table.key`` whose written value ``table.field``'s absence qualifies (its
    :data:`QUALIFIES` metadata), else None."""
    spec = {"training": TrainingSpec, "parallelism": ParallelismSpec}.get(table)
    if spec is None:
        return None
    for a in attrs.fields(spec):
        if a.name == field and QUALIFIES in a.metadata:
            return f"{table}.{a.metadata[QUALIFIES]}"
    return None
