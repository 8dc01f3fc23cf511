"""ShardMeter: a fast analytical performance model for distributed LLM training."""

from __future__ import annotations

from .errors import PluginError, ScenarioError, ShardMeterError
from .hookspecs import hookimpl
from .plugins_core import Registry, get_registry, make_plugin_manager
from .records import CostSource, HardwareProfile, Interconnect, PipelineSchedule, ShardingStrategy, SyncStrategy

__version__ = "0.1.0"

__all__ = [
    "hookimpl",
    "HardwareProfile",
    "Interconnect",
    "CostSource",
    "ShardingStrategy",
    "PipelineSchedule",
    "SyncStrategy",
    "Registry",
    "get_registry",
    "make_plugin_manager",
    "ShardMeterError",
    "ScenarioError",
    "PluginError",
]
