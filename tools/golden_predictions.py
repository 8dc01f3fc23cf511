"""Write (or check) the golden predictions that pin the model through the architecture change.

Issue 10 moves the model's behaviour into plugins and its inputs into typed bundles; every
prediction must stay the same to 1e-9 relative. This script records, once, before the move:

* the report of every bundled validation run and every example scenario;
* the report of 400 random valid scenarios (the property tests' generator, derandomised), each
  stored with the scenario tables that produced it;
* the best plans of ``plan`` on the small shared scenario and on the three-island example
  (``--only`` narrowed so the search takes seconds), and one sweep.

``tests/test_golden.py`` recomputes every figure and compares. Regenerate (``--write``) only in
a commit that changes the model on purpose, and say so in its message.

    python tools/golden_predictions.py --write            # the stored random scenarios, re-predicted
    python tools/golden_predictions.py --write --redraw   # a fresh draw of random scenarios
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "golden" / "predictions.json"
N_RANDOM = 400


def _scenario_files() -> list[pathlib.Path]:
    files = sorted((ROOT / "shardmeter" / "validation_data" / "published").glob("*/*.toml"))
    files += sorted(p for p in (ROOT / "examples").rglob("*.toml") if "plugins" not in p.parts)
    return files


def _random_dicts(n: int) -> list[dict]:
    sys.path.insert(0, str(ROOT / "tests"))
    from hypothesis import HealthCheck, given, settings
    from test_properties import scenario_dicts  # the property tests' generator

    drawn: list[dict] = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(scenario_dicts())
    def collect(d):
        drawn.append(d)

    collect()
    return drawn[:n]


def _plans() -> list[dict]:
    sys.path.insert(0, str(ROOT / "tests"))
    from shared_scenarios import THREE_ISLANDS, TINY

    return [
        {"name": "tiny-time", "scenario": TINY, "only": None, "objective": "time", "top": 5},
        {"name": "tiny-pareto", "scenario": TINY, "only": None, "objective": "pareto", "top": 5},
        {
            "name": "three-islands-time",
            "scenario": str(THREE_ISLANDS.relative_to(ROOT)),
            "only": {"tp": [1, 2, 4], "pp": [1, 2], "mbs": [1, 2]},
            "objective": "time",
            "top": 5,
        },
    ]


def report_of(source) -> dict:
    """The report of one scenario: the per-island model's, or a ``[[stage_group]]`` pipeline's."""
    import shardmeter
    from shardmeter.hetero import estimate_pipeline

    est = shardmeter.Estimator()
    sc = est.load(source)
    if sc.stage_groups:
        return estimate_pipeline(est, sc).to_dict()
    return est.estimate(sc).to_dict()


def plan_of(case: dict) -> dict:
    from shardmeter.explore.search.plan import search

    src = case["scenario"]
    if isinstance(src, str):
        src = str(ROOT / src)
    doc = search(src, only=case["only"], top=case["top"], objective=case["objective"])
    doc = {
        k: v for k, v in doc.items() if k not in ("seconds", "candidates_per_s", "workers", "report_seconds")
    }
    return json.loads(json.dumps(doc, default=str))


def build(keep_random: list[dict] | None = None) -> dict:
    """Every record; ``keep_random``: the stored random scenarios, re-predicted rather than
    drawn again (the generator grows with the model's keys, so a fresh draw is other scenarios)."""
    files = {str(p.relative_to(ROOT)): report_of(p) for p in _scenario_files()}
    rand = []
    drawn = [r["scenario"] for r in keep_random] if keep_random is not None else _random_dicts(N_RANDOM)
    for d in drawn:
        try:
            rand.append({"scenario": d, "report": report_of(d)})
        except Exception as exc:  # noqa: BLE001 - a generated scenario the loader rejects is recorded as such
            rand.append({"scenario": d, "error": f"{type(exc).__name__}: {exc}"})
    plans = [{**case, "result": plan_of(case)} for case in _plans()]
    return {"files": files, "random": rand, "plans": plans}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="overwrite tests/golden/predictions.json")
    ap.add_argument(
        "--redraw",
        action="store_true",
        help="draw the random scenarios again instead of keeping the stored ones",
    )
    args = ap.parse_args(argv)
    keep = None if args.redraw or not OUT.exists() else json.loads(OUT.read_text())["random"]
    doc = build(keep)
    text = json.dumps(doc, indent=1, sort_keys=True, default=str)
    if args.write:
        OUT.write_text(text + "\n")
        print(
            f"wrote {OUT.relative_to(ROOT)}: {len(doc['files'])} files, {len(doc['random'])} random, "
            f"{len(doc['plans'])} plans"
        )
    else:
        print(text[:2000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
