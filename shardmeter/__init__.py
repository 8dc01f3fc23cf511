"""ShardMeter: a fast analytical performance model for distributed LLM training."""

from __future__ import annotations

from shardmeter.errors import PluginError, ScenarioError, ShardMeterError

__version__ = "0.1.0"

#: The Python API, imported on first use (``shardmeter.estimate``, ``shardmeter.sweep``,
#: ``shardmeter.hookimpl``, the records and parts, ...) so that ``import shardmeter`` in a plugin
#: or ``shardmeter --help`` stays light and free of import cycles.
_LAZY = {
    "hookimpl": "shardmeter.hookspecs",
    "CommEvent": "shardmeter.parts",
    "FrameworkPart": "shardmeter.parts",
    "PipeInputs": "shardmeter.parts",
    "PipeTerms": "shardmeter.parts",
    "SchedulePart": "shardmeter.parts",
    "ShardingPart": "shardmeter.parts",
    "ShardInputs": "shardmeter.parts",
    "StackVersion": "shardmeter.parts",
    "StateBytes": "shardmeter.parts",
    "SyncPart": "shardmeter.parts",
    "SyncTerms": "shardmeter.parts",
    "WanInputs": "shardmeter.parts",
    "CostSource": "shardmeter.records",
    "HardwareProfile": "shardmeter.records",
    "Interconnect": "shardmeter.records",
    "PipelineSchedule": "shardmeter.records",
    "ShardingStrategy": "shardmeter.records",
    "SyncStrategy": "shardmeter.records",
    "Registry": "shardmeter.registry.manager",
    "get_registry": "shardmeter.registry.manager",
    "make_plugin_manager": "shardmeter.registry.manager",
    "load_scenario": "shardmeter.load.scenario",
    "Scenario": "shardmeter.load.scenario",
    "estimate": "shardmeter.estimator",
    "Estimator": "shardmeter.estimator",
    "Report": "shardmeter.report.build",
    "sweep": "shardmeter.api",
    "plan": "shardmeter.api",
    "sensitivity": "shardmeter.api",
    "SweepResult": "shardmeter.explore.formats.results",
    "SweepRow": "shardmeter.explore.formats.results",
    "PlanResult": "shardmeter.explore.formats.results",
    "Plan": "shardmeter.explore.formats.results",
    "SensitivityResult": "shardmeter.explore.formats.results",
    "SensitivityEntry": "shardmeter.explore.formats.results",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'shardmeter' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "load_scenario",
    "estimate",
    "Estimator",
    "Report",
    "Scenario",
    "sweep",
    "plan",
    "sensitivity",
    "SweepResult",
    "SweepRow",
    "PlanResult",
    "Plan",
    "SensitivityResult",
    "SensitivityEntry",
    "hookimpl",
    "HardwareProfile",
    "Interconnect",
    "CostSource",
    "ShardingStrategy",
    "PipelineSchedule",
    "SyncStrategy",
    "ShardingPart",
    "SchedulePart",
    "SyncPart",
    "FrameworkPart",
    "StackVersion",
    "ShardInputs",
    "StateBytes",
    "CommEvent",
    "PipeInputs",
    "PipeTerms",
    "WanInputs",
    "SyncTerms",
    "Registry",
    "get_registry",
    "make_plugin_manager",
    "ShardMeterError",
    "ScenarioError",
    "PluginError",
]
