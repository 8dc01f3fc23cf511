"""The band's arithmetic (``shardmeter/report/band.py``) and its coverage on the bundled runs held
out by group (``shardmeter/validate/coverage.py``; issue 23's bar: 75-90 % with a median band of
at most 15 %)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shardmeter.report import band as B
from shardmeter.report import confidence as C
from shardmeter.validate.coverage import BAND_FIELDS, case_band, held_out_coverage


def test_conformal_rank_is_ceil_of_n_plus_one_times_the_coverage():
    xs = [0.09, -0.01, 0.08, 0.02, -0.07, 0.03, 0.06, -0.04, 0.05]  # |x|: 0.01 .. 0.09
    assert B.conformal_quantile(xs) == 0.08  # ceil(10 x 0.8) = 8th smallest of 9
    assert B.conformal_quantile(xs[:4]) == 0.09  # ceil(5 x 0.8) = 4: the largest of 4
    assert B.conformal_quantile([0.3]) == 0.3  # rank 2 > 1 value: the largest
    assert B.conformal_quantile(range(1, 20)) == 16  # ceil(20 x 0.8) = 16th of 19
    assert math.isnan(B.conformal_quantile([]))


def test_error_of_the_prediction_from_a_residual():
    # predicted 125 for measured 100: residual +25 %, the measured value is 20 % below the prediction
    assert B.prediction_errors(0.25) == pytest.approx(-0.2)
    assert B.prediction_errors(-0.2) == pytest.approx(0.25)


def test_octaves_outside_the_scale_envelope():
    assert B.octaves_outside(64, 8, 1024, 2.0) == 0.0
    assert B.octaves_outside(2048, 8, 1024, 2.0) == 0.0  # at the edge
    assert B.octaves_outside(8 * 2048, 8, 1024, 2.0) == pytest.approx(3.0)
    assert B.octaves_outside(1, 8, 1024, 2.0) == pytest.approx(2.0)  # 4 / 1


def test_widening():
    assert B.widened(0.05, 0, 0.1, 0.0) == 0.05
    assert B.widened(0.05, 2, 0.1, 0.0) == 0.1  # an unvalidated kind: at least the table's bound
    assert B.widened(0.15, 1, 0.1, 0.0) == 0.15
    assert B.widened(0.05, 1, 0.1, 1.0) == pytest.approx(0.2)  # one octave beyond: x 2


def test_pessimistic_ends():
    assert B.pessimistic_time(8.0, 0.2) == pytest.approx(10.0)  # throughput x 0.8
    assert B.pessimistic_time(8.0, 1.0) == math.inf
    assert B.pessimistic_rate(100.0, 0.2) == pytest.approx(80.0)
    np.testing.assert_allclose(B.pessimistic_time(np.array([1.0, 1.0]), np.array([0.5, 1.5])), [2.0, np.inf])


def test_a_case_is_inside_when_the_measured_throughput_lies_within_the_band_of_the_prediction():
    conf = {"band_pct": 10.0}
    assert case_band("tokens_per_s_per_gpu", 100.0, 109.0, conf)["inside_band"]  # 100 / 109 - 1 = -8.3 %
    assert not case_band("tokens_per_s_per_gpu", 100.0, 90.0, conf)["inside_band"]  # +11.1 %
    assert case_band("step_time_s", 1.0, 1.09, conf)["inside_band"]  # throughput 1 / 1.09
    assert case_band("memory_per_gpu_gb", 50.0, 80.0, conf) == {}  # not a throughput
    assert case_band("tokens_per_s_per_gpu", 100.0, 90.0, {}) == {}


def test_held_out_coverage_of_the_bundled_runs_meets_the_bar():
    cov = held_out_coverage()
    held = [r for r in C.validated_runs() if r.logo_residual is not None]
    assert cov["runs"] == len(held) > 200
    assert 0.75 <= cov["coverage"] <= 0.90, cov
    assert cov["median_band_pct"] <= 15.0, cov
    assert sum(g["runs"] for g in cov["by_group"].values()) == cov["runs"]


def test_held_out_coverage_recounted_by_hand_for_one_group():
    cov = held_out_coverage()["by_group"]["korthikanti2022"]
    inside = 0
    for r in C.validated_runs():
        if r.group != "korthikanti2022":
            continue
        band = C.band_of(r.features, exclude=r.group)
        inside += abs(1 / (1 + r.logo_residual) - 1) <= band
    assert cov["inside"] == inside and cov["runs"] == 10


def test_validate_prints_the_coverage_of_its_cases_and_of_the_runs_held_out(capsys):
    from cli_helpers import run

    from shardmeter.validate.run import bundled_validation_dir

    folder = f"{bundled_validation_dir()}/korthikanti2022"
    code, out, _ = run(capsys, "validate", folder)
    assert code == 0
    cov = held_out_coverage()
    line = next(ln for ln in out.splitlines() if ln.startswith("band coverage held out"))
    assert f"{cov['inside']} of {cov['runs']} inside ({cov['coverage']:.1%}; nominal 80 %)" in line
    assert f"median band {cov['median_band_pct']:.1f}%" in line
    mine = next(ln for ln in out.splitlines() if ln.startswith("band coverage of these cases"))
    code, out, _ = run(capsys, "validate", folder, "--json")
    import json

    doc = json.loads(out)
    banded = [c for c in doc["cases"] if "band_pct" in c]  # the throughput fields of the 10 runs
    assert {c["field"] for c in banded} <= set(BAND_FIELDS) and len(banded) >= 10
    assert doc["band_coverage"]["runs"] == len(banded)
    assert doc["band_coverage"]["inside"] == sum(c["inside_band"] for c in banded)
    assert f" of {len(banded)} inside " in mine
    assert doc["band_coverage_held_out"]["coverage"] == pytest.approx(cov["coverage"])
