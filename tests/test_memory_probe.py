"""The per-island planner finds each layout's largest feasible micro-batch count with memory-only
probes (``model.evaluate.island_memory``): they must be the full model's reasons and memory."""

from __future__ import annotations

import pathlib

import numpy as np

import shardmeter.explore.search.island_stack as isx
from shardmeter.explore.search.plan import search

ROOT = pathlib.Path(__file__).resolve().parents[1]
THREE = ROOT / "examples" / "multi-island" / "three-islands.toml"


def test_every_memory_probe_of_a_plan_is_the_full_models_reasons_and_memory(monkeypatch):
    real = isx.evaluate_stack
    probes = {"cells": 0, "memory": 0, "other": 0}

    def checked(ctx, prefixes, ms, memory=False):
        got = real(ctx, prefixes, ms, memory)
        if memory:
            full = real(ctx, prefixes, ms)
            for g, f in zip(got, full, strict=True):
                np.testing.assert_array_equal(g["bits"], f["bits"])
                np.testing.assert_array_equal(g["mem"], f["mem"])
                probes["cells"] += g["bits"].size
                probes["memory"] += int(np.sum(g["bits"] == 32))  # Reason.MEMORY alone
                probes["other"] += int(np.sum((g["bits"] != 0) & (g["bits"] != 32)))
        return got

    monkeypatch.setattr(isx, "evaluate_stack", checked)
    doc = search(str(THREE), top=1, build_reports=False)
    # the probes ran, and both sides of the memory boundary were probed
    assert probes["cells"] > 10_000 and probes["memory"] > 1_000
    assert doc["memory_rows"] > 0 and doc["model_rows"] > doc["memory_rows"]
