"""The overlay writer (calibrate/overlay_out.py) and the overlay reader (resolve/overlay.py)
agree: what calibrate writes reads back to the same entries, value for value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shardmeter.calibrate.overlay_out import overlay_text, toml_value
from shardmeter.resolve.overlay import read_overlay


def test_written_overlay_reads_back_to_the_same_entries(tmp_path):
    link = {"name": "nvlink4", "latency_us": 3.0007, "efficiency": 0.1 + 0.2, "source": 'fit "\u00e9" 1%'}
    gpu = {"name": "h100-sxm", "matmul_efficiency": np.float64(0.7413), "gpus_per_node": 8}
    prov = {
        "tool": "shardmeter calibrate 0",
        "date": "2026-12-01",
        "inputs": [{"file": "a.txt", "sha256": "ab"}],
    }
    text = overlay_text([("link", link), ("gpu", gpu)], prov, "first line\n\nthird line")
    assert text.startswith("# first line\n#\n# third line\n\n[provenance]\n")
    path = tmp_path / "cal.toml"
    path.write_text(text, encoding="utf-8")
    ov = read_overlay(str(path))
    assert [(e.kind, e.name) for e in ov.entries] == [("interconnect", "nvlink4"), ("hardware", "h100-sxm")]
    assert dict(ov.entries[0].fields) == {k: v for k, v in link.items() if k != "name"}
    assert ov.entries[1].fields["matmul_efficiency"] == 0.7413
    assert type(ov.entries[1].fields["matmul_efficiency"]) is float
    assert ov.provenance == "shardmeter calibrate 0 2026-12-01"


def test_values_toml_cannot_hold_are_refused():
    assert toml_value(True) == "true" and toml_value(np.float64(0.5)) == "0.5"
    with pytest.raises(ValueError, match="not a finite number"):
        toml_value(math.nan)
    with pytest.raises(TypeError, match="cannot write NoneType"):
        toml_value(None)
