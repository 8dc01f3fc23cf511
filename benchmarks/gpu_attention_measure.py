"""Measure fused (flash) attention throughput on a GPU, to check ShardMeter's
``attention_efficiency`` (fraction of the 16-bit dense peak fused attention reaches).

Usage: python3 benchmarks/gpu_attention_measure.py --out DIR [--peak-tflops 989.4]

Times torch.nn.functional.scaled_dot_product_attention (bf16, causal and not)
forward and forward+backward over sequence lengths and head dimensions a
transformer layer runs, and writes ``attention.csv`` and ``attention.json``.
FLOPs are counted as executed: 4 b h s^2 d forward (halved when causal, since
the kernels skip masked blocks) and 2.5x that for the backward pass.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--peak-tflops", type=float, default=989.4)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    rows = []
    tokens = 16384
    for d in (64, 128):
        heads = 2048 // d  # a 2048-wide attention slice (e.g. h = 8192 at tp = 4)
        for s in (1024, 2048, 4096, 8192, 16384, 32768):
            b = max(1, tokens // s)
            q, k, v = (
                torch.randn(b, heads, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                for _ in range(3)
            )
            for causal in (True, False):
                for mode in ("fwd", "fwd+bwd"):
                    # bound as defaults: this iteration's tensors and settings, not the loop's latest
                    def run(q=q, k=k, v=v, causal=causal, mode=mode):
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        if mode == "fwd+bwd":
                            o.sum().backward()

                    for _ in range(3):
                        run()
                    torch.cuda.synchronize()
                    times = []
                    for _ in range(10):
                        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        st.record()
                        run()
                        en.record()
                        torch.cuda.synchronize()
                        times.append(st.elapsed_time(en) / 1e3)
                    t = sorted(times)[len(times) // 2]
                    fwd = 4.0 * b * heads * s * s * d * (0.5 if causal else 1.0)
                    flops = fwd * (3.5 if mode == "fwd+bwd" else 1.0)
                    tf = flops / t / 1e12
                    rows.append(
                        {
                            "head_dim": d,
                            "heads": heads,
                            "seq": s,
                            "batch": b,
                            "causal": causal,
                            "mode": mode,
                            "median_ms": t * 1e3,
                            "tflops": tf,
                            "frac_of_peak": tf / args.peak_tflops,
                        }
                    )
                    print(
                        f"d={d} s={s:6d} causal={causal!s:5} {mode:8s} {t * 1e3:8.3f} ms {tf:7.1f} TFLOP/s "
                        f"{tf / args.peak_tflops:.3f}",
                        flush=True,
                    )
            del q, k, v, run  # run's defaults hold the tensors too
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "attention.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    fb = [r["frac_of_peak"] for r in rows if r["mode"] == "fwd+bwd" and r["causal"]]
    with open(os.path.join(args.out, "attention.json"), "w") as fh:
        json.dump(
            {
                "device": props.name,
                "torch": torch.__version__,
                "date": dt.datetime.now(dt.timezone.utc).date().isoformat(),
                "causal_fwd_bwd_frac_of_peak_median": sorted(fb)[len(fb) // 2],
                "causal_fwd_bwd_frac_of_peak_max": max(fb),
            },
            fh,
            indent=2,
        )


if __name__ == "__main__":
    main()
