"""``--vary KEY=VALUES``: lists and ranges of scenario values.

``VALUES`` is a comma-separated list, each item read like a ``--set`` value
(a TOML value, else a bare string), or a range:

* ``a..bxk``: geometric, ``a, a k, a k^2, ...`` up to ``b`` (``1..512x2`` doubles);
* ``a..b+k``: arithmetic, ``a, a + k, ...`` up to ``b`` (``0..100+25``);
* ``a..b``: arithmetic with step 1.

Ranges of integers stay integers. ``b`` is included when the sequence hits it
(within a relative 1e-9 for floats). Lists and ranges mix: ``1,2..16x2,24``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from shardmeter.errors import ShardMeterError
from shardmeter.load.scenario import parse_override
from shardmeter.numbers import NumberError, check_number, parse_number

__all__ = ["parse_vary", "parse_values", "format_value", "MAX_RANGE", "gpu_count_key", "fields_of"]

#: A range longer than this is an error (a typo like ``1..1e9+1``).
MAX_RANGE = 100_000

_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
_RANGE = re.compile(rf"^\s*({_NUM})\s*\.\.\s*({_NUM})\s*(?:([x*+])\s*({_NUM}))?\s*$", re.ASCII)


def _num(text: str, key: str) -> int | float:
    """A range's bound or step: ASCII digits (the pattern is ``re.ASCII``: ``\\d`` alone takes
    other scripts' digits), finite and within float range (:func:`shardmeter.numbers.check_number`)."""
    integer = re.fullmatch(r"[-+]?[0-9]+", text.strip()) is not None
    try:
        v = parse_number(text, integer=integer, field=f"--vary {key}")
        return check_number(v, field=f"--vary {key}", integer=integer)
    except NumberError as exc:
        raise ShardMeterError(exc.message) from None


def _range(key: str, item: str) -> list[Any] | None:
    m = _RANGE.match(item)
    if not m:
        return None
    a, b = _num(m.group(1), key), _num(m.group(2), key)
    op, k = m.group(3), (_num(m.group(4), key) if m.group(4) else 1)
    ints = all(isinstance(x, int) for x in (a, b, k))
    out: list[Any] = []
    tol = 1e-9 * max(abs(a), abs(b), 1.0)
    if op in ("x", "*"):
        if a <= 0 or k <= 1 or b < a:
            raise ShardMeterError(f"--vary {key}={item}: a geometric range a..bxk needs 0 < a <= b and k > 1")
        x = a
        while x <= b + tol:
            out.append(x)
            x = x * k
            if len(out) > MAX_RANGE:
                break
    else:
        if k <= 0 or b < a:
            raise ShardMeterError(f"--vary {key}={item}: an arithmetic range a..b+k needs a <= b and k > 0")
        n = math.floor((b - a) / k + 1e-9) + 1
        if n > MAX_RANGE:
            raise ShardMeterError(f"--vary {key}={item}: {n} values (more than {MAX_RANGE})")
        out = [a + i * k for i in range(n)]
        if not ints:
            out = [round(x, 12) for x in out]
    if len(out) > MAX_RANGE:
        raise ShardMeterError(f"--vary {key}={item}: more than {MAX_RANGE} values")
    return out


def parse_values(key: str, text: str) -> list[Any]:
    """The values of one ``--vary`` item list (see the module docstring)."""
    if not text.strip():
        raise ShardMeterError(f"--vary {key}=: no values")
    vals: list[Any] = []
    # a single TOML value that itself contains commas (an inline table or array) is one value
    whole = parse_override(f"{key}={text}")[1]
    if isinstance(whole, (dict, list)):
        return [whole]
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise ShardMeterError(f"--vary {key}={text}: empty item")
        rng = _range(key, item)
        if rng is not None:
            vals.extend(rng)
        else:
            vals.append(parse_override(f"{key}={item}")[1])
    return vals


def parse_vary(text: str) -> tuple[str, list[Any]]:
    """``KEY=VALUES`` -> (key, values)."""
    if "=" not in text:
        raise ShardMeterError(f"--vary expects KEY=V1,V2,... or KEY=a..bxk, got '{text}'")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ShardMeterError(f"--vary expects KEY=V1,V2,..., got '{text}'")
    return key, parse_values(key, raw)


def format_value(v: Any) -> str:
    """A value as the CSV and the table show it (and ``--resume`` matches it)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
    if isinstance(v, (dict, list)):
        import json

        return json.dumps(v, sort_keys=True)
    return str(v)


_GPU_KEY = re.compile(
    r"^(islands?\[\d+\]\.(nodes|gpus_per_node)|parallelism\.dp|islands?\[\d+\]\.parallelism\.dp)$"
)


def gpu_count_key(key: str) -> bool:
    """Does ``key`` set how many GPUs are used (nodes, GPUs per node, dp)?"""
    return bool(_GPU_KEY.match(key))


def fields_of(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The scalar report fields of a sweep row: a fast row's ``fields`` (known without building
    its report, :class:`~shardmeter.explore.search.sweep_rows.SweepRow`), else its ``report`` (a
    plain or ``--resume``'d row)."""
    f = getattr(row, "fields", None)
    return f if f is not None else row["report"]
