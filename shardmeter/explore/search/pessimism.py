"""The ``time-pessimistic`` and ``cost-pessimistic`` objectives of ``plan``: plans ranked by
the slow end of their confidence band.

A plan's band is the one its report's ``confidence`` carries
(:func:`~shardmeter.report.confidence.band_of`: the nearest validated runs' out-of-sample bound,
widened outside the envelope, plus the share of its throughput above the validated MFU ceiling);
the objective ranks ``time / (1 - band)`` (cost alike: a plan pays for its GPUs by the hour), so
a plan the model is unsure of, or one that promises more MFU than any validated run reached,
pays for it. During the search the band is computed per candidate from what the fast model
gives (``detail=False``): its layout family from the degrees, its GPUs, and its MFU as
``model FLOPs per token x tokens per step / (step time x GPUs x peak)`` (the model FLOPs per
token depend on the model's shape only, the same for every plan). One island only: the bands of
several islands' per-island plans are not searched this way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from shardmeter.errors import ShardMeterError
from shardmeter.model.evaluate import evaluate
from shardmeter.model.outputs import Outputs
from shardmeter.report import band as B
from shardmeter.report.confidence import Features, band_of, family_of_degrees, features_of

__all__ = ["PESSIMISTIC_OBJECTIVES", "band_context", "candidate_bands"]

#: Objective -> the raw figure whose pessimistic end it ranks.
PESSIMISTIC_OBJECTIVES = {"time-pessimistic": "time", "cost-pessimistic": "cost"}


@attrs.frozen
class BandContext:
    """What the search needs for a candidate's band: the features every plan shares (its
    ``family`` and ``gpus`` are set per candidate) and the MFU constant ``model FLOPs per token
    x tokens per step / peak FLOP/s`` (MFU = it / (step time x GPUs))."""

    features: Features
    mfu_constant: float


def band_context(res: Any, est: Any, objective: str, tokens_per_step: float) -> BandContext | None:
    """The context of a pessimistic ``objective`` (None for any other); one island only."""
    if objective not in PESSIMISTIC_OBJECTIVES:
        return None
    if len(res.islands) != 1:
        raise ShardMeterError(
            f"plan --objective {objective}: one island only (the band of several islands' plans is "
            "not searched); use --objective time or cost"
        )
    out = evaluate(*est.inputs(res))
    flops = float(np.asarray(out.model_flops_per_token).ravel()[0])
    params = float(np.asarray(out.params).ravel()[0])
    isl = res.islands[0]
    peak = isl.gpu.peak(res.scenario.training.precision) * 1e12
    mfu_constant = flops * tokens_per_step / peak if peak > 0 else float("nan")
    return BandContext(features_of(res, isl.gpus, params), mfu_constant)


def candidate_bands(
    ctx: BandContext, inp: Mapping[str, Any], out: Outputs, shape: tuple[int, ...]
) -> np.ndarray:
    """Each candidate's band (a fraction), one per row of the flattened ``out``; ``shape`` is
    ``(prefixes, inner candidates, islands)``, what the layout columns of ``inp`` broadcast to."""
    deg = [
        np.broadcast_to(np.asarray(inp[f"layout.{a}"]), shape).max(axis=-1).ravel().astype(np.int64)
        for a in ("tp", "pp", "cp", "ep")
    ]
    gpus = np.asarray(out.island.gpus).sum(axis=-1).astype(np.int64)
    step = np.asarray(out.step_time_s, dtype=float)
    with np.errstate(all="ignore"):
        mfu = ctx.mfu_constant / (step * gpus)
    keys = np.stack([*deg, gpus], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    bands = np.empty(len(step))
    inv = inv.ravel()
    for j, (tp, pp, cp, ep, g) in enumerate(uniq.tolist()):
        sel = inv == j
        f = attrs.evolve(ctx.features, family=family_of_degrees(tp, pp, cp, ep), gpus=max(int(g), 1))
        bands[sel] = band_of(f, mfu[sel])
    return bands


def pessimistic(score: np.ndarray, bands: np.ndarray) -> np.ndarray:
    """A time or cost at the slow end of its band (:func:`~shardmeter.report.band.pessimistic_time`)."""
    return np.asarray(B.pessimistic_time(score, bands))
