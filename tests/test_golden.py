"""Predictions stay what they were before the architecture change (issue 10), to 1e-9 relative.

``tests/golden/predictions.json`` was written by ``tools/golden_predictions.py`` before the model
moved into plugins and typed inputs: reports of every bundled validation run and example, of 400
random valid scenarios (the property tests' generator), and the best plans of three searches.
A modelling change that moves a number on purpose regenerates the file in its own commit.
"""

from __future__ import annotations

import json
import math
import pathlib

import pytest

import shardmeter
from shardmeter.explore.search.plan import search
from shardmeter.hetero import estimate_pipeline

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = json.loads((ROOT / "tests" / "golden" / "predictions.json").read_text())
REL = 1e-9


def _diff(got, want, path="$") -> list[str]:
    """Every place where ``got`` and ``want`` differ (numbers to ``REL``), as readable lines."""
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return [] if got == want else [f"{path}: {got!r} != {want!r}"]
    if isinstance(want, (int, float)):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return [f"{path}: {got!r} != {want!r}"]
        if math.isnan(want) and math.isnan(got):
            return []
        ok = math.isclose(got, want, rel_tol=REL, abs_tol=1e-300)
        return [] if ok else [f"{path}: {got!r} != {want!r}"]
    if isinstance(want, dict):
        # Fields added to the report since the record was taken are not compared; every recorded
        # field must still be there, with its recorded value.
        if not isinstance(got, dict) or not set(want) <= set(got):
            return [f"{path}: keys {sorted(got) if isinstance(got, dict) else got!r} lack {sorted(want)}"]
        return [line for k in want for line in _diff(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: {got!r} != {want!r}"]
        return [
            line
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for line in _diff(g, w, f"{path}[{i}]")
        ]
    raise TypeError(f"{path}: unexpected {type(want).__name__}")


def _json(obj):
    return json.loads(json.dumps(obj, default=str))


@pytest.mark.parametrize("name", sorted(GOLDEN["files"]))
def test_scenario_file_predictions_unchanged(name):
    est = shardmeter.Estimator()
    sc = est.load(ROOT / name)
    report = estimate_pipeline(est, sc) if sc.stage_groups else est.estimate(sc)
    got = _json(report.to_dict())
    assert _diff(got, GOLDEN["files"][name]) == []


def test_random_scenario_predictions_unchanged():
    bad = []
    for i, case in enumerate(GOLDEN["random"]):
        try:
            got = _json(shardmeter.estimate(case["scenario"]).to_dict())
        except shardmeter.ShardMeterError as exc:
            got_err = f"{type(exc).__name__}: {exc}"
            if got_err != case.get("error"):
                bad.append(f"random[{i}]: {got_err}")
            continue
        lines = _diff(got, case.get("report"))
        if lines:
            bad.append(f"random[{i}] {json.dumps(case['scenario'])}: {lines[:3]}")
    assert bad == []


@pytest.mark.parametrize("case", GOLDEN["plans"], ids=lambda c: c["name"])
def test_plan_results_unchanged(case):
    src = case["scenario"]
    if isinstance(src, str):
        src = str(ROOT / src)
    doc = search(src, only=case["only"], top=case["top"], objective=case["objective"])
    doc = _json(
        {
            k: v
            for k, v in doc.items()
            if k not in ("seconds", "candidates_per_s", "workers", "report_seconds")
        }
    )
    assert _diff(doc, case["result"]) == []
