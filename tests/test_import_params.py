"""The parameter counts of the models the importers build, against each model's published figure
(cited beside it): torchtitan's flavour tables, Megatron-LM's example scripts, NeMo 2 and
Megatron-Bridge recipes. Within 1 % unless the comment says why not."""

from __future__ import annotations

import pytest

import shardmeter
from shardmeter.importers.torchtitan_models import model_keys

#: (family, flavour) -> (published total, tolerance): sources in the comments.
TORCHTITAN = {
    ("llama3", "8B"): (8.03e9, 0.01),  # meta-llama/Meta-Llama-3-8B model page, safetensors
    ("llama3", "70B"): (70.6e9, 0.01),  # meta-llama/Llama-3.1-70B model page, safetensors
    ("llama3", "405B"): (405e9, 0.01),  # The Llama 3 Herd of Models, arXiv 2407.21783, Table 3
    ("qwen3", "8B"): (8.2e9, 0.01),  # Qwen/Qwen3-8B model card, "Number of Parameters: 8.2B"
    ("qwen3", "14B"): (14.8e9, 0.01),  # Qwen/Qwen3-14B model card: 14.8B
    ("qwen3", "32B"): (32.8e9, 0.01),  # Qwen/Qwen3-32B model card: 32.8B
    ("qwen3", "30B-A3B"): (30.5e9, 0.01),  # Qwen/Qwen3-30B-A3B model card: 30.5B in total
    ("qwen3", "235B-A22B"): (235e9, 0.01),  # Qwen/Qwen3-235B-A22B model card: 235B in total
    ("deepseek_v3", "671B"): (671e9, 0.01),  # DeepSeek-V3, arXiv 2412.19437, abstract (no MTP)
    ("deepseek_v3", "16B"): (15.7e9, 0.01),  # DeepSeek-V2-Lite: 15.7B (DeepSeek-V2, arXiv 2405.04434, 5.1)
    ("gpt_oss", "20b"): (20.91e9, 0.01),  # gpt-oss model card (arXiv 2508.10925), Table 1: 20.91B
    ("gpt_oss", "120b"): (116.83e9, 0.01),  # gpt-oss model card, Table 1: 116.83B
    ("llama4", "17bx128e"): (400e9, 0.01),  # Meta's Llama 4 model card: Maverick, 400B in all
    # Scout: 109B in Meta's model card counts the vision encoder, which the text model leaves out
    ("llama4", "17bx16e"): (109e9, 0.015),
}


def _params(model: dict, seq_len: int = 4096) -> float:
    sc = {"model": {**model, "seq_len": seq_len}, "training": {"global_batch": 1024},
          "island": [{"gpu": "h100-sxm", "nodes": 128}]}  # fmt: skip
    return shardmeter.estimate(sc).params


@pytest.mark.parametrize("flavour", sorted(TORCHTITAN), ids=lambda f: f"{f[0]}-{f[1]}")
def test_torchtitan_flavours_have_their_published_parameter_counts(flavour):
    total, rel = TORCHTITAN[flavour]
    got = model_keys(*flavour)
    assert got is not None
    assert _params(got[0]) == pytest.approx(total, rel=rel)


def test_the_llama4_scout_gap_is_the_vision_encoder_only():
    got = model_keys("llama4", "17bx16e")
    assert got is not None and _params(got[0]) < 109e9  # the text model is the smaller
