"""Megatron-LM's separate weight-gradient adds (shardmeter/model/grad_accumulation.py): the stack's
code by date, and a first-principles count of the bytes each add moves.

Megatron-LM megatron/model/distributed.py ``param_hook`` at de7dc40f (2021-08-10)::

    def param_hook(*unused):
        # Add the gradient to the buffer.
        if param.grad.data is not None:
            param.main_grad.add_(param.grad.data)

and megatron/arguments.py at 83b1e42f (2022-02-13) adds ``'--no-gradient-accumulation-fusion',
action='store_false'`` (the weight-gradient GEMM accumulates into ``main_grad``), switched off
without fp32 accumulation until 07916bf2 (2022-09-27, "Support gradient accumulation fusion in fp16").
"""

from __future__ import annotations

import pathlib

import pytest
from cli_helpers import run

import shardmeter
from shardmeter.model.grad_accumulation import accumulation_bytes_per_add, grad_accumulation_s

RUN = (
    pathlib.Path(shardmeter.__file__).parent
    / "validation_data/published/narayanan2021/narayanan2021-t1-gpt76.1b-n1024.toml"
)


def _memory_ops_s(**sets):
    est = shardmeter.Estimator()
    rep = est.estimate(str(RUN), overrides=sets)
    return rep, rep.breakdown_s["memory_ops"]


def test_count_of_one_add():
    # fp16 gradients held in fp16 (no --accumulate-allreduce-grads-in-fp32): read 2 + write 2 bytes of
    # the buffer and read 2 of the new gradient = 6 bytes an element
    assert accumulation_bytes_per_add(2.0e9 * 2, 2.0, 2.0) == pytest.approx(6 * 2.0e9)
    # bf16 into fp32 main_grad: read 4 + write 4 + read 2 = 10 bytes an element
    assert accumulation_bytes_per_add(2.0e9 * 4, 2.0, 4.0) == pytest.approx(10 * 2.0e9)
    # m micro-batches add m - 1 times (the first gradient is the buffer); none where fused or m = 1
    assert grad_accumulation_s(28.0, 4e9, 2.0, 2.0, 0.0, 2e12) == pytest.approx(27 * 6 * 2e9 / 2e12)
    assert grad_accumulation_s(28.0, 4e9, 2.0, 2.0, 1.0, 2e12) == 0.0
    assert grad_accumulation_s(1.0, 4e9, 2.0, 2.0, 0.0, 2e12) == 0.0


@pytest.mark.parametrize(
    ("version", "precision", "fused"),
    [
        ("2021-08-10", "fp16", False),  # before 83b1e42f: never
        ("2021-08-10", "bf16", False),
        ("2022-06", "bf16", True),  # 83b1e42f: with fp32 accumulation, which --bf16 forces
        ("2022-06", "fp16", False),  # ... and --fp16 does not
        ("2022-10", "fp16", True),  # 07916bf2: at every precision
    ],
)
def test_megatron_lm_by_version(version, precision, fused):
    sets = {"training.framework_version": version, "training.precision": precision}
    _, with_profile = _memory_ops_s(**sets)
    _, fused_s = _memory_ops_s(**sets, **{"training.grad_accumulation_fusion": True})
    assert (with_profile == pytest.approx(fused_s)) is fused


def test_the_adds_priced_are_the_count():
    """The 76B row (TP 8, PP 4, DP 32, micro-batch 2: 28 micro-batches, fp16): the difference
    between the separate and the fused adds is 27 passes of 6 bytes per local parameter at the
    GPU's achieved HBM rate; a written key keeps its meaning against the profile."""
    rep, separate = _memory_ops_s(**{"training.framework_version": "2021-08-10"})
    _, fused = _memory_ops_s(
        **{"training.framework_version": "2021-08-10", "training.grad_accumulation_fusion": True}
    )
    lay = rep.layout
    assert lay["grad_accumulation"] == 28
    gpu = shardmeter.Estimator().resolve(shardmeter.Estimator().load(str(RUN))).islands[0].gpu
    hbm = gpu.memory_bandwidth_gb_s * 1e9 * gpu.hbm_efficiency
    assert separate - fused == pytest.approx(27 * 6 * lay["params_per_gpu"] / hbm, rel=1e-6)


def test_importers_read_the_flag(tmp_path, capsys):
    script = tmp_path / "train.sh"
    script.write_text(
        "torchrun pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
        "--seq-length 512 --max-position-embeddings 512 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 8 "
        "--bf16 --no-gradient-accumulation-fusion\n"
    )
    code, out, _ = run(capsys, "import", "megatron", str(script), "--gpu", "h100-sxm", "--gpus", "8")
    assert code == 0
    assert "grad_accumulation_fusion = false" in out


TT_PP = RUN.parent.parent / "torchtitan" / "torchtitan-202412-llama3-405b-n512-1f1b.toml"


def test_fsdp2_under_a_pipeline_adds_into_its_unsharded_fp32_accumulator():
    """torchtitan (FSDP2) never fuses the sum: under a pipeline schedule the accumulator is the
    unsharded gradient in fp32, one element per parameter of the pacing stage's slice
    (``params_per_gpu``), and each add after the first reads and writes it (8 bytes an element)
    and reads the bf16 gradient (2): 10 bytes. The model adds over the stage's whole gradient
    state, which also holds its reduced 1/dp shard in bf16: 1 / (2 dp) = 6 % more at dp 8."""
    est = shardmeter.Estimator()
    rep = est.estimate(str(TT_PP))
    fused = est.estimate(str(TT_PP), overrides={"training.grad_accumulation_fusion": True})
    m = rep.layout["grad_accumulation"]
    assert m > 1
    gpu = est.resolve(est.load(str(TT_PP))).islands[0].gpu  # the 2.4 TB/s Grand Teton H100
    hbm = gpu.memory_bandwidth_gb_s * 1e9 * gpu.hbm_efficiency
    want = (m - 1) * rep.layout["params_per_gpu"] * 10 / hbm
    got = rep.breakdown_s["memory_ops"] - fused.breakdown_s["memory_ops"]
    dp = rep.layout["dp"]
    assert got == pytest.approx(want * (1 + 1 / (2 * dp)), rel=1e-3)
