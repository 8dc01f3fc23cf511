"""``[model] hf_config``: a Hugging Face ``config.json`` as ``[model]`` keys.

:func:`model_table_from_hf` maps the fields of the ``transformers`` configuration classes
(``LlamaConfig``, ``MistralConfig``, ``MixtralConfig``, ``Qwen2Config``, ``Qwen2MoeConfig``,
``Qwen3MoeConfig``, ``Gemma2Config``, ``DeepseekV3Config``: their ``configuration_*.py`` and the
``modeling_*.py`` that reads them) onto the scenario's keys, with notes saying what was
approximated or left out; :func:`read_hf_config` reads the file. Keys written in ``[model]``
win over the file (:mod:`shardmeter.load.scenario`).

``seq_len`` is ``max_position_embeddings``, the longest context the model supports, which can be
far above the length it was trained at (131072 for Llama 3.1, pre-trained at 8192): a note says
so, and ``[model] seq_len`` sets the training length. The file says nothing else about training.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from shardmeter.errors import ScenarioError

__all__ = ["model_table_from_hf", "read_hf_config", "MAX_CONFIG_BYTES"]

#: Largest config.json read (real ones are a few kB).
MAX_CONFIG_BYTES = 4 * 1024 * 1024

_PATH = "model.hf_config"

#: Families whose MLP is gated (three matrices: gate, up, down; ``LlamaMLP``, ``MistralMLP``,
#: ``Qwen2MLP``, ``GemmaMLP``, ``DeepseekV3MLP``, the experts of Mixtral and Qwen-MoE).
_GATED = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
    "gemma3_text", "deepseek_v2", "deepseek_v3", "phi3", "olmo2", "granite",
}  # fmt: skip
#: Families with a two-matrix MLP (``GPT2MLP``, ``GPTNeoXMLP``, ``OPT``, ``Bloom``, ``Falcon``).
_UNGATED = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "mpt", "phi", "starcoder2"}
#: ``tie_word_embeddings`` when the file omits it: the configuration class's default
#: (``PretrainedConfig``'s is true; these classes pass false, Gemma's true).
_UNTIED_BY_DEFAULT = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2",
    "deepseek_v3", "phi3", "olmo2", "gpt_neox", "falcon",
}  # fmt: skip


def read_hf_config(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object in ``path``; a missing, unreadable, non-JSON or non-object file is a
    one-line :class:`ScenarioError` naming ``model.hf_config``."""
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise ScenarioError(f"no such file {name!r}", path=_PATH)
    try:
        with open(name, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ScenarioError(f"cannot read {name!r}: {exc.strerror or exc}", path=_PATH) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ScenarioError(f"{name!r} is over {MAX_CONFIG_BYTES:,} bytes; not a config.json", path=_PATH)
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ScenarioError(f"{name!r} is not JSON: {exc}", path=_PATH) from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{name!r}: expected a JSON object, got {type(data).__name__}", path=_PATH)
    return data


def _int(cfg: Mapping[str, Any], field: str, default: Any = ..., minimum: int = 1) -> Any:
    """``cfg[field]`` as an integer >= ``minimum``; absent or null gives ``default`` (required
    when none)."""
    v = cfg.get(field)
    if v is None:
        if default is ...:
            raise ScenarioError(f"required field {field!r} is missing", path=_PATH)
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ScenarioError(f"field {field!r}: expected an integer >= {minimum}, got {v!r}", path=_PATH)
    return v


def _str(cfg: Mapping[str, Any], field: str) -> str | None:
    v = cfg.get(field)
    if v is not None and not isinstance(v, str):
        raise ScenarioError(f"field {field!r}: expected a string, got {v!r}", path=_PATH)
    return v


def _bool(cfg: Mapping[str, Any], field: str) -> bool | None:
    v = cfg.get(field)
    if v is not None and not isinstance(v, bool):
        raise ScenarioError(f"field {field!r}: expected true or false, got {v!r}", path=_PATH)
    return v


def model_table_from_hf(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The ``[model]`` keys of a Hugging Face ``config.json`` object, and notes on what was
    approximated or not mapped. A multimodal config's ``text_config`` is read when the top
    level has no ``num_hidden_layers``.

    :raises ScenarioError: naming ``model.hf_config`` and the JSON field (missing required
        field, wrong type).
    """
    if not isinstance(config, Mapping):
        raise ScenarioError(f"expected a JSON object, got {type(config).__name__}", path=_PATH)
    notes: list[str] = []
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), Mapping):
        config = config["text_config"]
        notes.append("hf_config: the text model's text_config read; other towers not modelled")
    kind = _str(config, "model_type") or ""
    layers = _int(config, "num_hidden_layers")
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    table: dict[str, Any] = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "vocab": _int(config, "vocab_size"),
        "seq_len": _int(config, "max_position_embeddings"),
    }
    notes.append(
        f"hf_config: seq_len = max_position_embeddings ({table['seq_len']}), the longest context the "
        "model supports, not necessarily its training length: set [model] seq_len"
    )
    kv = _int(config, "num_key_value_heads", heads)
    if kv != heads:
        table["kv_heads"] = kv
    _attention(config, table, heads, hidden, notes)
    table["ffn_hidden"] = _int(config, "intermediate_size")
    table["ffn"] = _mlp_kind(config, kind, notes)
    tied = _bool(config, "tie_word_embeddings")
    if tied is None:
        tied = kind not in _UNTIED_BY_DEFAULT
    table["tied_embeddings"] = tied
    _moe(config, table, notes)
    window = config.get("sliding_window")
    if isinstance(window, int) and not isinstance(window, bool) and window < table["seq_len"]:
        notes.append(
            f"hf_config: sliding-window attention ({window} tokens) counted as full causal attention"
        )
    if config.get("attention_bias") or kind in ("qwen2", "qwen2_moe"):
        notes.append("hf_config: attention projection biases not counted")
    return table, notes


def _attention(
    cfg: Mapping[str, Any], table: dict[str, Any], heads: int, hidden: int, notes: list[str]
) -> None:
    """``head_dim`` (given or ``hidden / heads``, as ``LlamaAttention`` reads it), or DeepSeek's
    multi-head latent attention: the query/key head is ``qk_nope_head_dim + qk_rope_head_dim``
    wide, values ``v_head_dim``, through ranks ``q_lora_rank`` / ``kv_lora_rank``."""
    if cfg.get("kv_lora_rank") is not None:
        nope = _int(cfg, "qk_nope_head_dim")
        rope = _int(cfg, "qk_rope_head_dim", 0, minimum=0)
        table["head_dim"] = nope + rope
        table["v_head_dim"] = _int(cfg, "v_head_dim")
        table["kv_lora_rank"] = _int(cfg, "kv_lora_rank")
        q_rank = _int(cfg, "q_lora_rank", None)
        if q_rank is not None:
            table["q_lora_rank"] = q_rank
        table.pop("kv_heads", None)  # MLA: every head has its own key and value
        notes.append(
            "hf_config: multi-head latent attention approximated: the decoupled RoPE key counted per "
            "head, the latents' norms left out; activations and context-parallel traffic at full K/V width"
        )
        return
    head_dim = _int(cfg, "head_dim", None)
    if head_dim is not None and head_dim * heads != hidden:
        table["head_dim"] = head_dim


def _mlp_kind(cfg: Mapping[str, Any], kind: str, notes: list[str]) -> str:
    """``"swiglu"`` for a gated (three-matrix) MLP, ``"gelu"`` for two matrices: by the model
    family, else by the activation (``hidden_act``; Gemma's ``hidden_activation``)."""
    act = _str(cfg, "hidden_activation") or _str(cfg, "hidden_act") or ""
    if kind in _GATED:
        gated = True
    elif kind in _UNGATED:
        gated = False
    else:
        gated = act in ("silu", "swish")
        notes.append(
            f"hf_config: model_type {kind!r} unknown: MLP taken as "
            f"{'gated (three matrices)' if gated else 'two matrices'} from hidden_act {act!r}"
        )
    if gated and act not in ("silu", "swish", ""):
        notes.append(f"hf_config: gated {act} MLP (GeGLU) counted as the three-matrix 'swiglu' kind")
    return "swiglu" if gated else "gelu"


def _moe(cfg: Mapping[str, Any], table: dict[str, Any], notes: list[str]) -> None:
    """Mixtral (``num_local_experts``), Qwen-MoE (``num_experts``, ``shared_expert_intermediate_size``,
    ``decoder_sparse_step``, ``mlp_only_layers``) and DeepSeek (``n_routed_experts``,
    ``n_shared_experts``, ``first_k_dense_replace``, ``moe_layer_freq``) as ``experts``,
    ``experts_per_token``, ``moe_ffn_hidden``, ``shared_experts`` and ``dense_layers``."""
    field = next((f for f in ("num_local_experts", "n_routed_experts", "num_experts") if cfg.get(f)), None)
    experts = _int(cfg, field, 1) if field else 1
    if experts <= 1:
        return
    layers = table["layers"]
    table["experts"] = experts
    # MixtralConfig defaults to 2 experts per token; the others' files always give it
    table["experts_per_token"] = _int(cfg, "num_experts_per_tok", 2 if field == "num_local_experts" else ...)
    moe_ffn = _int(cfg, "moe_intermediate_size", None)
    if moe_ffn is not None and moe_ffn != table["ffn_hidden"]:
        table["moe_ffn_hidden"] = moe_ffn
    width = moe_ffn or table["ffn_hidden"]
    shared = _int(cfg, "n_shared_experts", 0, minimum=0)
    shared_width = _int(cfg, "shared_expert_intermediate_size", 0, minimum=0)
    if shared_width:  # Qwen2-MoE: one shared expert of this width (and a sigmoid gate, h x 1)
        shared = max(1, round(shared_width / width))
        if shared * width != shared_width:
            notes.append(f"hf_config: shared expert of {shared_width} counted as {shared} x {width}")
        notes.append("hf_config: the shared expert's gate (hidden x 1) not counted")
    if shared:
        table["shared_experts"] = shared
    if field == "n_routed_experts":  # DeepseekV3DecoderLayer: MoE from first_k_dense_replace on
        first = _int(cfg, "first_k_dense_replace", 0, minimum=0)
        freq = _int(cfg, "moe_layer_freq", 1)
        sparse = [i >= first and i % freq == 0 for i in range(layers)]
    else:  # Qwen2MoeDecoderLayer: sparse where (i + 1) % decoder_sparse_step == 0, not mlp_only
        step = _int(cfg, "decoder_sparse_step", 1)
        only = cfg.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in only
        ):
            raise ScenarioError(
                f"field 'mlp_only_layers': expected a list of integers, got {only!r}", path=_PATH
            )
        sparse = [i not in only and (i + 1) % step == 0 for i in range(layers)]
    dense = sparse.count(False)
    if dense:
        table["dense_layers"] = dense
        if any(sparse[:dense]):
            notes.append(f"hf_config: the {dense} dense layers are not all leading; counted as if they were")
    if cfg.get("num_nextn_predict_layers"):
        notes.append("hf_config: multi-token prediction layers (num_nextn_predict_layers) not modelled")
