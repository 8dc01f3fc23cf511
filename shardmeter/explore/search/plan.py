"""``shardmeter plan``: search every layout of a scenario for the fastest, the
cheapest, or the Pareto front of wall-clock time against dollar cost.

The space (:mod:`.space`) is scored in chunks of candidate ids. For each
chunk, :func:`score_chunk` decodes the ids to input columns, computes the
reason bits that need no model (batch divisibility, virtual stages, layers,
layout size) with the same arithmetic as :func:`~shardmeter.model.step.evaluate`,
runs ``evaluate`` on the candidates that pass (memory and precision bits come
from it), applies the deadline and budget, and keeps a top-K or a Pareto
front. Chunks are independent, so they run serially, on local processes or on
a dask cluster (:mod:`.executors`) and merge exactly.

Candidates counted as *infeasible* are counted once per reason bit; the
memory check (bit 32) runs only for layouts that are otherwise valid.
Candidates that are exact duplicates of another (an interleaved schedule's
virtual-stage options when ``pp = 1``) are counted as ``duplicates``.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from shardmeter.errors import ShardMeterError
from shardmeter.estimator import Estimator
from shardmeter.explore.execution.allocator import keep_freed_memory
from shardmeter.explore.execution.executors import run_tasks
from shardmeter.explore.search.expected import (
    EXPECTED_OBJECTIVES,
    check_per_island,
    expected_context,
    expected_factor,
)
from shardmeter.explore.search.island_plans import infeasible_by_key, per_island_document
from shardmeter.explore.search.layouts import check_islands
from shardmeter.explore.search.pareto import merge_fronts, merge_top_k, pareto_front
from shardmeter.explore.search.pessimism import (
    PESSIMISTIC_OBJECTIVES,
    band_context,
    candidate_bands,
    pessimistic,
)
from shardmeter.explore.search.space import Space, compile_space, plan_base
from shardmeter.explore.search.to_quality import QUALITY_OBJECTIVES, quality_factor, with_quality
from shardmeter.inputs.bundles import ModelInputs
from shardmeter.load.specs import Scenario
from shardmeter.load.variants import Override, ScenarioSource, with_overrides
from shardmeter.model.evaluate import evaluate
from shardmeter.model.feasibility import REASONS
from shardmeter.model.outputs import Outputs
from shardmeter.numeric.reduce import over_islands
from shardmeter.report.band import pessimistic_time
from shardmeter.report.build import build_report
from shardmeter.report.pricing import (
    egress_usd,
    egress_usd_per_gb,
    gpu_hour_usd,
    gpu_time_usd,
    unpriced_island,
)

__all__ = ["search", "score_chunk", "DEFAULT_CHUNK", "OBJECTIVES", "MAX_TOP"]

#: A chunk's best candidates: ``(score, ids)`` for a top-K, ``(time, cost, ids)`` for a Pareto front.
Best = tuple[np.ndarray, ...]
#: Candidates per chunk (the unit of work of an executor task).
DEFAULT_CHUNK = 1 << 18
#: Candidates evaluated by the full model at once: bounds peak memory. Each ``evaluate`` call runs
#: some thousands of numpy operations whatever its size, so small batches pay that per call: on the
#: GPT-3 175B / 1536 A100 space (benchmarks/release_figures.py, 2 busy cores, 2026-12-03) 16384
#: rows gave 3.4-3.5 M candidates per CPU-second, 32768 5.0, 65536 4.7-5.5, 131072 5.6-5.7 (peak
#: RSS 151 MB against 87 MB at 32768) and 262144 5.9 (the same RSS: a chunk's survivors fill
#: no more). (16384 was the fastest when the model made fewer calls: 1.09 M rows/s then.)
EVAL_BATCH = 1 << 17
#: Model input cells (candidates x islands) evaluated at once: with several islands every
#: per-island array grows with the islands, so fewer candidates go into one ``evaluate`` call.
EVAL_CELLS = 1 << 16  # unchanged: caps one island at 65536 rows, and many islands hold no more than before
OBJECTIVES = ("time", "cost", "pareto", *QUALITY_OBJECTIVES, *PESSIMISTIC_OBJECTIVES, *EXPECTED_OBJECTIVES)
#: ``layouts``: each island its own layout and batch share (several islands), or one layout on
#: every island split by replicas (the search before per-island layouts).
LAYOUT_MODES = ("per-island", "shared")
#: Most plans ``--top`` returns: each is a full report (~1.5 ms), and a top-K is held in memory.
MAX_TOP = 10_000


def _empty(obj: dict[str, Any]) -> Best:
    e = np.zeros(0)
    return (e, e, np.zeros(0, np.int64)) if obj["kind"] == "pareto" else (e, np.zeros(0, np.int64))


def score_chunk(space: Space, bounds: tuple[int, int]) -> dict[str, Any]:
    """Score the candidates of prefixes ``start .. stop-1`` of ``space`` (each prefix
    holds ``space.R_in`` candidates): counts, reason counts, and the chunk's top-K
    or Pareto front. Pure: the same inputs give the same result."""
    keep_freed_memory()  # in this process, or the worker's
    start, stop = bounds
    obj = space.objective
    R_in = space.R_in
    prefixes = np.arange(start, stop, dtype=np.int64)
    bits, dup = space.prefix_verdict(prefixes)
    reason_counts = {b: int(np.count_nonzero(bits & b)) * R_in for b in REASONS}
    skipped = space.inner_verdict(prefixes[(bits != 0) | dup])  # the model never sees these
    for b in REASONS:
        reason_counts[b] += 0 if skipped is None else int(np.count_nonzero(skipped & b))
    okp = prefixes[(bits == 0) & ~dup]
    res: dict[str, Any] = {
        "evaluated": len(prefixes) * R_in,
        "feasible": 0,
        "duplicates": int(np.count_nonzero(dup & (bits == 0))) * R_in,
        "over_deadline": 0,
        "over_budget": 0,
        "best": _empty(obj),
    }
    price = obj.get("price")
    steps = obj.get("steps")
    inner = space.inner_columns()
    rows = min(EVAL_BATCH, EVAL_CELLS // max(1, space.n_islands))  # candidates per evaluate call
    per_eval = max(1, rows // R_in)  # prefixes per evaluate call
    for lo in range(0, len(okp), per_eval):
        pb = okp[lo : lo + per_eval]
        cid = (pb[:, None] * R_in + np.arange(R_in, dtype=np.int64)[None, :]).ravel()
        inp = dict(space.base)
        inp.update(space.prefix_columns(pb))
        inp.update(inner)
        with np.errstate(all="ignore"):
            detail = bool(obj.get("detail"))  # an expected objective's step quantile reads the breakdown
            out = _flat(evaluate(ModelInputs.from_columns(inp), space.table, detail=detail), (len(pb), R_in))
        feas = out.feasible
        rb = over_islands(np.bitwise_or, out.reasons, keepdims=False)
        for b in REASONS:
            reason_counts[b] += int(np.count_nonzero(rb & b))
        step = out.step_time_s
        assert step is not None  # not islands_only
        # priced only when the objective or the budget needs it (_objective refuses an unpriced island then)
        cost_step = _cost_per_step(out, obj) if price is not None else np.full_like(step, np.nan)
        factor = _chunk_factor(space, inp, out, len(pb)) if obj.get("quality") is not None else 1.0
        if obj.get("expected") is not None:  # failures, checkpoints, preemption, stragglers
            factor = factor * expected_factor(obj["expected"], out)
        keep = feas.copy()
        if obj.get("deadline_s") is not None:
            late = keep & (step * steps > obj["deadline_s"])
            res["over_deadline"] += int(np.count_nonzero(late))
            keep &= ~late
        if obj.get("budget_usd") is not None:
            dear = keep & (cost_step * steps > obj["budget_usd"])
            res["over_budget"] += int(np.count_nonzero(dear))
            keep &= ~dear
        res["feasible"] += int(np.count_nonzero(feas))
        cid = cid[keep]
        if obj["kind"] == "pareto":
            res["best"] = merge_fronts(res["best"], pareto_front(step[keep], cost_step[keep], cid))
        else:
            with np.errstate(invalid="ignore"):  # infeasible rows carry nan factors; dropped below
                score = (step if obj["kind"] == "time" else cost_step) * factor
            if obj.get("band") is not None:  # the slow end of each candidate's band
                bands = candidate_bands(obj["band"], inp, out, (len(pb), R_in, space.n_islands))
                score = pessimistic(score, bands)
            score = np.broadcast_to(score, step.shape)[keep]
            res["best"] = merge_top_k(res["best"], (score, cid), obj["k"])
    res["reasons"] = reason_counts
    return res


def _chunk_factor(space: Space, inp: Mapping[str, np.ndarray], out: Outputs, n_prefixes: int) -> np.ndarray:
    """Each candidate's tokens factor (``time-to-quality``, ``cost-to-quality``): from its sync
    code, its islands used and the model's parameters."""
    shape = (n_prefixes, space.R_in, space.n_islands)
    codes = np.broadcast_to(np.asarray(inp["network.sync"]), shape)[..., 0].ravel()
    replicas = np.count_nonzero(out.island.gpus > 0, axis=-1)
    return quality_factor(space.objective["quality"], space.table, codes, out.params, replicas)


def _flat(out: Outputs, rows: tuple[int, int]) -> Outputs:
    """The outputs one row per candidate: (P, R_in, ...) -> (P x R_in, ...) (the per-island
    ones keep their island axis)."""
    flat = {}
    for k, x in out.columns().items():
        v = np.asarray(x)
        per_island = k == "reasons" or k.startswith("island.")
        shape = (*rows, v.shape[-1]) if per_island else rows
        flat[k] = np.broadcast_to(v, shape).reshape((rows[0] * rows[1], *shape[2:]))
    return Outputs.from_columns(flat)


def _cost_per_step(out: Outputs, obj: dict[str, Any]) -> np.ndarray:
    """Dollars per step, as :func:`shardmeter.report.build.build_report` prices a run: every GPU
    of the nodes an island uses (a plan rents ``ceil(gpus / gpus_per_node)`` nodes), plus
    each island's egress at its own price."""
    gpn = obj["gpn"][None, :]
    billed = np.ceil(out.island.gpus / gpn - 1e-9) * gpn
    step, egress = out.step_time_s, out.egress_bytes_per_step
    assert step is not None and egress is not None  # not islands_only
    with np.errstate(all="ignore"):
        gpu = over_islands(np.add, gpu_time_usd(billed, obj["price"][None, :], step[:, None]), False)
        return gpu + egress_usd(egress, obj["egress_price"])


def _merge(acc: dict[str, Any], res: dict[str, Any], obj: dict[str, Any]) -> None:
    for k in ("evaluated", "feasible", "duplicates", "over_deadline", "over_budget"):
        acc[k] += res[k]
    for b, n in res["reasons"].items():
        acc["reasons"][b] = acc["reasons"].get(b, 0) + n
    if obj["kind"] == "pareto":
        acc["best"] = merge_fronts(acc["best"], res["best"])
    else:
        acc["best"] = merge_top_k(acc["best"], res["best"], obj["k"])


def _objective(
    sc: Scenario,
    est: Estimator,
    objective: str,
    k: int,
    deadline_days: float | None,
    budget_usd: float | None,
) -> dict[str, Any]:
    res = est.resolve(sc)
    kind = (
        QUALITY_OBJECTIVES.get(objective)
        or EXPECTED_OBJECTIVES.get(objective)
        or PESSIMISTIC_OBJECTIVES.get(objective, objective)
    )
    islands = res.islands
    expected = None
    if objective in EXPECTED_OBJECTIVES:
        params = float(np.asarray(evaluate(*est.inputs(res)).params).ravel()[0])
        expected = expected_context(res, objective, params)
    tokens = sc.training.tokens
    tokens_per_step = sc.training.global_batch * sc.model.seq_len
    if (deadline_days is not None or budget_usd is not None) and not tokens:
        flag = "--deadline-days" if deadline_days is not None else "--budget-usd"
        raise ShardMeterError(
            f"{flag} needs training.tokens in the scenario (set it, or --set training.tokens=3e11)"
        )
    price = np.array([gpu_hour_usd(isl) for isl in islands], dtype=float)
    need_cost = kind in ("cost", "pareto") or budget_usd is not None
    bad = unpriced_island(res)
    if need_cost and bad is not None:
        raise ShardMeterError(
            f"plan --objective {objective}: no GPU-hour price for '{bad.gpu.name}' in cost source "
            f"'{bad.cost.name if bad.cost else 'none'}' (island '{bad.name}'); set island.price"
        )
    # every island pays its own cost source's egress price (else the link's) for what it sends
    egress = sum(egress_usd_per_gb(isl, res.network) for isl in islands) if len(islands) > 1 else 0.0
    return {
        "kind": kind,
        "quality": res.convergence if objective in QUALITY_OBJECTIVES else None,
        "k": int(k),
        "price": price if np.all(np.isfinite(price)) else None,
        "egress_price": float(egress),
        "gpn": np.array([isl.gpus_per_node for isl in islands], float),
        "steps": (tokens / tokens_per_step) if tokens else None,
        "tokens_per_step": float(tokens_per_step),
        "band": band_context(res, est, objective),
        "expected": expected,
        "detail": expected is not None and expected.q is not None,
        "deadline_s": deadline_days * 86400.0 if deadline_days is not None else None,
        "budget_usd": float(budget_usd) if budget_usd is not None else None,
    }


def search(
    source: ScenarioSource,
    *,
    estimator: Estimator | None = None,
    overrides: str | Sequence[Override] = (),
    objective: str = "time",
    top: int = 10,
    max_gpus: int | None = None,
    budget_usd: float | None = None,
    deadline_days: float | None = None,
    only: Mapping[str, Any] | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    workers: int | None = None,
    dask: Any = None,
    progress: Callable[[int, int], None] | None = None,
    chunk_fn: Callable[[Space, tuple[int, int]], dict[str, Any]] = score_chunk,
    build_reports: bool = True,
    layouts: str | None = None,
    partial: bool = True,
) -> dict[str, Any]:
    """Search a scenario's layouts. Returns the ``plan --json`` document
    (SCENARIO.md): ``evaluated``, ``feasible``, ``seconds``, ``plans`` (best
    first) and the details of the search (``infeasible`` counts per reason key,
    ``duplicates``, ``interrupted`` when Ctrl-C stopped it early).

    ``objective``: ``"time"``, ``"cost"``, ``"pareto"``, or ``"time-to-quality"`` /
    ``"cost-to-quality"``: wall-clock (cost) times the convergence model's tokens factor
    (:mod:`.to_quality`; the model of ``[sync] convergence``, ``"diloco-fits"`` when none is
    set, and each plan's report then carries its ``quality``), or ``"time-pessimistic"`` /
    ``"cost-pessimistic"``: the slow end of each plan's confidence band (:mod:`.pessimism`;
    one island only). ``layouts``: ``"per-island"``
    (each island its own layout, node count and batch share; :mod:`.island_search`),
    ``"shared"`` (one layout on every island), or ``None`` (the default): per-island with
    several islands, shared with one. ``partial``: Ctrl-C returns the best found so far, marked
    ``interrupted`` (``plan``, which says so); False: it raises :class:`KeyboardInterrupt`, for a
    command that runs the planner inside it (``init``, ``import --gpu``) and would otherwise
    write a partial search's layout as if it were the fastest.

    Refused with a one-line :class:`ShardMeterError` before any search: ``top`` above
    :data:`MAX_TOP`, more than :data:`~.layouts.MAX_PLAN_ISLANDS` islands, a space of too many
    layouts (:data:`~.layouts.MAX_LAYOUTS`), and an ``only`` the space cannot use (see
    :mod:`.knobs`)."""

    _check_search_args(objective, top, max_gpus)
    if layouts is not None and layouts not in LAYOUT_MODES:
        raise ShardMeterError(f"--layouts must be one of {', '.join(LAYOUT_MODES)}, not {layouts!r}")
    est = estimator or Estimator()
    t0 = time.perf_counter()
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    sc = with_quality(est.load(source, overrides), objective)
    sc, node_options = _offers(sc)
    check_islands(len(sc.islands))  # before resolving them
    obj = _objective(sc, est, objective, top, deadline_days, budget_usd)
    if layouts is None:
        layouts = "per-island" if len(sc.islands) > 1 else "shared"
    if len(sc.islands) > 1 and layouts == "per-island":
        check_per_island(obj["expected"], objective)
        return per_island_document(sc, est, obj, objective, only, max_gpus, t0, build_reports, node_options)
    space = compile_space(sc, est, only=only, max_gpus=max_gpus, objective=obj)
    acc, interrupted = _score_space(space, obj, chunk_fn, chunk_size, workers, dask, progress)
    if interrupted and not partial:
        raise KeyboardInterrupt
    seconds = time.perf_counter() - t0
    plans = _plans(sc, est, space, acc["best"], obj) if build_reports else []
    return _shared_document(sc, space, obj, objective, acc, plans, seconds, interrupted)


def _shared_document(
    sc: Scenario,
    space: Space,
    obj: dict[str, Any],
    objective: str,
    acc: dict[str, Any],
    plans: list[dict[str, Any]],
    seconds: float,
    interrupted: bool,
) -> dict[str, Any]:
    """The ``plan --json`` document of a search of one layout on every island."""
    doc = {
        "evaluated": acc["evaluated"],
        "feasible": acc["feasible"],
        "seconds": seconds,
        "plans": plans,
        "objective": objective,
        "space_size": space.size,
        "candidates_per_s": acc["evaluated"] / seconds if seconds > 0 else None,
        "infeasible": infeasible_by_key(acc["reasons"]),
        "duplicates": acc["duplicates"],
        "over_deadline": acc["over_deadline"],
        "over_budget": acc["over_budget"],
        "interrupted": interrupted,
        "space": {a.name: len(a) for a in space.axes} | {"layouts": space.n_layouts},
        "per_token": obj["steps"] is None,
    }
    if obj["quality"] is not None:
        doc["convergence"] = sc.sync.convergence
    if objective == "pareto":
        doc["front"] = {
            "time": acc["best"][0].tolist(),
            "cost": acc["best"][1].tolist(),
            "ids": acc["best"][2].tolist(),
        }
    else:
        doc["ids"] = acc["best"][1].tolist()
    return doc


def _check_search_args(objective: str, top: int, max_gpus: int | None) -> None:
    if objective not in OBJECTIVES:
        raise ShardMeterError(f"--objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    if isinstance(top, bool) or not isinstance(top, numbers.Integral) or top < 1:
        raise ShardMeterError(f"--top: expected a whole number of plans >= 1, got {top!r}")
    if top > MAX_TOP:
        raise ShardMeterError(
            f"--top: at most {MAX_TOP:,} plans (got {int(top):,}); each plan is a full report"
        )
    if max_gpus is not None and max_gpus < 1:
        raise ShardMeterError("--max-gpus must be >= 1")


def _score_space(
    space: Space,
    obj: dict[str, Any],
    chunk_fn: Callable[[Space, tuple[int, int]], dict[str, Any]],
    chunk_size: int,
    workers: int | None,
    dask: Any,
    progress: Callable[[int, int], None] | None,
) -> tuple[dict[str, Any], bool]:
    """Score every chunk of ``space`` (on the chosen executor) and merge the results; Ctrl-C
    stops early and keeps what was merged. Returns the merged counts and best candidates, and
    whether the search was interrupted."""
    per = max(1, chunk_size // space.R_in)  # prefixes per task
    tasks = [(s, min(s + per, space.n_prefixes)) for s in range(0, space.n_prefixes, per)]
    acc: dict[str, Any] = {
        "evaluated": 0,
        "feasible": 0,
        "duplicates": 0,
        "over_deadline": 0,
        "over_budget": 0,
        "reasons": {},
        "best": _empty(obj),
    }
    interrupted = False
    gen = run_tasks(chunk_fn, space, tasks, workers=workers, dask=dask)
    try:
        for _task, res in gen:
            _merge(acc, res, obj)
            if progress is not None:
                progress(acc["evaluated"], space.size)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        close = getattr(gen, "close", None)
        if close is not None:
            close()
    return acc, interrupted


def _plans(
    sc: Scenario, est: Estimator, space: Space, best: Best, obj: dict[str, Any]
) -> list[dict[str, Any]]:
    """Full reports of the chosen candidates (each is a scenario ``estimate`` would take)."""
    ids = best[-1]
    start = plan_base(sc)
    names = [isl.name for isl in sc.islands]
    out = []
    for rank, i in enumerate(ids.tolist()):
        ov, plan = space.describe(i, names)
        variant = est.resolve(with_overrides(start, ov, registry=est.registry, as_written=False))
        o = evaluate(*est.inputs(variant))
        plan["report"] = build_report(variant, o).to_dict()
        plan["rank"] = rank + 1
        plan["id"] = int(i)
        tps = obj["tokens_per_step"]
        step = float(np.asarray(o.step_time_s)[0])
        plan["time_per_token_s"] = step / tps
        band = (plan["report"].get("confidence") or {}).get("band_pct")
        if band is not None:  # the slow end of the band (what the pessimistic objectives rank)
            plan["pessimistic_step_time_s"] = float(pessimistic_time(step, band / 100))
        if obj["price"] is not None:
            plan["cost_per_token_usd"] = float(_cost_per_step(o, obj)[0]) / tps
        out.append(plan)
    return out


def _offers(sc: Scenario) -> tuple[Scenario, list[list[int]] | None]:
    """A scenario with ``[[offer]]`` entries as plain islands, and each island's node counts to
    search (:func:`shardmeter.load.offers.offer_islands`: 0 and powers of two up to an offer's
    ``max_nodes``; a fixed island its own nodes); ``(sc, None)`` without offers."""
    if not getattr(sc, "offers", ()):
        return sc, None
    from shardmeter.load.offers import offer_islands

    return offer_islands(sc)
