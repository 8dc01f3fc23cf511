"""The bundled variability model (``[variability] model = "lognormal"``): each rank's time for a
phase of a step is log-normal around the deterministic model's figure, and the phase ends with
the slowest rank.

One rank's time is ``t x X`` with ``X ~ LogNormal(mu, sigma)``, ``sigma^2 = ln(1 + cv^2)`` and
``mu = -sigma^2 / 2``, so that ``E[X] = 1``: the deterministic model predicts the mean rank.
The slowest of ``N`` independent ranks has the CDF ``F(x)^N`` (the largest order statistic;
David and Nagaraja, *Order Statistics*, 3rd ed. 2003, Eq. 2.1.1), so its ``q``-quantile is
``F^-1(q^(1/N))`` = ``exp(mu + sigma z)`` with ``z = Phi^-1(q^(1/N))``. ``1 - q^(1/N)`` is
computed as ``-expm1(ln q / N)`` so that a job of 10^5 ranks keeps its precision.

Options (``[variability]`` keys): ``gpu_step_cv`` (one GPU's compute time per step) and
``link_cv`` (one transfer on a tier or the WAN), defaults 0.02 and 0.10, the contract's example
(SCENARIO.md; not a measurement: calibrate them); or, from measured quantiles of one rank,
``gpu_p90_over_p50`` / ``link_p90_over_p50`` (> 1; 0: unset), which set
``sigma = ln(ratio) / Phi^-1(0.9)`` and win over the CV.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import attrs
import numpy as np

from shardmeter.numeric.ops import Array
from shardmeter.parts import VariabilityPart

__all__ = ["LogNormalOptions", "LogNormalRanks", "slowest_quantile", "sigma_of"]

_Z90 = NormalDist().inv_cdf(0.9)


def _cv(inst: Any, attribute: Any, value: float) -> None:
    if not 0.0 <= value < 10.0:
        raise ValueError(f"{attribute.name} must lie in [0, 10), got {value!r}")


def _ratio(inst: Any, attribute: Any, value: float) -> None:
    if value != 0.0 and not 1.0 <= value < 100.0:
        raise ValueError(f"{attribute.name} must be 0 (unset) or in [1, 100), got {value!r}")


@attrs.frozen(kw_only=True)
class LogNormalOptions:
    """The ``[variability]`` keys of :class:`LogNormalRanks`."""

    gpu_step_cv: float = attrs.field(default=0.02, validator=_cv)
    link_cv: float = attrs.field(default=0.10, validator=_cv)
    gpu_p90_over_p50: float = attrs.field(default=0.0, validator=_ratio)
    link_p90_over_p50: float = attrs.field(default=0.0, validator=_ratio)


def sigma_of(cv: float, p90_over_p50: float = 0.0) -> float:
    """The log-normal's sigma: from one rank's P90/P50 when given (> 0), else from its CV."""
    if p90_over_p50 > 0.0:
        return math.log(p90_over_p50) / _Z90
    return math.sqrt(math.log1p(cv * cv))


_inv = np.vectorize(lambda p: NormalDist().inv_cdf(p) if 0.0 < p < 1.0 else math.nan, otypes=[float])


def slowest_quantile(q: float, ranks: Array, sigma: float) -> Array:
    """The ``q``-quantile of the slowest of ``ranks`` log-normal ranks of mean 1 (module
    docstring); exactly 1 when ``sigma`` is 0."""
    if sigma == 0.0:
        return np.ones_like(np.asarray(ranks, dtype=float)) if np.ndim(ranks) else 1.0
    n = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    tail = -np.expm1(math.log(q) / n)  # 1 - q^(1/N), accurately
    z = -_inv(tail)
    out = np.exp(-0.5 * sigma * sigma + sigma * z)
    return out if np.ndim(out) else float(out)


@attrs.frozen(kw_only=True)
class LogNormalRanks(VariabilityPart):
    """Log-normal rank times, the slowest rank setting each phase (module docstring)."""

    options: type = LogNormalOptions

    def quantile_factor(self, q: float, ranks: Array, kind: str, opts: Any) -> Array:
        if kind == "gpu":
            sigma = sigma_of(opts.gpu_step_cv, opts.gpu_p90_over_p50)
        else:
            sigma = sigma_of(opts.link_cv, opts.link_p90_over_p50)
        return slowest_quantile(q, ranks, sigma)
