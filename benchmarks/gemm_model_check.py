"""Check the GEMM-time model (shardmeter.model.formulas.gemm_time) against
bf16 GEMMs measured on a real GPU (benchmarks/gpu_gemm_measure.py).

Usage: python benchmarks/gemm_model_check.py [benchmarks/results/h200-2026-11-30]
Prints the mean absolute error overall, for large GEMMs (> 1e11 FLOPs) and per
layer GEMM kind, and the worst shapes.
"""

from __future__ import annotations

import csv
import json
import os
import sys

import numpy as np

from shardmeter.model.formulas import gemm_time

HERE = os.path.dirname(os.path.abspath(__file__))


def main(folder: str) -> None:
    with open(os.path.join(folder, "gemm.csv")) as fh:
        rows = list(csv.DictReader(fh))
    with open(os.path.join(folder, "summary.json")) as fh:
        summary = json.load(fh)
    m, n, k = (np.array([float(r[c]) for r in rows]) for c in "MNK")
    t = np.array([float(r["median_ms"]) for r in rows]) / 1e3
    # H200 catalog figures: 989.4 TFLOP/s bf16, MAMF 80.3 %, 4.8 TB/s HBM at 90 %, 132 SMs.
    pred = gemm_time(m, n, k, 989.4e12, 0.803, 4.8e12 * 0.90, summary.get("sm_count", 132))
    err = (pred - t) / t
    big = 2 * m * n * k > 1e11
    print(f"device: {summary.get('device')}  date: {summary.get('date')}  shapes: {len(rows)}")
    print(f"mean |error| all shapes: {np.mean(np.abs(err)):.1%}  (median signed {np.median(err):+.1%})")
    print(
        f"mean |error| GEMMs > 1e11 FLOP: {np.mean(np.abs(err[big])):.1%}  (median signed {np.median(err[big]):+.1%})"
    )
    for kind in sorted({r["gemm"] for r in rows}):
        sel = np.array([r["gemm"] == kind for r in rows])
        print(f"  {kind:10s} n={sel.sum():3d}  mean |error| {np.mean(np.abs(err[sel])):.1%}")
    print("worst shapes (M, N, K, measured us, predicted us):")
    for i in np.argsort(-np.abs(err))[:8]:
        print(
            f"  {int(m[i])}x{int(n[i])}x{int(k[i])}  {t[i] * 1e6:8.1f}  {pred[i] * 1e6:8.1f}  {err[i]:+.0%}"
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "results", "h200-2026-11-30"))
