"""Per-island layouts for ``shardmeter plan`` over several islands, searched by decomposition.

Each island gets its own replica shape (``tp``, ``pp``, ``cp``, ``ep``, ``sp``), data-parallel
size (the nodes it uses, ``0`` = dropped), schedule, sharding and micro-batch size
(``[[island]] micro_batch``), and its own share of the global batch; recompute and the sync
strategy are common to all islands (the scenario has no per-island ``recompute``).

1. **Per island** (:mod:`.island_candidates`): every island layout x option is scored by the
   full model in one batch whose rows hold one candidate for *every* island (row ``k`` gives
   island ``j`` its ``k``-th node count), so the cost is that of scoring each island alone. A
   layout's step is affine in its micro-batches per replica ``m`` for the bundled schedules
   (Narayanan et al. 2021: ``m (t_f + t_b) + bubble + dp + optimizer``) and its memory does not
   fall with ``m``: it is evaluated at ``m = d, 2d`` and at the largest ``m`` the batch allows
   (``d`` is 1, or ``pp`` where the schedule needs multiples of ``pp``) in one stacked call
   (:func:`.island_stack.evaluate_stack`: the ``m``-independent terms computed once), the
   largest feasible ``m`` is bracketed by regula falsi on the memory figures, then bisection
   (:func:`.island_candidates.largest_feasible`, whose probes run the model's memory path
   only), and a layout whose third point is off the line is kept only at the points evaluated
   (a bound, never a wrong claim). Islands whose model inputs are all the same
   (:func:`.island_context.island_classes`: same GPU, nodes, links; prices may differ) are
   scored once, their cells packed into the batch's island slots, and share their lines and
   curves. The layout rows and node counts are :mod:`.island_layouts`'.
2. **Curves** (:mod:`.island_curves`): for each island, node count, micro-batch, recompute,
   sync option and number of islands used, the shortest finish time
   (:func:`~shardmeter.model.islands.island_finish`) at every share ``b`` of the global batch;
   and the *free* curve (:data:`.island_context.FREE_MBS`), the shortest of those over the
   island's micro-batches at each share (each island's micro-batch is its own, so its best one
   is taken there, and no product of micro-batches is formed).
3. **Combination** (:mod:`.island_combine`): for every *class* (node count per island,
   micro-batch common to the islands or free, recompute, sync option) the shares are split by
   an exact min-max (:func:`~shardmeter.model.islands.min_max_shares`). The free classes alone
   are exact (and count the plans); the common ones are the alternatives a top-K lists next to
   them. Within a class the cost is ``step x sum of the rented GPUs' prices + egress``,
   increasing in the step, so the class's fastest plan is also its cheapest: the fastest plan,
   the cheapest and the Pareto front over all classes are exact over this space. No product of
   layouts is ever formed; the classes are the product of node counts only.

A chosen plan is described by :mod:`.island_describe` and reported by :mod:`.island_plans`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from shardmeter.errors import ShardMeterError
from shardmeter.estimator import Estimator
from shardmeter.explore.search.axes import plan_axes
from shardmeter.explore.search.island_candidates import IslandScores, island_candidates, primary_counts
from shardmeter.explore.search.island_combine import ClassPlan, combine
from shardmeter.explore.search.island_context import FREE_MBS, IslandContext
from shardmeter.explore.search.island_describe import DescribeContext
from shardmeter.explore.search.island_layouts import MAX_CLASSES, check_classes, island_layout, reduced_sync
from shardmeter.explore.search.knobs import check_only, normalise_only
from shardmeter.explore.search.layouts import check_islands
from shardmeter.explore.search.space import Space, plan_base
from shardmeter.inputs.bundles import PartTable
from shardmeter.load.specs import Scenario

__all__ = ["search_islands", "IslandSearch", "MAX_CLASSES"]


@attrs.frozen
class IslandSearch:
    """What the decomposed search found: the island candidates scored (``evaluated``; feasible
    ``m`` counts in ``feasible``), rejections per primary reason bit, the full-model and
    memory-only rows, the duplicates skipped, the whole plans the classes hold
    (``combined_plans``), every class's optimum (``candidates``), the space's axes, and what
    describing a plan reads (``context``)."""

    evaluated: int
    feasible: int
    reasons: dict[int, int]
    model_rows: int
    memory_rows: int
    duplicates: int
    combined_plans: float
    candidates: list[ClassPlan]
    space: dict[str, int]
    context: DescribeContext


def search_islands(
    sc: Scenario,
    est: Estimator,
    obj: dict[str, Any],
    only: Mapping[str, Any] | None,
    max_gpus: int | None,
    node_options: Sequence[Sequence[int]] | None = None,
) -> IslandSearch:
    """The decomposed search (module docstring): every class's optimum, each with its islands'
    picks (layout, micro-batch, share) and its predicted step and cost. ``node_options``: each
    island's node counts to try (default: 0, powers of two and all)."""
    check_islands(len(sc.islands))
    only = normalise_only(only)
    check_only(only, sc, est.registry)
    start = plan_base(sc)
    resolved = est.resolve(start)
    islands = resolved.islands
    n = len(islands)
    table = PartTable()
    base = est.inputs(resolved, table)[0].columns()
    layout, node_opts = island_layout(sc, islands, only, max_gpus, node_options)
    axes = plan_axes(est, start, sc, only, base, table, n)
    sync_full = next(a for a in axes if a.name == "sync")
    sync_red, sync_group = reduced_sync(sync_full)
    axes = [sync_red if a.name == "sync" else a for a in axes]
    n_mbs = next((len(a) for a in axes if a.name == "micro_batch"), 1)
    if n_mbs >= FREE_MBS:
        raise ShardMeterError(f"plan: at most {FREE_MBS - 1} micro-batch sizes per island (--only mbs=...)")
    check_classes(
        node_opts,
        [n_mbs + (n_mbs > 1), *(len(a) for a in axes if a.name == "recompute")],
        len(sync_full),
    )
    space = Space(base, layout, axes, n, obj, [int(i.nodes) for i in islands], table)
    ctx = IslandContext(space, int(sc.training.global_batch))
    scores = island_candidates(ctx)
    cand = scores.live
    plans, represented = (
        combine(resolved, space, ctx, cand, node_opts, sync_full, sync_group, obj)
        if cand.scored
        else ([], 0.0)
    )
    evaluated, feasible, reasons = _tally(ctx, scores)
    return IslandSearch(
        evaluated=evaluated,
        feasible=feasible,
        reasons=reasons,
        model_rows=scores.model_rows,
        memory_rows=scores.memory_rows,
        duplicates=scores.duplicates,
        combined_plans=represented,
        candidates=plans,
        space={a.name: len(a) for a in space.axes} | {"layouts": space.n_layouts, "sync": len(sync_full)},
        context=DescribeContext(space, ctx, sync_full),
    )


def _tally(ctx: IslandContext, scores: IslandScores) -> tuple[int, int, dict[int, int]]:
    """Island candidates scored, feasible ``m`` counts, and rejections per primary reason:
    per-island structural rejections (whole shares) and model rejections at ``m = d``."""
    R = ctx.space.R_in
    K_all = np.maximum(ctx.gb // np.maximum(ctx.q, 1), 1)
    reasons = primary_counts(scores.reasons, K_all * R)
    evaluated = int(np.sum(K_all)) * R
    cand = scores.live
    feasible = 0
    if cand.scored:
        assert cand.reasons is not None and cand.k_mem is not None
        w = np.broadcast_to(cand.k_max[:, None, :], cand.reasons.shape)
        for b, c in primary_counts(cand.reasons, w).items():
            reasons[b] = reasons.get(b, 0) + c
        feasible = int(np.sum(cand.k_mem))
    return evaluated, feasible, reasons
