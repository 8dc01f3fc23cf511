"""The regular axes of the plan space (see :mod:`.space`): micro-batch, pipeline schedule x
virtual stages (x the schedule's own searched options), recompute, sharding (x its searched
options) and, for several islands, sync strategy x its searched options (DiLoCo's inner steps
and compression bits).

What a part is tried at is what it declares (:meth:`~shardmeter.parts.Part.search_values`,
given the scenario's options for it), and which schedule options are copies of another with one
stage is what the schedules declare (:meth:`~shardmeter.parts.SchedulePart.one_stage_order`):
the planner never calls a part on made-up inputs nor reads meaning into an option's name.

Each option's effect on the model's input arrays is not hand-coded: it is read off
:meth:`Estimator.inputs` of the scenario with that option set (resolved once per option,
never per candidate), so the planner scores exactly what ``estimate`` would.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shardmeter.errors import ScenarioError, ShardMeterError
from shardmeter.estimator import Estimator
from shardmeter.explore.search.knobs import KNOBS, Only, only_label, pick
from shardmeter.inputs.bundles import PartTable
from shardmeter.load.specs import Scenario
from shardmeter.load.variants import with_overrides
from shardmeter.parts import VIRTUAL_STAGES, Part
from shardmeter.registry.manager import Registry
from shardmeter.resolve.resolver import structure_options

__all__ = ["Axis", "plan_axes", "VIRTUAL_STAGES", "MICRO_BATCHES"]

#: Model input columns by name (:meth:`~shardmeter.inputs.bundles.ModelInputs.columns`).
Columns = Mapping[str, np.ndarray]
#: Micro-batch sizes tried (powers of two).
MICRO_BATCHES = (1, 2, 4, 8, 16)


class Axis:
    """One regular axis: options, the scenario overrides of each, and the
    model input columns each sets (``cols[name]``: shape (options, 1 or I))."""

    def __init__(
        self,
        name: str,
        overrides: list[dict[str, Any]],
        cols: dict[str, np.ndarray],
        aux: dict[str, np.ndarray] | None = None,
    ):
        self.name, self.overrides, self.cols, self.aux = name, overrides, cols, aux or {}

    def __len__(self) -> int:
        return len(self.overrides)


def plan_axes(
    est: Estimator,
    start: Scenario,
    sc: Scenario,
    only: Only,
    base: Columns,
    table: PartTable,
    n_islands: int,
) -> list[Axis]:
    """The non-empty axes of scenario ``sc`` (``start``: the scenario a plan starts from,
    :func:`.space.plan_base`; ``base``: its input columns; ``only``: the normalised
    ``--only``). Every option's strategies are coded in ``table``."""
    reg, file = est.registry, sc.file
    t, par = sc.training, sc.parallelism
    axes = [_micro_batch_axis(only, t.global_batch, t.micro_batch)]
    axes.append(_schedule_axis(est, start, sc, only, base, table))
    recs = pick(only, "training.recompute", ["none", "selective", "full"], t.recompute)
    axes.append(_axis(est, start, "recompute", [{"training.recompute": r} for r in recs], base, file, table))
    shard = pick(only, "parallelism.sharding", reg.names("sharding"), par.sharding)
    s_ov: list[dict[str, Any]] = []
    for s in shard:
        part = reg.get("sharding", s, path="--only parallelism.sharding", file=file)
        opts, values = _declared(part, par.options, "parallelism", sc)
        s_ov.extend({"parallelism.sharding": s, **c} for c in _combos(values, opts, "parallelism", only))
    axes.append(_axis(est, start, "sharding", s_ov, base, file, table))
    if n_islands > 1:
        axes.append(_sync_axis(est, start, sc, only, base, file, table))
    return [a for a in axes if len(a)]


def _declared(part: Part, given: Mapping[str, Any], table: str, sc: Scenario) -> tuple[Any, dict[str, Any]]:
    """``(options, {key: values})``: ``part``'s options as the scenario's ``given`` keys set them,
    and the values it declares it is tried at with them
    (:meth:`~shardmeter.parts.Part.search_values`)."""
    opts = structure_options(part, given, table, sc.file)
    return opts, dict(part.search_values(opts))


def _combos(
    values: Mapping[str, Any], opts: Any, table: str, only: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The scenario overrides ``{"TABLE.KEY": value}`` of every combination of ``values``, in
    their order (one empty override for none); a key that is a knob of ``--only`` keeps the
    values ``--only`` gives it (the options' own value for the knob alone)."""
    lists = [
        pick(only, f"{table}.{k}", vals, getattr(opts, k)) if f"{table}.{k}" in KNOBS else list(vals)
        for k, vals in values.items()
    ]
    return [{f"{table}.{k}": v for k, v in zip(values, c, strict=True)} for c in itertools.product(*lists)]


def _diff_cols(
    base: Mapping[str, np.ndarray], variants: Sequence[Mapping[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """Input columns that differ between the variants (or from the base): (options, 1 or I)."""
    changed = [k for k in base if any(not np.array_equal(v[k], base[k]) for v in variants)]
    cols = {}
    for k in changed:
        arr = np.concatenate([np.asarray(v[k], dtype=float) for v in variants], axis=0)  # (options, I)
        if arr.shape[1] > 1 and np.all(arr == arr[:, :1]):
            arr = arr[:, :1]
        cols[k] = arr
    return cols


def _axis(
    est: Estimator,
    start: Scenario,
    name: str,
    overrides: list[dict[str, Any]],
    base_inputs: Columns,
    file: str | None,
    table: PartTable,
) -> Axis:
    """An axis whose options are scenario ``overrides``: each variant is the plan's base
    scenario ``start`` with them, by the load stage's rules (an option sets a strategy and its
    options, which the loader splits and checks, or a key a framework profile reads:
    :func:`~shardmeter.load.variants.with_overrides`, every other value pinned), and its input
    columns read (a variant that does not load is an error naming the option)."""
    variants = []
    for ov in overrides:
        try:
            sc = with_overrides(start, ov.items(), registry=est.registry, as_written=False)
        except ScenarioError as exc:
            raise ShardMeterError(f"plan: option {ov} of '{name}' does not load: {exc}") from None
        variants.append(est.inputs(sc, table)[0].columns())
    return Axis(name, overrides, _diff_cols(base_inputs, variants))


def _micro_batch_axis(only: dict[str, Any], global_batch: int, micro_batch: int) -> Axis:
    """Micro-batch sizes (powers of two up to the global batch): they set one input column."""
    mbs = pick(only, "training.micro_batch", [b for b in MICRO_BATCHES if b <= global_batch], micro_batch)
    return Axis(
        "micro_batch",
        [{"training.micro_batch": int(b)} for b in mbs],
        {"training.micro_batch": np.array(mbs, dtype=float)[:, None]},
    )


def _schedule_options(reg: Registry, only: Only, sc: Scenario) -> list[dict[str, Any]]:
    """Every schedule x its virtual stages x its other searched options, as each declares them
    (:meth:`~shardmeter.parts.SchedulePart.search_values`: the bundled interleaved schedule's
    ``virtual_stages`` are 2, 3, 4, 6 and 8, at most the layers; a schedule that does not search
    them runs at 1). A schedule that is one stack's engine (``SchedulePart.searched = False``) is
    tried only when the scenario or ``--only`` names it."""
    par, file = sc.parallelism, sc.file
    # a stack's own engine (searched = False, such as deepspeed-1f1b) only where the scenario uses it
    searched = [n for n in reg.names("schedule") if reg.get("schedule", n).searched or n == par.schedule]
    sched_names = pick(only, "parallelism.schedule", searched, par.schedule)
    v_only: Any = (
        only.get("parallelism.virtual_stages", "all") if "parallelism.virtual_stages" in only else "all"
    )
    s_ov: list[dict[str, Any]] = []
    used_v = False
    for name in sched_names:
        rec = reg.get("schedule", name, path="--only parallelism.schedule", file=file)
        opts, values = _declared(rec, par.options, "parallelism", sc)
        declared = values.pop("virtual_stages", None)
        if declared is not None:  # the layout key a schedule's values may name, with its --only
            used_v = True
            vs = declared if v_only == "all" else [par.virtual_stages] if v_only is None else v_only
            vs = [v for v in vs if v <= sc.model.layers]
        else:
            vs = [1]
        combos = _combos(values, opts, "parallelism", only)
        for v in vs:
            s_ov.extend(
                {"parallelism.schedule": name, "parallelism.virtual_stages": int(v), **c} for c in combos
            )
    if isinstance(v_only, list) and not used_v and v_only != [1]:
        raise ShardMeterError(
            f"{only_label('parallelism.virtual_stages', v_only[0])}: none of the schedules tried "
            f"({', '.join(sched_names)}) uses virtual stages"
        )
    if not s_ov:
        raise ShardMeterError("plan: no pipeline schedule left (check --only)")
    return s_ov


def _schedule_axis(
    est: Estimator, start: Scenario, sc: Scenario, only: Only, base: Columns, table: PartTable
) -> Axis:
    """The schedule axis; ``aux["dup_if_pp1"]`` marks options that are exact copies of an
    earlier one when ``pp = 1``."""
    s_ov = _schedule_options(est.registry, only, sc)
    sched = _axis(est, start, "schedule", s_ov, base, sc.file, table)
    # with pp = 1 the model ignores virtual stages (v -> 1): an option whose schedule then runs as
    # an earlier option's does (one_stage_order) is an exact copy of it
    codes = [
        int(np.asarray(sched.cols["layout.schedule"][j]).ravel()[0])
        if "layout.schedule" in sched.cols
        else int(np.asarray(base["layout.schedule"]).ravel()[0])
        for j in range(len(s_ov))
    ]
    sig = [_one_stage_signature(table, c) for c in codes]
    sched.aux["dup_if_pp1"] = np.array([sig[j] in sig[:j] for j in range(len(s_ov))], bool)
    return sched


def _one_stage_signature(table: PartTable, code: int) -> tuple:
    """What schedule option ``code`` runs as with one stage, as its schedule declares it
    (:meth:`~shardmeter.parts.SchedulePart.one_stage_order`); a schedule that declares none is
    only its own (its virtual-stage variants, one code, are copies of each other)."""
    part, opts = table.get("schedule", code)
    order = part.one_stage_order(opts)
    return ("own", code) if order is None else ("order", order)


def _sync_axis(
    est: Estimator,
    start: Scenario,
    sc: Scenario,
    only: Only,
    base: Columns,
    file: str | None,
    table: PartTable,
) -> Axis:
    """Sync strategy x its searched options (DiLoCo's inner steps up to the scenario's, its
    compression bits), for several islands."""
    reg = est.registry
    strategies = pick(only, "sync.strategy", reg.names("sync"), sc.sync.strategy)
    ovs: list[dict[str, Any]] = []
    takes: set[str] = set()  # the options some strategy tried searches
    for name in strategies:
        rec = reg.get("sync", name, path="--only sync.strategy", file=file)
        opts, values = _declared(rec, sc.sync.options, "sync", sc)
        takes |= set(values)
        ovs.extend({"sync.strategy": name, **c} for c in _combos(values, opts, "sync", only))
    for key in ("sync.inner_steps", "sync.compression_bits"):
        vals = only.get(key)
        if vals and key[5:] not in takes:
            raise ShardMeterError(
                f"{only_label(key, vals[0])}: none of the sync strategies tried "
                f"({', '.join(strategies)}) takes {key[5:]}"
            )
    return _axis(est, start, "sync", ovs, base, file, table)
