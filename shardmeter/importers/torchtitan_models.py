"""torchtitan's model flavours as data: each family's flavour table, copied from torchtitan
(github.com/pytorch/torchtitan) in the family's own argument names, and how those arguments
become ``[model]`` keys.

Sources (the tables below name each one): at ``238fa99`` (2026-02-23, the last commit with TOML
job files; also the flavours of ``9810191``, the first ``config_registry.py``) the
``*_args`` / ``*_configs`` dicts of ``torchtitan/models/<family>/__init__.py`` with the
dataclass defaults of ``model/args.py`` and ``torchtitan/models/moe/moe.py`` (``MoEArgs``:
``num_experts = 8``, ``num_shared_experts = 1``, ``top_k = 1``); at ``b5bcd76`` (2026-08-21) the
flavour functions of the same ``__init__.py`` files (``_8b``, ``_30b_a3b``, ...). Older
flavours: ``9dec370`` (2024-12-26) and ``3e75bae`` (2025-03-31) ``torchtitan/models/llama/__init__.py``
(``debugmodel`` had 8 layers), ``820504e`` (2025-06-13) ``torchtitan/models/llama3`` (6).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FAMILIES", "model_keys", "Flavours", "ffn_hidden", "known_flavours"]

#: A family's flavour table: flavour -> its arguments, in torchtitan's own names.
Flavours = dict[str, dict[str, Any]]

#: Flavour-name suffixes that change only the attention kernel or mask, not the shape.
ATTENTION_SUFFIXES = ("_flex_attn", "_varlen_attn", "_flex_flash", "_flex", "_varlen", "_irope")


def ffn_hidden(dim: int, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    """torchtitan's SwiGLU width (``FeedForward`` at 238fa99, ``compute_ffn_hidden_dim`` at
    b5bcd76, torchtitan/models/common/feed_forward.py): ``int(2 * 4 dim / 3)``, times
    ``ffn_dim_multiplier`` (truncated), rounded up to a multiple of ``multiple_of``."""
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


# -- Llama 3 ---------------------------------------------------------------------------------------
#: ``TransformerModelArgs`` defaults (torchtitan/models/llama3/model/args.py @ 238fa99).
_LLAMA3_DEFAULTS = {"n_kv_heads": None, "vocab_size": 128256, "multiple_of": 256, "ffn_dim_multiplier": None}
#: ``llama3_args`` (torchtitan/models/llama3/__init__.py @ 238fa99) and ``llama3_configs``
#: (@ b5bcd76, where ``_1b`` and ``_3b`` pass ``enable_weight_tying=True``).
LLAMA3: Flavours = {
    "debugmodel": {"dim": 256, "n_layers": 6, "n_heads": 16, "vocab_size": 2048},
    "1B": {
        "dim": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8, "ffn_dim_multiplier": 1.5,
        "multiple_of": 1024, "tied": True,
    },
    "3B": {
        "dim": 3072, "n_layers": 28, "n_heads": 24, "n_kv_heads": 8, "ffn_dim_multiplier": 1.0,
        "multiple_of": 1024, "tied": True,
    },
    "8B": {"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "ffn_dim_multiplier": 1.3, "multiple_of": 1024},
    "70B": {"dim": 8192, "n_layers": 80, "n_heads": 64, "n_kv_heads": 8, "ffn_dim_multiplier": 1.3, "multiple_of": 4096},
    "405B": {
        "dim": 16384, "n_layers": 126, "n_heads": 128, "n_kv_heads": 8, "ffn_dim_multiplier": 1.2,
        "multiple_of": 4096,
    },
}  # fmt: skip
#: ``debugmodel`` of torchtitan/models/llama/__init__.py @ 9dec370 and @ 3e75bae: 8 layers, the
#: vocabulary from the tokenizer (``tests/assets/test_tiktoken.model``).
LLAMA3_DEBUG_2024: dict[str, Any] = {"dim": 256, "n_layers": 8, "n_heads": 16, "vocab_size": 2048}


def _llama3(a: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    a = {**_LLAMA3_DEFAULTS, **a}
    return {
        "layers": a["n_layers"],
        "hidden": a["dim"],
        "heads": a["n_heads"],
        "kv_heads": a["n_kv_heads"] or a["n_heads"],
        "ffn_hidden": ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"]),
        "ffn": "swiglu",
        "vocab": a["vocab_size"],
        "tied_embeddings": bool(a.get("tied", False)),
    }


# -- Llama 4 ---------------------------------------------------------------------------------------
#: ``TransformerModelArgs`` defaults (torchtitan/models/llama4/model/args.py @ 238fa99) with
#: ``MoEArgs``' (``num_experts = 8``, ``num_shared_experts = 1``, ``top_k = 1``).
_LLAMA4_DEFAULTS = {
    "n_kv_heads": None, "vocab_size": 202048, "multiple_of": 256, "ffn_dim_multiplier": None,
    "num_experts": 8, "num_shared_experts": 1, "top_k": 1, "interleave_moe_layer_step": 2,
    "auto_scale_hidden_dim": True,
}  # fmt: skip
#: ``llama4_args`` (torchtitan/models/llama4/__init__.py @ 238fa99; not in b5bcd76).
LLAMA4: Flavours = {
    "debugmodel": {"dim": 256, "n_layers": 6, "n_heads": 16, "vocab_size": 2048},
    "17bx16e": {
        "dim": 5120, "n_layers": 48, "n_heads": 40, "n_kv_heads": 8, "ffn_dim_multiplier": 1.2,
        "multiple_of": 2048, "num_experts": 16, "interleave_moe_layer_step": 1,
    },
    "17bx128e": {
        "dim": 5120, "n_layers": 48, "n_heads": 40, "n_kv_heads": 8, "ffn_dim_multiplier": 1.2,
        "multiple_of": 2048, "num_experts": 128,
    },
}  # fmt: skip


def _llama4(a: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Llama 4's ``TransformerBlock`` (torchtitan/models/llama4/model/model.py @ 238fa99):
    layer ``i`` is MoE where ``(i + 1) % interleave_moe_layer_step == 0``; the MoE width is
    the dense one before rounding over ``top_k + num_shared_experts`` (``auto_scale_hidden_dim``),
    rounded up to ``multiple_of``; the shared expert has the same width."""
    a = {**_LLAMA4_DEFAULTS, **a}
    dense = ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"])
    hidden = int(2 * 4 * a["dim"] / 3)
    if a["ffn_dim_multiplier"] is not None:
        hidden = int(a["ffn_dim_multiplier"] * hidden)
    if a["auto_scale_hidden_dim"]:
        hidden = int(hidden / (a["top_k"] + a["num_shared_experts"]))
    moe = hidden + (-hidden % a["multiple_of"])
    step = a["interleave_moe_layer_step"]
    n_moe = sum(1 for i in range(a["n_layers"]) if (i + 1) % step == 0)
    out = {
        "layers": a["n_layers"],
        "hidden": a["dim"],
        "heads": a["n_heads"],
        "kv_heads": a["n_kv_heads"] or a["n_heads"],
        "ffn_hidden": dense,
        "ffn": "swiglu",
        "vocab": a["vocab_size"],
        "tied_embeddings": False,
        "experts": a["num_experts"],
        "experts_per_token": a["top_k"],
        "moe_ffn_hidden": moe,
        "shared_experts": a["num_shared_experts"],
    }
    if n_moe < a["n_layers"]:
        out["dense_layers"] = a["n_layers"] - n_moe
        notes.append(
            f"torchtitan llama4: every {step}th layer is MoE (interleave_moe_layer_step); the "
            f"{out['dense_layers']} dense layers are counted as if they led"
        )
    return out


# -- Qwen 3 ----------------------------------------------------------------------------------------
#: ``qwen3_args`` (torchtitan/models/qwen3/__init__.py @ 238fa99; the same shapes in the flavour
#: functions @ b5bcd76). Every flavour: ``qk_norm``, RMSNorm; MoE flavours route every layer.
QWEN3: Flavours = {
    "debugmodel": {"vocab_size": 2048, "head_dim": 128, "dim": 256, "n_layers": 8, "n_heads": 16, "n_kv_heads": 8, "hidden_dim": 3072, "tied": True},
    "debugmodel_non_fused_qkv": {"vocab_size": 2048, "head_dim": 128, "dim": 256, "n_layers": 8, "n_heads": 16, "n_kv_heads": 8, "hidden_dim": 3072, "tied": True},
    "0.6B": {"vocab_size": 151936, "head_dim": 128, "dim": 1024, "n_layers": 28, "n_heads": 16, "n_kv_heads": 8, "hidden_dim": 3072, "tied": True},
    "1.7B": {"vocab_size": 151936, "head_dim": 128, "dim": 2048, "n_layers": 28, "n_heads": 16, "n_kv_heads": 8, "hidden_dim": 6144, "tied": True},
    "4B": {"vocab_size": 151936, "head_dim": 128, "dim": 2560, "n_layers": 36, "n_heads": 32, "n_kv_heads": 8, "hidden_dim": 9728, "tied": True},
    "8B": {"vocab_size": 151936, "head_dim": 128, "dim": 4096, "n_layers": 36, "n_heads": 32, "n_kv_heads": 8, "hidden_dim": 12288},
    "14B": {"vocab_size": 151936, "head_dim": 128, "dim": 5120, "n_layers": 40, "n_heads": 40, "n_kv_heads": 8, "hidden_dim": 17408},
    "32B": {"vocab_size": 151936, "head_dim": 128, "dim": 5120, "n_layers": 64, "n_heads": 64, "n_kv_heads": 8, "hidden_dim": 25600},
    "debugmodel_moe": {
        "vocab_size": 2048, "head_dim": 128, "dim": 256, "n_layers": 8, "n_heads": 16, "n_kv_heads": 8,
        "hidden_dim": 3072, "moe_inter_dim": 768, "num_experts": 64, "top_k": 8, "num_shared_experts": 0,
    },
    "30B-A3B": {
        "vocab_size": 151936, "head_dim": 128, "dim": 2048, "n_layers": 48, "n_heads": 32, "n_kv_heads": 4,
        "hidden_dim": 6144, "moe_inter_dim": 768, "num_experts": 128, "top_k": 8, "num_shared_experts": 0,
    },
    "235B-A22B": {
        "vocab_size": 151936, "head_dim": 128, "dim": 4096, "n_layers": 94, "n_heads": 64, "n_kv_heads": 4,
        "hidden_dim": 12288, "moe_inter_dim": 1536, "num_experts": 128, "top_k": 8, "num_shared_experts": 0,
    },
}  # fmt: skip


def _qwen3(a: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    out = {
        "layers": a["n_layers"],
        "hidden": a["dim"],
        "heads": a["n_heads"],
        "kv_heads": a["n_kv_heads"],
        "ffn_hidden": a["hidden_dim"],
        "ffn": "swiglu",
        "vocab": a["vocab_size"],
        "tied_embeddings": bool(a.get("tied", False)),
    }
    if a["head_dim"] * a["n_heads"] != a["dim"]:
        out["head_dim"] = a["head_dim"]
    if "num_experts" in a:
        out.update(experts=a["num_experts"], experts_per_token=a["top_k"], moe_ffn_hidden=a["moe_inter_dim"])
        if a.get("num_shared_experts"):
            out["shared_experts"] = a["num_shared_experts"]
    notes.append("torchtitan qwen3: the q/k RMSNorms (qk_norm) are not counted (2 x head_dim per layer)")
    return out


# -- DeepSeek-V3 (and the Kimi K2 family, the same architecture) --------------------------------
#: ``deepseekv3_args`` (torchtitan/models/deepseek_v3/__init__.py @ 238fa99) and the flavour
#: functions @ b5bcd76 (``dense_hidden_dim`` there is ``inter_dim``, ``moe_hidden_dim``
#: ``moe_inter_dim``, ``router_top_k`` ``top_k``). ``q_lora_rank = 0``: a plain query projection.
DEEPSEEK_V3: Flavours = {
    "debugmodel": {
        "vocab_size": 2048, "dim": 256, "inter_dim": 1024, "moe_inter_dim": 256, "n_layers": 6,
        "n_dense_layers": 1, "n_heads": 16, "num_experts": 8, "num_shared_experts": 2, "top_k": 3,
        "q_lora_rank": 0,
    },
    "16B": {
        "vocab_size": 102400, "dim": 2048, "inter_dim": 10944, "moe_inter_dim": 1408, "n_layers": 27,
        "n_dense_layers": 1, "n_heads": 16, "num_experts": 64, "num_shared_experts": 2, "top_k": 6,
        "q_lora_rank": 0,
    },
    "236B": {
        "vocab_size": 102400, "dim": 5120, "inter_dim": 12288, "moe_inter_dim": 1536, "n_layers": 60,
        "n_dense_layers": 1, "n_heads": 128, "num_experts": 160, "num_shared_experts": 2, "top_k": 6,
        "q_lora_rank": 1536,
    },
    "671B": {
        "vocab_size": 129280, "dim": 7168, "inter_dim": 18432, "moe_inter_dim": 2048, "n_layers": 61,
        "n_dense_layers": 3, "n_heads": 128, "num_experts": 256, "num_shared_experts": 1, "top_k": 8,
        "q_lora_rank": 1536,
    },
}  # fmt: skip
#: ``kimi_k2_5_configs`` (torchtitan/models/kimi_k2_7/__init__.py @ b5bcd76): DeepSeek-V3's
#: layers (``build_mla_moe_layers``); ``Kimi-VL-A3B`` and ``Kimi-K2.5`` add a MoonViT vision tower.
KIMI: Flavours = {
    "debugmodel": {**DEEPSEEK_V3["debugmodel"], "vision": True},
    "moonlight-16B-A3B": {
        "vocab_size": 163840, "dim": 2048, "inter_dim": 11264, "moe_inter_dim": 1408, "n_layers": 27,
        "n_dense_layers": 1, "n_heads": 16, "num_experts": 64, "num_shared_experts": 2, "top_k": 6,
        "q_lora_rank": 0,
    },
    "Kimi-K2.5": {
        "vocab_size": 163840, "dim": 7168, "inter_dim": 18432, "moe_inter_dim": 2048, "n_layers": 61,
        "n_dense_layers": 1, "n_heads": 64, "num_experts": 384, "num_shared_experts": 1, "top_k": 8,
        "q_lora_rank": 1536, "vision": True,
    },
}  # fmt: skip
KIMI["Kimi-VL-A3B"] = {**KIMI["moonlight-16B-A3B"], "vision": True}
#: The MLA widths every DeepSeek-V3 and Kimi flavour uses (``DeepSeekV3ModelArgs`` defaults).
_MLA = {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}


def _deepseek(a: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    a = {**_MLA, **a}
    out = {
        "layers": a["n_layers"],
        "hidden": a["dim"],
        "heads": a["n_heads"],
        "head_dim": a["qk_nope_head_dim"] + a["qk_rope_head_dim"],
        "v_head_dim": a["v_head_dim"],
        "kv_lora_rank": a["kv_lora_rank"],
        "ffn_hidden": a["inter_dim"],
        "ffn": "swiglu",
        "vocab": a["vocab_size"],
        "tied_embeddings": False,
        "experts": a["num_experts"],
        "experts_per_token": a["top_k"],
        "moe_ffn_hidden": a["moe_inter_dim"],
        "shared_experts": a["num_shared_experts"],
        "dense_layers": a["n_dense_layers"],
    }
    if a["q_lora_rank"]:
        out["q_lora_rank"] = a["q_lora_rank"]
    notes.append(
        "torchtitan deepseek_v3: multi-head latent attention with the decoupled RoPE key counted per "
        "head and the latents' norms left out (as [model] MLA keys are priced)"
    )
    if a.get("vision"):
        notes.append("not modelled: the flavour's MoonViT vision tower (the text model only is priced)")
    return out


# -- gpt-oss ---------------------------------------------------------------------------------------
#: ``GptOssModelArgs`` defaults (torchtitan/models/gpt_oss/model/args.py @ 238fa99): dim 2880,
#: 64 heads of 64, 8 KV heads, ``moe_inter_dim`` 2880, vocabulary 201088; ``gptoss_configs``
#: sets the layers and experts (top 4, no shared expert). At b5bcd76 ``_debugmodel`` also sets
#: ``vocab_size = 2048`` (at 238fa99 it keeps 201088).
GPT_OSS: Flavours = {
    "debugmodel": {"dim": 256, "n_layers": 4, "num_experts": 8},
    "20b": {"n_layers": 24, "num_experts": 32},
    "120b": {"n_layers": 36, "num_experts": 128},
}
_GPT_OSS_DEFAULTS = {
    "vocab_size": 201088, "dim": 2880, "moe_inter_dim": 2880, "head_dim": 64, "n_heads": 64,
    "n_kv_heads": 8, "top_k": 4,
}  # fmt: skip


def _gpt_oss(a: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    a = {**_GPT_OSS_DEFAULTS, **a}
    out = {
        "layers": a["n_layers"],
        "hidden": a["dim"],
        "heads": a["n_heads"],
        "kv_heads": a["n_kv_heads"],
        "head_dim": a["head_dim"],
        "ffn_hidden": a["moe_inter_dim"],
        "ffn": "swiglu",
        "vocab": a["vocab_size"],
        "tied_embeddings": False,
        "experts": a["num_experts"],
        "experts_per_token": a["top_k"],
    }
    notes.append(
        "not modelled: gpt-oss's sliding-window attention (128 tokens) on every other layer, its "
        "attention sinks and its biases; every layer priced as full causal attention"
    )
    return out


# -- Qwen 3.5 --------------------------------------------------------------------------------------
#: The flavour functions of torchtitan/models/qwen3_5/__init__.py @ b5bcd76: one full-attention
#: layer in 4 (``full_attention_interval``), the others Gated DeltaNet linear attention; the MoE
#: flavours have one shared expert of ``shared_expert_hidden_dim``; every flavour a vision tower.
QWEN3_5: Flavours = {
    "debugmodel": {"dim": 256, "head_dim": 64, "n_layers": 8, "n_heads": 4, "n_kv_heads": 2, "hidden_dim": 512},
    "debugmodel_moe": {
        "dim": 256, "head_dim": 64, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "moe_hidden_dim": 256,
        "num_experts": 8, "top_k": 2, "shared": 256,
    },
    "0.8B": {"dim": 1024, "head_dim": 256, "n_layers": 24, "n_heads": 8, "n_kv_heads": 2, "hidden_dim": 3584},
    "2B": {"dim": 2048, "head_dim": 256, "n_layers": 24, "n_heads": 8, "n_kv_heads": 2, "hidden_dim": 6144},
    "4B": {"dim": 2560, "head_dim": 256, "n_layers": 32, "n_heads": 16, "n_kv_heads": 4, "hidden_dim": 9216},
    "9B": {"dim": 4096, "head_dim": 256, "n_layers": 32, "n_heads": 16, "n_kv_heads": 4, "hidden_dim": 12288},
    "27B": {"dim": 5120, "head_dim": 256, "n_layers": 64, "n_heads": 24, "n_kv_heads": 4, "hidden_dim": 17408},
    "35B-A3B": {
        "dim": 2048, "head_dim": 256, "n_layers": 40, "n_heads": 16, "n_kv_heads": 2, "moe_hidden_dim": 512,
        "num_experts": 256, "top_k": 8, "shared": 512,
    },
    "122B-A10B": {
        "dim": 3072, "head_dim": 256, "n_layers": 48, "n_heads": 32, "n_kv_heads": 2, "moe_hidden_dim": 1024,
        "num_experts": 256, "top_k": 8, "shared": 1024,
    },
    "397B-A17B": {
        "dim": 4096, "head_dim": 256, "n_layers": 60, "n_heads": 32, "n_kv_heads": 2, "moe_hidden_dim": 1024,
        "num_experts": 512, "top_k": 10, "shared": 1024,
    },
}  # fmt: skip


def _qwen3_5(a: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    moe = "num_experts" in a
    out = {
        "layers": a["n_layers"],
        "hidden": a["dim"],
        "heads": a["n_heads"],
        "kv_heads": a["n_kv_heads"],
        "head_dim": a["head_dim"],
        "ffn_hidden": a["moe_hidden_dim"] if moe else a["hidden_dim"],
        "ffn": "swiglu",
        "vocab": 248320,
        "tied_embeddings": False,
    }
    if moe:
        out.update(
            experts=a["num_experts"],
            experts_per_token=a["top_k"],
            shared_experts=a["shared"] // a["moe_hidden_dim"],
        )
    notes.append(
        "not modelled: Qwen3.5's Gated DeltaNet linear attention (3 layers in 4): every layer priced "
        "as the full-attention layers' softmax attention; its attention output gate not counted"
    )
    notes.append("not modelled: the flavour's vision tower (the text model only is priced)")
    return out


# -- Muse Glimmer ----------------------------------------------------------------------------------
#: ``muse_glimmer_configs`` (torchtitan/models/muse_glimmer/__init__.py @ b5bcd76): SwiGLU of
#: ``int(3.0 x dim)`` (``_FFN_DIM_MULTIPLIER``), sliding windows on 3 layers in 4; the ``_mm``
#: flavours own a vision encoder.
MUSE_GLIMMER: Flavours = {
    "debugmodel": {"dim": 256, "n_layers": 8, "n_heads": 4, "n_kv_heads": 2, "head_dim": 64, "vocab_size": 2048, "window": 128},
    "30B": {"dim": 6656, "n_layers": 52, "n_heads": 32, "n_kv_heads": 2, "head_dim": 128, "vocab_size": 202048, "window": 2048},
}  # fmt: skip
MUSE_GLIMMER["debugmodel_mm"] = {**MUSE_GLIMMER["debugmodel"], "vision": True}
MUSE_GLIMMER["30B_mm"] = {**MUSE_GLIMMER["30B"], "vision": True}


def _muse_glimmer(a: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    notes.append(
        f"not modelled: Muse Glimmer's sliding-window attention ({a['window']} tokens, 3 layers in 4), "
        "its attention output gate and post-norms; every layer priced as full causal attention"
    )
    if a.get("vision"):
        notes.append("not modelled: the flavour's vision encoder and adapter (the text model only is priced)")
    return {
        "layers": a["n_layers"],
        "hidden": a["dim"],
        "heads": a["n_heads"],
        "kv_heads": a["n_kv_heads"],
        "head_dim": a["head_dim"],
        "ffn_hidden": int(3.0 * a["dim"]),
        "ffn": "swiglu",
        "vocab": a["vocab_size"],
        "tied_embeddings": False,
    }


# -- experiments ----------------------------------------------------------------------------------
#: ``deepseek_config_registry`` (torchtitan/experiments/deepseek_v3/model_config.py @ 820504e):
#: DeepSeek-V2-Lite, the same shape as the later ``deepseek_v3`` "16B" flavour.
DEEPSEEK_V2: Flavours = {
    "deepseek-ai/DeepSeek-V2-Lite": DEEPSEEK_V3["16B"],
    "deepseek-ai/DeepSeek-V2-Lite-Chat": DEEPSEEK_V3["16B"],
}
#: ``llama3_siglip2_args`` (torchtitan/experiments/vlm/__init__.py @ 238fa99): Llama 3's
#: ``debugmodel_flex_attn`` decoder with a 4-layer Siglip2 image encoder.
VLM: Flavours = {"debugmodel": {**LLAMA3["debugmodel"], "vision": True}}


def _vlm(a: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    notes.append("not modelled: the Siglip2 image encoder (the Llama 3 decoder only is priced)")
    return _llama3({k: v for k, v in a.items() if k != "vision"}, notes)


#: family -> (flavour table, the function making [model] keys, where the table comes from).
FAMILIES: dict[str, tuple[Flavours, Callable[[dict[str, Any], list[str]], dict[str, Any]], str]] = {
    "llama3": (LLAMA3, _llama3, "torchtitan/models/llama3/__init__.py @ 238fa99, b5bcd76"),
    "llama4": (LLAMA4, _llama4, "torchtitan/models/llama4/__init__.py @ 238fa99"),
    "qwen3": (QWEN3, _qwen3, "torchtitan/models/qwen3/__init__.py @ 238fa99, b5bcd76"),
    "deepseek_v3": (DEEPSEEK_V3, _deepseek, "torchtitan/models/deepseek_v3/__init__.py @ 238fa99, b5bcd76"),
    "kimi_k2_7": (KIMI, _deepseek, "torchtitan/models/kimi_k2_7/__init__.py @ b5bcd76"),
    "gpt_oss": (GPT_OSS, _gpt_oss, "torchtitan/models/gpt_oss/__init__.py @ 238fa99, b5bcd76"),
    "qwen3_5": (QWEN3_5, _qwen3_5, "torchtitan/models/qwen3_5/__init__.py @ b5bcd76"),
    "muse_glimmer": (MUSE_GLIMMER, _muse_glimmer, "torchtitan/models/muse_glimmer/__init__.py @ b5bcd76"),
    "deepseek_v2": (DEEPSEEK_V2, _deepseek, "torchtitan/experiments/deepseek_v3/model_config.py @ 820504e"),
    "vlm": (VLM, _vlm, "torchtitan/experiments/vlm/__init__.py @ 238fa99"),
}
#: Model names torchtitan used for the same families (``[model] name`` of older jobs).
ALIASES = {"llama": "llama3", "llama3_ft": "llama3", "deepseekv3": "deepseek_v3", "gptoss": "gpt_oss"}
#: torchtitan families that are not decoder-only language models ShardMeter prices.
NOT_LANGUAGE_MODELS = {
    "flux": "FLUX is a diffusion transformer (double- and single-stream blocks over image latents, "
    "with T5 and CLIP encoders and an autoencoder in the step)",
}


def base_flavour(flavor: str) -> tuple[str, str]:
    """``flavor`` without an attention-kernel suffix, and the suffix (``"8B_flex"`` -> 8B, _flex)."""
    for suffix in ATTENTION_SUFFIXES:
        if flavor.endswith(suffix) and len(flavor) > len(suffix):
            return flavor[: -len(suffix)], suffix
    return flavor, ""


def known_flavours(family: str) -> list[str]:
    fam = FAMILIES.get(ALIASES.get(family, family))
    return list(fam[0]) if fam else []


#: Which flavour tables a job reads: ``"2024"`` (the layouts of 9dec370 and 3e75bae), ``"toml"``
#: (238fa99 and 9810191), ``"registry"`` (b5bcd76).
ERAS = ("2024", "toml", "registry")


def model_keys(
    family: str, flavor: str, *, era: str = "toml"
) -> tuple[dict[str, Any], list[str], str] | None:
    """The ``[model]`` keys of torchtitan's ``family`` / ``flavor`` as torchtitan shipped it in
    ``era`` (:data:`ERAS`), notes, and the source; ``None`` if it ships no such flavour."""
    fam = FAMILIES.get(ALIASES.get(family, family))
    if fam is None:
        return None
    table, make, src = fam
    base, _ = base_flavour(flavor)
    args = table.get(flavor, table.get(base))
    if args is None:
        return None
    if era == "2024" and base == "debugmodel" and make is _llama3:
        args, src = LLAMA3_DEBUG_2024, "torchtitan/models/llama/__init__.py @ 9dec370, 3e75bae"
    if era == "registry" and make is _gpt_oss and base == "debugmodel":
        args = {**args, "vocab_size": 2048}  # b5bcd76 _debugmodel: vocab_size=2048
    notes: list[str] = []
    return make(dict(args), notes), notes, src
