"""``shardmeter sweep``: evaluate a grid of scenario variants at the model's speed.

Public entry (``shardmeter.sweep`` and ``cmd_sweep`` call it)::

    run_sweep(source, vary, *, estimator=None, overrides=(), skip=None, workers=None,
              dask=None, chunk_rows=CHUNK_ROWS, on_progress=None, progress=None,
              vectorised=True) -> SweepResult

``vary`` is ``[(key, values), ...]``; several keys form a grid (the first varies slowest).
The scenario is parsed and resolved once (:mod:`.sweep_inputs`): keys that only change a
numeric input (batch sizes, node counts, parallel degrees, WAN bandwidth and latency) set
that column for every row; other keys (a GPU or link name, a precision, a strategy or its
options) group the rows, each group resolved once. The whole grid is scored by one
:func:`~shardmeter.model.evaluate.evaluate` per chunk of :data:`CHUNK_ROWS` rows (mapped over
an executor), and each row's scalar report fields come from the output arrays at once
(:mod:`.sweep_rows`). A row's full report is built when it is read (``row["report"]``;
``SweepResult.to_dict()`` reads them all, about 50 us a row): a caller that only needs the
table, CSV or analysis fields should read :func:`~.sweep_rows.fields_of` (``row.fields``).

``vectorised=False`` is the per-row reference path (each row loaded, resolved, built and
reported on its own); the fast path gives the same rows, reports and errors
(``tests/test_sweep_fast.py``), and falls back to it when its premise fails for a grid.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import attrs
import numpy as np

from shardmeter.errors import ScenarioError, ShardMeterError
from shardmeter.estimator import Estimator
from shardmeter.explore.execution.allocator import keep_freed_memory
from shardmeter.explore.execution.executors import run_tasks
from shardmeter.explore.search.scaling import analyse
from shardmeter.explore.search.sweep_inputs import GridPlan, NotFast, grid_columns, plan_grid
from shardmeter.explore.search.sweep_rows import SweepRow, row_fields
from shardmeter.explore.search.values import format_value, gpu_count_key
from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.load.specs import Scenario
from shardmeter.load.variants import Override, ScenarioSource, with_overrides
from shardmeter.model.evaluate import evaluate
from shardmeter.model.outputs import Outputs
from shardmeter.report.build import build_report

__all__ = ["SweepResult", "run_sweep", "grid", "gpu_count_key", "CHUNK_ROWS"]

#: Rows per evaluate call (and per executor task).
CHUNK_ROWS = 1 << 14
#: Most grid points a sweep takes: every point is a whole report (0.5-1.1 ms of CPU, 31-58 kB of
#: memory and up to 6 kB of ``--json`` each on a loaded 2-core machine: 10,000 points took 11 s),
#: so 4,096 stay within the bounds a command keeps on a small input (10 s, 1 GB;
#: tests/test_resource_bounds.py). A larger search is ``plan``'s job, which scores candidates
#: without building their reports.
MAX_GRID = 4_096


def grid(vary: Sequence[tuple[str, Sequence[Any]]]) -> list[dict[str, Any]]:
    """The cross product of the varied values, first key slowest."""
    keys = [k for k, _ in vary]
    n = 1
    for _, vals in vary:
        n *= max(1, len(vals))
    if n > MAX_GRID:
        raise ShardMeterError(
            f"--vary: the grid has {n:,} points (limit {MAX_GRID:,}); vary fewer values, or search with plan"
        )
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})[0]
        raise ShardMeterError(f"--vary {dup} is given twice")
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(vals for _, vals in vary))]


class SweepResult:
    """Rows (``vary`` values, scenario, report dict) and the grid's analysis."""

    def __init__(self, keys: list[str], rows: list[dict[str, Any]], analysis: dict[str, Any]) -> None:
        self.keys: list[str] = keys
        self.rows: list[dict[str, Any]] = rows  # {"vary", "report", optionally "resumed"}
        self.analysis: dict[str, Any] = analysis

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [{k: v for k, v in r.items() if k in ("vary", "report", "resumed")} for r in self.rows],
            "analysis": self.analysis,
        }


def _eval_rows(payload: tuple[Mapping[str, np.ndarray], PartTable], bounds: tuple[int, int]) -> Outputs:
    inputs, table = payload
    keep_freed_memory()  # in this process, or the worker's
    a, b = bounds
    with np.errstate(all="ignore"):
        return evaluate(ModelInputs.from_columns({k: v[a:b] for k, v in inputs.items()}), table)


def _lazy_report(est: Estimator, plan: GridPlan, out: Outputs, r: int, row: int) -> dict[str, Any]:
    """Grid row ``r``'s full report (row ``row`` of chunk output ``out``)."""
    return build_report(est.resolve(plan.scenario(r)), out, row=row).to_dict()


def _per_row_inputs(est: Estimator, row_scs: Sequence[Scenario], table: PartTable) -> dict[str, np.ndarray]:
    """The reference path's input columns: each row resolved and built on its own."""
    per = [est.inputs(sc, table)[0].columns() for sc in row_scs]
    return {k: np.concatenate([np.asarray(p[k], dtype=float) for p in per], axis=0) for k in per[0]}


@attrs.frozen
class _GridInputs:
    """The rows to compute (``todo``, grid indices) and their input columns: from the fast path's
    ``plan``, or (``plan`` None) from each row's own scenario (``row_scs``)."""

    rows_all: list[dict[str, Any]]
    todo: list[int]
    table: PartTable
    inputs: dict[str, np.ndarray]
    plan: GridPlan | None
    row_scs: list[Scenario]


def _row_loader(est: Estimator, base_sc: Scenario) -> Callable[[Mapping[str, Any]], Scenario]:
    """A grid row's scenario: ``base_sc`` with the row's values, by the load stage's rules
    (:func:`~shardmeter.load.variants.with_overrides`); an error names the row."""

    def loader(row: Mapping[str, Any]) -> Scenario:
        try:
            return with_overrides(base_sc, row.items(), registry=est.registry)
        except ScenarioError as exc:
            vals = ", ".join(f"{k}={format_value(v)}" for k, v in row.items())
            raise ScenarioError(f"{exc} (sweep row {vals})") from None

    return loader


def _grid_inputs(
    est: Estimator,
    vary: Sequence[tuple[str, Sequence[Any]]],
    rows_all: list[dict[str, Any]],
    todo: list[int],
    base_sc: Scenario,
    vectorised: bool,
) -> _GridInputs:
    """The input columns of rows ``todo``: the fast path (:mod:`.sweep_inputs`) where its
    premise holds, else every row loaded, resolved and built on its own."""
    loader = _row_loader(est, base_sc)
    table = PartTable()
    plan: GridPlan | None = None
    inputs: dict[str, np.ndarray] = {}
    row_scs: list[Scenario] = []
    if todo and vectorised:
        try:
            plan = plan_grid(est, vary, np.asarray(todo, dtype=np.int64), base_sc, loader, table)
            inputs = grid_columns(plan, base_sc)
        except NotFast:
            plan = None
    if todo and plan is None:
        row_scs = [loader(rows_all[i]) for i in todo]
        inputs = _per_row_inputs(est, row_scs, table)
    return _GridInputs(rows_all, todo, table, inputs, plan, row_scs)


def _chunk_rows(est: Estimator, g: _GridInputs, out: Outputs, a: int, b: int, results: list[Any]) -> None:
    """Rows ``a .. b - 1`` of ``todo`` from their chunk's outputs ``out``, into ``results``: a
    :class:`~.sweep_rows.SweepRow` whose report is built when read, or (per-row path) a dict
    with its report."""
    plan, rows_all, todo = g.plan, g.rows_all, g.todo
    if plan is not None:
        chunk = {k: v[a:b] for k, v in g.inputs.items()}
        flds = row_fields(out, chunk, plan.group[a:b], plan.resolved)
        for r in range(a, b):
            build = partial(_lazy_report, est, plan, out, r, r - a)
            results[todo[r]] = SweepRow(rows_all[todo[r]], flds[r - a], build)
        return
    for r in range(a, b):
        rep = build_report(est.resolve(g.row_scs[r]), out, row=r - a)
        results[todo[r]] = {"vary": rows_all[todo[r]], "report": rep.to_dict()}


def run_sweep(
    source: ScenarioSource,
    vary: Sequence[tuple[str, Sequence[Any]]],
    *,
    estimator: Estimator | None = None,
    overrides: str | Sequence[Override] = (),
    skip: Mapping[tuple, dict[str, Any]] | None = None,
    workers: int | None = None,
    dask: Any = None,
    chunk_rows: int = CHUNK_ROWS,
    on_progress: Callable[[list], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    vectorised: bool = True,
) -> SweepResult:
    """Evaluate the grid of ``vary`` over scenario ``source`` (a path, a dict of tables or a
    loaded :class:`Scenario`, with ``overrides``).

    :param skip: rows already known (``--resume``): formatted vary tuple -> row dict
        (``{"vary", "report", "resumed": True}``); they are not evaluated again.
    :param on_progress: called with the rows known so far (grid order) after each chunk.
    :param progress: called with ``(rows done, rows to do)`` after each chunk (a progress bar).
    :param vectorised: ``False``: the per-row reference path.
    :raises ScenarioError: the first row (in grid order) that does not load, then the first
        that does not resolve, naming the key and the row.
    """
    est = estimator or Estimator()
    base_sc = est.load(source, overrides)
    rows_all = grid(vary)
    if not rows_all:
        raise ShardMeterError("--vary: the grid is empty")
    keys = [k for k, _ in vary]
    skip = dict(skip or {})
    sigs = [tuple(format_value(r[k]) for k in keys) for r in rows_all] if skip else None
    todo = [i for i, s in enumerate(sigs) if s not in skip] if sigs else list(range(len(rows_all)))
    grid_in = _grid_inputs(est, vary, rows_all, todo, base_sc, vectorised)
    results: list[Any] = [None] * len(rows_all)
    if sigs:
        for i, s in enumerate(sigs):
            if s in skip:
                results[i] = skip[s]
    tasks = [(a, min(a + chunk_rows, len(todo))) for a in range(0, len(todo), chunk_rows)]
    payload = (grid_in.inputs, grid_in.table)
    gen = run_tasks(_eval_rows, payload, tasks, workers=workers, dask=dask) if todo else iter(())
    done = 0
    try:
        for (a, b), out in gen:
            _chunk_rows(est, grid_in, out, a, b, results)
            done += b - a
            if progress is not None:
                progress(done, len(todo))
            if on_progress is not None:
                on_progress([x for x in results if x is not None])
    finally:
        if hasattr(gen, "close"):
            gen.close()
    rows = [x for x in results if x is not None]
    return SweepResult(keys, rows, analyse(keys, rows))
