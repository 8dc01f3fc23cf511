"""Reading a framework's configuration file as strictly as a scenario file (a regular file of at
most 16 MiB, UTF-8 text, no NUL bytes): each problem a one-line error naming the file."""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

from shardmeter.errors import ShardMeterError
from shardmeter.load.files import MAX_SCENARIO_BYTES

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
    """The text of the file at ``path`` and its name."""
    name = os.fspath(path)
    try:
        st = os.stat(name)
    except FileNotFoundError:
        raise ConfigError(name, "no such file") from None
    except OSError as exc:
        raise ConfigError(name, f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(name, "is a directory, not a configuration file")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(name, "is not a regular file (a FIFO, device or socket)")
    if st.st_size > MAX_SCENARIO_BYTES:
        raise ConfigError(name, f"is {st.st_size:,} bytes; a configuration is at most {MAX_SCENARIO_BYTES:,}")
    try:
        with open(name, "rb") as fh:
            raw = fh.read(MAX_SCENARIO_BYTES + 1)
    except OSError as exc:
        raise ConfigError(name, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(name, "not a UTF-8 text file") from None
    if "\x00" in text:
        raise ConfigError(name, "not a text file (contains NUL bytes)")
    return text, name


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
