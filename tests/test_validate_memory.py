"""``validate``'s memory semantics (SCENARIO.md, "Validation") and the memory model's terms
for the bundled runs that ran although an earlier model put them over capacity."""

from __future__ import annotations

import json
import os

import pytest

from shardmeter.cli.app import main
from shardmeter.estimator import Estimator
from shardmeter.validate.run import bundled_validation_dir, validate_paths

PUBLISHED = bundled_validation_dir()
MPT1B = os.path.join(PUBLISHED, "llm-foundry-mpt", "llmfoundry-a100-40g-mpt1b-s2048-n32-gbs320.toml")
ZERO3_530B = os.path.join(PUBLISHED, "narayanan2021", "narayanan2021-t2-zero3-gpt529.6b-n640.toml")
NEMOTRON_340B = os.path.join(PUBLISHED, "nemo-2407", "nemo2407-h100-fp8-nemotron-340b-n128-gbs32.toml")


def _with_measured(tmp_path, name: str, measured: str) -> str:
    """A copy of the MPT-1B run whose [measured] table is ``measured``."""
    with open(MPT1B) as fh:
        text = fh.read()
    head, _, tail = text.partition("[measured]\n")
    tail = tail[tail.index("\n[source]") :]
    path = tmp_path / name
    path.write_text(head + "[measured]\n" + measured + "\n" + tail)
    return str(path)


@pytest.fixture(scope="module")
def need_gb() -> float:
    """The allocated prediction as PyTorch counts it: without the CUDA context and NCCL's
    buffers (``memory_outside_allocator_gb``), which validate leaves out of both figures."""
    r = Estimator().estimate(MPT1B)
    assert 0.5 < r.memory_outside_allocator_gb < r.memory_breakdown_gb["other"]
    return r.memory_per_gpu_gb - r.memory_outside_allocator_gb


@pytest.fixture(scope="module")
def reserved_gb() -> float:
    r = Estimator().estimate(MPT1B)
    return r.memory_reserved_gb - r.memory_outside_allocator_gb


def test_a_reserved_peak_is_compared_and_bounds_the_allocated_prediction(tmp_path, need_gb, reserved_gb):
    f = _with_measured(tmp_path, "under.toml", f"memory_reserved_gb = {need_gb + 2.5}")
    res = validate_paths([f])
    assert res["failures"] == []
    (c,) = res["cases"]  # compared as a measurement: predicted reserved against it
    assert c["field"] == "memory_reserved_gb" and c["predicted"] == pytest.approx(reserved_gb)
    assert c["error"] == pytest.approx(reserved_gb / (need_gb + 2.5) - 1.0)
    assert res["mape"] == {"memory_reserved_gb": pytest.approx(abs(c["error"]))}
    (b,) = res["memory_bounds"]  # and a bound on the allocated prediction
    assert b["within"] is True and b["slack_gb"] == pytest.approx(2.5)
    assert b["predicted"] == pytest.approx(need_gb) and b["field"] == "memory_reserved_gb"
    mem = res["memory"]
    assert mem["reserved_bounds"] == 1 and mem["reserved_violations"] == 0 and mem["reserved_cases"] == 1
    assert mem["min_slack_gb"] == pytest.approx(2.5)
    assert mem["reserved_within_10pct"] == (1.0 if abs(c["error"]) <= 0.10 else 0.0)
    assert res["overall_mape"] is None  # memory is summed up apart from the speed fields


def test_reserved_within_ten_percent_is_the_share_of_cases(tmp_path, reserved_gb):
    near = _with_measured(tmp_path, "near.toml", f"memory_reserved_gb = {reserved_gb / 1.05}")
    far = _with_measured(tmp_path, "far.toml", f"memory_reserved_gb = {reserved_gb / 1.5}")
    res = validate_paths([near, far])
    assert res["memory"]["reserved_cases"] == 2
    assert res["memory"]["reserved_within_10pct"] == pytest.approx(0.5)
    assert res["memory"]["reserved_mape"] == pytest.approx((0.05 + 0.5) / 2)


def test_a_prediction_above_the_reserved_peak_is_a_failed_case(tmp_path, need_gb):
    f = _with_measured(
        tmp_path, "over.toml", f"tokens_per_s_per_gpu = 15555.0\nmemory_reserved_gb = {need_gb - 3.0}"
    )
    res = validate_paths([f])
    (b,) = res["memory_bounds"]
    assert b["within"] is False and b["slack_gb"] == pytest.approx(-3.0)
    assert res["n_failed"] == 1 and "exceeds the measured memory_reserved_gb" in res["failures"][0]["error"]
    assert res["memory"]["reserved_violations"] == 1 and res["memory"]["min_slack_gb"] is None
    assert [c["field"] for c in res["cases"]] == ["tokens_per_s_per_gpu", "memory_reserved_gb"]
    assert res["overall_mape"] == pytest.approx(abs(res["cases"][0]["error"]))  # speed only


def test_an_allocated_peak_is_compared_like_any_field(tmp_path, need_gb):
    f = _with_measured(tmp_path, "alloc.toml", f"memory_per_gpu_gb = {need_gb / 1.1}")
    res = validate_paths([f])
    (c,) = res["cases"]
    assert c["field"] == "memory_per_gpu_gb" and c["error"] == pytest.approx(0.1)
    assert res["memory"]["allocated_cases"] == 1
    assert res["memory"]["allocated_mape"] == pytest.approx(0.1)
    assert res["mape"]["memory_per_gpu_gb"] == pytest.approx(0.1)
    assert res["memory_bounds"] == [] and res["memory"]["reserved_bounds"] == 0


def test_validate_json_and_table_show_the_bound(tmp_path, capsys, need_gb):
    f = _with_measured(tmp_path, "both.toml", f"memory_reserved_gb = {need_gb + 1.0}")
    assert main(["validate", f, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["memory_bounds"][0]) == {
        "file",
        "group",
        "field",
        "measured",
        "predicted",
        "slack_gb",
        "within",
    }
    assert set(doc["memory"]) == {
        "allocated_cases",
        "allocated_mape",
        "allocated_within_10pct",
        "reserved_cases",
        "reserved_mape",
        "reserved_within_10pct",
        "reserved_bounds",
        "reserved_violations",
        "min_slack_gb",
    }
    assert doc["memory"]["allocated_mape"] is None  # strict JSON: no allocated peak, null
    assert main(["validate", f]) == 0
    out = capsys.readouterr().out
    assert "slack +1.0 GB" in out and "1 reserved bounds, 0 exceeded" in out
    assert "1 reserved peaks, MAPE" in out and "within 10%" in out


@pytest.mark.parametrize("path", [MPT1B, ZERO3_530B], ids=["mpt-1b-fsdp", "zero3-530b"])
def test_runs_that_ran_fit(path):
    r = Estimator().estimate(path)
    assert r.feasible, r.reasons
    assert sum(r.memory_breakdown_gb.values()) == pytest.approx(r.memory_per_gpu_gb, rel=1e-12)


def test_mpt1b_fsdp_needs_its_state_activations_and_the_context():
    """No fragmentation allowance on top (it was 5 % of the tensors): 38.2 GB of 40."""
    r = Estimator().estimate(MPT1B)
    # FSDP keeps no extra buffer; llm-foundry's fused cross-entropy no transient copy; other: the
    # CUDA context, the dp group's NCCL buffers, two cuBLAS workspaces on the A100 (sm80)
    assert r.memory_breakdown_gb["transient"] == 0.0
    nccl = 32 * (512 * 1024 + 4915200 + 4 * 2**20)
    assert r.memory_breakdown_gb["other"] * 1e9 == pytest.approx(0.5e9 + nccl + 2 * (8519680 + 2**20))
    assert r.memory_per_gpu_gb < 39.0


def test_deepspeed_zero3_gathers_submodules_not_two_layers():
    """GPT 530B (h = 20480): one layer is 5.0e9 parameters, 20 GB for two in fp16; DeepSpeed's
    coordinator holds the largest linear (fc1, 4h x h = 1.68e9) plus one 5e7-element prefetch
    bucket, and keeps its 5e8-element fp16 reduce bucket (1 GB) in ``transient``."""
    r = Estimator().estimate(ZERO3_530B)
    p_gpu = r.layout["params_per_gpu"]
    h = 20480
    gathered = (4 * h * h + 5e7) * 2 / 1e9
    assert r.memory_breakdown_gb["weights"] == pytest.approx(p_gpu * 2 / 640 / 1e9 + gathered, rel=1e-9)
    assert r.memory_breakdown_gb["transient"] >= 1.0  # the reduce bucket, beside any loss gradient


def test_fsdp_still_holds_two_gathered_layers():
    est = Estimator()
    fsdp = est.estimate(ZERO3_530B)  # zero3
    sc = est.load(ZERO3_530B)
    import attrs

    sc = attrs.evolve(sc, parallelism=attrs.evolve(sc.parallelism, sharding="fsdp"))
    r = est.estimate(sc)
    p_layer = 12 * 20480**2 + 13 * 20480  # Narayanan et al. 2021, Eq. 2 per layer (weights and biases)
    two = 2 * p_layer * 2 / 1e9
    sharded = r.layout["params_per_gpu"] * 2 / 640 / 1e9
    assert r.memory_breakdown_gb["weights"] == pytest.approx(sharded + two, rel=1e-3)
    assert r.memory_breakdown_gb["weights"] > fsdp.memory_breakdown_gb["weights"]


# Nemotron-4 340B (fp8): 57.7 GB of bf16 weights, bf16 grads and 12/dp bytes of distributed-
# optimizer state (NeMo 24.07's recipe), and fp8 activations: Transformer Engine's delayed recipe
# keeps the 1-byte copies of GEMM inputs for the backward pass
def test_nemotron_340b_fits():
    assert Estimator().estimate(NEMOTRON_340B).feasible


def test_bundled_reserved_peaks_coverage_and_bound():
    """Issue 22's memory targets on every bundled run reporting ``max_memory_reserved``
    (torchtitan's tables and torchao's, which runs torchtitan): the allocated prediction never
    above the reserved peak, and the reserved prediction within 10 % of it on at least 90 % of
    the 30 (28 today; the 2024-12 405B pipeline rows at 1F1B with 8 micro-batches of 4 and at
    cp 8 stay 16-18 % under). Every one of them is feasible."""
    dirs = [os.path.join(PUBLISHED, g) for g in ("torchtitan", "torchao-float8")]
    res = validate_paths(dirs)
    mem = res["memory"]
    assert mem["reserved_cases"] == 30 and mem["reserved_violations"] == 0
    assert mem["reserved_within_10pct"] >= 0.90
    assert mem["reserved_mape"] < 0.06
    assert res["n_failed"] == 0  # an infeasible run would be a failed case


def test_torchao_h100_runs_predate_torchtitans_compiled_loss():
    """The torchao H100 rows ran torchtitan 0da8901 (2025-03-10), before bbb1b616 (2025-04-02)
    compiled the loss: their loss transient is the eager one, as the same run written with a
    later framework_version is not."""
    path = os.path.join(PUBLISHED, "torchao-float8", "torchao-float8-llama3-8b-h100-bf16-n8.toml")
    est = Estimator()
    assert est.load(path).training.framework_version == "2025-03-10"
    then = est.estimate(path).memory_breakdown_gb["transient"]
    later = est.estimate(path, {"training.framework_version": "2025-04-02"}).memory_breakdown_gb["transient"]
    # Llama 3 8B at 8192 tokens: the eager loss upcasts 8192 x 128256 logits to fp32 (4.2 GB);
    # compiled, it does not
    assert then - later > 8192 * 128256 * 4 / 1e9
