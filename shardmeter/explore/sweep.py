"""``shardmeter sweep``: evaluate a grid of scenario variants in one vectorised pass.

Several ``--vary KEY=VALUES`` form a grid (the first key varies slowest).
The whole grid is scored by one :func:`~shardmeter.model.evaluate.evaluate` call
(or one per chunk of :data:`CHUNK_ROWS` rows, mapped over an executor):

* keys that map onto an input column of the model (:data:`ARRAY_KEYS`: node
  counts, parallel degrees, batch sizes, WAN bandwidth and latency) replace
  that column for every row; ``dp`` is recomputed where it fills the island;
* any other key (a GPU name, a precision, a recompute mode, a link name, a
  strategy's option such as ``sync.inner_steps``...) is resolved once per
  distinct value (or combination of such values), and the rows gather those
  inputs; every variant codes its strategies in one shared part table.

Each row is also loaded as a scenario (so an invalid value is an error naming
the key) and turned into a full report by :func:`~shardmeter.report.build_report`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ScenarioError, ShardMeterError
from ..estimator import Estimator
from ..model.evaluate import evaluate
from ..model.inputs import ModelInputs, PartTable
from ..report import build_report
from ..scenario import Scenario, load_scenario, scenario_tables
from .allocator import keep_freed_memory
from .executors import run_tasks
from .scaling import analyse
from .values import format_value, gpu_count_key

__all__ = ["SweepResult", "run_sweep", "grid", "ARRAY_KEYS", "gpu_count_key", "CHUNK_ROWS", "row_inputs"]

#: Rows per evaluate call (and per executor task).
CHUNK_ROWS = 1 << 14
#: Most grid points a sweep takes (each row is also loaded as a scenario and reported: ~1 ms).
MAX_GRID = 200_000

_ISL = re.compile(r"^islands?\[(\d+)\]\.(.+)$")
_PAR = {k: f"layout.{k}" for k in ("tp", "pp", "cp", "ep", "dp", "virtual_stages", "sequence_parallel")}
#: Keys (besides ``island[i].nodes`` and ``parallelism.<degree>``) with an input-column mapping.
ARRAY_KEYS = {
    "training.micro_batch": "training.micro_batch",
    "training.global_batch": "training.global_batch",
    "network.link.bandwidth_gb_s": "network.wan_bytes_s",
    "network.link.latency_us": "network.wan_latency_s",
}


def grid(vary: Sequence[tuple[str, Sequence[Any]]]) -> list[dict[str, Any]]:
    """The cross product of the varied values, first key slowest."""
    keys = [k for k, _ in vary]
    n = 1
    for _, vals in vary:
        n *= max(1, len(vals))
    if n > MAX_GRID:
        raise ShardMeterError(f"--vary: the grid has {n:,} points (limit {MAX_GRID:,}); vary fewer values")
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})[0]
        raise ShardMeterError(f"--vary {dup} is given twice")
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(vals for _, vals in vary))]


class SweepResult:
    """Rows (``vary`` values, scenario, report dict) and the grid's analysis."""

    def __init__(self, keys, rows, analysis):
        self.keys: list[str] = keys
        self.rows: list[dict[str, Any]] = rows  # {"vary", "report", optionally "resumed"}
        self.analysis: dict[str, Any] = analysis

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [{k: v for k, v in r.items() if k in ("vary", "report", "resumed")} for r in self.rows],
            "analysis": self.analysis,
        }


# ---------------------------------------------------------------------------------------------
# inputs


def _mapping(key: str, sc: Scenario):
    """(input name, island indices, transform) for an array-mapped key, or None."""
    n_isl = len(sc.islands)
    m = _ISL.match(key)
    if m:
        i, rest = int(m.group(1)), m.group(2)
        if i >= n_isl:
            return None
        if rest == "nodes":
            return "topology.nodes", [i], float
        if rest.startswith("parallelism.") and rest[12:] in _PAR and sc.islands[i].parallelism is not None:
            return _PAR[rest[12:]], [i], float
        return None
    if key.startswith("parallelism.") and key[12:] in _PAR:
        idx = [j for j, isl in enumerate(sc.islands) if isl.parallelism is None]
        return (_PAR[key[12:]], idx, float) if idx else None
    if key in ARRAY_KEYS:
        name = ARRAY_KEYS[key]
        if name.startswith("network.") and n_isl < 2:
            return name, [], float  # no effect on one island
        return name, list(range(n_isl)), float
    return None


def row_inputs(
    est,
    base_sc: Scenario,
    row_scs: Sequence[Scenario],
    rows: Sequence[Mapping[str, Any]],
    loader: Callable[[Mapping[str, Any]], Scenario],
    table: PartTable,
) -> dict[str, np.ndarray]:
    """Input columns (N rows, I islands) of the grid rows, built vectorised (see the module docstring)."""
    keys = list(rows[0]) if rows else []
    maps = {k: _mapping(k, base_sc) for k in keys}
    base_res = est.resolve(base_sc)
    # a mapped key whose effect needs resolution (a multi-node island without an inter-node link): unmapped
    for k, mp in list(maps.items()):
        if mp and mp[0] == "topology.nodes" and not base_res.islands[mp[1][0]].has_inter_node:
            maps[k] = None
    # WAN and sync columns depend on the link and strategy: mapped only if those stay the base's
    for k, mp in list(maps.items()):
        top = k.split(".")[0]
        if (
            mp
            and top in ("network", "sync")
            and any(maps[u] is None and u.split(".")[0] == top for u in keys)
        ):
            maps[k] = None
    unmapped = [k for k in keys if maps[k] is None]
    groups: dict[tuple, int] = {}
    group_of = np.empty(len(rows), dtype=np.int64)
    group_inputs = []
    for r, row in enumerate(rows):
        sig = tuple(format_value(row[k]) for k in unmapped)
        if sig not in groups:
            groups[sig] = len(groups)
            sc = loader({k: row[k] for k in unmapped}) if unmapped else base_sc
            group_inputs.append(est.inputs(sc, table)[0].columns())
        group_of[r] = groups[sig]
    inp = {
        k: np.concatenate([np.asarray(g[k], dtype=float) for g in group_inputs], axis=0)[group_of]
        for k in group_inputs[0]
    }
    net = base_res.network
    for k, mp in maps.items():
        if mp is None:
            continue
        name, idx, _ = mp
        if not idx:
            continue
        vals = np.array([float(row[k]) for row in rows])
        if name == "network.wan_bytes_s":
            vals = vals * 1e9 * net.efficiency
        elif name == "network.wan_latency_s":
            vals = vals * 1e-6
        inp[name] = inp[name].copy()
        inp[name][:, idx] = vals[:, None]
    # dp fills each island unless set: recompute where a degree, nodes or gpn changed
    if any(mp and mp[0] in ("topology.nodes", "layout.tp", "layout.pp", "layout.cp") for mp in maps.values()):
        dp_set_by_vary = {j for k, mp in maps.items() if mp and mp[0] == "layout.dp" for j in mp[1]}
        for j, isl in enumerate(base_sc.islands):
            par = isl.parallelism or base_sc.parallelism
            if par.dp is None and j not in dp_set_by_vary:
                fill = np.floor(
                    inp["topology.nodes"][:, j]
                    * inp["topology.gpus_per_node"][:, j]
                    / (inp["layout.tp"][:, j] * inp["layout.pp"][:, j] * inp["layout.cp"][:, j])
                )
                inp["layout.dp"] = inp["layout.dp"].copy()
                inp["layout.dp"][:, j] = np.maximum(1.0, fill)
    return inp


def _eval_rows(
    payload: tuple[Mapping[str, np.ndarray], PartTable], bounds: tuple[int, int]
) -> dict[str, Any]:
    inputs, table = payload
    keep_freed_memory()  # in this process, or the worker's
    a, b = bounds
    with np.errstate(all="ignore"):
        return evaluate(ModelInputs.from_columns({k: v[a:b] for k, v in inputs.items()}), table)


# ---------------------------------------------------------------------------------------------
# the sweep


def run_sweep(
    source,
    vary: Sequence[tuple[str, Sequence[Any]]],
    *,
    estimator=None,
    overrides=(),
    skip: Mapping[tuple, dict[str, Any]] | None = None,
    workers: int | None = None,
    dask: Any = None,
    chunk_rows: int = CHUNK_ROWS,
    on_progress: Callable[[list[dict]], None] | None = None,
    vectorised: bool = True,
) -> SweepResult:
    """Evaluate the grid of ``vary`` over scenario ``source``.

    :param skip: rows already known (``--resume``): formatted vary tuple -> row dict
        (``{"vary", "report", "resumed": True}``); they are not evaluated again.
    :param on_progress: called with the rows known so far (grid order) after each chunk.
    :param vectorised: ``False`` builds every row's inputs with ``Estimator.inputs`` (a check).
    """
    est = estimator or Estimator()
    src_file = None
    if isinstance(source, Scenario):  # its tables, so the rows' overrides apply as on the file
        src, base_ov, src_file = scenario_tables(source), list(overrides), source.file
    else:
        src, base_ov = source, list(overrides)
    base_sc = est.load(src, base_ov)
    rows_all = grid(vary)
    if not rows_all:
        raise ShardMeterError("--vary: the grid is empty")
    keys = [k for k, _ in vary]
    skip = dict(skip or {})

    def loader(row: Mapping[str, Any]) -> Scenario:
        try:
            return load_scenario(
                src, overrides=[*base_ov, *row.items()], registry=est.registry, file=src_file
            )
        except ScenarioError as exc:
            vals = ", ".join(f"{k}={format_value(v)}" for k, v in row.items())
            raise ScenarioError(f"{exc} (sweep row {vals})") from None

    sigs = [tuple(format_value(r[k]) for k in keys) for r in rows_all]
    todo = [i for i, s in enumerate(sigs) if s not in skip]
    row_scs = {i: loader(rows_all[i]) for i in todo}
    todo_rows = [rows_all[i] for i in todo]
    table = PartTable()
    if todo:
        if vectorised:
            inputs = row_inputs(est, base_sc, [row_scs[i] for i in todo], todo_rows, loader, table)
        else:
            per = [est.inputs(row_scs[i], table)[0].columns() for i in todo]
            inputs = {k: np.concatenate([np.asarray(p[k], dtype=float) for p in per], axis=0) for k in per[0]}
    results: list[dict[str, Any] | None] = [None] * len(rows_all)
    for i, s in enumerate(sigs):
        if s in skip:
            results[i] = skip[s]
    tasks = [(a, min(a + chunk_rows, len(todo))) for a in range(0, len(todo), chunk_rows)]
    gen = run_tasks(_eval_rows, (inputs, table), tasks, workers=workers, dask=dask) if todo else iter(())
    try:
        for (a, b), out in gen:
            for r in range(a, b):
                i = todo[r]
                sc = row_scs[i]
                rep = build_report(est.resolve(sc), out, row=r - a)
                results[i] = {"vary": rows_all[i], "report": rep.to_dict()}
            if on_progress is not None:
                on_progress([x for x in results if x is not None])
    finally:
        if hasattr(gen, "close"):
            gen.close()
    rows = [x for x in results if x is not None]
    return SweepResult(keys, rows, analyse(keys, rows))
