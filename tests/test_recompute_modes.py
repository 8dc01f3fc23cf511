"""Recompute by operator ("op"), full recompute of k layers (``recompute_layers``) and activation
offload (``offload_layers``), checked against counts made by hand from the frameworks' code.

* op: torchtitan ``SelectiveAC`` (torchtitan/distributed/activation_checkpoint.py @ b5bcd76c)
  saves the outputs of every other matrix multiply in forward order (wq, wv, w1, w2 of wq, wk,
  wv, wo, w1, w3, w2), of SDPA (output and fp32 log-sum-exp) and of the reduce-scatters, and
  the checkpoint keeps the layer input; it recomputes wk, wo and w3.
* recompute_layers: Megatron-LM ``--recompute-method block`` (megatron/core/recompute.py
  @ d98e8a64) checkpoints the first k layers of each chunk.
* offload: Transformer Engine's ``DefaultOffloadSynchronizer``
  (transformer_engine/pytorch/cpu_offload.py @ d0067d0d) keeps at most L - k layers'
  activations on the GPU.
"""

from __future__ import annotations

import copy

import pytest
from shared_scenarios import FFN, HEADS, KV, LAYERS, SEQ, VOCAB, H, Q, llama3_8b

import shardmeter
from shardmeter.model.activations import activation_bytes_per_layer
from shardmeter.model.formulas import model_flops_per_token, offload_exposed_s

# Llama 3 8B as torchtitan builds it (shared_scenarios.LLAMA3_8B), AdamW written out
LLAMA3_8B = llama3_8b(optimizer="adamw")


# Bytes per token and layer that op recompute keeps, by hand (bf16, fp32 log-sum-exp):
# layer input 2h + wq 2q + wv 2kv + SDPA output 2q + LSE 4 heads + w1 2 ffn + w2 2h.
OP_BYTES_PER_TOKEN = 2 * H + 2 * Q + 2 * KV + 2 * Q + 4 * HEADS + 2 * FFN + 2 * H
# What the fused-attention count keeps without checkpointing (Korthikanti et al. 2022 without
# the score terms or dropout): norm inputs 4h, QKV and MLP inputs 2h + 2h, Q and K 4q + 4kv
# (2 each for Q, K, V, out-proj input), SwiGLU 6 ffn.
STORED_BYTES_PER_TOKEN = 8 * H + 4 * Q + 4 * KV + 6 * FFN


def _scenario(**training):
    sc = copy.deepcopy(LLAMA3_8B)
    sc["training"].update(training)
    return sc


def _estimate(**training):
    return shardmeter.estimate(_scenario(**training))


def _per_layer(recompute, tp=1, sp=False, ffn=FFN, swiglu=True):
    return activation_bytes_per_layer(
        SEQ, 1, H, HEADS, Q, KV, ffn, swiglu, tp, sp, recompute, False, 1, s_kv=SEQ, dropout=False
    )


def test_op_bytes_per_layer_are_the_saved_tensor_list():
    assert OP_BYTES_PER_TOKEN == 63_616
    stored, full = _per_layer(3)
    assert stored == SEQ * OP_BYTES_PER_TOKEN
    assert full == SEQ * STORED_BYTES_PER_TOKEN == SEQ * 139_264


def test_op_bytes_per_layer_under_tensor_and_sequence_parallelism():
    # t = 4 with SP: the layer input and the two reduce-scatter outputs are h / t wide; the
    # head-sharded wq, wv, SDPA and w1 outputs are / t; w2's output is its full-width partial sum.
    t = 4
    by_hand = 2 * H / t + (2 * Q + 2 * KV + 2 * Q + 4 * HEADS + 2 * FFN) / t + 2 * H + 2 * 2 * H / t
    assert by_hand == 26_144
    stored, _ = _per_layer(3, tp=t, sp=True)
    assert stored == SEQ * by_hand


def test_op_without_swiglu_saves_c_fc_but_not_c_proj():
    # wq, wk, wv, wo, c_fc, c_proj: the 6th (c_proj) is recomputed, so no 2h of its output.
    stored, _ = _per_layer(3, ffn=4 * H, swiglu=False)
    assert stored == SEQ * (2 * H + 2 * Q + 2 * KV + 2 * Q + 4 * HEADS + 2 * 4 * H)


def test_op_recompute_flops_are_wk_wo_and_w3():
    rep = {r: _estimate(recompute=r) for r in ("none", "op")}
    mf = model_flops_per_token(LAYERS, H, Q, KV, FFN, True, VOCAB, SEQ)
    recomputed = LAYERS * (2 * H * KV + 2 * Q * H + 2 * H * FFN)  # wk, wo, w3 forward per token
    assert rep["op"].hfu / rep["op"].mfu == pytest.approx((mf + recomputed) / mf, rel=1e-12)
    assert rep["none"].hfu / rep["none"].mfu == pytest.approx(1.0, rel=1e-12)


def test_op_runs_slower_than_none_and_faster_than_full():
    step = {r: _estimate(recompute=r).step_time_s for r in ("none", "op", "full")}
    assert step["none"] < step["op"] < step["full"]


def test_llama3_8b_on_8_h100_fits_with_op():
    rep = {r: _estimate(recompute=r) for r in ("selective", "op")}
    assert rep["op"].feasible
    assert rep["op"].memory_per_gpu_gb < 80.0  # the H100's memory, under the 88 GB a run reserved
    # Activations: 32 layers stored, plus one layer's recomputed working set (full - stored) in
    # backward; selective with a fused kernel stores the full count and recomputes nothing.
    # The scenario compiles (compile = true): the partitioner does not keep w2's output, which
    # no backward op reads (tests/test_compiled_memory.py), so op keeps 2h less per token.
    act = {r: rep[r].memory_breakdown_gb["activations"] for r in rep}
    delta = (LAYERS - 1) * SEQ * (STORED_BYTES_PER_TOKEN - (OP_BYTES_PER_TOKEN - 2 * H)) / 1e9
    assert act["selective"] - act["op"] == pytest.approx(delta, rel=1e-9)
    eager = {r: _estimate(recompute=r, compile=False).memory_breakdown_gb["activations"] for r in rep}
    delta = (LAYERS - 1) * SEQ * (STORED_BYTES_PER_TOKEN - OP_BYTES_PER_TOKEN) / 1e9
    assert eager["selective"] - eager["op"] == pytest.approx(delta, rel=1e-9)


@pytest.mark.parametrize("k", [1, 8, 24])
def test_recompute_layers_memory_and_flops_are_k_of_the_stage(k):
    full = _estimate(recompute="full")
    part = _estimate(recompute="full", recompute_layers=k)
    none = _estimate(recompute="none")
    # Memory: the L - k layers not recomputed keep their full activations instead of the input.
    kept = (LAYERS - k) * SEQ * (STORED_BYTES_PER_TOKEN - 2 * H) / 1e9
    got = part.memory_breakdown_gb["activations"] - full.memory_breakdown_gb["activations"]
    assert got == pytest.approx(kept, rel=1e-9)
    # FLOPs (hardware over model FLOPs, within one report) and time: k / L of full recompute's.
    assert part.hfu / part.mfu - 1.0 == pytest.approx(k / LAYERS * (full.hfu / full.mfu - 1.0), rel=1e-9)
    for term in ("compute", "memory_ops"):
        extra = part.breakdown_s[term] - none.breakdown_s[term]
        assert extra == pytest.approx(
            k / LAYERS * (full.breakdown_s[term] - none.breakdown_s[term]), rel=1e-9
        )


@pytest.mark.parametrize("k", [LAYERS, LAYERS + 9])
def test_recompute_layers_zero_means_all(k):
    assert _estimate(recompute="full", recompute_layers=k).to_dict() == _estimate(recompute="full").to_dict()


def test_recompute_layers_per_chunk_with_virtual_stages():
    # pp 2 x 2 chunks of 8 layers: k = 4 recomputes 4 of each chunk, half of the stage.
    sc = {"parallelism": {"pp": 2, "virtual_stages": 2, "schedule": "interleaved", "sharding": "fsdp"}}

    def est(**training):
        s = _scenario(**training)
        s["parallelism"] = sc["parallelism"]
        s["training"]["global_batch"] = 16
        # room for every mode (without recompute the stage needs 87 GB): the test is of FLOPs
        s["island"][0]["gpu"] = {"name": "h100-sxm", "memory_gb": 1000.0}
        return shardmeter.estimate(s)

    none, full, part = est(recompute="none"), est(recompute="full"), est(recompute="full", recompute_layers=4)
    assert none.feasible and full.feasible and part.feasible
    assert part.hfu / part.mfu - 1.0 == pytest.approx(0.5 * (full.hfu / full.mfu - 1.0), rel=1e-9)
    assert none.hfu == pytest.approx(none.mfu, rel=1e-12)


def test_offload_exposed_by_hand():
    # L = 8 layers, one layer's copy 1 s, its compute 0.5 s: the n-th copy ends at c + n tau and is
    # due at (L - k - 1 + n) c. k = 1: 1.5 s against 3.5 s, hidden. k = 4: the 4th ends at 4.5 s,
    # due at 3.5 s: 1 s exposed. k = 7 (all but the last): 7.5 s against 3.5 s.
    assert offload_exposed_s(0.0, 8.0, 1.0, 0.5) == 0.0
    assert offload_exposed_s(1.0, 8.0, 1.0, 0.5) == 0.0
    assert offload_exposed_s(4.0, 8.0, 1.0, 0.5) == pytest.approx(1.0)
    assert offload_exposed_s(7.0, 8.0, 1.0, 0.5) == pytest.approx(4.0)
    assert offload_exposed_s(20.0, 8.0, 1.0, 0.5) == pytest.approx(4.0)  # clipped to L - 1
    # a copy longer than the L - k - 1 layers it runs beside shows even for one layer
    assert offload_exposed_s(1.0, 8.0, 5.0, 0.5) == pytest.approx(5.0 - 6 * 0.5)


def test_offload_moves_k_layers_off_the_gpu():
    base = _estimate(recompute="none")
    k = 8
    off = _estimate(recompute="none", offload_layers=k)
    drop = k * SEQ * STORED_BYTES_PER_TOKEN / 1e9  # k layers' stored activations
    got = base.memory_breakdown_gb["activations"] - off.memory_breakdown_gb["activations"]
    assert got == pytest.approx(drop, rel=1e-9)


def test_offload_hidden_on_a_fast_link_and_exposed_on_a_slow_one():
    def est(link_gb_s, k):
        sc = _scenario(recompute="none", offload_layers=k)
        sc["island"][0]["gpu"] = {"name": "h100-sxm", "host_link_gb_s": link_gb_s}
        return shardmeter.estimate(sc)

    base = est(450.0, 0)
    fast = est(450.0, 4)  # NVLink-C2C: 4 layers of 1.1 GB each under 31 layers of compute
    assert fast.breakdown_s.get("offload", 0.0) == 0.0
    assert fast.step_time_s == pytest.approx(base.step_time_s, rel=1e-12)
    # 0.01 GB/s: 1.14 GB per layer takes 114 s, the compute windows are negligible beside it, so
    # each direction stalls for about k copies (k tau - (L - 2) c), once per micro-batch.
    slow = est(0.01, 4)
    tau = SEQ * STORED_BYTES_PER_TOKEN / 0.01e9
    assert slow.breakdown_s["offload"] == pytest.approx(2 * 4 * tau, rel=0.01)
    assert slow.breakdown_s["offload"] < 2 * 4 * tau
    assert slow.step_time_s - est(0.01, 0).step_time_s == pytest.approx(slow.breakdown_s["offload"], rel=1e-9)
