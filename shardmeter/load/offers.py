"""Offers: candidate islands to rent, and what the planner searches over them.

A scenario's ``[[offer]]`` entries (``docs/multi-island.md``, "Where to rent") each say where
GPUs can be rented: ``gpu``, up to ``max_nodes`` nodes, ``price_usd_per_gpu_hour``,
``egress_usd_per_gb`` and the site's own ``uplink``. Loading turns every offer into an island
at its ``max_nodes`` (:func:`offer_island`), appended after the fixed ``[[island]]`` entries
and named as the offer, so that ``estimate``, ``sweep`` and ``sensitivity`` price the
deployment that rents every offer in full (with a note saying so). The island is priced by a
cost source of its own, made on the fly from the offer (name and provenance ``offer <name>``,
egress at the offer's price) and its uplink is the offer's.

The planner's entry point::

    offer_islands(sc) -> (scenario, node_options)

``scenario`` is ``sc`` with its offers turned into plain islands (``offers = ()``, the note
dropped: nothing is left to expand, and its ``to_dict`` writes every island), and
``node_options[j]`` the node counts to search on island ``j``: for an offer ``0`` (not rented),
the powers of two up to ``max_nodes`` and ``max_nodes`` itself (:func:`node_options`); for a
fixed ``[[island]]`` its own ``nodes`` only. A plan that gives an island 0 nodes drops it.
"""

from __future__ import annotations

import attrs

from shardmeter.load.specs import IslandSpec, OfferSpec, Scenario

__all__ = ["offer_islands", "offer_island", "offer_price", "node_options", "OFFERS_NOTE"]

#: The note of a scenario with offers: what ``estimate`` prices, and where the choice is made.
OFFERS_NOTE = (
    "[[offer]] entries are estimated as islands at their max_nodes; "
    "`shardmeter plan` chooses which offers to rent and how many nodes of each"
)


def offer_price(offer: OfferSpec) -> dict[str, object]:
    """The offer's cost source, as an island's inline ``price`` table: a whole
    :class:`~shardmeter.CostSource` (no registered base), named by its ``source``,
    ``offer <name>``, at the offer's GPU-hour and egress prices and ``price_date``."""
    table: dict[str, object] = {
        "source": f"offer {offer.name}",
        "usd_per_gpu_hour": float(offer.price_usd_per_gpu_hour),
        "egress_usd_per_gb": float(offer.egress_usd_per_gb),
    }
    if offer.price_date:
        table["date"] = offer.price_date
    return table


def offer_island(offer: OfferSpec, nodes: int | None = None) -> IslandSpec:
    """The island an offer gives with ``nodes`` nodes (default ``max_nodes``)."""
    return IslandSpec(
        name=offer.name,
        gpu=offer.gpu,
        nodes=offer.max_nodes if nodes is None else nodes,
        gpus_per_node=offer.gpus_per_node,
        intra_node=offer.intra_node,
        inter_node=offer.inter_node,
        nics_per_node=offer.nics_per_node,
        price=offer_price(offer),
        uplink=offer.uplink,
        preemption_per_h=offer.preemption_per_h,
    )


def node_options(max_nodes: int) -> list[int]:
    """Node counts to search on an offer: 0 (not rented), 1, 2, 4, ... up to ``max_nodes``,
    and ``max_nodes`` (``12 -> [0, 1, 2, 4, 8, 12]``)."""
    out, n = [0], 1
    while n < max_nodes:
        out.append(n)
        n *= 2
    return [*out, max_nodes]


def offer_islands(sc: Scenario) -> tuple[Scenario, list[list[int]]]:
    """``(scenario, node_options)``: ``sc`` with one plain island per offer (at ``max_nodes``,
    its price and uplink set) and ``offers = ()``, and per island the node counts to search
    (see the module docstring). A scenario without offers comes back as it is, each island with
    its own node count."""
    offered = {o.name: o for o in sc.offers}
    options = [
        node_options(offered[str(isl.name)].max_nodes) if isl.name in offered else [isl.nodes]
        for isl in sc.islands
    ]
    if not offered:
        return sc, options
    notes = tuple(n for n in sc.notes if n != OFFERS_NOTE)
    return attrs.evolve(sc, offers=(), notes=notes), options
