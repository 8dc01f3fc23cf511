"""Pipeline schedules: GPipe, 1F1B (PipeDream-Flush) and interleaved 1F1B.

Narayanan et al. 2021 (arXiv 2104.04473), Sec. 2.2: with ``p`` stages and ``m`` micro-batches
GPipe and 1F1B idle ``(p-1)`` micro-batch slots per step; the interleaved schedule with ``v``
model chunks per GPU ``(p-1)/v`` and needs ``m`` a multiple of ``p``. Activations held by rank
``r`` at its peak (:meth:`ClassicSchedule.in_flight_at`): all ``m`` micro-batches (GPipe);
its warm-up forwards plus the one of the first steady 1F1B slot, as Megatron-LM's schedules
count them (``megatron/core/pipeline_parallel/schedules.py`` ``get_pp_rank_microbatches`` at
NVIDIA/Megatron-LM@d98e8a64): ``min(p - r, m)`` (1F1B: ``num_warmup_microbatches = p - r - 1``,
Narayanan et al. 2021, Sec. 2.2) and, interleaved, ``min((p - r - 1) 2 + (v - 1) p + 1, m v)``
model-chunk micro-batches, each ``1/v`` of the stage (rank 0 with ``m >= p``: ``p + (p-1)/v``,
Korthikanti et al. 2022's ``1 + (p-1)/(p v)`` times ``p``, Sec. 4.2.3). Each micro-batch crosses
every stage boundary forward and back once per model chunk: ``2 (v m + p - 1)`` transfers on a
stage, counting the warm-up and drain.

The declarative :class:`shardmeter.PipelineSchedule` record is sugar for
:class:`ClassicSchedule`.

:class:`DeepSpeedSchedule` is DeepSpeed's ``PipelineEngine`` (Megatron-DeepSpeed: BLOOM,
MT-NLG), from ``deepspeed/runtime/pipe/schedule.py`` and ``engine.py`` at deepspeedai/DeepSpeed
``edaa7221`` (2026-08-22; the engine as first released, ``65c2f974d`` 2020-09-09, and the change to
partitioned gradients, ``e2fdd254e`` 2021-09-29).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.parts import PipeInputs, PipeTerms, ScheduleNeeds, SchedulePart

__all__ = ["ClassicSchedule", "InterleavedOptions", "DeepSpeedSchedule", "DeepSpeedOptions", "p2p_transfers"]


def p2p_transfers(pipe: PipeInputs) -> Array:
    """Sends per step on one stage boundary: ``2 (v m + p - 1)`` with ``p > 1``, else 0."""
    return ops.where(pipe.pp > 1, 2.0 * (pipe.virtual_stages * pipe.micro_batches + pipe.pp - 1.0), 0.0)


@attrs.frozen(kw_only=True)
class InterleavedOptions:
    """The interleaved schedule's ``microbatch_rule``, whose micro-batch counts it runs with
    virtual stages: ``"megatron"`` (Megatron-LM: a multiple of ``pp``,
    ``megatron/core/pipeline_parallel/schedules.py`` at NVIDIA/Megatron-LM@d98e8a64) or
    ``"pytorch"`` (``torch.distributed.pipelining``'s ``ScheduleInterleaved1F1B``, which
    torchtitan runs: ``number_of_rounds = max(1, n_microbatches // self.pp_group_size)`` and
    "Interleaved 1F1B requires the number of microbatches to be a multiple of the number of
    rounds", ``torch/distributed/pipelining/schedules.py`` at pytorch/pytorch@00722e64; the
    flexible schedule of pytorch/pytorch #129597, made ``Interleaved1F1B`` by #137783,
    2024-10-11). The torchtitan profile sets ``"pytorch"``."""

    microbatch_rule: str = attrs.field(
        default="megatron", validator=attrs.validators.in_(("megatron", "pytorch"))
    )


#: :meth:`ClassicSchedule.needs`' three declarations (frozen records: one each, not one a call).
_ONE_CHUNK = ScheduleNeeds()
_INTERLEAVED_ROUNDS = ScheduleNeeds(virtual_stages="used", interleaved_rounds=True)
_INTERLEAVED_MULTIPLE_OF_PP = ScheduleNeeds(virtual_stages="used", interleaved_multiple_of_pp=True)


@attrs.frozen(kw_only=True)
class ClassicSchedule(SchedulePart):
    """GPipe / 1F1B / interleaved 1F1B.

    * ``bubble_over_virtual``: the bubble is divided by the virtual stages (interleaved).
    * ``in_flight``: ``"pipeline"`` (min(m, p), 1F1B) or ``"all"`` (m, GPipe).
    * ``bubble_fraction``: a multiplier on the classic bubble (1 for the three of the paper).
    """

    bubble_over_virtual: bool = False
    in_flight: str = attrs.field(default="pipeline", validator=attrs.validators.in_(("pipeline", "all")))
    bubble_fraction: float = 1.0

    def needs(self, opts: Any) -> ScheduleNeeds:
        """Interleaving (``bubble_over_virtual``) uses virtual stages and, with ``v > 1``, needs
        the micro-batches to be a multiple of ``p`` (Megatron-LM) or of PyTorch's rounds
        (:class:`InterleavedOptions`); GPipe and 1F1B run one chunk per GPU."""
        if not self.bubble_over_virtual:
            return _ONE_CHUNK
        if getattr(opts, "microbatch_rule", "megatron") == "pytorch":
            return _INTERLEAVED_ROUNDS
        return _INTERLEAVED_MULTIPLE_OF_PP

    def one_stage_order(self, opts: Any) -> str:
        """With one stage GPipe runs every forward first; 1F1B and interleaved each micro-batch's
        backward after its forward (no bubble, no transfers: :meth:`terms` at ``pp = 1``)."""
        return "gpipe" if self.in_flight == "all" else "1f1b"

    def terms(self, pipe: PipeInputs, opts: Any) -> PipeTerms:
        pp, m, v = pipe.pp, pipe.micro_batches, pipe.virtual_stages
        v_bubble = v if self.bubble_over_virtual else 1.0
        bubble = self.bubble_fraction * (pp - 1.0) / v_bubble * pipe.stage_s
        if type(pp) is float and type(m) is float and type(v) is float:  # one plan: plain ifs
            return PipeTerms(
                bubble_s=bubble, in_flight=self._held_floats(pp, m, v), p2p_transfers=_p2p_floats(pp, m, v)
            )
        if self.in_flight == "all":
            held = m
        else:
            held = ops.minimum(m, pp)
            if self.bubble_over_virtual:
                held = held * ops.where(v > 1, 1.0 + (pp - 1.0) / (pp * v), 1.0)
        # the evaluator asks infeasible() (needs()) itself, as the planner's pre-check does
        return PipeTerms(bubble_s=bubble, in_flight=held, p2p_transfers=p2p_transfers(pipe))

    def _held_floats(self, pp: float, m: float, v: float) -> float:
        """:meth:`terms`' ``in_flight`` of one plan (plain floats): the same operations in the
        same order, ``ops.minimum`` written out (nan where neither side is the smaller) and
        ``ops.where`` the side it picks (the other's quotient taken too, so a zero divisor
        raises as it does there). tests/test_scalar_twins.py holds it to the arrays."""
        if self.in_flight == "all":
            return m
        held = m if m <= pp else (pp if pp < m else math.nan)
        if self.bubble_over_virtual:
            chunked = 1.0 + (pp - 1.0) / (pp * v)
            held = held * (chunked if v > 1 else 1.0)
        return held

    def infeasible(self, pipe: PipeInputs, opts: Any) -> Array:
        """:func:`~shardmeter.parts.unmet_needs` of :meth:`needs`; one plan of plain floats
        (finite micro-batches and stages, ``pp`` not 0: ``ops.mod`` of plain numbers) as plain
        bools, the same bools; a batch, or PyTorch's rounds, through the general code."""
        pp, m, v = pipe.pp, pipe.micro_batches, pipe.virtual_stages
        if type(pp) is float and type(m) is float and type(v) is float:
            needs = self.needs(opts)
            if needs is _ONE_CHUNK:
                return pp < 0
            if needs is _INTERLEAVED_MULTIPLE_OF_PP and pp and m - m == 0.0 and pp - pp == 0.0:
                return (pp < 0) | ((v > 1) & ((pp < 2) | (m % pp != 0)))
        return super().infeasible(pipe, opts)

    def in_flight_at(self, pipe: PipeInputs, opts: Any, rank: Array) -> Array:
        """Rank ``rank``'s micro-batches in flight at its peak (see the module docstring)."""
        pp, m, v = pipe.pp, pipe.micro_batches, pipe.virtual_stages
        if self.in_flight == "all":
            return m + 0.0 * rank
        if type(pp) is float and type(m) is float and type(v) is float and type(rank) is float:
            return self._in_flight_floats(pp, m, v, rank)
        one_f_one_b = ops.minimum(pp - rank, m)
        if not self.bubble_over_virtual:
            return one_f_one_b
        chunks = ops.minimum((pp - rank - 1.0) * 2.0 + (v - 1.0) * pp + 1.0, m * v)
        return ops.where(v > 1, chunks / v, one_f_one_b)

    def _in_flight_floats(self, pp: float, m: float, v: float, rank: float) -> float:
        """:meth:`in_flight_at` of one plan (plain floats, not GPipe): the same operations in
        the same order, ``ops.minimum`` written out and ``ops.where`` the side it picks (the
        chunks' quotient taken either way, so ``v = 0`` raises as it does there).
        tests/test_scalar_twins.py holds it to the arrays."""
        x = pp - rank
        one_f_one_b = x if x <= m else (m if m < x else math.nan)
        if not self.bubble_over_virtual:
            return one_f_one_b
        x, y = (pp - rank - 1.0) * 2.0 + (v - 1.0) * pp + 1.0, m * v
        chunks = (x if x <= y else (y if y < x else math.nan)) / v
        return chunks if v > 1 else one_f_one_b

    def loss_in_flight(self, pipe: PipeInputs, opts: Any) -> Array:
        """GPipe runs every forward pass first, so the last stage holds all ``m`` micro-batches'
        saved logits; 1F1B and interleaved run each one's backward right after its forward
        through the last chunk: one."""
        if self.in_flight == "all":
            return pipe.micro_batches
        pp = pipe.pp
        if type(pp) is float:
            return 0.0 if pp < 0 else 1.0
        return ops.where(pp < 0, 0.0, 1.0)


def _p2p_floats(pp: float, m: float, v: float) -> float:
    """:func:`p2p_transfers` of one plan (plain floats): the side ``ops.where`` picks."""
    return 2.0 * (v * m + pp - 1.0) if pp > 1 else 0.0


@attrs.frozen(kw_only=True)
class DeepSpeedOptions:
    """DeepSpeed's ``pipeline`` config keys that change what a send carries (defaults of
    ``DeepSpeedConfig``'s ``default_pipeline``, ``deepspeed/runtime/config.py``@edaa7221):
    ``pipe_partitioned``: with TP > 1 each TP rank sends 1/t of a stage's output activation
    (``PartitionedTensor`` over the slice-parallel group) and the receiver all-gathers it;
    ``grad_partitioned``: the same for the gradient sent back (full from every TP rank before
    ``e2fdd254e``, 2021-09-29, where the engine had ``is_grad_partitioned = False``)."""

    pipe_partitioned: bool = True
    grad_partitioned: bool = True


@attrs.frozen(kw_only=True)
class DeepSpeedSchedule(SchedulePart):
    """DeepSpeed ``PipelineEngine`` with ``TrainSchedule`` (non-interleaved 1F1B).

    * Bubble: ``TrainSchedule.steps`` runs ``2 (m + p - 1)`` steps, each one micro-batch's
      forward or backward pass, of which ``2 (p - 1)`` are idle on every stage:
      ``(p - 1) (t_f + t_b)``, as PipeDream-Flush.
    * In flight: ``num_pipe_buffers`` = ``min(p - stage_id, m)`` forward passes, ``min(p, m)`` on
      the first stage.
    * Sends: every exchange is its own blocking instruction between the compute instructions
      (``SendGrad`` then ``RecvActivation`` before a forward step, ``RecvGrad`` then
      ``SendActivation`` before a backward one; ``p2p.send``/``recv`` are ``dist.send``/``recv``),
      so a stage with a neighbour on both sides issues ``4 m`` one-way messages one after the
      other (``2 m`` for the first and last stage), never paired with the opposite direction
      as Megatron's ``send_forward_recv_backward``, never overlapped with compute; plus the
      ``2 (p - 1)`` hops of the fill and drain on the critical path.
    * Message: the whole activation ``s b h`` x 2 bytes from every TP rank, or 1/t of it in a
      direction that is partitioned (:class:`DeepSpeedOptions`); the receiver's all-gather over
      the TP group is not priced (as for Megatron's scatter-gather).
    * ``virtual_stages > 1`` is infeasible: the engine has no interleaved schedule.
    * The gradients are reduced by the ``ReduceGrads`` instruction after the last step (not
      under the backward passes): a profile using this schedule sets ``dp_comm_overlap = false``.
    """

    options: type = DeepSpeedOptions

    def needs(self, opts: Any) -> ScheduleNeeds:
        """The engine has no interleaved schedule: ``virtual_stages > 1`` is refused."""
        return ScheduleNeeds(virtual_stages="refused")

    def one_stage_order(self, opts: Any) -> str:
        """One stage: each micro-batch's forward then its backward, no sends (``TrainSchedule``
        with ``stages = 1``)."""
        return "1f1b"

    def infeasible_message(self, opts: Any) -> str | None:
        return "DeepSpeed's PipelineEngine has no interleaved schedule: virtual_stages must be 1 (got {v})"

    def terms(self, pipe: PipeInputs, opts: Any) -> PipeTerms:
        pp, m = pipe.pp, pipe.micro_batches
        bubble = (pp - 1.0) * pipe.stage_s
        held = ops.minimum(m, pp)
        one_way = ops.where(pp > 2, 4.0 * m, 2.0 * m)
        sends = ops.where(pp > 1, one_way + 2.0 * (pp - 1.0), 0.0)
        act = pipe.activation_bytes
        fwd = act / pipe.tp if opts.pipe_partitioned else act
        bwd = act / pipe.tp if opts.grad_partitioned else act
        return PipeTerms(bubble_s=bubble, in_flight=held, p2p_transfers=sends, p2p_bytes=0.5 * (fwd + bwd))

    def in_flight_at(self, pipe: PipeInputs, opts: Any, rank: Array) -> Array:
        """``num_pipe_buffers``: ``min(p - stage_id, m)`` forward passes on stage ``rank``."""
        return ops.minimum(pipe.pp - rank, pipe.micro_batches)
