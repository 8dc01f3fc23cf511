"""The ``time-pessimistic`` and ``cost-pessimistic`` objectives of ``plan``: plans ranked by
the slow end of their confidence band.

A plan's band is the one its report's ``confidence`` carries
(:func:`~shardmeter.report.confidence.band_of`: the nearest validated runs' out-of-sample bound,
widened outside the envelope); the objective ranks ``time / (1 - band)`` (cost alike: a plan
pays for its GPUs by the hour), so a plan of a layout family or scale the model was checked on
less pays for it. During the search the band is computed per candidate from its features, the
scenario's with the candidate's layout family (from its degrees) and GPUs; a search has a
handful of distinct pairs, each looked up once. One island only: the bands of several islands'
per-island plans are not searched this way.
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


def band_context(res: Any, est: Any, objective: str) -> Features | None:
    """The features every plan of a pessimistic ``objective`` shares (None for any other; its
    ``family`` and ``gpus`` are set per candidate); one island only."""
    if objective not in PESSIMISTIC_OBJECTIVES:
        return None
    if len(res.islands) != 1:
        raise ShardMeterError(
            f"plan --objective {objective}: one island only (the band of several islands' plans is "
            "not searched); use --objective time or cost"
        )
    out = evaluate(*est.inputs(res))
    return features_of(res, res.islands[0].gpus, float(np.asarray(out.params).ravel()[0]))


def candidate_bands(
    base: Features, inp: Mapping[str, Any], out: Outputs, shape: tuple[int, ...]
) -> np.ndarray:
    """Each candidate's band (a fraction), one per row of the flattened ``out``; ``shape`` is
    ``(prefixes, inner candidates, islands)``, what the layout columns of ``inp`` broadcast to."""
    deg = [
        np.broadcast_to(np.asarray(inp[f"layout.{a}"]), shape).max(axis=-1).ravel().astype(np.int64)
        for a in ("tp", "pp", "cp", "ep")
    ]
    gpus = np.asarray(out.island.gpus).sum(axis=-1).astype(np.int64)
    keys = np.stack([*deg, np.broadcast_to(gpus, deg[0].shape)], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    per = np.array(
        [
            band_of(attrs.evolve(base, family=family_of_degrees(tp, pp, cp, ep), gpus=max(int(g), 1)))
            for tp, pp, cp, ep, g in uniq.tolist()
        ]
    )
    return per[inv.ravel()]


def pessimistic(score: np.ndarray, bands: np.ndarray) -> np.ndarray:
    """A time or cost at the slow end of its band (:func:`~shardmeter.report.band.pessimistic_time`)."""
    return np.asarray(B.pessimistic_time(score, bands))
