"""One of two records of arrays, chosen row by row and read lazily.

The model times three pipeline stages and keeps, per row, the one that paces the step (and the
busiest GPU of three): :func:`pick` chooses between two records elementwise without building
the chosen record, each field picked when it is first read (:class:`_Picked`), so what no term
reads is never picked.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import attrs

from shardmeter.numeric import ops

__all__ = ["pick"]

R = TypeVar("R")


def pick(c: Any, a: R, b: R) -> R:
    """``a`` where ``c``, else ``b``: elementwise through attrs records of arrays (nested ones
    too), each field ``ops.where(c, a's, b's)`` computed on its first read; an array or number
    picked at once; a plain ``bool`` ``c`` (the scalar path: one plan) is the whole record
    ``a`` or ``b``, the same values as picking each field. Typed as the records it picks from."""
    if type(c) is bool:
        return a if c else b
    if isinstance(a, _Picked) or attrs.has(type(a)):
        return cast(R, _Picked(c, a, b))
    return cast(R, ops.where(c, a, b))


class _Picked:
    """An attrs record (or another ``_Picked``) ``a`` where ``c``, else ``b``, read as
    ``x.field``: each value is ``pick(c, a's, b's)``, computed on first read and kept; the same
    values as picking every field."""

    __slots__ = ("_a", "_b", "_c", "_fields")

    def __init__(self, c: Any, a: Any, b: Any) -> None:
        self._c, self._a, self._b = c, a, b
        self._fields: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._fields:
            self._fields[name] = pick(self._c, getattr(self._a, name), getattr(self._b, name))
        return self._fields[name]
