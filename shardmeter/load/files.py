"""Reading a scenario's raw tables: a user's TOML file (or standard input, ``-``), strictly (existence, encoding, NUL
bytes, TOML syntax, nesting depth, each a one-line :class:`ScenarioError` naming the
file), and the bundled model presets."""

from __future__ import annotations

import copy
import functools
import os
import sys
from collections.abc import Mapping
from importlib import resources
from typing import Any

from shardmeter.errors import ScenarioError
from shardmeter.reading import decode_text, read_input_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "read_scenario_file",
    "read_scenario_stdin",
    "parse_scenario_bytes",
    "check_depth",
    "model_presets",
    "MAX_DEPTH",
    "STDIN_NAME",
]


#: Largest scenario file read (a 1,000-island scenario is about 50 kB).
MAX_SCENARIO_BYTES = 16 * 1024 * 1024


#: The name ``-`` (standard input) is given in messages and as the scenario's ``file``.
STDIN_NAME = "<stdin>"

#: Standard input read so far: ``(the stream, its tables)``. A stream is read once; a second
#: load of ``-`` in the same process (a sweep loads its file once per row) gets the same tables.
_stdin_read: tuple[Any, dict[str, Any]] | None = None


def read_scenario_file(path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    """The raw tables of the TOML file at ``path`` and its name; every problem (missing, a
    folder, unreadable, not UTF-8 text, not TOML, too deep) is a one-line :class:`ScenarioError`.

    ``-`` is standard input (the POSIX convention; a file named ``-`` is ``./-``), read once
    per process and named ``<stdin>``: relative paths in it resolve against the current folder."""
    name = os.fspath(path)
    if name == "-":
        return read_scenario_stdin(), STDIN_NAME
    raw = read_input_bytes(name, what="scenario file", max_bytes=MAX_SCENARIO_BYTES)
    return parse_scenario_bytes(raw, name), name


def read_scenario_stdin() -> dict[str, Any]:
    """The raw tables of the scenario on standard input, read once per stream by the one reader
    (:func:`~shardmeter.reading.read_input_bytes` of ``-``: at most :data:`MAX_SCENARIO_BYTES`, a
    terminal refused rather than waited on), then UTF-8 TOML."""
    global _stdin_read
    stream = sys.stdin
    if _stdin_read is not None and _stdin_read[0] is stream:
        return copy.deepcopy(_stdin_read[1])
    # the one reader's standard input (shardmeter/reading.py): closed, terminal and size refused
    raw = read_input_bytes("-", what="scenario", max_bytes=MAX_SCENARIO_BYTES)
    tables = parse_scenario_bytes(raw, STDIN_NAME)
    _stdin_read = (stream, tables)
    return copy.deepcopy(tables)


def parse_scenario_bytes(raw: bytes, name: str) -> dict[str, Any]:
    """The raw tables of a scenario's bytes: UTF-8 (a byte-order mark dropped), no NUL bytes,
    TOML; each problem a one-line :class:`ScenarioError` naming ``name``."""
    text = decode_text(raw, name)
    try:
        return tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise ScenarioError(f"not valid TOML: {exc}", file=name) from None
    except RecursionError:
        raise ScenarioError(f"nested more than {MAX_DEPTH} levels deep", file=name) from None


#: Deepest nesting of tables and arrays a scenario may have (real ones use 4).
MAX_DEPTH = 32


def check_depth(data: Any, file: str | None) -> None:
    """Reject absurdly nested data up front (iteratively), naming the key path, instead of
    failing later with a RecursionError that names nothing."""
    stack = [(data, "", 0)]
    while stack:
        obj, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ScenarioError(f"nested more than {MAX_DEPTH} levels deep", path=path, file=file)
        if isinstance(obj, Mapping):
            stack.extend((v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in obj.items())
        elif isinstance(obj, (list, tuple)):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(obj))


def model_presets() -> dict[str, dict[str, Any]]:
    """Bundled model presets (``shardmeter/presets/models.toml``): a copy of the file read once
    (a scenario's variants each merge a preset again), so a caller may change it."""
    return copy.deepcopy(_bundled_presets())


@functools.lru_cache(maxsize=1)
def _bundled_presets() -> dict[str, dict[str, Any]]:
    text = resources.files("shardmeter").joinpath("presets/models.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)
