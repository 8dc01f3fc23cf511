# Copied from the project's contract tools on 2026-12-01: checks a `shardmeter estimate --json` report
# against docs/scenario.md's field list (its "Report" section). tests/test_multi_island.py runs it.
"""Check a `shardmeter estimate --json` report against the contract.

usage: python3 tools/check_report.py shardmeter SCENARIO.toml [min_mfu max_mfu]

A conformance check of the report contract (docs/scenario.md, "Report"): every field present,
numbers finite, the breakdown adding up to the step time, islands adding up to the total.
Prints shortfalls, then a summary line; exit 1 on any shortfall.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys

sm, scen = sys.argv[1], sys.argv[2]
lo, hi = (float(sys.argv[3]), float(sys.argv[4])) if len(sys.argv) > 4 else (0.0, 1.0)
p = subprocess.run([sm, "estimate", scen, "--json"], capture_output=True, text=True, timeout=120)
if p.returncode != 0:
    print(f"estimate exited {p.returncode}: {p.stderr.strip()[-200:]}")
    sys.exit(1)
try:
    r = json.loads(p.stdout)
except ValueError:
    print(f"estimate printed no JSON: {p.stdout.strip()[:200]!r}")
    sys.exit(1)
bad = []
need = ["feasible", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
        "hardware_tflops_per_gpu", "mfu", "hfu", "memory_per_gpu_gb", "compute_utilization",
        "wall_clock_s", "cost_usd", "bottleneck", "breakdown_s", "islands"]
for k in need:
    if k not in r:
        bad.append(f"missing field {k}")
if not bad and r["feasible"] is not True:
    bad.append(f"not feasible: {r.get('reasons')}")
if not bad:
    for k in need:
        v = r[k]
        if isinstance(v, float) and not math.isfinite(v):
            bad.append(f"{k} is not finite")
        elif k not in ("feasible", "bottleneck", "breakdown_s", "islands") and not isinstance(v, (int, float)):
            bad.append(f"{k} is {v!r}, not a number")
if not bad:
    bd = r["breakdown_s"]
    if not isinstance(bd, dict) or not bd:
        bad.append("breakdown_s is empty")
    elif any((not isinstance(v, (int, float))) or not math.isfinite(v) or v < 0 for v in bd.values()):
        bad.append(f"breakdown_s has a negative, non-finite or non-numeric term: {bd}"[:200])
    else:
        s = sum(bd.values())
        if abs(s - r["step_time_s"]) > 0.01 * r["step_time_s"]:
            bad.append(f"breakdown sums to {s:.4g}, step_time_s is {r['step_time_s']:.4g}")
        if r["bottleneck"] not in bd:
            bad.append(f"bottleneck {r['bottleneck']!r} is not a breakdown term")
    if not (lo <= r["mfu"] <= hi):
        bad.append(f"mfu {r['mfu']:.3f} outside the plausible [{lo}, {hi}]")
    if not (r["hfu"] >= r["mfu"] - 1e-9):
        bad.append("hfu < mfu")
    if not isinstance(r["islands"], list) or not r["islands"]:
        bad.append("islands is empty")
    else:
        for isl in r["islands"]:
            for k in ("name", "gpus", "tokens_per_s", "step_time_s", "memory_per_gpu_gb", "cost_usd"):
                if k not in isl:
                    bad.append(f"island {isl.get('name')} lacks {k}")
        tot = sum(i.get("tokens_per_s", 0) or 0 for i in r["islands"])
        if abs(tot - r["tokens_per_s"]) > 0.02 * r["tokens_per_s"]:
            bad.append(f"islands' tokens_per_s sum {tot:.4g} != total {r['tokens_per_s']:.4g}")
    gpus = sum(i.get("gpus") or 0 for i in (r["islands"] if isinstance(r["islands"], list) else []) if isinstance(i, dict))
    if gpus and abs(r["tokens_per_s_per_gpu"] * gpus - r["tokens_per_s"]) > 0.01 * r["tokens_per_s"]:
        bad.append("tokens_per_s_per_gpu * gpus != tokens_per_s")
    if r.get("wall_clock_s") is None or r.get("cost_usd") is None:
        bad.append("wall_clock_s / cost_usd missing although training.tokens is set")
    mb = r.get("memory_breakdown_gb")
    if mb is not None:  # required by the extended contract; checked where present
        parts = ("weights", "gradients", "optimizer", "activations", "transient", "other")
        if not isinstance(mb, dict) or any(k not in mb for k in parts):
            bad.append(f"memory_breakdown_gb lacks one of {parts}")
        elif any(not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 for v in mb.values()):
            bad.append("memory_breakdown_gb has a negative or non-finite part")
        elif abs(sum(mb[k] for k in parts) - r["memory_per_gpu_gb"]) > 0.01 * r["memory_per_gpu_gb"]:
            bad.append(f"memory_breakdown_gb sums to {sum(mb[k] for k in parts):.4g}, memory_per_gpu_gb is {r['memory_per_gpu_gb']:.4g}")
for b in bad:
    print(b)
if bad:
    sys.exit(1)
print(f"report ok: {r['tokens_per_s_per_gpu']:.0f} tok/s/GPU, mfu {r['mfu']:.3f}, bottleneck {r['bottleneck']}, "
      f"{r['memory_per_gpu_gb']:.1f} GB/GPU, cost ${r['cost_usd']:.3g}")
