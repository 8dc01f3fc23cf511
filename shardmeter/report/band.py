"""The arithmetic of the confidence band: an 80 % prediction interval of the throughput from
out-of-sample errors, widened with the distance outside the validated envelope.

An error here is the prediction's relative miss, ``measured / predicted - 1`` (the band is an
interval around the prediction: the measured value lies in ``predicted x (1 +/- band)``); the
stored residuals are ``predicted / measured - 1`` (:func:`prediction_errors` converts).

* :func:`conformal_quantile`: the split-conformal bound of ``n`` absolute errors, the
  ``ceil((n + 1) x 0.8)``-th smallest (Vovk, Gammerman & Shafer 2005, *Algorithmic Learning in
  a Random World*; Lei et al. 2018, "Distribution-free predictive inference for regression",
  JASA 113:1094, the split conformal interval): a new error exchangeable with them lies within
  it with probability at least 0.8. With ``n = 19`` it is the 16th smallest (``(19 + 1) x 0.8``).
* :func:`widened`: an estimate with a reason of kind (stack, model family, GPU generation,
  layout family or precision never validated) gets at least the conformal bound of the whole
  table's out-of-sample errors (the error of a source group the fit never saw, which is what an
  unvalidated kind is); each factor of 2 in GPUs or parameters beyond the envelope's scale edge
  adds the band once more (``x (1 + octaves)``).
* An MFU above the validated ceiling does not widen the band: held out by group, the 148
  bundled runs whose held-out prediction lies above the ceiling of the other groups (median
  1.34x it) fall inside the unwidened band 81 % of the time, the nominal 80 %; widening them by
  ``x (1 + log2(MFU / ceiling))`` covered 93 % of them, by ``1 - ceiling / MFU`` all of them
  (``docs/scenario.md``, "Confidence"). The
  ceiling stays an envelope reason and a flag of the plan table.
* :func:`pessimistic_rate`, :func:`pessimistic_time`: the interval's slow end; a band of 100 %
  or more has no lower bound on time (``inf``).

Pure functions on scalars or numpy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = [
    "COVERAGE",
    "prediction_errors",
    "conformal_quantile",
    "octaves_outside",
    "widened",
    "pessimistic_rate",
    "pessimistic_time",
]

#: The interval's nominal coverage.
COVERAGE = 0.8


def prediction_errors(residuals: Any) -> Any:
    """``measured / predicted - 1`` of residuals ``predicted / measured - 1``."""
    return 1.0 / (1.0 + np.asarray(residuals, dtype=float)) - 1.0


def conformal_quantile(abs_errors: Iterable[float], coverage: float = COVERAGE) -> float:
    """The ``ceil((n + 1) x coverage)``-th smallest of ``n`` absolute errors (the largest when
    that rank exceeds ``n``: too few errors for the nominal coverage); NaN without any."""
    xs = np.sort(np.abs(np.asarray(list(abs_errors), dtype=float)))
    if xs.size == 0:
        return float("nan")
    rank = math.ceil(round((xs.size + 1) * coverage, 9))
    return float(xs[min(rank, xs.size) - 1])


def octaves_outside(x: float, lo: float, hi: float, factor: float) -> float:
    """How many factors of 2 ``x`` lies beyond ``[lo / factor, hi x factor]`` (0 inside)."""
    if x > hi * factor:
        return math.log2(x / (hi * factor))
    if x < lo / factor:
        return math.log2(lo / factor / x)
    return 0.0


def widened(nearest: float, kinds_unvalidated: int, table_bound: float, octaves: float) -> float:
    """The band (a fraction): the nearest runs' bound, at least the table's bound where a kind
    is unvalidated, times ``1 + octaves`` beyond the scale envelope."""
    base = max(nearest, table_bound) if kinds_unvalidated else nearest
    return base * (1.0 + octaves)


def pessimistic_rate(rate: Any, band: Any) -> Any:
    """The interval's low end of a throughput: ``rate x max(0, 1 - band)``."""
    return rate * np.maximum(0.0, 1.0 - np.asarray(band, dtype=float))


def pessimistic_time(time: Any, band: Any) -> Any:
    """The interval's long end of a time (the low end of its throughput): ``time / (1 - band)``,
    ``inf`` where the band is 100 % or more."""
    b = np.asarray(band, dtype=float)
    with np.errstate(divide="ignore"):
        out = np.where(b < 1.0, np.asarray(time, dtype=float) / np.where(b < 1.0, 1.0 - b, 1.0), np.inf)
    return out if np.ndim(out) else float(out)
