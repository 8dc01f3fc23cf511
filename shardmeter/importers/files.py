"""Reading a framework's configuration file through the one input reader
(:func:`shardmeter.reading.read_input`: a regular file of at most 16 MiB, UTF-8 text, no NUL
bytes): each problem a one-line error naming the file."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from shardmeter.errors import ShardMeterError
from shardmeter.load.files import MAX_SCENARIO_BYTES
from shardmeter.reading import InputError, read_input

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["read_text", "read_toml", "read_json", "ConfigError"]


class ConfigError(ShardMeterError):
    """A configuration ``shardmeter import`` cannot read: one line naming the file."""

    def __init__(self, file: str, message: str):
        self.file = file
        self.message = message
        super().__init__(f"{file}: {message}")


def read_text(path: str | os.PathLike) -> tuple[str, str]:
    """The text of the file at ``path`` and its name (:func:`shardmeter.reading.read_input`)."""
    try:
        got = read_input(path, what="configuration file", max_bytes=MAX_SCENARIO_BYTES)
    except InputError as exc:
        raise ConfigError(exc.file or os.fspath(path), exc.message) from None
    return got.text, got.name


def read_toml(path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    text, name = read_text(path)
    try:
        return tomllib.loads(text), name
    except ValueError as exc:
        raise ConfigError(name, f"not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(name, "nested too deeply") from None


def read_json(path: str | os.PathLike) -> tuple[Any, str]:
    text, name = read_text(path)
    try:
        return json.loads(text), name
    except ValueError as exc:
        raise ConfigError(name, f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(name, "nested too deeply") from None
