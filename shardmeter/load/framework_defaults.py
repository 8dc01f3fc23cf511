"""``training.framework``: a software-stack profile's defaults written into a scenario's raw
tables, before they are structured (docs/frameworks.md).

The profile (a ``FrameworkPart``, :mod:`shardmeter.plugins.frameworks` bundles some) reads a
copy of the tables and the islands' GPUs and returns ``{"table.key": (value, why)}``; every
key the scenario does not write is filled, with one note each, except a key whose absence
qualifies a key the scenario writes (:data:`~shardmeter.load.specs.QUALIFIES`: a written
``recompute = "full"`` means every layer, so no profile then fills ``recompute_layers``). A profile's code that raises is
one line naming the profile (:func:`framework_failed`), here and where its behaviour hooks run.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import attrs

from shardmeter.errors import ScenarioError
from shardmeter.load.specs import ModelSpec, qualified_key

__all__ = ["apply_framework", "framework_failed"]


#: The tables a software-stack profile may fill.
_FRAMEWORK_TABLES = ("training", "parallelism")


def framework_failed(name: str, exc: Exception, file: str | None) -> ScenarioError:
    """The one-line error for a framework profile whose code raised (its defaults or one of its
    behaviour hooks): names the profile and the exception, at ``training.framework``."""
    return ScenarioError(
        f"framework '{name}' failed: {type(exc).__name__}: {exc}", path="training.framework", file=file
    )


def apply_framework(
    data: dict[str, Any], model: ModelSpec, reg, file: str | None, notes: list[str]
) -> tuple[str, ...]:
    """``training.framework``: the named profile's defaults fill the ``[training]`` and
    ``[parallelism]`` keys the scenario does not write (a written key always wins, and an island's
    own ``[parallelism]`` keys win over the top-level table's), one note per value set. Returns
    the keys it set (``table.key``)."""
    name = data["training"].get("framework")
    if name is None:
        return ()
    if not isinstance(name, str):
        raise ScenarioError(
            f"expected a framework name (a string), got {name!r}", path="training.framework", file=file
        )
    part = reg.get("framework", name, path="training.framework", file=file)
    tables = copy.deepcopy({**data, "model": attrs.asdict(model)})  # the profile reads, never writes
    try:
        defaults = part.defaults(tables, _island_gpus(data, reg, file))
        items = list(dict(defaults).items())
    except ScenarioError:
        raise
    except Exception as exc:  # a plugin's bug is named, not a traceback
        raise framework_failed(name, exc, file) from exc
    written = {f"{t}.{k}" for t in _FRAMEWORK_TABLES if isinstance(data.get(t), dict) for k in data[t]}
    set_keys: list[str] = []
    for key, entry in items:
        table, _, field = str(key).partition(".")
        if table not in _FRAMEWORK_TABLES or not field or "." in field or field == "framework":
            raise ScenarioError(
                f"framework '{name}' sets {key!r}: a profile sets training.KEY and parallelism.KEY only",
                path="training.framework",
                file=file,
            )
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], str)):
            raise ScenarioError(
                f"framework '{name}' gives {key} as {entry!r:.60}, not (value, why)",
                path="training.framework",
                file=file,
            )
        target = data.setdefault(table, {})
        if not isinstance(target, dict) or field in target:
            continue  # written in the scenario (a non-table is reported where it is parsed)
        qualified = qualified_key(table, field)
        if qualified in written:  # its absence is part of what the written key means
            notes.append(
                f"framework {name} left {key} unset: {qualified} is written, and {key} would change "
                f"what it means"
            )
            continue
        target[field] = entry[0]
        notes.append(f"framework {name} set {key} = {_note_value(entry[0])} ({entry[1]})")
        set_keys.append(f"{table}.{field}")
    return tuple(set_keys)


def _island_gpus(data: Mapping[str, Any], reg, file: str | None) -> tuple:
    """The hardware profiles of the islands and offers, as far as the registry knows them
    (a GPU only a catalog overlay adds, or a malformed one, is left out: resolve reports it)."""
    from shardmeter.registry.lookup import resolve_part

    out = []
    for table in ("island", "islands", "offer"):
        rows = data.get(table)
        for k, row in enumerate(rows if isinstance(rows, list) else []):
            if isinstance(row, dict) and row.get("gpu") is not None:
                try:
                    out.append(resolve_part(reg, "hardware", row["gpu"], f"{table}[{k}].gpu", file))
                except ScenarioError:
                    continue
    return tuple(out)


def _note_value(value: Any) -> str:
    """A value as the scenario would write it (TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)
