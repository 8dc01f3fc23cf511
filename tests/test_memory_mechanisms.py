"""Memory mechanisms of issue 22, item 3, each against the stack's code (quoted with its commit):
FSDP under a pipeline schedule, the loss's transient, Transformer Engine's saved fp8 inputs."""

from __future__ import annotations

import copy
import os

import attrs
import numpy as np
import pytest

import shardmeter
from shardmeter.model.fp8 import saved_input_bytes_per_byte
from shardmeter.validate.run import bundled_validation_dir

GB = 1e9


def _fsdp_pp(pp: int) -> dict:
    """Llama 3 8B under torchtitan-style FSDP on 32 GPUs, ``pp`` stages."""
    return {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 64, "micro_batch": 1, "recompute": "full"},
        "island": [{"gpu": {"name": "h100-sxm", "memory_gb": 10000.0}, "nodes": 4}],
        "parallelism": {"pp": pp, "dp": 32 // pp, "sharding": "fsdp"},
    }


def test_fsdp_under_a_pipeline_keeps_its_stage_unsharded():
    """torchtitan's ``reshard_after_forward = not pp_enabled`` and torch.distributed.pipelining's
    deferred gradient sync (FSDP2 accumulating the unsharded gradient in the fp32 reduce dtype):
    the stage's parameters in bf16 (2 bytes) and fp32 gradient accumulators (4 bytes) beside the
    sharded state, instead of two gathered layers."""
    r = shardmeter.estimate(_fsdp_pp(4))
    p = r.layout["params_per_gpu"]
    n = 32 // 4
    mb = r.memory_breakdown_gb
    assert mb["weights"] * GB == pytest.approx(p * 2 / n + p * 2, rel=1e-9)
    assert mb["gradients"] * GB == pytest.approx(p * 2 / n + p * 4, rel=1e-9)
    one = shardmeter.estimate(_fsdp_pp(1))  # without a pipeline: two gathered layers, as before
    p1 = one.layout["params_per_gpu"]
    assert one.memory_breakdown_gb["gradients"] * GB == pytest.approx(p1 * 2 / 32, rel=1e-9)
    assert one.memory_breakdown_gb["weights"] * GB < p1 * 2 / 32 + p1 * 2 * 2 / 32


LLAMA = {
    "model": {"preset": "llama3-8b"},
    "training": {"global_batch": 8, "micro_batch": 1, "recompute": "full", "compile": False},
    "island": [{"gpu": {"name": "h100-sxm", "memory_gb": 10000.0}, "nodes": 1}],
    "parallelism": {"sharding": "fsdp"},
}
SEQ, VOCAB = 8192, 128256


def _loss(**training) -> dict:
    s = copy.deepcopy(LLAMA)
    s["training"].update(training)
    return shardmeter.estimate(s).memory_breakdown_gb


def test_the_loss_transient_by_kind_of_cross_entropy():
    """Eager ``F.cross_entropy(pred.float())``: nll_loss's and log_softmax's fp32 gradients
    (8 bytes a logit) beside the saved log-softmax; Megatron's vocab-parallel cross-entropy writes
    its gradient into the saved softmax (``grad_input = softmax`` ... ``grad_input.mul_(...)``,
    megatron/core/tensor_parallel/cross_entropy.py @ d98e8a64): none. Full recompute's working
    set (one layer's activations) is live only after the loss's gradients are freed, so the
    transient is what exceeds it."""
    eager, fused = _loss(), _loss(fused_loss=True)
    assert fused["transient"] == 0.0
    assert eager["activations"] == fused["activations"]
    logits = SEQ * VOCAB
    assert eager["transient"] * GB < 8 * logits
    assert eager["transient"] * GB > 8 * logits - 2.0e9  # less one layer's working set (< 2 GB)


def test_transformer_engine_keeps_the_fp8_input_whatever_the_recipe():
    """TE's ``_Linear.forward`` saves the quantized input (``saved_inputmat = inputmat``, column-
    wise data only) unless ``save_original_input`` (default False), for every recipe
    (transformer_engine/pytorch/module/linear.py @ d0067d0d); torchao's ``Float8Linear`` saves the
    high-precision input."""
    assert saved_input_bytes_per_byte(True) == 0.5 and saved_input_bytes_per_byte(False) == 1.0
    te, ao = (
        _loss(precision="fp8", fp8_recipe="tensorwise", recompute="none", fp8_backend=b)
        for b in ("transformer-engine", "torchao")
    )
    # per layer: the QKV and MLP-up inputs (h each), the output projection's (q) and MLP-down's
    # (ffn), 2 bytes each, half of it kept by TE
    h, q, ffn, layers = 4096, 4096, 14336, 32
    saved = layers * SEQ * (2 * h + q + ffn) * 2 * 0.5
    assert (ao["activations"] - te["activations"]) * GB == pytest.approx(saved, rel=1e-9)


def test_layers_full_recompute_leaves_alone_keep_te_s_fp8_inputs():
    """``recompute_layers = k``: the chunk's other layers run a plain forward, so Transformer
    Engine's linears save their fp8 inputs there too (Megatron-Bridge's llama3 8B fp8cs recipe,
    block recompute of 5 of 32 layers); the recomputed layers keep only their input, and the one
    being recomputed in backward (the working set at the peak) saves them as in any forward."""
    te, ao = (
        _loss(precision="fp8", fp8_recipe="tensorwise", recompute="full", recompute_layers=5, fp8_backend=b)
        for b in ("transformer-engine", "torchao")
    )
    h, q, ffn, kept = 4096, 4096, 14336, 32 - 5 + 1
    saved = kept * SEQ * (2 * h + q + ffn) * 2 * 0.5
    assert (ao["activations"] - te["activations"]) * GB == pytest.approx(saved, rel=1e-9)


def test_dtensor_loss_parallel_backward_holds_three_fp32_copies():
    """torchtitan (2024-12) with TP runs its loss under ``loss_parallel()`` (``loss_parallel_enabled =
    self.tp > 1 and self.enable_loss_parallel``, torchtitan parallel_dims.py @ 9dec370), whose
    ``nll_loss_backward`` handler computes ``grad_input = torch.zeros_like(x)`` ... ``return
    (grad_input + torch.exp(x)) * grad_output`` (torch/distributed/tensor/parallel/loss.py @
    02eef6b8): beside the saved fp32 log-softmax ``x``, ``grad_input``, ``exp(x)`` and their sum
    (then the sum and the product) are alive at once, 12 bytes a local logit instead of the fused
    path's 8. Llama 3 70B, TP 8, local batch 16 x 8192 tokens: 16 x 8192 x 128256 / 8 local
    logits; without TP the fused path keeps 8 bytes, a compiled loss 2."""
    from shardmeter.model.memory import loss_transient_bytes
    from shardmeter.plugins.frameworks.torchtitan import TorchTitan

    assert TorchTitan(name="tt-test").loss_parallel_enabled()
    est = shardmeter.Estimator()
    path = os.path.join(bundled_validation_dir(), "torchtitan", "torchtitan-202412-llama3-70b-n256-2d.toml")
    inp = est.inputs(est.load(path))[0]
    assert np.all(inp.training.loss_parallel == 1.0) and np.all(inp.training.compiled_loss == 0.0)
    tokens = 16 * 8192
    local = tokens * 128256 / 8
    sh = type("Sh", (), {"tokens": tokens})()
    tp8 = loss_transient_bytes(inp.model, inp.training, sh, 8.0)
    assert np.all(tp8 == pytest.approx(12 * local, rel=1e-12))
    tp1 = loss_transient_bytes(inp.model, inp.training, sh, 1.0)  # loss_parallel needs tp > 1
    assert np.all(tp1 == pytest.approx(8 * tokens * 128256, rel=1e-12))
    tr = attrs.evolve(inp.training, compiled_loss=np.ones_like(inp.training.compiled_loss))
    assert np.all(loss_transient_bytes(inp.model, tr, sh, 8.0) == pytest.approx(2 * local, rel=1e-12))
