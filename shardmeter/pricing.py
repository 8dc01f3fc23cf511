"""Pricing, in one place: what an island's GPU-hour and egress cost, used by the report and the
planner alike.

* GPU time: the island's cost source's :meth:`~shardmeter.CostSource.gpu_hour_usd` for its GPU
  (``nan`` when unknown); every GPU the island has (``nodes x gpus_per_node``) is billed for
  the whole run, used or not.
* Egress: the bytes an island sends to other islands, at its cost source's price (the party
  that bills the island), or the network link's when the island has no cost source.
"""

from __future__ import annotations

import math

from .records import Interconnect
from .resolve import Resolved, ResolvedIsland

__all__ = [
    "gpu_hour_usd",
    "egress_usd_per_gb",
    "island_cost_usd",
    "unpriced_island",
    "gpu_time_usd",
    "egress_usd",
]


def gpu_time_usd(gpus_billed, usd_per_gpu_hour, seconds):
    """Dollars of ``gpus_billed`` GPUs for ``seconds`` (arrays broadcast)."""
    return gpus_billed * seconds / 3600.0 * usd_per_gpu_hour


def egress_usd(nbytes, usd_per_gb):
    """Dollars of ``nbytes`` sent to other islands (arrays broadcast)."""
    return nbytes / 1e9 * usd_per_gb


def gpu_hour_usd(isl: ResolvedIsland) -> float:
    """US dollars per GPU-hour on this island (``nan``: unknown)."""
    return isl.cost.gpu_hour_usd(isl.gpu) if isl.cost is not None else float("nan")


def egress_usd_per_gb(isl: ResolvedIsland, network: Interconnect | None) -> float:
    """US dollars per GB this island sends to other islands."""
    if isl.cost is not None:
        return isl.cost.egress_usd_per_gb
    return network.egress_usd_per_gb if network is not None else 0.0


def island_cost_usd(
    isl: ResolvedIsland, network: Interconnect | None, wall_clock_s: float, egress_gb: float
) -> tuple[float, float] | None:
    """``(GPU cost, egress cost)`` of a run on this island, or ``None`` when the GPU-hour price
    is unknown."""
    price = gpu_hour_usd(isl)
    if not math.isfinite(price):
        return None
    return gpu_time_usd(isl.gpus, price, wall_clock_s), egress_usd(
        egress_gb * 1e9, egress_usd_per_gb(isl, network)
    )


def unpriced_island(res: Resolved) -> ResolvedIsland | None:
    """The first island whose GPU-hour price is unknown, if any."""
    return next((isl for isl in res.islands if not math.isfinite(gpu_hour_usd(isl))), None)
