"""The published peak-memory figures bundled with the validation runs: present where added, of
the kind their source reports, and reported by ``validate``. Error sizes are not pinned here
(the memory model is changing; ``test_accuracy.py`` pins accuracy)."""

from __future__ import annotations

import os

import pytest

from shardmeter.registry.catalog import read_toml_text
from shardmeter.validate.run import bundled_validation_dir, validate_paths

PUBLISHED = bundled_validation_dir()
TORCHAO = os.path.join(PUBLISHED, "torchao-float8")
GIB = 2**30 / 1e9

#: file stem -> the table's "Peak Memory (GB)", which is torchtitan's max_reserved_gib (GiB)
TORCHAO_RESERVED_GIB = {
    "torchao-float8-llama3-8b-h100-bf16-n8": 47.65,
    "torchao-float8-llama3-8b-h100-fp8-tensorwise-n8": 47.77,
    "torchao-float8-llama3-8b-h100-fp8-rowwise-n8": 47.79,
    "torchao-float8-llama3-8b-mi300x-bf16-n8": 39.09,
    "torchao-float8-llama3-8b-mi300x-fp8-tensorwise-n8": 39.07,
    "torchao-float8-llama3-8b-mi300x-fp8-rowwise-n8": 39.32,
    "torchao-float8-llama3-8b-b200-bf16-n8": 33.71,
    "torchao-float8-llama3-8b-b200-fp8-tensorwise-n8": 33.38,
    "torchao-float8-llama3-8b-b200-mxfp8-n8": 33.88,
    "torchao-float8-llama3-8b-b200-fp8-rowwise-n8": 33.72,
}


def _load(stem: str) -> dict:
    path = os.path.join(TORCHAO, stem + ".toml")
    with open(path, encoding="utf-8") as fh:
        return read_toml_text(fh.read(), file=path)


def test_the_torchao_group_holds_exactly_the_listed_files():
    stems = {f[: -len(".toml")] for f in os.listdir(TORCHAO) if f.endswith(".toml")}
    assert stems == set(TORCHAO_RESERVED_GIB)


@pytest.mark.parametrize("stem", sorted(TORCHAO_RESERVED_GIB))
def test_torchao_figures_are_reserved_peaks_converted_from_gib(stem):
    doc = _load(stem)
    measured = doc["measured"]
    # torchtitan logs max_memory_reserved: a bound, never an allocated peak to match
    assert "memory_per_gpu_gb" not in measured
    assert measured["memory_reserved_gb"] == pytest.approx(TORCHAO_RESERVED_GIB[stem] * GIB, abs=0.005)
    src = doc["source"]
    assert src["id"] == stem and src["group"] == "torchao-float8"
    note = src["note"]
    assert "RESERVED" in note and "max_memory_reserved" in note and "GiB" in note
    assert f"{TORCHAO_RESERVED_GIB[stem]} GiB" in note  # the source's figure, as printed


def test_validate_reports_every_bundled_memory_figure():
    res = validate_paths([PUBLISHED])
    bounds = {os.path.basename(b["file"])[: -len(".toml")]: b for b in res["memory_bounds"]}
    assert set(TORCHAO_RESERVED_GIB) <= set(bounds)
    for stem, b in bounds.items():
        assert b["field"] == "memory_reserved_gb"
        assert b["measured"] == pytest.approx(_load(stem)["measured"]["memory_reserved_gb"])
        assert b["predicted"] > 0 and isinstance(b["within"], bool)
    assert res["memory"]["reserved_bounds"] == len(bounds) >= len(TORCHAO_RESERVED_GIB)
    # a reserved bound is never a relative error
    assert not any(c["field"] == "memory_reserved_gb" for c in res["cases"])
    assert "memory_reserved_gb" not in res["mape"]
