"""Pricing, in one place: what an island's GPU-hour and egress cost, used by the report and the
planner alike.

* GPU time: the island's cost source's :meth:`~shardmeter.CostSource.gpu_hour_usd` for its GPU
  (``nan`` when unknown); every GPU the island has (``nodes x gpus_per_node``) is billed for
  the whole run, used or not.
* Egress: the bytes an island sends to other islands, at its cost source's price (the party
  that bills the island; an offer's own price, :mod:`shardmeter.load.offers`), or its uplink's (its
  own, else the network link) when the island has no cost source.

:func:`cost_breakdown` lays a run's cost out as ``rate x GPU-hours + egress`` with each price's
source and date, so a reader can redo the sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

from shardmeter.records import Interconnect
from shardmeter.resolve.resolver import Resolved, ResolvedIsland

__all__ = [
    "gpu_hour_usd",
    "egress_usd_per_gb",
    "island_cost_usd",
    "unpriced_island",
    "gpu_time_usd",
    "egress_usd",
    "gpu_hours",
    "cost_breakdown",
    "IslandPrice",
    "island_prices",
]


def gpu_hours(gpus_billed, seconds):
    """GPU-hours of ``gpus_billed`` GPUs for ``seconds`` (arrays broadcast)."""
    return gpus_billed * seconds / 3600.0


def gpu_time_usd(gpus_billed, usd_per_gpu_hour, seconds):
    """Dollars of ``gpus_billed`` GPUs for ``seconds`` (arrays broadcast)."""
    return gpu_hours(gpus_billed, seconds) * usd_per_gpu_hour


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
    link = _uplink(isl, network)
    return link.egress_usd_per_gb if link is not None else 0.0


def _uplink(isl: ResolvedIsland, network: Interconnect | None) -> Interconnect | None:
    """The island's uplink with two islands or more: its own, else the network link."""
    return (isl.uplink or network) if network is not None else None


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


def _common(values: list[Any]) -> Any:
    """The one value every island has, else ``None``."""
    return values[0] if values and all(v == values[0] for v in values) else None


def _sum(values: list[float | None]) -> float | None:
    """The sum, ``None`` where a value is (``None in``: no float equals None)."""
    return None if None in values else float(sum(values))  # type: ignore[arg-type]


@attrs.frozen
class IslandPrice:
    """What :func:`cost_breakdown` reads of one island, which its resolved records alone decide:
    its name, the GPUs billed (``nodes x gpus_per_node``), the GPU-hour ``rate`` (``nan``:
    unknown) and whether it is ``known``, the egress price and who sets it, the cost source's
    name and date."""

    name: str
    gpus_billed: int
    rate: float
    known: bool
    egress_usd_per_gb: float
    egress_source: str | None
    price_source: str | None
    price_date: str | None


def island_prices(res: Resolved) -> tuple[IslandPrice, ...]:
    """Each island's :class:`IslandPrice` (the same for every estimate of ``res``)."""
    prices = []
    for isl in res.islands:
        rate = gpu_hour_usd(isl)
        link = _uplink(isl, res.network)
        egress_source = isl.cost.name if isl.cost is not None else (link.name if link is not None else None)
        prices.append(
            IslandPrice(
                name=isl.name,
                gpus_billed=isl.gpus,
                rate=rate,
                known=math.isfinite(rate),
                egress_usd_per_gb=egress_usd_per_gb(isl, res.network),
                egress_source=egress_source,
                price_source=isl.cost.name if isl.cost is not None else None,
                price_date=isl.cost.date or None if isl.cost is not None else None,
            )
        )
    return tuple(prices)


def cost_breakdown(
    res: Resolved, wall_clock_s: float, egress_gb: float, prices: Sequence[IslandPrice] | None = None
) -> dict[str, Any]:
    """The report's ``cost_breakdown_usd``: per island ``gpu_hours`` (every GPU it has, for the
    whole run), ``rate_usd_per_gpu_hour``, ``compute_usd`` = rate x GPU-hours, ``egress_gb``
    (what the island sends to other islands), ``egress_usd_per_gb``, ``egress_usd``, and the
    cost source's ``price_source`` (name) and ``price_date``; then the totals (``total_usd`` =
    ``compute_usd + egress_usd``, null when a rate is unknown) and, where every island agrees,
    the rate, source and date. ``egress_gb`` is per island (each sends the same bytes).
    ``prices``: :func:`island_prices` of ``res``, where the caller keeps them."""
    rows = []
    nbytes = egress_gb * 1e9
    for p in island_prices(res) if prices is None else prices:
        known, per_gb = p.known, p.egress_usd_per_gb
        # gpu_hours, gpu_time_usd (gpu_hours x rate) and egress_usd written out: the same operations
        hours = p.gpus_billed * wall_clock_s / 3600.0
        rows.append(
            {
                "name": p.name,
                "gpus_billed": p.gpus_billed,
                "gpu_hours": hours,
                "rate_usd_per_gpu_hour": p.rate if known else None,
                "compute_usd": hours * p.rate if known else None,
                "egress_gb": egress_gb,
                "egress_usd_per_gb": per_gb,
                "egress_usd": nbytes / 1e9 * per_gb,
                "egress_source": p.egress_source,
                "price_source": p.price_source,
                "price_date": p.price_date,
            }
        )
    totals = _totals_of_one(rows[0]) if len(rows) == 1 else _totals(rows)
    totals["islands"] = rows
    return totals


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals of :func:`cost_breakdown`'s rows (the keys before ``islands``)."""
    compute, egress = _sum([r["compute_usd"] for r in rows]), _sum([r["egress_usd"] for r in rows])
    return {
        "total_usd": None if compute is None or egress is None else compute + egress,
        "compute_usd": compute,
        "egress_usd": egress,
        "gpu_hours": float(sum(r["gpu_hours"] for r in rows)),
        "egress_gb": float(sum(r["egress_gb"] for r in rows)),
        "rate_usd_per_gpu_hour": _common([r["rate_usd_per_gpu_hour"] for r in rows]),
        "price_source": _common([r["price_source"] for r in rows]),
        "price_date": _common([r["price_date"] for r in rows]),
    }


def _totals_of_one(r: dict[str, Any]) -> dict[str, Any]:
    """:func:`_totals` of one row, written out: the sum of one float is ``0 + x`` (``sum``'s int
    start, then the float: ``0.0 + x``, so ``-0.0`` sums to ``0.0`` as there), and one value is
    common when it equals itself (not a nan)."""
    c, e = r["compute_usd"], r["egress_usd"]
    compute = None if c is None else 0.0 + c
    egress = None if e is None else 0.0 + e
    rate, source, date = r["rate_usd_per_gpu_hour"], r["price_source"], r["price_date"]
    return {
        "total_usd": None if compute is None or egress is None else compute + egress,
        "compute_usd": compute,
        "egress_usd": egress,
        "gpu_hours": 0.0 + r["gpu_hours"],
        "egress_gb": 0.0 + r["egress_gb"],
        "rate_usd_per_gpu_hour": rate if rate == rate else None,  # a nan is not common
        "price_source": source if source == source else None,
        "price_date": date if date == date else None,
    }
