"""``--set KEY=VALUE`` overrides on a scenario's raw tables (see SCENARIO.md).

A key is a dotted path with list indices (``island[0].nodes``, ``parallelism.tp``);
a value is read as a TOML value, else kept as a bare string. Overrides apply to the
raw tables before any checking, so a value is checked exactly as one in the file.
"""

from __future__ import annotations

import copy
import re
import sys
from typing import Any

from shardmeter.errors import ScenarioError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["parse_override", "apply_override"]

_TOKEN = re.compile(r"([A-Za-z_][\w-]*)((?:\[\d+\])*)")


def _split_path(path: str) -> list[str | int]:
    out: list[str | int] = []
    for part in path.split("."):
        m = _TOKEN.fullmatch(part)
        if not m:
            raise ScenarioError(f"bad key path '{path}' (expected e.g. island[0].nodes)", path=path)
        out.append(m.group(1))
        out.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> (key, value): VALUE read as a TOML value, else a bare string."""
    if "=" not in text:
        raise ScenarioError(f"--set expects KEY=VALUE, got '{text}'")
    key, raw = text.split("=", 1)
    key = key.strip()
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except ValueError:  # TOMLDecodeError, or an integer of more than 4300 digits
        value = raw
    return key, value


def apply_override(data: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """Set ``key`` (dotted path with list indices; ``island`` and ``islands``
    are the same table) to ``value`` in a copy of raw scenario ``data``."""
    data = copy.deepcopy(data)
    parts = _split_path(key)
    if parts and parts[0] == "islands":
        parts[0] = "island"
    cur: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(part, int):
            if not isinstance(cur, list) or part >= len(cur):
                raise ScenarioError(f"index {part} is out of range", path=key)
            if not isinstance(cur[part], dict):
                raise ScenarioError("not a table", path=key)
            cur = cur[part]
            continue
        if not isinstance(cur, dict):
            raise ScenarioError("not a table", path=key)
        if part not in cur or cur[part] is None:
            cur[part] = [] if isinstance(nxt, int) else {}
        elif isinstance(cur[part], str) and not isinstance(nxt, int):
            cur[part] = {"name": cur[part]}  # `island[0].gpu.memory_gb=96` on a named part
        cur = cur[part]
    last = parts[-1]
    if isinstance(last, int):
        if not isinstance(cur, list) or last >= len(cur):
            raise ScenarioError(f"index {last} is out of range", path=key)
        cur[last] = value
    else:
        if not isinstance(cur, dict):
            raise ScenarioError("not a table", path=key)
        cur[last] = value
    return data
