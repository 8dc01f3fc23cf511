"""Variants of an already-loaded scenario: overrides applied by the load stage's rules.

A variant whose change is a plain value is made on the records (``attrs.evolve``) by whoever
needs it; this module is for the others, whose keys must be checked as a file's are and may
change what the loader derives (a preset's keys, a strategy's options, the notes): a ``--set`` /
``--vary`` key the user typed, a plan's layout and strategies. It is the one place above the
loader that turns a :class:`~shardmeter.load.specs.Scenario` back into tables.

The tables are either those the user wrote (:func:`~shardmeter.load.scenario.scenario_tables`:
a preset, a ``model.hf_config`` or a framework profile fills again what it filled, so an
override of ``model.preset`` or ``model.hf_config`` takes effect as it does on the file) or every value as loaded (``as_written=False``:
:meth:`~shardmeter.load.specs.Scenario.to_dict`, so only what the overrides name changes, as in
the planner's variants, whose every other key is pinned).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from shardmeter.load.hf_config import model_table_from_hf, read_hf_config
from shardmeter.load.overrides import apply_override, parse_override
from shardmeter.load.scenario import load_scenario, scenario_tables, without_default_sync
from shardmeter.load.specs import ModelSpec, Scenario, stale_qualifiers
from shardmeter.registry.manager import Registry

__all__ = ["Override", "ScenarioSource", "with_overrides", "variant_tables"]

#: ``(key, value)`` or ``"KEY=VALUE"``; a value of ``None`` removes the key (TOML has no null).
Override = tuple[str, Any] | str
#: What a scenario is read from: a TOML file's path, a dict of raw tables, or a loaded scenario.
ScenarioSource = str | os.PathLike[str] | Mapping[str, Any] | Scenario


def variant_tables(
    sc: Scenario, overrides: Iterable[Override] = (), *, as_written: bool = True
) -> dict[str, Any]:
    """The tables of scenario ``sc`` (as written, or every value as loaded) with ``overrides``
    applied in order (:func:`~shardmeter.load.overrides.apply_override`); a ``None`` value
    removes its key, so that a later override of a key beneath it starts a new table."""
    data = _written(sc) if as_written else without_default_sync(sc.to_dict(), sc)
    pairs = [parse_override(ov) if isinstance(ov, str) else ov for ov in overrides]
    named = {key for key, _ in pairs}
    for key, value in pairs:
        data = _remove(data, key) if value is None else apply_override(data, key, value)
        data = _drop_stale(data, key, value, named)
    return data


def _drop_stale(data: dict[str, Any], key: str, value: Any, named: set[str]) -> dict[str, Any]:
    """``data`` without the keys that qualify ``key`` and mean nothing at its new ``value``
    (:func:`~shardmeter.load.specs.stale_qualifiers`: ``recompute_layers`` once a variant sets
    ``recompute`` to anything but ``"full"``), unless the overrides set them too (``named``).
    ``key`` is a top-level table's (``training.recompute``) or an island's
    (``island.0.parallelism.x``)."""
    *head, last = key.split(".")
    if not head:
        return data
    for q in stale_qualifiers(head[-1], last, value):
        qkey = ".".join([*head, q])
        if qkey not in named:
            data = _remove(data, qkey)
    return data


def with_overrides(
    sc: Scenario,
    overrides: Iterable[Override] = (),
    *,
    registry: Registry | None = None,
    as_written: bool = True,
) -> Scenario:
    """Scenario ``sc`` with ``overrides`` applied by the load stage's rules: its
    :func:`variant_tables` loaded (:func:`~shardmeter.load.scenario.load_scenario`) as from
    ``sc``'s file, so a bad key is the one-line :class:`~shardmeter.errors.ScenarioError` naming
    it and the file, and paths in the tables (``catalog``, ``model.hf_config``) are read from
    where the file is."""
    tables = variant_tables(sc, overrides, as_written=as_written)
    return load_scenario(tables, registry=registry, file=sc.file)


def _remove(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data`` without the table key ``key`` (a dotted path of table names; absent: unchanged)."""
    out = dict(data)
    *head, last = key.split(".")
    cur = out
    for part in head:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            return out
        cur[part] = dict(nxt)
        cur = cur[part]
    cur.pop(last, None)
    return out


def _written(sc: Scenario) -> dict[str, Any]:
    """:func:`~shardmeter.load.scenario.scenario_tables`, less the ``[model]`` keys its
    ``hf_config`` (and the defaults) would give anyway, as for a preset."""
    data = scenario_tables(sc)
    model = data.get("model")
    path = model.get("hf_config") if isinstance(model, dict) else None
    if not isinstance(model, dict) or not isinstance(path, str) or "preset" in model:
        return data
    full = path if os.path.isabs(path) or not sc.file else os.path.join(os.path.dirname(sc.file), path)
    implied = {f.name: f.default for f in attrs.fields(ModelSpec) if f.default is not attrs.NOTHING}
    implied.update(model_table_from_hf(read_hf_config(full))[0])
    data["model"] = {k: v for k, v in model.items() if k == "hf_config" or implied.get(k, _NONE) != v}
    return data


_NONE = object()
