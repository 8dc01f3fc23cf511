"""A configuration's settings as flat dotted paths, each marked when an importer reads it, so
that every setting it did not read can be listed as a comment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Settings", "shown"]


def shown(v: Any) -> str:
    """A setting's value as it would be written in TOML (``repr`` for anything else)."""
    from shardmeter.importers.toml_out import toml_value

    try:
        return toml_value(v)
    except (TypeError, ValueError):
        return repr(v)


class Settings:
    """The leaves of nested tables under their dotted paths (``quantize.linear.float8.recipe_name``)."""

    def __init__(self, tables: Mapping[str, Any]):
        self.values: dict[str, Any] = {}
        self.read: set[str] = set()
        self._flatten("", tables)

    def _flatten(self, prefix: str, obj: Mapping[str, Any]) -> None:
        for k, v in obj.items():  # file order
            if isinstance(v, Mapping) and v:
                self._flatten(f"{prefix}{k}.", v)
            else:
                self.values[f"{prefix}{k}"] = v

    def has(self, path: str) -> bool:
        return path in self.values

    def take(self, path: str, default: Any = None) -> Any:
        """The value at ``path`` (``default`` when absent), marked as read."""
        self.read.add(path)
        return self.values.get(path, default)

    def unread(self) -> dict[str, list[str]]:
        """``first-level table -> ["key = value", ...]`` of every setting not read, in file order."""
        out: dict[str, list[str]] = {}
        for path, v in self.values.items():
            if path not in self.read:
                table, _, key = path.partition(".")
                out.setdefault(table if key else "", []).append(f"{key or table} = {shown(v)}")
        return out
