"""A :class:`~.draft.Draft` as commented TOML: each key with the setting it came from, and the
comments under its table. Only the values a draft holds are written: strings, integers,
finite floats, booleans and lists of them."""

from __future__ import annotations

import math
from typing import Any

from shardmeter.importers.draft import TABLES, Draft

__all__ = ["render", "toml_value"]

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_value(v: Any) -> str:
    """``v`` as a TOML value (a basic string escaped as the TOML 1.0 specification requires)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"not a finite number: {v!r}")
        text = repr(v)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(v, str):
        out = []
        for c in v:
            if c in _ESCAPES:
                out.append(_ESCAPES[c])
            elif ord(c) < 0x20 or ord(c) == 0x7F:
                out.append(f"\\u{ord(c):04x}")
            elif 0xD800 <= ord(c) <= 0xDFFF:  # a lone surrogate (a JSON "\\ud800"): no TOML string holds one
                out.append("\\ufffd")
            else:
                out.append(c)
        return '"' + "".join(out) + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _comment(text: str) -> str:
    """One comment line: whitespace runs (a newline in a configuration's value must not end the
    comment) become one space; the characters TOML 1.0 forbids in a comment (controls other
    than tab, DEL) and lone surrogates are written as ``\\xNN`` / ``\\uNNNN`` text."""
    out = []
    for c in " ".join(str(text).split()):
        o = ord(c)
        if o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(c)
    return "# " + "".join(out)


def render(draft: Draft) -> str:
    """The scenario TOML of ``draft``."""
    lines = [_comment(h) if h else "#" for h in draft.header]
    for table in TABLES:
        keys = draft.tables.get(table, {})
        notes = draft.notes.get(table, [])
        if not keys and not notes:
            continue
        lines.append("")
        lines.append("[[island]]" if table == "island" else f"[{table}]")
        width = max((len(k) + len(toml_value(v)) + 3 for k, v in keys.items()), default=0)
        for k, v in keys.items():
            text = f"{k} = {toml_value(v)}"
            why = draft.why.get(f"{table}.{k}")
            lines.append(f"{text:<{width}}  {_comment(why)}" if why else text)
        lines.extend(_comment(n) for n in notes)
    return "\n".join(lines).lstrip("\n") + "\n"
