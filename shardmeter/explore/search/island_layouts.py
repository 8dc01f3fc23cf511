"""The candidate layouts of the per-island search (:mod:`.island_search`): each island's node
counts, the layout rows (replica shape x node index, every island taking its own ``dp`` on the
nodes it uses), the sync axis reduced to one option per strategy, and the refusal of more
classes than :data:`MAX_CLASSES` before any scoring."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from shardmeter.errors import ShardMeterError
from shardmeter.explore.search.axes import Axis
from shardmeter.explore.search.knobs import Only, pick
from shardmeter.explore.search.layouts import _replica_shapes
from shardmeter.load.specs import Scenario
from shardmeter.resolve.resolver import ResolvedIsland

__all__ = ["MAX_CLASSES", "node_options", "island_layout", "check_classes", "reduced_sync"]

#: Most classes (node count per island x micro-batch x recompute x sync option) combined.
MAX_CLASSES = 2_000_000


def node_options(sc: Scenario, only: Only, given: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
    """Each island's node counts tried: 0 (dropped), powers of two and all of its nodes, or
    ``given[j]`` (an ``[[offer]]`` scenario: :func:`shardmeter.load.offers.offer_islands`); an
    ``--only island[i].nodes`` keeps its values (and then no 0)."""
    opts = []
    for j, isl in enumerate(sc.islands):
        key = f"island[{j}].nodes"
        default = [0, *sorted({2**k for k in range(int(math.log2(isl.nodes)) + 1)} | {int(isl.nodes)})]
        if given is not None:
            default = [int(v) for v in given[j]]
        opts.append([int(v) for v in pick(only, key, default, int(isl.nodes))])
    return opts


def island_layout(
    sc: Scenario,
    islands: Sequence[ResolvedIsland],
    only: Only,
    max_gpus: int | None,
    given: Sequence[Sequence[int]] | None = None,
) -> tuple[dict[str, np.ndarray], list[list[int]]]:
    """Rows = replica shape x node index ``k``; island ``j`` uses its ``k``-th positive node count
    (the last one past its list). ``_valid`` (rows, I): the island holds at least one replica;
    ``_k``: the row's node index. Also each island's node counts (:func:`node_options`)."""
    gpn = np.array([isl.gpus_per_node for isl in islands], dtype=np.int64)
    opts = node_options(sc, only, given)
    pos = [[n for n in o if n > 0] or [0] for o in opts]
    g_max = int(max(n * g for o, g in zip(pos, gpn, strict=True) for n in o))
    if max_gpus is not None:
        g_max = min(g_max, int(max_gpus))
    shapes = _replica_shapes(sc, only, max(g_max, 1))
    rep = shapes["tp"] * shapes["pp"] * shapes["cp"]
    K = max(len(p) for p in pos)
    nodes_k = np.array([[p[min(k, len(p) - 1)] for p in pos] for k in range(K)], dtype=np.int64)  # (K, I)
    si, ki = (a.ravel() for a in np.meshgrid(np.arange(len(rep)), np.arange(K), indexing="ij"))
    nodes = nodes_k[ki]
    dp = (nodes * gpn[None, :]) // rep[si][:, None]
    valid = dp >= 1
    if max_gpus is not None:
        valid &= dp * rep[si][:, None] <= max_gpus
    keep = valid.any(axis=1)
    layout = {k: v[si[keep]] for k, v in shapes.items()}
    layout["dp"] = np.maximum(dp[keep], 1)
    layout["nodes"] = nodes[keep]
    layout["_bits"] = np.zeros(int(np.count_nonzero(keep)), dtype=np.int64)
    layout["_valid"] = valid[keep]
    layout["_k"] = ki[keep]
    if len(layout["tp"]) == 0:
        raise ShardMeterError("plan: no layout fits (check --max-gpus and --only)")
    return layout, opts


def check_classes(node_opts: Sequence[Sequence[int]], option_counts: Sequence[int], n_sync: int) -> None:
    """Refuse, before any scoring, more classes than :data:`MAX_CLASSES` (a Python integer:
    the product of many islands' node counts overflows int64)."""
    combos = math.prod(len(o) for o in node_opts)
    n = combos * math.prod(option_counts) * n_sync
    if n > MAX_CLASSES:
        many = f"{n:,}" if n < 10**15 else f"about 10^{len(str(n)) - 1}"
        raise ShardMeterError(
            f"plan: {many} node combinations x options of {len(node_opts)} islands is too many "
            f"(limit {MAX_CLASSES:,}); restrict with --only island[i].nodes=... (island[i].nodes alone "
            "keeps that island's nodes), --only mbs=..., --only recompute=..."
        )


def reduced_sync(axis: Axis) -> tuple[Axis, list[int]]:
    """The sync axis with one option per strategy (an island's step and memory depend on the
    strategy, not on ``inner_steps`` or bits), and each full option's reduced index."""
    first: dict[str, int] = {}
    group = []
    for i, ov in enumerate(axis.overrides):
        name = ov["sync.strategy"]
        first.setdefault(name, i)
        group.append(list(first).index(name))
    idx = list(first.values())
    cols = {k: v[idx] for k, v in axis.cols.items()}
    return Axis("sync", [axis.overrides[i] for i in idx], cols), group
