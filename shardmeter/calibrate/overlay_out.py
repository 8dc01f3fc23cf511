"""The text of a catalog overlay, as ``shardmeter calibrate`` saves it (docs/calibration.md).

The writing half of overlays; the reading half, which resolve applies, is
:mod:`shardmeter.resolve.overlay` (its ``TABLES`` name the ``[[gpu]]``, ``[[link]]`` and
``[[cost]]`` tables written here).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["overlay_text", "toml_value"]


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
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def overlay_text(
    entries: Iterable[tuple[str, Mapping[str, Any]]], provenance: Mapping[str, Any], header: str
) -> str:
    """An overlay file: ``header`` (comment lines), ``[provenance]``, then each ``(table,
    fields)`` entry (``name`` first)."""
    out = [f"# {ln}" if ln else "#" for ln in header.splitlines()]
    out += ["", "[provenance]"]
    out += [f"{k} = {toml_value(v)}" for k, v in provenance.items()]
    for table, fields in entries:
        out += ["", f"[[{table}]]", f"name = {toml_value(fields['name'])}"]
        out += [f"{k} = {toml_value(v)}" for k, v in fields.items() if k != "name"]
    return "\n".join(out) + "\n"
