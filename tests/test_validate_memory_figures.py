"""The published peak-memory figures bundled with the validation runs: present where added, of
the kind their source reports, and compared (and bounded) by ``validate``. Error sizes are not pinned here
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


TORCHTITAN = os.path.join(PUBLISHED, "torchtitan")


def _torchtitan_memory_files() -> list[str]:
    out = []
    for f in sorted(os.listdir(TORCHTITAN)):
        with open(os.path.join(TORCHTITAN, f), encoding="utf-8") as fh:
            if "memory_reserved_gb" in read_toml_text(fh.read(), file=f)["measured"]:
                out.append(f)
    return out


def test_torchtitan_memory_figures_are_reserved_gib_converted():
    """The 2024-12 Grand Teton tables (18 rows) and the 2025-06 Trainy H200 table (2) print
    ``Memory(GiB)``, torchtitan's logged ``max_reserved_gib``: each file states its GiB figure and
    its conversion, and the number is that figure x 2^30 / 1e9."""
    files = _torchtitan_memory_files()
    assert len(files) == 20
    for f in files:
        with open(os.path.join(TORCHTITAN, f), encoding="utf-8") as fh:
            doc = read_toml_text(fh.read(), file=f)
        gb = doc["measured"]["memory_reserved_gb"]
        note = doc["source"]["note"]
        head = "memory_reserved_gb = "
        gib = float(note[note.index(head) + len(head) :].split(" GiB", 1)[0])
        assert gb == pytest.approx(gib * GIB, abs=0.001), f
        assert "reserved" in note and "max_reserved_gib" in note, f
        assert "memory_per_gpu_gb" not in doc["measured"]  # never read as an allocated peak


def test_validate_reports_every_bundled_memory_figure():
    res = validate_paths([PUBLISHED])
    measured = {}
    for group in ("torchao-float8", "torchtitan"):
        folder = os.path.join(PUBLISHED, group)
        for f in os.listdir(folder):
            with open(os.path.join(folder, f), encoding="utf-8") as fh:
                m = read_toml_text(fh.read(), file=f)["measured"]
            if "memory_reserved_gb" in m:
                measured[f[: -len(".toml")]] = m["memory_reserved_gb"]
    assert len(measured) == 30
    bounds = {os.path.basename(b["file"])[: -len(".toml")]: b for b in res["memory_bounds"]}
    cases = {
        os.path.basename(c["file"])[: -len(".toml")]: c
        for c in res["cases"]
        if c["field"] == "memory_reserved_gb"
    }
    assert set(bounds) == set(cases) == set(measured)
    for stem, b in bounds.items():
        assert b["field"] == "memory_reserved_gb"
        assert b["measured"] == pytest.approx(measured[stem])
        assert b["predicted"] > 0 and isinstance(b["within"], bool)
        # compared as a measurement: the reserved prediction against the reserved peak
        c = cases[stem]
        assert c["measured"] == b["measured"]
        assert c["error"] == pytest.approx(c["predicted"] / c["measured"] - 1.0, rel=1e-12)
    assert res["memory"]["reserved_bounds"] == res["memory"]["reserved_cases"] == 30
    assert "memory_reserved_gb" in res["mape"]
    share = sum(abs(c["error"]) <= 0.10 for c in cases.values()) / len(cases)
    assert res["memory"]["reserved_within_10pct"] == pytest.approx(share)
