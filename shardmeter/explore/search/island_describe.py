"""A per-island plan (:class:`~.island_combine.ClassPlan`) described: the scenario ``estimate``
takes for it (its islands kept, each with its nodes, its own ``parallelism`` table and, where
the islands' differ, its own ``micro_batch``; ``batch_split = "balanced"``), as the plan's base
scenario and the overrides the load stage applies to it
(:func:`~shardmeter.load.variants.with_overrides`), and the plan's readable dict."""

from __future__ import annotations

from typing import Any

import attrs

from shardmeter.explore.search.axes import Axis
from shardmeter.explore.search.island_combine import ClassPlan, IslandPick
from shardmeter.explore.search.island_context import IslandContext, codes_of
from shardmeter.explore.search.space import Space
from shardmeter.load.specs import Scenario
from shardmeter.load.variants import Override, variant_tables

__all__ = ["PlanVariant", "DescribeContext", "describe"]


@attrs.frozen
class DescribeContext:
    """What describing a plan reads of its search: the space, the scoring context and the full
    sync axis (every option, not one per strategy)."""

    space: Space
    ctx: IslandContext
    sync_full: Axis


@attrs.frozen
class PlanVariant:
    """A plan's scenario: ``base`` (the plan's start with its islands kept, each on its nodes)
    with ``overrides`` (by the load stage's rules, every other value pinned), and the plan's
    readable dict (its ``scenario``: the tables that loads from)."""

    base: Scenario
    overrides: list[Override]
    plan: dict[str, Any]


def describe(start: Scenario, sc: Scenario, c: ClassPlan, dc: DescribeContext) -> PlanVariant:
    """Plan ``c`` of scenario ``sc`` (``start``: :func:`~.space.plan_base` of it)."""
    axes = {a.name: a for a in dc.space.axes}
    kept = sorted(c.islands)
    base = attrs.evolve(start, islands=tuple(attrs.evolve(start.islands[j], nodes=c.nodes[j]) for j in kept))
    pars = [_parallelism(sc, dc, j, c.islands[j], axes) for j in kept]
    mbs = [c.islands[j].micro_batch for j in kept]
    ov: list[Override] = []
    for k, par in enumerate(pars):
        ov.append((f"island[{k}].parallelism", dict(par)))
        if len(set(mbs)) > 1:  # several micro-batches: each island its own
            ov.append((f"island[{k}].micro_batch", mbs[k]))
    if len(set(mbs)) == 1:  # one micro-batch: the scenario's own key, as without per-island ones
        ov.append(("training.micro_batch", mbs[0]))
    if "recompute" in axes:
        ov.extend(axes["recompute"].overrides[c.recompute].items())
    sync_ov = dc.sync_full.overrides[c.sync]
    if len(kept) > 1:
        ov.extend([*sync_ov.items(), ("sync.batch_split", "balanced")])
    else:  # one island: no sync, but the report still carries its quality (factor 1)
        conv = start.sync.convergence
        ov.extend([("sync", None), ("network", None)])
        ov.extend([("sync.convergence", conv)] if conv is not None else [])
    data = variant_tables(base, ov, as_written=False)
    common = {
        k: (pars[0][k] if all(q[k] == pars[0][k] for q in pars) else [q[k] for q in pars]) for k in pars[0]
    }
    plan: dict[str, Any] = {
        "parallelism": common,
        # one micro-batch, or one per island kept where they differ (as ``parallelism``'s keys)
        "training": {
            "micro_batch": mbs[0] if len(set(mbs)) == 1 else mbs,
            "recompute": data["training"].get("recompute"),
        },
        "islands": _entries(sc, c, pars),
        "scenario": data,
    }
    if len(kept) > 1:
        plan["sync"] = {k[5:]: v for k, v in sync_ov.items()} | {"batch_split": "balanced"}
    return PlanVariant(base, ov, plan)


def _parallelism(
    sc: Scenario, dc: DescribeContext, j: int, pk: IslandPick, axes: dict[str, Axis]
) -> dict[str, Any]:
    """Island ``j``'s ``parallelism`` table in the plan: its layout, schedule and sharding, and
    a part's searched options beside them."""
    p, r = pk.prefix, pk.inner
    li = int(dc.ctx.li[p])
    lay = dc.space.layout
    ov: dict[str, Any] = {}
    for name in ("schedule", "sharding"):
        if name in axes:
            ov.update(axes[name].overrides[int(codes_of(dc.ctx, name, p, r))])
    par = {
        "tp": int(lay["tp"][li]),
        "pp": int(lay["pp"][li]),
        "dp": int(lay["dp"][li, j]),
        "cp": int(lay["cp"][li]),
        "ep": int(lay["ep"][li]),
        "sequence_parallel": bool(lay["sp"][li]),
        "sharding": ov.get("parallelism.sharding", sc.parallelism.sharding),
        "schedule": ov.get("parallelism.schedule", sc.parallelism.schedule),
        "virtual_stages": int(ov.get("parallelism.virtual_stages", 1)),
    }
    par.update({k[12:]: v for k, v in ov.items() if k[12:] not in par})  # a part's searched options
    return par


def _entries(sc: Scenario, c: ClassPlan, pars: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plan's ``islands``: each island of ``sc``, kept (its nodes, layout and share) or
    dropped."""
    entries: list[dict[str, Any]] = []
    kept = iter(pars)
    for j, isl in enumerate(sc.islands):
        if j not in c.islands:
            entries.append({"name": isl.name, "nodes": 0, "nodes_available": int(isl.nodes), "dropped": True})
            continue
        pk, par = c.islands[j], next(kept)
        entries.append(
            {
                "name": isl.name,
                "nodes": int(c.nodes[j]),
                "nodes_available": int(isl.nodes),
                "dp": par["dp"],
                "gpus": par["dp"] * par["tp"] * par["pp"] * par["cp"],
                "batch_share": pk.share,
                "micro_batch": pk.micro_batch,
                "micro_batches": pk.micro_batches,
                "parallelism": par,
            }
        )
    return entries
