"""``shardmeter sensitivity``: which resource would buy the most throughput, and at what cost.

One batch of :func:`~shardmeter.model.evaluate.evaluate`: row 0 is the scenario, each other
row changes one input on every island by the relative ``step`` (default :data:`STEP`, +10 %;
latencies -10 %). The inputs (:func:`inputs_of`) are the GPU's peak FLOP/s, memory bandwidth
and memory capacity, each network tier's bandwidth and latency (grouped by role and link:
"inter-node bandwidth (ib-hdr)"), the WAN link's with several islands, and the price per
GPU-hour. For each the document gives

* ``throughput_gain_pct`` ``Y = (t_0 / t_r - 1) x 100`` and ``elasticity`` ``Y / (100 step)``,
  a finite-difference d ln throughput / d ln input (per *less* latency for a latency);
* ``cost_change_pct`` and ``cost_elasticity``, the same for the dollars per step (every GPU an
  island has, for the step, plus its egress: :mod:`shardmeter.report.pricing`); to the price per
  GPU-hour it is 1 without egress, to anything that shortens the step negative;
* ``feasible`` and ``memory_headroom_gb`` (the smallest ``capacity - need`` over islands), so
  the memory capacity's entry says whether the plan starts, or stops, fitting.

Ranked by throughput gain (an infeasible scenario: the changes that make it feasible first).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from shardmeter.errors import ShardMeterError
from shardmeter.estimator import Estimator
from shardmeter.inputs.bundles import ModelInputs
from shardmeter.load.variants import Override, ScenarioSource
from shardmeter.model.evaluate import evaluate
from shardmeter.model.outputs import Outputs
from shardmeter.report.build import build_report
from shardmeter.report.pricing import egress_usd, egress_usd_per_gb, gpu_hour_usd, gpu_time_usd
from shardmeter.resolve.resolver import Resolved

__all__ = ["SensitivityInput", "inputs_of", "sensitivity", "check_step", "STEP", "PRICE"]

#: Default relative change of each input.
STEP = 0.10
#: The pseudo-column of the price per GPU-hour (no model input: only the cost reads it).
PRICE = "price.usd_per_gpu_hour"


@attrs.frozen
class SensitivityInput:
    """One input changed by the step: its stable ``key``, readable ``label``, ``sign`` (+1
    more, -1 less) and the columns it scales, each with an ``(I, T)`` tier mask or None."""

    key: str
    label: str
    sign: int
    columns: tuple[tuple[str, Any], ...]


def check_step(step: Any) -> float:
    """``step`` as a float, else a one-line :class:`ShardMeterError` naming it."""
    # compared as given: float() of an integer beyond float range raises, and NaN compares false
    if isinstance(step, bool) or not isinstance(step, (int, float, numbers.Real)) or not 0 < step < 1:  # type: ignore[operator]
        raise ShardMeterError(f"step: expected a relative change > 0 and < 1 (0.1 is 10 %), got {step!r}")
    return float(step)


def _names(items: Sequence[str]) -> str:
    return ", ".join(dict.fromkeys(items))


def _tier_inputs(resolved: Resolved, n_tiers: int) -> list[SensitivityInput]:
    """Bandwidth and latency of each (role, link) of the islands' tiers: a tier whose domain
    is at most ``gpus_per_node`` GPUs is intra-node, the others inter-node (docs/scenario.md)."""
    n_isl = len(resolved.islands)
    groups: dict[tuple[str, str], np.ndarray] = {}
    words: dict[tuple[str, str], str] = {}
    for j, isl in enumerate(resolved.islands):
        pad = n_tiers - len(isl.tiers)  # padded on the inside (build.tier_arrays)
        for t, tier in enumerate(isl.tiers):
            inner = tier.gpus is not None and tier.gpus <= isl.gpus_per_node and t < len(isl.tiers) - 1
            role = "intra_node" if inner else "inter_node"
            mask = groups.setdefault((role, tier.link.name), np.zeros((n_isl, n_tiers), dtype=bool))
            mask[j, pad + t] = True
            # an NVLink domain larger than a node (NVL72) is not "inter-node" to a reader
            scale_up = tier.link.kind == "scale-up" and not inner
            words[role, tier.link.name] = "scale-up domain" if scale_up else role.replace("_", "-")
    out = []
    for what, col, sign in (
        ("bandwidth", "topology.tier_bytes_s", +1),
        ("latency", "topology.tier_latency_s", -1),
    ):
        for (role, link), mask in groups.items():
            several = sum(r == role for r, _ in groups) > 1
            key = f"{role}_{what}" + (f"[{link}]" if several else "")
            label = f"{words[role, link]} {what} ({link})"
            out.append(SensitivityInput(key, label, sign, ((col, mask),)))
    return out


def inputs_of(resolved: Resolved, n_tiers: int) -> list[SensitivityInput]:
    """The inputs :func:`sensitivity` changes for this scenario, in table order."""
    gpus = _names([isl.gpu.name for isl in resolved.islands])
    costs = _names([isl.cost.name if isl.cost is not None else "none" for isl in resolved.islands])
    out = [
        SensitivityInput(
            "gpu_flops",
            f"GPU peak FLOP/s ({gpus})",
            +1,
            (("hardware.peak_flops", None), ("hardware.peak16_flops", None)),
        ),
        SensitivityInput(
            "hbm_bandwidth", f"GPU memory bandwidth ({gpus})", +1, (("hardware.hbm_bytes_s", None),)
        ),
        SensitivityInput(
            "memory_capacity", f"GPU memory capacity ({gpus})", +1, (("hardware.memory_bytes", None),)
        ),
        *_tier_inputs(resolved, n_tiers),
    ]
    if len(resolved.islands) > 1 and resolved.network is not None:
        wan = resolved.network.name
        out.append(
            SensitivityInput("wan_bandwidth", f"WAN bandwidth ({wan})", +1, (("network.wan_bytes_s", None),))
        )
        out.append(
            SensitivityInput("wan_latency", f"WAN latency ({wan})", -1, (("network.wan_latency_s", None),))
        )
    out.append(SensitivityInput("gpu_hour_price", f"price per GPU-hour ({costs})", +1, ((PRICE, None),)))
    return out


def _cost_per_step(resolved: Resolved, out: Outputs, row: int, price_scale: float) -> float | None:
    """Dollars of one step of ``row``: every GPU of every island for the step at its GPU-hour
    price (x ``price_scale``), plus its egress (:mod:`shardmeter.report.pricing`); None if unpriced."""
    step = float(np.asarray(out.step_time_s)[row])
    egress = float(np.asarray(out.egress_bytes_per_step)[row])
    total = 0.0
    for isl in resolved.islands:
        price = gpu_hour_usd(isl) * price_scale
        total += gpu_time_usd(isl.gpus, price, step) + egress_usd(
            egress, egress_usd_per_gb(isl, resolved.network)
        )
    return total if math.isfinite(total) else None


def _headroom(out: Outputs, row: int) -> float | None:
    """The smallest memory left free on a GPU over islands (GB; negative: missing)."""
    isl = out.island
    h = float(np.min(isl.memory_capacity_bytes[row] / 1e9 - isl.memory_bytes[row] / 1e9))
    return h if math.isfinite(h) else None


def _pct(new: float | None, old: float | None) -> float | None:
    return (new / old - 1.0) * 100.0 if new is not None and old else None


def _summary(inp: SensitivityInput, e: dict[str, Any], step: float, base_ok: bool, h0: float | None) -> str:
    more = f"{step * 100:g} % {'more' if inp.sign > 0 else 'less'} {inp.label}"
    if not base_ok:
        return (
            f"{more} makes the plan feasible"
            if e["feasible"]
            else f"{inp.label}: still infeasible when changed"
        )
    if not e["feasible"]:
        return f"{more} makes the plan infeasible"
    text = f"{more} buys {e['throughput_gain_pct']:.2f} % throughput"
    if inp.key == "memory_capacity" and h0 is not None and e["memory_headroom_gb"] is not None:
        text += f" (memory left free per GPU {h0:.1f} -> {e['memory_headroom_gb']:.1f} GB)"
    elif inp.key == "gpu_hour_price" and e["cost_change_pct"] is not None:
        text += f" and costs {e['cost_change_pct']:+.2f} %"
    return text


def sensitivity(
    source: ScenarioSource,
    *,
    estimator: Estimator | None = None,
    overrides: str | Sequence[Override] = (),
    step: float = STEP,
) -> dict[str, Any]:
    """The ``sensitivity --json`` document: throughput and cost elasticities to each input,
    ranked (see the module docstring); ``step`` is the relative change (0 < step < 1)."""
    step = check_step(step)
    est = estimator or Estimator()
    resolved = est.resolve(est.load(source, overrides))
    base, table = est.inputs(resolved)
    cols = base.columns()
    res = inputs_of(resolved, np.shape(cols["topology.tier_bytes_s"])[-1])
    n = 1 + len(res)
    inp = {k: np.repeat(np.asarray(v, dtype=float), n, axis=0) for k, v in cols.items()}
    for row, item in enumerate(res, start=1):
        for col, mask in item.columns:
            if col == PRICE:
                continue
            scaled = inp[col][row] * (1.0 + item.sign * step)
            inp[col][row] = scaled if mask is None else np.where(mask, scaled, inp[col][row])
    with np.errstate(all="ignore"):
        out = evaluate(ModelInputs.from_columns(inp), table)
    report = build_report(resolved, out, row=0)
    ok0 = report.feasible
    t0 = report.step_time_s
    c0 = _cost_per_step(resolved, out, 0, 1.0) if ok0 else None
    h0 = _headroom(out, 0)
    step_s = np.asarray(out.step_time_s)
    entries: list[dict[str, Any]] = []
    for row, item in enumerate(res, start=1):
        ok = bool(out.feasible[row]) and math.isfinite(float(step_s[row]))
        t = float(step_s[row]) if ok else None
        price_scale = 1.0 + step if item.columns[0][0] == PRICE else 1.0
        c = _cost_per_step(resolved, out, row, price_scale) if ok else None
        gain = _pct(t0, t) if ok0 else None
        cost = _pct(c, c0)
        e = {
            "resource": item.key,
            "label": item.label,
            "change": f"{'+' if item.sign > 0 else '-'}{step * 100:g}%",
            "inputs": [col for col, _ in item.columns],
            "feasible": ok,
            "step_time_s": t,
            "throughput_gain_pct": gain,
            "elasticity": gain / (step * 100.0) if gain is not None else None,
            "cost_change_pct": cost,
            "cost_elasticity": cost / (step * 100.0) if cost is not None else None,
            "memory_headroom_gb": _headroom(out, row),
        }
        e["summary"] = _summary(item, e, step, ok0, h0)
        entries.append(e)
    if ok0:
        entries.sort(
            key=lambda e: -(e["throughput_gain_pct"] if e["throughput_gain_pct"] is not None else -math.inf)
        )
    else:
        entries.sort(key=lambda e: not e["feasible"])
    for rank, e in enumerate(entries, start=1):
        e["rank"] = rank
    return {
        "feasible": ok0,
        "reasons": report.reasons,
        "step_time_s": t0,
        "tokens_per_s": report.tokens_per_s,
        "bottleneck": report.bottleneck,
        "regime": report.regime,
        "cost_usd": report.cost_usd,
        "cost_per_step_usd": c0,
        "memory_per_gpu_gb": report.memory_per_gpu_gb,
        "memory_capacity_gb": report.memory_capacity_gb,
        "memory_headroom_gb": h0,
        "step": step,
        "change_pct": step * 100.0,
        "resources": entries,
    }
