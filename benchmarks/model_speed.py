"""How fast is one estimate, and how fast does ``plan`` search the three-island example?

* One in-process ``Estimator.estimate`` of an already loaded scenario (the model and the
  report; resolve and inputs are prepared once), CPU time, median of ``--repeat`` runs of
  ``--n`` calls, with the path it took (``scalar``, or ``array``): the GPT-3 175B example
  (one island: the scalar fast path) and the three-island example (arrays). Target: 0.2 ms for
  the single-island estimate (issue 10; llm-analysis takes about 0.17 ms).
* ``plan`` of examples/multi-island/three-islands.toml, serial: candidates per second of the
  search (best of ``--repeat``). Target: 3 M/s (issue 10).

benchmarks/plan_speed.py measures the GPT-3 175B / 1536 A100 space.

    python benchmarks/model_speed.py
    python benchmarks/model_speed.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, os.pardir, "examples")
ONE_ISLAND = os.path.join(EXAMPLES, "gpt3-175b-a100.toml")
THREE_ISLANDS = os.path.join(EXAMPLES, "multi-island", "three-islands.toml")
ESTIMATE_TARGET_MS = 0.2
PLAN_TARGET = 3_000_000


def path_of(path: str) -> str:
    """Which path one estimate of ``path`` takes: ``scalar``, or ``array`` (several islands, or
    the scalar path FELL BACK)."""
    import shardmeter
    from shardmeter.inputs.build import build_inputs
    from shardmeter.model.evaluate import evaluate
    from shardmeter.numeric import ops

    est = shardmeter.Estimator()
    inp, table = build_inputs(est.resolve(est.load(path)), scalar=True)
    if not ops.is_scalar(inp.layout.tp):
        return "array (several islands)"
    return (
        "scalar" if ops.is_scalar(evaluate(inp, table).step_time_s) else "array (the scalar path FELL BACK)"
    )


def estimate_ms(path: str, n: int, repeat: int) -> float:
    """CPU milliseconds (``time.process_time``) per in-process estimate of ``path``, loaded
    once: the median of ``repeat`` runs of ``n`` estimates."""
    import shardmeter

    est = shardmeter.Estimator()
    sc = est.load(path)
    est.estimate(sc)  # warm: registry, converters, imports
    runs = []
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(n):
            est.estimate(sc)
        runs.append((time.process_time() - t0) / n * 1e3)
    return statistics.median(runs)


def plan_rate(path: str, repeat: int) -> dict:
    from shardmeter.explore.search.plan import search

    best = None
    for _ in range(repeat):
        doc = search(path, top=5)
        rate = doc["evaluated"] / doc["seconds"]
        if best is None or rate > best["candidates_per_s"]:
            best = {
                "evaluated": doc["evaluated"],
                "seconds": doc["seconds"],
                "candidates_per_s": rate,
                "feasible": doc["feasible"],
            }
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="estimates per timing run")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    one = estimate_ms(ONE_ISLAND, args.n, args.repeat)
    three = estimate_ms(THREE_ISLANDS, max(1, args.n // 4), args.repeat)
    plan = plan_rate(THREE_ISLANDS, max(1, args.repeat // 2))
    doc = {
        "cpus": os.cpu_count(),
        "estimate_ms": {"gpt3-175b-a100 (one island)": one, "three-islands": three},
        "estimate_path": {
            "gpt3-175b-a100 (one island)": path_of(ONE_ISLAND),
            "three-islands": path_of(THREE_ISLANDS),
        },
        "estimate_target_ms": ESTIMATE_TARGET_MS,
        "plan_three_islands": plan,
        "plan_target_candidates_per_s": PLAN_TARGET,
        "meets_targets": one <= ESTIMATE_TARGET_MS and plan["candidates_per_s"] >= PLAN_TARGET,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    paths = doc["estimate_path"]
    print(
        f"estimate, one island (gpt3-175b-a100.toml):   {one:.3f} ms CPU  (target {ESTIMATE_TARGET_MS} ms)"
        f"  [{paths['gpt3-175b-a100 (one island)']}]"
    )
    print(f"estimate, three islands (three-islands.toml): {three:.3f} ms CPU  [{paths['three-islands']}]")
    print(
        f"plan, three islands, serial: {plan['evaluated']:,} candidates in {plan['seconds']:.2f} s = "
        f"{plan['candidates_per_s'] / 1e6:.2f} M/s  (target {PLAN_TARGET / 1e6:.0f} M/s)"
    )
    print("targets: " + ("met" if doc["meets_targets"] else "NOT met"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
