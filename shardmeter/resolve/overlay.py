"""Catalog overlays: TOML files of partial records that a scenario loads with ``catalog = ...``.

An overlay has the layout of ``shardmeter/hardware_catalog/*.toml`` (``[[gpu]]``, ``[[link]]``,
``[[cost]]`` entries) plus an optional ``[provenance]`` table. An entry whose ``name`` is a
registered record replaces the fields it gives, for the scenario that loads it only; an entry
under a new name adds a whole record (every required field given). Errors name the overlay
file, the entry's line and the field. The text ``shardmeter calibrate`` saves is written by
:mod:`shardmeter.calibrate.overlay_out` (calibrate sits above resolve; resolve never imports it).
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from shardmeter.errors import ScenarioError
from shardmeter.load.files import read_scenario_file
from shardmeter.records import CostSource, HardwareProfile, Interconnect
from shardmeter.registry.convert import structure_record

__all__ = ["TABLES", "OverlayEntry", "Overlay", "read_overlay", "apply_overlays", "overlay_notes"]

#: Overlay table -> (registry kind, record class); the names of the bundled catalog files.
TABLES: dict[str, tuple[str, type]] = {
    "gpu": ("hardware", HardwareProfile),
    "link": ("interconnect", Interconnect),
    "cost": ("cost", CostSource),
}


@attrs.frozen(kw_only=True)
class OverlayEntry:
    """One ``[[table]]`` entry: the registry ``kind``, the record ``name``, the ``fields`` it
    gives (``name`` aside), and where it is (``where`` = ``"gpu[0]"``, 1-based ``line``)."""

    kind: str
    name: str
    fields: Mapping[str, Any]
    where: str
    line: int


@attrs.frozen(kw_only=True)
class Overlay:
    """A read overlay: its ``file`` (as the scenario names it), ``entries`` and a one-line
    ``provenance`` (the ``[provenance]`` table's ``tool`` and ``date``, or "")."""

    file: str
    entries: tuple[OverlayEntry, ...]
    provenance: str


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _entry_line(lines: list[str], table: str, index: int, key: str | None = None) -> int:
    """1-based line of the ``index``-th ``[[table]]`` header (of its ``key``, when that key is
    written on a line of its own in the entry); 0 when the file writes the entry otherwise."""
    head = re.compile(r"^\s*\[\[\s*" + re.escape(table) + r"\s*\]\]")
    seen = -1
    for i, ln in enumerate(lines):
        if head.match(ln):
            seen += 1
            if seen == index:
                if key is None:
                    return i + 1
                key_re = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
                for j in range(i + 1, len(lines)):
                    if lines[j].lstrip().startswith("["):
                        break
                    if key_re.match(lines[j]):
                        return j + 1
                return i + 1
    return 0


def _where(file: str, line: int) -> str:
    return f"{file}:{line}" if line else file


def _read(path: str, shown: str) -> Overlay:
    data, _ = read_scenario_file(path)
    with open(path, encoding="utf-8-sig") as fh:
        lines = _lines(fh.read())
    entries = []
    for top, value in data.items():
        if top == "provenance":
            if not isinstance(value, dict):
                raise ScenarioError("expected a table", path="provenance", file=shown)
            continue
        if top not in TABLES:
            close = difflib.get_close_matches(top, [*TABLES, "provenance"], n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ScenarioError(
                f"unknown table{hint}; an overlay has [[gpu]], [[link]], [[cost]] and [provenance]",
                path=top,
                file=shown,
            )
        if not isinstance(value, list):
            raise ScenarioError(f"expected [[{top}]] entries", path=top, file=shown)
        kind, cls = TABLES[top]
        known = {f.name for f in attrs.fields(cls)}
        for i, entry in enumerate(value):
            where = f"{top}[{i}]"
            at = _where(shown, _entry_line(lines, top, i))
            if not isinstance(entry, dict):
                raise ScenarioError("expected a table", path=where, file=at)
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                raise ScenarioError(
                    "expected a record name (a non-empty string)", path=f"{where}.name", file=at
                )
            for key in entry:
                if key not in known:
                    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
                    hint = f" (did you mean '{close[0]}'?)" if close else ""
                    raise ScenarioError(
                        f"unknown field of {cls.__name__}{hint}",
                        path=f"{where}.{key}",
                        file=_where(shown, _entry_line(lines, top, i, key)),
                    )
            fields = {k: v for k, v in entry.items() if k != "name"}
            entries.append(
                OverlayEntry(
                    kind=kind, name=name, fields=fields, where=where, line=_entry_line(lines, top, i)
                )
            )
    prov = data.get("provenance", {})
    summary = " ".join(str(prov[k]) for k in ("tool", "date") if k in prov and isinstance(prov[k], str))
    return Overlay(file=shown, entries=tuple(entries), provenance=summary)


@functools.lru_cache(maxsize=64)
def _cached(real: str, mtime_ns: int, size: int, shown: str) -> Overlay:
    return _read(real, shown)


def read_overlay(path: str, *, shown: str | None = None) -> Overlay:
    """The overlay at ``path`` (read once per file version; ``shown`` names it in errors)."""
    shown = shown or path
    try:
        st = os.stat(path)
    except OSError:
        raise ScenarioError("no such catalog overlay file", file=shown) from None
    return _cached(os.path.realpath(path), st.st_mtime_ns, st.st_size, shown)


def _record(reg, entry: OverlayEntry, file: str):
    cls = TABLES[next(t for t, (k, _) in TABLES.items() if k == entry.kind)][1]
    at = _where(file, entry.line)
    if entry.name in reg.names(entry.kind):
        merged = attrs.asdict(reg.get(entry.kind, entry.name), recurse=False)
        merged.update(entry.fields)
    else:
        merged = {"name": entry.name, **entry.fields}
    return structure_record(merged, cls, path=entry.where, file=at)


def apply_overlays(reg, paths: Iterable[str], *, base: str | None, scenario_file: str | None):
    """``(registry, overlays)``: a copy of ``reg`` with every entry of the overlays at ``paths``
    (relative to the folder ``base``; the working folder when None) applied in order, a later
    file's entry over an earlier one's."""
    overlays = []
    for p in paths:
        full = p if os.path.isabs(p) or base is None else os.path.join(base, p)
        if not os.path.exists(full):
            raise ScenarioError(f"no such catalog overlay file: {full}", path="catalog", file=scenario_file)
        ov = read_overlay(full, shown=p if scenario_file is None else full)
        for entry in ov.entries:
            reg = reg.override(entry.kind, _record(reg, entry, ov.file), plugin=f"catalog {p}")
        overlays.append(ov)
    return reg, overlays


def overlay_notes(overlays: Iterable[Overlay], used: Mapping[str, set[str]]) -> list[str]:
    """One report note per overlay entry: which record it replaced or added, with which fields,
    and its provenance (the entry's ``source``, the overlay's ``[provenance]``); entries the
    scenario's parts do not use are named as unused."""
    notes = []
    for ov in overlays:
        for e in ov.entries:
            fields = ", ".join(f"{k}={_short(v)}" for k, v in e.fields.items() if k != "source")
            src = e.fields.get("source") or ov.provenance or "no provenance given"
            table = next(t for t, (k, _) in TABLES.items() if k == e.kind)
            if e.name in used.get(e.kind, set()):
                notes.append(
                    f"catalog {ov.file}: {table} '{e.name}' applied ({fields or 'no fields'}; {src})"
                )
            else:
                notes.append(f"catalog {ov.file}: {table} '{e.name}' not used by this scenario")
    return notes


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
