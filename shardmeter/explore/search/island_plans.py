"""The ``plan --json`` document of the per-island search (:mod:`.island_search`): the plans
:func:`~.island_combine.select` chose, each described (:mod:`.island_describe`), its scenario
made by the load stage's rules from the plan's base (:func:`~shardmeter.load.variants.with_overrides`)
and reported in full, with the search's counts."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from shardmeter.estimator import Estimator
from shardmeter.explore.search.island_combine import ClassPlan, select
from shardmeter.explore.search.island_describe import describe
from shardmeter.explore.search.island_search import IslandSearch, search_islands
from shardmeter.explore.search.space import plan_base
from shardmeter.load.specs import Scenario
from shardmeter.load.variants import with_overrides
from shardmeter.model.evaluate import evaluate
from shardmeter.model.feasibility import REASONS
from shardmeter.report.build import build_report

__all__ = ["per_island_document", "infeasible_by_key", "INFEASIBLE_NOTE"]

#: What ``infeasible`` counts: each candidate once, under its first failed check.
INFEASIBLE_NOTE = (
    "each infeasible candidate is counted once, under the first check it fails (layout, batch "
    "split, schedule, memory); a candidate may fail several"
)


def infeasible_by_key(reasons: Mapping[int, int]) -> dict[str, int]:
    """Rejections per reason bit -> per scenario key (per-island keys summed over islands)."""
    infeasible: dict[str, int] = {}
    for b, n in sorted(reasons.items()):
        if n:
            key = REASONS[b][0].replace("[{j}]", "[*]")  # per-island keys, summed over islands
            infeasible[key] = infeasible.get(key, 0) + n
    return infeasible


def per_island_document(
    sc: Scenario,
    est: Estimator,
    obj: dict[str, Any],
    objective: str,
    only: Mapping[str, Any] | None,
    max_gpus: int | None,
    t0: float,
    build_reports: bool,
    node_options: Sequence[Sequence[int]] | None = None,
) -> dict[str, Any]:
    """Several islands, each with its own layout and batch share: the ``plan --json`` document
    (``t0``: when the search started, for ``seconds``)."""
    res = search_islands(sc, est, obj, only, max_gpus, node_options)
    chosen, counts = select(res.candidates, obj)
    seconds = time.perf_counter() - t0
    plans = [_plan(sc, est, obj, res, rank, c) for rank, c in enumerate(chosen if build_reports else [])]
    seconds_all = time.perf_counter() - t0
    doc = {
        "evaluated": res.evaluated,
        "feasible": res.feasible,
        "seconds": seconds,
        "plans": plans,
        "objective": objective,
        "layouts": "per-island",
        "space_size": res.evaluated,
        "candidates_per_s": res.evaluated / seconds if seconds > 0 else None,
        "model_rows": res.model_rows,
        "memory_rows": res.memory_rows,
        "combined_plans": res.combined_plans,
        "classes": len(res.candidates),
        "infeasible": infeasible_by_key(res.reasons),
        "infeasible_note": INFEASIBLE_NOTE,
        "duplicates": res.duplicates,
        "equivalent": counts["equivalent"],
        "over_deadline": counts["over_deadline"],
        "over_budget": counts["over_budget"],
        "interrupted": False,
        "space": res.space,
        "per_token": obj["steps"] is None,
        "report_seconds": seconds_all - seconds,
    }
    if obj["quality"] is not None:
        doc["convergence"] = sc.sync.convergence
    if objective == "pareto":
        doc["front"] = _front(chosen, obj)
    return doc


def _plan(
    sc: Scenario, est: Estimator, obj: dict[str, Any], res: IslandSearch, rank: int, c: ClassPlan
) -> dict[str, Any]:
    """Plan ``c`` described, with its full report and its islands' figures from it."""
    pv = describe(plan_base(sc), sc, c, res.context)
    plan = pv.plan
    variant = est.resolve(with_overrides(pv.base, pv.overrides, registry=est.registry, as_written=False))
    rep = build_report(variant, evaluate(*est.inputs(variant))).to_dict()
    plan["report"] = rep
    by_name = {i["name"]: i for i in rep.get("islands", [])}
    for e in plan["islands"]:
        r = by_name.get(e["name"])
        if r is not None and not e.get("dropped"):
            e.update({k: r.get(k) for k in ("step_time_s", "idle_s", "idle_fraction")})
            e["batch_share"] = r.get("batch_per_step", e["batch_share"])
    tps = obj["tokens_per_step"]
    plan["rank"] = rank + 1
    plan["predicted_step_s"] = c.step_s
    if obj["quality"] is not None:  # the batch's factor (constant over plans) as the report has it
        batch = ((rep.get("quality") or {}).get("batch") or {}).get("batch_factor", 1.0)
        plan["tokens_factor"] = c.factor * batch
    plan["time_per_token_s"] = float(rep["step_time_s"]) / tps
    if obj["price"] is not None:
        plan["cost_per_token_usd"] = c.cost_step_usd / tps
    return plan


def _front(chosen: list[ClassPlan], obj: dict[str, Any]) -> dict[str, list[float]]:
    """The Pareto front's time and cost, over the run (with ``training.tokens``) or per token."""
    unit = "usd" if obj["steps"] is not None else "usd_per_token"
    per = 1.0 / obj["tokens_per_step"] if obj["steps"] is None else obj["steps"] or 1.0
    return {
        "time_s" if obj["steps"] is not None else "time_per_token_s": [c.step_s * per for c in chosen],
        f"cost_{unit}": [c.cost_step_usd * per for c in chosen],
    }
