"""The bundled model presets: each loads, names its source, and counts the parameters its model
card or paper publishes (within 2 %)."""

from __future__ import annotations

import pytest

import shardmeter
from shardmeter.load.scenario import model_presets

# Published totals, each with its source:
PUBLISHED = {
    "llama3.1-8b": 8.03e9,  # meta-llama/Llama-3.1-8B model page (safetensors: 8.03 B)
    "llama3.1-70b": 70.6e9,  # meta-llama/Llama-3.1-70B model page (70.6 B)
    "llama3.1-405b": 406e9,  # meta-llama/Llama-3.1-405B model page (406 B); Llama 3 paper: 405 B
    "llama3.3-70b": 70.6e9,  # meta-llama/Llama-3.3-70B-Instruct model page (70.6 B)
    "mistral-7b": 7.24e9,  # mistralai/Mistral-7B-v0.1 model page (7.24 B)
    "mixtral-8x7b": 46.7e9,  # Jiang et al. 2024 (arXiv 2401.04088): 47 B (46.7 B on the model page)
    "mixtral-8x22b": 141e9,  # Mistral AI, "Cheaper, Better, Faster, Stronger" (2024): 141 B total
    "qwen2.5-7b": 7.61e9,  # Qwen/Qwen2.5-7B model card, "Number of Parameters"
    "qwen2.5-14b": 14.7e9,  # Qwen/Qwen2.5-14B model card
    "qwen2.5-32b": 32.5e9,  # Qwen/Qwen2.5-32B model card
    "qwen2.5-72b": 72.7e9,  # Qwen/Qwen2.5-72B model card
    "gemma2-9b": 9.241e9,  # Gemma 2 (arXiv 2408.00118), Table 1: 8,324 M + 917 M embedding
    "gemma2-27b": 27.227e9,  # Gemma 2, Table 1: 26,047 M + 1,180 M embedding
    "deepseek-v3": 671e9,  # DeepSeek-V3 (arXiv 2412.19437), abstract: 671 B total
}


def _params(name: str) -> float:
    sc = {
        "model": {"preset": name},
        "training": {"global_batch": 8},
        "island": [{"gpu": "h100-sxm", "nodes": 1}],
    }
    return shardmeter.estimate(sc).params


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_parameter_count_is_the_published_one(name):
    assert _params(name) == pytest.approx(PUBLISHED[name], rel=0.02)


@pytest.mark.parametrize("name", sorted(model_presets()))
def test_every_preset_loads_and_names_its_source(name):
    preset = model_presets()[name]
    assert isinstance(preset.get("source"), str) and preset["source"]
    sc = shardmeter.load_scenario(
        {
            "model": {"preset": name},
            "training": {"global_batch": 8},
            "island": [{"gpu": "h100-sxm", "nodes": 1}],
        }
    )
    assert sc.model.preset == name and sc.model.layers == preset["layers"]


def test_deepseek_v3_preset_activates_about_37b_parameters():
    from shardmeter.model import formulas as F

    m = shardmeter.load_scenario(
        {
            "model": {"preset": "deepseek-v3"},
            "training": {"global_batch": 8},
            "island": [{"gpu": "h100-sxm", "nodes": 1}],
        }
    ).model
    q, v = m.heads * m.d_head, m.heads * m.d_v_head
    active = F.active_params(
        m.layers, m.hidden, q, q, m.d_ffn, True, m.vocab, False, m.experts, m.experts_per_token,
        moe_ffn=m.d_moe_ffn, shared_experts=m.shared_experts, dense_layers=m.dense_layers, v_dim=v, o_dim=v,
        q_rank=m.q_lora_rank, kv_rank=m.kv_lora_rank,
    )  # fmt: skip
    assert active == pytest.approx(37e9, rel=0.03)  # arXiv 2412.19437, abstract: 37 B activated per token
