"""A GEMM timing CSV -> the GPU's ``matmul_efficiency`` (16-bit) and ``matmul_efficiency_fp8``.

The CSV has a header and the columns ``m, n, k, dtype, seconds`` (others are ignored): one
``[m, k] @ [k, n]`` product per row and its measured time (``benchmarks/gemm_timing.py``
writes it). The model prices a GEMM with :func:`shardmeter.model.formulas.gemm_time` (a
roofline with wave quantisation at ``efficiency`` x the dense peak, inputs at the GPU's
achievable HBM bandwidth); the efficiency of each precision class is the value that minimises
the squared relative error of that very function over the class's rows
(:func:`.lsq.scalar_relative`, in [0.01, 1]). A GEMM timed faster than the peak, a fit at a
bound of the search or one leaving a mean error above 25 % is refused. The printed curve is the achieved fraction of
peak, ``2 m n k / (peak x seconds)``, by GEMM size, against the model's.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

import attrs
import numpy as np

from shardmeter.calibrate.lsq import rel_errors, scalar_relative
from shardmeter.errors import ScenarioError
from shardmeter.model.formulas import gemm_time
from shardmeter.numbers import NumberError, check_number
from shardmeter.reading import read_input
from shardmeter.records import HardwareProfile
from shardmeter.tables import safe_text

__all__ = [
    "GemmRow",
    "GemmFit",
    "read_gemm_csv",
    "fit_gemm",
    "DTYPES",
    "model_times",
    "MAX_CSV_BYTES",
    "MAX_GEMM_ROWS",
]

#: Largest GEMM CSV read, and most rows (a sweep of shapes is a few hundred).
MAX_CSV_BYTES = 16 * 1024 * 1024
MAX_GEMM_ROWS = 100_000
#: The bounds of the efficiency search; a fit at either is refused (see :func:`fit_gemm`).
SEARCH = (0.01, 1.0)

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


def _cell(raw: str, field: str, at: str, *, integer: bool) -> float:
    try:
        v = check_number(raw.strip(), field=field, file=at, integer=integer)
    except NumberError as exc:
        raise ScenarioError(exc.message.partition(": ")[2], path=field, file=at) from None
    if v <= 0 or (integer and v < 1):
        kind = "an integer >= 1" if integer else "a finite number > 0"
        raise ScenarioError(f"expected {kind}, got {safe_text(raw.strip())!r}", path=field, file=at)
    return v


def read_gemm_csv(path: str) -> list[GemmRow]:
    """The rows of a GEMM timing CSV, read through :func:`shardmeter.reading.read_input` (a
    regular file of at most :data:`MAX_CSV_BYTES`, UTF-8) and every cell through
    :func:`shardmeter.numbers.check_number`; a bad cell is an error naming the file, line and
    column."""
    text = read_input(path, what="GEMM timing CSV", max_bytes=MAX_CSV_BYTES)
    shown = safe_text(path, limit=400)
    reader = csv.reader(io.StringIO(text.text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise ScenarioError("empty file; expected a header m,n,k,dtype,seconds", file=shown)
        cols = [h.strip().lower() for h in header]
        missing = [c for c in _COLUMNS if c not in cols]
        if missing:
            raise ScenarioError(
                f"missing column(s) {', '.join(missing)} (need m,n,k,dtype,seconds)", file=f"{shown}:1"
            )
        idx = {c: cols.index(c) for c in _COLUMNS}
        rows: list[GemmRow] = []
        for cells in reader:
            line = reader.line_num
            if not any(c.strip() for c in cells):
                continue
            at = f"{shown}:{line}"
            if len(cells) < len(cols):
                raise ScenarioError(f"expected {len(cols)} cells, got {len(cells)}", path="row", file=at)
            if len(rows) >= MAX_GEMM_ROWS:
                raise ScenarioError(f"more than {MAX_GEMM_ROWS:,} GEMM rows", file=shown)
            m, n, k = (int(_cell(cells[idx[c]], c, at, integer=True)) for c in ("m", "n", "k"))
            dt = cells[idx["dtype"]].strip().lower()
            if dt not in DTYPES:
                raise ScenarioError(
                    f"unknown dtype {safe_text(dt)!r} (bf16, fp16, fp8 and their torch names)",
                    path="dtype",
                    file=at,
                )
            sec = _cell(cells[idx["seconds"]], "seconds", at, integer=False)
            rows.append(GemmRow(m=m, n=n, k=k, precision=DTYPES[dt][0], seconds=sec, line=line))
    except csv.Error as exc:
        raise ScenarioError(f"not a CSV file: {exc}", file=f"{shown}:{reader.line_num}") from None
    if not rows:
        raise ScenarioError("no GEMM rows after the header", file=shown)
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


def _check_bounds(gpu: HardwareProfile, field: str, eff: float, rows: Sequence[GemmRow], file: str) -> None:
    """Refuse a fit held at a bound of the search: at 1 the GEMMs ran faster than the model
    allows at the GPU's peak (a wrong ``--gpu``, or sparse / fp8 rates for dense ones), at 0.01
    no efficiency explains them (a unit error in ``seconds``)."""
    lo, hi = SEARCH
    if eff < hi - 1e-4 and eff > lo + 1e-4:
        return
    best = max(2.0 * r.m * r.n * r.k / r.seconds / 1e12 for r in rows)
    prec = rows[0].precision
    raise ScenarioError(
        f"{field} of '{safe_text(gpu.name)}' fits at the search bound {eff:.3g} (of [{lo:g}, {hi:g}]): "
        f"the fastest GEMM runs {best:.4g} TFLOP/s against the GPU's {gpu.peak(prec):.4g} {prec} peak; "
        "not written (wrong --gpu, or seconds not in seconds)",
        file=safe_text(file, limit=400),
    )


def _check_below_peak(gpu: HardwareProfile, rows: Sequence[GemmRow], file: str) -> None:
    """Refuse a GEMM timed faster than the GPU's dense peak at its precision, ``2 m n k /
    seconds > peak``: no kernel exceeds the peak (NVIDIA, "Matrix Multiplication Background
    User's Guide": the peak is the Tensor Cores' rate), so the row measured another GPU, a
    sparse or lower-precision kernel, or not seconds. The fastest such row is named."""
    over = [
        (2.0 * r.m * r.n * r.k / r.seconds / 1e12 / gpu.peak(r.precision), r)
        for r in rows
        if 2.0 * r.m * r.n * r.k / r.seconds > gpu.peak(r.precision) * 1e12
    ]
    if not over:
        return
    ratio, r = max(over, key=lambda x: x[0])
    raise ScenarioError(
        f"{len(over)} of {len(rows)} GEMMs run faster than the {r.precision} peak of "
        f"'{safe_text(gpu.name)}' ({gpu.peak(r.precision):.4g} TFLOP/s): {r.m}x{r.n}x{r.k} in "
        f"{r.seconds:.4g} s is {ratio * gpu.peak(r.precision):.4g} TFLOP/s, {ratio:.2f} x the peak; not "
        "written (wrong --gpu or dtype, or seconds not in seconds)",
        file=f"{safe_text(file, limit=400)}:{r.line}",
    )


def _check_residual(gpu: HardwareProfile, field: str, eff: float, error: float, rows: int, file: str) -> None:
    """Refuse a fit whose mean absolute relative error is above
    :data:`~.nccl.MAX_MEAN_ERROR` (the link fits' bound): the times do not follow the
    roofline the model prices GEMMs with, at any one efficiency."""
    from shardmeter.calibrate.nccl import MAX_MEAN_ERROR

    if error > MAX_MEAN_ERROR:
        raise ScenarioError(
            f"{field} of '{safe_text(gpu.name)}' = {eff:.3g} leaves a mean |error| of {error:.0%} over "
            f"{rows} GEMMs (at most {MAX_MEAN_ERROR:.0%}): not written; the times do not follow the "
            "model's roofline at one efficiency (mixed GPUs, clocks, or warm-up included)",
            file=safe_text(file, limit=400),
        )


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

        eff = scalar_relative(times, meas, *SEARCH)
        _check_bounds(gpu, field, eff, sel, file)
        _check_below_peak(gpu, sel, file)
        old = getattr(gpu, field) or gpu.matmul_efficiency
        after = float(np.mean(np.abs(rel_errors(model_times(gpu, sel, eff), meas))))
        _check_residual(gpu, field, eff, after, len(sel), file)
        fits.append(
            GemmFit(
                field=field,
                efficiency=eff,
                error_before=float(np.mean(np.abs(rel_errors(model_times(gpu, sel, old), meas)))),
                error_after=after,
                rows=len(sel),
                curve=_curve(gpu, sel, eff),
            )
        )
    return fits
