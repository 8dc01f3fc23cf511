"""Step 3 of the per-island search (:mod:`.island_search`): for every *class* (node count per
island, micro-batch common to the islands or free, recompute, sync option) the shares split by
an exact min-max (:func:`~shardmeter.model.islands.fold_min_max`), each class's optimum a
:class:`ClassPlan` (:func:`combine`), and the plans to report chosen among them
(:func:`select`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from shardmeter.explore.search.axes import Axis
from shardmeter.explore.search.expected import class_factor
from shardmeter.explore.search.island_candidates import Candidates
from shardmeter.explore.search.island_context import FREE_MBS, IslandContext, class_key
from shardmeter.explore.search.island_curves import (
    Curves,
    Lines,
    Net,
    finish_curves,
    island_lines,
    plans_at,
    share_counts,
)
from shardmeter.explore.search.island_stack import run_chunks
from shardmeter.explore.search.space import Space
from shardmeter.explore.search.to_quality import quality_factor
from shardmeter.model.islands import fold_min_max, ring_pace, unfold_min_max
from shardmeter.report.pricing import egress_usd, egress_usd_per_gb, gpu_hour_usd, gpu_time_usd
from shardmeter.resolve.resolver import Resolved

__all__ = ["IslandPick", "ClassPlan", "combine", "select"]


@attrs.frozen
class IslandPick:
    """One island of a class's plan: its prefix (layout and structural options), micro-batch,
    inner option, micro-batches per replica, batch share, step and egress bytes per step."""

    prefix: int
    micro_batch: int
    inner: int
    micro_batches: int
    share: int
    step_s: float
    egress_bytes: float


@attrs.frozen
class ClassPlan:
    """A class's optimum: the finish time of a step, its dollar cost, the objective's tokens
    factor, the sync option and recompute codes, and each island used's pick and node count."""

    step_s: float
    cost_step_usd: float
    factor: float
    sync: int
    recompute: int
    islands: dict[int, IslandPick]
    nodes: dict[int, int]


#: A class's key in the folds' cache: (sync option, islands used, ring pace, (island, class key) ...).
FoldKey = tuple[int, int, Net | None, tuple[tuple[int, int], ...]]
#: An island's curves' key: (representative island, sync group, sync code or -1, islands used,
#: ring pace).
CurveKey = tuple[int, int, int, int, Net]


@attrs.define
class _Book:
    """The lines, curves and share counts of each (representative island, sync group[, sync
    code, islands used, ring pace]), computed once and read by every class that shares them."""

    ctx: IslandContext
    cand: Candidates
    space: Space
    sync_codes: list[int]
    sync_group: list[int]
    up: np.ndarray
    lat: np.ndarray
    lines: dict[tuple[int, int], Lines | None] = attrs.Factory(dict)
    curves: dict[CurveKey, Curves] = attrs.Factory(dict)
    counts: dict[tuple[int, int], dict[int, np.ndarray]] = attrs.Factory(dict)

    def net(self, used: list[int]) -> Net:
        return ring_pace(self.up[used], self.lat[used]) if len(used) > 1 else (1.0, 0.0)

    def key(self, j: int, o: int, used: list[int], net: Net) -> CurveKey:
        n_used = len(used)
        return (self.ctx.rep[j], self.sync_group[o], self.sync_codes[o] if n_used > 1 else -1, n_used, net)

    def prepare(self, choices: list[list[int]]) -> None:
        """Every class's curves, computed before the combination reads them: each is its own
        numpy work on the class's lines, so they run side by side (:func:`.island_stack.run_chunks`)."""
        jobs: dict[CurveKey, tuple[int, int, int, Net]] = {}
        for o in range(len(self.sync_codes)):
            for combo in itertools.product(*choices):
                used = [j for j in range(len(combo)) if combo[j] >= 0]
                net = self.net(used)
                for j in used:
                    jobs.setdefault(self.key(j, o, used, net), (self.ctx.rep[j], o, len(used), net))
        for rj, grp in dict.fromkeys((rj, self.sync_group[o]) for rj, o, _, _ in jobs.values()):
            self.lines[(rj, grp)] = island_lines(self.ctx, self.cand, rj, grp)
        todo = list(jobs.items())

        def one(i: int) -> None:
            key, (rj, o, n_used, net) = todo[i]
            lines = self.lines[(rj, self.sync_group[o])]
            self.curves[key] = finish_curves(
                self.ctx, lines, self.space.table, self.sync_codes[o], n_used, net
            )

        run_chunks(one, range(len(todo)))

    def curves_of(self, j: int, o: int, used: list[int]) -> Curves:
        key = self.key(j, o, used, self.net(used))
        if key not in self.curves:
            lk = (self.ctx.rep[j], self.sync_group[o])
            if lk not in self.lines:
                self.lines[lk] = island_lines(self.ctx, self.cand, *lk)
            self.curves[key] = finish_curves(
                self.ctx, self.lines[lk], self.space.table, self.sync_codes[o], len(used), key[-1]
            )
        return self.curves[key]

    def counts_of(self, j: int, o: int, k: int) -> np.ndarray:
        lk = (self.ctx.rep[j], self.sync_group[o])
        if lk not in self.counts:
            lines = self.lines[lk]
            assert lines is not None  # a class is counted only where its curves exist
            self.counts[lk] = share_counts(self.ctx, lines)
        return self.counts[lk][k]


@attrs.define
class _Combination:
    """What every class of :func:`combine` reads: the book, each island's positive node counts
    (``pos``), price per GPU-hour, egress price and GPUs per node, the micro-batch and recompute
    classes, the objective, and the folds and tokens factors found so far."""

    book: _Book
    pos: list[list[int]]
    price: np.ndarray
    e_price: np.ndarray
    gpn: np.ndarray
    mbs: np.ndarray
    mbs_classes: list[int]
    rec_n: int
    obj: dict[str, Any]
    folds: dict[FoldKey, tuple[np.ndarray, list[np.ndarray]]] = attrs.Factory(dict)
    factors: dict[tuple[int, int], float] = attrs.Factory(dict)

    def factor(self, o: int, n_used: int, params: float) -> float:
        """The class's tokens factor (1 unless the objective prices quality; :mod:`.to_quality`)."""
        if self.obj.get("quality") is None:
            return 1.0
        if (o, n_used) not in self.factors:
            table, codes = self.book.space.table, self.book.sync_codes
            f = quality_factor(self.obj["quality"], table, codes[o], params, n_used)
            self.factors[(o, n_used)] = float(np.asarray(f).reshape(-1)[0])
        return self.factors[(o, n_used)]


def combine(
    resolved: Resolved,
    space: Space,
    ctx: IslandContext,
    cand: Candidates,
    node_opts: list[list[int]],
    sync_full: Axis,
    sync_group: list[int],
    obj: dict[str, Any],
) -> tuple[list[ClassPlan], float]:
    """Every class's exact min-max split (module docstring) -> its plan, and how many whole
    plans (a feasible line per island used, shares summing to the global batch) the classes
    hold: what a search scoring every combination would score."""
    n = space.n_islands
    islands = resolved.islands
    # each island's own uplink; a ring over the islands used runs at their slowest (ring_pace)
    up = np.broadcast_to(np.asarray(space.base["network.wan_bytes_s"], dtype=float), (1, n))[0]
    lat = np.broadcast_to(np.asarray(space.base["network.wan_latency_s"], dtype=float), (1, n))[0]
    book = _Book(ctx, cand, space, _sync_codes(space, sync_full), sync_group, up, lat)
    pos = [[v for v in o if v > 0] for o in node_opts]
    mbs_n = _axis_len(space, "micro_batch")
    cx = _Combination(
        book=book,
        pos=pos,
        price=np.array([gpu_hour_usd(isl) for isl in islands], dtype=float),
        e_price=np.array([egress_usd_per_gb(isl, resolved.network) for isl in islands], dtype=float),
        gpn=np.array([isl.gpus_per_node for isl in islands], dtype=float),
        mbs=ctx.g("training.micro_batch"),  # (prefixes, islands): each island's own micro-batch
        # every micro-batch common to the islands (the alternatives top-K lists), then each island
        # its own best (the exact optimum; it alone counts the plans, which it all covers)
        mbs_classes=[*range(mbs_n), FREE_MBS] if mbs_n > 1 else [0],
        rec_n=_axis_len(space, "recompute"),
        obj=obj,
    )
    choices = [[-1 if v == 0 else pos[j].index(v) for v in node_opts[j]] for j in range(n)]
    book.prepare(choices)
    out: list[ClassPlan] = []
    represented = 0.0
    for o in range(len(sync_full)):
        for combo in itertools.product(*choices):
            if any(c >= 0 for c in combo):
                represented = _combo_plans(cx, o, combo, out, represented)
    return out, represented


def _sync_codes(space: Space, sync_full: Axis) -> list[int]:
    """Each sync option's part code."""
    return [
        int(np.asarray(sync_full.cols["network.sync"][i]).ravel()[0])
        if "network.sync" in sync_full.cols
        else int(np.asarray(space.base["network.sync"]).ravel()[0])
        for i in range(len(sync_full))
    ]


def _axis_len(space: Space, name: str) -> int:
    """The options of axis ``name`` (1 where the space has no such axis)."""
    return next((len(a) for a in space.axes if a.name == name), 1)


def _combo_plans(
    cx: _Combination, o: int, combo: Sequence[int], out: list[ClassPlan], represented: float
) -> float:
    """The plans of node combination ``combo`` at sync option ``o``, one per micro-batch and
    recompute class, appended to ``out``; ``represented`` plus the whole plans those classes
    hold (added one class at a time, in the order of the classes)."""
    book = cx.book
    used = [j for j in range(len(combo)) if combo[j] >= 0]
    n_used = len(used)
    per = [book.curves_of(j, o, used) for j in used]
    pace = ring_pace(book.up[used], book.lat[used]) if n_used > 1 else None
    if any(c[1] is None for c in per):
        return represented
    for mc in cx.mbs_classes:
        for rc in range(cx.rec_n):
            ck = [class_key(combo[j], mc, rc) for j in used]
            if any(k not in c[0] for k, c in zip(ck, per, strict=True)):
                continue
            cs = [c[0][k][0] for k, c in zip(ck, per, strict=True)]
            # the fold of all islands but the last (one island: that island's curve)
            head = n_used - 1 if n_used > 1 else 1
            fk = (o, n_used, pace, tuple(zip(used[:head], ck[:head], strict=True)))
            if fk not in cx.folds:
                h, args = cs[0], []
                for cur in cs[1:-1]:
                    h, arg = fold_min_max(h, cur, book.ctx.gb)
                    args.append(arg)
                cx.folds[fk] = (h, args)
            h, args = cx.folds[fk]
            fin, shares = unfold_min_max(h, args, cs[-1] if n_used > 1 else None, book.ctx.gb)
            if mc == cx.mbs_classes[-1]:
                counts = [book.counts_of(j, o, k) for j, k in zip(used, ck, strict=True)]
                represented += plans_at(book.ctx.gb, counts)
            if shares is not None:
                out.append(_class_plan(cx, o, rc, combo, used, ck, per, fin, shares))
    return represented


def _class_plan(
    cx: _Combination,
    o: int,
    rc: int,
    combo: Sequence[int],
    used: list[int],
    ck: list[int],
    per: list[Curves],
    fin: float,
    shares: list[int],
) -> ClassPlan:
    """The plan of one class: each island's pick at its share, and the class's cost."""
    picks = [_pick(cx, j, c, k, b) for j, k, c, b in zip(used, ck, per, shares, strict=True)]
    billed = np.array([cx.pos[j][combo[j]] * cx.gpn[j] for j in used])
    gpu = float(np.sum(gpu_time_usd(billed, cx.price[used], fin)))
    n_used = len(used)
    egress = float(egress_usd(picks[0].egress_bytes, float(np.sum(cx.e_price[used])))) if n_used > 1 else 0.0
    p0 = per[0][1]
    assert p0 is not None
    first = p0.line_L[p0.rows[int(per[0][0][ck[0]][1][shares[0]])]]  # the model's parameters
    assert cx.book.cand.params is not None
    params = float(cx.book.cand.params[first, 0, 0])
    return ClassPlan(
        step_s=fin,
        cost_step_usd=gpu + egress,
        factor=cx.factor(o, n_used, params),
        sync=o,
        recompute=rc,
        islands=dict(zip(used, picks, strict=True)),
        nodes={j: cx.pos[j][combo[j]] for j in used},
    )


def _pick(cx: _Combination, j: int, c: Curves, k: int, b: int) -> IslandPick:
    """Island ``j``'s pair at share ``b`` of class key ``k`` on its curves ``c``."""
    idx = int(c[0][k][1][b])
    pr = c[1]
    assert pr is not None and pr.egress_bytes is not None
    pl, pr_inner = pr.line_L[pr.rows[idx]], pr.line_R[pr.rows[idx]]
    cand = cx.book.cand
    p = int(cand.prefix[pl])
    return IslandPick(
        prefix=p,
        micro_batch=int(cx.mbs[p, j]),
        inner=int(pr_inner),
        micro_batches=int(pr.k[idx] * cand.d[pl, j]),
        share=int(b),
        step_s=float(pr.step_s[idx]),
        egress_bytes=float(pr.egress_bytes[idx]),
    )


def select(cands: list[ClassPlan], obj: dict[str, Any]) -> tuple[list[ClassPlan], dict[str, int]]:
    """The plans to report from the classes' optima: deadline and budget applied, plans of equal
    time and cost collapsed into one, then the top-K by time or cost, or the Pareto front."""
    steps = obj.get("steps") or 1.0
    counts = {"over_deadline": 0, "over_budget": 0, "equivalent": 0}
    keep = []
    for c in cands:
        if obj.get("deadline_s") is not None and c.step_s * steps > obj["deadline_s"]:
            counts["over_deadline"] += 1
            continue
        if obj.get("budget_usd") is not None and c.cost_step_usd * steps > obj["budget_usd"]:
            counts["over_budget"] += 1
            continue
        keep.append(c)
    time_of, cost_of = _measures(obj)
    kind = obj["kind"]
    rank: Callable[[ClassPlan], tuple[float, float]] = (
        (lambda c: (time_of(c), cost_of(c))) if kind != "cost" else (lambda c: (cost_of(c), time_of(c)))
    )
    keep.sort(key=rank)
    out: list[ClassPlan] = []
    for c in keep:
        if out and all(
            math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0) for a, b in zip(rank(c), rank(out[-1]), strict=True)
        ):
            counts["equivalent"] += 1
            continue
        out.append(c)
    if kind == "pareto":
        front, best = [], math.inf
        for c in sorted(out, key=lambda c: (c.step_s, cost_of(c))):
            if cost_of(c) < best:
                front.append(c)
                best = cost_of(c)
        return front, counts
    return out[: obj["k"]], counts


def _measures(obj: dict[str, Any]) -> tuple[Callable[[ClassPlan], float], Callable[[ClassPlan], float]]:
    """A plan's time and cost as the objective ranks them: to quality, both scaled by the
    tokens factor (not on a Pareto front); cost 0 where nothing is priced."""

    def raw_cost(c: ClassPlan) -> float:
        return c.cost_step_usd if obj.get("price") is not None else 0.0

    if obj.get("quality") is not None and obj["kind"] != "pareto":
        return (lambda c: c.step_s * c.factor), (lambda c: raw_cost(c) * c.factor)
    ctx = obj.get("expected")
    if ctx is not None:  # failures and preemption: the goodput of the class's nodes
        gpn = obj["gpn"]

        def expected(c: ClassPlan) -> float:
            gpus = [float(c.nodes.get(j, 0) * gpn[j]) for j in range(len(gpn))]
            return class_factor(ctx, gpus)

        return (lambda c: c.step_s * expected(c)), (lambda c: raw_cost(c) * expected(c))
    return (lambda c: c.step_s), raw_cost
