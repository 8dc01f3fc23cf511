#!/usr/bin/env python3
"""Measure bf16 GEMM throughput and device-to-device copy bandwidth on one GPU.

Used to check ShardMeter's GEMM-efficiency model (roofline + wave quantisation)
against real hardware.  Times the four GEMMs of a transformer layer
(QKV, attention out-projection, MLP up, MLP down) over a grid of token counts
T = micro_batch * seq, hidden sizes h and tensor-parallel degrees tp, plus a
square 8192^3 reference product and a large device-to-device copy.

Usage:
    python3 benchmarks/gpu_gemm_measure.py --out DIR        # needs torch + CUDA
    python3 benchmarks/gpu_gemm_measure.py --dry-run        # list shapes, no torch

Outputs (in DIR):
    gemm.csv      gemm,T,h,tp,M,N,K,median_ms,tflops,frac_of_peak
    summary.json  device, sm_count, torch, date, square_8192_tflops, copy_tb_s,
                  copy_frac_of_peak (+ a few extra fields)

Timing method
-------------
* Inputs are random normal bf16 (never zeros: zeros run faster than real data).
* Every call allocates a fresh output (plain ``torch.matmul(A, B)``).
* 3 warm-up calls per shape, then ``reps`` timed calls, each bracketed by its own
  pair of CUDA events; the reported time is the median of those.  ``reps`` is
  chosen so the timed calls total >= 20 ms (at least 3, at most 50).
* Before the timed calls a ``torch.cuda._sleep`` kernel is queued so the host
  can enqueue all timed calls ahead of the GPU; the events then measure GPU
  time only, not host launch latency (matters for the small shapes).
* When one (A, B) pair is smaller than a few times the L2 cache, several
  independent pairs are allocated and the timed calls rotate through them, so
  the operands come from HBM as they would in a real training step (weights
  are not L2-resident between layers).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import statistics
import subprocess
import sys
import time

# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------

T_VALUES = (512, 1024, 2048, 4096, 8192, 16384)
H_VALUES = (1024, 2048, 4096, 8192, 12288)
TP_VALUES = (1, 2, 4, 8)

PEAK_BF16_TFLOPS = 989.4  # H200 SXM dense bf16, datasheet
PEAK_HBM_TB_S = 4.8  # H200 HBM3e, datasheet

WARMUP = 3
MIN_TOTAL_MS = 20.0
MIN_REPS = 3
MAX_REPS = 50
ROTATE_TARGET_BYTES = 192 * 2**20  # ~3x the 60 MB L2 of an H100/H200
MAX_SETS = 64

COPY_BYTES = 4 * 2**30  # 4 GiB source tensor
COPY_REPS = 10


def layer_gemms(T: int, h: int, tp: int):
    """The four GEMMs of one transformer layer as (name, M, N, K)."""
    return (
        ("qkv", T, 3 * h // tp, h),
        ("attn_out", T, h, h // tp),
        ("mlp_up", T, 4 * h // tp, h),
        ("mlp_down", T, h, 4 * h // tp),
    )


def build_shapes():
    """Return the list of unique GEMM shapes as dicts (first label wins).

    Also returns the number of (gemm, T, h, tp) combinations that were
    duplicates of an earlier shape (same M, N, K) and therefore not timed.
    """
    seen = set()
    shapes = []
    dups = 0
    for T in T_VALUES:
        for h in H_VALUES:
            for tp in TP_VALUES:
                for name, M, N, K in layer_gemms(T, h, tp):
                    assert 3 * h % tp == 0 and h % tp == 0
                    key = (M, N, K)
                    if key in seen:
                        dups += 1
                        continue
                    seen.add(key)
                    shapes.append(dict(gemm=name, T=T, h=h, tp=tp, M=M, N=N, K=K))
    return shapes, dups


def estimate_seconds(shapes, assumed_tflops=650.0, per_shape_overhead_s=0.01):
    """Rough GPU wall-time estimate for the GEMM sweep."""
    total = 0.0
    for s in shapes:
        t = 2.0 * s["M"] * s["N"] * s["K"] / (assumed_tflops * 1e12)
        reps = min(MAX_REPS, max(MIN_REPS, math.ceil(MIN_TOTAL_MS / 1e3 / t)))
        total += (WARMUP + 1 + reps) * t + per_shape_overhead_s
    return total


def utc_now():
    return _dt.datetime.now(_dt.timezone.utc)


def nvidia_smi_snapshot():
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,"
                "clocks.mem,power.draw,temperature.gpu",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip() or out.stderr.strip()
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        return f"nvidia-smi unavailable: {exc!r}"


# ---------------------------------------------------------------------------
# Dry run (no torch)
# ---------------------------------------------------------------------------


def dry_run():
    shapes, dups = build_shapes()
    print(f"{'gemm':9s} {'T':>6s} {'h':>6s} {'tp':>3s} {'M':>6s} {'N':>6s} {'K':>6s}  GFLOP")
    for s in shapes:
        gflop = 2.0 * s["M"] * s["N"] * s["K"] / 1e9
        print(
            f"{s['gemm']:9s} {s['T']:6d} {s['h']:6d} {s['tp']:3d} "
            f"{s['M']:6d} {s['N']:6d} {s['K']:6d}  {gflop:10.2f}"
        )
    combos = len(T_VALUES) * len(H_VALUES) * len(TP_VALUES) * 4
    total_flop = sum(2.0 * s["M"] * s["N"] * s["K"] for s in shapes)
    max_bytes = max(2 * (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]) for s in shapes)
    print(f"\n{combos} (gemm,T,h,tp) combinations, {dups} duplicates skipped, {len(shapes)} unique shapes")
    print(f"total FLOP per single pass: {total_flop / 1e12:.1f} TFLOP")
    print(f"largest shape footprint (A+B+C): {max_bytes / 2**30:.2f} GiB")
    print(f"estimated GEMM sweep time at ~650 TFLOP/s: {estimate_seconds(shapes):.0f} s")
    return 0


# ---------------------------------------------------------------------------
# GPU measurement
# ---------------------------------------------------------------------------


def measure(out_dir: str, max_seconds: float, passes: int):
    import torch

    t_start = time.time()
    os.makedirs(out_dir, exist_ok=True)
    log_path = os.path.join(out_dir, "log.txt")
    with open(log_path, "w") as log_f:

        def log(msg=""):
            print(msg, flush=True)
            log_f.write(msg + "\n")
            log_f.flush()

        if not torch.cuda.is_available():
            log("CUDA not available")
            return 2

        dev = torch.device("cuda:0")
        props = torch.cuda.get_device_properties(dev)
        date = utc_now()
        l2_bytes = getattr(props, "L2_cache_size", None)
        summary = {
            "device": props.name,
            "sm_count": props.multi_processor_count,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "date": date.strftime("%Y-%m-%d"),
            "datetime_utc": date.isoformat(timespec="seconds"),
            "l2_bytes": l2_bytes,
            "total_memory_bytes": props.total_memory,
            "peak_bf16_tflops_assumed": PEAK_BF16_TFLOPS,
            "peak_hbm_tb_s_assumed": PEAK_HBM_TB_S,
            "method": (
                "bf16 torch.matmul, random normal inputs, fresh output; 3 warm-ups; "
                f"median of per-call CUDA-event times, reps for >= {MIN_TOTAL_MS:.0f} ms "
                f"(min {MIN_REPS}, max {MAX_REPS}); host launches queued behind a "
                "torch.cuda._sleep so events time GPU work only; input pairs rotated "
                f"to >= {ROTATE_TARGET_BYTES // 2**20} MiB when small (cold L2)"
            ),
            "nvidia_smi_before": nvidia_smi_snapshot(),
        }
        summary["allow_bf16_reduced_precision_reduction"] = bool(
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        )

        log(
            f"device: {props.name}  SMs: {props.multi_processor_count}  "
            f"L2: {l2_bytes}  mem: {props.total_memory / 2**30:.1f} GiB"
        )
        log(f"torch {torch.__version__} (CUDA {torch.version.cuda})  date (UTC): {summary['datetime_utc']}")
        log(f"nvidia-smi: {summary['nvidia_smi_before']}")

        # cycles per ms for the _sleep pre-queue kernel
        clock_khz = getattr(props, "clock_rate", None) or 1_980_000
        cycles_per_ms = int(clock_khz) * 1  # kHz == cycles per ms

        def write_summary():
            with open(os.path.join(out_dir, "summary.json"), "w") as f:
                json.dump(summary, f, indent=2)

        def time_gemm(M, N, K, warmup=WARMUP, max_reps=MAX_REPS):
            bytes_per_set = 2 * (M * K + K * N)
            nsets = max(1, min(MAX_SETS, math.ceil(ROTATE_TARGET_BYTES / bytes_per_set)))
            A = [torch.randn(M, K, device=dev, dtype=torch.bfloat16) for _ in range(nsets)]
            B = [torch.randn(K, N, device=dev, dtype=torch.bfloat16) for _ in range(nsets)]
            for i in range(warmup):
                torch.matmul(A[i % nsets], B[i % nsets])
            # pilot timing for rep count
            s0 = torch.cuda.Event(enable_timing=True)
            e0 = torch.cuda.Event(enable_timing=True)
            s0.record()
            torch.matmul(A[0], B[0])
            e0.record()
            torch.cuda.synchronize()
            pilot_ms = max(s0.elapsed_time(e0), 1e-3)
            reps = min(max_reps, max(MIN_REPS, math.ceil(MIN_TOTAL_MS / pilot_ms)))
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            # keep the GPU busy while the host queues every timed call
            torch.cuda._sleep(int(cycles_per_ms * (0.5 + 0.05 * reps)))
            for i in range(reps):
                a, b = A[i % nsets], B[i % nsets]
                starts[i].record()
                torch.matmul(a, b)
                ends[i].record()
            torch.cuda.synchronize()
            times = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
            del A, B
            return statistics.median(times), reps, nsets, times

        # --- square reference -------------------------------------------------
        sq_ms, sq_reps, _, sq_times = time_gemm(8192, 8192, 8192, warmup=5)
        sq_tflops = 2 * 8192**3 / (sq_ms * 1e-3) / 1e12
        summary["square_8192_tflops"] = round(sq_tflops, 1)
        summary["square_8192_median_ms"] = round(sq_ms, 4)
        summary["square_8192_min_ms"] = round(min(sq_times), 4)
        summary["square_8192_reps"] = sq_reps
        log(
            f"square 8192^3 bf16: median {sq_ms:.3f} ms over {sq_reps} reps -> "
            f"{sq_tflops:.1f} TFLOP/s ({sq_tflops / PEAK_BF16_TFLOPS:.3f} of peak)"
        )

        # --- correctness sanity check (bf16 matmul vs float64 reference) --------
        a = torch.randn(1024, 2048, device=dev, dtype=torch.bfloat16)
        b = torch.randn(2048, 768, device=dev, dtype=torch.bfloat16)
        c = torch.matmul(a, b).double()
        ref = torch.matmul(a.double(), b.double())
        rel_err = float((c - ref).norm() / ref.norm())
        summary["bf16_matmul_rel_err"] = rel_err
        log(f"bf16 matmul rel. error vs float64 (1024x2048x768): {rel_err:.2e}")
        del a, b, c, ref

        # --- device-to-device copy ---------------------------------------------
        n_el = COPY_BYTES // 2
        src = torch.randn(n_el, device=dev, dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        cs = [torch.cuda.Event(enable_timing=True) for _ in range(COPY_REPS)]
        ce = [torch.cuda.Event(enable_timing=True) for _ in range(COPY_REPS)]
        torch.cuda._sleep(cycles_per_ms * 2)
        for i in range(COPY_REPS):
            cs[i].record()
            dst.copy_(src)
            ce[i].record()
        torch.cuda.synchronize()
        ctimes = [s.elapsed_time(e) for s, e in zip(cs, ce, strict=True)]
        cmed = statistics.median(ctimes)
        ok = bool(torch.equal(dst[:: 1 << 20], src[:: 1 << 20]))
        del src, dst
        torch.cuda.empty_cache()
        copy_tb_s = 2 * COPY_BYTES / (cmed * 1e-3) / 1e12
        summary["copy_tb_s"] = round(copy_tb_s, 3)
        summary["copy_frac_of_peak"] = round(copy_tb_s / PEAK_HBM_TB_S, 3)
        summary["copy_bytes_source"] = COPY_BYTES
        summary["copy_median_ms"] = round(cmed, 4)
        summary["copy_check_ok"] = ok
        log(
            f"copy 4 GiB d2d: median {cmed:.3f} ms -> {copy_tb_s:.3f} TB/s read+write "
            f"({copy_tb_s / PEAK_HBM_TB_S:.3f} of {PEAK_HBM_TB_S} TB/s), check ok={ok}"
        )
        write_summary()

        # --- transformer-layer GEMM sweep ---------------------------------------
        shapes, dups = build_shapes()
        summary["n_shapes"] = len(shapes)
        summary["n_duplicates_skipped"] = dups
        log(f"GEMM sweep: {len(shapes)} unique shapes ({dups} duplicates skipped)")
        csv_path = os.path.join(out_dir, "gemm.csv")
        fields = ["gemm", "T", "h", "tp", "M", "N", "K", "median_ms", "tflops", "frac_of_peak"]
        n_done = 0
        reduced = False
        spreads = []
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for idx, s in enumerate(shapes):
                elapsed = time.time() - t_start
                if elapsed > max_seconds:
                    log(f"time budget {max_seconds:.0f} s reached after {n_done} shapes; stopping")
                    break
                max_reps = MAX_REPS
                if elapsed > 0.6 * max_seconds:
                    max_reps, reduced = 10, True
                M, N, K = s["M"], s["N"], s["K"]
                pooled, pass_meds = [], []
                for _ in range(passes):
                    pmed, reps, nsets, ptimes = time_gemm(M, N, K, max_reps=max_reps)
                    pooled += ptimes
                    pass_meds.append(pmed)
                med_ms = statistics.median(pooled)
                if len(pass_meds) > 1:
                    spreads.append((max(pass_meds) - min(pass_meds)) / med_ms)
                tflops = 2.0 * M * N * K / (med_ms * 1e-3) / 1e12
                row = dict(
                    s,
                    median_ms=f"{med_ms:.5f}",
                    tflops=f"{tflops:.1f}",
                    frac_of_peak=f"{tflops / PEAK_BF16_TFLOPS:.4f}",
                )
                w.writerow(row)
                f.flush()
                n_done += 1
                log(
                    f"[{idx + 1:3d}/{len(shapes)}] {s['gemm']:8s} T={s['T']:5d} h={s['h']:5d} "
                    f"tp={s['tp']} M={M:5d} N={N:5d} K={K:5d}  {med_ms:8.4f} ms  "
                    f"{tflops:6.1f} TF/s  {tflops / PEAK_BF16_TFLOPS:.3f}  (reps {reps}, sets {nsets})"
                )
                if idx % 40 == 39:
                    torch.cuda.empty_cache()

        summary["n_shapes_measured"] = n_done
        summary["passes_per_shape"] = passes
        if spreads:
            ss = sorted(spreads)
            summary["pass_spread_rel_median"] = round(statistics.median(ss), 4)
            summary["pass_spread_rel_p90"] = round(ss[int(0.9 * (len(ss) - 1))], 4)
            summary["pass_spread_rel_max"] = round(ss[-1], 4)
            log(
                f"pass-to-pass spread of medians (relative): median {summary['pass_spread_rel_median']}, "
                f"p90 {summary['pass_spread_rel_p90']}, max {summary['pass_spread_rel_max']}"
            )
        summary["reps_reduced_for_time"] = reduced
        summary["nvidia_smi_after"] = nvidia_smi_snapshot()
        summary["wall_seconds"] = round(time.time() - t_start, 1)
        write_summary()
        log(f"nvidia-smi after: {summary['nvidia_smi_after']}")
        log(f"done: {n_done} shapes in {summary['wall_seconds']} s")
        return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="output directory (gemm.csv, summary.json, log.txt)")
    p.add_argument("--dry-run", action="store_true", help="list shapes and estimate; no torch")
    p.add_argument(
        "--max-seconds",
        type=float,
        default=300.0,
        help="stop the GEMM sweep after this many seconds of wall time",
    )
    p.add_argument(
        "--passes",
        type=int,
        default=2,
        help="independent timing passes per shape (pooled median; spread reported)",
    )
    args = p.parse_args(argv)
    if args.dry_run:
        return dry_run()
    if not args.out:
        p.error("--out is required unless --dry-run")
    return measure(args.out, args.max_seconds, args.passes)


if __name__ == "__main__":
    sys.exit(main())
