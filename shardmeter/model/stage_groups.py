"""A heterogeneous pipeline: stages on different GPU types or islands (``[[stage_group]]``).

Each stage is timed by the homogeneous model's own stage (:func:`~.stage.stage_terms`: compute,
TP/CP/EP communication, the sharding part's traffic) on its group's inputs, and its GPU's memory
by the same rank rule as :func:`~.busiest.busiest_gpu` (:func:`~.busiest.rank_memory`, the
caching allocator's reserve on top); this module only composes them.

**Step of a 1F1B pipeline with unequal stages.** With ``m`` micro-batches and ``t_i`` the
forward + backward time of one micro-batch on stage ``i`` (its exposed communication in it)::

    pipeline_s = sum_i t_i + (m - 1) max_i t_i

The first micro-batch crosses every stage forward and back (``sum_i t_i``: the fill and the
drain); in the steady state the slowest stage runs one forward and one backward per slot and
the others wait for it, so the remaining ``m - 1`` micro-batches take ``max_i t_i`` each. With
equal stages this is ``(m + p - 1) t``, Narayanan et al. 2021 (arXiv 2104.04473) Sec. 2.2, the
bubble ``(p - 1) t`` of the homogeneous model; for unequal stages it is the cost model of the
heterogeneous planners, Metis (Um et al., USENIX ATC'24, Sec. 5: the slowest stage paces the
pipeline's steady state, the others add to its warm-up and cool-down) and Sailor (Strati et
al., SOSP'25: the iteration time of a pipeline is the sum of its stages' times plus
``(m - 1)`` times the straggler stage's).

**Sends.** As the homogeneous schedule counts them (:func:`shardmeter.strategies.schedules.p2p_transfers`,
``2 (m + p - 1)`` on the critical path, Megatron-LM's blocking ``send_forward_recv_backward``):
the fill and the drain cross every boundary ``b`` once each way, and each of the ``m``
micro-batches' steady-state slot sends forward and receives backward on the slowest boundary::

    p2p_s = 2 (sum_b c_b + m max_b c_b)

which is ``2 (m + p - 1) c`` with equal boundaries. ``c_b`` is one send: inside a group the
homogeneous model's (``activation / tp`` per GPU, Megatron's scatter-gather, on the innermost
tier holding the pipeline group, :func:`~.tiers.span_link`); between two groups on different
islands the whole activation of each of the ``dp`` pipeline replicas crosses the link joining
the islands at once, ``dp x b x s/cp x h x 2 bytes / B + latency`` (:func:`link_send_s`).

**After the last backward** each stage reduces its own gradients and steps its optimizer; the
step waits for the stage whose reduction and update take longest (as the homogeneous model
takes the larger of its stages' exposed reductions)::

    step_s = pipeline_s + p2p_s + max_i dp_exposed_i + max_i optimizer_i
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.model.busiest import rank_memory
from shardmeter.model.degrees import degrees
from shardmeter.model.dispatch import by_code
from shardmeter.model.evaluate import optimizer_s, required_bytes, reserved_bytes, structural_reasons
from shardmeter.model.feasibility import Reason, batch_split
from shardmeter.model.stage import peaks, stage_terms
from shardmeter.model.tiers import span_link
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.parts import PipeInputs

__all__ = ["StageCost", "PipelineStep", "stage_cost", "pipeline_step", "inner_send_s", "link_send_s"]

_f = ops.as_float


@attrs.frozen(kw_only=True)
class StageCost:
    """One stage of a heterogeneous pipeline on its group's GPUs: ``micro_batch_s`` (``t_i``,
    forward + backward of one micro-batch with its exposed communication) and its terms
    (``compute_s``, ``memory_ops_s``, ``tp_comm_s``: exposed TP/CP/EP, ``fsdp_s``: the sharding
    part's exposed per-micro-batch traffic with what its hidden part slows the compute,
    :mod:`.interference`; ``offload_s``), ``forward_s``, ``dp_exposed_s`` (its exposed
    gradient reduction per step, with its slowdown likewise), ``optimizer_s``, its GPU's
    ``memory_bytes`` and ``memory_reserved_bytes`` (the caching allocator's peak), the
    ``held`` micro-batches in flight, ``activation_bytes`` (one micro-batch's activation at a
    boundary) and ``reasons`` (:class:`~.feasibility.Reason` bits)."""

    micro_batch_s: Array
    compute_s: Array
    memory_ops_s: Array
    tp_comm_s: Array
    fsdp_s: Array
    offload_s: Array
    forward_s: Array
    dp_exposed_s: Array
    optimizer_s: Array
    memory_bytes: Array
    memory_reserved_bytes: Array
    held: Array
    activation_bytes: Array
    micro_batches: Array
    reasons: Array


def stage_cost(
    inp: ModelInputs,
    parts: PartTable,
    layers: Array,
    *,
    rank: int,
    stages: int,
    distance: Array | None = None,
) -> StageCost:
    """Stage ``rank`` of a ``stages``-stage pipeline, ``layers`` layers on the GPUs of ``inp``
    (a one-island batch whose layout is the stage's group: its GPU, ``tp``, ``cp``, ``dp``).
    Rank 0 holds the embedding, rank ``stages - 1`` the output layer and loss; its activations
    in flight are the schedule part's ``in_flight_at`` for the whole pipeline (1F1B:
    ``min(p - rank, m)``), at rank ``stages - distance`` where ``distance`` is given (rows
    of several distances to the pipeline's end in one call, as the planner's tables)."""
    deg = attrs.evolve(degrees(inp.layout), pp=_f(stages) + 0.0 * _f(inp.layout.pp), v=1.0)
    tr, hw = inp.training, inp.hardware
    _, m, m_int = batch_split(_f(tr.global_batch), deg.dp, _f(tr.micro_batch))
    pk = peaks(hw)
    first, last = rank == 0, rank == stages - 1
    st = stage_terms(inp, parts, deg, pk, layers, emb=first, head=last)
    pipe = PipeInputs(
        pp=deg.pp,
        micro_batches=m_int,
        virtual_stages=1.0,
        stage_s=st.micro_batch_s,
        forward_s=st.compute.forward,
        weight_grad_s=0.0 * st.micro_batch_s,
        activation_bytes=st.comm.act_msg,
        tp=deg.tp,
    )

    def held_of(code: int) -> tuple[Array, Array]:
        part, opts = parts.get("schedule", code)
        at = _f(rank) if distance is None else _f(stages) - distance
        return part.in_flight_at(pipe, opts, at), part.loss_in_flight(pipe, opts)

    held, loss_held = by_code(inp.layout.schedule, held_of)
    mem = rank_memory(inp, parts, deg, layers, first, last, held, loss_held, 0.0)
    required = required_bytes(inp, mem)
    reserved = reserved_bytes(inp, mem, required)
    group_deg = degrees(inp.layout)
    reasons = structural_reasons(inp, parts, group_deg, m, _f(hw.peak_flops))
    reasons = reasons | ops.where(required > hw.memory_bytes, int(Reason.MEMORY), 0)
    return StageCost(
        micro_batch_s=st.micro_batch_s,
        compute_s=st.compute.compute,
        memory_ops_s=st.compute.memory_ops,
        tp_comm_s=st.comm.tp_exposed + st.comm.cp_exposed + st.comm.ep_exposed,
        fsdp_s=st.fsdp_exposed_s + st.fsdp_slowdown_s,
        offload_s=st.offload_exposed_s,
        forward_s=st.compute.forward,
        dp_exposed_s=st.dp_exposed_s + st.dp_slowdown_s,
        optimizer_s=optimizer_s(inp, st),
        memory_bytes=mem.memory_bytes,
        memory_reserved_bytes=reserved,
        held=held,
        activation_bytes=st.comm.act_msg,
        micro_batches=m_int,
        reasons=reasons,
    )


def inner_send_s(inp: ModelInputs, activation_bytes: Array, ranks: Array | None = None) -> Array:
    """One send between two stages on one island: ``activation / tp`` per GPU (Megatron's
    scatter-gather) on the innermost tier that holds ``ranks`` pipeline ranks ``tp x cp x dp``
    apart (:func:`~.tiers.span_link`; default the group's own ``pp``, as the homogeneous
    model's :func:`~.pipeline.pipeline_terms`)."""
    deg = degrees(inp.layout)
    bw, lat = span_link(deg.pp if ranks is None else ranks, deg.tp * deg.cp * deg.dp, inp.topology)
    return activation_bytes / deg.tp / bw + lat


def link_send_s(activation_bytes: Array, dp: Array, bytes_s: Array, latency_s: Array) -> Array:
    """One send between two groups on islands joined by a link of ``bytes_s`` (achieved) and
    ``latency_s``: the ``dp`` pipeline replicas each send one micro-batch's whole activation
    across it at once (``dp x activation / B + latency``)."""
    return dp * activation_bytes / bytes_s + latency_s


@attrs.frozen(kw_only=True)
class PipelineStep:
    """A heterogeneous pipeline's step by term (see the module docstring): ``pipeline_s``
    (``sum t_i + (m - 1) max t_i``), of it ``bubble_s`` (``sum t_i - max t_i``: what the fill
    and the drain add to ``m max t_i``), ``p2p_s``, ``dp_comm_s``, ``optimizer_s``,
    ``step_s`` and ``pacing_stage`` (the index of the slowest stage)."""

    pipeline_s: Array
    bubble_s: Array
    p2p_s: Array
    dp_comm_s: Array
    optimizer_s: Array
    step_s: Array
    pacing_stage: Array


def pipeline_step(
    stage_s: Sequence[Array],
    send_s: Sequence[Array],
    micro_batches: Array,
    dp_exposed_s: Sequence[Array],
    optimizer_s: Sequence[Array],
) -> PipelineStep:
    """:class:`PipelineStep` of stages taking ``stage_s`` per micro-batch (``t_i``), boundaries
    whose one send takes ``send_s`` (``c_b``, one fewer than the stages), ``micro_batches``
    (``m``) per step, each stage's exposed gradient reduction and optimizer seconds."""
    if len(send_s) != len(stage_s) - 1:
        raise ValueError(f"expected {len(stage_s) - 1} boundaries, got {len(send_s)}")
    total = stage_s[0]
    slow = stage_s[0]
    pacing = 0.0 * stage_s[0]
    for i, t in enumerate(stage_s[1:], start=1):
        total = total + t
        pacing = ops.where(t > slow, float(i), pacing)
        slow = ops.maximum(slow, t)
    m = micro_batches
    pipeline_s = total + (m - 1.0) * slow
    sends = 0.0 * slow
    slow_send = 0.0 * slow
    for c in send_s:
        sends = sends + c
        slow_send = ops.maximum(slow_send, c)
    p2p = 2.0 * (sends + m * slow_send)
    dp = dp_exposed_s[0]
    opt = optimizer_s[0]
    for d, o in zip(dp_exposed_s[1:], optimizer_s[1:], strict=True):
        dp = ops.maximum(dp, d)
        opt = ops.maximum(opt, o)
    return PipelineStep(
        pipeline_s=pipeline_s,
        bubble_s=total - slow,
        p2p_s=p2p,
        dp_comm_s=dp,
        optimizer_s=opt,
        step_s=pipeline_s + p2p + dp + opt,
        pacing_stage=pacing,
    )
