"""torchtitan on Blackwell: cuDNN attention, which its op-SAC save list leaves out.

* torchtitan ``torchtitan/models/attention.py`` @ accc7027 (since 3b85aa31, 2025-05-14):
  ``ScaledDotProductAttention`` puts ``SDPBackend.CUDNN_ATTENTION`` first when
  ``has_cuda_capability(10, 0)``, else FLASH (FlashAttention-2), EFFICIENT, MATH.
* ``_save_list`` in ``torchtitan/distributed/activation_checkpoint.py`` @ accc7027 (the same
  set in ``torchtitan/models/llama3/infra/parallelize.py`` @ 6fc499f6) names the flash and
  efficient SDPA ops, not ``_scaled_dot_product_cudnn_attention`` (added in b39377f9,
  2025-12-01): under ``recompute = "op"`` SDPA's output and log-sum-exp are not kept and
  attention runs again in the backward.

These are the states of that commit: the scenarios pin ``framework_version = "2025-08-30"``
(accc7027). Later states (cuDNN first on every GPU from 6a3a9da9, the save list naming cuDNN from
b39377f9, FlexAttention from 16954571) are tested in ``test_framework_states.py``.
"""

from __future__ import annotations

import copy

import attrs
import pytest
from shared_scenarios import FFN, HEADS, KV, LAYERS, SEQ, H, Q, llama3_8b

import shardmeter
from shardmeter.estimator import Estimator
from shardmeter.load.scenario import load_scenario
from shardmeter.model.compute import local_shapes, micro_batch_compute

SDPA = 2 * Q + 4 * HEADS  # bf16 output + fp32 log-sum-exp per head, per token
EAGER_OP = 2 * H + 2 * Q + 2 * KV + 2 * FFN + 2 * H + SDPA  # layer input, wq, wv, w1, w2, SDPA


LLAMA3_8B = llama3_8b(compile=False, framework="torchtitan", framework_version="2025-08-30")


def _sc(gpu: str, **training) -> dict:
    sc = copy.deepcopy(LLAMA3_8B)
    sc["island"][0]["gpu"] = gpu
    sc["training"].update(training)
    return sc


def test_sdpa_saved_bytes_are_8320_for_llama3_8b():
    assert SDPA == 8320
    assert EAGER_OP == 63616


@pytest.mark.parametrize(
    "gpu, attention",
    [("b200", "flash"), ("gb200", "flash"), ("h100-sxm", "flash2"), ("a100-sxm-80gb", "flash2")],
)
def test_torchtitan_attention_follows_the_compute_capability(gpu, attention):
    sc = load_scenario(_sc(gpu))
    assert sc.training.attention == attention
    note = next(n for n in sc.notes if n.startswith("framework torchtitan set training.attention"))
    if attention == "flash":
        assert "torchtitan/models/attention.py@accc7027" in note and "CUDNN_ATTENTION" in note
    else:
        assert "FlashAttention-2" in note


def test_a_written_attention_wins_on_blackwell():
    assert load_scenario(_sc("b200", attention="flash2")).training.attention == "flash2"


def test_catalogue_compute_capabilities():
    reg = shardmeter.Estimator().registry
    cc = {
        n: reg.get("hardware", n).compute_capability
        for n in ("v100-sxm2-32gb", "a100-sxm-80gb", "l4", "h100-sxm", "b200", "gb200", "mi300x")
    }
    assert cc == {
        "v100-sxm2-32gb": 7.0,
        "a100-sxm-80gb": 8.0,
        "l4": 8.9,
        "h100-sxm": 9.0,
        "b200": 10.0,
        "gb200": 10.0,
        "mi300x": None,
    }


def _inputs(sc):
    est = Estimator()
    inp, _ = est.inputs(est.load(sc))
    return inp


@pytest.mark.parametrize(
    "gpu, attention, saves",
    [
        ("b200", "flash", 0.0),
        ("b200", "flash2", 1.0),
        ("h100-sxm", "flash", 1.0),
        ("h100-sxm", "flash2", 1.0),
    ],
)
def test_op_saves_attention_unless_cudnn_on_blackwell(gpu, attention, saves):
    assert _inputs(_sc(gpu, attention=attention)).training.op_saves_attention.item() == saves


def test_no_framework_saves_attention_on_blackwell():
    sc = _sc("b200", attention="flash")
    sc["training"].pop("framework")
    sc["training"].pop("framework_version")
    assert _inputs(sc).training.op_saves_attention.item() == 1.0


@pytest.mark.parametrize("compile_", [False, True])
def test_blackwell_op_recompute_keeps_no_sdpa_output(compile_):
    """Activations of the 32 layers, B200 against the same run told its save list holds SDPA:
    one layer's 8 320 bytes per token fewer kept per layer, and the recomputing layer's working
    set (its full activations less what it saved) that much larger: (L - 1) x 8 320 x s."""
    b200 = shardmeter.estimate(_sc("b200", compile=compile_))
    h100_like = shardmeter.estimate(_sc("b200", compile=compile_, attention="flash2"))
    saved = h100_like.memory_breakdown_gb["activations"] - b200.memory_breakdown_gb["activations"]
    assert saved == pytest.approx((LAYERS - 1) * SDPA * SEQ / 1e9, rel=1e-6)


def test_blackwell_op_recompute_runs_one_more_attention_forward_per_layer():
    inp = _inputs(_sc("b200"))
    ms, tr, hw = inp.model, inp.training, inp.hardware
    assert tr.op_saves_attention.item() == 0.0
    sh = local_shapes(ms, tr, 1.0, 1.0, 1.0, 1.0)
    args = (hw, sh, 1.0, 1.0, False, hw.peak_flops, hw.peak16_flops)
    cudnn = micro_batch_compute(ms, tr, *args)
    saved = micro_batch_compute(ms, attrs.evolve(tr, op_saves_attention=1.0), *args)
    extra = cudnn.recompute.item() - saved.recompute.item()
    assert extra == pytest.approx(LAYERS * cudnn.attention_forward.item(), rel=1e-9)
    assert cudnn.forward.item() == saved.forward.item() and cudnn.backward.item() == saved.backward.item()
