"""Elementwise operations for the model's two paths: numpy arrays (a batch of plans) and plain
Python floats (one plan on one island, the scalar fast path of :func:`~.evaluate.evaluate`).

Each function takes the scalar branch only when every argument is a Python scalar (``float``,
``int``, ``bool``; numpy's ``float64`` is a ``float``), and is otherwise the numpy function of
the same name, so the array path computes exactly what it did before. The scalar branches
follow numpy's semantics where they matter here: ``ceil``/``floor``/``round`` return floats,
``round`` rounds half to even, ``mod`` takes the divisor's sign.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:

    class _Numpy:
        """numpy, imported on the first attribute read, which also puts the module itself in
        this module's globals: ``import shardmeter`` (a plugin, ``--help``) stays without
        numpy until a model runs, and after that first read ``np`` costs what it always did."""

        def __getattr__(self, name: str) -> Any:
            import numpy

            globals()["np"] = numpy
            return getattr(numpy, name)

    np = _Numpy()

__all__ = [
    "is_scalar",
    "where",
    "divide",
    "maximum",
    "minimum",
    "clip",
    "ceil",
    "floor",
    "log2",
    "mod",
    "absolute",
    "rint",
    "logical_not",
    "as_bool",
    "as_float",
    "tier",
    "n_tiers",
    "min_tier",
    "broadcast",
    "col0",
]

#: What the model computes with: a numpy array (a batch of plans) or a Python float (one plan).
Array = Any

_SCALARS = (float, int, bool)
#: Exact types of the scalar path (a type lookup is cheaper than isinstance over a tuple).
_FAST = frozenset({float, int, bool})
#: The scalar path's tests of a branch's inputs, ``set(map(type, xs)) <= ONLY_FLOAT`` (one C
#: pass over them): every one a plain float; with :data:`FLOAT_OR_BOOL`, a float or a bool.
ONLY_FLOAT = frozenset({float})
FLOAT_OR_BOOL = frozenset({float, bool})


def is_scalar(x: Array) -> bool:
    return type(x) is float or isinstance(x, _SCALARS)


def where(c: Array, a: Array, b: Array) -> Array:
    tc = type(c)
    if tc is bool and type(a) is float and type(b) is float:  # the scalar path's usual call
        return a if c else b
    if tc is bool and type(a) in _FAST and type(b) in _FAST:
        return a if c else b
    if isinstance(c, (bool, np.bool_)) and isinstance(a, _SCALARS) and isinstance(b, _SCALARS):
        return a if c else b
    return np.where(c, a, b)


def divide(a: Array, b: Array) -> Array:
    """``a / b`` with numpy's semantics where ``b`` is zero: ``+-inf`` by the signs of ``a`` and
    of the zero (IEEE 754 division), ``nan`` for ``0 / 0`` or a nan; a plain division
    otherwise. A quotient a plan may legitimately divide by zero (the throughput of an
    infeasible plan, whose step is 0) goes through here, so the scalar path computes numpy's
    answer instead of raising (and falling back to the 1-row array path)."""
    if type(b) is float and type(a) is float and b:  # the common case first
        return a / b
    if isinstance(a, _SCALARS) and isinstance(b, _SCALARS):
        if b:
            return a / b
        if a != a or not a:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return np.divide(a, b)


def maximum(a: Array, b: Array) -> Array:
    if type(a) is float and type(b) is float:  # the scalar path's usual call
        if a >= b:
            return a
        return b if b > a else math.nan  # neither holds: a nan, which propagates as in numpy
    if (type(a) in _FAST and type(b) in _FAST) or (isinstance(a, _SCALARS) and isinstance(b, _SCALARS)):
        if a != a or b != b:  # nan propagates, as in numpy
            return math.nan
        return a if a >= b else b
    return np.maximum(a, b)


def minimum(a: Array, b: Array) -> Array:
    if type(a) is float and type(b) is float:
        if a <= b:
            return a
        return b if b < a else math.nan
    if (type(a) in _FAST and type(b) in _FAST) or (isinstance(a, _SCALARS) and isinstance(b, _SCALARS)):
        if a != a or b != b:
            return math.nan
        return a if a <= b else b
    return np.minimum(a, b)


def clip(a: Array, lo: Array, hi: Array) -> Array:
    """``minimum(maximum(a, lo), hi)`` (numpy's definition)."""
    return minimum(maximum(a, lo), hi)


_finite = math.isfinite


def ceil(a: Array) -> Array:
    if type(a) is float:
        # finite (inf - inf and nan - nan are nan); numpy's ceil of inf or nan is itself
        return float(math.ceil(a)) if a - a == 0.0 else a
    if isinstance(a, _SCALARS) and _finite(a):
        return float(math.ceil(a))
    return np.ceil(a)


def floor(a: Array) -> Array:
    if type(a) is float:
        return float(math.floor(a)) if a - a == 0.0 else a
    if isinstance(a, _SCALARS) and _finite(a):
        return float(math.floor(a))
    return np.floor(a)


def log2(a: Array) -> Array:
    if isinstance(a, _SCALARS) and _finite(a) and a > 0:
        return math.log2(a)
    return np.log2(a)


def rint(a: Array) -> Array:
    """Round half to even (``np.round``)."""
    if isinstance(a, _SCALARS) and _finite(a):
        return float(round(a))
    return np.round(a)


def mod(a: Array, b: Array) -> Array:
    if isinstance(a, _SCALARS) and isinstance(b, _SCALARS) and b != 0 and _finite(a) and _finite(b):
        return float(a % b)
    return np.mod(a, b)


def absolute(a: Array) -> Array:
    if isinstance(a, _SCALARS):
        return abs(a)
    return np.abs(a)


def logical_not(a: Array) -> Array:
    if isinstance(a, (bool, np.bool_)):
        return not a
    return ~np.asarray(a, dtype=bool)


def as_bool(a: Array) -> Array:
    if type(a) is bool:
        return a
    if isinstance(a, _SCALARS):
        return bool(a)
    return np.asarray(a).astype(bool)


def as_float(a: Array) -> Array:
    if type(a) is float:
        return a
    if isinstance(a, _SCALARS):
        return float(a)
    return np.asarray(a, dtype=float)


def tier(x: Array | tuple[float, ...], t: int) -> Array:
    """Tier ``t`` of a tier array (the last axis), or of a tuple of per-tier scalars."""
    if isinstance(x, tuple):
        return x[t]
    return x[..., t]


def n_tiers(x: Array | tuple[float, ...]) -> int:
    return len(x) if isinstance(x, tuple) else int(np.shape(x)[-1])


def min_tier(x: Array | tuple[float, ...]) -> Array:
    """The smallest value over the tiers."""
    if isinstance(x, tuple):
        return min(x)
    return np.min(x, axis=-1)


def broadcast(x: Array, shape: tuple[int, ...]) -> Array:
    """``np.broadcast_to`` (a scalar stays a scalar)."""
    if isinstance(x, _SCALARS):
        return x
    return np.broadcast_to(x, shape)


def col0(x: Array) -> Array:
    """``x[..., 0]`` of an island-shaped array (a scalar is its own only island)."""
    if isinstance(x, _SCALARS) or np.ndim(x) == 0:
        return x
    return np.asarray(x)[..., 0]
