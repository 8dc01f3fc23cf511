"""Synchronisation between islands: one global all-reduce, or DiLoCo's outer step.

Vectorised like the rest of the model: inputs broadcast to (N, I) (plans x
islands); outputs have shape (N, 1).
"""

from __future__ import annotations

import numpy as np

__all__ = ["island_sync"]


def _col(x, shape):
    x = np.broadcast_to(x, np.broadcast_shapes(np.shape(x), shape))
    return np.max(x, axis=-1, keepdims=True)


def island_sync(n_isl, slow, p_total, grad_bytes, wan_bw, wan_lat, local, H, F, overlap_steps, bits, ar_window,
                shape):
    """Exposed and hidden cross-island time per (inner) step, and bytes each island sends per step.

    * ``allreduce``: a hierarchical all-reduce whose WAN stage is a ring over
      the ``I`` islands' uplinks: each island sends ``2 (I-1)/I`` of the whole
      gradient (``p_total x grad_bytes``) and pays ``2 (I-1)`` latencies
      (Thakur et al. 2005); bucketed like any DDP reduction, it overlaps with
      the last backward pass (``ar_window``).
    * ``diloco``: every ``H`` inner steps an all-reduce of the pseudo-gradient
      at ``bits`` per parameter (Douillard et al. 2023), blocking unless
      overlapped; with ``F`` fragments (Streaming DiLoCo, Douillard et al.
      2025) each fragment's exchange overlaps with ``overlap_steps`` inner
      steps, so per fragment ``max(0, t_frag - overlap_steps x t_inner)`` is
      exposed. The cost is spread over the ``H`` steps of the round.

    ``slow`` is the slowest island's inner-step time (N, 1).
    """
    multi = n_isl > 1
    ring_frac = 2.0 * (n_isl - 1.0) / max(n_isl, 1)
    lat_ring = 2.0 * (n_isl - 1.0) * wan_lat
    H = np.maximum(H, 1.0)
    F = np.maximum(F, 1.0)
    ovl = np.where(overlap_steps < 0, np.where(F > 1, 1.0, 0.0), overlap_steps)
    # global all-reduce every step
    grad_model = p_total * grad_bytes
    t_ar = ring_frac * grad_model / wan_bw + lat_ring
    ar_exposed = np.maximum(0.0, t_ar - ar_window)
    # DiLoCo outer round
    payload = p_total * bits / 8.0
    t_frag = ring_frac * payload / F / wan_bw + lat_ring
    round_exposed = F * np.maximum(0.0, t_frag - ovl * slow)
    round_hidden = F * t_frag - round_exposed
    sync = np.where(multi, np.where(local, round_exposed / H, ar_exposed), 0.0)
    hidden = np.where(multi, np.where(local, round_hidden / H, t_ar - ar_exposed), 0.0)
    egress = np.where(multi, np.where(local, ring_frac * payload / H, ring_frac * grad_model), 0.0)
    return _col(sync, shape), _col(hidden, shape), _col(egress, shape)[..., 0]
