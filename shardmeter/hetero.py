"""A heterogeneous pipeline estimated: ``[[stage_group]]`` scenarios, one way.

Each stage group becomes a one-island scenario of its own (its island, ``tp``, ``stages`` as
``pp``, the pipeline's ``dp``), resolved and built into model inputs by the ordinary stages, so
that every stage is timed and sized by the homogeneous model (:mod:`shardmeter.model.stage_groups`);
the links joining consecutive groups come from the whole scenario's resolved islands (their
uplinks, else ``[network] link``). :func:`pipeline_setup` is what :func:`estimate_pipeline`
and the planner (:mod:`shardmeter.explore.search.stage_group_plan`) share.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from shardmeter.errors import ScenarioError
from shardmeter.inputs.build import build_inputs
from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.load.specs import Scenario, StageGroupSpec, SyncSpec
from shardmeter.load.stage_groups import group_gpus_per_replica
from shardmeter.model.stage_groups import (
    PipelineStep,
    StageCost,
    inner_send_s,
    link_send_s,
    pipeline_step,
    stage_cost,
)
from shardmeter.records import Interconnect
from shardmeter.report.stage_groups import PipelineReport
from shardmeter.resolve.resolver import Resolved, ResolvedIsland

if TYPE_CHECKING:
    from shardmeter.estimator import Estimator

__all__ = [
    "GroupSetup",
    "PipelineSetup",
    "PipelineResult",
    "pipeline_setup",
    "run_pipeline",
    "estimate_pipeline",
]


@attrs.frozen(kw_only=True)
class GroupSetup:
    """One stage group: its spec, the resolved island whose GPUs it runs on and its model inputs
    (a one-island batch whose layout is the group's: ``tp``, ``pp = stages``, ``dp``)."""

    spec: StageGroupSpec
    island: ResolvedIsland
    inputs: ModelInputs
    tp: int


@attrs.frozen(kw_only=True)
class PipelineSetup:
    """The groups in pipeline order, the part table their codes index, ``dp`` pipeline
    replicas, and per boundary between consecutive groups the joining link: ``None`` (the same
    island) or ``(name, achieved bytes/s, latency s)``."""

    groups: tuple[GroupSetup, ...]
    table: PartTable
    dp: int
    links: tuple[tuple[str, float, float] | None, ...]
    scenario: Scenario
    #: the scenario's ``[network] link`` (its egress price, where the islands' cost sources give none)
    network: Interconnect | None = None


def group_scenario(sc: Scenario, g: StageGroupSpec, isl_index: int, dp: int) -> Scenario:
    """The one-island scenario of stage group ``g``: its island alone, its layout."""
    isl = attrs.evolve(sc.islands[isl_index], parallelism=None, micro_batch=None, uplink=None)
    par = attrs.evolve(sc.parallelism, tp=g.tp or sc.parallelism.tp, pp=g.stages, dp=dp)
    tr = attrs.evolve(sc.training, micro_batch=g.micro_batch or sc.training.micro_batch)
    return attrs.evolve(
        sc,
        islands=(isl,),
        offers=(),
        parallelism=par,
        training=tr,
        network=None,
        sync=SyncSpec(),
        stage_groups=(),
    )


def pipeline_setup(
    est: Estimator, sc: Scenario, groups: Sequence[StageGroupSpec] | None = None
) -> PipelineSetup:
    """The setup of ``sc``'s stage groups (or ``groups`` in their place, as the planner tries
    them): ``dp`` is ``parallelism.dp``, else the most replicas every island holds; the GPUs
    the groups take on an island must fit it (a one-line error naming the group's ``stages``)."""
    groups = tuple(sc.stage_groups if groups is None else groups)
    whole = est.resolve(attrs.evolve(sc, stage_groups=()))
    by_name = {isl.name: (j, isl) for j, isl in enumerate(whole.islands)}
    use: dict[str, int] = {}
    for g in groups:
        use[g.island] = use.get(g.island, 0) + group_gpus_per_replica(g, sc.parallelism)
    dp = sc.parallelism.dp or max(1, min(by_name[n][1].gpus // u for n, u in use.items()))
    taken: dict[str, int] = {}
    for k, g in enumerate(groups):
        taken[g.island] = taken.get(g.island, 0) + group_gpus_per_replica(g, sc.parallelism) * dp
        have = by_name[g.island][1].gpus
        if taken[g.island] > have:
            raise ScenarioError(
                f"the stage groups on island {g.island!r} take {taken[g.island]} GPUs "
                f"(tp x cp x stages x {dp} replicas); it has {have}",
                path=f"stage_group[{k}].stages",
                file=sc.file,
            )
    table = PartTable()
    setups = []
    for g in groups:
        j, _isl = by_name[g.island]
        res = est.resolve(group_scenario(sc, g, j, dp))
        inp, table = build_inputs(res, table)
        setups.append(GroupSetup(spec=g, island=res.islands[0], inputs=inp, tp=g.tp or sc.parallelism.tp))
    links = tuple(joining_link(whole, a.spec.island, b.spec.island) for a, b in itertools.pairwise(setups))
    return PipelineSetup(
        groups=tuple(setups), table=table, dp=dp, links=links, scenario=sc, network=whole.network
    )


def joining_link(res: Resolved, a: str, b: str) -> tuple[str, float, float] | None:
    """The link joining islands ``a`` and ``b``: the slower of their uplinks (each its own,
    else ``[network] link``) and the longer latency; ``None`` on one island."""
    if a == b:
        return None
    ups = [isl.uplink or res.network for isl in res.islands if isl.name in (a, b)]
    if any(u is None for u in ups):
        raise ScenarioError(
            "stage groups on two islands need the link joining them",
            path="network.link",
            file=res.scenario.file,
        )
    slow = min(ups, key=lambda u: u.bandwidth_gb_s * u.efficiency)  # type: ignore[union-attr]
    assert slow is not None
    lat = max(u.latency_us for u in ups if u is not None)
    return slow.name, slow.bandwidth_gb_s * 1e9 * slow.efficiency, lat * 1e-6


@attrs.frozen(kw_only=True)
class PipelineResult:
    """Every stage's :class:`~shardmeter.model.stage_groups.StageCost` (pipeline order), the
    send seconds per boundary and the step."""

    stages: tuple[StageCost, ...]
    sends: tuple[Any, ...]
    step: PipelineStep


def run_pipeline(setup: PipelineSetup, layers: Sequence[Any] | None = None) -> PipelineResult:
    """Time every stage of ``setup`` (``layers``: each stage's layers in pipeline order, numbers
    or arrays broadcasting over rows; default the groups' own) and compose the step."""
    per_stage: list[tuple[GroupSetup, int]] = [(g, s) for g in setup.groups for s in range(g.spec.stages)]
    counts = list(layers) if layers is not None else [x for g in setup.groups for x in g.spec.layers]
    P = len(per_stage)
    costs = tuple(
        stage_cost(g.inputs, setup.table, np.asarray(n, dtype=float), rank=r, stages=P)
        for r, ((g, _), n) in enumerate(zip(per_stage, counts, strict=True))
    )
    sends = boundary_sends(setup.groups, setup.links, setup.dp, costs[0].activation_bytes)
    step = pipeline_step(
        [c.micro_batch_s for c in costs],
        sends,
        costs[0].micro_batches,
        [c.dp_exposed_s for c in costs],
        [c.optimizer_s for c in costs],
    )
    return PipelineResult(stages=costs, sends=tuple(sends), step=step)


def boundary_sends(
    groups: Sequence[GroupSetup], links: Sequence[tuple[str, float, float] | None], dp: int, act: Any
) -> list[Any]:
    """One send's seconds on each boundary between consecutive stages (``act``: one
    micro-batch's activation bytes): inside a group on the tier holding its ``stages`` ranks,
    between two groups on one island on the tier holding both groups' ranks, between islands
    on the link joining them (:func:`~shardmeter.model.stage_groups.link_send_s`)."""
    sends: list[Any] = []
    for k, g in enumerate(groups):
        inner = inner_send_s(g.inputs, act, ranks=float(g.spec.stages))
        sends.extend([inner] * (g.spec.stages - 1))
        if k + 1 == len(groups):
            break
        nxt, link = groups[k + 1], links[k]
        if link is None:
            sends.append(inner_send_s(nxt.inputs, act, ranks=float(g.spec.stages + nxt.spec.stages)))
        else:
            sends.append(link_send_s(act, float(dp), link[1], link[2]))
    return sends


def _num(x: Any) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def estimate_pipeline(est: Estimator, source: Any, overrides: Any = ()) -> PipelineReport:
    """Predict a ``[[stage_group]]`` scenario (a path, a dict or a loaded scenario)."""
    sc = est.load(source, overrides)
    if not sc.stage_groups:
        raise ScenarioError("the scenario has no [[stage_group]]", path="stage_group", file=sc.file)
    from shardmeter.hetero_report import pipeline_report

    setup = pipeline_setup(est, sc)
    return pipeline_report(setup, run_pipeline(setup))
