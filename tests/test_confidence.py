"""The report's ``confidence`` object: a band from the nearest validated runs' residuals and the
validated envelope (``shardmeter/report/confidence.py``; docs/scenario.md, "Confidence")."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import attrs
import numpy as np
import pytest

from shardmeter.estimator import Estimator
from shardmeter.explore.formats.plan_table import _ranks, equivalence_groups, plan_table
from shardmeter.explore.search.plan import search
from shardmeter.report import confidence as C
from shardmeter.validate.confidence_table import compute_runs, param_keys
from shardmeter.validate.run import bundled_validation_dir

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = Path(bundled_validation_dir())
GPT3_A100 = str(ROOT / "examples" / "gpt3-175b-1536-a100.toml")
SCALE = str(ROOT / "examples" / "studies" / "scale-nodes.toml")
#: A Megatron-LM run of Narayanan et al. 2021 (A100, TP 8 x PP 12, 1536 GPUs)
RUN = PUBLISHED / "narayanan2021" / "narayanan2021-t1-gpt145.6b-n1536.toml"


def _estimate(path, overrides=()):
    est = Estimator()
    sc = est.load(str(path), overrides)
    return est.resolve(sc), est.estimate(sc)


def test_stored_table_equals_a_fresh_computation():
    stored = json.loads(
        resources.files("shardmeter.validation_data").joinpath(C.TABLE_FILE).read_text(encoding="utf-8")
    )
    fresh = compute_runs(fits=stored["holdout"]["fits"])
    assert stored["command"] == C.REGENERATE
    assert stored["runs"] == fresh, (
        f"shardmeter/validation_data/{C.TABLE_FILE} is stale (the model or the bundled runs "
        f"changed): regenerate it with `{C.REGENERATE}`"
    )


def test_table_holds_every_run_that_validates_with_its_features():
    runs = C.validated_runs()
    files = sorted(PUBLISHED.glob("*/*.toml"))
    assert 0 < len(runs) <= len(files)
    assert len({r.id for r in runs}) == len(runs)
    by_id = {r.id: r for r in runs}
    r = by_id[RUN.stem]
    assert (r.group, r.features.generation, r.features.family, r.features.gpus) == (
        "narayanan2021",
        "a100",
        "tp+pp",
        1536,
    )
    assert r.features.precision == "16-bit" and r.field == "tokens_per_s_per_gpu"
    # measured MFU = the prediction's MFU over 1 + residual
    _, rep = _estimate(RUN)
    assert r.measured_mfu == pytest.approx(rep.mfu / (1 + r.residual), rel=1e-5)
    assert r.residual == pytest.approx(rep.tokens_per_s_per_gpu / 123.78 - 1, abs=2e-3)  # the file's figure


def test_band_of_a_validated_run_is_the_conformal_bound_of_its_neighbours_held_out_errors():
    _, rep = _estimate(RUN)
    c = rep.confidence
    runs = {r.id: r for r in C.validated_runs()}
    assert c["runs"][0] == RUN.stem  # at distance zero from itself
    assert len(c["runs"]) == C.K == 19
    near = [runs[i] for i in c["runs"]]
    assert all(r.logo_residual is not None for r in near)
    # error of the prediction: measured / predicted - 1 = 1 / (1 + residual) - 1; the 80 %
    # split-conformal bound of 19 is the ceil(20 x 0.8) = 16th smallest |error|
    errs = sorted(abs(1 / (1 + r.logo_residual) - 1) for r in near)
    assert c["band_nearest_pct"] == pytest.approx(100 * errs[15], rel=1e-12)
    assert c["within_envelope"] and c["band_pct"] == c["band_nearest_pct"]  # nothing to widen
    assert c["bias_pct"] == pytest.approx(100 * np.mean([r.logo_residual for r in near]), rel=1e-12)
    # the neighbours share the run's stack and generation; its family's runs come first
    same = [r for r in runs.values() if (r.features.stack, r.features.generation) == ("megatron-lm", "a100")]
    fam = sum(r.features.family == "tp+pp" for r in same)
    assert len(same) >= C.K > fam
    assert {(r.features.stack, r.features.generation) for r in near} == {("megatron-lm", "a100")}
    assert [r.features.family for r in near[:fam]] == ["tp+pp"] * fam
    assert c["basis"].startswith(f"{C.K} runs (held-out): ")
    assert "GPUs " in c["basis"]


def test_an_moe_model_is_never_within_the_envelope_and_its_band_is_widened():
    runs = C.validated_runs()
    assert not any(r.features.model_family == "moe" for r in runs)  # no MoE run is validated
    res, rep = _estimate(RUN)
    dense = C.features_of(res, rep.gpus, rep.params)
    moe = attrs.evolve(dense, model_family="moe")
    d, m = C.static_band(dense), C.static_band(moe)
    assert "model family moe was never validated (no moe run)" in m["reasons"]
    assert not any("model family" in x for x in d["reasons"])
    # an unvalidated kind: at least the conformal bound of every held-out error of the table
    table = C._index().table_bound
    assert m["band_pct"] == pytest.approx(100 * max(table, m["band_nearest_pct"] / 100), rel=1e-12)
    assert m["band_pct"] >= 100 * table > 0
    _, mix = _estimate(SCALE, ["model.preset=mixtral-8x7b", "parallelism.ep=8"])
    assert mix.feasible and mix.confidence["within_envelope"] is False
    assert "model family moe was never validated (no moe run)" in mix.confidence["reasons"]


def test_mfu_above_the_ceiling_leaves_the_envelope_but_does_not_widen_the_band():
    res, rep = _estimate(RUN)
    ceiling = rep.confidence["max_validated_mfu"]
    at = C.confidence_of(res, attrs.evolve(rep, mfu=ceiling))
    over = C.confidence_of(res, attrs.evolve(rep, mfu=ceiling * 1.25))
    assert at["within_envelope"] and not over["within_envelope"]
    assert over["band_pct"] == at["band_pct"]  # held out, above-ceiling runs are covered unwidened


def test_scale_beyond_the_envelope_widens_the_band_per_octave():
    res, rep = _estimate(RUN)
    top = max(r.features.gpus for r in C.validated_runs() if r.features.generation == "a100")
    edge = int(top * C.SCALE_FACTOR)
    f = C.features_of(res, rep.gpus, rep.params)
    at, far = C.static_band(attrs.evolve(f, gpus=edge)), C.static_band(attrs.evolve(f, gpus=edge * 4))
    # two factors of 2 beyond the edge: x (1 + 2)
    assert far["band_pct"] == pytest.approx(3 * far["band_nearest_pct"], rel=1e-12)
    assert at["band_pct"] == pytest.approx(at["band_nearest_pct"], rel=1e-12)


def test_a_group_left_out_is_absent_from_the_neighbours_and_the_envelope():
    r = next(x for x in C.validated_runs() if x.group == "intellect-1")
    st = C.static_band(r.features, exclude="intellect-1")
    assert not any(i.startswith("intellect1") for i in st["runs"])
    assert "stack 'intellect-1' was never validated" in st["reasons"]
    assert any(x.startswith("layout family diloco was never validated") for x in st["reasons"])
    assert C.static_band(r.features)["runs"][0] == r.id


def test_a_run_predicted_with_the_catalogue_values_as_its_held_out_fit_has_its_in_sample_residual():
    """First principles: the same efficiencies give the same prediction."""
    est = Estimator()
    res = est.resolve(est.load(str(RUN)))
    keys = param_keys(res, res.islands[0])
    gpu = res.islands[0].gpu
    # a Megatron run materialises its scores: it reads the GEMM figure only
    assert set(keys) == {"matmul"}
    fits = {"narayanan2021": {keys["matmul"]: gpu.matmul_efficiency}}
    (row,) = compute_runs([str(RUN)], fits=fits)
    assert row["logo_residual"] == row["residual"] and row["logo_informed"] is True
    fits["narayanan2021"][keys["matmul"]] = gpu.matmul_efficiency * 0.9  # 10 % slower GEMMs: slower
    (slow,) = compute_runs([str(RUN)], fits=fits)
    assert slow["logo_residual"] < row["residual"]
    (bare,) = compute_runs([str(RUN)], fits={"narayanan2021": {}})  # nothing informed
    assert bare["logo_informed"] is False and bare["logo_residual"] == row["residual"]


def test_an_unvalidated_gpu_generation_is_outside_the_envelope_with_that_reason():
    _, rep = _estimate(SCALE, ["island[0].gpu=mi300x"])
    c = rep.confidence
    assert c["within_envelope"] is False
    assert "GPU generation 'mi300x' was never validated" in c["reasons"]
    assert c["max_validated_mfu"] is None  # no run of that generation to take a ceiling from
    assert math.isfinite(c["band_pct"])  # a band is still given, from the nearest runs of other generations


def test_mfu_above_the_highest_validated_run_of_its_kind_leaves_the_envelope():
    res, rep = _estimate(RUN)
    ceiling = rep.confidence["max_validated_mfu"]
    runs = [r for r in C.validated_runs() if (r.features.generation, r.features.family) == ("a100", "tp+pp")]
    assert ceiling == max(r.measured_mfu for r in runs if r.features.precision == "16-bit")
    below = C.confidence_of(res, attrs.evolve(rep, mfu=ceiling - 1e-3))
    above = C.confidence_of(res, attrs.evolve(rep, mfu=ceiling + 1e-3))
    assert not any(x.startswith("MFU") for x in below["reasons"])
    assert above["within_envelope"] is False
    assert (
        f"MFU {ceiling + 1e-3:.1%} above the highest validated A100 16-bit tp+pp run ({ceiling:.1%})"
        in (above["reasons"])
    )


def test_scale_far_outside_the_validated_range_leaves_the_envelope():
    res, rep = _estimate(RUN)
    top = max(r.features.gpus for r in C.validated_runs() if r.features.generation == "a100")
    inside = C.confidence_of(res, attrs.evolve(rep, gpus=int(top * C.SCALE_FACTOR)))
    far = C.confidence_of(res, attrs.evolve(rep, gpus=int(top * C.SCALE_FACTOR) + 8))
    assert not any("GPUs is far outside" in x for x in inside["reasons"])
    assert any(x.startswith(f"{int(top * C.SCALE_FACTOR) + 8:,} GPUs is far outside") for x in far["reasons"])
    assert far["within_envelope"] is False


def test_a_stated_stack_outranks_the_gpu_generation_in_the_distance():
    some = C.validated_runs()[-1].features
    f = attrs.evolve(some, generation="mi300x", family="ep")
    near = [C.validated_runs()[i] for i in C._nearest(f)]
    assert {r.features.stack for r in near} == {some.stack}
    # an estimate that names no stack is compared on generation first
    g = attrs.evolve(f, stack=None, generation="b200")
    b200 = sum(r.features.generation == "b200" for r in C.validated_runs())
    gens = [C.validated_runs()[i].features.generation for i in C._nearest(g)]
    assert 0 < b200 < C.K and gens[:b200] == ["b200"] * b200 and "b200" not in gens[b200:]


def test_an_unknown_stack_is_outside_the_envelope():
    f = attrs.evolve(C.validated_runs()[0].features, stack="no-such-stack")
    assert "stack 'no-such-stack' was never validated" in C.static_band(f)["reasons"]


def test_an_infeasible_report_has_no_confidence():
    _, rep = _estimate(SCALE, ["island[0].gpu.memory_gb=1"])
    assert not rep.feasible and rep.confidence == {}


def test_the_readable_report_shows_the_band_and_the_verdict():
    _, rep = _estimate(SCALE, ["island[0].gpu=mi300x"])
    line = next(ln for ln in str(rep).splitlines() if ln.startswith("confidence"))
    assert f"+/-{rep.confidence['band_pct']:.1f}%" in line
    assert "OUTSIDE the validated envelope: GPU generation 'mi300x' was never validated" in line


def test_plan_marks_an_out_of_envelope_winner_in_json_and_table():
    doc = search(SCALE, overrides=["island[0].gpu=mi300x"], only={"tp": [1, 2], "pp": [1], "cp": [1]}, top=3)
    best = doc["plans"][0]
    assert best["report"]["confidence"]["within_envelope"] is False
    text = plan_table(doc)
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("# "))
    assert header.split()[1] == "!"
    # the winner's row: "1", or "1-2" where equal plans share it
    row = next(ln for ln in lines if ln.split() and ln.split()[0].split("-")[0] == "1")
    assert row.split()[1] == "!"
    assert "! outside the validated envelope" in text
    assert f"  #{row.split()[0]}: GPU generation 'mi300x' was never validated" in lines


def test_plan_table_marks_only_the_rows_outside_and_has_no_column_when_none_is():
    doc = search(SCALE, only={"tp": [1, 2], "pp": [1], "cp": [1]}, top=3)
    for p in doc["plans"]:
        p["report"]["confidence"] = {**p["report"]["confidence"], "within_envelope": True, "reasons": []}
    text = plan_table(doc)
    assert "outside the validated envelope" not in text
    assert next(ln for ln in text.splitlines() if ln.startswith("# ")).split()[1] != "!"
    groups = equivalence_groups(doc["plans"])  # rows: plans of equal time and cost share one
    assert len(groups) >= 2
    marked = groups[1]
    for i in marked:
        doc["plans"][i]["report"]["confidence"] = {
            **doc["plans"][i]["report"]["confidence"],
            "within_envelope": False,
            "reasons": ["MFU 99.0% above the highest validated H100 16-bit dp/fsdp run (46.4%)"],
        }
    lines = plan_table(doc).splitlines()
    rows = {ln.split()[0]: ln.split() for ln in lines if ln[:1].isdigit()}
    label = _ranks([doc["plans"][i]["rank"] for i in marked])
    assert rows[label][1] == "!"
    assert all(cells[1] != "!" for key, cells in rows.items() if key != label)
    assert f"  #{label}: MFU 99.0% above the highest validated H100 16-bit dp/fsdp run (46.4%)" in lines
