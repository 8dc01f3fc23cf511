"""Check the fp8 rowwise cast model (shardmeter.model.fp8) against torchao's published
per-linear rowwise table, and find the achieved HBM share of the cast kernels that fits it.

Usage: python benchmarks/fp8_rowwise_check.py [tests/fixtures/torchao/fp8_rowwise_linear_speedup.csv]

The table (pytorch/ao docs/static/fp8-rowwise-perf.png at fdddb2cf, PR #2312) gives, per forward
M, K, N, the speedup of LayerNorm -> Linear -> Sigmoid (forward + backward, torch.compile) with
rowwise fp8 over bf16 on an H100. The model prices the bf16 module as three bf16 GEMMs and the
fused LayerNorm and Sigmoid kernels (forward read 2 + write 2 bytes, backward read 4 + write 2
per element), and the fp8 module as three fp8 GEMMs, the same two kernels and the rowwise
casts of :func:`shardmeter.model.fp8.linear_cast_time` (compiled), at the h100-sxm catalogue's
figures. Prints the mean absolute and signed error at the model's share and the grid's best.
"""

from __future__ import annotations

import csv
import os
import sys

import numpy as np

from shardmeter.model import fp8 as F8
from shardmeter.model.elementwise import kernel_time
from shardmeter.model.formulas import gemm_time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "tests", "fixtures", "torchao", "fp8_rowwise_linear_speedup.csv")
#: h100-sxm (gpus.toml): bf16 989.4 and fp8 1979 TFLOP/s at 0.64 and 0.68, 3350 GB/s at 0.94, 132 SMs
HBM = 3350e9 * 0.94


def load(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    with open(path) as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    return tuple(np.array([float(r[c]) for r in rows]) for c in ("M", "K", "N", "speedup"))  # type: ignore[return-value]


def model_speedup(M: np.ndarray, K: np.ndarray, N: np.ndarray, share: float) -> np.ndarray:
    around = sum(kernel_time(((r, w),), n, HBM) for n in (M * K, M * N) for r, w in ((2, 2), (4, 2)))
    bf16 = 3 * gemm_time(M, N, K, 989.4e12, 0.64, HBM, 132, 2.0) + around
    # linear_cast_time applies the model's own share; undo it to price the asked-for one
    own = F8.CAST_HBM_SHARE.get("rowwise", 1.0)
    cf, cb = F8.linear_cast_time("rowwise", True, M, K, N, HBM * share / own)
    fp8 = 3 * gemm_time(M, N, K, 1979e12, 0.68, HBM, 132, 1.0) + cf + cb + around
    return bf16 / fp8


def main(path: str) -> None:
    M, K, N, measured = load(path)

    def errors(share: float) -> np.ndarray:
        return model_speedup(M, K, N, share) / measured - 1.0

    own = F8.CAST_HBM_SHARE.get("rowwise", 1.0)
    for label, share in (("roofline", 1.0), ("model", own)):
        e = errors(share)
        print(
            f"{label:8s} share {share:.3f}: mean |error| {np.mean(np.abs(e)):.1%}, signed {np.mean(e):+.1%}"
        )
    grid = np.arange(0.10, 1.0001, 0.025)
    best = min(grid, key=lambda s: float(np.mean(np.abs(errors(s)))))
    e = errors(best)
    print(f"best     share {best:.3f}: mean |error| {np.mean(np.abs(e)):.1%}, signed {np.mean(e):+.1%}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)
