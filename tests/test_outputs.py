"""``evaluate``'s typed result: the records add up, ``detail`` and ``islands_only`` leave only
what a search reads (the same numbers), and ``columns()`` / ``from_columns()`` round-trip."""

from __future__ import annotations

import pathlib

import attrs
import numpy as np
import pytest

import shardmeter
from shardmeter.inputs.bundles import ModelInputs
from shardmeter.model.evaluate import evaluate, island_memory
from shardmeter.model.outputs import (
    BREAKDOWN_TERMS,
    Breakdown,
    IslandOutputs,
    Outputs,
    StepTerms,
    map_fields,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
THREE = ROOT / "examples" / "multi-island" / "three-islands.toml"


@pytest.fixture(scope="module")
def batch():
    """The three-island example at four micro-batch sizes: one row each, three islands."""
    est = shardmeter.Estimator()
    inp, table = est.inputs(est.resolve(est.load(THREE)))
    cols = {k: np.asarray(v, dtype=float) for k, v in inp.columns().items()}
    n = 4
    cols = {k: np.repeat(v, n, axis=0) for k, v in cols.items()}
    cols["training.micro_batch"] = cols["training.micro_batch"] * np.array([1.0, 2.0, 4.0, 64.0])[:, None]
    return ModelInputs.from_columns(cols), table


def test_breakdown_names_are_the_step_terms_then_sync_and_idle():
    assert (
        *(f.name.removesuffix("_s") for f in attrs.fields(StepTerms)),
        "island_sync",
        "idle",
    ) == BREAKDOWN_TERMS
    assert BREAKDOWN_TERMS[0] == "compute" and len(BREAKDOWN_TERMS) == 12


def test_the_records_add_up(batch):
    out = evaluate(*batch)
    isl = out.island
    assert out.step_time_s.shape == (4,) and isl.step_s.shape == (4, 3) and out.reasons.shape == (4, 3)
    ok = out.feasible
    assert ok.any() and not ok.all()  # a micro-batch of 64 does not fit
    # the average GPU's breakdown and every island's view of the step add up to the step
    np.testing.assert_allclose(out.breakdown.total()[ok], out.step_time_s[ok], rtol=1e-12)
    for j in range(3):
        bd = map_fields(lambda x, j=j: x[:, j], isl.breakdown)
        np.testing.assert_allclose(bd.total()[ok], out.step_time_s[ok], rtol=1e-12)
    # each island's own terms are its step, its idle time the wait for the slowest
    own = StepTerms(**{f.name: getattr(isl.breakdown, f.name) for f in attrs.fields(StepTerms)})
    np.testing.assert_allclose(own.total(), isl.step_s, rtol=1e-12)
    np.testing.assert_allclose(
        (isl.step_s + isl.idle_s)[ok], np.max(isl.step_s, axis=1)[ok, None] * np.ones(3)
    )
    # memory: the parts add up to the busiest GPU, the global figure is the busiest island's
    parts = isl.memory_parts.parts()
    assert list(parts) == ["weights", "gradients", "optimizer", "activations", "transient", "other"]
    np.testing.assert_allclose(sum(parts.values()), isl.memory_bytes, rtol=1e-12)
    np.testing.assert_array_equal(out.memory_bytes, isl.memory_bytes.max(axis=1))
    # the capacity the memory bit compares against is the GPU's
    gpu_bytes = np.asarray(batch[0].hardware.memory_bytes, dtype=float)
    np.testing.assert_array_equal(isl.memory_capacity_bytes, np.broadcast_to(gpu_bytes, (4, 3)))
    over = isl.memory_bytes > isl.memory_capacity_bytes
    np.testing.assert_array_equal(over, (out.reasons & 32) != 0)
    np.testing.assert_array_equal(isl.feasible, out.reasons == 0)


def test_a_search_gets_the_same_numbers_and_none_for_what_it_does_not_read(batch):
    full = evaluate(*batch).columns()
    search = evaluate(*batch, detail=False)
    islands = evaluate(*batch, detail=False, islands_only=True)
    assert search.breakdown is None and search.overlapped is None and search.tokens_per_s is None
    assert search.island.memory_parts is None and search.island.breakdown is None
    assert islands.step_time_s is None and islands.egress_bytes_per_step is None
    for out in (search, islands):
        cols = out.columns()
        assert cols and set(cols) < set(full)
        for k, v in cols.items():
            np.testing.assert_array_equal(v, full[k], err_msg=k)
    # the memory probe gives the model's reasons and memory
    probe = island_memory(*batch)
    np.testing.assert_array_equal(probe.reasons, full["reasons"])
    np.testing.assert_array_equal(probe.memory_bytes, full["island.memory_bytes"])


def test_columns_round_trip(batch):
    out = evaluate(*batch)
    cols = out.columns()
    assert {"step_time_s", "island.step_s", "breakdown.compute_s", "island.breakdown.idle_s"} <= set(cols)
    assert "island.memory_parts.weights_bytes" in cols
    back = Outputs.from_columns(cols)
    assert isinstance(back.island, IslandOutputs) and isinstance(back.island.breakdown, Breakdown)
    assert back.columns().keys() == cols.keys()
    for k, v in back.columns().items():
        assert v is cols[k], k
    # a slice of the rows through the columns is the model's numbers for those rows
    half = Outputs.from_columns({k: np.asarray(v)[1:3] for k, v in cols.items()})
    np.testing.assert_array_equal(half.island.step_s, out.island.step_s[1:3])
    assert half.breakdown.compute_s.shape == (2,)
    # what was not given is None, nested records too
    part = Outputs.from_columns({k: v for k, v in cols.items() if not k.startswith(("breakdown.", "mfu"))})
    assert part.breakdown is None and part.mfu is None and part.island.breakdown is not None


def test_from_columns_names_a_missing_required_column(batch):
    cols = evaluate(*batch, detail=False).columns()
    del cols["island.step_s"]
    with pytest.raises(TypeError, match="step_s"):
        Outputs.from_columns(cols)
