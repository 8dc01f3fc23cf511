"""Measured steps of the user's own runs -> the efficiencies the other measurements leave open.

Input: scenario files with ``[measured]`` (any of :data:`STEP_FIELDS`). Unknowns, per GPU the
scenarios use: ``matmul_efficiency`` (``matmul_efficiency_fp8`` for fp8 runs) and
``attention_efficiency`` (``attention_efficiency_flash2`` for ``attention = "flash2"`` on a GPU
that has that figure; none for materialised attention), less those a GEMM CSV fixed. They
minimise ``sum_i ((predicted_i - measured_i) / measured_i)^2`` over every measured field of
every run, the prediction being ``shardmeter estimate`` itself with the trial values (the links
already calibrated), by Levenberg-Marquardt in [0.05, 1] (:func:`.lsq.gauss_newton_relative`).
An unknown no run depends on keeps its catalog value. The mean absolute relative error before
(catalog values) and after is reported; a fit held at a bound or leaving more than 25 % is
refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import numpy as np

from shardmeter.calibrate.lsq import gauss_newton_relative
from shardmeter.errors import ScenarioError
from shardmeter.estimator import Estimator
from shardmeter.report.build import STEP_FIELDS
from shardmeter.tables import safe_text

__all__ = ["STEP_FIELDS", "StepCase", "StepsFit", "fit_steps", "SEARCH"]

#: The bounds of the search; a value held at either is refused (:func:`_check_bounds`).
SEARCH = (0.05, 1.0)


def _check_bounds(keys: Sequence[tuple[str, str]], x: np.ndarray, files: Sequence[str]) -> None:
    """Refuse a fit with an unknown held at a search bound: at 1 the runs were faster than the
    model allows at the GPU's peak, at 0.05 slower than any plausible efficiency explains."""
    lo, hi = SEARCH
    pinned = [(k, float(v)) for k, v in zip(keys, x, strict=True) if v <= lo + 1e-6 or v >= hi - 1e-6]
    if pinned:
        what = ", ".join(f"{g} {f} = {v:.3g}" for (g, f), v in pinned)
        raise ScenarioError(
            f"the measured steps fit at a search bound ({what}; bounds [{lo:g}, {hi:g}]): the runs are "
            "faster (or slower) than the model can explain with any efficiency; not written (check the "
            "scenarios' GPU, precision and measured fields)",
            file=safe_text(files[0], limit=400) if files else None,
        )


def _check_residual(
    keys: Sequence[tuple[str, str]], x: np.ndarray, error: float, n: int, files: Sequence[str]
) -> None:
    """Refuse a fit that leaves a mean absolute relative error above
    :data:`~.nccl.MAX_MEAN_ERROR` over the measured fields (NaN: a run infeasible at the fitted
    values): no efficiency in the bounds explains the runs."""
    from shardmeter.calibrate.nccl import MAX_MEAN_ERROR

    if error <= MAX_MEAN_ERROR:
        return
    what = (
        ", ".join(f"{g} {f} = {v:.3g}" for (g, f), v in zip(keys, x, strict=True)) or "the catalog's values"
    )
    shown = "not finite" if not np.isfinite(error) else f"{error:.0%}"
    raise ScenarioError(
        f"the measured steps fit with {what} leave a mean |error| of {shown} over {n} measured fields "
        f"(at most {MAX_MEAN_ERROR:.0%}): not written (check the scenarios' GPU, precision, layout "
        "and measured fields)",
        file=safe_text(files[0], limit=400) if files else None,
    )


@attrs.frozen(kw_only=True)
class StepCase:
    """One measured field of one run, predicted before and after the fit."""

    file: str
    field: str
    measured: float
    before: float
    after: float


@attrs.frozen(kw_only=True)
class StepsFit:
    """``values``: ``{(gpu, field): fitted value}``; ``unused``: unknowns no run depends on;
    mean absolute relative errors ``error_before`` and ``error_after``; the ``cases``."""

    values: dict[tuple[str, str], float]
    unused: tuple[tuple[str, str], ...]
    error_before: float
    error_after: float
    cases: tuple[StepCase, ...]
    left_out: tuple[str, ...]


def _unknowns(sc, res) -> list[tuple[str, str]]:
    out = []
    for isl in res.islands:
        gpu = isl.gpu
        out.append(
            (gpu.name, "matmul_efficiency_fp8" if sc.training.precision == "fp8" else "matmul_efficiency")
        )
        att = sc.training.attention
        if att == "flash2" and gpu.attention_efficiency_flash2 is not None:
            out.append((gpu.name, "attention_efficiency_flash2"))
        elif att != "materialized":
            out.append((gpu.name, "attention_efficiency"))
    return out


def _start(gpu, field: str) -> float:
    v = getattr(gpu, field)
    if v is None:  # the field falls back to its 16-bit / native-kernel figure
        v = gpu.matmul_efficiency if field.startswith("matmul") else gpu.attention_efficiency
    return float(v)


def fit_steps(files: Sequence[str], registry, *, fixed: Iterable[tuple[str, str]] = ()) -> StepsFit:
    """Fit the unknowns over the measured fields of ``files`` (see the module docstring)."""
    est = Estimator(registry)
    fixed = set(fixed)
    cases: list[tuple[object, str, str, float]] = []
    keys: list[tuple[str, str]] = []
    gpus: dict[str, Any] = {}
    left_out: list[str] = []
    for f in files:
        sc = est.load(f)
        fields = [k for k in sc.measured if k in STEP_FIELDS]
        if not fields:
            raise ScenarioError(
                f"no measured field calibrate can fit to (one of {', '.join(STEP_FIELDS)})",
                path="measured",
                file=f,
            )
        res = est.resolve(sc)
        if not est.estimate(sc).feasible:
            left_out.append(f"{f}: infeasible, left out")
            continue
        for isl in res.islands:
            gpus.setdefault(isl.gpu.name, isl.gpu)
        for key in _unknowns(sc, res):
            if key not in fixed and key not in keys:
                keys.append(key)
        cases.extend((sc, f, k, float(sc.measured[k])) for k in fields)
    if not cases:
        raise ScenarioError("no feasible measured run to fit", file=files[0] if files else None)
    meas = np.array([c[3] for c in cases])

    def predict(x: np.ndarray, use: Sequence[tuple[str, str]]) -> np.ndarray:
        reg = registry
        by_gpu: dict[str, dict[str, float]] = {}
        for (g, field), v in zip(use, x, strict=True):
            by_gpu.setdefault(g, {})[field] = float(v)
        for g, vals in by_gpu.items():
            reg = reg.override("hardware", attrs.evolve(gpus[g], **vals), plugin="calibrate")
        e = Estimator(reg)
        out = []
        for sc, _, field, _ in cases:
            v = getattr(e.estimate(sc), field)
            out.append(np.nan if v is None else float(v))
        return np.array(out)

    x0 = np.array([_start(gpus[g], f) for g, f in keys])
    before = predict(x0, keys)
    used: list[tuple[str, str]] = []
    unused: list[tuple[str, str]] = []
    for j, key in enumerate(keys):  # an unknown no run depends on keeps its catalog value
        probe = x0.copy()
        probe[j] = x0[j] * 0.9
        (
            used
            if np.nanmax(np.abs(predict(probe, keys) - before)) > 1e-9 * np.nanmax(np.abs(before))
            else unused
        ).append(key)
    x0u = np.array([_start(gpus[g], f) for g, f in used])

    def residuals(x: np.ndarray) -> np.ndarray:
        r = (predict(x, used) - meas) / meas
        return np.where(np.isfinite(r), r, 1.0)

    x = gauss_newton_relative(residuals, x0u, *SEARCH) if used else x0u
    _check_bounds(used, x, files)
    after = predict(x, used) if used else before
    err_b = np.abs((before - meas) / meas)
    err_a = np.abs((after - meas) / meas)
    _check_residual(used, x, float(np.mean(err_a)), len(cases), files)
    return StepsFit(
        values={k: float(v) for k, v in zip(used, x, strict=True)},
        unused=tuple(unused),
        error_before=float(np.mean(err_b)),
        error_after=float(np.mean(err_a)),
        cases=tuple(
            StepCase(file=os.path.basename(c[1]), field=c[2], measured=c[3], before=float(b), after=float(a))
            for c, b, a in zip(cases, before, after, strict=True)
        ),
        left_out=tuple(left_out),
    )
