"""nccl-tests logs -> each tier's latency and achieved bandwidth, in the model's own form.

Reads the stdout of ``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf`` and
``alltoall_perf`` (NVIDIA/nccl-tests, ``src/util.cu``): the ``# Collective test starting:``
line (or the file name) says which collective; the ``#  Rank ... on HOST device ...`` lines
give the ranks and, by distinct host, the nodes; each table row gives ``size`` (bytes, the
whole buffer S: ``algbw = S / t``, doc/PERFORMANCE.md) and the out-of-place ``time`` (us).

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
inner tier's time (the one-node fit, else the catalog's link) taken off.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import attrs
import numpy as np

from shardmeter.calibrate.lsq import linear_relative, rel_errors
from shardmeter.errors import ScenarioError
from shardmeter.records import Interconnect

__all__ = ["NcclRow", "NcclLog", "TierFit", "read_nccl_log", "fit_tier", "COLLECTIVES"]

#: nccl-tests binary -> the model's collective.
COLLECTIVES = {
    "all_reduce_perf": "all_reduce",
    "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "all_to_all",
}

_RANK = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$"
)
_START = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_THREADS = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")


@attrs.frozen(kw_only=True)
class NcclRow:
    """One table row: ``size_bytes`` (S), out-of-place ``time_us`` and ``busbw_gb_s``, its
    ``line`` in the file."""

    size_bytes: int
    time_us: float
    busbw_gb_s: float
    line: int


@attrs.frozen(kw_only=True)
class NcclLog:
    """A parsed log: ``collective`` (the model's name), ``ranks``, ``nodes``, ranks per node
    ``gpus_per_node``, the ``device`` name of rank 0 and the ``rows``."""

    file: str
    collective: str
    ranks: int
    nodes: int
    gpus_per_node: int
    device: str
    rows: tuple[NcclRow, ...]


def _number(tok: str, field: str, file: str, line: int) -> float:
    try:
        v = float(tok)
    except ValueError:
        raise ScenarioError(f"expected a number, got {tok!r}", path=field, file=f"{file}:{line}") from None
    if not np.isfinite(v) or v < 0:
        raise ScenarioError(f"expected a finite number >= 0, got {tok!r}", path=field, file=f"{file}:{line}")
    return v


def _collective(name: str, started: str | None, file: str) -> str:
    if started:
        base = os.path.basename(started)
        for binary, coll in COLLECTIVES.items():
            if base.startswith(binary):
                return coll
        raise ScenarioError(
            f"'{base}' is not one of {', '.join(COLLECTIVES)}", path="Collective test starting", file=file
        )
    for binary, coll in COLLECTIVES.items():  # older nccl-tests print no starting line
        if binary.removesuffix("_perf") in os.path.basename(name):
            return coll
    raise ScenarioError(
        "cannot tell the collective: the log has no '# Collective test starting:' line; "
        f"name the file after the binary ({', '.join(COLLECTIVES)})",
        file=file,
    )


def read_nccl_log(path: str) -> NcclLog:
    """Parse one nccl-tests log (see the module docstring); a malformed row is an error naming
    the file, the line and the column."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(64 * 1024 * 1024)
    except OSError as exc:
        raise ScenarioError(f"cannot read: {exc.strerror or exc}", file=path) from None
    started = None
    hosts: dict[int, str] = {}
    device = ""
    per_iter = False
    header_seen = False
    rows: list[NcclRow] = []
    for i, raw in enumerate(text.splitlines(), 1):
        ln = raw.strip()
        if not ln:
            continue
        if ln.startswith("#"):
            if m := _START.match(ln):
                started = m.group(1)
            elif m := _RANK.match(ln):
                hosts[int(m.group(1))] = m.group(2)
                device = device or m.group(4).strip()
            elif " size " in f" {ln[1:]} " and "count" in ln and "type" in ln:
                header_seen = True
                per_iter = "i_min" in ln
            continue
        toks = ln.split()
        if not header_seen or len(toks) < 5 or not (toks[0].isdigit() and toks[1].isdigit()):
            continue  # launcher and NCCL INFO lines
        body = toks[5:]
        width = 8 if per_iter else 4
        if len(body) < width:
            raise ScenarioError(
                f"expected time, algbw, busbw and #wrong after the root column, got {len(body)} fields",
                path="time",
                file=f"{path}:{i}",
            )
        size = int(toks[0])
        t = _number(body[0], "time", path, i)
        bus = _number(body[2], "busbw", path, i)
        if body[3] not in ("N/A",) and _number(body[3], "#wrong", path, i) > 0:
            raise ScenarioError(
                "the collective returned wrong data (#wrong > 0); rerun", path="#wrong", file=f"{path}:{i}"
            )
        if size > 0 and t > 0:
            rows.append(NcclRow(size_bytes=size, time_us=t, busbw_gb_s=bus, line=i))
    if not rows:
        raise ScenarioError(
            "no nccl-tests result rows (size count type redop root time algbw busbw #wrong)", file=path
        )
    if not hosts:
        raise ScenarioError(
            "no '#  Rank N ... on HOST device D' lines: the ranks and nodes are unknown", file=path
        )
    ranks = len(hosts)
    per_host: dict[str, int] = {}
    for h in hosts.values():
        per_host[h] = per_host.get(h, 0) + 1
    if len(set(per_host.values())) != 1:
        raise ScenarioError(
            f"the nodes hold different numbers of ranks ({sorted(per_host.values())})", file=path
        )
    if ranks < 2:
        raise ScenarioError("one rank: a collective over one GPU moves nothing", file=path)
    return NcclLog(
        file=path,
        collective=_collective(path, started, path),
        ranks=ranks,
        nodes=len(per_host),
        gpus_per_node=ranks // len(per_host),
        device=device,
        rows=tuple(rows),
    )


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
    about the outer tier."""
    S = np.array([r.size_bytes for r in log.rows], dtype=float)
    t = np.array([r.time_us for r in log.rows]) * 1e-6
    n, g, N = float(log.ranks), float(log.gpus_per_node), float(log.nodes)
    zero = np.zeros_like(S)
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
    error ``mean_abs_error`` over ``points`` rows."""

    link: str
    latency_us: float
    efficiency: float
    nominal_gb_s: float
    bandwidth_gb_s: float
    mean_abs_error: float
    points: int
    logs: tuple[str, ...]


def fit_tier(
    link: Interconnect,
    logs: Sequence[NcclLog],
    *,
    nics_per_node: int | None,
    inner_link: tuple[float, float] | None = None,
) -> TierFit:
    """Fit ``latency`` and ``efficiency`` of ``link`` jointly over every row of ``logs`` (all
    one-node, or all multi-node with ``inner_link``); see the module docstring."""
    steps, traffic, times, floors, nominal = [], [], [], [], []
    alt_steps, alt_traffic, alt_times, inner_gap = [], [], [], []
    for log in logs:
        s, b, t, fl = design(log, inner_link)
        nom = nominal_bytes_s(link, log.gpus_per_node, nics_per_node, inner=log.nodes == 1)
        if log.collective == "all_reduce" and log.nodes > 1 and inner_link is not None:
            ts, tb, tt = tree_design(log, inner_link)
        else:  # no tree alternative: the ring's own design, never preferred
            ts, tb, tt = s, b, t
        keep = (t > 0) & (tt > 0)  # a row the inner tier alone would take longer than
        steps.append(s[keep])
        traffic.append(b[keep] / nom)
        times.append(t[keep])
        floors.append(fl[keep])
        alt_steps.append(ts[keep])
        alt_traffic.append(tb[keep] / nom)
        alt_times.append(tt[keep])
        inner_gap.append((t - tt)[keep])  # tree's inner time less the ring's
        nominal.append(nom)
    s_ring, b_ring, t_ring = np.concatenate(steps), np.concatenate(traffic), np.concatenate(times)
    s_tree, b_tree, t_tree = np.concatenate(alt_steps), np.concatenate(alt_traffic), np.concatenate(alt_times)
    gap = np.concatenate(inner_gap)
    floor = np.concatenate(floors)
    names = ", ".join(os.path.basename(lg.file) for lg in logs)
    tree = np.zeros_like(s_ring, dtype=bool)  # rows NCCL's tree is faster on (all-reduce)
    s_all, b_all, t_all = s_ring, b_ring, t_ring
    use = t_all > floor
    alpha, inv_eff = 0.0, 0.0
    for _ in range(10):  # rows re-assigned (a2a paced by the inner tier; ring or tree), then refit
        s_all = np.where(tree, s_tree, s_ring)
        b_all = np.where(tree, b_tree, b_ring)
        t_all = np.where(tree, t_tree, t_ring)
        if use.sum() < 2:
            raise ScenarioError(
                f"too few usable rows to fit link '{link.name}' from {names}", file=logs[0].file
            )
        alpha, inv_eff = linear_relative(np.column_stack([s_all[use], b_all[use]]), t_all[use])
        ring_t = s_ring * alpha + b_ring * inv_eff
        new_tree = s_tree * alpha + b_tree * inv_eff + gap < ring_t
        new = np.where(new_tree, s_tree * alpha + b_tree * inv_eff, ring_t) >= floor
        if np.array_equal(new, use) and np.array_equal(new_tree, tree):
            break
        use, tree = new, new_tree
    s_all, b_all, t_all = s_all[use], b_all[use], t_all[use]
    if inv_eff <= 0:
        raise ScenarioError(
            f"the times do not grow with the size: no bandwidth to fit for link '{link.name}'",
            file=logs[0].file,
        )
    err = rel_errors(s_all * alpha + b_all * inv_eff, t_all)
    nom = float(np.mean(nominal))
    return TierFit(
        link=link.name,
        latency_us=float(alpha) * 1e6,
        efficiency=1.0 / float(inv_eff),
        nominal_gb_s=nom / 1e9,
        bandwidth_gb_s=nom / float(inv_eff) / 1e9,
        mean_abs_error=float(np.mean(np.abs(err))),
        points=len(t_all),
        logs=tuple(lg.file for lg in logs),
    )


def overlay_fields(fit: TierFit, link: Interconnect) -> dict[str, float]:
    """The link's overlay fields: ``latency_us`` and ``efficiency``; an efficiency above 1 (the
    link beats its catalog wire rate, e.g. NVLink SHARP) becomes ``efficiency = 1`` with
    ``bandwidth_gb_s`` raised to match."""
    out = {"latency_us": round(fit.latency_us, 4)}
    if fit.efficiency <= 1.0:
        out["efficiency"] = round(fit.efficiency, 4)
    else:
        out["efficiency"] = 1.0
        out["bandwidth_gb_s"] = round(link.bandwidth_gb_s * fit.efficiency, 3)
    return out
