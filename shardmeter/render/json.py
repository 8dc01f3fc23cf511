"""Strict JSON for ``--json``: one document, non-finite numbers as ``null`` (JSON has no NaN)."""

from __future__ import annotations

import json
import math

__all__ = ["dump_json"]


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return _finite(o.item())
    if isinstance(o, np.ndarray):
        return _finite(o.tolist())
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dump_json(obj) -> str:
    """Strict JSON: non-finite floats (numpy's too) as null, never ``NaN`` or ``Infinity``."""
    return json.dumps(_finite(obj), default=_json_default, indent=2, allow_nan=False)


def _finite(o):
    if isinstance(o, float):  # numpy's float64 too
        return float(o) if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o
