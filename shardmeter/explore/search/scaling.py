"""Analysis of a sweep: regimes, their transitions, scaling efficiency and the knee.

The rows of a sweep are grouped into *series*: rows that differ only in the
*x key* (the varied key that sets the GPU count when there is exactly one,
else the first varied key). Within a series rows are taken in increasing x
(numeric keys) or in the order given.

Definitions (``T`` = tokens/s of the whole system, ``G`` = GPUs used, both
from the report; infeasible rows are skipped):

* **scaling efficiency** of a row = ``(T / G) / (T0 / G0)``, its tokens/s
  per GPU relative to the series' feasible row with the fewest GPUs
  (1.0 there); ``None`` in a series whose GPU count does not change (``dp`` pinned, or a
  node count the layout does not use): there is no scaling to measure, and the analysis
  says so in ``scaling_note`` rather than claim 100 %;
* **knee** = the x value of the first feasible row ``i-1`` such that, moving
  to the next feasible row ``i`` that uses more GPUs, the marginal throughput
  per added GPU ``(T_i - T_{i-1}) / (G_i - G_{i-1})`` is less than half the
  average throughput per GPU at row ``i-1``, ``T_{i-1} / G_{i-1}``: past that
  value an added GPU buys less than half of what an average GPU already
  delivers. ``None`` when every step pays at least that much. (With doubling
  steps, the knee is the last point before a doubling that brings less than
  1.5x the throughput.)
* **regime** of a row: :func:`shardmeter.report.build.regime_of` of its breakdown
  (``compute-bound``, ``communication-bound``, ``memory-bound``,
  ``bubble-bound``); a **transition** is a pair of consecutive feasible rows
  of a series whose regimes differ.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from shardmeter.explore.search.values import fields_of, format_value, gpu_count_key

__all__ = ["analyse", "knee", "KNEE_FRACTION"]

#: Marginal / average throughput per GPU below which returns are "diminished".
KNEE_FRACTION = 0.5


def knee(xs: Sequence[Any], tps: Sequence[float], gpus: Sequence[float]) -> Any:
    """The knee of one series (see the module docstring): points ``(x, T, G)``
    in increasing order, feasible only."""
    for i in range(1, len(xs)):
        dg = gpus[i] - gpus[i - 1]
        if dg <= 0:
            continue
        marginal = (tps[i] - tps[i - 1]) / dg
        if marginal < KNEE_FRACTION * tps[i - 1] / gpus[i - 1]:
            return xs[i - 1]
    return None


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def analyse(keys: Sequence[str], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``analysis`` object of ``sweep --json`` (SCENARIO.md)."""
    if not rows:
        return {}
    gpu_keys = [k for k in keys if gpu_count_key(k) and all(_is_num(r["vary"].get(k)) for r in rows)]
    scaling = len(gpu_keys) == 1
    x = gpu_keys[0] if scaling else keys[0]
    others = [k for k in keys if k != x]
    series: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        series.setdefault(tuple(format_value(r["vary"].get(k)) for k in others), []).append(i)

    reps = [fields_of(r) for r in rows]

    def rep(i: int) -> Mapping[str, Any]:
        return reps[i]

    regime = [rep(i).get("regime") if rep(i).get("feasible") else None for i in range(len(rows))]
    gpus = [rep(i).get("gpus") for i in range(len(rows))]
    eff: list[float | None] = [None] * len(rows)
    transitions, knees = [], []
    varied = False
    for idx in series.values():
        if all(_is_num(rows[i]["vary"].get(x)) for i in idx):
            idx = sorted(idx, key=lambda i: rows[i]["vary"][x])
        fz = [i for i in idx if rep(i).get("feasible") and rep(i).get("tokens_per_s")]
        fixed = {k: rows[idx[0]]["vary"][k] for k in others}
        for a, b in itertools.pairwise(fz):
            if regime[a] != regime[b]:
                transitions.append(
                    {
                        **({"series": fixed} if others else {}),
                        "after": rows[a]["vary"][x],
                        "at": rows[b]["vary"][x],
                        "from": regime[a],
                        "to": regime[b],
                    }
                )
        if scaling and fz and len({rep(i)["gpus"] for i in fz}) > 1:
            varied = True
            g = [float(rep(i)["gpus"]) for i in fz]
            t = [float(rep(i)["tokens_per_s"]) for i in fz]
            j0 = min(range(len(fz)), key=lambda j: (g[j], j))
            per0 = t[j0] / g[j0]
            for j, i in enumerate(fz):
                eff[i] = (t[j] / g[j]) / per0
            order = sorted(range(len(fz)), key=lambda j: (g[j], j))
            k = knee([rows[fz[j]]["vary"][x] for j in order], [t[j] for j in order], [g[j] for j in order])
            knees.append({**({"series": fixed} if others else {}), "knee": k})
        elif scaling:
            knees.append({**({"series": fixed} if others else {}), "knee": None})
    out: dict[str, Any] = {"x": x, "regime": regime, "transitions": transitions, "gpus": gpus}
    if scaling:
        out["scaling_efficiency"] = eff
        out["knee"] = knees[0]["knee"] if len(knees) == 1 else None
        if len(knees) > 1:
            out["knees"] = knees
        if not varied:
            out["scaling_note"] = (
                f"the number of GPUs used does not change along {x} (is parallelism.dp pinned?): "
                "scaling_efficiency is null, and no knee"
            )
        out["knee_definition"] = (
            "first value past which the throughput bought per added GPU falls below "
            f"{KNEE_FRACTION:g} x the average throughput per GPU"
        )
    return out
