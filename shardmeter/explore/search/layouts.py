"""The layout table of the plan space (ragged, built with numpy): one row per replica shape
(``tp``, ``pp``, ``cp``, ``ep``, ``sequence_parallel``) and data-parallel spread, see
:mod:`.space`. For one island, ``dp`` from 1 to what fills the island (fewer GPUs is a plan
too); for several islands, the nodes used on each island (powers of two and all of them),
each island's ``dp`` filling the nodes it uses."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from shardmeter.errors import ShardMeterError
from shardmeter.explore.search.knobs import only_label, pick
from shardmeter.load.scenario import Scenario

__all__ = [
    "layout_table",
    "check_islands",
    "LAYOUT_COLUMNS",
    "MAX_LAYOUTS",
    "MAX_PLAN_ISLANDS",
    "CONTEXT_PARALLEL",
]

#: Layout table keys -> model input columns.
LAYOUT_COLUMNS = {
    "tp": "layout.tp",
    "pp": "layout.pp",
    "cp": "layout.cp",
    "ep": "layout.ep",
    "sp": "layout.sequence_parallel",
    "dp": "layout.dp",
    "nodes": "topology.nodes",
}
#: Most layout rows a space may hold (a 192-node island has 32,626; each row is ~630 candidates).
#: With several islands each row holds a ``dp`` and a ``nodes`` per island: the limit is on
#: rows x islands / 2 (two islands keep the whole limit), see :func:`_layout_limit`.
MAX_LAYOUTS = 5_000_000
#: Most islands a plan searches: every candidate's model arrays grow with the islands (a 1,000-island
#: space took 16 GB and 70 s), and each island multiplies the node combinations.
MAX_PLAN_ISLANDS = 64
#: Context-parallel degrees tried (powers of two dividing the sequence).
CONTEXT_PARALLEL = (1, 2, 4, 8, 16)


def layout_table(
    sc: Scenario, islands: Sequence[Any], only: dict[str, Any], max_gpus: int | None
) -> dict[str, np.ndarray]:
    """The layout rows of scenario ``sc`` on its resolved ``islands``: ``tp``, ``pp``, ``cp``,
    ``ep``, ``sp`` (one value per row), ``dp`` (``(rows, 1)``, or ``(rows, islands)``) and, for
    several islands, ``nodes`` (``(rows, islands)``).

    :param only: the normalised ``--only`` (:func:`.knobs.normalise_only`).
    :param max_gpus: drop layouts using more GPUs in total.
    """
    check_islands(len(islands))
    gpn = np.array([isl.gpus_per_node for isl in islands], dtype=np.int64)
    cap_nodes = np.array([isl.nodes for isl in islands], dtype=np.int64)
    g_total = int(np.sum(cap_nodes * gpn))  # every GPU of every island
    if max_gpus is not None:
        g_total = min(g_total, int(max_gpus))
    g_max = min(int(np.max(cap_nodes * gpn)), g_total)  # the most one replica can span
    shapes = _replica_shapes(sc, only, g_max)
    rep = shapes["tp"] * shapes["pp"] * shapes["cp"]  # GPUs of one replica
    if len(islands) == 1:
        idx, extra = _one_island(only, islands[0].dp, int(cap_nodes[0] * gpn[0]), rep, g_total)
    else:
        idx, extra = _several_islands(only, cap_nodes, gpn, rep, g_total)
    layout = {k: v[idx] for k, v in shapes.items()}
    layout.update(extra)
    _check_only_fits(layout, only, g_max, g_total)
    if len(layout["tp"]) == 0:
        raise ShardMeterError("plan: no layout fits (check --max-gpus and --only)")
    return layout


def check_islands(n: int) -> None:
    """Refuse a plan over more than :data:`MAX_PLAN_ISLANDS` islands, before anything is built."""
    if n > MAX_PLAN_ISLANDS:
        raise ShardMeterError(
            f"plan: {n:,} islands is too many to search (limit {MAX_PLAN_ISLANDS} islands: the "
            "memory and time of every candidate grow with the islands); merge identical islands "
            "into one with more nodes, or plan a subset of them"
        )


def _check_only_fits(layout: dict[str, np.ndarray], only: dict[str, Any], g_max: int, g_total: int) -> None:
    """Every value an ``--only`` gives a layout knob is in some layout row: one that fits in no
    row (a replica larger than an island, more replicas than the GPUs) is an error naming it,
    not silently dropped."""
    cols: dict[str, np.ndarray] = {f"parallelism.{k}": layout[k] for k in ("tp", "pp", "cp", "ep")}
    cols["parallelism.sequence_parallel"] = layout["sp"]
    if "nodes" in layout:
        cols.update({f"island[{j}].nodes": layout["nodes"][:, j] for j in range(layout["nodes"].shape[1])})
        room = f"every island holds a whole replica in the nodes it uses; {g_total:,} GPUs in all"
    else:
        cols["parallelism.dp"] = layout["dp"][:, 0]
        room = f"a replica spans at most {g_max:,} GPUs, all replicas {g_total:,}"
    for key, col in cols.items():
        for v in only.get(key) or ():
            if not np.any(col == v):
                raise ShardMeterError(
                    f"{only_label(key, v)}: fits in no layout ({room}; check --max-gpus and the "
                    "other --only values)"
                )


def _layout_limit(n_islands: int) -> int:
    """Most layout rows of a space over ``n_islands`` (each row holds two numbers per island)."""
    return MAX_LAYOUTS if n_islands <= 2 else MAX_LAYOUTS * 2 // n_islands


def _divisors(n: int, cap: int) -> list[int]:
    """The divisors of ``n`` up to ``cap`` (O(sqrt n): ``n`` may be a huge count)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(d for d in {*small, *(n // d for d in small)} if d <= cap)


def _too_many(what: str, n: int, limit: int, hint: str) -> ShardMeterError:
    return ShardMeterError(f"plan: {n:,} {what} is too many (limit {limit:,}); restrict with {hint}")


def _replica_shapes(sc: Scenario, only: dict[str, Any], g_max: int) -> dict[str, np.ndarray]:
    """Every replica shape tried (``tp``, ``pp``, ``cp``, ``ep``, ``sp``: flat arrays, one entry
    per shape); sequence parallelism only with ``tp > 1`` unless ``--only`` asks for it."""
    m, par = sc.model, sc.parallelism
    if "parallelism.pp" not in only and min(m.layers, g_max) > MAX_LAYOUTS:
        raise _too_many("pipeline stage counts", min(m.layers, g_max), MAX_LAYOUTS, "--only pp=...")
    tps = pick(only, "parallelism.tp", _divisors(m.heads, g_max), par.tp)
    pps = pick(only, "parallelism.pp", range(1, min(m.layers, g_max) + 1), par.pp)
    cps = pick(
        only, "parallelism.cp", [c for c in CONTEXT_PARALLEL if m.seq_len % c == 0 and c <= g_max], par.cp
    )
    eps = pick(only, "parallelism.ep", _divisors(m.experts, g_max) if m.experts > 1 else [1], par.ep)
    sps = pick(only, "parallelism.sequence_parallel", [False, True], par.sequence_parallel)
    for key, vals in (
        ("parallelism.tp", tps),
        ("parallelism.pp", pps),
        ("parallelism.cp", cps),
        ("parallelism.ep", eps),
    ):
        if not vals or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in vals):
            raise ShardMeterError(f"--only {key}: expected integers >= 1, got {vals}")
    if any(not isinstance(x, bool) for x in sps):
        raise ShardMeterError(f"--only parallelism.sequence_parallel: expected true/false, got {sps}")
    n_shapes = math.prod(len(v) for v in (tps, pps, cps, eps, sps))
    if n_shapes > MAX_LAYOUTS:
        raise _too_many("replica shapes", n_shapes, MAX_LAYOUTS, "--only tp=..., --only pp=...")
    TP, PP, CP, EP, SP = (
        a.ravel()
        for a in np.meshgrid(
            np.array(tps, np.int64),
            np.array(pps, np.int64),
            np.array(cps, np.int64),
            np.array(eps, np.int64),
            np.array(sps, bool),
            indexing="ij",
        )
    )
    keep = ~(SP & (TP == 1)) if "parallelism.sequence_parallel" not in only else np.ones(TP.shape, bool)
    return {"tp": TP[keep], "pp": PP[keep], "cp": CP[keep], "ep": EP[keep], "sp": SP[keep]}


def _one_island(
    only: dict[str, Any], current_dp: int, island_gpus: int, rep: np.ndarray, g_total: int
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Rows of one island: each replica shape (index ``idx``) with every ``dp`` from 1 to what
    fills the island (or the ``--only dp`` values that fit)."""
    if "parallelism.dp" in only:
        dps = pick(only, "parallelism.dp", [], current_dp)
        if len(rep) * len(dps) > MAX_LAYOUTS:
            raise _too_many("layouts", len(rep) * len(dps), MAX_LAYOUTS, "fewer --only dp=... values")
        dp_arr = np.array(dps, dtype=np.int64)
        idx, dpv = (a.ravel() for a in np.meshgrid(np.arange(len(rep)), dp_arr, indexing="ij"))
        ok = dpv * rep[idx] <= g_total
        idx, dpv = idx[ok], dpv[ok]
    else:
        fill = island_gpus // rep
        limit = np.minimum(fill, g_total // rep)
        counts = np.maximum(limit, 0)
        if int(counts.sum()) > MAX_LAYOUTS:
            raise _too_many(
                "layouts",
                int(counts.sum()),
                MAX_LAYOUTS,
                "--only dp=..., --only tp=..., --only pp=... or --max-gpus",
            )
        idx = np.repeat(np.arange(len(rep)), counts)
        starts = np.cumsum(counts) - counts
        dpv = np.arange(len(idx), dtype=np.int64) - np.repeat(starts, counts) + 1
    return idx, {"dp": dpv[:, None]}


def _several_islands(
    only: dict[str, Any], cap_nodes: np.ndarray, gpn: np.ndarray, rep: np.ndarray, g_total: int
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Rows of several islands: each replica shape (index ``idx``) with every combination of
    the nodes used per island, each island's ``dp`` filling its nodes (at least 1 each)."""
    node_opts = []
    for j, n in enumerate(cap_nodes):
        key = f"island[{j}].nodes"
        default = sorted({2**k for k in range(int(math.log2(n)) + 1)} | {int(n)})
        vals = pick(only, key, default, int(n))
        node_opts.append(np.array(vals, dtype=np.int64))
    # Python integers: the product of a few dozen islands' options overflows int64 (2**64 wraps to 0)
    n_combos = math.prod(len(o) for o in node_opts)
    limit = _layout_limit(len(cap_nodes))
    if n_combos * len(rep) > limit:
        many = f"{n_combos:,}" if n_combos < 10**15 else f"about 10^{len(str(n_combos)) - 1}"
        raise ShardMeterError(
            f"plan: {many} node combinations of {len(cap_nodes)} islands x {len(rep):,} replica shapes "
            f"is too many layouts (limit {limit:,}); restrict with --only island[i].nodes=... "
            "(island[i].nodes alone keeps that island's nodes), --only tp=..., --only pp=..."
        )
    combos = np.array(list(itertools.product(*node_opts)), dtype=np.int64)  # (C, I)
    idx, ci = (a.ravel() for a in np.meshgrid(np.arange(len(rep)), np.arange(len(combos)), indexing="ij"))
    nodes = combos[ci]
    dp = (nodes * gpn[None, :]) // rep[idx][:, None]
    ok = np.all(dp >= 1, axis=1) & (np.sum(dp, axis=1) * rep[idx] <= g_total)
    return idx[ok], {"dp": dp[ok], "nodes": nodes[ok]}
