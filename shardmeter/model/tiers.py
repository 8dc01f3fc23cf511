"""Collectives priced over an island's network tiers (any number, innermost first).

A process group of ``size`` ranks ``stride`` apart in the rank order keeps
``k_t = clip(floor(D_t / stride), 1, size)`` members inside one domain of tier ``t`` (``D_t``
GPUs; the outermost tier's domain is the whole island, ``k = size``).

Bandwidth (ml-engineering's network chapter; the scaling-book, "GPUs"): each tier carries, over
``n_0 = k_0`` members on tier 0 and ``n_t = ceil(k_t / k_{t-1})`` domains on tier ``t``, what
the tiers below left each GPU, ``S / (n_0 ... n_{t-1})`` -- or all of ``S`` when the collective
is ``flat``: ``(n_t - 1)/n_t x bytes_t / B_t`` per tier (Thakur, Rabenseifner and Gropp 2005).
NCCL's ring moves the same bytes per NIC (its channels spread the node's ring crossings over the
node's NICs). A ``flat`` collective is one ring through all ``size`` ranks, pipelined: every
rank forwards ``(size - 1)/size x S`` and the ring runs at its slowest link, so its bandwidth
term is ``(size - 1)/size x S / B_t`` at the slowest tier it spans, not a sum over tiers (NCCL's
own tuning model prices a ring across more than two nodes at one link's bandwidth,
``busBw = nChannels x bwInter``: ``src/graph/tuning.cc`` of NVIDIA/nccl at 5067397,
``ncclTopoTuneModel``).

Latency is NCCL's own model (``src/graph/tuning.cc`` of NVIDIA/nccl at 5067397,
``ncclTopoTuneModel``): a ring all-gather / reduce-scatter is ONE ring through every rank,
``nRanks - 1`` steps, of which ``nNodes - 1`` cross the network at ``interLat`` and the other
``nRanks - nNodes`` stay inside a node at ``intraLat``; over any number of tiers a step is
priced at the outermost tier it crosses: with ``G_t = ceil(size / k_t)`` domains of tier ``t``
spanned (``G_T-1 = 1``), ``size - G_0`` steps at ``alpha_0`` and ``G_{t-1} - G_t`` at
``alpha_t``. So ring latency grows with the ranks, not with the tiers' ring sizes. An
all-reduce is NCCL's better of the ring (twice the reduce-scatter) and the double binary tree:
latency ``2 ((k_0 - 1) alpha_0 + log2i(nNodes) alpha_net)`` (here ``sum_t floor(log2 n_t)
alpha_t`` over the tiers the tree spans) and bus bandwidth ``0.92 x`` the ring's (the same
file's ``busBw * .92`` for Tree all-reduce). NCCL's per-collective ``baseLat`` and its
protocol-specific corrections (the ring's 1.4x "plateau", the tree's medium-size
``treeCorrectionFactor``) are left out: the links' ``alpha`` is already a protocol midpoint.

An all-to-all sends ``(k_t - k_{t-1}) / size x S`` across tier ``t``, all tiers at once, and
takes the slowest.
"""

from __future__ import annotations

import math
from typing import Any

from shardmeter.inputs.bundles import Topology
from shardmeter.model.formulas import ring_collective_time
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.parts import COLLECTIVES

#: NCCL's Tree all-reduce bus bandwidth relative to the ring's (``busBw * .92``,
#: ``src/graph/tuning.cc`` of NVIDIA/nccl at 5067397).
TREE_BW_FACTOR = 0.92

__all__ = ["collective_time", "TREE_BW_FACTOR", "span_link", "slowest_link", "members_per_tier"]

_KIND = {
    "all_gather": "ag",
    "reduce_scatter": "rs",
    "all_reduce": "ar",
    "all_to_all": "a2a",
    "ag": "ag",
    "rs": "rs",
    "ar": "ar",
    "a2a": "a2a",
}


def members_per_tier(size: Array, stride: Array, topo: Topology) -> list[Array]:
    """``k_t``: members of the group inside one domain of each tier (the last is ``size``)."""
    size = ops.as_float(size)
    stride = ops.maximum(ops.as_float(stride), 1.0)
    gpus = topo.tier_gpus
    return [ops.clip(ops.floor(ops.tier(gpus, t) / stride), 1.0, size) for t in range(ops.n_tiers(gpus))]


def collective_time(
    kind: str, nbytes: Array, size: Array, stride: Array, topo: Topology, flat: Array = False
) -> Array:
    """Seconds of one collective (``kind``: one of :data:`~shardmeter.parts.COLLECTIVES`) of
    ``nbytes`` over a group of ``size`` ranks ``stride`` apart (see the module docstring)."""
    if _KIND.get(kind) is None:
        raise ValueError(f"unknown collective {kind!r} (expected one of {', '.join(COLLECTIVES)})")
    kind = _KIND[kind]
    if type(size) is not float:
        size = ops.as_float(size)
    bw, lat = topo.tier_bytes_s, topo.tier_latency_s
    if kind != "a2a" and type(flat) is bool and _finite_floats(nbytes, size, stride, topo):
        return _ring_or_tree_memo(kind == "ar", kind, nbytes, size, stride, topo.tier_gpus, bw, lat, flat)
    return _collective_ops(kind, nbytes, size, stride, topo, flat)


def _ring_or_tree_memo(
    ar: bool,
    kind: str,
    nbytes: float,
    size: float,
    stride: float,
    gpus: tuple[float, ...],
    bw: tuple[float, ...],
    lat: tuple[float, ...],
    flat: bool,
) -> float:
    """:func:`_ring_or_tree_floats`, the last call's answer where this call is the same: an
    all-reduce or not (an all-gather and a reduce-scatter price alike), the same nonzero finite
    bytes, size and stride (equal, so the same bits) and flatness over the same tier tuples
    (held, compared by identity: immutable). ZeRO-1/2's reduce-scatter of the gradients and
    all-gather of the parameters, one after the other, move as many bytes over one group."""
    global _LAST_RING
    last = _LAST_RING
    key = (ar, nbytes, size, stride, flat)
    if last is not None and last[0] == key and last[1] is gpus and last[2] is bw and last[3] is lat:
        return last[4]
    t = _ring_or_tree_floats(kind, nbytes, size, stride, gpus, bw, lat, flat)
    if nbytes and size and stride:  # no zero (0.0 == -0.0): equal keys are the same bits
        _LAST_RING = (key, gpus, bw, lat, t)
    return t


#: The last :func:`_ring_or_tree_memo`: ``((ar, nbytes, size, stride, flat), gpus, bw, lat, seconds)``.
_LAST_RING: tuple[Any, ...] | None = None


def _collective_ops(
    kind: str, nbytes: Array, size: Array, stride: Array, topo: Topology, flat: Array
) -> Array:
    """:func:`collective_time` (``kind`` ag, rs, ar or a2a) through :mod:`~shardmeter.numeric.ops`."""
    bw, lat = topo.tier_bytes_s, topo.tier_latency_s
    ks = members_per_tier(size, stride, topo)
    if kind == "a2a":
        out: Array = None
        below: Array = 1.0
        for t, k in enumerate(ks):
            n = ops.ceil(k / below) if t else k
            part = (k - below) / ops.maximum(size, 1.0) * nbytes / ops.tier(bw, t) + (n - 1.0) * ops.tier(
                lat, t
            )
            out = part if out is None else ops.maximum(out, ops.where(n > 1, part, 0.0))
            below = k
        return out
    bw_total: Array = None  # the tiers' bandwidth terms
    ring_lat: Array = None  # NCCL's flat-ring steps, each at the outermost tier it crosses
    tree_lat: Array = None  # NCCL's tree: a chain inside tier 0, binary trees across the others
    carried: Array = None  # members aggregated by the tiers below (n_0 ... n_{t-1})
    spanned: Array = None  # G_{t-1}: domains of the tier below that the group spans
    flat_bw: Array = None  # a flat ring's bandwidth term: at its slowest link
    frac = ops.where(size > 1, (size - 1.0) / ops.maximum(size, 1.0), 0.0)
    last = len(ks) - 1
    for t, k in enumerate(ks):
        lat_t = ops.tier(lat, t)
        if t == 0:
            n, tier_bytes = k, nbytes
            carried = k
        else:
            n = ops.ceil(size / ks[t - 1]) if t == last else ops.ceil(k / ks[t - 1])
            tier_bytes = nbytes / carried
            carried = carried * n
        part = ring_collective_time(tier_bytes, n, ops.tier(bw, t), 0.0)
        flat_t = ops.where(n > 1, frac * nbytes / ops.tier(bw, t), 0.0)
        domains = 1.0 if t == last else ops.ceil(size / k)  # G_t
        if t == 0:
            bw_total = part
            flat_bw = flat_t
            ring_lat = (size - domains) * lat_t
            tree_lat = ops.maximum(k - 1.0, 0.0) * lat_t
        else:
            bw_total = bw_total + ops.where(n > 1, part, 0.0)
            flat_bw = ops.maximum(flat_bw, flat_t)
            ring_lat = ring_lat + (spanned - domains) * lat_t
            tree_lat = tree_lat + ops.floor(ops.log2(ops.maximum(n, 1.0))) * lat_t
        spanned = domains
    bw_total = ops.where(flat, flat_bw, bw_total)
    if kind != "ar":
        return bw_total + ring_lat
    ring = 2.0 * (bw_total + ring_lat)
    tree = 2.0 * (bw_total / TREE_BW_FACTOR + tree_lat)
    return ops.where(flat, ring, ops.minimum(ring, tree))


def _finite_floats(nbytes: Array, size: Array, stride: Array, topo: Topology) -> bool:
    """Whether one plan's collective is plain finite numbers throughout: its bytes, size and
    stride floats and its tiers tuples of floats, a tier's GPUs finite or inf (the island's
    tier; :func:`_ring_or_tree_floats` takes it)."""
    global _LAST_TIERS
    gpus, bw, lat = topo.tier_gpus, topo.tier_bytes_s, topo.tier_latency_s
    if not (type(nbytes) is float and type(size) is float and type(stride) is float):
        return False
    last = _LAST_TIERS
    if last is not None and last[0] is gpus and last[1] is bw and last[2] is lat:
        tiers_ok = last[3]
    else:
        tiers_ok = _finite_tiers(gpus, bw, lat)
        _LAST_TIERS = (gpus, bw, lat, tiers_ok)
    return tiers_ok and _isfinite(nbytes) and _isfinite(size) and _isfinite(stride)


def _finite_tiers(gpus: Any, bw: Any, lat: Any) -> bool:
    """Whether an island's tiers are tuples of plain floats, no tier's GPUs nan (the outermost
    may be inf: the island) and every bandwidth and latency finite."""
    if not (type(gpus) is tuple and type(bw) is tuple and type(lat) is tuple):
        return False
    # over the tuples in C (map), not a generator's frame per element: every element exactly
    # a float (the set of their types), no tier's GPUs nan, every other number finite
    # (``isfinite`` of a float is ``x - x == 0.0``)
    if not set(map(type, gpus + bw + lat)) <= ops.ONLY_FLOAT or any(map(_isnan, gpus)):
        return False
    return all(map(_isfinite, bw + lat))


_isnan, _isfinite = math.isnan, math.isfinite
#: The last tiers :func:`_finite_floats` checked, ``(gpus, bw, lat, ok)``: the tuples (held,
#: so compared by identity; immutable, so their answer stands) and whether they pass.
_LAST_TIERS: tuple[Any, Any, Any, bool] | None = None


def _ring_or_tree_floats(
    kind: str,
    nbytes: float,
    size: float,
    stride: float,
    gpus: tuple[float, ...],
    bw: tuple[float, ...],
    lat: tuple[float, ...],
    flat: bool,
) -> float:
    """:func:`collective_time` of an all-gather, reduce-scatter or all-reduce of one plan
    (:func:`_finite_floats`): the same operations in the same order, :mod:`.ops`' scalar
    semantics written out (every quotient taken, so a zero divisor raises as it does there;
    ``maximum``/``minimum`` of finite numbers)."""
    ceil, floor, log2 = math.ceil, math.floor, math.log2
    st = stride if stride >= 1.0 else 1.0
    ks = []
    for g in gpus:  # members_per_tier: clip(floor(g / stride), 1, size)
        x = g / st
        x = float(floor(x)) if x - x == 0.0 else x  # inf: the island's tier holds the group
        x = x if x >= 1.0 else 1.0
        ks.append(x if x <= size else size)
    frac_all = (size - 1.0) / (size if size >= 1.0 else 1.0)
    frac = frac_all if size > 1 else 0.0
    last = len(ks) - 1
    bw_total = ring_lat = tree_lat = carried = spanned = flat_bw = 0.0
    for t, k in enumerate(ks):
        lat_t, bw_t = lat[t], bw[t]
        if t == 0:
            n, tier_bytes = k, nbytes
            carried = k
        else:
            n = float(ceil(size / ks[t - 1])) if t == last else float(ceil(k / ks[t - 1]))
            tier_bytes = nbytes / carried
            carried = carried * n
        # ring_collective_time(tier_bytes, n, bw_t, 0.0)
        r = (n - 1.0) / (n if n >= 1.0 else 1.0)
        part = 1.0 * ((n - 1.0 if n - 1.0 >= 0.0 else 0.0) * 0.0 + (r if n > 1 else 0.0) * tier_bytes / bw_t)
        flat_v = frac * nbytes / bw_t
        flat_t = flat_v if n > 1 else 0.0
        domains = 1.0 if t == last else float(ceil(size / k))
        if t == 0:
            bw_total = part
            flat_bw = flat_t
            ring_lat = (size - domains) * lat_t
            tree_lat = (k - 1.0 if k - 1.0 >= 0.0 else 0.0) * lat_t
        else:
            bw_total = bw_total + (part if n > 1 else 0.0)
            flat_bw = flat_bw if flat_bw >= flat_t else (flat_t if flat_t > flat_bw else math.nan)
            ring_lat = ring_lat + (spanned - domains) * lat_t
            tree_lat = tree_lat + float(floor(log2(n if n >= 1.0 else 1.0))) * lat_t
        spanned = domains
    bw_total = flat_bw if flat else bw_total
    if kind != "ar":
        return bw_total + ring_lat
    ring = 2.0 * (bw_total + ring_lat)
    tree = 2.0 * (bw_total / TREE_BW_FACTOR + tree_lat)
    return ring if flat else (ring if ring <= tree else (tree if tree < ring else math.nan))


def span_link(size: Array, stride: Array, topo: Topology) -> tuple[Array, Array]:
    """``(bytes/s, latency s)`` of the innermost tier that holds the whole group: where its
    point-to-point transfers (ring attention, pipeline sends) travel. One plan's plain floats
    take :func:`_span_floats`."""
    if type(size) is float and type(stride) is float:
        gpus, bw_t, lat_t = topo.tier_gpus, topo.tier_bytes_s, topo.tier_latency_s
        if type(gpus) is tuple and type(bw_t) is tuple and type(lat_t) is tuple:
            return _span_floats(size, stride, gpus, bw_t, lat_t)
    ks = members_per_tier(size, stride, topo)
    size = ops.as_float(size)
    T = len(ks)
    bw = ops.tier(topo.tier_bytes_s, T - 1)
    lat = ops.tier(topo.tier_latency_s, T - 1)
    for t in range(T - 2, -1, -1):
        inside = ks[t] >= size
        bw = ops.where(inside, ops.tier(topo.tier_bytes_s, t), bw)
        lat = ops.where(inside, ops.tier(topo.tier_latency_s, t), lat)
    return bw, lat


def _span_floats(
    size: float, stride: float, gpus: tuple[Any, ...], bw: tuple[Any, ...], lat: tuple[Any, ...]
) -> tuple[Any, Any]:
    """:func:`span_link` of one plan (plain floats, the tiers tuples): the innermost tier whose
    members (:func:`members_per_tier`, ``ops`` of floats written out: ``floor`` keeps inf and
    nan, ``maximum``/``minimum`` give nan where neither side is the larger) hold the group, else
    the outermost, the tier the chain of ``ops.where`` leaves (no operation of the tiers past
    it raises). tests/test_scalar_twins.py holds it to the arrays to the bit."""
    nan = math.nan
    st = stride if stride >= 1.0 else (1.0 if stride < 1.0 else nan)
    last = len(gpus) - 1
    for t in range(last):
        x = gpus[t] / st
        x = float(math.floor(x)) if x - x == 0.0 else x
        x = x if x >= 1.0 else (1.0 if x < 1.0 else nan)
        k = x if x <= size else (size if size < x else nan)
        if k >= size:
            return bw[t], lat[t]
    return bw[last], lat[last]


def slowest_link(topo: Topology) -> tuple[Array, Array]:
    """``(bytes/s, latency s)``: the slowest tier's bandwidth and the outermost tier's latency,
    the pace of a flat ring over the whole data-parallel group (the last gradient bucket)."""
    return ops.min_tier(topo.tier_bytes_s), ops.tier(
        topo.tier_latency_s, ops.n_tiers(topo.tier_latency_s) - 1
    )
