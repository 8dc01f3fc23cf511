"""Validators of the records' fields: finite numbers in a physical range, names, tables of
figures. A part's figure lies in [1e-9, 1e18] (0 where allowed): a denormal bandwidth or peak
(5e-324) would divide the model by ~0 into inf, a figure above 1e18 overflow it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import attrs

__all__ = ["PRECISIONS", "MIN_FIGURE", "MAX_FIGURE"]

#: Training precisions a scenario may name.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


#: The range a part's physical figure may have (besides 0 where 0 is allowed), as a scenario's
#: own numbers (:data:`shardmeter.registry.convert.FLOAT_MIN` / ``FLOAT_MAX``): a denormal bandwidth or
#: peak (``5e-324``) would divide the model by ~0 into inf, a figure above ``1e18`` overflow it.
MIN_FIGURE, MAX_FIGURE = 1e-9, 1e18


def _number(name: str, value: Any) -> float:
    """``value`` as a float; a TypeError unless a number, a ValueError if too large for one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {value!r}")
    try:
        return float(value)
    except OverflowError:  # a several-hundred-digit integer
        raise ValueError(f"{name}: a {len(str(abs(value)))}-digit integer is absurdly large") from None


def _in_range(name: str, value: float, floor: float | None) -> None:
    """``value`` (finite) is at most :data:`MAX_FIGURE` and, with ``floor``, at least it."""
    if value > MAX_FIGURE:
        raise ValueError(f"{name}: {value:.6g} is absurdly large (limit {MAX_FIGURE:g})")
    if floor is not None and value < floor:
        raise ValueError(f"{name}: {value!r} is absurdly small (at least {floor:g})")


def _positive(inst: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is None:
        return
    x = _number(attribute.name, value)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{attribute.name}: expected a finite number > 0, got {value!r}")
    _in_range(attribute.name, x, MIN_FIGURE)


def _nonneg(inst: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is None:
        return
    x = _number(attribute.name, value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{attribute.name}: expected a finite number >= 0, got {value!r}")
    _in_range(attribute.name, x, None)


def _fraction(inst: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is None:
        return
    _positive(inst, attribute, value)
    if value > 1.0:
        raise ValueError(f"{attribute.name}: expected a fraction in (0, 1], got {value!r}")


def _name(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{attribute.name}: expected a non-empty string, got {value!r}")


def _map_figure(name: str, v: Any, floor: float | None) -> None:
    """One value of a table of figures: a finite number > 0 (with ``floor``) or >= 0."""
    want = "> 0" if floor is not None else ">= 0"
    try:
        x = _number(name, v)
    except TypeError:
        raise ValueError(f"{name}: expected a finite number {want}, got {v!r}") from None
    if not math.isfinite(x) or x < 0 or (floor is not None and x == 0):
        raise ValueError(f"{name}: expected a finite number {want}, got {v!r}")
    _in_range(name, x, floor)


def _peaks(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping) or not value:
        raise ValueError("peak_tflops: expected a non-empty table of precision = TFLOP/s")
    for k, v in value.items():
        if k not in PRECISIONS:
            raise ValueError(f"peak_tflops.{k}: unknown precision (expected one of {', '.join(PRECISIONS)})")
        _map_figure(f"peak_tflops.{k}", v, MIN_FIGURE)


def _prices(inst: object, attribute: attrs.Attribute[Any], value: Mapping[str, float]) -> None:
    for k, v in value.items():
        _map_figure(f"{attribute.name}.{k}", v, None)
