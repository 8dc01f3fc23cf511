"""Typed model inputs: frozen bundles of arrays with units in the names.

Every array broadcasts to ``(N, I)``: N rows (candidate plans, sweep points) by I islands;
the topology's tier arrays carry a trailing tier axis ``(N, I, T)``. Part codes index the
:class:`PartTable` the inputs were built with. For the scalar path (one plan, one island) the
same bundles hold Python floats and bools, and tuples per tier.

The planner and the sweep move inputs around as flat *columns* (``"layout.tp"``, ...):
:meth:`ModelInputs.columns` and :meth:`ModelInputs.from_columns` convert, so a column name is
always ``bundle.field`` of these classes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from shardmeter.numeric.ops import Array
from shardmeter.registry import guard
from shardmeter.registry.guard import GuardedPart, bundled

__all__ = [
    "ModelShape",
    "Training",
    "Hardware",
    "Topology",
    "Layout",
    "Network",
    "ModelInputs",
    "PartTable",
    "Recompute",
    "Fp8Recipe",
    "RECOMPUTE_CODES",
    "FP8_RECIPE_CODES",
    "OPTIMIZER_CODES",
    "Optimizer",
]


class Recompute(enum.IntEnum):
    """``training.recompute`` as the model's code (``Training.recompute`` holds these as floats,
    so ``rec == Recompute.FULL`` works on arrays and on the scalar path alike)."""

    NONE = 0
    SELECTIVE = 1
    FULL = 2
    OP = 3


#: :class:`Recompute`'s codes as plain floats, for the comparisons the model makes on every plan
#: (``rec == REC_FULL``): on Python 3.11 an enum member's lookup goes through
#: ``EnumType.__getattr__``'s hook (~80 ns), a module constant's costs nothing.
REC_NONE, REC_SELECTIVE, REC_FULL, REC_OP = (float(m) for m in Recompute)


class Fp8Recipe(enum.IntEnum):
    """``training.fp8_recipe`` as the model's code."""

    TENSORWISE = 0
    ROWWISE = 1
    DELAYED = 2
    BLOCKWISE = 3
    MXFP8 = 4


class Optimizer(enum.IntEnum):
    """``training.optimizer`` as the model's code (its state: :mod:`shardmeter.model.optimizers`)."""

    ADAM = 0
    ADAMW = 1
    SGD = 2
    SGD_MOMENTUM = 3
    ADAFACTOR = 4
    ADAM8BIT = 5
    MUON = 6


#: :class:`Optimizer`'s codes the model compares with, as plain floats (as :data:`REC_FULL`).
OPT_SGD, OPT_SGD_MOMENTUM, OPT_ADAFACTOR, OPT_ADAM8BIT, OPT_MUON = (
    float(m)
    for m in (Optimizer.SGD, Optimizer.SGD_MOMENTUM, Optimizer.ADAFACTOR, Optimizer.ADAM8BIT, Optimizer.MUON)
)


#: ``training.optimizer`` name -> :class:`Optimizer` code.
OPTIMIZER_CODES = {m.name.lower().replace("_", "-"): int(m) for m in Optimizer}
#: ``training.recompute`` name -> :class:`Recompute` code.
RECOMPUTE_CODES = {m.name.lower(): int(m) for m in Recompute}
#: ``training.fp8_recipe`` name -> :class:`Fp8Recipe` code.
FP8_RECIPE_CODES = {m.name.lower(): int(m) for m in Fp8Recipe}


@attrs.frozen(kw_only=True)
class ModelShape:
    """The transformer: ``layers``, ``hidden``, ``heads``, ``kv_heads``, ``q_dim`` (heads x
    head_dim), ``kv_dim``, ``ffn_hidden``, ``swiglu`` (bool), ``vocab``, ``seq_len``, ``tied``
    embeddings, ``experts``, ``experts_per_token``, ``capacity_factor``, ``causal``, ``dropout``;
    the optional MoE and attention shapes: ``moe_ffn_hidden`` (expert width, default
    ``ffn_hidden``), ``shared_experts`` and ``dense_layers`` (default 0), ``q_rank`` / ``kv_rank``
    (MLA's low ranks, 0 = full projections), ``v_dim`` (kv_heads x value head width, default
    ``kv_dim``) and ``o_dim`` (heads x value head width, default ``q_dim``)."""

    layers: Array
    hidden: Array
    heads: Array
    kv_heads: Array
    q_dim: Array
    kv_dim: Array
    ffn_hidden: Array
    swiglu: Array
    vocab: Array
    seq_len: Array
    tied: Array
    experts: Array
    experts_per_token: Array
    capacity_factor: Array
    causal: Array
    dropout: Array
    moe_ffn_hidden: Array = attrs.field(default=attrs.Factory(lambda s: s.ffn_hidden, takes_self=True))
    shared_experts: Array = 0.0
    dense_layers: Array = 0.0
    q_rank: Array = 0.0
    kv_rank: Array = 0.0
    v_dim: Array = attrs.field(default=attrs.Factory(lambda s: s.kv_dim, takes_self=True))
    o_dim: Array = attrs.field(default=attrs.Factory(lambda s: s.q_dim, takes_self=True))


@attrs.frozen(kw_only=True)
class Training:
    """``global_batch`` and ``micro_batch`` (sequences), ``recompute`` (:data:`RECOMPUTE_CODES`),
    ``materialized`` attention (bool), ``weight_bytes`` per parameter, ``fp8`` GEMMs (bool);
    ``recompute_layers`` (with full recompute: layers recomputed per stage and model chunk, 0 =
    all), ``offload_layers`` (layers per stage whose activations go to host memory),
    ``compile`` (fused elementwise kernels; 0 = eager PyTorch; with op recompute, torchtitan's
    torch.compile of each block), ``fp8_recipe`` (:data:`FP8_RECIPE_CODES`), ``fp8_params``
    (weights held and gathered in fp8), ``compiled_loss`` (the cross-entropy runs under
    torch.compile: bf16 logits kept, not fp32; :func:`~.memory.logits_bytes_per_element`) and
    ``op_saves_attention`` (op recompute saves the attention kernel's output and log-sum-exp;
    0 = the stack's save list leaves the kernel out, so attention is recomputed in the backward:
    torchtitan's cuDNN SDPA on Blackwell, ``FrameworkPart.op_saves_attention``);
    ``expandable_segments`` (the stack runs PyTorch's caching allocator with
    ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, ``FrameworkPart.expandable_segments``;
    :mod:`~shardmeter.model.allocator`)."""

    global_batch: Array
    micro_batch: Array
    #: sequences per step on each island; 0 = its share of ``global_batch`` by replicas (``dp``)
    island_batch: Array = 0.0
    recompute: Array
    materialized: Array
    weight_bytes: Array
    fp8: Array
    recompute_layers: Array = 0.0
    offload_layers: Array = 0.0
    compile: Array = 1.0
    fp8_recipe: Array = 0.0
    fp8_params: Array = 0.0
    compiled_loss: Array = 0.0
    op_saves_attention: Array = 1.0
    expandable_segments: Array = 0.0
    #: ``training.optimizer`` (:data:`OPTIMIZER_CODES`)
    optimizer: Array = 0.0
    #: the stack's loss backward writes the logits' gradient in place (``FrameworkPart.loss_fused``)
    fused_loss: Array = 0.0
    #: the micro-batches' weight gradients are summed inside the weight-gradient GEMM
    #: (``training.grad_accumulation_fusion``; 0: an add of its own per micro-batch,
    #: :mod:`~shardmeter.model.grad_accumulation`)
    grad_acc_fused: Array = 1.0
    #: with ``tp`` > 1 the loss runs under DTensor's ``loss_parallel()``
    #: (``FrameworkPart.loss_parallel_enabled``; :func:`~.memory.loss_transient_bytes`)
    loss_parallel: Array = 0.0
    #: the fp8 linears are Transformer Engine's, which keep the fp8 copy of their input
    #: (``training.fp8_backend``; :func:`~shardmeter.model.fp8.saved_input_bytes_per_byte`)
    fp8_te: Array = 0.0
    #: ``training.recompute_modules`` under selective recompute, 1 where recomputed
    #: (:mod:`~shardmeter.model.selective`); the attention core by default
    rc_core_attn: Array = 1.0
    rc_mlp: Array = 0.0
    rc_moe: Array = 0.0
    rc_shared_experts: Array = 0.0
    rc_moe_act: Array = 0.0
    rc_layernorm: Array = 0.0
    rc_mla_up_proj: Array = 0.0
    #: ``training.peft = "lora"``: the adapters' rank (``training.lora_rank``); 0 = full training
    lora_rank: Array = 0.0
    #: with LoRA, 1 where the linear carries an adapter (``training.lora_targets``)
    lora_qkv: Array = 0.0
    lora_proj: Array = 0.0
    lora_fc1: Array = 0.0
    lora_fc2: Array = 0.0


@attrs.frozen(kw_only=True)
class Hardware:
    """One GPU: ``peak_flops`` at the training precision and ``peak16_flops`` at 16 bits (FLOP/s;
    0 = no tensor-core rate), ``memory_bytes``, ``hbm_bytes_s`` and ``hbm_efficiency``,
    ``gemm_efficiency``, ``attention_efficiency`` (of the chosen kernel), ``sm_count``;
    ``host_bytes_s``: the GPU's link to host memory, one direction (PCIe or NVLink-C2C)."""

    peak_flops: Array
    peak16_flops: Array
    memory_bytes: Array
    hbm_bytes_s: Array
    hbm_efficiency: Array
    gemm_efficiency: Array
    attention_efficiency: Array
    sm_count: Array
    host_bytes_s: Array = 32e9
    #: CUDA compute capability (9.0 Hopper; 0 unknown): PyTorch sizes its cuBLAS workspace by it
    compute_capability: Array = 0.0


@attrs.frozen(kw_only=True)
class Topology:
    """An island's GPUs and network tiers.

    ``gpus_per_node`` and ``nodes``; ``domain_gpus``: GPUs of the innermost tier's domain (a node,
    an NVLink domain); per tier (trailing axis, innermost first) ``tier_gpus``:
    the GPUs one domain of that tier joins (a node, an NVLink domain, a rail group; ``inf`` for
    the outermost, which joins the whole island), ``tier_bytes_s``: achieved bandwidth per GPU
    across that tier, one direction (a NIC's share per GPU and any oversubscription applied),
    ``tier_latency_s``: latency of one step of a collective algorithm on it.
    """

    gpus_per_node: Array
    nodes: Array
    domain_gpus: Array
    tier_gpus: Array
    tier_bytes_s: Array
    tier_latency_s: Array


@attrs.frozen(kw_only=True)
class Layout:
    """Parallel degrees ``tp``, ``pp``, ``dp``, ``cp``, ``ep``; ``sequence_parallel``,
    ``virtual_stages``, ``tp_comm_overlap``, ``dp_comm_overlap``, ``async_tp`` (bools);
    ``first_stage_layers`` / ``last_stage_layers`` (0 = as even a split as the layers allow);
    ``embedding_in_split`` / ``loss_in_split`` (bools: the embedding, the output layer and loss
    count as a layer of the split); ``sharding`` and ``schedule``: codes into the :class:`PartTable`."""

    tp: Array
    pp: Array
    dp: Array
    cp: Array
    ep: Array
    sequence_parallel: Array
    virtual_stages: Array
    tp_comm_overlap: Array
    dp_comm_overlap: Array
    sharding: Array
    schedule: Array
    async_tp: Array = 0.0
    first_stage_layers: Array = 0.0
    last_stage_layers: Array = 0.0
    embedding_in_split: Array = 0.0
    loss_in_split: Array = 0.0
    #: the routed experts' tensor parallelism (``parallelism.expert_tp``); 0 = ``tp``
    expert_tp: Array = 0.0


@attrs.frozen(kw_only=True)
class Network:
    """Between islands: each island's achieved uplink ``wan_bytes_s`` (its own ``uplink``, else
    the ``[network]`` link), ``wan_latency_s`` per ring step, and the ``sync`` strategy's code
    (one per row)."""

    wan_bytes_s: Array
    wan_latency_s: Array
    sync: Array


_BUNDLES: dict[str, type] = {
    "model": ModelShape,
    "training": Training,
    "hardware": Hardware,
    "topology": Topology,
    "layout": Layout,
    "network": Network,
}


@attrs.frozen(kw_only=True)
class ModelInputs:
    """All inputs of one batch: one bundle of each kind."""

    model: ModelShape
    training: Training
    hardware: Hardware
    topology: Topology
    layout: Layout
    network: Network

    def columns(self) -> dict[str, np.ndarray]:
        """``{"bundle.field": array}`` of every input."""
        out = {}
        for b in _BUNDLES:
            bundle = getattr(self, b)
            for f in attrs.fields(type(bundle)):
                out[f"{b}.{f.name}"] = getattr(bundle, f.name)
        return out

    @classmethod
    def from_columns(cls, cols: Mapping[str, Any]) -> ModelInputs:
        """The inverse of :meth:`columns` (every column must be present)."""
        parts: dict[str, dict[str, Any]] = {b: {} for b in _BUNDLES}
        for key, value in cols.items():
            b, _, name = key.partition(".")
            parts[b][name] = value
        return cls(
            **{b: bcls(**{k: np.asarray(v) for k, v in parts[b].items()}) for b, bcls in _BUNDLES.items()}
        )


#: Every column name, in order.
COLUMNS = tuple(f"{b}.{f.name}" for b, c in _BUNDLES.items() for f in attrs.fields(c))


class PartTable:
    """The distinct (part, options) pairs a batch uses, per kind; a row's code is an index here.

    One table is shared by every variant of a sweep or plan, so codes from different scenarios
    mean the same pair: :meth:`code` appends a pair it has not seen.
    """

    def __init__(self) -> None:
        self.entries: dict[str, list[tuple[Any, Any]]] = {"sharding": [], "schedule": [], "sync": []}
        #: ``(kind, code) -> whether the part is bundled`` (:func:`~shardmeter.registry.guard.bundled`),
        #: decided once per entry where the registry's record of who provided it is at hand
        #: (the entries are only ever appended; a pickled table carries the decisions to a
        #: worker process, where no registry holds its parts)
        self._bundled: dict[tuple[str, int], bool] = {}

    def code(self, kind: str, part: Any, opts: Any) -> int:
        rows = self.entries[kind]
        for i, (p, o) in enumerate(rows):
            if (p is part or p == part) and o == opts:
                return i
        rows.append((part, opts))
        return len(rows) - 1

    def get(self, kind: str, code: int) -> tuple[Any, Any]:
        """The (part, options) pair of ``code``: the part as a
        :class:`~shardmeter.registry.guard.GuardedPart`, whose every hook's result is checked
        where the model uses it (a broken one is a PluginError naming the plugin), or itself
        where it is bundled (:func:`~shardmeter.registry.guard.bundled`)."""
        part, opts = self.entries[kind][code]
        own = self._bundled.get((kind, code))
        if own is None:
            own = self._bundled[(kind, code)] = bundled(part)
        return (part if own and not guard.GUARD_BUNDLED else GuardedPart(kind, part)), opts

    def __getstate__(self) -> dict[str, Any]:
        own = {(k, i): bundled(p) for k, rows in self.entries.items() for i, (p, _) in enumerate(rows)}
        return {"entries": self.entries, "bundled": own}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.entries = state["entries"]
        self._bundled = dict(state.get("bundled", {}))
