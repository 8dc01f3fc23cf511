"""nccl-tests logs -> each tier's latency and achieved bandwidth, in the model's own form.

The logs are read by :mod:`.nccl_log` (one file may hold several runs, of several collectives
and element types): each run's collective, ranks, nodes and rows of ``size`` (bytes, the whole
buffer S: ``algbw = S / t``, nccl-tests' doc/PERFORMANCE.md) and out-of-place ``time`` (us).
Each collective is fitted to its own rate (:func:`fit_link`); the link's applied figures are the
joint fit of the collectives that run as rings, since the model prices every collective of a
tier at one rate; an all-reduce faster than any ring (NVLink SHARP) is recorded, not applied.

A one-node log prices the intra-node tier, a multi-node log the inter-node tier, as the model
does (``shardmeter/model/tiers.py``; Thakur, Rabenseifner and Gropp 2005): a ring over ``n``
members of a tier costs ``(n - 1) / n x bytes / B`` (an all-reduce twice that; ``(n - 1) / n``
is the busbw factor of doc/PERFORMANCE.md, ``2 (n - 1) / n`` for all-reduce) plus NCCL's ring
latency, ``n - N`` steps inside the nodes and ``N - 1`` across them (twice for an all-reduce);
a multi-node all-reduce row is NCCL's tree when that is faster (:func:`tree_design`).
With ``g`` GPUs on each of ``N`` nodes the inner tier carries S and the outer ``S / g``; an
all-to-all sends ``(n - g) / n x S`` across the outer tier, which sets its pace. The model's
``B`` is ``bandwidth_gb_s x efficiency`` per GPU (a network link's shared by the node's GPUs as
``nics_per_node / g``), so each row is linear in ``alpha`` and ``1 / efficiency``:
``t = steps x alpha + bytes / (nominal x efficiency)``, fitted by :func:`.lsq.linear_relative`
(relative residuals) over every row of every log of the tier; a multi-node row first has its
inner tier's time (the one-node fit, else the catalog's link) taken off. A send/recv is one
step of S over the slowest link it crosses, at that link's whole rate (one sender per link).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from shardmeter.calibrate.lsq import linear_relative, rel_errors
from shardmeter.calibrate.nccl_log import COLLECTIVES, NcclLog, NcclRow, read_nccl_logs
from shardmeter.errors import ScenarioError
from shardmeter.records import Interconnect

__all__ = [
    "NcclRow",
    "NcclLog",
    "TierFit",
    "CollectiveFit",
    "LinkFits",
    "read_nccl_logs",
    "fit_tier",
    "fit_link",
    "COLLECTIVES",
    "MAX_MEAN_ERROR",
    "FLAG_MEAN_ERROR",
]

#: Largest mean absolute relative error of a fit that is written (above: refused, exit 2).
MAX_MEAN_ERROR = 0.25
#: Above this mean absolute relative error a written fit is flagged: a warning on stderr and
#: ``flagged`` in its overlay entry's ``source`` (the bundled real logs fit to 0.6-10 %; the
#: RTX 5090 socket-transport one, 13-15 %, is flagged).
FLAG_MEAN_ERROR = 0.10
#: Fastest a collective may run, as a fraction of its tier's wire rate in the ring's form: 1
#: (no ring beats its links) except an all-reduce with in-network reduction (NVLink SHARP, IB
#: SHARP), where each GPU sends S instead of 2 (n - 1) / n x S: at most 2.
MAX_EFFICIENCY = {"all_reduce": 2.0}


def nominal_bytes_s(link: Interconnect, gpus_per_node: int, nics_per_node: int | None, inner: bool) -> float:
    """A GPU's share of the link's wire rate (bytes/s): per GPU on a scale-up link (and on the
    innermost tier, never shared like a NIC), ``nics_per_node / gpus_per_node`` of it on a
    network link (``shardmeter/inputs/build.py``, ``tier_arrays``)."""
    share = 1.0
    if not inner and link.kind == "network":
        share = (nics_per_node or gpus_per_node) / gpus_per_node
    return link.bandwidth_gb_s * 1e9 * share


def _ring(coll: str, n: float) -> tuple[float, float]:
    """``(steps, traffic factor)`` of one tier's ring over ``n`` members: the busbw factor."""
    m = 2.0 if coll == "all_reduce" else 1.0
    return m * (n - 1.0), m * (n - 1.0) / n


def design(
    log: NcclLog, inner_link: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, bytes, times, floor)`` per row of the tier a log prices (seconds, bytes): one
    node prices the ring over its ``ranks``; several the outer tier, with the inner tier's time,
    from ``inner_link = (latency s, bytes/s)``, subtracted. The ring's latency is NCCL's (one
    ring through every rank: ``n - N`` steps inside the nodes, ``N - 1`` across them;
    ``tiers.py``). An all-to-all's tiers run at once and the slowest sets the time: ``floor`` is
    its inner tier's time, and a row whose outer tier would be faster than that says nothing
    about the outer tier. A send/recv (each rank sends S to the next) is one step of S on the
    slowest link it crosses, the model's point-to-point form (``pipeline.py``)."""
    S = np.array([r.size_bytes for r in log.rows], dtype=float)
    t = np.array([r.time_us for r in log.rows]) * 1e-6
    n, g, N = float(log.ranks), float(log.gpus_per_node), float(log.nodes)
    zero = np.zeros_like(S)
    if log.collective == "sendrecv":
        return np.ones_like(S), S, t, zero
    if log.nodes == 1:
        steps, f = _ring(log.collective, n)
        return np.full_like(S, steps), f * S, t, zero
    assert inner_link is not None
    if log.collective == "all_to_all":
        floor = (g - 1.0) * inner_link[0] + (g - 1.0) / n * S / inner_link[1]
        return np.full_like(S, N - 1.0), (n - g) / n * S, t, floor
    m = 2.0 if log.collective == "all_reduce" else 1.0
    _, f0 = _ring(log.collective, g)
    inner = m * (n - N) * inner_link[0] + f0 * S / inner_link[1]
    s1, f1 = _ring(log.collective, N)
    return np.full_like(S, s1), f1 * S / g, t - inner, zero


def tree_design(log: NcclLog, inner_link: tuple[float, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, bytes, times)`` of a multi-node all-reduce's rows as NCCL's tree prices them
    (``tiers.py``): ``2 (g - 1)`` inner steps and ``2 floor(log2 N)`` outer ones, the bandwidth
    terms at ``TREE_BW_FACTOR`` of the ring's."""
    from shardmeter.model.tiers import TREE_BW_FACTOR

    S = np.array([r.size_bytes for r in log.rows], dtype=float)
    t = np.array([r.time_us for r in log.rows]) * 1e-6
    g, N = float(log.gpus_per_node), float(log.nodes)
    _, f0 = _ring("all_reduce", g)
    inner = 2.0 * (g - 1.0) * inner_link[0] + f0 * S / inner_link[1] / TREE_BW_FACTOR
    _, f1 = _ring("all_reduce", N)
    steps = 2.0 * np.floor(np.log2(N))
    return np.full_like(S, steps), f1 * S / g / TREE_BW_FACTOR, t - inner


@attrs.frozen(kw_only=True)
class TierFit:
    """A tier's fit: ``latency_us``, ``efficiency`` (of ``nominal_gb_s``, a GPU's share of the
    wire rate), the achieved ``bandwidth_gb_s`` per GPU, and the fit's mean absolute relative
    error ``mean_abs_error`` over ``points`` rows; ``latency_pinned`` when the least squares
    wanted a negative latency and was held at 0 (the logs do not determine it); ``tree_rows``:
    the multi-node all-reduce rows priced as NCCL's tree."""

    link: str
    latency_us: float
    efficiency: float
    nominal_gb_s: float
    bandwidth_gb_s: float
    mean_abs_error: float
    points: int
    logs: tuple[str, ...]
    latency_pinned: bool = False
    tree_rows: int = 0


InnerLink = tuple[float, float] | Mapping[str, tuple[float, float]] | None


def _inner_for(inner_link: InnerLink, coll: str) -> tuple[float, float] | None:
    if isinstance(inner_link, Mapping):
        return inner_link.get(coll, inner_link.get("*"))
    return inner_link


def _rows(link, logs, nics_per_node, inner_link: InnerLink):
    """The stacked designs of ``logs``: ring, tree alternative, the tree's inner gap, floors and
    each log's nominal bytes/s."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("s", "b", "t", "fl", "ts", "tb", "tt", "gap")}
    nominal = []
    for log in logs:
        inner = _inner_for(inner_link, log.collective)
        s, b, t, fl = design(log, inner)
        one_link = log.nodes == 1 or log.collective == "sendrecv"
        nom = nominal_bytes_s(link, log.gpus_per_node, nics_per_node, inner=one_link)
        if log.collective == "all_reduce" and log.nodes > 1 and inner is not None:
            ts, tb, tt = tree_design(log, inner)
        else:  # no tree alternative: the ring's own design, never preferred
            ts, tb, tt = s, b, t
        keep = (t > 0) & (tt > 0)  # a row the inner tier alone would take longer than
        for k, v in (("s", s), ("b", b / nom), ("t", t), ("fl", fl), ("ts", ts), ("tb", tb / nom)):
            cols[k].append(v[keep])
        cols["tt"].append(tt[keep])
        cols["gap"].append((t - tt)[keep])  # tree's inner time less the ring's
        nominal.append(nom)
    return {k: np.concatenate(v) for k, v in cols.items()}, nominal


def _too_few(link, logs, inner_link: InnerLink, have: int) -> ScenarioError:
    names = ", ".join(lg.where for lg in logs)
    total = sum(len(lg.rows) for lg in logs)
    inner = _inner_for(inner_link, logs[0].collective)
    if logs[0].nodes > 1 and inner is not None and have < total:
        return ScenarioError(
            f"link '{link.name}': the inner tier alone (latency {inner[0] * 1e6:.3g} us, "
            f"{inner[1] / 1e9:.4g} GB/s per GPU) takes longer than {total - have} of {total} rows of "
            f"{names} measured: the logs run faster than the model's sum of tiers (in-network "
            "reduction, or a faster intra-node link: give its one-node logs)",
            file=logs[0].where,
        )
    return ScenarioError(f"too few usable rows to fit link '{link.name}' from {names}", file=logs[0].where)


def fit_tier(
    link: Interconnect,
    logs: Sequence[NcclLog],
    *,
    nics_per_node: int | None,
    inner_link: InnerLink = None,
) -> TierFit:
    """Fit ``latency`` and ``efficiency`` of ``link`` jointly over every row of ``logs`` (all
    one-node, or all multi-node with ``inner_link``: one ``(latency s, bytes/s)``, or one per
    collective with ``"*"`` for the rest); see the module docstring."""
    c, nominal = _rows(link, logs, nics_per_node, inner_link)
    tree = np.zeros_like(c["s"], dtype=bool)  # rows NCCL's tree is faster on (all-reduce)
    use = c["t"] > c["fl"]
    alpha, inv_eff = 0.0, 0.0
    s_all, b_all, t_all = c["s"], c["b"], c["t"]
    for _ in range(10):  # rows re-assigned (a2a paced by the inner tier; ring or tree), then refit
        s_all = np.where(tree, c["ts"], c["s"])
        b_all = np.where(tree, c["tb"], c["b"])
        t_all = np.where(tree, c["tt"], c["t"])
        if use.sum() < 2:
            raise _too_few(link, logs, inner_link, int(use.sum()))
        alpha, inv_eff = linear_relative(np.column_stack([s_all[use], b_all[use]]), t_all[use])
        ring_t = c["s"] * alpha + c["b"] * inv_eff
        new_tree = c["ts"] * alpha + c["tb"] * inv_eff + c["gap"] < ring_t
        new = np.where(new_tree, c["ts"] * alpha + c["tb"] * inv_eff, ring_t) >= c["fl"]
        if np.array_equal(new, use) and np.array_equal(new_tree, tree):
            break
        use, tree = new, new_tree
    if inv_eff <= 0:
        raise ScenarioError(
            f"the times do not grow with the size: no bandwidth to fit for link '{link.name}'",
            file=logs[0].where,
        )
    err = rel_errors(s_all[use] * alpha + b_all[use] * inv_eff, t_all[use])
    nom = float(np.mean(nominal))
    return TierFit(
        link=link.name,
        latency_us=float(alpha) * 1e6,
        efficiency=1.0 / float(inv_eff),
        nominal_gb_s=nom / 1e9,
        bandwidth_gb_s=nom / float(inv_eff) / 1e9,
        mean_abs_error=float(np.mean(np.abs(err))),
        points=int(use.sum()),
        logs=tuple(lg.where for lg in logs),
        latency_pinned=bool(alpha <= 0.0),
        tree_rows=int((tree & use).sum()),
    )


@attrs.frozen(kw_only=True)
class CollectiveFit:
    """One collective's own fit on one link: its ``algorithm`` (``ring``, ``ring+tree``,
    ``in-network`` for an all-reduce faster than any ring, ``pairwise`` all-to-all, ``p2p``
    send/recv), the ``fit``, and whether it entered the link's applied figures (``applied``)."""

    collective: str
    algorithm: str
    fit: TierFit
    applied: bool


@attrs.frozen(kw_only=True)
class LinkFits:
    """A link's fits: one per collective its logs hold, and ``joint`` -- the fit over the
    applied collectives' rows that the overlay's ``[[link]]`` entry takes (None when every
    collective ran in-network)."""

    collectives: tuple[CollectiveFit, ...]
    joint: TierFit | None


def _algorithm(coll: str, fit: TierFit, multi: bool) -> str:
    if coll == "all_reduce" and fit.efficiency > 1.0:
        return "in-network"
    if coll == "all_to_all":
        return "pairwise"
    if coll == "sendrecv":
        return "p2p"
    return "ring+tree" if coll == "all_reduce" and multi and fit.tree_rows else "ring"


def check_plausible(fit: TierFit, what: str, bound: float = 1.0) -> None:
    """Refuse (one-line :class:`ScenarioError`, exit 2) a fit faster than ``bound`` x the
    link's wire rate or with a mean error above :data:`MAX_MEAN_ERROR`."""
    if fit.efficiency > bound:
        raise ScenarioError(
            f"{what}: {fit.bandwidth_gb_s:.4g} GB/s per GPU is {fit.efficiency:.2f} x the link's wire rate "
            f"{fit.nominal_gb_s:.4g} GB/s (at most {bound:g}): not written; wrong link, wrong --nics-per-node, "
            "or a log the model's form cannot price",
            file=fit.logs[0],
        )
    if fit.mean_abs_error > MAX_MEAN_ERROR:
        raise ScenarioError(
            f"{what}: latency {fit.latency_us:.3g} us and {fit.bandwidth_gb_s:.4g} GB/s per GPU leave a mean "
            f"|error| of {fit.mean_abs_error:.0%} over {fit.points} rows (at most {MAX_MEAN_ERROR:.0%}): not "
            "written; the times do not follow latency + bytes / bandwidth",
            file=fit.logs[0],
        )


def fit_link(
    link: Interconnect, logs: Sequence[NcclLog], *, nics_per_node: int | None, inner_link: InnerLink = None
) -> LinkFits:
    """Each collective of ``logs`` fitted to its own rate, each checked (:func:`check_plausible`),
    then the joint fit of those that run as rings (an in-network all-reduce is recorded, not
    applied: the model prices every collective of a tier at one rate)."""
    out = []
    for coll in dict.fromkeys(lg.collective for lg in logs):
        group = [lg for lg in logs if lg.collective == coll]
        fit = fit_tier(link, group, nics_per_node=nics_per_node, inner_link=inner_link)
        check_plausible(fit, f"{coll} on link '{link.name}'", MAX_EFFICIENCY.get(coll, 1.0))
        alg = _algorithm(coll, fit, group[0].nodes > 1)
        out.append(CollectiveFit(collective=coll, algorithm=alg, fit=fit, applied=alg != "in-network"))
    ring = [lg for lg in logs if any(c.applied and c.collective == lg.collective for c in out)]
    joint = None
    if ring:
        joint = fit_tier(link, ring, nics_per_node=nics_per_node, inner_link=inner_link)
        check_plausible(
            joint, f"link '{link.name}' (joint fit of {', '.join(c.collective for c in out if c.applied)})"
        )
    return LinkFits(collectives=tuple(out), joint=joint)


def overlay_fields(fit: TierFit) -> dict[str, float]:
    """The link's overlay fields: ``efficiency`` (at most 1: :func:`check_plausible` refused
    faster fits) and ``latency_us``, unless the logs left it undetermined (``latency_pinned``)."""
    out = {"efficiency": round(fit.efficiency, 4)}
    if not fit.latency_pinned:
        out["latency_us"] = round(fit.latency_us, 4)
    return out
