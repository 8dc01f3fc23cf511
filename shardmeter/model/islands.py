"""Islands combined: the sync strategy's exposed time, idle time of faster islands, and the
report's arrays (throughput, utilisation, the GPU-weighted breakdown).

Each island's global-batch share is proportional to its data-parallel replicas, so faster
islands finish their (inner) steps early and wait for the slowest: at every step (allreduce) or
at the outer sync (DiLoCo), the same idle time per step either way. The breakdown of the global
step is the average GPU's: each island's own terms and idle time, GPU-weighted, plus the exposed
island sync; it sums to the step. Compute utilisation is as the DiLoCo papers define it
(INTELLECT-1, Table 2): the share of wall time GPUs work on their island's step,
``1 - (island_sync + idle) / step``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..parts import WanInputs
from . import ops
from .dispatch import by_code
from .inputs import ModelInputs, PartTable
from .reduce import over_islands

__all__ = ["combine_islands", "cross_island", "SEARCH_OUTPUTS"]

#: The outputs :func:`combine_islands` gives without ``detail``: what a search ranks plans by.
SEARCH_OUTPUTS = ("feasible", "reasons", "step_time_s", "egress_bytes_per_step", "island_gpus")


def cross_island(
    parts: PartTable, inp: ModelInputs, n_isl: int, slow, island_step, params, grad_bytes, ar_window, full
) -> dict[str, Any]:
    """The sync strategy's terms (zeros with one island): ``exposed_s``, ``wan_s``, ``round_s``
    (rows..., 1) and ``egress_bytes`` (rows...)."""
    if not full:  # the scalar path: one island
        return {"exposed_s": 0.0, "wan_s": 0.0, "round_s": 0.0, "egress_bytes": 0.0}
    col = (*full[:-1], 1)
    if n_isl < 2:
        z = np.zeros(col)
        return {"exposed_s": z, "wan_s": z, "round_s": z, "egress_bytes": z[..., 0]}
    net = inp.network
    wan = WanInputs(
        islands=n_isl,
        slowest_step_s=slow,
        island_step_s=island_step,
        params=params,
        grad_bytes=grad_bytes,
        uplink_bytes_s=np.asarray(net.wan_bytes_s, dtype=float),
        latency_s=np.asarray(net.wan_latency_s, dtype=float),
        overlap_window_s=np.broadcast_to(ar_window, full),
    )

    def run(code: int) -> dict[str, Any]:
        part, opts = parts.get("sync", code)
        t = part.exchange(wan, opts)
        return {
            "exposed_s": t.exposed_s,
            "wan_s": t.wan_s,
            "round_s": t.round_s,
            "egress_bytes": np.asarray(t.egress_bytes)[..., None],
        }

    out = by_code(np.broadcast_to(net.sync, col), run)
    res = {k: np.broadcast_to(v, col) for k, v in out.items()}
    res["egress_bytes"] = res["egress_bytes"][..., 0]
    return res


def _first(x, shape):
    """Column 0 of a per-island array whose value is global (same on every island)."""
    if ops.is_scalar(x):
        return x
    return np.broadcast_to(x, shape)[..., :1]


def combine_islands(
    *,
    parts,
    inp,
    shape,
    reasons,
    terms,
    hidden,
    ar_window,
    grad_bytes,
    params,
    b_isl,
    m_int,
    mem_used,
    peak,
    mf_tok,
    hw_tok,
    tp,
    pp,
    cp,
    dp,
    detail=True,
) -> dict[str, Any]:
    """The output arrays of :func:`~.evaluate.evaluate` (see the module docstring); without
    ``detail`` only what a search ranks by (:data:`SEARCH_OUTPUTS`)."""
    island_step = sum(terms.values())
    n_isl = shape[-1] if shape else 1
    full = np.broadcast_shapes(shape, np.shape(reasons), np.shape(island_step))
    reasons, island_step = ops.broadcast(reasons, full), ops.broadcast(island_step, full)
    feasible_isl = reasons == 0
    feasible = over_islands(np.logical_and, feasible_isl)
    slow = over_islands(np.maximum, ops.where(feasible_isl, island_step, 0.0))
    params_col = _first(params, full)
    wan = cross_island(
        parts,
        inp,
        n_isl,
        slow,
        ops.where(feasible_isl, island_step, 0.0),
        params_col,
        ops.broadcast(grad_bytes, full),
        ar_window,
        full,
    )
    sync = wan["exposed_s"]
    step = slow + sync
    isl_gpus = tp * pp * cp * dp
    isl_gpus_full = ops.broadcast(isl_gpus, full)
    if not detail:
        return {
            "feasible": ops.col0(feasible),
            "reasons": reasons,
            "step_time_s": ops.col0(step),
            "egress_bytes_per_step": wan["egress_bytes"],
            "island_gpus": isl_gpus_full,
        }
    idle = slow - island_step
    total_gpus = over_islands(np.add, isl_gpus_full)
    w_gpu = isl_gpus_full / total_gpus

    def _mean(x):
        return over_islands(np.add, ops.broadcast(x, full) * w_gpu)

    col = np.shape(slow)
    bd = {k: _mean(val) for k, val in terms.items()}
    bd["island_sync"] = ops.broadcast(sync, col)
    bd["idle"] = _mean(idle)
    overlapped = {k: _mean(val) for k, val in hidden.items()}
    overlapped["island_sync"] = ops.broadcast(ops.maximum(wan["wan_s"] - sync, 0.0), col)

    tokens_step = _first(inp.training.global_batch * inp.model.seq_len, full)
    mf_tok, hw_tok = _first(mf_tok, full), _first(hw_tok, full)
    tps = tokens_step / step
    tps_gpu = tps / total_gpus
    model_tf = tps_gpu * mf_tok / 1e12
    hw_tf = tps_gpu * hw_tok / 1e12
    gpu_peak_mean = over_islands(np.add, ops.broadcast(peak * isl_gpus, full)) / total_gpus
    cu_isl = island_step / step
    cu = over_islands(np.add, ops.broadcast(cu_isl * isl_gpus, full)) / total_gpus

    def g(x):  # a global (N, 1) value as (N,)
        return ops.col0(ops.broadcast(x, col))

    return {
        "feasible": ops.col0(feasible),
        "feasible_island": feasible_isl,
        "reasons": reasons,
        "step_time_s": ops.col0(step),
        "island_step_s": island_step,
        "island_idle_s": ops.broadcast(idle, full),
        "island_breakdown": {k: ops.broadcast(val, full) for k, val in terms.items()},
        "island_util": ops.broadcast(cu_isl, full),
        "breakdown": {k: ops.col0(val) for k, val in bd.items()},
        "overlapped": {k: ops.col0(val) for k, val in overlapped.items()},
        "tokens_per_s": g(tps),
        "tokens_per_s_per_gpu": g(tps_gpu),
        "island_tokens_per_s": ops.broadcast(b_isl * inp.model.seq_len / step, full),
        "model_tflops_per_gpu": g(model_tf),
        "hardware_tflops_per_gpu": g(hw_tf),
        "mfu": g(model_tf * 1e12 / gpu_peak_mean),
        "hfu": g(hw_tf * 1e12 / gpu_peak_mean),
        "compute_utilization": g(cu),
        "memory_per_gpu_gb": over_islands(np.maximum, ops.broadcast(mem_used, full), keepdims=False) / 1e9,
        "island_memory_gb": ops.broadcast(mem_used, full) / 1e9,
        "island_gpus": isl_gpus_full,
        "island_batch": ops.broadcast(b_isl, full),
        "gpus": g(total_gpus),
        "egress_bytes_per_step": wan["egress_bytes"],
        "wan_s": g(wan["wan_s"]),
        "wan_round_s": g(wan["round_s"]),
        "model_flops_per_token": g(mf_tok),
        "params": g(params_col),
        "micro_batches": ops.broadcast(m_int, full),
        "_mem_cap_gb": ops.broadcast(inp.hardware.memory_bytes, full) / 1e9,
    }
