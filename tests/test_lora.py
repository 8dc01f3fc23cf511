"""LoRA fine-tuning (``training.peft = "lora"``, shardmeter/model/lora.py), each mechanism
against a first-principles count or the stack's code:

* Hu et al. 2021: an adapter pair ``A: r x in``, ``B: out x r`` per target linear, ``r (in + out)``
  parameters; Megatron-Bridge's ``LoRA`` targets ``linear_qkv``, ``linear_proj``,
  ``linear_fc1``, ``linear_fc2`` with ``dim = 32`` by default (megatron/bridge/peft/lora.py
  @067f987) and ``freeze_model`` freezes every base parameter.
* Megatron-Core's DDP and distributed optimizer keep gradients, fp32 master copies and moments
  for parameters that require gradients only: 4 + 12 bytes per adapter parameter, none for a
  frozen weight.
* Megatron-Bridge's FLOP count for LoRA (training/utils/flop_utils.py @067f987):
  ``model_flops_frozen * 2/3 + model_flops_unfrozen`` with ``model_flops_frozen = T L h^2 (12 +
  12 g/n + 18 ffn/h + 6 V/(L h))`` and ``model_flops_unfrozen = L h^2 (12 s^2 / h)``.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

import shardmeter
from shardmeter.importers.cli import import_config

ROOT = Path(__file__).resolve().parents[1]
BRIDGE = (
    ROOT
    / "tests/fixtures/megatron-bridge/2026-08-22_067f987/src/megatron/bridge/recipes/llama/h100/llama3.py"
)

# Llama 3 70B (Meta's params.json): h 8192, 64 heads, 8 KV heads of 128, ffn 28672, 80 layers, V 128256
H, Q, KV, FFN, L, V = 8192, 8192, 1024, 28672, 80, 128256
SEQ = 4096

BASE = {
    "model": {"preset": "llama3-70b", "seq_len": SEQ},
    "training": {"global_batch": 16, "micro_batch": 1, "peft": "lora", "lora_rank": 16},
    # a GPU with room for full training too, to compare the two
    "island": [{"gpu": {"name": "h100-sxm", "memory_gb": 1000.0}, "nodes": 2}],
    "parallelism": {"tp": 8},
}


def _est(**training):
    s = copy.deepcopy(BASE)
    s["training"].update(training)
    return shardmeter.estimate(s)


def _full():
    s = copy.deepcopy(BASE)
    del s["training"]["peft"], s["training"]["lora_rank"]
    return shardmeter.estimate(s)


def adapters_per_layer(r: int) -> int:
    """r (in + out) for qkv (h -> q + 2 kv), proj (q -> h), fc1 (h -> 2 ffn, SwiGLU's fused gate) and fc2."""
    return r * ((H + Q + 2 * KV) + (Q + H) + (H + 2 * FFN) + (FFN + H))


def test_gradients_and_optimizer_state_are_the_adapters_only():
    lora = _est()
    a_gpu = adapters_per_layer(16) * L / 8  # TP 8, no pipeline: every layer on each GPU
    # Megatron DDP without the distributed optimizer: gradient buffers in the parameters' bf16
    # (grad_reduce_in_fp32 off), fp32 master + two moments (12 B), of the adapters only,
    # unsharded over the two replicas
    assert lora.memory_breakdown_gb["gradients"] == pytest.approx(a_gpu * 2 / 1e9, rel=1e-9)
    assert lora.memory_breakdown_gb["optimizer"] == pytest.approx(a_gpu * 12 / 1e9, rel=1e-9)
    full = _full()
    # the weights: the frozen model plus the adapters, in bf16
    assert lora.memory_breakdown_gb["weights"] - full.memory_breakdown_gb["weights"] == pytest.approx(
        a_gpu * 2 / 1e9, rel=1e-6
    )
    assert lora.memory_breakdown_gb["activations"] == full.memory_breakdown_gb["activations"]
    assert full.memory_breakdown_gb["optimizer"] > 100 * lora.memory_breakdown_gb["optimizer"]


def test_model_flops_are_megatron_bridges_lora_count():
    lora = _est()
    g_over_n = KV / Q
    frozen = L * H**2 * (12 + 12 * g_over_n + 18 * FFN / H + 6 * V / (L * H))  # per token
    unfrozen = L * H**2 * (12 * SEQ / H)  # the attention scores, per token (s^2 / s)
    assert lora.model_flops_per_token == pytest.approx(frozen * 2 / 3 + unfrozen, rel=1e-9)
    # full training counts the frozen part in full (Narayanan et al. 2021's 3 x forward)
    assert _full().model_flops_per_token == pytest.approx(frozen + unfrozen, rel=1e-9)


def test_the_backward_of_frozen_weights_has_no_weight_gradient():
    lora, full = _est(), _full()
    # compute = forward + backward (+ head): the GEMMs' backward is one forward instead of two
    assert lora.breakdown_s["compute"] < full.breakdown_s["compute"]
    # the adapters' gradient is all the replicas reduce: under a megabyte's worth of time
    assert lora.breakdown_s["dp_comm"] + lora.overlapped_s.get("dp_comm", 0.0) < 0.01 * (
        full.breakdown_s["dp_comm"] + full.overlapped_s.get("dp_comm", 0.0)
    )
    assert lora.step_time_s < full.step_time_s


def test_rank_and_targets_scale_the_adapters():
    r8 = _est(lora_rank=8).memory_breakdown_gb["optimizer"]
    r16 = _est().memory_breakdown_gb["optimizer"]
    assert r16 == pytest.approx(2 * r8, rel=1e-9)
    qkv_only = _est(lora_targets=["linear_qkv"]).memory_breakdown_gb["optimizer"]
    assert qkv_only == pytest.approx(r16 * (H + Q + 2 * KV) * 16 / adapters_per_layer(16), rel=1e-9)


@pytest.mark.parametrize(
    "training, words",
    [
        ({"peft": "none", "lora_rank": 8}, 'training.lora_rank: only with peft = "lora"'),
        ({"lora_targets": ["linear_qkv", "q_proj"]}, "training.lora_targets: expected distinct names"),
        ({"peft": "qlora"}, "training.peft: expected one of 'none', 'lora'"),
    ],
)
def test_bad_lora_keys_are_one_line_errors(tmp_path, training, words):
    lines = [f"{k} = {json.dumps(v)}" for k, v in {**BASE["training"], **training}.items()]
    f = tmp_path / "s.toml"
    f.write_text(
        '[model]\npreset = "llama3-70b"\n[training]\n'
        + "\n".join(lines)
        + '\n[[island]]\ngpu = "h100-sxm"\n',
        encoding="utf-8",
    )
    p = subprocess.run(
        [sys.executable, "-m", "shardmeter", "estimate", str(f)], capture_output=True, text=True
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_megatron_bridge_peft_recipe_imports_as_lora_and_fits(tmp_path):
    text = import_config(
        "megatron", str(BRIDGE), gpu="h100-sxm", gpus=8, config="llama3_70b_peft_8gpu_h100_bf16_config"
    )
    assert 'peft = "lora"' in text and "LoRA's default (32) priced" in text
    f = tmp_path / "peft.toml"
    f.write_text(text, encoding="utf-8")
    r = shardmeter.estimate(str(f))
    assert r.feasible, r.reasons
    # the same recipe priced as full training needs about 3.5x the GPU (weights, fp32 grads, Adam)
    full = shardmeter.estimate(str(f), overrides=["training.peft=none"])
    assert not full.feasible and full.memory_per_gpu_gb > 2 * r.memory_per_gpu_gb
