"""Accuracy against the bundled published runs, pinned so a regression fails.

The bars are today's measured figures plus a small margin (README, "Accuracy");
a change that makes predictions worse must justify moving them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from shardmeter.estimator import Estimator
from shardmeter.model.evaluate import evaluate_columns
from shardmeter.validate.run import bundled_validation_dir, validate_paths

PUBLISHED = bundled_validation_dir()


@pytest.fixture(scope="module")
def result():
    return validate_paths([PUBLISHED])


def test_every_bundled_case_is_compared_or_listed(result):
    compared = {c["file"] for c in result["cases"]}
    failed = {f["file"] for f in result["failures"]}
    bounded = {b["file"] for b in result["memory_bounds"]}  # torchao-float8: memory figures only
    assert len(compared | failed | bounded) == 288 + 10 + 43  # torchtitan's 43 benchmark rows
    assert not compared & failed


def test_overall_mape_does_not_regress(result):
    # The bar is 5 %: 5.08 % with torchtitan's 43 rows fitted in, 4.66 % once hidden
    # collectives pay NCCL's SM share (shardmeter/model/interference.py) and the refit.
    assert result["overall_mape"] <= 0.050


@pytest.mark.parametrize(
    "group",
    [
        "intellect-1",
        "korthikanti2022",
        "llm-foundry-mpt",
        "megatron-readme-2020",
        "narayanan2021",
        "nemo-2407",
        "nemo-longseq",
        "torchtitan",
    ],
)
def test_no_source_group_above_ten_percent(result, group):
    # the accuracy issue's bar; worst today: narayanan2021 7.8 %, nemo-2407 6.7 %
    assert result["mape_by_group"][group] <= 0.10


def test_no_failed_case(result):
    # every throughput run fits in memory (Nemotron-4 340B fp8 since TE's fp8 GEMM inputs count),
    # and no predicted need is above a reserved peak: the B200 torchao runs (torchtitan of
    # 2025-08) fit since a compiled op-recompute block keeps no w2 output and torchtitan's
    # compiled loss keeps bf16 logits (README, "Accuracy")
    assert not result["failures"]
    assert len(result["memory_bounds"]) == 10 + 20  # torchao-float8, torchtitan's 2024-12 / 2025-06 tables
    assert all(b["within"] and b["predicted"] <= b["measured"] for b in result["memory_bounds"])


def test_reserved_peaks_are_compared_and_never_below_the_allocated_prediction(result):
    reserved = [c for c in result["cases"] if c["field"] == "memory_reserved_gb"]
    assert len(reserved) == 30
    allocated = {b["file"]: b["predicted"] for b in result["memory_bounds"]}
    assert all(c["predicted"] >= allocated[c["file"]] for c in reserved)
    # the speed summary does not average memory
    speed = [abs(c["error"]) for c in result["cases"] if not c["field"].startswith("memory")]
    assert result["overall_mape"] == pytest.approx(sum(speed) / len(speed), rel=1e-12)


def test_korthikanti_table5_cases(result):
    errs = [
        abs(c["error"])
        for c in result["cases"]
        if "korthikanti2022-t5-" in c["file"] and c["field"] == "tokens_per_s_per_gpu"
    ]
    assert len(errs) == 8
    assert np.mean(errs) <= 0.03  # the bar (best public analytical model: 3.65 %)


def test_selective_recompute_with_sequence_parallel_beats_full_recompute():
    """Korthikanti et al. 2022, Table 5: 'present' is 1.27-1.32x faster than full recompute."""
    est = Estimator()
    for size in ("22b", "175b", "530b", "1t"):
        full = est.estimate(
            os.path.join(PUBLISHED, "korthikanti2022", f"korthikanti2022-t5-{size}-full.toml")
        )
        present = est.estimate(
            os.path.join(PUBLISHED, "korthikanti2022", f"korthikanti2022-t5-{size}-present.toml")
        )
        assert 1.15 < full.step_time_s / present.step_time_s < 1.45, size


def test_bigger_micro_batch_never_lowers_memory():
    est = Estimator()
    sc = est.load(os.path.join(os.path.dirname(__file__), "..", "examples", "gpt3-175b-a100.toml"))
    inp, table = est.inputs(sc)
    mbs = np.array([1, 2, 4, 8, 16], dtype=float)[:, None]
    batch = {k: np.broadcast_to(v, (5, *v.shape[1:])) for k, v in inp.columns().items()}
    batch["training.micro_batch"] = mbs
    batch["training.global_batch"] = np.full((5, 1), 1536.0 * 16)
    mem = evaluate_columns(batch, table).memory_bytes
    assert np.all(np.diff(mem) > 0)


def test_flash2_on_hopper_is_slower_than_the_native_kernel_and_the_same_on_ampere():
    """``training.attention = "flash2"`` reads the Hopper-only FA2 figure; on A100 FA2 is native."""
    est = Estimator()
    path = os.path.join(PUBLISHED, "llm-foundry-mpt", "llmfoundry-h100-bf16-mpt1b-s32768-n8-gbs32.toml")
    fa2 = est.estimate(path)
    native = est.estimate(path, overrides=['training.attention="flash"'])
    assert fa2.step_time_s > 1.3 * native.step_time_s  # attention is ~70 % of this run's FLOPs
    a100 = os.path.join(PUBLISHED, "llm-foundry-mpt", "llmfoundry-a100-80g-mpt1b-s32768-n8-gbs32.toml")
    assert (
        est.estimate(a100).step_time_s
        == est.estimate(a100, overrides=['training.attention="flash"']).step_time_s
    )
