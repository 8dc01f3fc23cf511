"""Time bf16 (and, where the GPU has it, fp8) GEMMs over transformer shapes -> the CSV that
``shardmeter calibrate`` reads (``m,n,k,dtype,seconds``; docs/calibration.md).

Usage: python benchmarks/gemm_timing.py [--out gemm.csv] [--iters 20]

Shapes: tokens m in 1k-16k against the QKV, output-projection and MLP products of 4k and 8k
hidden layers (Llama-3 8B / 70B widths). Each GEMM is warmed up, then timed with CUDA events
over ``--iters`` back-to-back calls; the median per call is written. fp8 uses
``torch._scaled_mm`` (e4m3, per-tensor scales) on GPUs of compute capability 8.9 and above.
Without torch or a CUDA GPU it says so and exits 0, writing nothing.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = [
    (m, n, k)
    for m in (1024, 4096, 16384)
    for n, k in (
        (6144, 4096),  # Llama-3 8B QKV (tp 1)
        (4096, 4096),  # 8B output projection
        (28672, 4096),  # 8B SwiGLU up + gate
        (4096, 14336),  # 8B down
        (10240, 8192),  # 70B QKV
        (8192, 8192),  # 70B output projection
        (57344, 8192),  # 70B up + gate
        (8192, 28672),  # 70B down
    )
]


def _median_seconds(torch, fn, iters: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gemm.csv")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gemm_timing: torch is not installed; nothing timed")
        return 0
    if not torch.cuda.is_available():
        print("gemm_timing: no CUDA GPU; nothing timed")
        return 0
    from shardmeter.io import atomic_write

    dev = torch.device("cuda")
    cap = torch.cuda.get_device_capability()
    fp8 = cap >= (8, 9) and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        rows.append((m, n, k, "bf16", _median_seconds(torch, lambda a=a, b=b: a @ b, args.iters)))
        if fp8:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major second operand
            one = torch.ones((), device=dev)

            def mm8(a8=a8, b8=b8, one=one):
                return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

            rows.append((m, n, k, "fp8", _median_seconds(torch, mm8, args.iters)))
        del a, b
    with atomic_write(args.out, label="--out") as fh:
        fh.write("m,n,k,dtype,seconds\n")
        fh.writelines(f"{m},{n},{k},{d},{s:.6e}\n" for m, n, k, d, s in rows)
    print(f"gemm_timing: {len(rows)} GEMMs on {torch.cuda.get_device_name()} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
