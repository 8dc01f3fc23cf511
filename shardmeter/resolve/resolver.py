"""Resolution: a loaded :class:`~shardmeter.load.scenario.Scenario` and a registry -> one frozen
:class:`Resolved` with every part name replaced by its record or part and every strategy's
options structured into its options class. Later stages (inputs, evaluation, report, pricing)
read only this object; none of them looks a name up again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs

from shardmeter.errors import ScenarioError
from shardmeter.load.framework_defaults import framework_state
from shardmeter.load.scenario import IslandSpec, ParallelismSpec, Scenario, TierSpec
from shardmeter.parts import Part, StackVersion, option_defaults
from shardmeter.records import CostSource, HardwareProfile, Interconnect
from shardmeter.registry.convert import structure_record
from shardmeter.registry.lookup import resolve_part

__all__ = ["Resolved", "ResolvedIsland", "ResolvedTier", "resolve_scenario", "LEVELS"]

#: Topology levels an :class:`~shardmeter.Estimator` may re-price on every island.
LEVELS = ("intra_node", "inter_node", "network")


@attrs.frozen
class ResolvedTier:
    """One network tier of an island: its ``link``, the GPUs one domain of it joins (``None``:
    the whole island) and its ``oversubscription`` (bandwidth divided by it)."""

    link: Interconnect
    gpus: int | None
    oversubscription: float = 1.0
    #: a network link's bandwidth is per NIC, shared by the node's GPUs (``nics_per_node / gpus_per_node``)
    nic_shared: bool = True


@attrs.frozen
class ResolvedIsland:
    """One island with every part resolved."""

    name: str
    gpu: HardwareProfile
    nodes: int
    gpus_per_node: int
    tiers: tuple[ResolvedTier, ...]
    nics_per_node: int
    cost: CostSource | None
    parallelism: ParallelismSpec
    sharding: Part
    sharding_options: Any
    schedule: Part
    schedule_options: Any
    dp: int
    #: the parallelism is the island's own (``island[i].parallelism``), not the scenario's
    own_parallelism: bool = False
    #: a link between nodes is known (given, or the GPU's default); without one the island must
    #: stay one node
    has_inter_node: bool = True
    #: the island's own uplink to the other islands; None: the scenario's ``network`` link
    uplink: Interconnect | None = None

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def gpus_used(self) -> int:
        par = self.parallelism
        return par.tp * par.pp * par.cp * self.dp


@attrs.frozen
class Resolved:
    """A scenario with its parts: ``islands``, the ``sync`` part and its options, and the WAN
    ``network`` link (``None`` with one island)."""

    scenario: Scenario
    islands: tuple[ResolvedIsland, ...]
    sync: Part
    sync_options: Any
    network: Interconnect | None
    #: the ``[sync] convergence`` model (a ConvergencePart); None: convergence is not priced
    convergence: Part | None = None
    #: the ``training.framework`` profile (a FrameworkPart); None: no stack named
    framework: Part | None = None
    #: the profile's state ``training.framework_version`` picked (a StackVersion, given to its
    #: behaviour hooks); None: no stack named, or a profile without dated states
    framework_version: StackVersion | None = None
    #: the ``[reliability] model`` (a FailurePart) and its options; None: a run never fails
    failures: Part | None = None
    failure_options: Any = None
    #: the ``[variability] model`` (a VariabilityPart) and its options; None: every rank alike
    variability: Part | None = None
    variability_options: Any = None


def structure_options(part: Part, given: Mapping[str, Any], where: str, file: str | None):
    """The part's options instance from the scenario keys it declares (the loader has already
    type-checked them against the defaults; the strict converter checks them again)."""
    names = option_defaults(part.options)
    values = {k: v for k, v in given.items() if k in names}
    return structure_record(values, part.options, path=where, file=file)


def _tiers(reg, isl, gpu: HardwareProfile, gpn: int, levels, where: str, file: str | None):
    def link(ref, path):
        return resolve_part(reg, "interconnect", ref, path, file)

    if isl.tiers:
        last = isl.tiers[-1]
        if last.gpus is not None and last.gpus < isl.nodes * gpn:
            raise ScenarioError(
                f"the last tier joins the whole island ({isl.nodes * gpn} GPUs); omit gpus or give "
                f"at least that, got {last.gpus}",
                path=f"{where}.tiers[{len(isl.tiers) - 1}].gpus",
                file=file,
            )
        out = []
        for t, tier in enumerate(isl.tiers):
            # an Estimator's with_level re-prices the innermost tier (intra_node) or the ones beyond it
            level = "intra_node" if t == 0 else "inter_node"
            ref = levels.get(level, tier.link)
            out.append(ResolvedTier(link(ref, f"{where}.tiers[{t}].link"), tier.gpus, tier.oversubscription))
        return tuple(out)
    intra = link(levels.get("intra_node", isl.intra_node or gpu.intra_node or "pcie4"), f"{where}.intra_node")
    inter_ref = levels.get("inter_node", isl.inter_node or gpu.inter_node)
    inter = link(inter_ref, f"{where}.inter_node") if inter_ref else None
    if inter is None and isl.nodes > 1:
        raise ScenarioError(
            "required with more than one node (no default for this GPU)",
            path=f"{where}.inter_node",
            file=file,
        )
    return (ResolvedTier(intra, gpn, nic_shared=False), ResolvedTier(inter or intra, None))


def resolve_scenario(
    sc: Scenario, reg, *, levels: Mapping[str, Any] | None = None, cost_source: Any = None
) -> Resolved:
    """Resolve every part of ``sc`` (raises :class:`ScenarioError` naming the key on an unknown
    name). ``levels`` re-prices ``intra_node``/``inter_node``/``network`` on every island;
    ``cost_source`` prices every island."""
    levels = dict(levels or {})
    file = sc.file
    reg, overlays = _apply_catalog(sc, reg)
    islands = _islands(sc, reg, levels, cost_source)
    sync = reg.get("sync", sc.sync.strategy, path="sync.strategy", file=file)
    sync_opts = structure_options(sync, sc.sync.options, "sync", file)
    convergence = _convergence(sc, reg)
    network = _network(sc, reg, levels, len(islands))
    framework, version = None, None
    if sc.training.framework is not None:
        framework = reg.get("framework", sc.training.framework, path="training.framework", file=file)
        version = framework_state(framework, sc.training.framework_version, file)
    failures, failure_opts = _model_part(sc.reliability, "failures", "reliability", reg, file)
    variability, variability_opts = _model_part(sc.variability, "variability", "variability", reg, file)
    if overlays:
        sc = attrs.evolve(sc, notes=sc.notes + tuple(_overlay_notes(overlays, islands, network)))
    return Resolved(
        scenario=sc,
        islands=islands,
        sync=sync,
        sync_options=sync_opts,
        network=network,
        convergence=convergence,
        framework=framework,
        framework_version=version,
        failures=failures,
        failure_options=failure_opts,
        variability=variability,
        variability_options=variability_opts,
    )


def _model_part(spec: Any, kind: str, where: str, reg, file: str | None) -> tuple[Part | None, Any]:
    """The part a ``[reliability]`` or ``[variability]`` table names, with its options; ``(None,
    None)`` without the table."""
    if spec is None:
        return None, None
    part = reg.get(kind, spec.model, path=f"{where}.model", file=file)
    return part, structure_options(part, spec.options, where, file)


def _apply_catalog(sc: Scenario, reg) -> tuple[Any, list]:
    """``(registry, overlays)``: the scenario's ``catalog`` overlays applied to a copy of ``reg``
    (paths relative to the scenario's folder); they replace or add records for it only."""
    if not sc.catalog:
        return reg, []
    from shardmeter.resolve.overlay import apply_overlays

    base = os.path.dirname(os.path.abspath(sc.file)) if sc.file else None
    return apply_overlays(reg, sc.catalog, base=base, scenario_file=sc.file)


def _islands(sc: Scenario, reg, levels: Mapping[str, Any], cost_source: Any) -> tuple[ResolvedIsland, ...]:
    """Every island, in order; an offer's island (after the fixed ones) is named after the
    offer, so its errors name the offer's keys."""
    offered = {o.name: k for k, o in enumerate(sc.offers)}
    fixed = len(sc.islands) - len(sc.offers)
    out = []
    for i, isl in enumerate(sc.islands):
        where = f"offer[{offered[isl.name]}]" if i >= fixed and isl.name in offered else f"island[{i}]"
        out.append(_island(sc, reg, i, isl, where, levels, cost_source))
    return tuple(out)


def _island(
    sc: Scenario, reg, i: int, isl: IslandSpec, where: str, levels: Mapping[str, Any], cost_source: Any
) -> ResolvedIsland:
    """Island ``i``: its GPU, tiers, NICs, price, uplink, and its (own or the scenario's)
    parallelism with the sharding and schedule parts and their options."""
    file = sc.file
    gpu = resolve_part(reg, "hardware", isl.gpu, f"{where}.gpu", file)
    gpn = isl.gpus_per_node or gpu.gpus_per_node
    tiers = _tiers(reg, isl, gpu, gpn, levels, where, file)
    nics = isl.nics_per_node or gpu.nics_per_node or gpn
    cost = _cost(reg, isl, isl.name or f"island-{i}", cost_source, where, file)
    uplink = None
    if isl.uplink is not None and "network" not in levels:  # with_level("network") re-prices every uplink
        uplink = resolve_part(reg, "interconnect", _link_ref(isl.uplink), f"{where}.uplink", file)
    par = isl.parallelism or sc.parallelism
    ppath = f"{where}.parallelism" if isl.parallelism else "parallelism"
    sharding = reg.get("sharding", par.sharding, path=f"{ppath}.sharding", file=file)
    schedule = reg.get("schedule", par.schedule, path=f"{ppath}.schedule", file=file)
    return ResolvedIsland(
        name=isl.name or f"island-{i}",
        gpu=gpu,
        nodes=isl.nodes,
        gpus_per_node=gpn,
        tiers=tiers,
        nics_per_node=nics,
        cost=cost,
        parallelism=par,
        sharding=sharding,
        sharding_options=structure_options(sharding, par.options, ppath, file),
        schedule=schedule,
        schedule_options=structure_options(schedule, par.options, ppath, file),
        dp=par.dp or max(1, (isl.nodes * gpn) // (par.tp * par.pp * par.cp)),
        own_parallelism=isl.parallelism is not None,
        has_inter_node=bool(isl.tiers) or bool(levels.get("inter_node", isl.inter_node or gpu.inter_node)),
        uplink=uplink,
    )


def _cost(
    reg, isl: IslandSpec, name: str, cost_source: Any, where: str, file: str | None
) -> CostSource | None:
    """The island's cost source: ``cost_source`` (every island), else its ``price`` (a name, a
    table of its own, ``cloud-on-demand`` by default); None when the default is not registered."""
    cost_ref = cost_source if cost_source is not None else (isl.price or "cloud-on-demand")
    if isinstance(cost_ref, CostSource):
        return cost_ref
    if cost_ref == "cloud-on-demand" and "cloud-on-demand" not in reg.names("cost"):
        return None
    if isinstance(cost_ref, Mapping) and "name" not in cost_ref:
        return _own_cost(cost_ref, name, where, file)
    return resolve_part(reg, "cost", cost_ref, f"{where}.price", file)


def _convergence(sc: Scenario, reg) -> Part | None:
    """The ``[sync] convergence`` model; None when not given or ``"none"``."""
    name = sc.sync.convergence
    if name is None or name == "none":
        return None
    return reg.get("convergence", name, path="sync.convergence", file=sc.file)


def _network(sc: Scenario, reg, levels: Mapping[str, Any], n_islands: int) -> Interconnect | None:
    """The WAN link between islands (``internet`` by default); None with one island, where a
    given ``[network]`` link is still looked up (unused, but it must be well-formed)."""
    if n_islands > 1:
        net_ref = levels.get("network", sc.network.link if sc.network else "internet")
        return resolve_part(reg, "interconnect", net_ref, "network.link", sc.file)
    if sc.network is not None and "network" not in levels:
        resolve_part(reg, "interconnect", sc.network.link, "network.link", sc.file)
    return None


def _link_ref(ref: Any) -> Any:
    """An uplink table without a ``name`` overrides the default ``internet`` link, as
    ``[network] link`` does."""
    return {"name": "internet", **ref} if isinstance(ref, Mapping) and "name" not in ref else ref


def _own_cost(table: Mapping[str, Any], island: str, where: str, file: str | None) -> CostSource:
    """A ``price`` table without a ``name``: a whole cost source of this island alone (an offer's
    price, :func:`shardmeter.load.offers.offer_price`), named by its ``source`` (else
    ``<island> price``)."""
    name = table.get("source") or f"{island} price"
    return structure_record({"name": name, **table}, CostSource, path=f"{where}.price", file=file)


def _overlay_notes(overlays, islands, network) -> list[str]:
    """The report's notes on the overlays: which record each entry replaced, and its provenance."""
    from shardmeter.resolve.overlay import overlay_notes

    used: dict[str, set[str]] = {"hardware": set(), "interconnect": set(), "cost": set()}
    for isl in islands:
        used["hardware"].add(isl.gpu.name)
        used["interconnect"].update(t.link.name for t in isl.tiers)
        if isl.cost is not None:
            used["cost"].add(isl.cost.name)
        if isl.uplink is not None:
            used["interconnect"].add(isl.uplink.name)
    if network is not None:
        used["interconnect"].add(network.name)
    return overlay_notes(overlays, used)


__all__ += ["resolve_part", "structure_options", "TierSpec"]
