"""Why a plan cannot run: one :class:`Reason` flag per cause, the scenario key it names, and
the checks that need no model (shared by :func:`~.evaluate.evaluate` and the planner's
pre-checks, so both reject a plan for the same reason with the same arithmetic), the sharding
strategy's own verdict among them (:func:`sharding_reasons`)."""

from __future__ import annotations

import enum
import math
from typing import Any

import numpy as np

from shardmeter.inputs.bundles import PartTable
from shardmeter.model.dispatch import by_code
from shardmeter.model.stages import StageLayers, stage_layers
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.numeric.reduce import over_islands
from shardmeter.parts import ShardInputs

__all__ = [
    "Reason",
    "REASONS",
    "reason_messages",
    "part_templates",
    "layout_reasons",
    "batch_split",
    "batch_reasons",
    "structural_shard_inputs",
    "sharding_reasons",
]


class Reason(enum.IntFlag):
    """Infeasibility causes (bit values are stable: reports and plan counts use them)."""

    TP_HEADS = 1
    CP_SEQUENCE = 2
    EP_EXPERTS = 4
    TOO_MANY_GPUS = 8
    BATCH_SPLIT = 16
    MEMORY = 32
    PRECISION = 64
    SCHEDULE = 128
    STAGES = 256
    STAGE_LAYERS = 512
    SHARDING = 1024


#: Each :class:`Reason` bit as a plain int, for the masks computed on every plan: on Python 3.11
#: an enum member's lookup goes through ``EnumType.__getattr__``'s hook (~80 ns), a module
#: constant's costs nothing (and ``ops.where`` of two ints takes its quickest branch).
BIT_TP_HEADS = int(Reason.TP_HEADS)
BIT_CP_SEQUENCE = int(Reason.CP_SEQUENCE)
BIT_EP_EXPERTS = int(Reason.EP_EXPERTS)
BIT_TOO_MANY_GPUS = int(Reason.TOO_MANY_GPUS)
BIT_BATCH_SPLIT = int(Reason.BATCH_SPLIT)
BIT_MEMORY = int(Reason.MEMORY)
BIT_PRECISION = int(Reason.PRECISION)
BIT_SCHEDULE = int(Reason.SCHEDULE)
BIT_STAGES = int(Reason.STAGES)
BIT_STAGE_LAYERS = int(Reason.STAGE_LAYERS)
BIT_SHARDING = int(Reason.SHARDING)


#: Reason -> (scenario key, message template); the key may hold ``{j}`` (the island).
REASONS: dict[int, tuple[str, str]] = {
    Reason.TP_HEADS: ("parallelism.tp", "tp ({tp}) must divide model.heads ({heads})"),
    Reason.CP_SEQUENCE: ("parallelism.cp", "cp ({cp}) must divide model.seq_len ({s})"),
    Reason.EP_EXPERTS: (
        "parallelism.ep",
        "ep ({ep}) must divide model.experts ({E}), and expert_tp x ep ({etp_ep}) a stage's tp x cp x dp "
        "ranks ({tcd}; Megatron-Core: world_size must be divisible by expert_tensor_model_pipeline_parallel size)",
    ),
    Reason.TOO_MANY_GPUS: ("parallelism", "tp x pp x cp x dp = {used} exceeds the island's {gpus} GPUs"),
    Reason.BATCH_SPLIT: (
        "training.global_batch",
        "the island's share of global_batch ({bi}) is not a multiple of micro_batch x dp ({mbs_dp})",
    ),
    Reason.MEMORY: (
        "island[{j}].gpu.memory_gb",
        "the plan needs {mem_gb:.1f} GB per GPU, more than the "
        "{cap_gb:.1f} GB the GPU has (shard more: parallelism.tp/pp/sharding, training.recompute, "
        "or a smaller training.micro_batch)",
    ),
    Reason.PRECISION: ("training.precision", "the GPU has no tensor-core rate for this precision"),
    Reason.SCHEDULE: (
        "parallelism.virtual_stages",
        "the interleaved schedule needs the micro-batches ({m}) to be a multiple of pp ({pp})",
    ),
    Reason.STAGES: ("parallelism.pp", "pp x virtual_stages ({pv}) exceeds model.layers ({L})"),
    Reason.STAGE_LAYERS: (
        "parallelism.first_stage_layers",
        "first_stage_layers / last_stage_layers must leave the rest of model.layers ({L}) to split "
        "evenly over the other stages of pp ({pp}), and every stage's layers in whole chunks of "
        "pp x virtual_stages ({pv}), as Megatron-LM requires (with embedding_in_split / "
        "loss_in_split: model.layers plus one for each must divide into pp x virtual_stages chunks, "
        "and neither goes with first/last stage layers)",
    ),
    Reason.SHARDING: (
        "parallelism.sharding",
        "the sharding strategy cannot split dp x cp ({dpcp}) into its shard groups: a group (HSDP's: "
        "the data-parallel ranks inside one node) must divide it into whole replicas",
    ),
}


def _bits(x: Array) -> Array:
    return int(x) if ops.is_scalar(x) else np.asarray(x, dtype=np.int64)


def reason_messages(
    bits: int, values: dict[str, Any], templates: dict[int, str] | None = None
) -> list[tuple[str, str]]:
    """(key, message) for each reason bit set, formatted with ``values``; ``templates`` replaces
    the message of a bit (a schedule part's own :meth:`~shardmeter.SchedulePart.infeasible_message`)."""
    out = []
    for bit, (key, tmpl) in REASONS.items():
        tmpl = (templates or {}).get(int(bit), tmpl)
        if bits & bit:
            try:
                out.append((key, tmpl.format(**values)))
            except (KeyError, ValueError, IndexError):
                out.append((key, tmpl))
    return out


def part_templates(schedule: Any, schedule_opts: Any, sharding: Any, sharding_opts: Any) -> dict[int, str]:
    """The messages the parts give for their own reasons (:meth:`~shardmeter.SchedulePart.infeasible_message`
    for :attr:`Reason.SCHEDULE`, :meth:`~shardmeter.ShardingPart.infeasible_message` for
    :attr:`Reason.SHARDING`), as :func:`reason_messages` takes them; a part that gives none keeps
    :data:`REASONS`' message."""
    out = {}
    for bit, part, opts in (
        (Reason.SCHEDULE, schedule, schedule_opts),
        (Reason.SHARDING, sharding, sharding_opts),
    ):
        message = getattr(part, "infeasible_message", None)
        own = message(opts) if message is not None else None
        if own:
            out[int(bit)] = own
    return out


def layout_reasons(
    heads: Array,
    seq_len: Array,
    experts: Array,
    tp: Array,
    pp: Array,
    cp: Array,
    dp: Array,
    ep: Array,
    gpus: Array,
    etp: Array | None = None,
) -> Array:
    """Reasons that depend on the layout and the model only. Experts (``ep``, with their own
    tensor parallelism ``etp``, default ``tp``) are laid over a stage's ``tp x cp x dp`` ranks,
    Megatron-Core's expert grid ``etp x ep x edp x pp = world`` (megatron/core/parallel_state.py
    @d98e8a64: ``if world_size % expert_tensor_model_pipeline_parallel_size != 0: raise``)."""
    moe = experts > 1
    etp = tp if etp is None else etp
    if (
        type(moe) is bool
        and set(map(type, (heads, seq_len, tp, pp, cp, dp, ep, gpus, etp))) <= ops.ONLY_FLOAT
    ):
        # one plan: each where the bit it picks, the experts' divisibility only with experts
        ep_bad = (ops.mod(experts, ep) != 0) | _indivisible(tp * cp * dp, etp * ep) if moe else ep > 1
        return (
            (BIT_TP_HEADS if _indivisible(heads, tp) else 0)
            | (BIT_CP_SEQUENCE if _indivisible(seq_len, cp) else 0)
            | (BIT_EP_EXPERTS if ep_bad else 0)
            | (BIT_TOO_MANY_GPUS if tp * pp * cp * dp > gpus else 0)
        )
    bits = ops.where(ops.mod(heads, tp) != 0, BIT_TP_HEADS, 0)
    bits |= ops.where(ops.mod(seq_len, cp) != 0, BIT_CP_SEQUENCE, 0)
    bits |= ops.where(
        moe & ((ops.mod(experts, ep) != 0) | (ops.mod(tp * cp * dp, etp * ep) != 0))
        | (ops.logical_not(moe) & (ep > 1)),
        BIT_EP_EXPERTS,
        0,
    )
    bits |= ops.where(tp * pp * cp * dp > gpus, BIT_TOO_MANY_GPUS, 0)
    return _bits(bits)


def _indivisible(a: float, b: float) -> bool:
    """``ops.mod(a, b) != 0`` of two floats: ``a % b`` itself where ``ops.mod`` takes its
    scalar branch (a nonzero divisor, both finite), numpy's ``mod`` (nan) where it does not."""
    if b != 0.0 and a - a == 0.0 and b - b == 0.0:
        return a % b != 0
    return bool(ops.mod(a, b) != 0)


def batch_split(
    global_batch: Array, dp: Array, micro_batch: Array, island_batch: Array = 0.0
) -> tuple[Array, Array, Array]:
    """``(sequences per step on each island, micro-batches, whole micro-batches)``: each island's
    share of the global batch is proportional to its data-parallel replicas, unless
    ``island_batch`` (> 0) gives it (``[sync] batch_split = "balanced"``, the planner)."""
    if set(map(type, (global_batch, dp, micro_batch, island_batch))) <= ops.ONLY_FLOAT:
        # one plan on one island: the where the value it picks (its other side computed all the
        # same: it may divide by zero), floor and maximum written out (ops.floor's, nan as numpy's)
        share = global_batch * dp / dp
        b_isl = island_batch if island_batch > 0 else share
        m = b_isl / (dp * micro_batch)
        x = m + 1e-9
        x = float(math.floor(x)) if x - x == 0.0 else x
        return b_isl, m, x if x >= 1.0 else (1.0 if x < 1.0 else math.nan)
    if ops.is_scalar(dp):  # one island
        dp_total = dp
    else:
        n_isl = np.broadcast_shapes(np.shape(dp), np.shape(global_batch), (1, 1))[-1]
        full = np.broadcast_shapes(np.shape(dp), np.shape(global_batch), (1, n_isl))
        dp_total = over_islands(np.add, np.broadcast_to(dp, full))
    b_isl = ops.where(island_batch > 0, island_batch, global_batch * dp / dp_total)
    m = b_isl / (dp * micro_batch)
    return b_isl, m, ops.maximum(ops.floor(m + 1e-9), 1.0)


def batch_reasons(
    m: Array,
    pp: Array,
    virtual_stages: Array,
    layers: Array,
    first_stage_layers: Array = 0.0,
    last_stage_layers: Array = 0.0,
    embedding_in_split: Array = 0.0,
    loss_in_split: Array = 0.0,
    split: StageLayers | None = None,
) -> Array:
    """A batch that does not split into whole micro-batches, too many stages for the layers
    (``virtual_stages`` already 1 where ``pp = 1``), and first / last stage layers that break
    Megatron-LM's split rule, the embedding and loss counted in it or not
    (:func:`~.stages.stage_layers`; ``split``: its result for these same arguments, where the
    caller has it)."""
    if (
        split is not None
        and type(split.bad) is bool
        and set(map(type, (m, pp, virtual_stages, layers))) <= ops.ONLY_FLOAT
        and m - m == 0.0
    ):
        # one plan, a finite number of micro-batches (ops.rint's float(round(m))): plain ifs
        whole = abs(m - float(round(m))) <= 1e-9 and not m < 1 - 1e-9
        return (
            (0 if whole else BIT_BATCH_SPLIT)
            | (BIT_STAGES if pp * virtual_stages > layers else 0)
            | (BIT_STAGE_LAYERS if split.bad else 0)
        )
    bits = ops.where(ops.absolute(m - ops.rint(m)) > 1e-9, BIT_BATCH_SPLIT, 0) | ops.where(
        m < 1 - 1e-9, BIT_BATCH_SPLIT, 0
    )
    bits = bits | ops.where(pp * virtual_stages > layers, BIT_STAGES, 0)
    if split is None:
        split = stage_layers(
            layers,
            pp,
            virtual_stages,
            first_stage_layers,
            last_stage_layers,
            embedding_in_split,
            loss_in_split,
        )
    bad = split.bad
    bits = bits | ops.where(bad, BIT_STAGE_LAYERS, 0)
    return _bits(bits)


def structural_shard_inputs(tp: Array, dp: Array, cp: Array, topo: Any) -> ShardInputs:
    """What a sharding strategy's :meth:`~shardmeter.ShardingPart.infeasible` sees: the degrees
    and the island's tiers (``topo``: a :class:`~shardmeter.inputs.bundles.Topology`, or any
    record with its fields), every size field zero."""
    zero = 0.0 * dp
    return ShardInputs(
        params_per_gpu=zero,
        params_per_layer=zero,
        layers_per_stage=zero,
        weight_bytes=zero,
        grad_bytes=zero,
        optimizer_bytes_per_param=zero,
        tp=tp,
        dp=dp,
        cp=cp,
        domain_gpus=d if type(d := topo.domain_gpus) is float else ops.as_float(d),
        tier_gpus=topo.tier_gpus,
        tier_bytes_s=topo.tier_bytes_s,
        tier_latency_s=topo.tier_latency_s,
    )


def sharding_reasons(parts: PartTable, codes: Array, tp: Array, dp: Array, cp: Array, topo: Any) -> Array:
    """:attr:`Reason.SHARDING` where the row's sharding strategy (``codes`` into ``parts``, a
    ``PartTable``) refuses the layout (:meth:`~shardmeter.ShardingPart.infeasible` on
    :func:`structural_shard_inputs`): the call ``evaluate`` and the planner's pre-check share."""
    shard = structural_shard_inputs(tp, dp, cp, topo)
    if isinstance(codes, int | float):  # one plan: by_code's one call, the where's pick
        part, opts = parts.get("sharding", int(codes))
        bad = part.infeasible(shard, opts)
        if type(bad) is not float:
            bad = ops.as_float(bad)
        if type(bad) is float:
            return BIT_SHARDING if bad > 0 else 0
        return _bits(ops.where(bad > 0, BIT_SHARDING, 0))

    def run(code: int) -> dict[str, Any]:
        part, opts = parts.get("sharding", code)
        return {"bad": ops.as_float(part.infeasible(shard, opts))}

    return _bits(ops.where(by_code(codes, run)["bad"] > 0, BIT_SHARDING, 0))
