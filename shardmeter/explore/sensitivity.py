"""``shardmeter sensitivity``: which resource would buy the most throughput.

One batch of :func:`~shardmeter.model.evaluate.evaluate`: row 0 is the scenario,
each other row perturbs one resource on every island by :data:`STEP`
(+10 %; latencies -10 %). For each resource the report gives the throughput
gained, ``Y = (t_0 / t_r - 1) x 100 %``, and the elasticity ``Y / 10 %``
(d ln throughput / d ln resource; for a latency, per 10 % *less* latency),
ranked: the first resource is the bottleneck worth paying for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model.evaluate import evaluate
from ..model.inputs import ModelInputs
from ..report import build_report

__all__ = ["RESOURCES", "sensitivity", "STEP"]

#: Relative perturbation of each resource.
STEP = 0.10

#: (id, label, input columns scaled together, direction: +1 more, -1 less, multi-island only).
#: A tier column with ``:inner`` / ``:outer`` scales the tiers within a node (its own NVLink or
#: PCIe, and padding) or beyond it.
RESOURCES = (
    ("gpu_flops", "GPU FLOP/s (peak)", ("hardware.peak_flops", "hardware.peak16_flops"), +1, False),
    ("hbm_bandwidth", "HBM bandwidth", ("hardware.hbm_bytes_s",), +1, False),
    ("intra_node_bandwidth", "intra-node link bandwidth", ("topology.tier_bytes_s:inner",), +1, False),
    ("inter_node_bandwidth", "inter-node network bandwidth", ("topology.tier_bytes_s:outer",), +1, False),
    ("intra_node_latency", "intra-node link latency", ("topology.tier_latency_s:inner",), -1, False),
    ("inter_node_latency", "inter-node network latency", ("topology.tier_latency_s:outer",), -1, False),
    ("wan_bandwidth", "WAN bandwidth between islands", ("network.wan_bytes_s",), +1, True),
    ("wan_latency", "WAN latency between islands", ("network.wan_latency_s",), -1, True),
)


def sensitivity(source, *, estimator=None, overrides=()) -> dict[str, Any]:
    """Elasticities of throughput to each resource, ranked (see the module docstring)."""
    from ..estimator import Estimator

    est = estimator or Estimator()
    resolved = est.resolve(est.load(source, overrides))
    base, table = est.inputs(resolved)
    n_isl = len(resolved.islands)
    res = [r for r in RESOURCES if n_isl > 1 or not r[4]]
    n = 1 + len(res)
    inp = {k: np.repeat(np.asarray(v, dtype=float), n, axis=0) for k, v in base.columns().items()}
    inner = inp["topology.tier_gpus"][0] <= inp["topology.gpus_per_node"][0][..., None]  # (I, T)
    for row, (_id, _label, names, sign, _multi) in enumerate(res, start=1):
        for name in names:
            col, _, which = name.partition(":")
            scale = 1.0 + sign * STEP
            if which:
                inp[col][row] = np.where(
                    inner if which == "inner" else ~inner, inp[col][row] * scale, inp[col][row]
                )
            else:
                inp[col][row] *= scale
    with np.errstate(all="ignore"):
        out = evaluate(ModelInputs.from_columns(inp), table)
    report = build_report(resolved, out, row=0)
    doc: dict[str, Any] = {
        "feasible": bool(out["feasible"][0]),
        "reasons": report.reasons,
        "step_time_s": report.step_time_s,
        "tokens_per_s": report.tokens_per_s,
        "bottleneck": report.bottleneck,
        "regime": report.regime,
        "change_pct": STEP * 100.0,
        "resources": [],
    }
    if not doc["feasible"]:
        return doc
    t0 = float(out["step_time_s"][0])
    rows: list[dict[str, Any]] = []
    for row, (rid, label, names, sign, _multi) in enumerate(res, start=1):
        t = float(out["step_time_s"][row])
        gain = (t0 / t - 1.0) * 100.0 if out["feasible"][row] else None
        rows.append(
            {
                "resource": rid,
                "label": label,
                "change": f"{'+' if sign > 0 else '-'}{STEP:.0%}",
                "inputs": list(names),
                "step_time_s": t if out["feasible"][row] else None,
                "throughput_gain_pct": gain,
                "elasticity": gain / (STEP * 100.0) if gain is not None else None,
                "summary": (
                    f"{STEP * 100:.0f} % {'more' if sign > 0 else 'less'} {label} buys "
                    f"{gain:.2f} % throughput"
                )
                if gain is not None
                else f"{label}: infeasible when changed",
            }
        )
    rows.sort(key=lambda r: -(r["throughput_gain_pct"] if r["throughput_gain_pct"] is not None else -1e9))
    for rank, r in enumerate(rows, start=1):
        r["rank"] = rank
    doc["resources"] = rows
    return doc
