"""Terms only some plans have, computed only where some plan needs them.

``ops.where(c, a, b)`` evaluates both sides. A side no plan takes (the multi-head latent
attention projections of a model without MLA, shared experts, a dense model's "dense layers of
a MoE model", op recompute's GEMMs when no row recomputes per operator, the materialised score
matrix under flash attention) is work thrown away, and on the scalar path its degenerate shapes
(a GEMM of width zero) divide by zero, which sends the whole estimate to the array path.
:func:`where_needed` calls a side only when some plan takes it and returns what ``ops.where``
returns for the plans there are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["any_row", "where_needed"]


def any_row(c: Array) -> bool:
    """Whether some plan takes ``c``: a scalar's truth, else any element of the array."""
    return bool(c) if ops.is_scalar(c) else bool(np.any(c))


def where_needed(c: Array, a: Callable[[], Any], b: Callable[[], Any]) -> Any:
    """``ops.where(c, a(), b())``, calling only the sides some plan takes: one of them for a
    scalar ``c`` (or an array all true or all false, broadcast to ``c``'s shape as
    ``np.where`` would), both for a mixed batch. Sides that return tuples (a ``(forward,
    backward)`` pair) are picked element by element."""
    if type(c) is bool or ops.is_scalar(c) or np.ndim(c) == 0:  # the scalar path's bool first
        return a() if c else b()
    if not np.any(c):
        x = y = b()
    elif np.all(c):
        x = y = a()
    else:
        x, y = a(), b()
    if isinstance(x, tuple):
        return tuple(np.where(c, xi, yi) for xi, yi in zip(x, y, strict=True))
    return np.where(c, x, y)
