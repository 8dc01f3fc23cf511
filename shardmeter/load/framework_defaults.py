"""``training.framework``: a software-stack profile's defaults written into a scenario's raw
tables, before they are structured (docs/frameworks.md).

The profile (a ``FrameworkPart``, :mod:`shardmeter.plugins.frameworks` bundles some) reads a
copy of the tables and the islands' GPUs and returns ``{"table.key": (value, why)}``; every
key the scenario does not write is filled, with one note each, except a key whose absence
qualifies a key the scenario writes (:data:`~shardmeter.load.specs.QUALIFIES`: a written
``recompute = "full"`` means every layer, so no profile then fills ``recompute_layers``). A profile's code that raises is
one line naming the profile (:func:`framework_failed`), here and where its behaviour hooks run.

``training.framework_version`` picks the profile's state (:func:`framework_state`): the newest of
its dated :attr:`~shardmeter.parts.FrameworkPart.versions` at or before a date (``"YYYY-MM"`` is
the month's last day), a named release's, or the newest when unset; the first note names it.
"""

from __future__ import annotations

import calendar
import copy
import datetime
import difflib
import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from shardmeter.errors import ScenarioError
from shardmeter.load.specs import ModelSpec, qualified_key
from shardmeter.parts import FrameworkPart, StackVersion, call_framework
from shardmeter.registry.guard import PartFault, guarded_call

__all__ = ["apply_framework", "framework_failed", "framework_state", "version_note"]

_VERSION_KEY = "training.framework_version"


#: The tables a software-stack profile may fill.
_FRAMEWORK_TABLES = ("training", "parallelism")


def framework_failed(name: str, exc: Exception, file: str | None) -> ScenarioError:
    """The one-line error for a framework profile whose code raised (its defaults or one of its
    behaviour hooks): names the profile and the exception, at ``training.framework``; a
    :class:`~shardmeter.registry.guard.PartFault` (its result broken, or it raised) also names
    the plugin and distribution that provided it."""
    if isinstance(exc, PartFault):
        cause = exc.__cause__
        what = f"{type(cause).__name__}: {cause}" if isinstance(cause, Exception) else exc.problem
        return ScenarioError(
            f"framework '{name}' failed: {what} ({exc.label})", path="training.framework", file=file
        )
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
    asked = _version_text(data["training"], file)
    if name is None:
        if asked is not None:
            raise ScenarioError(
                "needs training.framework: it picks a state of that profile", path=_VERSION_KEY, file=file
            )
        return ()
    if not isinstance(name, str):
        raise ScenarioError(
            f"expected a framework name (a string), got {name!r}", path="training.framework", file=file
        )
    part = reg.get("framework", name, path="training.framework", file=file)
    version = framework_state(part, asked, file)
    if version is not None:
        notes.append(version_note(name, version, asked))
    tables = copy.deepcopy({**data, "model": attrs.asdict(model)})  # the profile reads, never writes
    try:
        gpus = _island_gpus(data, reg, file)
        defaults = guarded_call(
            "framework",
            part,
            "defaults",
            lambda: call_framework(part, "defaults", tables, gpus, version=version),
        )
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


def _version_text(training: dict[str, Any], file: str | None) -> str | None:
    """``training.framework_version`` as text (a TOML date, ``2025-04-07`` unquoted, is written
    back as ``"2025-04-07"``); None when unset."""
    value = training.get("framework_version")
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        value = training["framework_version"] = value.isoformat()
    if value is None or isinstance(value, str):
        return value
    raise ScenarioError(
        f'expected a date "YYYY-MM" or "YYYY-MM-DD" or a release name (a string), got {value!r}',
        path=_VERSION_KEY,
        file=file,
    )


def framework_state(part: FrameworkPart, asked: str | None, file: str | None = None) -> StackVersion | None:
    """The state of ``part`` that ``training.framework_version = asked`` picks: the newest of its
    :attr:`~shardmeter.parts.FrameworkPart.versions` dated at or before the date (``"YYYY-MM"``:
    the month's last day), the state of the release so named, or the newest when ``asked`` is
    None. None for a profile without a table (``asked`` must then be None). A malformed date, a
    date before the oldest state or an unknown release is a one-line error naming the key."""
    table = part.versions
    if asked is None:
        return table[-1] if table else None
    if not table:
        raise ScenarioError(
            f"framework '{part.name}' has one undated state: framework_version does not apply",
            path=_VERSION_KEY,
            file=file,
        )
    known = _known_states(part)
    day = _as_day(asked, known, file)
    if day is None:
        for state in table:
            if state.release == asked:
                return state
        releases = [s.release for s in table if s.release]
        close = difflib.get_close_matches(asked, releases, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ScenarioError(f"unknown release {asked!r}{hint}: {known}", path=_VERSION_KEY, file=file)
    if day < table[0].since:
        raise ScenarioError(f"{asked!r} is before the oldest state: {known}", path=_VERSION_KEY, file=file)
    return [s for s in table if s.since <= day][-1]


def _known_states(part: FrameworkPart) -> str:
    """What ``framework_version`` may name for ``part``, for its errors."""
    first, last = part.versions[0], part.versions[-1]
    releases = [s.release for s in part.versions if s.release]
    told = f", or a release: {', '.join(releases)}" if releases else " (it names no releases)"
    return (
        f"framework {part.name} knows its states from {first.since} ({first.short}) to "
        f'{last.since} ({last.short}): give a date "YYYY-MM" or "YYYY-MM-DD" from {first.since} on{told}'
    )


def _as_day(asked: str, known: str, file: str | None) -> str | None:
    """``asked`` as the day ``YYYY-MM-DD`` it stands for (a month: its last day); None when it is
    no date at all (a release name). A date-shaped value that is no valid date is an error."""
    if not re.fullmatch(r"\d{4}-\d+(-\d+)?", asked):
        return None
    try:
        if re.fullmatch(r"\d{4}-\d{2}", asked):
            year, month = (int(x) for x in asked.split("-"))
            return datetime.date(year, month, calendar.monthrange(year, month)[1]).isoformat()
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", asked):
            return datetime.date.fromisoformat(asked).isoformat()
    except ValueError:
        pass
    raise ScenarioError(f"{asked!r} is not a date; {known}", path=_VERSION_KEY, file=file)


def version_note(name: str, state: StackVersion, asked: str | None) -> str:
    """The note naming the state used: ``framework torchtitan as of 2025-04-07 (5e2033c7; ...):
    <its change>``."""
    how = [f"release {state.release}"] if state.release else []
    if state.repo:
        how.append(state.repo)
    if asked is None:
        how.append("the newest state it knows: training.framework_version picks another")
    elif asked != state.release:
        day = _as_day(asked, "", None)
        how.append(f'framework_version "{asked}"' + (f" = {day}" if day != asked else ""))
    return f"framework {name} as of {state.since} ({'; '.join([state.short, *how])}): {state.change}"


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
