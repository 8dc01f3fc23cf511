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

import numpy as np

from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["any_row", "where_needed"]


def any_row(c: Array) -> bool:
    """Whether some plan takes ``c``: a scalar's truth, else any element of the array."""
    return bool(c) if ops.is_scalar(c) else bool(np.any(c))


def where_needed(c: Array, a: Callable[[], Array], b: Callable[[], Array]) -> Array:
    """``ops.where(c, a(), b())``, calling only the sides some plan takes: one of them for a
    scalar ``c`` (or an array all true or all false), both for a mixed batch."""
    if ops.is_scalar(c) or np.ndim(c) == 0:
        return a() if c else b()
    if not np.any(c):
        return b()
    if np.all(c):
        return a()
    return np.where(c, a(), b())
