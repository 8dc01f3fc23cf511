"""Catalog overlays: TOML files of partial records that a scenario loads with ``catalog = ...``.

An overlay has the layout of ``shardmeter/hardware_catalog/*.toml`` (``[[gpu]]``, ``[[link]]``,
``[[cost]]`` entries) plus an optional ``[provenance]`` table and ``[[collective]]`` records
(what ``shardmeter calibrate`` fitted for each collective of a link: checked and reported, not
applied, since the model prices every collective of a link at the link's rate). An entry whose
``name`` is a registered record replaces the fields it gives, for the scenario that loads it
only; an entry under a new name adds a whole record (every required field given). The file is
read through :func:`shardmeter.reading.read_input` (a regular file, at most
:data:`MAX_OVERLAY_BYTES`, UTF-8) and holds at most :data:`MAX_ENTRIES` entries; every number
passes :func:`shardmeter.numbers.check_number`. Errors name the overlay file, the entry's line
(found in one pass over the text, :meth:`~shardmeter.reading.InputText.line_of`) and the field,
with names and keys from the file escaped for the terminal (:func:`shardmeter.tables.safe_text`).
The text ``shardmeter calibrate`` saves is written by :mod:`shardmeter.calibrate.overlay_out`
(calibrate sits above resolve; resolve never imports it).
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from shardmeter.errors import ScenarioError
from shardmeter.numbers import check_number
from shardmeter.reading import InputText, read_input
from shardmeter.records import CostSource, HardwareProfile, Interconnect
from shardmeter.registry.convert import structure_record
from shardmeter.tables import safe_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "TABLES",
    "COLLECTIVE_FIELDS",
    "MAX_ENTRIES",
    "MAX_OVERLAY_BYTES",
    "OverlayEntry",
    "CollectiveRecord",
    "Overlay",
    "read_overlay",
    "apply_overlays",
    "overlay_notes",
]

#: Largest overlay file read.
MAX_OVERLAY_BYTES = 16 * 1024 * 1024
#: Most entries (all tables together) one overlay may hold.
MAX_ENTRIES = 20_000
#: The ``[[collective]]`` record's fields -> (kind, minimum, maximum) (``str``, ``float``,
#: ``int``, ``bool``, ``list`` of str); ``link``, ``collective`` and ``latency_us``,
#: ``bandwidth_gb_s`` are required.
COLLECTIVE_FIELDS: dict[str, tuple[str, float | None, float | None]] = {
    "link": ("str", None, None),
    "collective": ("str", None, None),
    "algorithm": ("str", None, None),
    "latency_us": ("float", 0.0, 1e9),
    "bandwidth_gb_s": ("float", 0.0, 1e9),
    "efficiency": ("float", 0.0, 10.0),
    "rows": ("int", 0, 1e9),
    "mean_abs_error": ("float", 0.0, 1e6),
    "logs": ("list", None, None),
    "applied": ("bool", None, None),
    "source": ("str", None, None),
}
_COLLECTIVE_REQUIRED = ("link", "collective", "latency_us", "bandwidth_gb_s")

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
class CollectiveRecord:
    """One ``[[collective]]`` record: the ``fields`` as read (checked against
    :data:`COLLECTIVE_FIELDS`), its ``where`` and 1-based ``line``."""

    fields: Mapping[str, Any]
    where: str
    line: int


@attrs.frozen(kw_only=True)
class Overlay:
    """A read overlay: its ``file`` (as the scenario names it), ``entries``, the
    ``collectives`` records and a one-line ``provenance`` (the ``[provenance]`` table's
    ``tool`` and ``date``, or "")."""

    file: str
    entries: tuple[OverlayEntry, ...]
    provenance: str
    collectives: tuple[CollectiveRecord, ...] = ()


_HEAD = re.compile(r"^[ \t]*\[\[[ \t]*\"?([^\]\"]*?)\"?[ \t]*\]\]", re.M)


def _header_lines(text: InputText) -> dict[str, list[int]]:
    """Table name -> the 1-based line of each ``[[table]]`` header, in order: one pass over the
    text, each line from :meth:`~shardmeter.reading.InputText.line_of`."""
    out: dict[str, list[int]] = {}
    for m in _HEAD.finditer(text.text):
        out.setdefault(m.group(1), []).append(text.line_of(m.start()))
    return out


def _key_line(text: InputText, head: int, key: str) -> int:
    """Line of ``key = ...`` in the entry whose header is on line ``head`` (scanning that entry
    only, on the error path; a quoted key is read as TOML reads it); ``head`` when the entry
    writes it otherwise."""
    lines = text.text.splitlines()
    for j in range(head, len(lines)):
        ln = lines[j].lstrip()
        if ln.startswith("["):
            break
        if "=" in ln:
            try:
                if key in tomllib.loads(ln):
                    return j + 1
            except ValueError:  # a value spread over lines, or not a key line
                continue
    return head


def _where(file: str, line: int) -> str:
    return f"{file}:{line}" if line else file


def _loads(text: InputText, shown: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text.text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise ScenarioError(f"not valid TOML: {safe_text(exc)}", file=shown) from None
    except RecursionError:
        raise ScenarioError("nested too deep to read", file=shown) from None


def _check_numbers(entry: Mapping[str, Any], where: str, at: str) -> None:
    """Every number of ``entry`` (and of its tables, one level down: ``peak_tflops``) finite
    and within float range (:func:`shardmeter.numbers.check_number`)."""
    for key, v in entry.items():
        for sub, x in v.items() if isinstance(v, dict) else [("", v)]:
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                field = f"$.{where}.{safe_text(key)}" + (f".{safe_text(sub)}" if sub else "")
                check_number(x, field=field, file=at)


def _unknown_table(top: str, shown: str) -> ScenarioError:
    close = difflib.get_close_matches(top, [*TABLES, "collective", "provenance"], n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ScenarioError(
        f"unknown table{hint}; an overlay has [[gpu]], [[link]], [[cost]], [[collective]] and [provenance]",
        path=safe_text(top),
        file=shown,
    )


def _unknown_key(key: str, known: Iterable[str], what: str, where: str, at: str) -> ScenarioError:
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ScenarioError(f"unknown field of {what}{hint}", path=f"{where}.{safe_text(key)}", file=at)


def _entries(top, value, text: InputText, heads: list[int], shown: str) -> list[OverlayEntry]:
    kind, cls = TABLES[top]
    known = {f.name for f in attrs.fields(cls)}
    out = []
    for i, entry in enumerate(value):
        where = f"{top}[{i}]"
        line = heads[i] if i < len(heads) else 0
        at = _where(shown, line)
        if not isinstance(entry, dict):
            raise ScenarioError("expected a table", path=where, file=at)
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ScenarioError("expected a record name (a non-empty string)", path=f"{where}.name", file=at)
        for key in entry:
            if key not in known:
                raise _unknown_key(key, known, cls.__name__, where, _where(shown, _key_line(text, line, key)))
        _check_numbers(entry, where, at)
        fields = {k: v for k, v in entry.items() if k != "name"}
        out.append(OverlayEntry(kind=kind, name=name, fields=fields, where=where, line=line))
    return out


def _collective(entry: Any, where: str, at: str) -> Mapping[str, Any]:
    """A ``[[collective]]`` record checked field by field (:data:`COLLECTIVE_FIELDS`)."""
    if not isinstance(entry, dict):
        raise ScenarioError("expected a table", path=where, file=at)
    for key, v in entry.items():
        if key not in COLLECTIVE_FIELDS:
            raise _unknown_key(key, COLLECTIVE_FIELDS, "a collective record", where, at)
        kind, lo, hi = COLLECTIVE_FIELDS[key]
        path = f"$.{where}.{key}"
        if kind in ("float", "int"):
            check_number(v, field=path, file=at, integer=kind == "int", minimum=lo, maximum=hi)
        elif kind == "bool" and not isinstance(v, bool):
            raise ScenarioError("expected true or false", path=f"{where}.{key}", file=at)
        elif kind == "str" and not isinstance(v, str):
            raise ScenarioError("expected a string", path=f"{where}.{key}", file=at)
        elif kind == "list" and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise ScenarioError("expected a list of strings", path=f"{where}.{key}", file=at)
    missing = [k for k in _COLLECTIVE_REQUIRED if k not in entry]
    if missing:
        raise ScenarioError(f"missing {', '.join(missing)}", path=where, file=at)
    return {k: (float(v) if COLLECTIVE_FIELDS[k][0] == "float" else v) for k, v in entry.items()}


def _read(path: str, shown: str) -> Overlay:
    text = read_input(path, what="catalog overlay", max_bytes=MAX_OVERLAY_BYTES)
    data = _loads(text, shown)
    count = sum(len(v) for v in data.values() if isinstance(v, list))
    if count > MAX_ENTRIES:
        raise ScenarioError(f"{count:,} entries; an overlay holds at most {MAX_ENTRIES:,}", file=shown)
    heads = _header_lines(text)
    entries: list[OverlayEntry] = []
    collectives: list[CollectiveRecord] = []
    for top, value in data.items():
        if top == "provenance":
            if not isinstance(value, dict):
                raise ScenarioError("expected a table", path="provenance", file=shown)
            continue
        if top not in TABLES and top != "collective":
            raise _unknown_table(top, shown)
        if not isinstance(value, list):
            raise ScenarioError(f"expected [[{top}]] entries", path=top, file=shown)
        lines = heads.get(top, [])
        if top == "collective":
            for i, entry in enumerate(value):
                line = lines[i] if i < len(lines) else 0
                where = f"collective[{i}]"
                fields = _collective(entry, where, _where(shown, line))
                collectives.append(CollectiveRecord(fields=fields, where=where, line=line))
            continue
        entries += _entries(top, value, text, lines, shown)
    prov = data.get("provenance", {})
    summary = " ".join(str(prov[k]) for k in ("tool", "date") if k in prov and isinstance(prov[k], str))
    return Overlay(file=shown, entries=tuple(entries), provenance=summary, collectives=tuple(collectives))


@functools.lru_cache(maxsize=64)
def _cached(real: str, mtime_ns: int, size: int, shown: str) -> Overlay:
    return _read(real, shown)


def read_overlay(path: str, *, shown: str | None = None) -> Overlay:
    """The overlay at ``path`` (read once per file version; ``shown`` names it in errors)."""
    shown = safe_text(shown or path, limit=400)
    try:
        st = os.stat(path)
    except OSError:
        raise ScenarioError("no such catalog overlay file", file=shown) from None
    return _cached(os.path.realpath(path), st.st_mtime_ns, st.st_size, shown)


def _record(reg, entry: OverlayEntry, file: str, pending: Mapping[tuple[str, str], Any]):
    """The record ``entry`` makes: its fields over the record of its name that an earlier entry
    (``pending``) or the registry holds, else a new one."""
    cls = TABLES[next(t for t, (k, _) in TABLES.items() if k == entry.kind)][1]
    at = _where(file, entry.line)
    earlier = pending.get((entry.kind, entry.name))
    if earlier is None and reg.has(entry.kind, entry.name):
        earlier = reg.get(entry.kind, entry.name)
    if earlier is not None:
        merged = attrs.asdict(earlier, recurse=False)
        merged.update(entry.fields)
    else:
        merged = {"name": entry.name, **entry.fields}
    try:
        return structure_record(merged, cls, path=entry.where, file=at)
    except ScenarioError as exc:  # its message may quote a value of the file
        raise ScenarioError(safe_text(exc.message, limit=300), path=exc.path, file=exc.file) from None


def apply_overlays(reg, paths: Iterable[str], *, base: str | None, scenario_file: str | None):
    """``(registry, overlays)``: a copy of ``reg`` with every entry of the overlays at ``paths``
    (relative to the folder ``base``; the working folder when None) applied in order, a later
    file's entry over an earlier one's."""
    overlays = []
    for p in paths:
        full = p if os.path.isabs(p) or base is None else os.path.join(base, p)
        if not os.path.exists(full):
            raise ScenarioError(
                f"no such catalog overlay file: {safe_text(full, limit=400)}",
                path="catalog",
                file=scenario_file,
            )
        ov = read_overlay(full, shown=p if scenario_file is None else full)
        reg = _applied(reg, ov, f"catalog {p}")
        overlays.append(ov)
    return reg, overlays


#: ``(id(registry), id(overlay), plugin) -> (registry, overlay, the registry with it applied)``:
#: a planner resolves its scenario once per variant, each time over the same registry and the
#: same (cached) overlay; the inputs are held so that their ids are not reused.
_APPLIED: dict[tuple[int, int, str], tuple[Any, Overlay, Any]] = {}
_APPLIED_MAX = 16


def _applied(reg: Any, ov: Overlay, plugin: str) -> Any:
    """``reg`` with every entry of ``ov`` applied in order, in one copy (a later entry of a name
    over an earlier one's), computed once per registry and overlay."""
    key = (id(reg), id(ov), plugin)
    hit = _APPLIED.get(key)
    if hit is not None and hit[0] is reg and hit[1] is ov:
        return hit[2]
    pending: dict[tuple[str, str], Any] = {}
    records = []
    for entry in ov.entries:
        record = _record(reg, entry, ov.file, pending)
        pending[(entry.kind, entry.name)] = record
        records.append((entry.kind, record))
    out = reg.override_many(records, plugin=plugin)
    if len(_APPLIED) >= _APPLIED_MAX:
        _APPLIED.pop(next(iter(_APPLIED)))
    _APPLIED[key] = (reg, ov, out)
    return out


#: Unused entries of one overlay named one note each; the rest are counted in one note (an
#: overlay of thousands of records, most of them for other scenarios).
UNUSED_NOTES = 20


def overlay_notes(overlays: Iterable[Overlay], used: Mapping[str, set[str]]) -> list[str]:
    """One report note per overlay entry: which record it replaced or added, with which fields,
    and its provenance (the entry's ``source``, the overlay's ``[provenance]``); entries the
    scenario's parts do not use are named as unused."""
    notes = []
    for ov in overlays:
        shown = safe_text(ov.file, limit=400)
        unused = [e for e in ov.entries if e.name not in used.get(e.kind, set())]
        quiet = {id(e) for e in unused[UNUSED_NOTES:]}
        for e in ov.entries:
            if id(e) in quiet:
                continue
            fields = ", ".join(f"{safe_text(k)}={_short(v)}" for k, v in e.fields.items() if k != "source")
            src = safe_text(e.fields.get("source") or ov.provenance or "no provenance given", limit=600)
            table = next(t for t, (k, _) in TABLES.items() if k == e.kind)
            name = safe_text(e.name)
            if e.name in used.get(e.kind, set()):
                notes.append(f"catalog {shown}: {table} '{name}' applied ({fields or 'no fields'}; {src})")
            else:
                notes.append(f"catalog {shown}: {table} '{name}' not used by this scenario")
        if quiet:
            notes.append(f"catalog {shown}: {len(quiet):,} more entries not used by this scenario")
        if ov.collectives:
            notes.append(
                f"catalog {shown}: {len(ov.collectives)} [[collective]] fit(s) recorded, not applied "
                "(the model prices every collective of a link at the link's rate)"
            )
    return notes


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else safe_text(v)
