"""What torch.compile does to activation memory, counted by hand from the code it runs.

* Per-op SAC under torch.compile: torchtitan checkpoint-wraps each block and then compiles it
  (torchtitan/models/llama3/infra/parallelize.py @ 6fc499f6); AOTAutograd's min-cut
  partitioner saves only forward values the backward reads (torch/_functorch/partitioners.py),
  so the w2 output, which no backward op reads, is not kept; eager SAC keeps every saved-list
  output (torch/utils/checkpoint.py ``_CachingTorchDispatchMode``).
* The loss: torchtitan compiles ``cross_entropy_loss`` with ``training.compile``
  (torchtitan/components/loss.py @ 6fc499f6); the compiled graph keeps the bf16 logits, not
  an fp32 log-softmax (2 bytes per logit, not 4).

Both counts were measured on a torchtitan-shaped block with ``benchmarks/saved_tensors_check.py``.
"""

from __future__ import annotations

import copy
import os

import pytest
from shared_scenarios import FFN, HEADS, KV, LAYERS, SEQ, VOCAB, H, Q, llama3_8b

import shardmeter
from shardmeter.inputs.build import build_inputs
from shardmeter.inputs.bundles import Training
from shardmeter.model.activations import activation_bytes_per_layer
from shardmeter.model.memory import logits_bytes_per_element
from shardmeter.validate.run import bundled_validation_dir

# Saved per token by eager op SAC: layer input 2h, wq 2q, wv 2kv, w1 2 ffn, w2 2h, SDPA out 2q and
# its fp32 log-sum-exp 4 per head. Compiled: the same less w2's output (read by no backward op).
EAGER_OP = 2 * H + 2 * Q + 2 * KV + 2 * FFN + 2 * H + 2 * Q + 4 * HEADS
COMPILED_OP = 2 * H + 2 * Q + 2 * KV + 2 * FFN + 2 * Q + 4 * HEADS

TORCHAO = os.path.join(bundled_validation_dir(), "torchao-float8")
RUNS = sorted(f for f in os.listdir(TORCHAO) if f.endswith(".toml"))

LLAMA3_8B = llama3_8b(framework="torchtitan")


def _per_layer(recompute, compiled, ffn=FFN, swiglu=True, tp=1, sp=False):
    return activation_bytes_per_layer(
        SEQ,
        1,
        H,
        HEADS,
        Q,
        KV,
        ffn,
        swiglu,
        tp,
        sp,
        recompute,
        False,
        1,
        s_kv=SEQ,
        dropout=False,
        compiled=compiled,
    )


def test_compiled_op_sac_keeps_what_the_backward_reads():
    assert (EAGER_OP, COMPILED_OP) == (63_616, 55_424)
    assert _per_layer(3, False)[0] == SEQ * EAGER_OP
    assert _per_layer(3, True)[0] == SEQ * COMPILED_OP
    # the full count (the recompute working set's base) is the same
    assert _per_layer(3, True)[1] == _per_layer(3, False)[1]


def test_compile_changes_only_op_recompute():
    for rc in (0, 1, 2):
        assert _per_layer(rc, True) == _per_layer(rc, False)
    # GELU: c_proj is recomputed anyway, nothing of w2's kind is saved
    assert _per_layer(3, True, ffn=4 * H, swiglu=False) == _per_layer(3, False, ffn=4 * H, swiglu=False)
    # under TP + SP w2's full-width partial sum (2h) goes, the reduce-scatter outputs stay
    t = 4
    eager, _ = _per_layer(3, False, tp=t, sp=True)
    compiled, _ = _per_layer(3, True, tp=t, sp=True)
    assert eager - compiled == SEQ * 2 * H


def test_logits_bytes_follow_the_compiled_loss():
    base = dict(global_batch=8, micro_batch=1, recompute=3, materialized=0, weight_bytes=2, fp8=0)
    assert logits_bytes_per_element(Training(**base, compiled_loss=1.0)) == 2.0
    assert logits_bytes_per_element(Training(**base, compiled_loss=0.0)) == 4.0
    assert logits_bytes_per_element(Training(**base)) == 4.0  # default: an fp32 loss


def _compiled_loss(sc) -> float:
    est = shardmeter.Estimator()
    inp, _ = build_inputs(est.resolve(est.load(sc)), scalar=True)
    return float(inp.training.compiled_loss)


@pytest.mark.parametrize(
    "framework, compile_, compiled",
    [
        (None, True, 0.0),  # no stack named: a generic fp32 loss
        ("torchtitan", True, 1.0),
        ("torchtitan", False, 0.0),
        (None, False, 0.0),
        ("megatron-core", True, 0.0),  # fused TE kernels, vocab-parallel fp32 cross-entropy
        ("megatron-lm", True, 0.0),
        ("llm-foundry", True, 0.0),  # not checked: the earlier fp32 count kept
        ("fms-fsdp", True, 0.0),  # compiles the model, not the loss
    ],
)
def test_which_stacks_compile_the_loss(framework, compile_, compiled):
    sc = copy.deepcopy(LLAMA3_8B)
    sc["training"]["compile"] = compile_
    sc["training"].pop("framework")
    if framework:
        sc["training"]["framework"] = framework
    assert _compiled_loss(sc) == compiled


def test_llama3_8b_compiled_memory_by_hand():
    sc = copy.deepcopy(LLAMA3_8B)
    compiled = shardmeter.estimate(sc)
    sc["training"]["compile"] = False
    eager = shardmeter.estimate(sc)
    # 32 layers each keep w2's 2h less; the layer recomputing in backward rebuilds what it did
    # not keep (full - stored: 2h more); the loss keeps bf16 logits, 2 bytes less per logit.
    by_hand = (LAYERS - 1) * SEQ * 2 * H + SEQ * VOCAB * 2
    assert by_hand == pytest.approx(4.18e9, rel=1e-3)
    got = (eager.memory_breakdown_gb["activations"] - compiled.memory_breakdown_gb["activations"]) * 1e9
    assert got == pytest.approx(by_hand, rel=1e-9)
    for part in ("weights", "gradients", "optimizer", "other"):
        assert eager.memory_breakdown_gb[part] == pytest.approx(compiled.memory_breakdown_gb[part], rel=1e-12)


@pytest.mark.parametrize("name", RUNS)
def test_torchao_runs_fit_their_reserved_peak(name):
    path = os.path.join(TORCHAO, name)
    sc = shardmeter.load_scenario(path)
    measured = sc.measured["memory_reserved_gb"]
    rep = shardmeter.estimate(path)
    # torch's max_memory_reserved leaves out the CUDA context and NCCL's buffers
    assert rep.memory_per_gpu_gb - rep.memory_outside_allocator_gb <= measured, name
    # eager counts (w2 kept, fp32 logits) are what the model said before; compiled is lower
    eager = shardmeter.estimate(path, overrides=["training.compile=false"])
    assert rep.memory_per_gpu_gb < eager.memory_per_gpu_gb
    if "b200" in name:  # what makes the B200 bounds hold: the eager count is over them
        assert eager.memory_per_gpu_gb - eager.memory_outside_allocator_gb > measured
