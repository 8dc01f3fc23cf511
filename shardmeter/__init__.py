"""ShardMeter: a fast analytical performance model for distributed LLM training."""

from __future__ import annotations

from .errors import PluginError, ScenarioError, ShardMeterError
from .hookspecs import hookimpl
from .parts import (
    CommEvent,
    FrameworkPart,
    PipeInputs,
    PipeTerms,
    SchedulePart,
    ShardingPart,
    ShardInputs,
    StateBytes,
    SyncPart,
    SyncTerms,
    WanInputs,
)
from .plugins_core import Registry, get_registry, make_plugin_manager
from .records import (
    CostSource,
    HardwareProfile,
    Interconnect,
    PipelineSchedule,
    ShardingStrategy,
    SyncStrategy,
)

__version__ = "0.1.0"

#: The Python API, imported on first use (``shardmeter.estimate``, ``shardmeter.sweep``, ...) so that
#: ``import shardmeter`` in a plugin stays light and free of import cycles.
_LAZY = {
    "load_scenario": ".scenario",
    "Scenario": ".scenario",
    "estimate": ".estimator",
    "Estimator": ".estimator",
    "Report": ".report",
    "sweep": ".api",
    "plan": ".api",
    "sensitivity": ".api",
    "SweepResult": ".explore.results",
    "SweepRow": ".explore.results",
    "PlanResult": ".explore.results",
    "Plan": ".explore.results",
    "SensitivityResult": ".explore.results",
    "SensitivityEntry": ".explore.results",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
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
