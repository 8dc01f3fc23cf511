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
  pipeline schedule x virtual stages (every registered schedule; those that
  use virtual stages take 2, 3, 4, 6 or 8), recompute, sharding (every
  registered strategy), and for several islands the sync strategy x inner
  steps x compression bits; a part's own options at the values it declares
  (:meth:`~shardmeter.parts.Part.search_values`).

Candidate ``i`` is layout ``i // R`` with axis options decoded from
``i % R`` (mixed radix), so any range of ids is decoded with a few integer
array operations: no per-candidate Python.

Each axis option's effect on the model's input arrays is not hand-coded:
it is read off :meth:`Estimator.inputs` of the scenario with that option
set (resolved once per option, never per candidate), so the planner scores
exactly what ``estimate`` would. Every variant codes its strategies in one
shared :class:`~shardmeter.inputs.bundles.PartTable`.

This module holds the :class:`Space` and :func:`compile_space`; the knobs and ``--only`` are
in :mod:`.knobs`, the layout table in :mod:`.layouts`, the axes in :mod:`.axes` and the
structural checks in :mod:`.structural`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from shardmeter.estimator import Estimator

# The space is built by .knobs, .layouts, .axes and .structural; their tunables (the `X as X`
# imports) stay importable from here as before.
from shardmeter.explore.search.axes import MICRO_BATCHES as MICRO_BATCHES
from shardmeter.explore.search.axes import VIRTUAL_STAGES as VIRTUAL_STAGES
from shardmeter.explore.search.axes import Axis, plan_axes
from shardmeter.explore.search.knobs import KNOB_ALIASES, check_only, normalise_only
from shardmeter.explore.search.layouts import CONTEXT_PARALLEL as CONTEXT_PARALLEL
from shardmeter.explore.search.layouts import LAYOUT_COLUMNS, check_islands, layout_table
from shardmeter.explore.search.layouts import MAX_LAYOUTS as MAX_LAYOUTS
from shardmeter.explore.search.structural import (
    STRUCTURAL_INPUTS,
    inner_structural_bits,
    layout_reason_bits,
    structural_bits,
)
from shardmeter.inputs.bundles import PartTable
from shardmeter.load.specs import Scenario

__all__ = ["Axis", "Space", "compile_space", "KNOB_ALIASES", "normalise_only"]


class Space:
    """A compiled search space; picklable (numpy arrays and plain data), so it
    travels once to each worker process or dask worker."""

    def __init__(
        self,
        base: dict[str, np.ndarray],
        layout: dict[str, np.ndarray],
        axes: Sequence[Axis],
        n_islands: int,
        objective: dict[str, Any],
        nodes_available: Sequence[int] | None = None,
        table: PartTable | None = None,
    ) -> None:
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
        self.n_layouts = len(layout["tp"])
        self.size = self.n_layouts * self.R
        self.n_prefixes = self.size // self.R_in

    # -- decoding ---------------------------------------------------------------------------
    def codes(self, ids: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Layout index and one option code per axis of candidate ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        li, r = np.divmod(ids, self.R)
        return li, [(r // s) % n for s, n in zip(self.strides, self.radix, strict=True)]

    def _gather(
        self, li: np.ndarray, axes: Sequence[Axis], codes: Sequence[np.ndarray]
    ) -> dict[str, np.ndarray]:
        cols: dict[str, np.ndarray] = {}
        for k, arr in self.layout.items():
            if not k.startswith("_"):
                c = arr[li]
                cols[LAYOUT_COLUMNS[k]] = c[:, None] if c.ndim == 1 else c
        for axis, c in zip(axes, codes, strict=True):
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
            for s, n in zip(self.strides[: self.n_struct], self.radix[: self.n_struct], strict=True)
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
            for axis, s, n in zip(
                self.axes[self.n_struct :],
                self.strides[self.n_struct :],
                self.radix[self.n_struct :],
                strict=True,
            ):
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
        for axis, c in zip(self.axes[: self.n_struct], codes, strict=True):
            if "dup_if_pp1" in axis.aux:
                dup |= axis.aux["dup_if_pp1"][c]
        return bits, dup & (self.layout["pp"][li] == 1)

    def inner_verdict(self, prefixes: np.ndarray) -> np.ndarray | None:
        """Structural reason bits of candidate prefixes that vary with their inner options,
        ``(prefixes, R_in)`` (a sharding strategy's own verdict where the sharding axis is
        inner: :func:`~.structural.inner_structural_bits`); None where none do."""
        li, codes = self._prefix_codes(prefixes)
        return inner_structural_bits(self, self._gather(li, self.axes[: self.n_struct], codes))

    def verdict(self, ids: np.ndarray) -> np.ndarray:
        """Every structural reason bit of candidates ``ids``: their prefix's
        (:meth:`prefix_verdict`) and their inner option's (:meth:`inner_verdict`)."""
        ids = np.asarray(ids, dtype=np.int64)
        prefixes, inner = np.divmod(ids, self.R_in)
        bits = self.prefix_verdict(prefixes)[0]
        per = self.inner_verdict(prefixes)
        return bits if per is None else bits | per[np.arange(len(ids)), inner]

    def describe(
        self, i: int, islands_names: Sequence[str | None]
    ) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
        """Scenario overrides of candidate ``i`` and a readable plan dict."""
        lis, codes = self.codes(np.array([i]))
        li = int(lis[0])
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
        for axis, c in zip(self.axes, codes, strict=True):
            ov.extend(axis.overrides[int(c[0])].items())
        d = dict(ov)
        plan: dict[str, Any] = {
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
        # a part's own searched options (``Part.search_values``) beside the layout's keys
        for k, v in d.items():
            if k.startswith("parallelism.") and k[12:] not in plan["parallelism"]:
                plan["parallelism"][k[12:]] = v
        if any(k.startswith("sync.") for k in d):
            plan["sync"] = {k[5:]: v for k, v in d.items() if k.startswith("sync.")}
        return ov, plan


# ---------------------------------------------------------------------------------------------
# compilation


def plan_base(sc: Scenario) -> Scenario:
    """The scenario a plan starts from: island-level layouts and micro-batches and the
    top-level ``dp`` removed (a plan sets them), on the records (``attrs.evolve``)."""
    islands = tuple(attrs.evolve(isl, parallelism=None, micro_batch=None) for isl in sc.islands)
    return attrs.evolve(sc, islands=islands, parallelism=attrs.evolve(sc.parallelism, dp=None))


def compile_space(
    sc: Scenario,
    est: Estimator,
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
    check_islands(len(sc.islands))  # before anything grows with them
    only = normalise_only(only)
    check_only(only, sc, est.registry)
    base_sc = plan_base(sc)
    resolved = est.resolve(base_sc)
    islands = resolved.islands
    table = PartTable()
    base = est.inputs(resolved, table)[0].columns()
    layout = layout_table(sc, islands, only, max_gpus)
    layout["_bits"] = layout_reason_bits(layout, base)
    axes = plan_axes(est, base_sc, sc, only, base, table, len(islands))
    nodes_available = [int(isl.nodes) for isl in islands]
    return Space(base, layout, axes, len(islands), dict(objective or {}), nodes_available, table)
