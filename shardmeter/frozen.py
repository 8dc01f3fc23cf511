"""A read-only mapping for the tables inside frozen records.

An ``attrs.frozen`` record refuses new attribute values, but a ``dict`` it holds stays mutable:
``gpu.peak_tflops["bf16"] = 1.0`` on a registered GPU changed every later estimate of the
process. :class:`FrozenDict` is the table those fields hold instead: a ``dict`` (so JSON,
``attrs.asdict``, ``cattrs`` and ``isinstance(v, dict)`` treat it as one) whose mutating methods
raise ``TypeError``, as a ``tuple`` does; it pickles and copies as its items (the planner's
worker processes receive records by pickle), and hashes by them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn, TypeVar

__all__ = ["FrozenDict", "freeze"]

K = TypeVar("K")
V = TypeVar("V")


class FrozenDict(dict[K, V]):
    """A ``dict`` that cannot change after it is built."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("this table is read-only (a frozen record's): build a new record instead")

    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def __copy__(self) -> FrozenDict[K, V]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict[K, V]:
        import copy

        return type(self)({k: copy.deepcopy(v, memo) for k, v in self.items()})

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


def freeze(value: Mapping[str, Any] | None) -> FrozenDict[str, Any]:
    """``value`` as a :class:`FrozenDict` (``None``: an empty one)."""
    if isinstance(value, FrozenDict):
        return value
    return FrozenDict(value or {})
