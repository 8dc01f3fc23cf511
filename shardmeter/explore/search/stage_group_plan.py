"""``plan`` of a ``[[stage_group]]`` scenario: the order of the stage groups, each group's TP,
the pipeline replicas and micro-batch, and the layers of every stage, searched by decomposition.

The product of every choice is never formed. For each group order, each group's ``tp``, ``dp``
and ``micro_batch`` (each group fills its island: ``stages = GPUs // (tp x cp x dp)``, at most
the layers), the layer split is *chosen*, not enumerated:

1. **Tables** (one model call per island, ``tp``, ``dp``, ``micro_batch`` and stage kind --
   first, middle, last -- over every layer count ``L`` and distance to the pipeline's end
   ``d = p - rank``): ``t(L)``, the stage's forward + backward of one micro-batch, and whether
   ``L`` layers fit with ``min(d, m)`` micro-batches in flight (1F1B), from
   :func:`~shardmeter.model.stage_groups.stage_cost`, the estimate's own stage.
2. **Balance** (the min-max split of Metis's and Sailor's planners, exact on the tables): the
   smallest pace ``T`` such that the stages, each taking the most layers whose ``t(L) <= T``
   and that fit, hold every layer (a search over the tables' values, so per-layer time in
   proportion to each GPU's throughput); then integer rounding down to exactly
   ``model.layers``: a layer at a time off the stage whose removal lowers
   ``sum t_i + (m - 1) max t_i`` most.
3. **Score** the step by :func:`~shardmeter.model.stage_groups.pipeline_step` on the table
   times and the sends of the order (:func:`~shardmeter.hetero.boundary_sends`); the ``top``
   plans are estimated again through :func:`~shardmeter.hetero.run_pipeline` (what ``estimate``
   says of them).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from shardmeter.errors import ScenarioError
from shardmeter.estimator import Estimator
from shardmeter.hetero import (
    GroupSetup,
    boundary_sends,
    group_scenario,
    joining_link,
    pipeline_setup,
    run_pipeline,
)
from shardmeter.hetero_report import pipeline_report
from shardmeter.inputs.build import build_inputs
from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.load.scenario import Scenario
from shardmeter.load.specs import StageGroupSpec
from shardmeter.model.stage_groups import StageCost, pipeline_step, stage_cost

__all__ = ["search_stage_groups", "balance_layers", "per_island_best", "MICRO_BATCHES", "SHARDINGS"]

#: Micro-batch sizes tried (those that divide the global batch with ``dp``).
MICRO_BATCHES = (1, 2, 4, 8)
#: Sharding strategies tried besides the scenario's own: none, and ZeRO-1 (Megatron-LM's
#: distributed optimizer, the usual partner of pipeline parallelism).
SHARDINGS = ("none", "zero1")


@attrs.frozen(kw_only=True)
class _Table:
    """One stage kind on one group's GPUs: ``t_s[L - 1]``, ``fits[L - 1, d - 1]`` and the
    per-layer-count exposed reduction and optimizer seconds; ``act`` one activation's bytes."""

    t_s: np.ndarray
    fits: np.ndarray
    dp_s: np.ndarray
    opt_s: np.ndarray
    act: float
    micro_batches: float


class _Tables:
    """Tables built on first use, keyed by (group, tp, dp, micro-batch, kind)."""

    def __init__(self, est: Estimator, sc: Scenario, d_max: int):
        self.est, self.sc, self.d_max = est, sc, d_max
        self.layers = sc.model.layers
        self.table = PartTable()
        self._setups: dict[tuple[int, int, int, int, str], GroupSetup] = {}
        self._tables: dict[tuple[int, int, int, int, str, str], _Table] = {}
        self._whole = est.resolve(attrs.evolve(sc, stage_groups=()))
        self._links: dict[tuple[str, str], tuple[str, float, float] | None] = {}

    def link(self, a: str, b: str) -> tuple[str, float, float] | None:
        """The link joining islands ``a`` and ``b`` (:func:`~shardmeter.hetero.joining_link`)."""
        if (a, b) not in self._links:
            self._links[(a, b)] = joining_link(self._whole, a, b)
        return self._links[(a, b)]

    def scenario(self, sharding: str) -> Scenario:
        """The scenario with ``sharding`` (its options only where it is the scenario's own)."""
        par = self.sc.parallelism
        if sharding == par.sharding:
            return self.sc
        return attrs.evolve(self.sc, parallelism=attrs.evolve(par, sharding=sharding, options={}))

    def inputs(self, g: int, tp: int, dp: int, mb: int, sharding: str) -> ModelInputs:
        """The model inputs of group ``g`` with that layout (one stage; the tables pass ranks)."""
        return self.setup(g, tp, dp, mb, sharding).inputs

    def setup(self, g: int, tp: int, dp: int, mb: int, sharding: str) -> GroupSetup:
        """Group ``g`` with that layout, resolved and built once."""
        key = (g, tp, dp, mb, sharding)
        if key not in self._setups:
            spec = self.sc.stage_groups[g]
            one = attrs.evolve(spec, tp=tp, micro_batch=mb, stages=1, layers=(1,))
            j = [isl.name for isl in self.sc.islands].index(spec.island)
            sc = attrs.evolve(self.scenario(sharding), stage_groups=())
            res = self.est.resolve(group_scenario(sc, one, j, dp))
            inp, self.table = build_inputs(res, self.table)
            self._setups[key] = GroupSetup(spec=one, island=res.islands[0], inputs=inp, tp=tp)
        return self._setups[key]

    def get(self, g: int, tp: int, dp: int, mb: int, sharding: str, kind: str) -> _Table:
        key = (g, tp, dp, mb, sharding, kind)
        if key not in self._tables:
            inp = self.inputs(g, tp, dp, mb, sharding)
            L, D = self.layers, self.d_max
            ls = np.repeat(np.arange(1, L + 1, dtype=float), D).reshape(-1, 1)
            ds = np.tile(np.arange(1, D + 1, dtype=float), L).reshape(-1, 1)
            P = D + 1  # any pipeline of more than one stage: rank P - d is d from the end
            rank = {"first": 0, "middle": 1, "last": P - 1}[kind]
            c: StageCost = stage_cost(inp, self.table, ls, rank=rank, stages=P, distance=ds)
            shape = (L, D)
            t = np.broadcast_to(c.micro_batch_s, ls.shape).reshape(shape)[:, 0]
            ok = (np.broadcast_to(c.reasons, ls.shape) == 0).reshape(shape)
            self._tables[key] = _Table(
                t_s=t,
                fits=ok,
                dp_s=np.broadcast_to(c.dp_exposed_s, ls.shape).reshape(shape)[:, 0],
                opt_s=np.broadcast_to(c.optimizer_s, ls.shape).reshape(shape)[:, 0],
                act=float(np.asarray(c.activation_bytes).reshape(-1)[0]),
                micro_batches=float(np.asarray(c.micro_batches).reshape(-1)[0]),
            )
        return self._tables[key]


def balance_layers(tables: Sequence[Any], d: Sequence[int], layers: int, m: float) -> list[int] | None:
    """Each stage's layers (``tables[r]``: its :class:`_Table`, ``d[r]``: its distance to the
    end) minimising ``sum t_i + (m - 1) max t_i`` by the module's steps 2 and 3; ``None`` when
    no split fits."""
    max_fit = []
    for tb, dr in zip(tables, d, strict=True):
        ok = np.flatnonzero(tb.fits[:, dr - 1])
        # memory grows with the layers, so the fitting counts are 1..k
        max_fit.append(int(ok[-1]) + 1 if ok.size and ok[0] == 0 else 0)
    if min(max_fit) < 1 or sum(max_fit) < layers:
        return None
    paces = np.unique(np.concatenate([tb.t_s[:k] for tb, k in zip(tables, max_fit, strict=True)]))
    caps = np.stack(
        [
            np.minimum(np.searchsorted(tb.t_s, paces, side="right"), k)
            for tb, k in zip(tables, max_fit, strict=True)
        ]
    )
    good = (caps.sum(axis=0) >= layers) & (caps.min(axis=0) >= 1)
    split = [int(x) for x in caps[:, int(np.argmax(good))]]
    while sum(split) > layers:
        best, best_obj = -1, np.inf
        for r in range(len(split)):
            if split[r] <= 1:
                continue
            trial = split.copy()
            trial[r] -= 1
            ts = [tb.t_s[n - 1] for tb, n in zip(tables, trial, strict=True)]
            obj = sum(ts) + (m - 1.0) * max(ts)
            if obj < best_obj:
                best, best_obj = r, obj
        split[best] -= 1
    return split


def _tp_choices(sc: Scenario, gpus_per_node: int) -> list[int]:
    """Powers of two up to the node that divide the heads (and the key/value heads)."""
    kv = sc.model.kv_heads or sc.model.heads
    return [t for t in (1, 2, 4, 8, 16, 32) if t <= gpus_per_node and sc.model.heads % t == 0 and kv % t == 0]


def search_stage_groups(est: Estimator, sc: Scenario, *, top: int = 10) -> dict[str, Any]:
    """The ``top`` fastest heterogeneous pipelines of ``sc``'s stage groups' islands (see the
    module docstring): a dict with ``plans`` (each with its
    :class:`~shardmeter.report.stage_groups.PipelineReport` as a dict), ``candidates`` and
    ``feasible``."""
    if not sc.stage_groups:
        raise ScenarioError("plan of stage groups: the scenario has no [[stage_group]]", path="stage_group")
    base = pipeline_setup(est, sc)  # checks the scenario's own layout and resolves the islands
    isl = {g.spec.island: g.island for g in base.groups}
    par, tr = sc.parallelism, sc.training
    G = len(sc.stage_groups)
    gpus = {n: i.gpus for n, i in isl.items()}
    shared = len(set(isl)) < G
    d_max = min(sc.model.layers, sum(gpus.values()))
    tables = _Tables(est, sc, d_max)
    tps = {n: _tp_choices(sc, i.gpus_per_node) for n, i in isl.items()}
    shardings = list(dict.fromkeys((par.sharding, *SHARDINGS)))
    dps = [d for d in range(1, min(gpus.values()) + 1) if tr.global_batch % d == 0]
    scored: list[tuple[float, tuple[StageGroupSpec, ...], int, str]] = []
    candidates = 0
    for order in itertools.permutations(range(G)):
        for tp_pick in itertools.product(*[tps[sc.stage_groups[g].island] for g in order]):
            for dp in dps:
                stages = [
                    gpus[sc.stage_groups[g].island] // (t * par.cp * dp)
                    for g, t in zip(order, tp_pick, strict=True)
                ]
                if shared:  # groups sharing an island split it evenly
                    stages = [
                        s // sum(1 for h in sc.stage_groups if h.island == sc.stage_groups[g].island)
                        for g, s in zip(order, stages, strict=True)
                    ]
                if min(stages) < 1 or sum(stages) < 2 or sum(stages) > sc.model.layers:
                    continue
                for mb, sharding in itertools.product(MICRO_BATCHES, shardings):
                    if tr.global_batch % (dp * mb):
                        continue
                    candidates += 1
                    got = _score(tables, sc, order, tp_pick, stages, dp, mb, sharding)
                    if got is not None:
                        scored.append((got[0], got[1], dp, sharding))
    scored.sort(key=lambda x: x[0])
    plans = []
    for step_est, groups, dp, sharding in scored[:top]:
        own = tables.scenario(sharding)
        plan_sc = attrs.evolve(
            own, stage_groups=groups, parallelism=attrs.evolve(own.parallelism, dp=dp, pp=1)
        )
        setup = pipeline_setup(est, plan_sc)
        rep = pipeline_report(setup, run_pipeline(setup))
        plans.append(
            {
                "step_time_s_searched": step_est,
                "report": rep.to_dict(),
                "groups": groups,
                "dp": dp,
                "sharding": sharding,
            }
        )
    return {"plans": plans, "candidates": candidates, "feasible": len(scored)}


def _score(
    tables: _Tables,
    sc: Scenario,
    order: Sequence[int],
    tp_pick: Sequence[int],
    stages: Sequence[int],
    dp: int,
    mb: int,
    sharding: str,
) -> tuple[float, tuple[StageGroupSpec, ...]] | None:
    """One candidate's balanced split and step (None: no split fits)."""
    P = sum(stages)
    kinds: list[tuple[int, int, str]] = []
    r = 0
    for k, (g, s) in enumerate(zip(order, stages, strict=True)):
        for _ in range(s):
            kind = "first" if r == 0 else "last" if r == P - 1 else "middle"
            kinds.append((k, g, kind))
            r += 1
    tabs = [tables.get(g, tp_pick[k], dp, mb, sharding, kind) for k, g, kind in kinds]
    m = tabs[0].micro_batches
    split = balance_layers(tabs, [P - r for r in range(P)], sc.model.layers, m)
    if split is None:
        return None
    groups: list[StageGroupSpec] = []
    setups: list[GroupSetup] = []
    r = 0
    for k, (g, s) in enumerate(zip(order, stages, strict=True)):
        spec = attrs.evolve(
            sc.stage_groups[g], tp=tp_pick[k], stages=s, layers=tuple(split[r : r + s]), micro_batch=mb
        )
        r += s
        groups.append(spec)
        setups.append(attrs.evolve(tables.setup(g, tp_pick[k], dp, mb, sharding), spec=spec))
    links = [tables.link(a.island, b.island) for a, b in itertools.pairwise(groups)]
    sends = boundary_sends(setups, links, dp, tabs[0].act)
    idx = [n - 1 for n in split]
    step = pipeline_step(
        [tb.t_s[i] for tb, i in zip(tabs, idx, strict=True)],
        [float(np.asarray(x).reshape(-1)[0]) for x in sends],
        m,
        [tb.dp_s[i] for tb, i in zip(tabs, idx, strict=True)],
        [tb.opt_s[i] for tb, i in zip(tabs, idx, strict=True)],
    )
    return float(step.step_s), tuple(groups)


def per_island_best(est: Estimator, sc: Scenario) -> dict[str, Any] | None:
    """The fastest plan the per-island planner finds on the same islands without the stage
    groups (``plan --layouts per-island``, each island its own layout and batch share), with the
    islands kept in step by a synchronous all-reduce: the same optimizer step as one pipeline's
    (DiLoCo's local steps change what a step trains, so a time per step would not compare).
    ``None`` when no per-island plan fits."""
    from shardmeter.explore.search.plan import search

    only: dict[str, Any] = {"strategy": ["allreduce"]} if len(sc.islands) > 1 else {}
    doc = search(attrs.evolve(sc, stage_groups=()), estimator=est, objective="time", top=1, only=only)
    if not doc["plans"]:
        return None
    best = doc["plans"][0]
    return {
        "step_time_s": best["report"]["step_time_s"],
        "tokens_per_s": best["report"]["tokens_per_s"],
        "islands": [
            {
                **{k: isl.get(k) for k in ("name", "nodes", "gpus", "batch_share", "micro_batch")},
                "parallelism": isl.get("parallelism", best.get("parallelism")),
            }
            for isl in best["islands"]
        ],
        "evaluated": doc["evaluated"],
    }
