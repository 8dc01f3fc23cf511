"""Run the ``shardmeter`` command line with one installed-like plugin that breaks one hook in
one way (the driver of ``tests/test_part_faults_cli.py``, run as a subprocess).

``python tests/fault_plugin.py HOOK FAULT ARGS...``: ``HOOK`` is a hookspec of
:mod:`shardmeter.hookspecs` without its ``shardmeter_`` prefix; ``FAULT`` is ``none`` (a
working copy of a bundled part), ``nan``, ``negative``, ``shape``, ``type``, ``raise``,
``print`` or ``sleep``; ``ARGS`` are the command line's. The plugin is an entry point of a
distribution ``shardmeter-broken`` next to the real ones, and contributes one part named
``broken`` (a copy of a bundled one). A record hook (GPUs, links, cost sources) breaks where it
builds its records; a behaviour part breaks in one of its methods, each time the model calls it.
"""

from __future__ import annotations

import copy
import sys
import time
import types
from typing import Any

import attrs
import numpy as np

import shardmeter
from shardmeter.cli.app import main
from shardmeter.registry import guard, manager

#: hook -> (kind, bundled part copied, the record field or method broken, the result's field)
RECORDS = {
    "hardware_profiles": ("hardware", "a100-sxm-40gb", "memory_gb"),
    "interconnect_models": ("interconnect", "ib-hdr", "bandwidth_gb_s"),
    "cost_sources": ("cost", "cloud-on-demand", "usd_per_gpu_hour"),
}
BEHAVIOURS = {
    "sharding_strategies": ("sharding", "zero1", "state", "optimizer"),
    "pipeline_schedules": ("schedule", "1f1b", "terms", "bubble_s"),
    "sync_strategies": ("sync", "diloco", "exchange", "exposed_s"),
    "convergence_models": ("convergence", "diloco-fits", "terms", "tokens_factor"),
    "frameworks": ("framework", "torchtitan", "defaults", None),
    "failure_models": ("failures", "llama3-h100", "terms", "failures_per_h"),
    "variability_models": ("variability", "lognormal", "quantile_factor", None),
}
HOOKS = (*RECORDS, *BEHAVIOURS)
FAULTS = ("none", "nan", "negative", "shape", "type", "raise", "print", "sleep")

#: How long a sleeping part sleeps, past the watchdogs' thresholds set below.
SLEEP_S, SLOW_S = 0.8, 0.3


def _bad(value: Any, fault: str) -> Any:
    """A number or array broken by ``fault`` (nan, negative, shape)."""
    if fault == "nan":
        return np.asarray(value, dtype=float) * np.nan
    if fault == "negative":
        return -1.0 - np.abs(np.asarray(value, dtype=float))
    return np.ones((7, 7))


_slept = False


def _side_effect(fault: str) -> None:
    """The faults that change nothing in the result: raise, print, sleep (once)."""
    global _slept
    if fault == "raise":
        raise ZeroDivisionError("injected fault")
    if fault == "print":
        print("injected plugin chatter")
    if fault == "sleep" and not _slept:
        _slept = True
        time.sleep(SLEEP_S)


def _broken_result(result: Any, field: str | None, method: str, fault: str) -> Any:
    _side_effect(fault)
    if fault in ("none", "print", "sleep"):
        return result
    if fault == "type":
        return "injected"
    if method == "defaults":  # a profile's defaults: {key: (value, why)}
        return {**result, "training.micro_batch": (_bad(1.0, fault).tolist(), "injected")}
    if field is None:
        return _bad(result, fault)
    out = copy.copy(result)
    object.__setattr__(out, field, _bad(getattr(result, field), fault))
    return out


def _bundled(kind: str, name: str) -> Any:
    reg = shardmeter.Registry.from_plugin_manager(manager.make_plugin_manager())
    return reg.get(kind, name)


def _record_hook(hook: str, fault: str):
    kind, name, field = RECORDS[hook]
    base = _bundled(kind, name)

    def contribute():
        _side_effect(fault)
        if fault == "type":
            return ["injected"]
        if fault in ("nan", "negative", "shape"):
            bad = _bad(1.0, fault)
            return [attrs.evolve(base, name="broken", **{field: bad.tolist() if bad.ndim else float(bad)})]
        return [attrs.evolve(base, name="broken")]

    return contribute


def _behaviour_hook(hook: str, fault: str):
    kind, name, method, field = BEHAVIOURS[hook]
    base = _bundled(kind, name)

    def hooked(self, *args, **kwargs):
        return _broken_result(getattr(super(cls, self), method)(*args, **kwargs), field, method, fault)

    cls = type(f"Broken{type(base).__name__}", (type(base),), {"__slots__": (), method: hooked})
    part = copy.copy(base)
    object.__setattr__(part, "__class__", cls)
    object.__setattr__(part, "name", "broken")

    def contribute():
        return [part]

    return contribute


class _Dist:
    name, version = "shardmeter-broken", "6.6.6"


class _EntryPoint:
    name, group, dist = "broken", "shardmeter", _Dist()

    def __init__(self, plugin: types.ModuleType):
        self._plugin = plugin

    def load(self) -> types.ModuleType:
        return self._plugin


def run(hook: str, fault: str, argv: list[str]) -> int:
    plugin = types.ModuleType("broken_plugin")
    contribute = _record_hook(hook, fault) if hook in RECORDS else _behaviour_hook(hook, fault)
    setattr(plugin, f"shardmeter_{hook}", shardmeter.hookimpl(contribute))
    real = manager._entry_points
    manager._entry_points = lambda: [*real(), _EntryPoint(plugin)]  # type: ignore[assignment]
    guard.SLOW_PART_S = manager.SLOW_HOOK_S = SLOW_S  # type: ignore[misc]
    return main(argv)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
