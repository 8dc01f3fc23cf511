"""A part reference as a scenario writes it (a name, an inline table over a named record, a
whole inline record) -> its record: the one lookup both loading (a profile's defaults read the
GPU) and resolution use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from shardmeter.errors import ScenarioError
from shardmeter.records import CostSource, HardwareProfile, Interconnect
from shardmeter.registry.convert import structure_record

__all__ = ["resolve_part"]

_KIND_CLS = {"hardware": HardwareProfile, "interconnect": Interconnect, "cost": CostSource}


def resolve_part(reg, kind: str, ref: Any, path: str, file: str | None):
    """A registered name, an inline table ``{name = ..., field = ...}`` overriding a registered
    record, or a whole inline record; a record object is taken as it is."""
    cls = _KIND_CLS[kind]
    if isinstance(ref, cls):
        return ref
    if isinstance(ref, str):
        return reg.get(kind, ref, path=path, file=file)
    if isinstance(ref, Mapping):
        ref = dict(ref)
        name = ref.get("name")
        if name is None:
            return structure_record(ref, cls, path=path, file=file)
        if not isinstance(name, str):
            raise ScenarioError("expected a string", path=f"{path}.name", file=file)
        base = reg.get(kind, name, path=f"{path}.name", file=file)
        merged = attrs.asdict(base, recurse=False)
        merged.update(ref)  # unknown override keys are rejected by the strict converter
        return structure_record(merged, cls, path=path, file=file)
    raise ScenarioError("expected a part name or an inline table { name = ... }", path=path, file=file)
