"""Helpers for testing ShardMeter plugins against a fresh plugin manager.

A plugin author's test suite needs neither an installed entry point nor the
process-wide registry::

    import shardmeter_acme
    from shardmeter.testing import check_records, fresh_registry, make_estimator

    def test_records_are_valid():
        found = check_records(shardmeter_acme)
        assert [r.name for r in found["hardware"]] == ["acme-x1"]

    def test_usable_in_a_scenario():
        est = make_estimator(shardmeter_acme)
        report = est.estimate({"model": {"preset": "llama3-8b"}, "training": {"global_batch": 64},
                               "island": [{"gpu": "acme-x1", "nodes": 1}]})
        assert report.feasible

Every helper builds a new plugin manager (entry points are not read, so an
installed copy of the plugin does not clash with the module under test).
"""

from __future__ import annotations

import ast
import inspect
import math
from collections.abc import Mapping
from typing import Any

import attrs

from shardmeter import hookspecs
from shardmeter.errors import PluginError
from shardmeter.parts import Part, option_defaults
from shardmeter.records import PART_KINDS, part_kinds
from shardmeter.registry.manager import Registry, kind_of, make_plugin_manager

__all__ = ["fresh_registry", "make_estimator", "check_records", "HOOKS"]

#: The contribution hooks, by name.
HOOKS = tuple(sorted({hook for _, hook in PART_KINDS.values()}))


def fresh_registry(*plugins: object, bundled: bool = True) -> Registry:
    """A registry built from a new plugin manager holding ``plugins``.

    :param plugins: plugin modules or objects with ``@shardmeter.hookimpl`` functions.
    :param bundled: also register ShardMeter's bundled plugins (GPUs, links,
        strategies, cost sources), as a real installation has; a name that a
        plugin shares with a bundled part is then reported as a duplicate.
    :raises PluginError: a duplicate name, a misspelt hook, a hook that fails.
    """
    pm = make_plugin_manager(entry_points=False, bundled=bundled, plugins=plugins)
    return Registry.from_plugin_manager(pm)


def make_estimator(*plugins: object, bundled: bool = True):
    """A :class:`shardmeter.Estimator` over :func:`fresh_registry` of ``plugins``."""
    from shardmeter.estimator import Estimator

    return Estimator(fresh_registry(*plugins, bundled=bundled))


def _fail(msg: str) -> None:
    raise AssertionError(msg)


def _check_option_value(where: str, key: str, value: Any) -> None:
    if not isinstance(key, str) or not key.isidentifier():
        _fail(f"{where}: option key {key!r} is not a valid TOML bare key / identifier")
    if isinstance(value, float) and not math.isfinite(value):
        _fail(f"{where}: option {key} has a non-finite default {value!r}")
    if not isinstance(value, (bool, int, float, str)):
        _fail(f"{where}: option {key} default must be a bool, int, float or str, got {type(value).__name__}")


def check_records(plugin: object, *, bundled: bool = True) -> dict[str, list]:
    """Call every ShardMeter hook ``plugin`` implements and validate what it returns.

    Checks that each implemented hook is a known hook (no misspelling), takes
    no arguments, returns an iterable of the record classes that hook expects,
    that names are unique within a kind, that strategy options are plain
    TOML scalars under keys that do not shadow a scenario key, that records
    survive :func:`attrs.evolve` (their validators pass) and that the plugin
    registers next to the bundled parts without a duplicate name.

    :param plugin: a module (or object) with ``@shardmeter.hookimpl`` functions.
    :param bundled: also check for name clashes with the bundled parts.
    :returns: the records by kind (``"hardware"``, ``"interconnect"``,
        ``"sharding"``, ``"schedule"``, ``"sync"``, ``"cost"``).
    :raises AssertionError: describing the first problem found.
    """
    from shardmeter.load.scenario import _PAR_FIELDS, _SYNC_FIELDS

    marker = f"{hookspecs.PROJECT}_impl"
    impls = {}
    for attr in dir(plugin):
        fn = getattr(plugin, attr, None)
        if callable(fn) and getattr(fn, marker, None) is not None:
            impls[attr] = fn
    if not impls:
        _fail(f"{plugin!r} implements no ShardMeter hook (decorate functions with @shardmeter.hookimpl)")
    found: dict[str, list] = {k: [] for k in PART_KINDS}
    for name, fn in sorted(impls.items()):
        if name not in HOOKS:
            import difflib

            close = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.6)
            _fail(f"{name} is not a ShardMeter hook" + (f" (did you mean {close[0]}?)" if close else ""))
        params = [p for p in inspect.signature(fn).parameters.values()]
        if params:
            _fail(f"{name} must take no arguments, takes ({', '.join(p.name for p in params)})")
        result = fn()
        if result is None or isinstance(result, (str, bytes, Mapping)) or not hasattr(result, "__iter__"):
            _fail(f"{name} must return or yield records, returned {type(result).__name__}")
        for rec in result:
            kind = kind_of(rec, name)
            if kind is None:
                want = " or ".join(c.__name__ for k, (cs, h) in part_kinds().items() if h == name for c in cs)
                _fail(f"{name} yielded {type(rec).__name__}, expected {want}")
                continue
            attrs.evolve(rec)  # re-runs every validator
            if any(r.name == rec.name for r in found[kind]):
                _fail(f"{name} yields {kind} name {rec.name!r} twice")
            options = getattr(rec, "options", None)
            if isinstance(rec, Part):
                options = option_defaults(rec.options)
            if options:
                fixed = _SYNC_FIELDS if kind == "sync" else _PAR_FIELDS
                for k, v in options.items():
                    _check_option_value(f"{kind} {rec.name!r}", k, v)
                    if k in fixed:
                        _fail(f"{kind} {rec.name!r}: option {k!r} shadows the scenario key of that name")
            found[kind].append(rec)
    try:
        fresh_registry(plugin, bundled=bundled)
    except PluginError as exc:
        _fail(str(exc))
    return found


def hookspec_signatures() -> dict[str, str]:
    """``{hook name: "def name() -> ReturnType"}`` as written in ``shardmeter/hookspecs.py``
    (what CONTRIBUTING.md documents)."""
    tree = ast.parse(inspect.getsource(hookspecs))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
            isinstance(d, ast.Name) and d.id == "hookspec" for d in node.decorator_list
        ):
            ret = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
            out[node.name] = f"def {node.name}({ast.unparse(node.args)}){ret}"
    return out
