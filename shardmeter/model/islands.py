"""Synchronisation between islands: one global all-reduce, or DiLoCo's outer round.

Vectorised like the rest of the model: inputs broadcast to ``(N, I)`` (plans x
islands); outputs have shape ``(N, 1)`` (or ``(N,)`` for bytes).

Conventions (see also ``docs/multi-island.md``):

* **WAN bandwidth** ``wan_bw`` is the *achieved* rate of one island's uplink in
  bytes/s, one direction (the ``internet`` link's efficiency is 1.0: WAN
  figures in scenarios are goodput, as measured or derived from transfer
  times). The ring across islands runs at the pace of its slowest uplink.
* **Ring over islands** (Thakur, Rabenseifner and Gropp 2005): an all-reduce
  of ``S`` bytes across ``I`` islands sends ``2 (I-1)/I x S`` through every
  island's uplink and pays ``2 (I-1)`` latencies. Inside each island the
  collective is hierarchical: reduction across the island's own GPUs first
  (priced in the island's ``dp_comm``), then the WAN stage priced here.
* **allreduce**: the whole gradient (``p_total x grad_bytes``) every step,
  bucketed and overlapped with the backward pass of the last micro-batch
  (``ar_window``); the last bucket (``WAN_BUCKET_BYTES``) can never hide.
* **diloco** (Douillard et al. 2023, arXiv 2311.08105): every ``H`` inner
  steps one all-reduce of the pseudo-gradient at ``bits`` per parameter,
  blocking (INTELLECT-1's Table 2 is reproduced by ``CU = t_inner H / (t_inner
  H + t_allreduce)``, i.e. no overlap).
* **Streaming DiLoCo** (Douillard et al. 2025, arXiv 2501.18512): with ``F``
  fragments, each fragment (``payload / F`` bytes; total bytes per round
  unchanged, peak bandwidth divided by ``F``) is exchanged once per round,
  staggered every ``H / F`` steps, and overlaps with ``overlap_steps`` (``tau``)
  inner steps. A fragment exposes ``max(0, t_frag - min(tau, H/F) x
  t_inner)``; capping the window at ``H/F`` steps keeps the link from carrying
  more than one round's bytes per round. ``overlap_steps`` also applies with
  ``F = 1`` (the outer step overlapped with the next inner steps, as in
  "eager updates", arXiv 2502.12996).

The exposed round time is spread over the ``H`` inner steps of the round, so
``step_time_s`` is one inner step plus ``round_exposed / H`` and throughput is
an average over whole outer rounds.
"""

from __future__ import annotations

import numpy as np

__all__ = ["island_sync", "WAN_BUCKET_BYTES"]

#: Gradient bucket of a bucketed data-parallel all-reduce (PyTorch DDP's
#: default ``bucket_cap_mb = 25``): the last one is reduced after the backward
#: pass ends, so its WAN time is always exposed.
WAN_BUCKET_BYTES = 25e6


def _col(x, shape):
    """The slowest island's value (the ring runs at the pace of its slowest uplink) -> (N, 1)."""
    x = np.broadcast_to(x, np.broadcast_shapes(np.shape(x), shape))
    return np.max(x, axis=-1, keepdims=True)


def island_sync(n_isl, slow, p_total, grad_bytes, wan_bw, wan_lat, local, H, F, overlap_steps, bits, ar_window,
                shape, island_step=None):
    """Cross-island time and traffic per (inner) step.

    :param n_isl: number of islands ``I`` (an int).
    :param slow: the slowest island's inner-step time, ``(N, 1)`` seconds.
    :param p_total: parameters of the whole model.
    :param grad_bytes: bytes per gradient element of the global all-reduce.
    :param wan_bw: achieved uplink bandwidth per island, bytes/s.
    :param wan_lat: WAN latency of one ring step, s.
    :param local: ``True`` for DiLoCo-style local steps, ``False`` for a global all-reduce every step.
    :param H: inner steps per outer round; ``F``: fragments; ``overlap_steps``: tau
        (``< 0``: default, 1 with fragments, else 0); ``bits``: bits per pseudo-gradient element.
    :param ar_window: compute time under which a global all-reduce can hide, ``(N, 1)`` s; or, with
        ``island_step``, each island's own window ``(N, I)``.
    :param island_step: each island's inner-step time ``(N, I)``: the allreduce step then ends when
        the last island's WAN stage ends, ``max_i(island_step_i + exposed_i)``, and ``exposed`` is
        that minus ``slow`` (monotone: a faster island never makes the step slower).
    :returns: a dict of ``exposed`` and ``hidden`` seconds per step (``(N, 1)``), ``wan_s``
        (all WAN time per step, exposed + hidden, ``(N, 1)``), ``round_s`` (seconds the WAN
        is busy per outer round, ``(N, 1)``; per step for allreduce) and ``egress`` (bytes
        each island sends to other islands per step, ``(N,)``).
    """
    multi = n_isl > 1
    ring_frac = 2.0 * (n_isl - 1.0) / max(n_isl, 1)
    lat_ring = 2.0 * (n_isl - 1.0) * wan_lat
    H = np.maximum(H, 1.0)
    F = np.maximum(F, 1.0)
    ovl = np.where(overlap_steps < 0, np.where(F > 1, 1.0, 0.0), overlap_steps)
    # global all-reduce every step, bucketed: the last bucket is always exposed
    grad_model = p_total * grad_bytes
    t_ar = ring_frac * grad_model / wan_bw + lat_ring
    t_last = ring_frac * np.minimum(WAN_BUCKET_BYTES, grad_model) / wan_bw + lat_ring
    if island_step is None:
        ar_exposed = np.maximum(np.maximum(0.0, t_ar - ar_window), np.minimum(t_last, t_ar))
    else:  # the ring runs at its slowest uplink's pace and hides under each island's own window
        t_ar_ring, t_last_ring = _col(t_ar, shape), _col(t_last, shape)
        per_island = np.maximum(np.maximum(0.0, t_ar_ring - ar_window), np.minimum(t_last_ring, t_ar_ring))
        ar_exposed = np.maximum(_col(island_step + per_island, shape) - slow, 0.0)
    # DiLoCo outer round: F fragments of payload / F, each overlapping min(tau, H/F) inner steps
    payload = p_total * bits / 8.0
    t_frag = ring_frac * payload / F / wan_bw + lat_ring
    window = np.minimum(ovl, H / F) * slow
    round_exposed = F * np.maximum(0.0, t_frag - window)
    round_busy = F * t_frag
    sync = np.where(multi, np.where(local, round_exposed / H, ar_exposed), 0.0)
    wan = np.where(multi, np.where(local, round_busy / H, t_ar), 0.0)
    egress = np.where(multi, np.where(local, ring_frac * payload / H, ring_frac * grad_model), 0.0)
    sync, wan = _col(sync, shape), _col(wan, shape)
    return {
        "exposed": sync,
        "hidden": np.maximum(wan - sync, 0.0),
        "wan_s": wan,
        "round_s": _col(np.where(multi, np.where(local, round_busy, t_ar), 0.0), shape),
        "egress": _col(egress, shape)[..., 0],
    }
