"""How fast does ``sweep`` write the 12,288-point grid of examples/studies/scale-nodes.toml?

``training.global_batch=64..4096+64`` (64 values) x ``island[0].nodes=1..64`` (64) x
``training.micro_batch=1,2,4`` (3). Prints the rows, the seconds of the library call
(``run_sweep``, in process, best of ``--repeat``), of the command line writing the CSV (a fresh
``python -m shardmeter`` process, interpreter start-up and imports included; its table goes
to /dev/null) and the rows per second of each. Target (issue): the CSV in under 1 s.

    python benchmarks/sweep_speed.py
    python benchmarks/sweep_speed.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(HERE, os.pardir, "examples", "studies", "scale-nodes.toml")
VARY = ("training.global_batch=64..4096+64", "island[0].nodes=1..64", "training.micro_batch=1,2,4")
TARGET_S = 1.0


def library_s(repeat: int, vectorised: bool = True) -> tuple[int, float]:
    from shardmeter.explore.search.sweep import run_sweep
    from shardmeter.explore.search.values import parse_vary

    vary = [parse_vary(v) for v in VARY]
    best = float("inf")
    rows = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = run_sweep(SCENARIO, vary, vectorised=vectorised)
        best = min(best, time.perf_counter() - t0)
        rows = len(res.rows)
    return rows, best


def cli_s(repeat: int) -> tuple[float, float]:
    """Best wall seconds of the command, and the CPU seconds it used (user + system: on a
    busy machine the wall time is mostly waiting for a core)."""
    best, cpu = float("inf"), float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sweep.csv")
        argv = [sys.executable, "-m", "shardmeter", "sweep", SCENARIO, "--csv", out]
        for v in VARY:
            argv += ["--vary", v]
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            best = min(best, time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = min(cpu, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return best, cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--per-row", action="store_true", help="also time the per-row reference path (slow)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows, lib = library_s(args.repeat)
    cli, cli_cpu = cli_s(args.repeat)
    doc = {
        "cpus": os.cpu_count(),
        "rows": rows,
        "library_s": lib,
        "library_rows_per_s": rows / lib,
        "cli_csv_s": cli,
        "cli_rows_per_s": rows / cli,
        "cli_cpu_s": cli_cpu,
        "target_s": TARGET_S,
        "meets_target": cli <= TARGET_S,
    }
    if args.per_row:
        doc["per_row_library_s"] = library_s(1, vectorised=False)[1]
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"rows                 {rows}")
        print(f"library run_sweep    {lib:.3f} s   {rows / lib:,.0f} rows/s")
        print(f"CLI writing the CSV  {cli:.3f} s   {rows / cli:,.0f} rows/s  (process, start-up included)")
        print(f"CLI CPU time         {cli_cpu:.3f} s")
        if args.per_row:
            print(f"per-row path         {doc['per_row_library_s']:.3f} s")
        print(f"target: CSV in under {TARGET_S:g} s: {'met' if doc['meets_target'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
