"""The sweep's rows: the report's scalar fields of every row from the output arrays at once,
and the full report of a row built only when it is read.

:func:`row_fields` gives, per row, what the table, the CSV, the analysis and the plot read
(``feasible``, ``reasons``, the times, rates, memory, ``gpus``, ``wall_clock_s``,
``cost_usd``, ``bottleneck``, ``regime``, ``breakdown_s``), each the number
:func:`~shardmeter.report.build.build_report` would give: the same output arrays, the report's own
functions for the words (:func:`~shardmeter.report.words.regime_of`, the reasons' messages) and the
prices (:mod:`shardmeter.report.pricing`), applied to whole columns. ``tests/test_sweep_fast.py``
holds them to the reports, field by field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from shardmeter.model.feasibility import REASONS, Reason
from shardmeter.model.outputs import BREAKDOWN_TERMS, Outputs
from shardmeter.report.build import _Figure, _fmt_int, batch_split_key
from shardmeter.report.pricing import egress_usd, egress_usd_per_gb, gpu_hour_usd, gpu_time_usd
from shardmeter.report.words import regime_of
from shardmeter.resolve.resolver import Resolved

__all__ = ["SweepRow", "row_fields", "RATE_FIELDS"]

#: Report fields read straight from the output array of that name (null when infeasible).
RATE_FIELDS = (
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "model_tflops_per_gpu",
    "mfu",
    "hfu",
    "compute_utilization",
)
_STEP_REASON = (
    "step_time_s: the predicted step time is not a finite number > 0 (a part's figures overflow the model)"
)


class SweepRow(Mapping):
    """One grid point: ``row["vary"]``, ``row["report"]`` (the full report dict, built on first
    read by ``build``) and ``row.fields`` (its scalar fields, known without building it)."""

    __slots__ = ("_build", "_report", "fields", "vary")

    def __init__(self, vary: dict[str, Any], fields: dict[str, Any], build: Callable[[], dict[str, Any]]):
        self.vary, self.fields, self._build = vary, fields, build
        self._report: dict[str, Any] | None = None

    def __getitem__(self, key: str) -> Any:
        if key == "vary":
            return self.vary
        if key == "report":
            if self._report is None:
                self._report = self._build()
            return self._report
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("vary", "report"))

    def __len__(self) -> int:
        return 2


def _col(cols: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    return np.asarray(cols[name], dtype=float)


def row_fields(
    out: Outputs, cols: Mapping[str, np.ndarray], group: np.ndarray, resolved: Sequence[Resolved]
) -> list[dict]:
    """The scalar report fields of each row of output ``out`` (see the module docstring).

    :param cols: the rows' input columns ``(N, I)``.
    :param group: each row's index into ``resolved``, the resolved scenario of its group (its
        names, prices, model and token budget; the rows' numbers come from ``cols``).
    """
    n = len(group)
    step = np.asarray(out.step_time_s, dtype=float).reshape(n)
    raw_ok = np.asarray(out.feasible, dtype=bool).reshape(n)
    feasible = raw_ok & np.isfinite(step) & (step > 0)
    tp, pp, cp, dp = (_col(cols, f"layout.{k}") for k in ("tp", "pp", "cp", "dp"))
    used = tp * pp * cp * dp
    billed = _col(cols, "topology.nodes") * _col(cols, "topology.gpus_per_node")
    gpus = used.sum(axis=1).astype(np.int64).tolist()
    mem_gb = np.asarray(out.memory_bytes, float) / 1e9
    mem = [x if math.isfinite(x) else None for x in mem_gb.tolist()]
    rates = {k: np.asarray(v, dtype=float).reshape(n).tolist() for k, v in _rates(out).items()}
    wall, cost = _wall_and_cost(out, cols, group, resolved, billed)
    assert out.breakdown is not None, "row_fields needs evaluate(..., detail=True)"
    bd_s = out.breakdown.terms()
    terms = {t: np.asarray(bd_s[t], dtype=float).reshape(n) for t in BREAKDOWN_TERMS}
    terms_l = {t: np.where(v > 0, v, 0.0).tolist() for t, v in terms.items()}
    n_isl = used.shape[1]
    keep = ("compute", "island_sync") if n_isl > 1 else ("compute",)
    feas_l = feasible.tolist()
    reason_of = _ReasonRows(out, cols, group, resolved)
    rows = []
    for r in range(n):
        f: dict[str, Any] = {"feasible": feas_l[r], "gpus": gpus[r], "memory_per_gpu_gb": mem[r]}
        if feas_l[r]:
            bd = {t: terms_l[t][r] for t in BREAKDOWN_TERMS if terms_l[t][r] > 0 or t in keep}
            f.update({k: rates[k][r] for k in RATE_FIELDS})
            f.update(
                reasons=[],
                wall_clock_s=wall[r],
                cost_usd=cost[r],
                bottleneck=max(bd, key=lambda k: bd[k]),
                regime=regime_of(bd),
                breakdown_s=bd,
            )
        else:
            reasons = reason_of(r)
            if raw_ok[r]:
                reasons.append(_STEP_REASON)
            f.update(dict.fromkeys((*RATE_FIELDS, "wall_clock_s", "cost_usd", "bottleneck", "regime")))
            f.update(reasons=reasons, breakdown_s={})
        rows.append(f)
    return rows


def _rates(out: Outputs) -> dict[str, Any]:
    """The :data:`RATE_FIELDS` of ``out``, by name."""
    rates = {
        "step_time_s": out.step_time_s,
        "tokens_per_s": out.tokens_per_s,
        "tokens_per_s_per_gpu": out.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": out.model_tflops_per_gpu,
        "mfu": out.mfu,
        "hfu": out.hfu,
        "compute_utilization": out.compute_utilization,
    }
    assert tuple(rates) == RATE_FIELDS
    return rates


def _wall_and_cost(
    out: Outputs,
    cols: Mapping[str, np.ndarray],
    group: np.ndarray,
    resolved: Sequence[Resolved],
    billed: np.ndarray,
) -> tuple[list[Any], list[Any]]:
    """``wall_clock_s`` (``training.tokens / tokens_per_s``) and ``cost_usd`` (every island's
    GPU time and egress, :mod:`shardmeter.report.pricing`) of each row; ``None`` without a budget or
    with an unknown price."""
    n = len(group)
    tokens = np.array([res.scenario.training.tokens or np.nan for res in resolved], dtype=float)[group]
    tps = np.asarray(out.tokens_per_s, dtype=float).reshape(n)
    with np.errstate(all="ignore"):
        wall = tokens / tps
        steps = tokens / (_col(cols, "training.global_batch")[:, 0] * _col(cols, "model.seq_len")[:, 0])
        egress_gb = np.asarray(out.egress_bytes_per_step, dtype=float).reshape(n) * steps / 1e9
        total = np.zeros(n)
        unpriced = np.zeros(n, dtype=bool)
        for j in range(billed.shape[1]):
            price = np.array([gpu_hour_usd(res.islands[j]) for res in resolved])[group]
            per_gb = np.array([egress_usd_per_gb(res.islands[j], res.network) for res in resolved])[group]
            unpriced |= ~np.isfinite(price)
            total = total + (gpu_time_usd(billed[:, j], price, wall) + egress_usd(egress_gb * 1e9, per_gb))
    has = ~np.isnan(tokens)
    wall_l = [w if h else None for w, h in zip(wall.tolist(), has.tolist(), strict=True)]
    cost_l = [c if ok else None for c, ok in zip(total.tolist(), (has & ~unpriced).tolist(), strict=True)]
    return wall_l, cost_l


class _ReasonRows:
    """Row ``r``'s reasons: :data:`~shardmeter.model.feasibility.REASONS` formatted with the
    values and labels of :func:`shardmeter.report.build._reasons`, read from the input columns
    instead of a resolved scenario per row (``tests/test_sweep_fast.py`` compares the two)."""

    def __init__(
        self, out: Outputs, cols: Mapping[str, np.ndarray], group: np.ndarray, resolved: Sequence[Resolved]
    ) -> None:
        self.group, self.resolved = group, resolved

        def per_island(a: Any, dtype: type = float) -> list[list[Any]]:
            a = np.asarray(a, dtype=float).reshape(len(group), -1)
            return [a[:, j].astype(dtype).tolist() for j in range(a.shape[1])]

        names = ("tp", "pp", "cp", "ep", "dp", "virtual_stages")
        self.lay = {k: per_island(cols[f"layout.{k}"], np.int64) for k in names}
        if "layout.expert_tp" in cols:
            self.lay["expert_tp"] = per_island(cols["layout.expert_tp"], np.int64)
        self.gpus = per_island(_col(cols, "topology.nodes") * _col(cols, "topology.gpus_per_node"), np.int64)
        self.mbs = per_island(_col(cols, "training.micro_batch"), np.int64)
        self.bits = per_island(out.reasons, np.int64)
        isl = out.island
        self.out = {
            "island_batch": per_island(isl.batch_sequences),
            "island_memory_gb": per_island(np.asarray(isl.memory_bytes, dtype=float) / 1e9),
            "mem_cap_gb": per_island(np.asarray(isl.memory_capacity_bytes, dtype=float) / 1e9),
            "micro_batches": per_island(isl.micro_batches),
        }

    def __call__(self, r: int) -> list[str]:
        res = self.resolved[int(self.group[r])]
        model, n_isl = res.scenario.model, len(res.islands)
        lay, out = self.lay, self.out
        reasons: list[str] = []
        for j, isl in enumerate(res.islands):
            bits = self.bits[j][r]
            if not bits:
                continue
            tp, pp, cp, dp = lay["tp"][j][r], lay["pp"][j][r], lay["cp"][j][r], lay["dp"][j][r]
            vals = {
                "tp": tp,
                "heads": model.heads,
                "cp": cp,
                "s": model.seq_len,
                "ep": lay["ep"][j][r],
                "E": model.experts,
                "dpcp": dp * cp,
                "etp_ep": (lay["expert_tp"][j][r] if "expert_tp" in lay and lay["expert_tp"][j][r] else tp)
                * lay["ep"][j][r],
                "tcd": tp * cp * dp,
                "used": tp * pp * cp * dp,
                "gpus": self.gpus[j][r],
                "bi": _fmt_int(out["island_batch"][j][r]),
                "mbs_dp": self.mbs[j][r] * dp,
                "mem_gb": _Figure(out["island_memory_gb"][j][r]),
                "cap_gb": _Figure(out["mem_cap_gb"][j][r]),
                "m": _fmt_int(out["micro_batches"][j][r]),
                "pp": pp,
                "pv": pp * lay["virtual_stages"][j][r],
                "L": model.layers,
            }
            prefix = f"island[{j}]." if n_isl > 1 and isl.own_parallelism else ""
            where = f" (island '{isl.name}')" if n_isl > 1 else ""
            for bit, key, tmpl in _TEMPLATES:
                if not bits & bit:
                    continue
                try:
                    msg = tmpl.format(**vals)
                except (KeyError, ValueError, IndexError):
                    msg = tmpl
                if key.startswith("island["):
                    label = key.format(j=j)
                else:
                    label = f"{prefix}{key}" if not key.startswith("training") else key
                if bit == int(Reason.BATCH_SPLIT):
                    label = batch_split_key(res.scenario, j)
                reasons.append(f"{label}: {msg}{where}")
        return reasons


#: ``(bit, key, message template)`` of every reason, in :data:`REASONS` order.
_TEMPLATES = [(int(bit), key, tmpl) for bit, (key, tmpl) in REASONS.items()]
