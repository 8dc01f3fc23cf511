"""A scenario being written from a configuration: keys with their origin, and comments."""

from __future__ import annotations

import sys
from typing import Any

import attrs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Draft", "TABLES"]

#: The tables of a written scenario, in the order they are written.
TABLES = ("model", "training", "island", "parallelism", "source")


@attrs.define
class Draft:
    """What an importer made of a configuration.

    :ivar kind: the format (``"torchtitan"``), named in the header.
    :ivar file: the file it was read from, as the user gave it.
    :ivar tables: ``table -> key -> value``, only keys this version accepts.
    :ivar why: ``"table.key" -> `` the setting the value came from (an end-of-line comment).
    :ivar notes: ``table -> `` comment lines written under it (unmapped and planned settings).
    :ivar header: comment lines written at the top.
    :ivar world: the GPUs it runs on; ``world_why`` says where that number came from.
    """

    kind: str
    file: str
    tables: dict[str, dict[str, Any]] = attrs.field(factory=lambda: {t: {} for t in TABLES})
    why: dict[str, str] = attrs.field(factory=dict)
    notes: dict[str, list[str]] = attrs.field(factory=lambda: {t: [] for t in TABLES})
    header: list[str] = attrs.field(factory=list)
    #: GPUs the configuration runs on (``--gpus``, or the importer's assumption, ``world_why``).
    world: int = 0
    world_why: str = ""
    #: Its data-parallel degree on those GPUs.
    dp: int = 1
    #: What the configuration needs from outside to make a scenario that loads: a shell
    #: variable or a key -> (how to give it, the scenario key that would do instead or "").
    needs: dict[str, tuple[str, str]] = attrs.field(factory=dict)

    def need(self, what: str, how: str, key: str = "") -> None:
        """Record that ``what`` must be given (``how``), or the scenario ``key`` set instead."""
        self.needs.setdefault(what, (how, key))

    def set(self, key: str, value: Any, why: str = "") -> None:
        """Write ``table.key = value``, with ``why`` as its comment."""
        table, name = key.split(".", 1)
        self.tables[table][name] = value
        if why:
            self.why[key] = why
        else:
            self.why.pop(key, None)

    def get(self, key: str, default: Any = None) -> Any:
        table, name = key.split(".", 1)
        return self.tables[table].get(name, default)

    def note(self, table: str, line: str) -> None:
        """A comment line under ``[table]``."""
        self.notes[table].append(line)

    def unmapped(self, table: str, setting: str, why: str = "") -> None:
        """A setting of the configuration with no scenario key (``why``: what it would change)."""
        self.note(table, f"not mapped: {setting}" + (f" ({why})" if why else ""))

    def planned(self, key: str, value: str, why: str = "") -> None:
        """A setting whose scenario key the contract names (``value``: TOML text): written as the
        key where this version accepts it and the value, else as a ``# planned:`` comment."""
        accepted = _accepted(key, value)
        if accepted is not None:
            self.set(key, accepted, why)
            return
        table = key.split(".", 1)[0]
        self.note(table, f"planned: {key} = {value}" + (f"  ({why})" if why else ""))


def _accepted(key: str, value: str) -> Any:
    """``value`` (TOML text) parsed, where ``key`` is a field of the training or parallelism
    record and the record takes that value; None otherwise."""
    from shardmeter.load.specs import ParallelismSpec, TrainingSpec

    table, name = key.split(".", 1)
    spec = {"training": TrainingSpec, "parallelism": ParallelismSpec}.get(table)
    if spec is None or name not in attrs.fields_dict(spec):
        return None
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return None
    base: dict[str, Any] = {"global_batch": 1} if spec is TrainingSpec else {}
    if name == "recompute_layers":
        base["recompute"] = "full"
    try:
        spec(**base, **{name: parsed})
    except (TypeError, ValueError):
        return None
    return parsed
