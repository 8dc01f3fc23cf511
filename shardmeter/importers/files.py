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
from shardmeter.load.specs import MAX_COUNT
from shardmeter.numbers import NumberError, check_number, parse_number
from shardmeter.reading import InputError, read_input

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["read_text", "read_toml", "read_json", "ConfigError", "number", "number_text"]


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


def number(
    value: Any,
    *,
    field: str,
    file: str,
    integer: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    """A configuration's number checked by :func:`shardmeter.numbers.check_number` (finite, a
    number, in range; an integer where ``integer``, a count at most ``MAX_COUNT``): a problem
    is one :class:`ConfigError` line naming the file and ``field`` (its flag or setting)."""
    if integer and maximum is None:
        maximum = MAX_COUNT
    try:
        return check_number(value, field=field, file=file, integer=integer, minimum=minimum, maximum=maximum)
    except NumberError as exc:
        raise ConfigError(file, exc.message) from None


def number_text(
    text: str,
    *,
    field: str,
    file: str,
    integer: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    """A number written as text in a script (``--num-layers 32``, ``2e-4``), parsed by
    :func:`shardmeter.numbers.parse_number` (ASCII digits only) and checked as :func:`number`.
    An integer may be written as a whole float (``1e3``), as argparse's ``int(float(...))``
    does not, but Megatron's own arguments never need."""
    try:
        v = parse_number(text, integer=integer, field=field, file=file)
    except NumberError as exc:
        if not integer:
            raise ConfigError(file, exc.message) from None
        try:  # an integer written as a float (1e3): whole, finite and in range, or an error
            v = parse_number(text, integer=False, field=field, file=file)
        except NumberError:
            raise ConfigError(file, exc.message) from None
        if "e" not in text.lower() and "." not in text:
            raise ConfigError(file, exc.message) from None
    return number(v, field=field, file=file, integer=integer, minimum=minimum, maximum=maximum)
