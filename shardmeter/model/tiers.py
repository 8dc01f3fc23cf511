"""Collectives priced over an island's network tiers (any number, innermost first).

A process group of ``size`` ranks ``stride`` apart in the rank order keeps
``k_t = clip(floor(D_t / stride), 1, size)`` members inside one domain of tier ``t`` (``D_t``
GPUs; the outermost tier's domain is the whole island, ``k = size``). NCCL's hierarchical
algorithms (ml-engineering's network chapter; the scaling-book, "GPUs") then run a ring on each
tier: over ``n_0 = k_0`` members on tier 0, and over ``n_t = ceil(k_t / k_{t-1})`` domains on tier
``t``, each GPU carrying what the tiers below left it, ``S / (n_0 ... n_{t-1})`` -- or all of
``S`` when the collective is ``flat`` (one ring over every member). A ring of ``n`` over a tier
costs ``(n-1) alpha_t + (n-1)/n x bytes / B_t`` (Thakur, Rabenseifner and Gropp 2005); an
all-reduce twice that. An all-to-all sends ``(k_t - k_{t-1}) / size x S`` across tier ``t``, all
tiers at once, and takes the slowest. With two tiers (a node, then the network) this is the
two-level alpha-beta model of earlier releases, term for term.
"""

from __future__ import annotations

import numpy as np

from ..parts import COLLECTIVES
from . import ops
from .formulas import ring_collective_time
from .inputs import Topology
from .ops import Array

__all__ = ["collective_time", "span_link", "slowest_link", "members_per_tier"]

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


def members_per_tier(size, stride, topo: Topology) -> list[np.ndarray]:
    """``k_t``: members of the group inside one domain of each tier (the last is ``size``)."""
    size = ops.as_float(size)
    stride = ops.maximum(ops.as_float(stride), 1.0)
    gpus = topo.tier_gpus
    return [ops.clip(ops.floor(ops.tier(gpus, t) / stride), 1.0, size) for t in range(ops.n_tiers(gpus))]


def collective_time(kind: str, nbytes, size, stride, topo: Topology, flat=False) -> Array:
    """Seconds of one collective (``kind``: one of :data:`~shardmeter.parts.COLLECTIVES`) of
    ``nbytes`` over a group of ``size`` ranks ``stride`` apart (see the module docstring)."""
    if _KIND.get(kind) is None:
        raise ValueError(f"unknown collective {kind!r} (expected one of {', '.join(COLLECTIVES)})")
    kind = _KIND[kind]
    size = ops.as_float(size)
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
    total: Array = None
    carried: Array = None  # members aggregated by the tiers below (n_0 ... n_{t-1})
    for t, k in enumerate(ks):
        if t == 0:
            n, tier_bytes = k, nbytes
            carried = k
        else:
            n = ops.ceil(size / ks[t - 1]) if t == len(ks) - 1 else ops.ceil(k / ks[t - 1])
            tier_bytes = ops.where(flat, nbytes, nbytes / carried)
            carried = carried * n
        part = ring_collective_time(tier_bytes, n, ops.tier(bw, t), ops.tier(lat, t))
        total = part if t == 0 else total + ops.where(n > 1, part, 0.0)
    return 2.0 * total if kind == "ar" else total


def span_link(size, stride, topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes/s, latency s)`` of the innermost tier that holds the whole group: where its
    point-to-point transfers (ring attention, pipeline sends) travel."""
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


def slowest_link(topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes/s, latency s)``: the slowest tier's bandwidth and the outermost tier's latency,
    the pace of a flat ring over the whole data-parallel group (the last gradient bucket)."""
    return ops.min_tier(topo.tier_bytes_s), ops.tier(
        topo.tier_latency_s, ops.n_tiers(topo.tier_latency_s) - 1
    )
