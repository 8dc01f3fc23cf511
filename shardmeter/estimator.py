"""The Estimator: load, resolve once, build the inputs, evaluate, report -- one way.

An Estimator is assembled from registered parts and can be recomposed in code without touching
the registry::

    est = Estimator()                                   # installed plugins
    est = est.with_part("interconnect", my_link)        # add or replace a part
    est = est.with_level("inter_node", "roce-400g")     # swap one topology level
    est = est.with_cost_source("owned")                 # a different price
    report = est.estimate(scenario)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardmeter.errors import ScenarioError
from shardmeter.inputs.build import build_inputs
from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.load.scenario import Scenario, load_scenario
from shardmeter.model.balance import balance
from shardmeter.model.evaluate import evaluate
from shardmeter.records import CostSource, Interconnect
from shardmeter.registry.manager import Registry, get_registry
from shardmeter.report.build import Report, ReportFigures, build_report
from shardmeter.resolve.resolver import LEVELS, Resolved, ResolvedIsland, resolve_scenario

__all__ = ["Estimator", "ResolvedIsland", "Resolved", "estimate"]


class Estimator:
    """Predicts one scenario (or a batch of plans) from registered parts."""

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        levels: Mapping[str, Any] | None = None,
        cost_source: str | CostSource | None = None,
    ):
        self.registry = registry if registry is not None else get_registry()
        self._levels = dict(levels or {})
        self._cost = cost_source
        #: The last scenario estimated, with what it resolved to and its scalar-path inputs
        #: (frozen records: estimating the same loaded Scenario again reuses them), and the
        #: report's figures of that Resolved (:class:`~shardmeter.report.build.ReportFigures`).
        self._prepared: tuple[Scenario, Resolved, ModelInputs, PartTable, ReportFigures] | None = None

    # -- recomposition -----------------------------------------------------------------------
    def with_part(self, kind: str, record: Any) -> Estimator:
        """A copy whose registry also holds (or replaces) ``record`` of ``kind``."""
        return Estimator(self.registry.override(kind, record), levels=self._levels, cost_source=self._cost)

    def with_level(self, level: str, link: str | Interconnect) -> Estimator:
        """A copy that prices topology ``level`` (``"intra_node"``, ``"inter_node"`` or
        ``"network"``) with ``link`` on every island, whatever the scenario says."""
        if level not in LEVELS:
            raise ValueError(f"unknown topology level {level!r}")
        levels = dict(self._levels)
        levels[level] = link
        return Estimator(self.registry, levels=levels, cost_source=self._cost)

    def with_cost_source(self, cost: str | CostSource) -> Estimator:
        """A copy that prices every island with ``cost``."""
        return Estimator(self.registry, levels=self._levels, cost_source=cost)

    # -- the stages ----------------------------------------------------------------------------
    def load(self, source: Any, overrides: Any = ()) -> Scenario:
        """``source`` (a path, a dict of tables or a :class:`Scenario`) with ``overrides`` applied:
        ``"KEY=VALUE"`` strings, ``(key, value)`` pairs or a ``{key: value}`` dict.

        A loaded scenario is returned as is without overrides; with some, its tables are loaded
        again with them (:func:`~shardmeter.load.scenario.load_scenario`), so that they apply as they
        do on its file or dict, and a bad key is an error naming it and the scenario's file."""
        if isinstance(overrides, str):
            overrides = (overrides,)
        elif isinstance(overrides, Mapping):  # {key: value}, as docs/python-api.md says
            overrides = tuple(overrides.items())
        else:
            overrides = tuple(overrides or ())
        if isinstance(source, Scenario) and not overrides:
            return source
        return load_scenario(source, overrides=overrides, registry=self.registry)

    def resolve(self, sc: Scenario) -> Resolved:
        """Every part of the scenario resolved (raises :class:`ScenarioError` on unknown names)."""
        return resolve_scenario(sc, self.registry, levels=self._levels, cost_source=self._cost)

    def inputs(
        self, res: Resolved | Scenario, table: PartTable | None = None
    ) -> tuple[ModelInputs, PartTable]:
        """Model inputs of shape (1, islands) and the part table their codes index."""
        if isinstance(res, Scenario):
            res = self.resolve(res)
        _no_stage_groups(res.scenario)
        return _balanced(res, *build_inputs(res, table))

    def estimate(self, source: Any, overrides: Any = ()) -> Report:
        """Predict a scenario (a :class:`Scenario`, a path or a dict) -> :class:`Report`.

        Load once, estimate many: the same loaded :class:`Scenario` (the same object, frozen)
        estimated again is not resolved again nor its inputs rebuilt, and its report's figures
        that depend on the Resolved alone are kept; the model and the report run every time."""
        # a loaded Scenario without overrides is load's own answer (it returns it as is)
        sc = source if type(overrides) is tuple and not overrides and isinstance(source, Scenario) else None
        if sc is None:
            sc = self.load(source, overrides)
        prepared = self._prepared
        if prepared is None or prepared[0] is not sc:
            res = self.resolve(sc)
            _no_stage_groups(res.scenario)
            prepared = (sc, res, *_balanced(res, *build_inputs(res, scalar=True)), ReportFigures(res))
            self._prepared = prepared
        _, res, inp, table, figures = prepared
        return build_report(res, evaluate(inp, table), row=0, figures=figures)


def _no_stage_groups(sc: Scenario) -> None:
    """A ``[[stage_group]]`` pipeline is estimated by :func:`shardmeter.hetero.estimate_pipeline`
    (``estimate`` and ``plan`` on the command line); the per-island model would ignore it."""
    if sc.stage_groups:
        raise ScenarioError(
            "a pipeline of stage groups is estimated by `estimate` and searched by `plan` "
            "(shardmeter.hetero.estimate_pipeline); this command prices per-island layouts only",
            path="stage_group",
            file=sc.file,
        )


def _balanced(res: Resolved, inp: ModelInputs, table: PartTable) -> tuple[ModelInputs, PartTable]:
    """The inputs with ``[sync] batch_split = "balanced"`` applied (several islands only)."""
    if len(res.islands) > 1 and res.scenario.sync.batch_split == "balanced":
        inp = balance(inp, table, res.scenario.file)
    return inp, table


def estimate(scenario: Any, *, overrides: Any = (), registry: Registry | None = None) -> Report:
    """Predict one scenario with the installed plugins -> :class:`~shardmeter.report.build.Report`."""
    return Estimator(registry).estimate(scenario, overrides)
