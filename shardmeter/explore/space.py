"""The search space of ``shardmeter plan``, compiled to numpy arrays.

A candidate is one layout row x one option of every *axis*:

* the **layout table** (ragged, built with numpy): ``tp`` (divisors of
  ``model.heads``), ``pp`` (1 .. ``layers``, uneven splits allowed), ``cp``
  (powers of two up to 16 dividing ``seq_len``), ``ep`` (divisors of
  ``experts``), ``sequence_parallel`` (both, when ``tp > 1``) and, for one
  island, ``dp`` from 1 to what fills the island (fewer GPUs is a plan too);
  for several islands, the nodes used on each island (powers of two and all
  of them), each island's ``dp`` filling the nodes it uses;
* **axes** (a regular cross product): micro-batch (powers of two up to 16),
  pipeline schedule x virtual stages (every registered schedule; those whose
  bubble shrinks with virtual stages take 2, 3, 4, 6 or 8), recompute,
  sharding (every registered strategy), and for several islands the sync
  strategy x inner steps x compression bits.

Candidate ``i`` is layout ``i // R`` with axis options decoded from
``i % R`` (mixed radix), so any range of ids is decoded with a few integer
array operations: no per-candidate Python.

Each axis option's effect on the model's input arrays is not hand-coded:
it is read off :meth:`Estimator.inputs` of the scenario with that option
set (resolved once per option, never per candidate), so the planner scores
exactly what ``estimate`` would. Every variant codes its strategies in one
shared :class:`~shardmeter.model.inputs.PartTable`.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ScenarioError, ShardMeterError
from ..model.dispatch import by_code
from ..model.feasibility import Reason, batch_reasons, batch_split, layout_reasons
from ..model.inputs import PartTable
from ..model.reduce import over_islands
from ..parts import PipeInputs, option_defaults
from ..scenario import Scenario, apply_override, load_scenario

__all__ = ["Axis", "Space", "compile_space", "KNOB_ALIASES", "normalise_only"]

#: Short names accepted by ``--only`` for the knobs of the space.
KNOB_ALIASES = {
    "tp": "parallelism.tp",
    "pp": "parallelism.pp",
    "dp": "parallelism.dp",
    "cp": "parallelism.cp",
    "ep": "parallelism.ep",
    "sp": "parallelism.sequence_parallel",
    "sequence_parallel": "parallelism.sequence_parallel",
    "sharding": "parallelism.sharding",
    "schedule": "parallelism.schedule",
    "v": "parallelism.virtual_stages",
    "virtual_stages": "parallelism.virtual_stages",
    "mbs": "training.micro_batch",
    "micro_batch": "training.micro_batch",
    "recompute": "training.recompute",
    "strategy": "sync.strategy",
    "inner_steps": "sync.inner_steps",
    "bits": "sync.compression_bits",
    "compression_bits": "sync.compression_bits",
}
_KNOBS = set(KNOB_ALIASES.values())
#: Model input columns read by :func:`structural_bits`.
STRUCTURAL_INPUTS = frozenset(
    {"layout.dp", "training.micro_batch", "layout.pp", "training.global_batch", "layout.virtual_stages",
     "layout.schedule", "model.layers", "layout.tp", "layout.cp", "layout.ep", "topology.nodes",
     "topology.gpus_per_node", "model.heads", "model.seq_len", "model.experts"}
)
#: Layout table keys -> model input columns.
LAYOUT_COLUMNS = {"tp": "layout.tp", "pp": "layout.pp", "cp": "layout.cp", "ep": "layout.ep",
                  "sp": "layout.sequence_parallel", "dp": "layout.dp", "nodes": "topology.nodes"}

#: Virtual stages tried for schedules whose bubble shrinks with them (Megatron-LM's usual choices).
VIRTUAL_STAGES = (2, 3, 4, 6, 8)
#: Most layout rows a space may hold (a 192-node island has 32,626; each row is ~630 candidates).
MAX_LAYOUTS = 5_000_000
#: Micro-batch sizes tried (powers of two).
MICRO_BATCHES = (1, 2, 4, 8, 16)
#: Context-parallel degrees tried (powers of two dividing the sequence).
CONTEXT_PARALLEL = (1, 2, 4, 8, 16)
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


class Space:
    """A compiled search space; picklable (numpy arrays and plain data), so it
    travels once to each worker process or dask worker."""

    def __init__(self, base, layout, axes, n_islands, objective, nodes_available=None, table=None):
        self.base: dict[str, np.ndarray] = base
        self.table: PartTable = table if table is not None else PartTable()
        self.nodes_available = list(nodes_available or np.atleast_1d(base["topology.nodes"][0]).astype(int))
        self.layout: dict[str, np.ndarray] = layout
        # axes that change an input of the structural checks come first: a candidate's
        # structural verdict then depends on its *prefix* (layout, leading axes) only
        struct = [a for a in axes if set(a.cols) & STRUCTURAL_INPUTS or a.aux]
        axes = struct + [a for a in axes if a not in struct]
        self.axes: list[Axis] = axes
        self.n_struct = len(struct)
        self.n_islands = n_islands
        self.objective: dict[str, Any] = objective
        self.radix = np.array([len(a) for a in axes], dtype=np.int64)
        self.R = int(np.prod(self.radix)) if axes else 1
        strides = np.ones(len(axes), dtype=np.int64)
        for j in range(len(axes) - 2, -1, -1):
            strides[j] = strides[j + 1] * self.radix[j + 1]
        self.strides = strides
        self.R_in = int(np.prod(self.radix[self.n_struct :])) if len(axes) > self.n_struct else 1
        self.n_layouts = int(len(layout["tp"]))
        self.size = self.n_layouts * self.R
        self.n_prefixes = self.size // self.R_in

    # -- decoding ---------------------------------------------------------------------------
    def codes(self, ids: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Layout index and one option code per axis of candidate ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        li, r = np.divmod(ids, self.R)
        return li, [(r // s) % n for s, n in zip(self.strides, self.radix)]

    def _gather(self, li, axes, codes) -> dict[str, np.ndarray]:
        cols: dict[str, np.ndarray] = {}
        for k, arr in self.layout.items():
            if not k.startswith("_"):
                c = arr[li]
                cols[LAYOUT_COLUMNS[k]] = c[:, None] if c.ndim == 1 else c
        for axis, c in zip(axes, codes):
            for k, arr in axis.cols.items():
                cols[k] = arr[c]
        return cols

    def columns(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Model input columns of candidates ``ids`` (those that vary; the rest are in ``base``)."""
        li, codes = self.codes(ids)
        return self._gather(li, self.axes, codes)

    def _prefix_codes(self, prefixes: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        p = np.asarray(prefixes, dtype=np.int64)
        li, r = np.divmod(p, self.R // self.R_in)
        codes = [
            (r // (s // self.R_in)) % n
            for s, n in zip(self.strides[: self.n_struct], self.radix[: self.n_struct])
        ]
        return li, codes

    def prefix_columns(self, prefixes: np.ndarray) -> dict[str, np.ndarray]:
        """Input columns of candidate prefixes, shaped ``(P, 1, ...)``: with
        :meth:`inner_columns` (``(1, R_in, ...)``) they broadcast to every candidate of those
        prefixes, so terms that depend on the prefix alone are computed once per prefix."""
        li, codes = self._prefix_codes(prefixes)
        return {k: v[:, None] for k, v in self._gather(li, self.axes[: self.n_struct], codes).items()}

    def inner_columns(self) -> dict[str, np.ndarray]:
        """Input columns of the ``R_in`` options every prefix is crossed with, ``(1, R_in, ...)``."""
        if getattr(self, "_inner", None) is None:
            r = np.arange(self.R_in, dtype=np.int64)
            cols: dict[str, np.ndarray] = {}
            for axis, s, n in zip(self.axes[self.n_struct :], self.strides[self.n_struct :],
                                  self.radix[self.n_struct :]):
                c = (r // s) % n
                for k, arr in axis.cols.items():
                    cols[k] = arr[c][None]
            self._inner = cols
        return self._inner

    def prefix_verdict(self, prefixes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Structural reason bits and duplicate mask of candidate *prefixes*
        (every candidate ``p * R_in .. p * R_in + R_in - 1`` shares them)."""
        li, codes = self._prefix_codes(prefixes)
        cols = self._gather(li, self.axes[: self.n_struct], codes)
        bits = structural_bits(self, cols, self.layout["_bits"][li])
        dup = np.zeros(len(li), dtype=bool)
        for axis, c in zip(self.axes[: self.n_struct], codes):
            if "dup_if_pp1" in axis.aux:
                dup |= axis.aux["dup_if_pp1"][c]
        return bits, dup & (self.layout["pp"][li] == 1)

    def describe(self, i: int, islands_names: Sequence[str]) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
        """Scenario overrides of candidate ``i`` and a readable plan dict."""
        li, codes = self.codes(np.array([i]))
        li = int(li[0])
        lay = {k: v[li] for k, v in self.layout.items() if not k.startswith("_")}
        ov: list[tuple[str, Any]] = [
            ("parallelism.tp", int(lay["tp"])),
            ("parallelism.pp", int(lay["pp"])),
            ("parallelism.cp", int(lay["cp"])),
            ("parallelism.ep", int(lay["ep"])),
            ("parallelism.sequence_parallel", bool(lay["sp"])),
        ]
        dp = np.atleast_1d(lay["dp"]).astype(int)
        if self.n_islands == 1:
            ov.append(("parallelism.dp", int(dp[0])))
        gpn = np.broadcast_to(self.base["topology.gpus_per_node"][0], (self.n_islands,)).astype(int)
        per_replica = int(lay["tp"]) * int(lay["pp"]) * int(lay["cp"])
        # a plan rents the nodes it uses (dp filling them gives the same dp on several islands)
        nodes = np.maximum(1, -(-(dp * per_replica) // gpn))
        ov.extend((f"island[{j}].nodes", int(n)) for j, n in enumerate(nodes))
        for axis, c in zip(self.axes, codes):
            ov.extend(axis.overrides[int(c[0])].items())
        d = dict(ov)
        plan = {
            "parallelism": {
                "tp": int(lay["tp"]),
                "pp": int(lay["pp"]),
                "dp": int(dp[0]) if self.n_islands == 1 else [int(x) for x in dp],
                "cp": int(lay["cp"]),
                "ep": int(lay["ep"]),
                "sequence_parallel": bool(lay["sp"]),
                "sharding": d.get("parallelism.sharding"),
                "schedule": d.get("parallelism.schedule"),
                "virtual_stages": d.get("parallelism.virtual_stages", 1),
            },
            "training": {
                "micro_batch": d.get("training.micro_batch"),
                "recompute": d.get("training.recompute"),
            },
            "islands": [
                {
                    "name": islands_names[j],
                    "nodes": int(nodes[j]),
                    "dp": int(dp[j]),
                    "gpus": int(dp[j]) * per_replica,
                    "nodes_available": int(self.nodes_available[j]),
                }
                for j in range(self.n_islands)
            ],
        }
        if any(k.startswith("sync.") for k in d):
            plan["sync"] = {k[5:]: v for k, v in d.items() if k.startswith("sync.")}
        return ov, plan


# ---------------------------------------------------------------------------------------------
# compilation


def normalise_only(only: Mapping[str, Any] | None) -> dict[str, list | None]:
    """``{"tp": [8], "island[1].nodes": None}`` -> canonical key paths; ``None`` = the scenario's value."""
    out: dict[str, list | None] = {}
    for k, v in (only or {}).items():
        key = KNOB_ALIASES.get(k, k)
        if key not in _KNOBS and not (key.startswith("island[") and key.endswith("].nodes")):
            import difflib

            close = difflib.get_close_matches(k, sorted(set(KNOB_ALIASES) | _KNOBS), n=2, cutoff=0.5)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise ShardMeterError(
                f"--only {k}: not a knob of the plan space{hint}; knobs: "
                f"{', '.join(sorted(KNOB_ALIASES))}, island[i].nodes"
            )
        out[key] = None if v is None else list(v if isinstance(v, (list, tuple)) else [v])
    return out


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _pick(only, key, default, current):
    if key not in only:
        return list(default)
    vals = only[key]
    return [current] if vals is None else vals


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


def plan_raw(sc: Scenario) -> dict[str, Any]:
    """The scenario as raw tables with island-level layouts removed (a plan sets one layout)."""
    raw = sc.to_dict()
    for isl in raw["island"]:
        isl.pop("parallelism", None)
    raw.setdefault("parallelism", {}).pop("dp", None)
    return raw


def compile_space(
    sc: Scenario,
    est,
    *,
    only: Mapping[str, Any] | None = None,
    max_gpus: int | None = None,
    objective: Mapping[str, Any] | None = None,
) -> Space:
    """Build the candidate space of scenario ``sc`` (see the module docstring).

    :param only: restrict knobs: ``{key: [values]}``, or ``{key: None}`` for the
        scenario's own value (keys as in :data:`KNOB_ALIASES` or their paths).
    :param max_gpus: drop layouts using more GPUs in total.
    """
    only = normalise_only(only)
    reg = est.registry
    m, t = sc.model, sc.training
    raw = plan_raw(sc)
    base_sc = load_scenario(raw, registry=reg)
    resolved = est.resolve(base_sc)
    islands = resolved.islands
    table = PartTable()
    base = est.inputs(resolved, table)[0].columns()
    n_isl = len(islands)
    par = sc.parallelism
    gpn = np.array([isl.gpus_per_node for isl in islands], dtype=np.int64)
    cap_nodes = np.array([isl.nodes for isl in islands], dtype=np.int64)
    g_total = int(np.sum(cap_nodes * gpn))  # every GPU of every island
    if max_gpus is not None:
        g_total = min(g_total, int(max_gpus))
    g_max = min(int(np.max(cap_nodes * gpn)), g_total)  # the most one replica can span

    # ---- layout table -------------------------------------------------------------------------
    tps = _pick(only, "parallelism.tp", _divisors(m.heads, g_max), par.tp)
    pps = _pick(only, "parallelism.pp", range(1, min(m.layers, g_max) + 1), par.pp)
    cps = _pick(
        only, "parallelism.cp", [c for c in CONTEXT_PARALLEL if m.seq_len % c == 0 and c <= g_max], par.cp
    )
    eps = _pick(only, "parallelism.ep", _divisors(m.experts, g_max) if m.experts > 1 else [1], par.ep)
    sps = _pick(only, "parallelism.sequence_parallel", [False, True], par.sequence_parallel)
    for key, vals in (
        ("parallelism.tp", tps),
        ("parallelism.pp", pps),
        ("parallelism.cp", cps),
        ("parallelism.ep", eps),
    ):
        if not vals or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in vals):
            raise ShardMeterError(f"--only {key}: expected integers >= 1, got {vals}")
    if any(not isinstance(x, bool) for x in sps):
        raise ShardMeterError(f"--only parallelism.sequence_parallel: expected true/false, got {sps}")
    TP, PP, CP, EP, SP = (
        a.ravel()
        for a in np.meshgrid(
            np.array(tps, np.int64),
            np.array(pps, np.int64),
            np.array(cps, np.int64),
            np.array(eps, np.int64),
            np.array(sps, bool),
            indexing="ij",
        )
    )
    keep = ~(SP & (TP == 1)) if "parallelism.sequence_parallel" not in only else np.ones(TP.shape, bool)
    TP, PP, CP, EP, SP = TP[keep], PP[keep], CP[keep], EP[keep], SP[keep]
    rep = TP * PP * CP  # GPUs of one replica

    if n_isl == 1:
        fill = (cap_nodes[0] * gpn[0]) // rep
        limit = np.minimum(fill, g_total // rep)
        if "parallelism.dp" in only:
            dps = _pick(only, "parallelism.dp", [], islands[0].dp)
            dps = np.array(dps, dtype=np.int64)
            idx, dpv = (a.ravel() for a in np.meshgrid(np.arange(len(TP)), dps, indexing="ij"))
            ok = dpv * rep[idx] <= g_total
            idx, dpv = idx[ok], dpv[ok]
        else:
            counts = np.maximum(limit, 0)
            if int(counts.sum()) > MAX_LAYOUTS:
                raise ShardMeterError(
                    f"plan: {int(counts.sum()):,} layouts is too many (limit {MAX_LAYOUTS:,}); "
                    "restrict with --only dp=..., --only tp=..., --only pp=... or --max-gpus"
                )
            idx = np.repeat(np.arange(len(TP)), counts)
            starts = np.cumsum(counts) - counts
            dpv = np.arange(len(idx), dtype=np.int64) - np.repeat(starts, counts) + 1
        extra = {"dp": dpv[:, None]}
    else:
        node_opts = []
        for j, n in enumerate(cap_nodes):
            key = f"island[{j}].nodes"
            default = sorted({2**k for k in range(int(math.log2(n)) + 1)} | {int(n)})
            vals = _pick(only, key, default, int(n))
            node_opts.append(np.array(vals, dtype=np.int64))
        n_combos = int(np.prod([len(o) for o in node_opts]))
        if n_combos * len(TP) > MAX_LAYOUTS:
            raise ShardMeterError(
                f"plan: {n_combos * len(TP):,} layouts ({n_combos:,} node combinations) is too "
                f"many (limit {MAX_LAYOUTS:,}); restrict with --only island[i].nodes=..., "
                "--only tp=..., --only pp=..."
            )
        combos = np.array(list(itertools.product(*node_opts)), dtype=np.int64)  # (C, I)
        idx, ci = (a.ravel() for a in np.meshgrid(np.arange(len(TP)), np.arange(len(combos)), indexing="ij"))
        nodes = combos[ci]
        dp = (nodes * gpn[None, :]) // rep[idx][:, None]
        ok = np.all(dp >= 1, axis=1) & (np.sum(dp, axis=1) * rep[idx] <= g_total)
        idx, nodes, dp = idx[ok], nodes[ok], dp[ok]
        extra = {"dp": dp, "nodes": nodes}
    layout = {"tp": TP[idx], "pp": PP[idx], "cp": CP[idx], "ep": EP[idx], "sp": SP[idx], **extra}
    if len(layout["tp"]) == 0:
        raise ShardMeterError("plan: no layout fits (check --max-gpus and --only)")
    layout["_bits"] = _layout_bits(layout, base)

    # ---- axes ---------------------------------------------------------------------------------
    file = sc.file
    mbs = _pick(
        only, "training.micro_batch", [b for b in MICRO_BATCHES if b <= t.global_batch], t.micro_batch
    )
    axes = [
        Axis(
            "micro_batch",
            [{"training.micro_batch": int(b)} for b in mbs],
            {"training.micro_batch": np.array(mbs, dtype=float)[:, None]},
        )
    ]
    sched_names = _pick(only, "parallelism.schedule", reg.names("schedule"), par.schedule)
    v_only = only.get("parallelism.virtual_stages", "all") if "parallelism.virtual_stages" in only else "all"
    s_ov = []
    for name in sched_names:
        rec = reg.get("schedule", name, path="--only parallelism.schedule", file=file)
        if _uses_virtual_stages(rec):
            vs = VIRTUAL_STAGES if v_only == "all" else [par.virtual_stages] if v_only is None else v_only
            vs = [v for v in vs if v <= m.layers]
        else:
            vs = [1]
        for v in vs:
            s_ov.append({"parallelism.schedule": name, "parallelism.virtual_stages": int(v)})
    if not s_ov:
        raise ShardMeterError("plan: no pipeline schedule left (check --only)")
    sched = _axis(est, raw, "schedule", s_ov, base, file, table)
    # with pp = 1 the model ignores virtual stages (v -> 1): an option whose schedule then computes
    # the same terms as an earlier option's is an exact copy of it
    codes = [int(np.asarray(sched.cols["layout.schedule"][j]).ravel()[0]) if "layout.schedule" in sched.cols
             else int(np.asarray(base["layout.schedule"]).ravel()[0]) for j in range(len(s_ov))]
    sig = [_pp1_signature(*table.get("schedule", c)) for c in codes]
    sched.aux["dup_if_pp1"] = np.array([sig[j] in sig[:j] for j in range(len(s_ov))], bool)
    axes.append(sched)
    recs = _pick(only, "training.recompute", ["none", "selective", "full"], t.recompute)
    axes.append(_axis(est, raw, "recompute", [{"training.recompute": r} for r in recs], base, file, table))
    shard = _pick(only, "parallelism.sharding", reg.names("sharding"), par.sharding)
    axes.append(_axis(est, raw, "sharding", [{"parallelism.sharding": s} for s in shard], base, file, table))
    if n_isl > 1:
        axes.append(_sync_axis(est, raw, sc, only, base, file, table))
    axes = [a for a in axes if len(a)]
    return Space(base, layout, axes, n_isl, dict(objective or {}), [int(n) for n in cap_nodes], table)


def _uses_virtual_stages(schedule) -> bool:
    """Does the schedule's bubble shrink with virtual stages (probed: pp = 4, m = 8, v = 1 vs 2)?"""
    opts = schedule.options()
    b = [float(np.asarray(schedule.terms(_probe(4.0, 8.0, v), opts).bubble_s).ravel()[0]) for v in (1.0, 2.0)]
    return b[1] < b[0]


def _probe(pp: float, m, v: float) -> PipeInputs:
    one = np.ones_like(np.asarray(m, dtype=float))
    return PipeInputs(pp=pp * one, micro_batches=np.asarray(m, dtype=float), virtual_stages=v * one,
                      stage_s=one, forward_s=one / 3.0, weight_grad_s=one / 3.0)


def _pp1_signature(schedule, opts) -> tuple:
    """A schedule's terms at ``pp = 1`` over a few micro-batch counts (what it computes there)."""
    t = schedule.terms(_probe(1.0, np.array([1.0, 2.0, 3.0, 8.0, 16.0]), 1.0), opts)
    return tuple(tuple(np.broadcast_to(np.asarray(x, dtype=float), (5,)).tolist())
                 for x in (t.bubble_s, t.in_flight, t.p2p_transfers))


def _sync_axis(est, raw, sc, only, base, file, table) -> Axis:
    reg = est.registry
    strategies = _pick(only, "sync.strategy", reg.names("sync"), sc.sync.strategy)
    opts = dict(sc.sync.options)
    ovs = []
    for name in strategies:
        rec = reg.get("sync", name, path="--only sync.strategy", file=file)
        defaults = option_defaults(rec.options)
        if "inner_steps" not in defaults:  # a strategy without local steps
            ovs.append({"sync.strategy": name})
            continue
        h_now = int(opts.get("inner_steps", defaults.get("inner_steps", 1)))
        hs = _pick(only, "sync.inner_steps", sorted({h for h in INNER_STEPS if h <= h_now} | {h_now}), h_now)
        b_now = opts.get("compression_bits", defaults.get("compression_bits", 16))
        bits = _pick(only, "sync.compression_bits", [b_now], b_now)
        for h, b in itertools.product(hs, bits):
            ov = {"sync.strategy": name}
            if "inner_steps" in defaults:
                ov["sync.inner_steps"] = h
            if "compression_bits" in defaults:
                ov["sync.compression_bits"] = b
            ovs.append(ov)
    return _axis(est, raw, "sync", ovs, base, file, table)


def _layout_bits(layout, base) -> np.ndarray:
    """Reasons that depend on the layout alone, as ``evaluate`` sets them."""

    def f(k):
        return np.asarray(base[k], dtype=float)

    tp, pp, cp, ep = (layout[k].astype(float)[:, None] for k in ("tp", "pp", "cp", "ep"))
    dp = layout["dp"].astype(float)
    nodes = layout["nodes"].astype(float) if "nodes" in layout else f("topology.nodes")
    bits = layout_reasons(f("model.heads"), f("model.seq_len"), f("model.experts"), tp, pp, cp, dp, ep,
                          nodes * f("topology.gpus_per_node"))
    return np.bitwise_or.reduce(np.atleast_2d(bits), axis=-1)


def structural_bits(space: Space, cols: Mapping[str, np.ndarray], layout_bits: np.ndarray) -> np.ndarray:
    """Every reason bit ``evaluate`` would set that does not need the full model (all but memory
    and precision), with the same functions (:mod:`shardmeter.model.feasibility`, the schedule's
    own :meth:`~shardmeter.SchedulePart.infeasible`)."""

    def g(k):
        return np.asarray(cols[k] if k in cols else space.base[k], dtype=float)

    dp, pp = g("layout.dp"), g("layout.pp")
    _, m, m_int = batch_split(g("training.global_batch"), dp, g("training.micro_batch"))
    v = np.where(pp > 1, np.maximum(g("layout.virtual_stages"), 1.0), 1.0)
    bits = batch_reasons(m, pp, v, g("model.layers"))
    pipe = PipeInputs(pp=pp, micro_batches=m_int, virtual_stages=v, stage_s=np.zeros(()), forward_s=np.zeros(()),
                      weight_grad_s=np.zeros(()))

    def run(code: int) -> dict[str, Any]:
        part, opts = space.table.get("schedule", code)
        return {"bad": np.asarray(part.infeasible(pipe, opts), dtype=float)}

    bad = by_code(g("layout.schedule"), run)["bad"]
    bits = bits | np.where(bad > 0, int(Reason.SCHEDULE), 0)
    return over_islands(np.bitwise_or, np.asarray(bits, dtype=np.int64), keepdims=False) | layout_bits
