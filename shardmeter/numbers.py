"""Checking every number that enters through one function: scenario keys, importers' settings,
calibration measurements, API arguments.

:func:`check_number` takes what a reader found (a TOML or JSON number, or the text of one in a
shell script or a log), and returns a Python ``int`` or ``float`` that is finite, within
``[minimum, maximum]``, integral where an integer is meant, and within float range; text must be
ASCII digits (``str.isdigit`` accepts superscripts and other scripts' digits that ``int``
refuses). A failure is one :class:`NumberError` line naming the source file and its field (a
flag, a key, a column), and the scenario key it maps to where there is one.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable
from typing import Any

from shardmeter.errors import ScenarioError

__all__ = ["NumberError", "check_number", "parse_number", "number_argument", "check_argument", "FLOAT_MAX"]

#: Largest magnitude a figure may have (as the scenario converter allows).
FLOAT_MAX = 1e18

_INT_TEXT = re.compile(r"[+-]?[0-9](?:_?[0-9])*\Z", re.ASCII)
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:[0-9](?:_?[0-9])*(?:\.[0-9](?:_?[0-9])*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z", re.ASCII
)


class NumberError(ScenarioError):
    """A number that is not what its field means: names the source file, its field and, where
    known, the scenario key."""

    def __init__(self, message: str, *, field: str, file: str | None = None, key: str = ""):
        self.field = field
        self.key = key
        where = field if not key or key == field else f"{field} (scenario key {key})"
        super().__init__(f"{where}: {message}", file=file)


def parse_number(
    text: str, *, integer: bool, field: str, file: str | None = None, key: str = ""
) -> int | float:
    """The number written as ``text`` (ASCII digits only; ``_`` separators allowed), as
    :func:`check_number` then checks it."""
    s = text.strip()
    pattern = _INT_TEXT if integer else _FLOAT_TEXT
    if not pattern.match(s) and not (not integer and _INT_TEXT.match(s)):
        kind = "an integer" if integer else "a number"
        raise NumberError(
            f"expected {kind} in ASCII digits, got {text[:40]!r}", field=field, file=file, key=key
        )
    if integer:
        if len(s.lstrip("+-").replace("_", "")) > 19:  # beyond any count, and int() of it is slow
            raise NumberError(f"{s[:24]}... is too large", field=field, file=file, key=key)
        return int(s)
    return float(s)


def check_number(
    value: Any,
    *,
    field: str,
    file: str | None = None,
    key: str = "",
    integer: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
) -> int | float:
    """``value`` as an ``int`` (``integer``; a float with no fraction is accepted) or a ``float``,
    checked: a number (not a bool), finite, at most :data:`FLOAT_MAX` in magnitude, within
    ``[minimum, maximum]``. Text is parsed with :func:`parse_number` first."""
    if isinstance(value, str):
        value = parse_number(value, integer=integer, field=field, file=file, key=key)
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)):
        value = int(value)  # numpy's integers, which are not ``int``
    elif isinstance(value, numbers.Real) and not isinstance(value, (bool, int, float)):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an integer" if integer else "a number"
        raise NumberError(f"expected {kind}, got {type(value).__name__}", field=field, file=file, key=key)
    if isinstance(value, float) and not math.isfinite(value):
        raise NumberError(f"{value} is not a finite number", field=field, file=file, key=key)
    if abs(value) > FLOAT_MAX:
        raise NumberError(
            f"{_short(value)} is beyond {FLOAT_MAX:g} in magnitude", field=field, file=file, key=key
        )
    if integer:
        if isinstance(value, float):
            if not value.is_integer():
                raise NumberError(f"expected an integer, got {value:g}", field=field, file=file, key=key)
            value = int(value)
    else:
        value = float(value)
    if minimum is not None and value < minimum:
        raise NumberError(f"{_short(value)} is below {minimum:g}", field=field, file=file, key=key)
    if maximum is not None and value > maximum:
        raise NumberError(f"{_short(value)} is above {maximum:g}", field=field, file=file, key=key)
    return value


def check_argument(
    value: Any,
    *,
    name: str,
    integer: bool = False,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
) -> int | float:
    """A Python API argument's number (``plan(max_gpus=...)``) under :func:`check_number`'s
    rules, and strictly greater than ``above`` where given; text is refused (an argument is a
    number, not the text of one). A problem is one :class:`NumberError` line naming ``name``."""
    if isinstance(value, str):
        kind = "an integer" if integer else "a number"
        raise NumberError(f"expected {kind}, got a string ({value[:40]!r})", field=name)
    v = check_number(value, field=name, integer=integer, minimum=minimum, maximum=maximum)
    if above is not None and not v > above:
        raise NumberError(f"expected a number > {above:g}, got {_short(v)}", field=name)
    return v


def _short(v: int | float) -> str:
    """A number for a message, never all the digits of a huge integer."""
    if isinstance(v, int) and abs(v) >= 10**12:
        digits = str(abs(v))
        return f"{'-' if v < 0 else ''}{digits[0]}.{digits[1:6]}e+{len(digits) - 1}"
    return f"{v:.6g}"


def number_argument(
    *,
    integer: bool,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    noun: str = "",
) -> Callable[[str], int | float]:
    """An argparse ``type`` for a numeric flag under the same rules as every other number
    (:func:`parse_number`: ASCII digits, so ``--top`` in full-width digits is refused where ``int()`` takes it;
    then :func:`check_number`: finite, at most :data:`FLOAT_MAX`, within ``[minimum, maximum]``),
    and, with ``above``, strictly greater than it. ``noun`` names what is counted in messages
    ("GPUs": "expected a whole number of GPUs"). Each problem is an
    :class:`argparse.ArgumentTypeError`, which argparse prints as one line naming the flag."""
    import argparse

    def bad(message: str) -> argparse.ArgumentTypeError:
        return argparse.ArgumentTypeError(message)

    def parse(text: str) -> int | float:
        shown = text[:40]
        try:
            v = parse_number(text, integer=integer, field="")
        except NumberError as exc:
            if exc.message.endswith("is too large"):
                raise bad(exc.message.removeprefix(": ")) from None
            if integer:
                kind = f"a whole number of {noun}" if noun else "an integer"
            else:
                kind = "a number" if above is None else f"a number > {above:g}"
            raise bad(f"expected {kind}, got {shown!r}") from None
        if isinstance(v, float) and not math.isfinite(v):
            raise bad(f"expected a finite number{'' if above is None else f' > {above:g}'}, got {shown}")
        if minimum is not None and v < minimum:
            kind = f"a number of {noun}" if integer and noun else "an integer" if integer else "a number"
            raise bad(f"expected {kind} >= {minimum:g}, got {_short(v)}")
        if above is not None and not v > above:
            raise bad(f"expected a number > {above:g}, got {shown}")
        try:
            return check_number(v, field="", integer=integer, maximum=maximum)
        except NumberError as exc:
            raise bad(exc.message.removeprefix(": ")) from None

    return parse
