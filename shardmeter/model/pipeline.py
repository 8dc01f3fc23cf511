"""The pipeline's stage: the schedule part's terms (its bubble, the micro-batches each rank
holds, its transfers) and the point-to-point time per step (Narayanan et al. 2021)."""

from __future__ import annotations

import math

import attrs

from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.model.degrees import Degrees
from shardmeter.model.dispatch import by_code
from shardmeter.model.lora import weight_grad_share
from shardmeter.model.stage import StageTerms
from shardmeter.model.tiers import span_link
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.parts import PipeInputs

__all__ = ["ScheduleTerms", "PipelineTerms", "schedule_terms", "pipeline_terms"]

_f = ops.as_float


@attrs.frozen(kw_only=True)
class ScheduleTerms:
    """Each row's schedule: ``bubble_s`` (idle seconds per step), the micro-batches whose
    activations ranks 0, 1 and ``p - 1`` hold at their peak (``held_first``, ``held_middle``,
    ``held_last``) and the losses the last stage holds (``loss_held``), its ``p2p_transfers``
    per step on the critical path of ``p2p_bytes`` each (what one GPU sends), and
    ``infeasible`` (> 0: rows the schedule cannot run)."""

    bubble_s: Array
    held_first: Array
    held_middle: Array
    held_last: Array
    loss_held: Array
    p2p_transfers: Array
    p2p_bytes: Array
    infeasible: Array


@attrs.frozen(kw_only=True)
class PipelineTerms:
    """The ``schedule``'s terms and ``p2p_s``, the pipeline's point-to-point seconds per step."""

    schedule: ScheduleTerms
    p2p_s: Array


def schedule_terms(parts: PartTable, pipe: PipeInputs, codes: Array) -> ScheduleTerms:
    """The schedule part's terms of each row (``codes``: its schedule)."""

    def run(code: int) -> ScheduleTerms:
        part, opts = parts.get("schedule", code)
        t = part.terms(pipe, opts)
        # what the planner's pre-check asks (infeasible()) and what terms() says, either way
        bad_t, bad_n = t.infeasible, part.infeasible(pipe, opts)
        if type(bad_t) is bool and type(bad_n) is bool:  # one plan: as ops.as_float of a bool
            bad = float(bad_t) + float(bad_n)
        else:
            bad = ops.as_float(bad_t) + ops.as_float(bad_n)
        pp = pipe.pp
        # None: Megatron's scatter-gather, each TP rank sends 1/t of the activation
        msg = pipe.activation_bytes / pipe.tp if t.p2p_bytes is None else t.p2p_bytes
        return ScheduleTerms(
            bubble_s=t.bubble_s,
            held_first=part.in_flight_at(pipe, opts, 0.0 * pp),
            held_middle=part.in_flight_at(pipe, opts, _rank_one(pp)),
            held_last=part.in_flight_at(pipe, opts, pp - 1.0),
            loss_held=part.loss_in_flight(pipe, opts),
            p2p_transfers=t.p2p_transfers,
            p2p_bytes=msg,
            infeasible=bad,
        )

    return by_code(codes, run)


def _rank_one(pp: Array) -> Array:
    """Rank 1, the middle stage (rank 0 with one stage): ``ops.minimum(1.0, pp - 1.0)``,
    written out for a plain float (nan where neither side is the smaller)."""
    x = pp - 1.0
    if type(x) is float:
        return 1.0 if x >= 1.0 else (x if x < 1.0 else math.nan)
    return ops.minimum(1.0, x)


def pipeline_terms(
    parts: PartTable, inp: ModelInputs, deg: Degrees, m_int: Array, pace: StageTerms
) -> PipelineTerms:
    """The schedule part's terms with the pacing stage's times (``m_int`` micro-batches per
    replica), and the pipeline's point-to-point time per step: its transfers, each one message
    of the bytes it says one GPU sends (Megatron's scatter-gather optimisation, 1/t of an
    activation per TP rank, unless it says otherwise) on the link between stages."""
    ct = pace.compute
    pipe = PipeInputs(
        pp=deg.pp,
        micro_batches=m_int,
        virtual_stages=deg.v,
        stage_s=pace.micro_batch_s,
        forward_s=ct.forward,
        weight_grad_s=pace.shapes.layers_per_stage * ct.dense_forward * weight_grad_share(inp.training),
        activation_bytes=pace.comm.act_msg,
        tp=deg.tp,
    )
    sch = schedule_terms(parts, pipe, inp.layout.schedule)
    bw_pp, lat_pp = span_link(deg.pp, deg.tp * deg.cp * deg.dp, inp.topology)
    n, msg = sch.p2p_transfers, sch.p2p_bytes
    if not (type(n) is float and type(msg) is float):
        n, msg = _f(n), _f(msg)
    return PipelineTerms(schedule=sch, p2p_s=n * (msg / bw_pp + lat_pp))
