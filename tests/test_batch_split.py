"""``[sync] batch_split = "balanced"``: integer micro-batches per island chosen so that the islands
finish together (docs/multi-island.md), and the exact min-max split it uses."""

from __future__ import annotations

import itertools
import pathlib

import numpy as np
import pytest

import shardmeter
from shardmeter.model.islands import min_max_shares

ROOT = pathlib.Path(__file__).resolve().parents[1]
THREE = ROOT / "examples" / "multi-island" / "three-islands.toml"


def _est(split: str):
    return shardmeter.estimate(THREE, overrides=[f'sync.batch_split="{split}"']).to_dict()


def test_default_split_is_by_replicas():
    assert _est("replicas")["step_time_s"] == shardmeter.estimate(THREE).to_dict()["step_time_s"]


def test_balanced_split_lowers_the_fast_islands_idle_share_and_the_step():
    rep, bal = _est("replicas"), _est("balanced")
    idle = {i["name"]: i["idle_fraction"] for i in rep["islands"]}
    idle_b = {i["name"]: i["idle_fraction"] for i in bal["islands"]}
    assert idle["us-east"] > 0.2 and idle_b["us-east"] < 0.05
    assert idle_b["eu-north"] < idle["eu-north"]
    assert bal["step_time_s"] < rep["step_time_s"]
    shares = [i["batch_per_step"] for i in bal["islands"]]
    assert sum(shares) == 480
    for isl, dp in zip(bal["islands"], (32, 16, 32), strict=True):  # whole micro-batches per replica
        assert isl["batch_per_step"] % dp == 0


def test_a_bad_batch_split_is_a_one_line_error_naming_the_key():
    with pytest.raises(shardmeter.ShardMeterError, match=r"sync\.batch_split"):
        shardmeter.estimate(THREE, overrides=['sync.batch_split="even"'])


@pytest.mark.parametrize("seed", range(40))
def test_min_max_shares_agrees_with_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, total = int(rng.integers(1, 4)), int(rng.integers(1, 10))
    curves = [np.where(rng.random(total + 1) < 0.6, rng.random(total + 1), np.inf) for _ in range(n)]
    for c in curves:
        c[0] = np.inf
    best = min(
        (
            max(c[b] for c, b in zip(curves, s, strict=True))
            for s in itertools.product(range(total + 1), repeat=n)
            if sum(s) == total
        ),
        default=np.inf,
    )
    got, shares = min_max_shares(curves, total)
    assert got == best or (np.isinf(got) and np.isinf(best))
    if shares is not None:
        assert sum(shares) == total
        assert max(c[b] for c, b in zip(curves, shares, strict=True)) == got
