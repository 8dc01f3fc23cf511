"""The text of a catalog overlay, as ``shardmeter calibrate`` saves it (docs/calibration.md).

The writing half of overlays; the reading half, which resolve applies, is
:mod:`shardmeter.resolve.overlay` (its ``TABLES`` name the ``[[gpu]]``, ``[[link]]`` and
``[[cost]]`` tables written here).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from shardmeter.tables import safe_text

__all__ = ["overlay_text", "toml_value", "toml_string", "toml_key"]

#: TOML's short escapes (TOML 1.0, "Basic strings"); every other control character is ``\uXXXX``.
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string that reads back to the same text: quotes, backslashes and
    every control character (U+0000-U+001F, U+007F) escaped. A lone surrogate (an undecodable
    byte of a file name, Python's ``surrogateescape``) is no Unicode scalar value TOML can hold:
    it is written as the text of its escape (``\\udcff``)."""
    out = []
    for ch in text:
        o = ord(ch)
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{o:04x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append(f"\\\\u{o:04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    """``key`` bare when TOML allows it, else quoted."""
    return key if _BARE_KEY.match(key) else toml_string(key)


def toml_value(v: Any) -> str:
    """``v`` as a TOML value: booleans, integers, finite floats, strings, inline tables and arrays
    (a float's ``repr``, so it reads back to the same float)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"not a finite number: {v!r}")
        return repr(float(v))  # a numpy float's repr is np.float64(...)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{toml_key(str(k))} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def overlay_text(
    entries: Iterable[tuple[str, Mapping[str, Any]]], provenance: Mapping[str, Any], header: str
) -> str:
    """An overlay file: ``header`` (comment lines, control characters escaped), ``[provenance]``,
    then each ``(table, fields)`` entry (``name`` first)."""
    out = [f"# {safe_text(ln, limit=10_000)}" if ln else "#" for ln in header.splitlines()]
    out += ["", "[provenance]"]
    out += [f"{toml_key(k)} = {toml_value(v)}" for k, v in provenance.items()]
    for table, fields in entries:
        out += ["", f"[[{toml_key(table)}]]"]
        if "name" in fields:
            out.append(f"name = {toml_value(fields['name'])}")
        out += [f"{toml_key(k)} = {toml_value(v)}" for k, v in fields.items() if k != "name"]
    return "\n".join(out) + "\n"
