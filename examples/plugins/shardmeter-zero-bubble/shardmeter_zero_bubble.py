"""shardmeter-zero-bubble: the ZB-H1 pipeline schedule as a ShardMeter plugin.

Qi, Wan, Huang and Lin 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv 2401.10241),
Sec. 2.1: the backward pass is split into B (gradients of the activations, on the critical path
between stages) and W (gradients of the weights, which only B of the same micro-batch has to
precede). ZB-H1 keeps 1F1B's order and its number of micro-batches in flight but delays each
stage's W passes, so they fill the tail of the pipeline: with ``p`` stages the bubble shrinks
from 1F1B's ``(p-1)(T_F + T_B + T_W)`` to ``(p-1)(T_F + T_B - T_W)``, a third of it when
``T_F = T_B = T_W``, at the same peak activation memory as 1F1B (the first stage, which holds
the most activations, never holds more micro-batches than under 1F1B).

In the core's terms (:class:`shardmeter.parts.PipeInputs`) one micro-batch through the stage is
``stage_s = T_F + T_B + T_W`` and its weight-gradient GEMMs are ``weight_grad_s = T_W``, so::

    1F1B:   bubble = (p - 1) * stage_s
    ZB-H1:  bubble = (p - 1) * max(stage_s - 2 f T_W, 0)

where ``f = [parallelism] zb_w_fill`` (default 1) is the share of W that really fills the
bubble. ``f = 1`` is the paper's ZB-H1; ``f = 0`` is 1F1B exactly. A value in between is a
modelling knob of this plugin, not of the paper: W passes that cannot move freely (a W fused
with its B by the framework, a W waiting on a tensor-parallel collective, or the optimizer
step's synchronisation, which the paper's post-validation removes) fill only part of the bubble.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

import shardmeter
from shardmeter.parts import PipeInputs, PipeTerms, SchedulePart
from shardmeter.strategies.schedules import p2p_transfers

__version__ = "0.1.0"

__all__ = ["ZbH1Options", "ZeroBubbleH1"]

_PAPER = "Qi et al. 2024, Zero Bubble Pipeline Parallelism (ICLR 2024, arXiv 2401.10241), Sec. 2.1"


@attrs.frozen(kw_only=True)
class ZbH1Options:
    """``[parallelism]`` keys ``zb-h1`` reads: ``zb_w_fill`` in [0, 1], the share of the
    weight-gradient passes that fills the bubble (1: the paper's ZB-H1; 0: 1F1B)."""

    zb_w_fill: float = attrs.field(
        default=1.0, validator=[attrs.validators.ge(0.0), attrs.validators.le(1.0)]
    )


@attrs.frozen(kw_only=True)
class ZeroBubbleH1(SchedulePart):
    """ZB-H1 (see the module docstring for the paper and the formula)."""

    options: type = ZbH1Options

    def terms(self, pipe: PipeInputs, opts: Any) -> PipeTerms:
        """Bubble ``(p-1) max(stage_s - 2 f T_W, 0)`` (Qi et al. 2024, Sec. 2.1: ``(p-1)(T_F +
        T_B - T_W)`` at ``f = 1``); in flight ``min(m, p)`` micro-batches, 1F1B's peak (the same
        section: ZB-H1 does not exceed 1F1B's peak memory); point-to-point transfers as 1F1B,
        ``2 (v m + p - 1)`` per stage boundary (Narayanan et al. 2021, Sec. 2.2)."""
        pp = pipe.pp
        filled = 2.0 * opts.zb_w_fill * pipe.weight_grad_s
        bubble = (pp - 1.0) * np.maximum(pipe.stage_s - filled, 0.0)
        return PipeTerms(
            bubble_s=bubble,
            in_flight=np.minimum(pipe.micro_batches, pp),
            p2p_transfers=p2p_transfers(pipe),
            infeasible=self.infeasible(pipe, opts),
        )

    def one_stage_order(self, opts: Any) -> str:
        """With one stage (``pp = 1``) there is no bubble to fill and no transfer: each
        micro-batch's forward then its backward, as 1F1B runs it (``plan`` scores one of the two)."""
        return "1f1b"


@shardmeter.hookimpl
def shardmeter_pipeline_schedules():
    yield ZeroBubbleH1(
        name="zb-h1",
        description="ZB-H1 zero-bubble 1F1B: backward split into B and W; W passes fill the pipeline tail, so "
        "the bubble is (p-1)(T_F + T_B - T_W) instead of (p-1)(T_F + T_B + T_W), at 1F1B's peak memory "
        "(min(m, p) micro-batches in flight). [parallelism] zb_w_fill (0..1, default 1) is the share of W "
        "that fills the bubble (0 = 1F1B).",
        source=_PAPER + "; zb_w_fill: this plugin's interpolation between 1F1B and ZB-H1",
    )
