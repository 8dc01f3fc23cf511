"""Reading record catalogs (TOML data files) for plugins.

A catalog file holds an array of tables, one per record, whose keys are the
record's fields, e.g. ``shardmeter/hardware_catalog/gpus.toml``::

    [[gpu]]
    name = "a100-sxm-80gb"
    memory_gb = 80.0
    ...

Plugins call :func:`load_records` from their hook implementation; errors name
the file, the entry and the key.
"""

from __future__ import annotations

import sys
from importlib import resources
from typing import Any, TypeVar

import attrs

from shardmeter.errors import ScenarioError
from shardmeter.registry.convert import structure_record

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["load_records", "read_toml_text"]

T = TypeVar("T")


def read_toml_text(text: str, *, file: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"not valid TOML: {exc}", file=file) from None


def load_records(package: str, filename: str, table: str, record_cls: type[T]) -> list[T]:
    """Records of ``record_cls`` from the ``[[table]]`` entries of a data file.

    :param package: the package holding the file (``"shardmeter.hardware_catalog"``).
    :param filename: the file name inside it.
    :param table: the array-of-tables key (``"gpu"``, ``"link"``, ``"cost"``).
    """
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    data = read_toml_text(text, file=filename)
    out: list[T] = []
    for i, entry in enumerate(data.get(table, [])):
        out.append(structure_record(entry, record_cls, path=f"{table}[{i}]", file=filename))
    return out


def record_fields(record_cls) -> list[str]:
    return [f.name for f in attrs.fields(record_cls)]
