"""Megatron-Core's selective recompute by module (``training.recompute_modules``,
shardmeter/model/selective.py), against Megatron-Core's own rules (transformer_config.py and
transformer_layer.py @d98e8a64) and Korthikanti et al. 2022's per-layer byte counts:

* ``recompute_modules`` defaults to ``["core_attn"]``;
* ``"mlp"`` recomputes a dense MLP only: ``if "mlp" in recompute_modules: if not self.is_moe_layer``;
* ``"moe_act"`` frees the experts' activation output (``2 ffn`` bytes a routed token of the
  SwiGLU MLP's ``6 ffn``), ``"moe"`` the whole MoE layer's inside (``6 ffn`` per active expert);
* a module left out is not recomputed: without ``core_attn`` no attention core reruns.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

import shardmeter
from shardmeter.importers.cli import import_config

ROOT = Path(__file__).resolve().parents[1]
MLM = ROOT / "tests/fixtures/megatron/2026-08-22_d98e8a6/examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh"
GB = 1e9
SEQ, MBS = 4096, 1

DENSE = {
    "model": {"preset": "llama3-8b", "seq_len": SEQ},
    "training": {"global_batch": 64, "micro_batch": MBS, "recompute": "selective"},
    "island": [{"gpu": {"name": "h100-sxm", "memory_gb": 1000.0}, "nodes": 1}],
    "parallelism": {"sharding": "zero1"},
}
#: Mixtral 8x7B's shapes (every layer MoE), top-2
MOE = {
    "model": {
        "layers": 32,
        "hidden": 4096,
        "heads": 32,
        "kv_heads": 8,
        "ffn_hidden": 14336,
        "vocab": 32000,
        "experts": 8,
        "experts_per_token": 2,
        "ffn": "swiglu",
        "seq_len": SEQ,
    },
    "training": {"global_batch": 64, "micro_batch": MBS, "recompute": "selective"},
    "island": [{"gpu": {"name": "h100-sxm", "memory_gb": 1000.0}, "nodes": 1}],
    "parallelism": {"ep": 8, "sharding": "zero1"},
}


def _est(base: dict, modules: list[str] | None, **training):
    s = copy.deepcopy(base)
    if modules is not None:
        s["training"]["recompute_modules"] = modules
    s["training"].update(training)
    return shardmeter.estimate(s)


def _act(r) -> float:
    return r.memory_breakdown_gb["activations"] * GB


def test_the_default_is_the_attention_core():
    for base in (DENSE, MOE):
        a, b = _est(base, None), _est(base, ["core_attn"])
        assert a.step_time_s == b.step_time_s and a.memory_per_gpu_gb == b.memory_per_gpu_gb


def test_mlp_frees_a_dense_mlps_activations_and_reruns_its_gemms():
    base, mlp = _est(DENSE, None), _est(DENSE, ["core_attn", "mlp"])
    # Llama 3 8B: 32 layers, ffn 14336, SwiGLU: 6 ffn bytes a token, tp 1
    assert _act(base) - _act(mlp) == pytest.approx(32 * SEQ * MBS * 6 * 14336, rel=1e-9)
    assert mlp.step_time_s > base.step_time_s


def test_mlp_leaves_a_moe_layer_alone():
    a, b = _est(MOE, None), _est(MOE, ["core_attn", "mlp"])
    assert a.memory_per_gpu_gb == b.memory_per_gpu_gb and a.step_time_s == b.step_time_s


def test_moe_act_and_moe_free_the_experts_activations():
    base = _act(_est(MOE, None))
    per_expert_token = SEQ * MBS * 14336 * 2  # top-2 routed copies, bytes per ffn element
    act = _act(_est(MOE, ["core_attn", "moe_act"]))
    assert base - act == pytest.approx(32 * per_expert_token * 2, rel=1e-9)  # the 2 ffn output
    whole = _act(_est(MOE, ["core_attn", "moe"]))
    assert base - whole == pytest.approx(32 * per_expert_token * 6, rel=1e-9)  # all 6 ffn


def test_a_module_left_out_is_not_recomputed():
    """``["moe_act"]`` alone: no attention core reruns, so the compute is recompute = "none"'s
    (moe_act's own elementwise rerun is not timed); memory below the default's."""
    none = _est(MOE, None, recompute="none")
    act_only = _est(MOE, ["moe_act"])
    assert act_only.breakdown_s["compute"] == pytest.approx(none.breakdown_s["compute"], rel=1e-12)
    assert _act(act_only) < _act(_est(MOE, None))


@pytest.mark.parametrize(
    "training, words",
    [
        (
            {"recompute": "full", "recompute_modules": ["mlp"]},
            'training.recompute_modules: only with recompute = "selective"',
        ),
        ({"recompute_modules": ["mlp", "attn"]}, "training.recompute_modules: expected distinct names among"),
    ],
)
def test_bad_modules_are_one_line_errors(tmp_path, training, words):
    import json

    t = {**DENSE["training"], **training}
    f = tmp_path / "s.toml"
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in t.items())
    f.write_text(
        f'[model]\npreset = "llama3-8b"\n[training]\n{lines}\n[[island]]\ngpu = "h100-sxm"\n',
        encoding="utf-8",
    )
    p = subprocess.run(
        [sys.executable, "-m", "shardmeter", "estimate", str(f)], capture_output=True, text=True
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_megatron_scripts_recompute_modules_are_read():
    text = import_config("megatron", str(MLM), gpu="h100-sxm", gpus=256)
    assert 'recompute_modules = ["mlp", "moe", "mla_up_proj", "layernorm"]' in text
