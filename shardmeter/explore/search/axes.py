"""The regular axes of the plan space (see :mod:`.space`): micro-batch, pipeline schedule x
virtual stages, recompute, sharding and, for several islands, sync strategy x inner steps x
compression bits.

Each option's effect on the model's input arrays is not hand-coded: it is read off
:meth:`Estimator.inputs` of the scenario with that option set (resolved once per option,
never per candidate), so the planner scores exactly what ``estimate`` would.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from shardmeter.errors import ScenarioError, ShardMeterError
from shardmeter.explore.search.knobs import only_label, pick
from shardmeter.inputs.bundles import PartTable
from shardmeter.load.scenario import Scenario, apply_override, load_scenario
from shardmeter.parts import PipeInputs, option_defaults

__all__ = ["Axis", "plan_axes", "VIRTUAL_STAGES", "MICRO_BATCHES", "INNER_STEPS"]

#: Virtual stages tried for schedules whose bubble shrinks with them (Megatron-LM's usual choices).
VIRTUAL_STAGES = (2, 3, 4, 6, 8)
#: Micro-batch sizes tried (powers of two).
MICRO_BATCHES = (1, 2, 4, 8, 16)
#: Inner-step counts tried for local-step sync strategies, up to the scenario's value.
INNER_STEPS = (50, 100, 250, 500, 1000, 2000)


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
    est, raw: dict[str, Any], sc: Scenario, only: dict[str, Any], base, table: PartTable, n_islands: int
) -> list[Axis]:
    """The non-empty axes of scenario ``sc`` (``raw``: its tables as :func:`.space.plan_raw`
    gives them; ``base``: the input columns of that scenario; ``only``: the normalised
    ``--only``). Every option's strategies are coded in ``table``."""
    reg, file = est.registry, sc.file
    t, par = sc.training, sc.parallelism
    axes = [_micro_batch_axis(only, t.global_batch, t.micro_batch)]
    axes.append(_schedule_axis(est, raw, sc, only, base, table))
    recs = pick(only, "training.recompute", ["none", "selective", "full"], t.recompute)
    axes.append(_axis(est, raw, "recompute", [{"training.recompute": r} for r in recs], base, file, table))
    shard = pick(only, "parallelism.sharding", reg.names("sharding"), par.sharding)
    axes.append(_axis(est, raw, "sharding", [{"parallelism.sharding": s} for s in shard], base, file, table))
    if n_islands > 1:
        axes.append(_sync_axis(est, raw, sc, only, base, file, table))
    return [a for a in axes if len(a)]


def _diff_cols(
    base: Mapping[str, np.ndarray], variants: list[Mapping[str, np.ndarray]]
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


def _axis(est, raw, name, overrides: list[dict[str, Any]], base_inputs, file, table: PartTable) -> Axis:
    """An axis whose options are scenario ``overrides``: each variant is loaded and its input
    columns read (a variant that does not load is an error naming the option)."""
    variants = []
    for ov in overrides:
        data = raw
        for k, v in ov.items():
            data = apply_override(data, k, v)
        try:
            sc = load_scenario(data, registry=est.registry)
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


def _schedule_options(reg, only: dict[str, Any], sc: Scenario) -> list[dict[str, Any]]:
    """Every schedule x virtual stages tried: 2, 3, 4, 6 or 8 (at most the layers) for schedules
    whose bubble shrinks with them, else 1. A schedule that is one stack's engine
    (``SchedulePart.searched = False``) is tried only when the scenario or ``--only`` names it."""
    par, file = sc.parallelism, sc.file
    # a stack's own engine (searched = False, such as deepspeed-1f1b) only where the scenario uses it
    searched = [
        n
        for n in reg.names("schedule")
        if getattr(reg.get("schedule", n), "searched", True) or n == par.schedule
    ]
    sched_names = pick(only, "parallelism.schedule", searched, par.schedule)
    v_only: Any = (
        only.get("parallelism.virtual_stages", "all") if "parallelism.virtual_stages" in only else "all"
    )
    s_ov = []
    used_v = False
    for name in sched_names:
        rec = reg.get("schedule", name, path="--only parallelism.schedule", file=file)
        if _uses_virtual_stages(rec):
            used_v = True
            vs = VIRTUAL_STAGES if v_only == "all" else [par.virtual_stages] if v_only is None else v_only
            vs = [v for v in vs if v <= sc.model.layers]
        else:
            vs = [1]
        for v in vs:
            s_ov.append({"parallelism.schedule": name, "parallelism.virtual_stages": int(v)})
    if isinstance(v_only, list) and not used_v and v_only != [1]:
        raise ShardMeterError(
            f"{only_label('parallelism.virtual_stages', v_only[0])}: none of the schedules tried "
            f"({', '.join(sched_names)}) uses virtual stages"
        )
    if not s_ov:
        raise ShardMeterError("plan: no pipeline schedule left (check --only)")
    return s_ov


def _schedule_axis(est, raw, sc: Scenario, only: dict[str, Any], base, table: PartTable) -> Axis:
    """The schedule axis; ``aux["dup_if_pp1"]`` marks options that are exact copies of an
    earlier one when ``pp = 1``."""
    s_ov = _schedule_options(est.registry, only, sc)
    sched = _axis(est, raw, "schedule", s_ov, base, sc.file, table)
    # with pp = 1 the model ignores virtual stages (v -> 1): an option whose schedule then computes
    # the same terms as an earlier option's is an exact copy of it
    codes = [
        int(np.asarray(sched.cols["layout.schedule"][j]).ravel()[0])
        if "layout.schedule" in sched.cols
        else int(np.asarray(base["layout.schedule"]).ravel()[0])
        for j in range(len(s_ov))
    ]
    sig = [_pp1_signature(*table.get("schedule", c)) for c in codes]
    sched.aux["dup_if_pp1"] = np.array([sig[j] in sig[:j] for j in range(len(s_ov))], bool)
    return sched


def _uses_virtual_stages(schedule) -> bool:
    """Does the schedule's bubble shrink with virtual stages (probed: pp = 4, m = 8, v = 1 vs 2)?"""
    opts = schedule.options()
    b = [float(np.asarray(schedule.terms(_probe(4.0, 8.0, v), opts).bubble_s).ravel()[0]) for v in (1.0, 2.0)]
    return b[1] < b[0]


def _probe(pp: float, m, v: float) -> PipeInputs:
    one = np.ones_like(np.asarray(m, dtype=float))
    return PipeInputs(
        pp=pp * one,
        micro_batches=np.asarray(m, dtype=float),
        virtual_stages=v * one,
        stage_s=one,
        forward_s=one / 3.0,
        weight_grad_s=one / 3.0,
    )


def _pp1_signature(schedule, opts) -> tuple:
    """A schedule's terms at ``pp = 1`` over a few micro-batch counts (what it computes there)."""
    t = schedule.terms(_probe(1.0, np.array([1.0, 2.0, 3.0, 8.0, 16.0]), 1.0), opts)
    return tuple(
        tuple(np.broadcast_to(np.asarray(x, dtype=float), (5,)).tolist())
        for x in (t.bubble_s, t.in_flight, t.p2p_transfers)
    )


def _sync_axis(est, raw, sc, only, base, file, table) -> Axis:
    """Sync strategy x inner steps (up to the scenario's) x compression bits, for several islands."""
    reg = est.registry
    strategies = pick(only, "sync.strategy", reg.names("sync"), sc.sync.strategy)
    opts = dict(sc.sync.options)
    ovs = []
    takes: set[str] = set()  # the options some strategy tried takes
    for name in strategies:
        rec = reg.get("sync", name, path="--only sync.strategy", file=file)
        defaults = option_defaults(rec.options)
        if "inner_steps" not in defaults:  # a strategy without local steps
            ovs.append({"sync.strategy": name})
            continue
        takes |= {"inner_steps"} | ({"compression_bits"} & set(defaults))
        h_now = int(opts.get("inner_steps", defaults.get("inner_steps", 1)))
        hs = pick(only, "sync.inner_steps", sorted({h for h in INNER_STEPS if h <= h_now} | {h_now}), h_now)
        b_now = opts.get("compression_bits", defaults.get("compression_bits", 16))
        bits = pick(only, "sync.compression_bits", [b_now], b_now)
        for h, b in itertools.product(hs, bits):
            ov = {"sync.strategy": name}
            if "inner_steps" in defaults:
                ov["sync.inner_steps"] = h
            if "compression_bits" in defaults:
                ov["sync.compression_bits"] = b
            ovs.append(ov)
    for key in ("sync.inner_steps", "sync.compression_bits"):
        if only.get(key) and key[5:] not in takes:
            raise ShardMeterError(
                f"{only_label(key, only[key][0])}: none of the sync strategies tried "
                f"({', '.join(strategies)}) takes {key[5:]}"
            )
    return _axis(est, raw, "sync", ovs, base, file, table)
