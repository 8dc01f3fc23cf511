"""A GEMM timing CSV -> the GPU's ``matmul_efficiency`` (16-bit) and ``matmul_efficiency_fp8``.

The CSV has a header and the columns ``m, n, k, dtype, seconds`` (others are ignored): one
``[m, k] @ [k, n]`` product per row and its measured time (``benchmarks/gemm_timing.py``
writes it). The model prices a GEMM with :func:`shardmeter.model.formulas.gemm_time` (a
roofline with wave quantisation at ``efficiency`` x the dense peak, inputs at the GPU's
achievable HBM bandwidth); the efficiency of each precision class is the value that minimises
the squared relative error of that very function over the class's rows
(:func:`.lsq.scalar_relative`, in [0.01, 1]). The printed curve is the achieved fraction of
peak, ``2 m n k / (peak x seconds)``, by GEMM size, against the model's.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence

import attrs
import numpy as np

from shardmeter.calibrate.lsq import rel_errors, scalar_relative
from shardmeter.errors import ScenarioError
from shardmeter.model.formulas import gemm_time
from shardmeter.records import HardwareProfile

__all__ = ["GemmRow", "GemmFit", "read_gemm_csv", "fit_gemm", "DTYPES", "model_times"]

#: ``dtype`` spellings -> (precision of the peak, bytes per input element).
DTYPES = {
    "bf16": ("bf16", 2.0),
    "bfloat16": ("bf16", 2.0),
    "torch.bfloat16": ("bf16", 2.0),
    "fp16": ("fp16", 2.0),
    "float16": ("fp16", 2.0),
    "half": ("fp16", 2.0),
    "torch.float16": ("fp16", 2.0),
    "fp8": ("fp8", 1.0),
    "e4m3": ("fp8", 1.0),
    "float8_e4m3fn": ("fp8", 1.0),
    "torch.float8_e4m3fn": ("fp8", 1.0),
}
_COLUMNS = ("m", "n", "k", "dtype", "seconds")


@attrs.frozen(kw_only=True)
class GemmRow:
    """One timed GEMM: its dimensions, ``precision`` (``bf16``/``fp16``/``fp8``) and
    ``seconds``; ``line`` in the CSV."""

    m: int
    n: int
    k: int
    precision: str
    seconds: float
    line: int


@attrs.frozen(kw_only=True)
class GemmFit:
    """A precision class's fit: the ``field`` it sets, its ``efficiency``, the mean absolute
    relative error of the model's times before (the catalog's value) and after, the ``rows``
    used, and the achieved-vs-model ``curve`` ``(flops, achieved, model)`` by size bucket."""

    field: str
    efficiency: float
    error_before: float
    error_after: float
    rows: int
    curve: tuple[tuple[float, float, float], ...]


def read_gemm_csv(path: str) -> list[GemmRow]:
    """The rows of a GEMM timing CSV; a bad cell is an error naming the file, line and column."""
    try:
        fh = open(path, newline="", encoding="utf-8-sig")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise ScenarioError(f"cannot read: {exc.strerror or exc}", file=path) from None
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise ScenarioError("empty file; expected a header m,n,k,dtype,seconds", file=path)
        cols = [h.strip().lower() for h in header]
        missing = [c for c in _COLUMNS if c not in cols]
        if missing:
            raise ScenarioError(
                f"missing column(s) {', '.join(missing)} (need m,n,k,dtype,seconds)", file=f"{path}:1"
            )
        idx = {c: cols.index(c) for c in _COLUMNS}
        rows = []
        for cells in reader:
            line = reader.line_num
            if not any(c.strip() for c in cells):
                continue
            if len(cells) < len(cols):
                raise ScenarioError(
                    f"expected {len(cols)} cells, got {len(cells)}", path="row", file=f"{path}:{line}"
                )
            dims = []
            for c in ("m", "n", "k"):
                raw = cells[idx[c]].strip()
                if not raw.isdigit() or int(raw) < 1:
                    raise ScenarioError(
                        f"expected an integer >= 1, got {raw!r}", path=c, file=f"{path}:{line}"
                    )
                dims.append(int(raw))
            dt = cells[idx["dtype"]].strip().lower()
            if dt not in DTYPES:
                raise ScenarioError(
                    f"unknown dtype {dt!r} (bf16, fp16, fp8 and their torch names)",
                    path="dtype",
                    file=f"{path}:{line}",
                )
            raw = cells[idx["seconds"]].strip()
            try:
                sec = float(raw)
            except ValueError:
                sec = math.nan
            if not math.isfinite(sec) or sec <= 0:
                raise ScenarioError(
                    f"expected a finite number > 0, got {raw!r}", path="seconds", file=f"{path}:{line}"
                )
            rows.append(
                GemmRow(m=dims[0], n=dims[1], k=dims[2], precision=DTYPES[dt][0], seconds=sec, line=line)
            )
    if not rows:
        raise ScenarioError("no GEMM rows after the header", file=path)
    return rows


def model_times(gpu: HardwareProfile, rows: Sequence[GemmRow], efficiency: float) -> np.ndarray:
    """The model's time of each row at ``efficiency`` (compute.py's call of ``gemm_time``)."""
    m = np.array([r.m for r in rows], dtype=float)
    n = np.array([r.n for r in rows], dtype=float)
    k = np.array([r.k for r in rows], dtype=float)
    peak = np.array([gpu.peak(r.precision) for r in rows]) * 1e12
    el = np.array([DTYPES[r.precision][1] for r in rows])
    hbm = gpu.memory_bandwidth_gb_s * 1e9 * gpu.hbm_efficiency
    return np.asarray(gemm_time(m, n, k, peak, efficiency, hbm, gpu.sm_count, el))


def _curve(
    gpu: HardwareProfile, rows: Sequence[GemmRow], eff: float
) -> tuple[tuple[float, float, float], ...]:
    flops = np.array([2.0 * r.m * r.n * r.k for r in rows])
    peak = np.array([gpu.peak(r.precision) for r in rows]) * 1e12
    meas = np.array([r.seconds for r in rows])
    model = model_times(gpu, rows, eff)
    bucket = np.floor(np.log10(flops))
    out = []
    for b in np.unique(bucket):
        sel = bucket == b
        out.append(
            (
                float(10.0**b),
                float(np.median(flops[sel] / (peak[sel] * meas[sel]))),
                float(np.median(flops[sel] / (peak[sel] * model[sel]))),
            )
        )
    return tuple(out)


def fit_gemm(gpu: HardwareProfile, rows: Sequence[GemmRow], file: str = "") -> list[GemmFit]:
    """One fit per precision class present: 16-bit rows set ``matmul_efficiency``, fp8 rows
    ``matmul_efficiency_fp8`` (see the module docstring)."""
    fits = []
    for field, precs in (("matmul_efficiency", ("bf16", "fp16")), ("matmul_efficiency_fp8", ("fp8",))):
        sel = [r for r in rows if r.precision in precs]
        if not sel:
            continue
        for r in sel:
            if gpu.peak(r.precision) <= 0:
                raise ScenarioError(
                    f"GPU '{gpu.name}' has no {r.precision} rate", path="dtype", file=f"{file}:{r.line}"
                )
        if field == "matmul_efficiency_fp8" and "fp8" not in gpu.peak_tflops:
            raise ScenarioError(
                f"GPU '{gpu.name}' has no fp8 units; its fp8 GEMMs run at 16 bits", path="dtype", file=file
            )
        meas = np.array([r.seconds for r in sel])

        def times(e: float, sel: list[GemmRow] = sel) -> np.ndarray:
            return model_times(gpu, sel, e)

        eff = scalar_relative(times, meas, 0.01, 1.0)
        old = getattr(gpu, field) or gpu.matmul_efficiency
        fits.append(
            GemmFit(
                field=field,
                efficiency=eff,
                error_before=float(np.mean(np.abs(rel_errors(model_times(gpu, sel, old), meas)))),
                error_after=float(np.mean(np.abs(rel_errors(model_times(gpu, sel, eff), meas)))),
                rows=len(sel),
                curve=_curve(gpu, sel, eff),
            )
        )
    return fits
