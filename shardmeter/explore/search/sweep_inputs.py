"""The sweep's fast path: parse and resolve once, then vary the resolved inputs.

The varied keys split in two (:func:`fast_keys`):

* *fast* keys change one numeric input column of the model and one field of the scenario:
  ``training.global_batch`` / ``micro_batch``, ``island[i].nodes``, the parallel degrees
  (``parallelism.tp/pp/dp/cp/ep/virtual_stages/sequence_parallel``, or an island's own) and the
  WAN link's ``network.link.bandwidth_gb_s`` / ``latency_us``;
* every other key (a GPU or link name, a precision, a strategy or its option) is
  *structural*: the rows are grouped by their structural values and each group is loaded and
  resolved once (its first row, so the same keys are present and the notes agree).

Validation (:func:`check_rows`) loads and resolves each group once per distinct value of
each fast key (the other fast keys at the scenario's values): a load or resolve check on a
fast key reads that key alone and the group (a count's range, a tier's size against
``nodes x gpus_per_node``, an inter-node link for ``nodes > 1``), so a row fails exactly when
one of its values does. The first failing row in grid order is then loaded or resolved as
the per-row path does, so its one-line error is the same, word for word.

The input columns of all rows (:func:`grid_columns`) are the groups' columns gathered per
row, each fast key's column replaced by the value its own load gave (built by
:func:`shardmeter.inputs.build.build_inputs`, so units and link efficiencies are the build's), and
``dp`` recomputed where it fills the island. A row's scenario (:func:`row_scenario`) is its
group's with the fast fields replaced (``attrs.evolve``): equal to loading the row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from shardmeter.errors import ShardMeterError
from shardmeter.estimator import Estimator
from shardmeter.inputs.bundles import PartTable
from shardmeter.load.specs import Scenario
from shardmeter.load.variants import with_overrides
from shardmeter.resolve.resolver import Resolved

__all__ = ["FastKey", "fast_keys", "GridPlan", "plan_grid", "grid_columns", "row_scenario", "NotFast"]

_ISL = re.compile(r"^islands?\[(\d+)\]\.(.+)$")
_DEGREES = ("tp", "pp", "cp", "ep", "dp", "virtual_stages", "sequence_parallel")
_TRAINING = {"training.micro_batch": "micro_batch", "training.global_batch": "global_batch"}
_NETWORK = {
    "network.link.bandwidth_gb_s": ("bandwidth_gb_s", "network.wan_bytes_s"),
    "network.link.latency_us": ("latency_us", "network.wan_latency_s"),
}
#: Input columns whose change makes ``dp`` (when not given) fill the island anew.
_FILL_COLUMNS = ("topology.nodes", "layout.tp", "layout.pp", "layout.cp")


class NotFast(ShardMeterError):
    """The fast path's premise failed for this grid (the caller falls back to the per-row path)."""


@attrs.frozen
class FastKey:
    """A fast key: the input ``column`` it sets on ``islands`` (none: no effect on the model,
    as a WAN key with one island) and where it lives in a :class:`Scenario` (``kind``:
    ``training``, ``nodes``, ``parallelism``, ``island_parallelism`` or ``network``; ``island``;
    ``field``)."""

    key: str
    column: str | None
    islands: tuple[int, ...]
    kind: str
    field: str
    island: int = -1


def fast_keys(keys: Sequence[str], sc: Scenario) -> dict[str, FastKey]:
    """The fast keys among ``keys`` for scenario ``sc`` (see the module docstring). A WAN key
    is fast only when no other ``network`` key is structural (a link name changes the link)."""
    n = len(sc.islands)
    own = [isl.parallelism is not None for isl in sc.islands]
    out: dict[str, FastKey] = {}
    for k in keys:
        m = _ISL.match(k)
        if m:
            i, rest = int(m.group(1)), m.group(2)
            if i >= n:
                continue
            if rest == "nodes":
                out[k] = FastKey(k, "topology.nodes", (i,), "nodes", "nodes", i)
            elif rest.startswith("parallelism.") and rest[12:] in _DEGREES and own[i]:
                out[k] = FastKey(k, f"layout.{rest[12:]}", (i,), "island_parallelism", rest[12:], i)
        elif k.startswith("parallelism.") and k[12:] in _DEGREES and not any(own):
            out[k] = FastKey(k, f"layout.{k[12:]}", tuple(range(n)), "parallelism", k[12:])
        elif k in _TRAINING:
            # an island's own micro_batch is not training.micro_batch's to set
            own_mbs = k == "training.micro_batch"
            keep = tuple(j for j, isl in enumerate(sc.islands) if not (own_mbs and isl.micro_batch))
            out[k] = FastKey(k, k if keep else None, keep, "training", _TRAINING[k])
        elif k in _NETWORK:
            field, col = _NETWORK[k]
            out[k] = FastKey(k, col if n > 1 else None, tuple(range(n)) if n > 1 else (), "network", field)
    if any(k.startswith("network.") and k not in out for k in keys):
        out = {k: f for k, f in out.items() if f.kind != "network"}
    return out


def _read(sc: Scenario, fk: FastKey) -> Any:
    """The value of fast key ``fk`` in scenario ``sc`` (as loading structured it)."""
    if fk.kind == "training":
        return getattr(sc.training, fk.field)
    if fk.kind == "nodes":
        return sc.islands[fk.island].nodes
    if fk.kind == "parallelism":
        return getattr(sc.parallelism, fk.field)
    if fk.kind == "island_parallelism":
        return getattr(sc.islands[fk.island].parallelism, fk.field)
    link = sc.network.link if sc.network is not None else None
    if not isinstance(link, Mapping):
        raise NotFast(f"{fk.key}: the link is not a table")
    return link[fk.field]


def row_scenario(sc: Scenario, values: Sequence[tuple[FastKey, Any]]) -> Scenario:
    """Scenario ``sc`` with each fast key's field set to its value (``attrs.evolve``)."""
    training: dict[str, Any] = {}
    par: dict[str, Any] = {}
    islands: dict[int, dict[str, Any]] = {}
    isl_par: dict[int, dict[str, Any]] = {}
    link: dict[str, Any] = {}
    for fk, v in values:
        if fk.kind == "training":
            training[fk.field] = v
        elif fk.kind == "nodes":
            islands.setdefault(fk.island, {})["nodes"] = v
        elif fk.kind == "parallelism":
            par[fk.field] = v
        elif fk.kind == "island_parallelism":
            isl_par.setdefault(fk.island, {})[fk.field] = v
        else:
            link[fk.field] = v
    changes: dict[str, Any] = {}
    if training:
        changes["training"] = attrs.evolve(sc.training, **training)
    if par:
        changes["parallelism"] = attrs.evolve(sc.parallelism, **par)
    if islands or isl_par:
        isls = list(sc.islands)
        for i in set(islands) | set(isl_par):
            ch = dict(islands.get(i, {}))
            own = isls[i].parallelism
            if i in isl_par and own is not None:  # a fast key of an island's own parallelism
                ch["parallelism"] = attrs.evolve(own, **isl_par[i])
            isls[i] = attrs.evolve(isls[i], **ch)
        changes["islands"] = tuple(isls)
    if link and sc.network is not None:
        changes["network"] = attrs.evolve(sc.network, link={**sc.network.link, **link})
    return attrs.evolve(sc, **changes) if changes else sc


@attrs.define
class GridPlan:
    """The fast path's view of the rows to compute: ``group`` of each row, each group's
    scenario, resolved scenario and input columns (``(1, I)``), and per fast key the index
    of each row's value (``index``) and, per group and value, the value as loaded
    (``loaded``) and its input column (``column``, ``(G, n, len(islands))``)."""

    fast: dict[str, FastKey]
    group: np.ndarray
    scenarios: list[Scenario]
    resolved: list[Resolved]
    columns: list[dict[str, np.ndarray]]
    index: dict[str, np.ndarray]
    loaded: dict[str, list[list[Any]]]
    column: dict[str, np.ndarray]

    def scenario(self, r: int) -> Scenario:
        """Row ``r``'s scenario (equal to loading it)."""
        g = int(self.group[r])
        vals = [(fk, self.loaded[k][g][int(self.index[k][r])]) for k, fk in self.fast.items()]
        return row_scenario(self.scenarios[g], vals)


def plan_grid(
    est: Estimator,
    vary: Sequence[tuple[str, Sequence[Any]]],
    todo: np.ndarray,
    base_sc: Scenario,
    loader: Callable[[Mapping[str, Any]], Scenario],
    table: PartTable,
) -> GridPlan:
    """Validate the grid rows ``todo`` (indices in grid order) and lay out their inputs.

    :raises ScenarioError: the error of the first row that does not load (else resolve), as
        the per-row path raises it.
    :raises NotFast: the premise of the fast path does not hold for this grid.
    """
    keys = [k for k, _ in vary]
    sizes = [max(1, len(v)) for _, v in vary]
    strides = [int(np.prod(sizes[j + 1 :], dtype=np.int64)) for j in range(len(keys))]
    index = {k: (todo // strides[j]) % sizes[j] for j, k in enumerate(keys)}
    fast = fast_keys(keys, base_sc)
    struct = [k for k in keys if k not in fast]
    values = dict(vary)
    group, first = _groups(index, struct, len(todo))
    check = _GroupCheck(est, table, fast, values, index, group)
    for g, f in enumerate(first):
        check.group(g, loader, {k: values[k][int(index[k][f])] for k in struct})
    for bad, stage in ((check.bad_load, "load"), (check.bad_res, "resolve")):
        if bad.any():
            r = int(np.argmax(bad))
            row = {k: values[k][int(index[k][r])] for k in keys}
            sc = loader(row)  # raises the row's own load error
            if stage == "resolve":
                est.inputs(sc, table)  # raises the row's own resolve error
            raise NotFast(f"sweep row {row}: its values pass one by one but not together")
    scenarios, resolved, columns = [], [], []
    for f in first:
        sc = loader({k: values[k][int(index[k][int(f)])] for k in keys})
        res = est.resolve(sc)
        scenarios.append(sc)
        resolved.append(res)
        columns.append(est.inputs(res, table)[0].columns())
    col_arrays = _column_arrays(fast, values, check.column, len(first))
    return GridPlan(fast, group, scenarios, resolved, columns, index, check.loaded, col_arrays)


def _groups(index: Mapping[str, np.ndarray], struct: list[str], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's group (its structural values; groups numbered in grid order) and each
    group's first row."""
    if not struct:
        return np.zeros(n, dtype=np.int64), np.zeros(1, dtype=np.int64)
    codes = np.stack([index[k] for k in struct], axis=1)
    _, first, group = np.unique(codes, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)  # groups numbered in grid order
    return np.argsort(order)[group.reshape(-1)], first[order]


@attrs.define
class _GroupCheck:
    """:func:`plan_grid`'s validation, group by group: per fast key and group the values as
    loaded and their input columns (``None``: does not load or resolve), and the rows whose
    group or values do not load (``bad_load``) or resolve (``bad_res``)."""

    est: Estimator
    table: PartTable
    fast: dict[str, FastKey]
    values: dict[str, Sequence[Any]]
    index: dict[str, np.ndarray]
    grp: np.ndarray
    loaded: dict[str, list[list[Any]]] = attrs.field(init=False)
    column: dict[str, list[list[Any]]] = attrs.field(init=False)
    bad_load: np.ndarray = attrs.field(init=False)
    bad_res: np.ndarray = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.loaded = {k: [] for k in self.fast}
        self.column = {k: [] for k in self.fast}
        self.bad_load = np.zeros(len(self.grp), dtype=bool)
        self.bad_res = np.zeros(len(self.grp), dtype=bool)

    def group(
        self, g: int, loader: Callable[[Mapping[str, Any]], Scenario], struct_row: Mapping[str, Any]
    ) -> None:
        """Check group ``g`` (its structural values ``struct_row``) and each fast key's values in it."""
        est, fast, values, index = self.est, self.fast, self.values, self.index
        in_g = self.grp == g
        try:
            sc_g = loader(struct_row)
        except ShardMeterError:
            self.bad_load[in_g] = True
            for k in fast:
                self.loaded[k].append([None] * len(values[k]))
                self.column[k].append([None] * len(values[k]))
            return
        try:
            est.resolve(sc_g)
        except ShardMeterError:
            self.bad_res[in_g] = True
        used = {k: set(np.unique(index[k][in_g]).tolist()) for k in fast}
        got = _check_values(est, self.table, _checker(est, sc_g), fast, values, used)
        for k in fast:
            self.loaded[k].append([got[k][i][0] if got[k].get(i) else None for i in range(len(values[k]))])
            self.column[k].append([got[k][i][1] if got[k].get(i) else None for i in range(len(values[k]))])
            for i in used[k]:
                if not got[k][i]:
                    bad = self.bad_load if got[k][i] is None else self.bad_res
                    bad[in_g & (index[k] == i)] = True


def _column_arrays(
    fast: dict[str, FastKey], values: Mapping[str, Sequence[Any]], column: dict[str, list[list[Any]]], G: int
) -> dict[str, np.ndarray]:
    """Per fast key with a column, its input column per group and value, ``(G, n, islands)``
    (NaN where the value does not load)."""
    col_arrays = {}
    for k, fk in fast.items():
        if fk.column is None:
            continue
        arr = np.full((G, len(values[k]), len(fk.islands)), np.nan)
        for g in range(G):
            for i, c in enumerate(column[k][g]):
                if c is not None:
                    arr[g, i] = c
        col_arrays[k] = arr
    return col_arrays


def _check_values(
    est: Estimator,
    table: PartTable,
    check: Callable[[Mapping[str, Any]], Scenario],
    fast: Mapping[str, FastKey],
    values: Mapping[str, Sequence[Any]],
    used: Mapping[str, set[int]],
) -> dict[str, dict[int, Any]]:
    """Each fast key's used values checked on one group: ``{key: {index: (value as loaded,
    input column) | None (does not load) | () (does not resolve)}}``. The keys' ``d``-th
    values are loaded together (one load per ``d``, not per value); only a combination that
    fails is checked again value by value, so each value gets its own verdict."""
    got: dict[str, dict[int, Any]] = {k: {} for k in fast}
    for d in range(max((len(values[k]) for k in fast), default=0)):
        combo = {k: values[k][d] for k in fast if d in used[k]}
        if not combo:
            continue
        verdict = _one(est, table, check, fast, combo)
        if verdict is None or verdict == ():
            verdict = {k: _one(est, table, check, fast, {k: v}) for k, v in combo.items()}
            for k, v in verdict.items():
                got[k][d] = v if v is None or v == () else v[k]
        else:
            for k in combo:
                got[k][d] = verdict[k]
    return got


def _one(
    est: Estimator,
    table: PartTable,
    check: Callable[[Mapping[str, Any]], Scenario],
    fast: Mapping[str, FastKey],
    combo: dict[str, Any],
) -> Any:
    """The fast keys of ``combo`` set together: ``{key: (value as loaded, column)}``, ``None``
    if that does not load, ``()`` if it does not resolve."""
    try:
        sc = check(combo)
    except ShardMeterError:
        return None
    try:
        cols = est.inputs(est.resolve(sc), table)[0].columns()
    except ShardMeterError:
        return ()
    out = {}
    for k in combo:
        fk = fast[k]
        col = np.asarray(cols[fk.column], dtype=float)[0, list(fk.islands)] if fk.column else None
        out[k] = (_read(sc, fk), col)
    return out


def _checker(est: Estimator, sc: Scenario) -> Callable[[Mapping[str, Any]], Scenario]:
    """``{key: value} ->`` scenario ``sc`` with those fast keys set by the load stage's rules,
    every other value as loaded (:func:`~shardmeter.load.variants.with_overrides`): raises
    exactly when loading the row would, for a fast key, which only a field of its own record
    reads."""

    def check(values: Mapping[str, Any]) -> Scenario:
        return with_overrides(sc, values.items(), registry=est.registry, as_written=False)

    return check


def grid_columns(plan: GridPlan, base_sc: Scenario) -> dict[str, np.ndarray]:
    """Input columns ``(N, I)`` of every row of ``plan`` (see the module docstring)."""
    shapes = {k: {np.shape(c[k])[1:] for c in plan.columns} for k in plan.columns[0]}
    if any(len(s) > 1 for s in shapes.values()):
        raise NotFast("the groups have different island or tier counts")
    inp = {
        k: np.concatenate([np.asarray(c[k], dtype=float) for c in plan.columns], axis=0)[plan.group]
        for k in plan.columns[0]
    }
    for k, fk in plan.fast.items():
        if fk.column is None:
            continue
        inp[fk.column][:, list(fk.islands)] = plan.column[k][plan.group, plan.index[k]]
    changed = {fk.column for fk in plan.fast.values()}
    if changed & set(_FILL_COLUMNS):
        dp_varied = {j for fk in plan.fast.values() if fk.column == "layout.dp" for j in fk.islands}
        for j in range(inp["layout.dp"].shape[1]):
            fills = np.array([_fills(sc, j) for sc in plan.scenarios])[plan.group] & (j not in dp_varied)
            fill = np.floor(
                inp["topology.nodes"][:, j]
                * inp["topology.gpus_per_node"][:, j]
                / (inp["layout.tp"][:, j] * inp["layout.pp"][:, j] * inp["layout.cp"][:, j])
            )
            inp["layout.dp"][:, j] = np.where(fills, np.maximum(1.0, fill), inp["layout.dp"][:, j])
    return inp


def _fills(sc: Scenario, j: int) -> bool:
    """Whether island ``j``'s ``dp`` is not given (it fills the island)."""
    return (sc.islands[j].parallelism or sc.parallelism).dp is None
