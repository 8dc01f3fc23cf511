"""One optimizer step of a batch of plans, vectorised over plans and islands.

:func:`evaluate` takes :class:`~.inputs.ModelInputs` (arrays broadcastable to ``(N, I)``: N
plans, I islands) and the :class:`~.inputs.PartTable` their codes index, and returns
:class:`~.outputs.Outputs`: the step time and its breakdown, memory, throughput and feasibility
(a :class:`~.feasibility.Reason` mask). No Python loop runs per plan; strategies run once per
group of rows that uses them.

The composition (per island, per pipeline stage; Narayanan et al. 2021):
``step = m (t_f + t_b + exposed TP/CP/EP/sharding comm + exposed activation offload) + bubble
+ pipeline p2p + exposed data-parallel comm + optimizer``, then islands are combined by the sync strategy
(:mod:`.islands`). Stages: :mod:`.stage` (compute, :mod:`.comm`, the sharding part,
:mod:`.sharding`), :mod:`.pipeline` (the schedule part), :mod:`.busiest` (memory),
:mod:`.islands`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.model.allocator import churn_bytes, stage_required_bytes, stage_reserved_bytes
from shardmeter.model.busiest import BusiestGpu, busiest_gpu, busiest_parts
from shardmeter.model.compute import full_recompute_share
from shardmeter.model.degrees import Degrees, degrees
from shardmeter.model.feasibility import (
    BIT_MEMORY,
    BIT_PRECISION,
    BIT_SCHEDULE,
    batch_reasons,
    batch_split,
    layout_reasons,
    sharding_reasons,
)
from shardmeter.model.flops import model_flops_values
from shardmeter.model.formulas import KERNEL_OVERHEAD_S
from shardmeter.model.grad_accumulation import grad_accumulation_s
from shardmeter.model.islands import IslandDetail, IslandSteps, combine_islands
from shardmeter.model.outputs import BREAKDOWN_TERMS, HiddenTerms, MemoryProbe, Outputs, StepTerms
from shardmeter.model.pick import pick
from shardmeter.model.pipeline import PipelineTerms, pipeline_terms, schedule_terms
from shardmeter.model.stage import StageTerms, peaks, stage_compute, stage_terms
from shardmeter.model.stages import StageLayers, stage_layers
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.parts import PipeInputs

__all__ = [
    "evaluate",
    "evaluate_columns",
    "island_memory",
    "batch_shape",
    "optimizer_s",
    "reserved_bytes",
    "required_bytes",
    "BREAKDOWN_TERMS",
    "ADAM_BYTES_PER_PARAM",
]

#: Bytes moved per parameter by the Adam update (read fp32 grad 4, master weight, m and v
#: 3 x (4 + 4), write 16-bit weight 2): a memory-bound kernel.
ADAM_BYTES_PER_PARAM = 30.0


_f = ops.as_float


def evaluate(
    inp: ModelInputs,
    parts: PartTable,
    *,
    detail: bool = True,
    islands_only: bool = False,
    fallback: bool = True,
) -> Outputs:
    """Score every plan in the batch. See the module docstring. ``detail=False`` gives only
    what a search ranks by, skipping the breakdown (the report's fields of
    :class:`~.outputs.Outputs` are ``None``); ``islands_only=True`` with it gives only the
    per-island outputs (``reasons``, ``feasible``, ``params`` and ``island``), skipping the
    cross-island sync terms (a per-island search discards them).

    Inputs built as Python floats (``build_inputs(scalar=True)``: one plan on one island) take
    the scalar fast path: the same formulas through :mod:`.ops` at a fraction of numpy's
    per-call cost, with plain numbers as outputs; a division by zero there (degenerate numbers)
    falls back to the array path, whose inf / nan semantics decide. ``fallback=False`` raises
    that error instead (tests and benchmarks hold the scalar path to completing: a quotient a
    plan may take at zero goes through :func:`~shardmeter.numeric.ops.divide`).

    Infeasible rows may divide by zero on the way; their outputs are masked by
    ``feasible``/``reasons``, so those floating-point warnings are silenced here (and only here).
    """
    if ops.is_scalar(inp.layout.tp):
        # plain floats: Python's arithmetic, no numpy operation to warn (np.errstate costs a
        # microsecond a call); what would warn in numpy raises here and falls back
        try:
            return _evaluate(inp, parts, detail, islands_only)
        except (ZeroDivisionError, OverflowError, ValueError):
            if not fallback:
                raise
            inp = _as_arrays(inp)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _evaluate(inp, parts, detail, islands_only)


_BUNDLES = ("model", "training", "hardware", "topology", "layout", "network")


def _as_arrays(inp: ModelInputs) -> ModelInputs:
    """Scalar inputs as a batch of one row on one island (a tier tuple becomes the tier axis)."""
    out = {}
    for b in _BUNDLES:
        bundle = getattr(inp, b)
        out[b] = type(bundle)(
            **{a.name: np.asarray([[getattr(bundle, a.name)]]) for a in attrs.fields(type(bundle))}
        )
    return ModelInputs(**out)


def evaluate_columns(cols: Mapping[str, Any], parts: PartTable) -> Outputs:
    """:func:`evaluate` of flat input columns (``"layout.tp"``, ...: how the planner and the
    sweep carry batches)."""
    return evaluate(ModelInputs.from_columns(cols), parts)


#: Tier arrays carry a trailing tier axis; every other input broadcasts to the batch shape.
_TIER_FIELDS = ("tier_gpus", "tier_bytes_s", "tier_latency_s")


def batch_shape(inp: ModelInputs) -> tuple[int, ...]:
    """The broadcast shape of the batch (rows..., islands)."""
    shapes = [(1, 1)]
    for b in (inp.model, inp.training, inp.hardware, inp.topology, inp.layout, inp.network):
        for a in attrs.fields(type(b)):
            x = np.shape(getattr(b, a.name))
            shapes.append(x[:-1] if b is inp.topology and a.name in _TIER_FIELDS else x)
    return np.broadcast_shapes(*shapes)


def _evaluate(inp: ModelInputs, parts: PartTable, detail: bool, islands_only: bool = False) -> Outputs:
    ms, tr, hw, lay = inp.model, inp.training, inp.hardware, inp.layout
    deg = degrees(lay)
    shape = () if ops.is_scalar(deg.tp) else batch_shape(inp)

    # ---- batch split and structural feasibility ------------------------------------------------
    batch = (tr.global_batch, tr.micro_batch, tr.island_batch, hw.peak_flops)
    if not set(map(type, batch)) <= ops.ONLY_FLOAT:  # as_float of a float is itself
        batch = tuple(map(_f, batch))
    gb, mb, ib, peak = batch
    b_isl, m, m_int = batch_split(gb, deg.dp, mb, ib)
    split_in = _split_inputs(lay)
    stl = stage_layers(ms.layers, deg.pp, deg.v, *split_in)  # _stage_layers, its split read once
    reasons = structural_reasons(inp, parts, deg, m, peak, stl, split_in)
    pk = peaks(hw)

    # ---- the stages: compute, the core's communication and the sharding strategy's --------------
    # The pace is the slower of the largest of the first and middle stages (the embedding on the
    # first) and the last (its layers, the output layer and the loss); see model/stages.py.
    one = deg.pp == 1
    first_l, mid_l = stl.first, stl.middle
    if type(first_l) is float and type(mid_l) is float:  # ops.maximum written out
        body_layers = first_l if first_l >= mid_l else (mid_l if mid_l > first_l else math.nan)
    else:
        body_layers = ops.maximum(first_l, mid_l)
    body_compute = stage_compute(inp, deg, pk, body_layers)
    # the last stage has as many layers as the largest other (one plan, or every row of a batch
    # at the same shape): the same shapes, compute and communication (each stage then takes out
    # the head it does not hold)
    last_l = stl.last
    if type(body_layers) is float and type(last_l) is float:  # _same_layers written out
        same = body_layers == last_l
    else:
        same = _same_layers(body_layers, last_l)
    body_emb, tail_head = (stl.first >= stl.middle) | one, deg.pp > 0
    if type(tail_head) is not bool:
        tail_head = ops.where(tail_head, True, False)
    body = stage_terms(inp, parts, deg, pk, body_layers, emb=body_emb, head=one, compute=body_compute)
    tail = stage_terms(
        inp, parts, deg, pk, stl.last, emb=one, head=tail_head, compute=body_compute if same else None
    )
    pace = pick(tail.micro_batch_s >= body.micro_batch_s, tail, body)

    # ---- pipeline: the schedule's bubble, activations in flight and transfers --------------------
    pipe = pipeline_terms(parts, inp, deg, m_int, pace)
    bad_sch = pipe.schedule.infeasible
    if type(bad_sch) is float:  # the where the bit it picks
        reasons = reasons | (BIT_SCHEDULE if bad_sch > 0 else 0)
    else:
        reasons = reasons | ops.where(_f(bad_sch) > 0, BIT_SCHEDULE, 0)
    # every stage reduces its own gradients after its last backward: the step waits for the
    # stage whose reduction shows most; and what its hidden part slows the compute beside it,
    # on the stage where that shows most
    dp_b, dp_t, slow_b, slow_t = body.dp_exposed_s, tail.dp_exposed_s, body.dp_slowdown_s, tail.dp_slowdown_s
    if type(dp_b) is float and type(dp_t) is float and type(slow_b) is float and type(slow_t) is float:
        # ops.maximum written out
        dp_exposed = dp_b if dp_b >= dp_t else (dp_t if dp_t > dp_b else math.nan)
        dp_slowdown = slow_b if slow_b >= slow_t else (slow_t if slow_t > slow_b else math.nan)
    else:
        dp_exposed = ops.maximum(dp_b, dp_t)
        dp_slowdown = ops.maximum(slow_b, slow_t)

    # ---- memory of the busiest GPU: the first, middle (rank 1) and last stages -------------------
    known = ((body_layers, body_emb, one, body), (stl.last, one, tail_head, tail))
    busiest = busiest_gpu(inp, parts, deg, stl, pipe.schedule, shape[-1] if shape else 1, known)
    required = required_bytes(inp, busiest)
    reserved = reserved_bytes(inp, busiest, required)
    cap = hw.memory_bytes
    if type(required) is float and type(cap) is float:  # the where the bit it picks
        reasons = reasons | (BIT_MEMORY if required > cap else 0)
    else:
        reasons = reasons | ops.where(required > cap, BIT_MEMORY, 0)
    # every stage reduces its own gradients after its last backward: a cross-island reduction
    # hides under the shortest stage's window
    win_b, win_t = body.ar_window_s, tail.ar_window_s
    if type(win_b) is float and type(win_t) is float:  # ops.minimum written out
        ar_window = win_b if win_b <= win_t else (win_t if win_t < win_b else math.nan)
    else:
        ar_window = ops.minimum(win_b, win_t)

    mf_tok, hw_tok, params = model_flops_values(ms, tr, full_recompute_share(tr, pace.shapes))
    steps = IslandSteps(
        reasons=reasons,
        terms=_step_terms(inp, m_int, pace, pipe, dp_exposed, dp_slowdown),
        hidden=_hidden_terms(m_int, pace, dp_exposed) if detail else None,
        ar_window=ar_window,
        grad_bytes=pace.shard.grad_bytes,
        params=params,
        island_batch=b_isl,
        micro_batches=m_int,
        memory_bytes=busiest.memory_bytes,
        memory_reserved_bytes=reserved,
        peak_flops=pk.flops,
        model_flops_per_token=mf_tok,
        hardware_flops_per_token=hw_tok,
        gpus=deg.gpus,
        detail=_island_detail(pace, busiest, stl, body_layers) if detail else None,
    )
    return combine_islands(parts, inp, shape, steps, detail, islands_only)


def _same_layers(a: Array, b: Array) -> bool:
    """Whether two stages' layer counts are equal on every row, at the same shape."""
    if ops.is_scalar(a) and ops.is_scalar(b):
        return bool(a == b)
    return np.shape(a) == np.shape(b) and bool(np.array_equal(a, b))


def required_bytes(inp: ModelInputs, busiest: BusiestGpu) -> Array:
    """What the caching allocator must hold on the busiest GPU at the peak, its blocks' rounding
    included (:func:`~.allocator.stage_required_bytes`): what feasibility compares with the
    GPU's memory."""
    assert busiest.shard is not None
    return stage_required_bytes(inp.model, inp.training, busiest.shard, busiest.state, busiest.memory_bytes)


def reserved_bytes(inp: ModelInputs, busiest: BusiestGpu, required: Array | None = None) -> Array:
    """What the caching allocator reserves on the busiest GPU at the peak: what is required plus
    the fragmentation of the step's churn, capped at the GPU's memory
    (:func:`~.allocator.stage_reserved_bytes`); ``required``: :func:`required_bytes` of the
    same GPU, where the caller has it (feasibility compares it with the memory too)."""
    assert busiest.shard is not None
    churn = churn_bytes(busiest.shard, busiest.state, busiest.activations_bytes, busiest.transient_bytes)
    if required is None:
        required = required_bytes(inp, busiest)
    return stage_reserved_bytes(required, churn, inp.hardware.memory_bytes)


def _step_terms(
    inp: ModelInputs,
    m_int: Array,
    pace: StageTerms,
    pipe: PipelineTerms,
    dp_exposed: Array,
    dp_slowdown: Array,
) -> StepTerms:
    """The island's step by term: ``m_int`` micro-batches of the pacing stage, the pipeline's
    bubble and transfers, the exposed data-parallel traffic (``dp_exposed`` per step, the
    sharding traffic per micro-batch) and the optimizer (memory-bound Adam over this GPU's
    optimizer shard). ``memory_ops`` also holds the weight gradients' separate adds where the
    stack does not sum them inside the GEMM (:mod:`.grad_accumulation`). ``dp_comm`` also holds
    what the hidden data-parallel traffic costs the compute beside it (``dp_slowdown`` per step and the stage's ``fsdp_slowdown_s`` per
    micro-batch: NCCL's blocks hold SMs, :mod:`.interference`)."""
    ct, lc = pace.compute, pace.comm
    t_opt = optimizer_s(inp, pace)
    hw = inp.hardware
    acc = grad_accumulation_s(
        m_int,
        pace.state.gradients,
        pace.shard.weight_bytes,
        pace.shard.grad_bytes,
        inp.training.grad_acc_fused,
        hw.hbm_bytes_s * hw.hbm_efficiency,
    )
    return StepTerms(
        compute_s=m_int * ct.compute,
        memory_ops_s=m_int * ct.memory_ops + acc,
        tp_comm_s=m_int * lc.tp_exposed,
        cp_comm_s=m_int * lc.cp_exposed,
        ep_comm_s=m_int * lc.ep_exposed,
        pp_comm_s=pipe.p2p_s,
        pp_bubble_s=pipe.schedule.bubble_s,
        dp_comm_s=dp_exposed + dp_slowdown + m_int * (pace.fsdp_exposed_s + pace.fsdp_slowdown_s),
        offload_s=m_int * pace.offload_exposed_s,
        optimizer_s=t_opt,
    )


def optimizer_s(inp: ModelInputs, stage: StageTerms) -> Array:
    """The optimizer's seconds on one GPU of ``stage``: memory-bound Adam over its optimizer
    shard (:data:`ADAM_BYTES_PER_PARAM` at the achieved HBM rate; the trained parameters only,
    LoRA's adapters under ``training.peft``) and ten kernel launches."""
    hw = inp.hardware
    hbm = hw.hbm_bytes_s * hw.hbm_efficiency
    p_gpu = stage.shard.params_per_gpu * stage.shard.trainable_fraction
    return p_gpu / stage.state.optimizer_shards * ADAM_BYTES_PER_PARAM / hbm + 10 * KERNEL_OVERHEAD_S


def _hidden_terms(m_int: Array, pace: StageTerms, dp_exposed: Array) -> HiddenTerms:
    """The island's communication hidden under compute, seconds per step (``dp_exposed``: the
    step's exposed data-parallel seconds)."""
    lc, traffic = pace.comm, pace.traffic
    fsdp_hidden_mb = traffic.micro_batch_s - pace.fsdp_exposed_s
    t = traffic.step_s - dp_exposed
    dp_hidden = (  # ops.maximum written out for a float
        (t if t >= 0.0 else (0.0 if t < 0.0 else math.nan)) if type(t) is float else ops.maximum(t, 0.0)
    )
    return HiddenTerms(
        tp_comm_s=m_int * lc.tp_hidden,
        cp_comm_s=m_int * lc.cp_hidden,
        dp_comm_s=dp_hidden + m_int * fsdp_hidden_mb,
    )


def _island_detail(
    pace: StageTerms, busiest: BusiestGpu, stl: StageLayers, body_layers: Array | None = None
) -> IslandDetail:
    """Per island, for the report: the busiest GPU's memory by part, the pacing stage's
    parameters before and after the sharding strategy divides them, and the layers of the
    largest pipeline stage (``body_layers``: the larger of the first and middle stages', where
    the caller has it)."""
    p_gpu = pace.shard.params_per_gpu
    if body_layers is None:
        body_layers = ops.maximum(stl.first, stl.middle)
    return IslandDetail(
        memory_parts=busiest_parts(busiest),
        params_per_gpu=p_gpu,
        params_per_gpu_sharded=p_gpu / pace.state.param_shards,
        layers_per_stage=(
            (body_layers if body_layers >= last_l else (last_l if last_l > body_layers else math.nan))
            if type(body_layers) is float and type(last_l := stl.last) is float  # ops.maximum's
            else ops.maximum(body_layers, stl.last)
        ),
    )


def _stage_layers(ms: Any, lay: Any, deg: Degrees) -> StageLayers:
    """:func:`~.stages.stage_layers` of the layout: its first / last stage counts and whether
    the embedding and the loss count in the split."""
    return stage_layers(ms.layers, deg.pp, deg.v, *_split_inputs(lay))


def _split_inputs(lay: Any) -> tuple[Array, Array, Array, Array]:
    """The layout's first / last stage layers and whether the embedding and the loss count in the
    split, as floats (plain numbers and bools by ``float``, which is ``ops.as_float``'s for them)."""
    split = _SPLIT_FIELDS(lay)
    if set(map(type, split)) <= ops.FLOAT_OR_BOOL:
        first, last, emb, loss = split
        return float(first), float(last), float(emb), float(loss)
    first, last, emb, loss = map(_f, split)
    return first, last, emb, loss


#: The layout's fields :func:`_split_inputs` reads (one C call).
_SPLIT_FIELDS = operator.attrgetter(
    "first_stage_layers", "last_stage_layers", "embedding_in_split", "loss_in_split"
)


def structural_reasons(
    inp: ModelInputs,
    parts: PartTable,
    deg: Degrees,
    m: Array,
    peak: Array,
    stl: StageLayers | None = None,
    split_in: tuple[Array, Array, Array, Array] | None = None,
) -> Array:
    """The reason bits that need no stage: the layout's, the sharding part's own rule
    (:func:`~.feasibility.sharding_reasons`), the batch split's (``m`` micro-batches per replica)
    and a precision the GPU has no peak for (``peak``, FLOP/s); ``stl``: the layout's
    :func:`_stage_layers`, where the caller has it, and ``split_in`` its :func:`_split_inputs`."""
    ms, lay, topo = inp.model, inp.layout, inp.topology
    first_l, last_l, emb, loss = _split_inputs(lay) if split_in is None else split_in
    nodes, per_node, experts = topo.nodes, topo.gpus_per_node, ms.experts
    if not (type(nodes) is float and type(per_node) is float and type(experts) is float):
        nodes, per_node, experts = _f(nodes), _f(per_node), _f(experts)
    gpus = nodes * per_node
    no_peak = peak <= 0
    return (
        layout_reasons(ms.heads, ms.seq_len, experts, deg.tp, deg.pp, deg.cp, deg.dp, deg.ep, gpus, deg.etp)
        | batch_reasons(m, deg.pp, deg.v, ms.layers, first_l, last_l, emb, loss, split=stl)
        | (
            (BIT_PRECISION if no_peak else 0)
            if type(no_peak) is bool
            else ops.where(no_peak, BIT_PRECISION, 0)
        )
    ) | sharding_reasons(parts, lay.sharding, deg.tp, deg.dp, deg.cp, topo)


def island_memory(inp: ModelInputs, parts: PartTable) -> MemoryProbe:
    """Only the ``reasons`` and each island's ``memory_bytes`` of :func:`evaluate`, by the same
    code with no stage timed: what the planner's probes for the largest feasible micro-batch
    count read (``explore/island_search.py``). Every reason bit and the memory are those of
    :func:`evaluate`: the schedule's in-flight counts and its ``infeasible`` read the layout and
    ``m`` only (the bundled schedules' ``terms`` never set ``infeasible``; a schedule whose
    ``infeasible`` read the stage times would see zeros here)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if ops.is_scalar(inp.layout.tp):
            inp = _as_arrays(inp)
        ms, tr, hw, lay = inp.model, inp.training, inp.hardware, inp.layout
        deg = degrees(lay)
        shape = batch_shape(inp)
        _, m, m_int = batch_split(_f(tr.global_batch), deg.dp, _f(tr.micro_batch), _f(tr.island_batch))
        reasons = structural_reasons(inp, parts, deg, m, _f(hw.peak_flops))
        stl = _stage_layers(ms, lay, deg)
        zero = 0.0 * deg.pp
        pipe = PipeInputs(
            pp=deg.pp,
            micro_batches=m_int,
            virtual_stages=deg.v,
            stage_s=zero,
            forward_s=zero,
            weight_grad_s=zero,
            activation_bytes=zero,
            tp=deg.tp,
        )
        sch = schedule_terms(parts, pipe, lay.schedule)
        reasons = reasons | ops.where(_f(sch.infeasible) > 0, BIT_SCHEDULE, 0)
        busiest = busiest_gpu(inp, parts, deg, stl, sch, shape[-1])
        mem = busiest.memory_bytes
        reasons = reasons | ops.where(required_bytes(inp, busiest) > hw.memory_bytes, BIT_MEMORY, 0)
        full = np.broadcast_shapes(shape, np.shape(reasons), np.shape(mem))
        return MemoryProbe(reasons=ops.broadcast(reasons, full), memory_bytes=ops.broadcast(mem, full))
