"""``[model] hf_config``: a Hugging Face ``config.json`` as ``[model]`` keys.

:func:`model_table_from_hf` maps the fields of the ``transformers`` configuration classes
(``LlamaConfig``, ``MistralConfig``, ``MixtralConfig``, ``Qwen2Config``, ``Qwen2MoeConfig``,
``Qwen3MoeConfig``, ``Gemma2Config``, ``DeepseekV3Config``, ``Llama4TextConfig``: their
``configuration_*.py`` and the ``modeling_*.py`` that reads them) onto the scenario's keys, with
notes saying what was approximated or left out (towers other than the text model, attention that
is not full softmax attention); :func:`read_hf_config` reads the file through the one input
reader. Keys written in ``[model]`` win over the file (:mod:`shardmeter.load.scenario`).

Every number goes through :func:`shardmeter.numbers.check_number` (finite, whole, at most
``MAX_COUNT``), and nothing is built per layer: the dense layers of a MoE pattern are counted
arithmetically, so a hostile ``num_hidden_layers`` costs nothing.

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
from shardmeter.numbers import NumberError, check_number
from shardmeter.reading import InputError, read_input

__all__ = ["model_table_from_hf", "read_hf_config", "MAX_CONFIG_BYTES"]

#: Largest config.json read (real ones are a few kB).
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: Largest count a field may give (the scenario's own limit, ``load.specs.MAX_COUNT``).
_MAX_COUNT = 2**40
#: Items of a list field read (``mlp_only_layers``, ``layer_types``), at most.
_MAX_LIST = 1 << 16

_PATH = "model.hf_config"

#: Families whose MLP is gated (three matrices: gate, up, down; ``LlamaMLP``, ``MistralMLP``,
#: ``Qwen2MLP``, ``GemmaMLP``, ``DeepseekV3MLP``, ``Llama4TextMLP``, the experts of Mixtral and Qwen-MoE).
_GATED = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
    "gemma3_text", "deepseek_v2", "deepseek_v3", "phi3", "olmo2", "granite", "llama4", "llama4_text",
}  # fmt: skip
#: Families with a two-matrix MLP (``GPT2MLP``, ``GPTNeoXMLP``, ``OPT``, ``Bloom``, ``Falcon``).
_UNGATED = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "mpt", "phi", "starcoder2"}
#: ``tie_word_embeddings`` when the file omits it: the configuration class's default
#: (``PretrainedConfig``'s is true; these classes pass false, Gemma's true).
_UNTIED_BY_DEFAULT = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2",
    "deepseek_v3", "phi3", "olmo2", "gpt_neox", "falcon", "llama4", "llama4_text",
}  # fmt: skip
#: Sub-configurations of a multimodal config that are towers ShardMeter does not price.
_TOWERS = {
    "vision_config": "vision", "audio_config": "audio", "speech_config": "speech",
    "image_config": "image", "vq_config": "image tokenizer", "perceiver_config": "perceiver",
}  # fmt: skip
#: ``layer_types`` entries that are not full softmax attention (transformers' ``layer_types``:
#: Gemma 3, gpt-oss, Qwen3-Next, ...).
_OTHER_LAYERS = {
    "sliding_attention": "sliding-window attention",
    "chunked_attention": "chunked local attention",
    "linear_attention": "linear attention (Gated DeltaNet)",
    "mamba": "Mamba state-space",
}
#: Families whose attention is in part linear or a state-space model (config classes of
#: transformers: MiniMax's ``attn_type_list`` 0 = lightning attention; Jamba, Zamba, Falcon-H1,
#: NemotronH, Bamba mix Mamba layers in).
_HYBRID = {
    "minimax": "lightning (linear) attention on the layers attn_type_list marks 0",
    "minimax_m1": "lightning (linear) attention on the layers attn_type_list marks 0",
    "jamba": "Mamba state-space layers", "zamba": "Mamba state-space layers",
    "zamba2": "Mamba state-space layers", "falcon_h1": "Mamba state-space layers",
    "nemotron_h": "Mamba state-space layers", "bamba": "Mamba state-space layers",
    "qwen3_next": "Gated DeltaNet linear attention (3 layers in 4)",
    "rwkv": "RWKV recurrence", "mamba": "Mamba state-space layers", "mamba2": "Mamba state-space layers",
}  # fmt: skip


def read_hf_config(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object in ``path`` (:func:`shardmeter.reading.read_input`); a missing,
    unreadable, non-JSON or non-object file is a one-line :class:`ScenarioError` naming
    ``model.hf_config``."""
    name = os.fspath(path)
    if not os.path.lexists(name):
        raise ScenarioError(f"no such file {name!r}", path=_PATH)
    try:
        text = read_input(name, what="config.json", max_bytes=MAX_CONFIG_BYTES).text
    except InputError as exc:
        raise ScenarioError(f"{name!r} {exc.message}", path=_PATH) from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ScenarioError(f"{name!r} is not JSON: {str(exc)[:120]}", path=_PATH) from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{name!r}: expected a JSON object, got {type(data).__name__}", path=_PATH)
    return data


def _int(cfg: Mapping[str, Any], field: str, default: Any = ..., minimum: int = 1) -> Any:
    """``cfg[field]`` as an integer >= ``minimum`` (and at most the scenario's count limit);
    absent or null gives ``default`` (required when none)."""
    v = cfg.get(field)
    if v is None:
        if default is ...:
            raise ScenarioError(f"required field {field!r} is missing", path=_PATH)
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ScenarioError(f"field {field!r}: expected an integer >= {minimum}, got {v!r:.40}", path=_PATH)
    try:
        n = check_number(v, field=f"field {field!r}", integer=True, minimum=minimum, maximum=_MAX_COUNT)
    except NumberError as exc:
        raise ScenarioError(exc.message, path=_PATH) from None
    return int(n)


def _str(cfg: Mapping[str, Any], field: str) -> str | None:
    v = cfg.get(field)
    if v is not None and not isinstance(v, str):
        raise ScenarioError(f"field {field!r}: expected a string, got {v!r:.40}", path=_PATH)
    return v


def _bool(cfg: Mapping[str, Any], field: str) -> bool | None:
    v = cfg.get(field)
    if v is not None and not isinstance(v, bool):
        raise ScenarioError(f"field {field!r}: expected true or false, got {v!r:.40}", path=_PATH)
    return v


def _ints(cfg: Mapping[str, Any], field: str) -> list[int]:
    """A list of non-negative integers (``mlp_only_layers``), at most :data:`_MAX_LIST` long."""
    v = cfg.get(field) or []
    if (
        not isinstance(v, list)
        or len(v) > _MAX_LIST
        or not all(type(i) is int and 0 <= i < _MAX_COUNT for i in v)
    ):
        raise ScenarioError(f"field {field!r}: expected a list of layer indices, got {v!r:.60}", path=_PATH)
    return v


def _text_model(config: Mapping[str, Any], notes: list[str]) -> Mapping[str, Any]:
    """The text model's fields: ``text_config`` of a multimodal config (its other towers noted)."""
    towers = [f"{_TOWERS[k]} tower ({k})" for k in _TOWERS if isinstance(config.get(k), Mapping)]
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), Mapping):
        config = config["text_config"]
        notes.append("hf_config: the text model's text_config read")
    if towers:
        notes.append(
            "hf_config: not modelled: the " + ", the ".join(towers) + "; the text model only is priced"
        )
    return config


def model_table_from_hf(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The ``[model]`` keys of a Hugging Face ``config.json`` object, and notes on what was
    approximated or not mapped. A multimodal config's ``text_config`` is read when the top
    level has no ``num_hidden_layers``.

    :raises ScenarioError: naming ``model.hf_config`` and the JSON field (missing required
        field, wrong type, a number out of range).
    """
    if not isinstance(config, Mapping):
        raise ScenarioError(f"expected a JSON object, got {type(config).__name__}", path=_PATH)
    notes: list[str] = []
    config = _text_model(config, notes)
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
    dense_width = "intermediate_size_mlp" if kind in ("llama4", "llama4_text") else "intermediate_size"
    table["ffn_hidden"] = _int(config, dense_width)
    table["ffn"] = _mlp_kind(config, kind, notes)
    tied = _bool(config, "tie_word_embeddings")
    if tied is None:
        tied = kind not in _UNTIED_BY_DEFAULT
    table["tied_embeddings"] = tied
    if kind in ("llama4", "llama4_text"):
        _llama4(config, table, notes)
    else:
        _moe(config, table, notes)
    _attention_kinds(config, kind, table, notes)
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


def _attention_kinds(cfg: Mapping[str, Any], kind: str, table: dict[str, Any], notes: list[str]) -> None:
    """Notes on attention that is not full softmax attention over the whole sequence, each
    priced as full causal attention: sliding windows (where they are used), chunked local
    attention (Llama 4), linear attention and state-space layers."""
    if kind in _HYBRID:
        notes.append(
            f"hf_config: not modelled: {kind}'s {_HYBRID[kind]}; every layer priced as softmax attention"
        )
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) <= _MAX_LIST:
        for name, what in _OTHER_LAYERS.items():
            n = sum(1 for t in types if t == name)
            if n:
                notes.append(
                    f"hf_config: not modelled: {what} on {n} of {len(types)} layers; priced as full attention"
                )
        if any(t in _OTHER_LAYERS for t in types if isinstance(t, str)):
            return
    window = cfg.get("sliding_window")
    used = cfg.get("use_sliding_window") is not False
    if used and type(window) is int and window < table["seq_len"]:
        notes.append(
            f"hf_config: sliding-window attention ({window} tokens) counted as full causal attention"
        )
    chunk = cfg.get("attention_chunk_size")
    if type(chunk) is int and chunk < table["seq_len"]:
        notes.append(
            f"hf_config: not modelled: chunked local attention ({chunk}-token chunks, the RoPE layers of "
            "Llama 4); priced as full causal attention"
        )


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
            f"hf_config: model_type {kind[:40]!r} unknown: MLP taken as "
            f"{'gated (three matrices)' if gated else 'two matrices'} from hidden_act {act[:40]!r}"
        )
    if gated and act not in ("silu", "swish", ""):
        notes.append(f"hf_config: gated {act[:40]} MLP (GeGLU) counted as the three-matrix 'swiglu' kind")
    return "swiglu" if gated else "gelu"


def _llama4(cfg: Mapping[str, Any], table: dict[str, Any], notes: list[str]) -> None:
    """Llama 4 (``Llama4TextConfig``, ``Llama4TextMoe``): ``num_local_experts`` routed experts
    of ``intermediate_size`` and one shared expert of the same width on the MoE layers (those
    ``moe_layers`` lists, by default every ``interleave_moe_layer_step``-th:
    ``range(step - 1, layers, step)``); the dense layers' MLP is ``intermediate_size_mlp`` wide."""
    experts = _int(cfg, "num_local_experts", 1)
    if experts <= 1:
        return
    layers = table["layers"]
    table["experts"] = experts
    table["experts_per_token"] = _int(cfg, "num_experts_per_tok", 1)
    table["moe_ffn_hidden"] = _int(cfg, "intermediate_size")
    table["shared_experts"] = 1
    if cfg.get("moe_layers") is not None:
        moe = len({i for i in _ints(cfg, "moe_layers") if i < layers})
        first = min((i for i in _ints(cfg, "moe_layers") if i < layers), default=layers)
    else:
        step = _int(cfg, "interleave_moe_layer_step", 1)
        moe = len(range(step - 1, layers, step))
        first = step - 1
    dense = layers - moe
    if dense:
        table["dense_layers"] = dense
        if first < dense:
            notes.append(
                f"hf_config: the {dense} dense layers are interleaved with the MoE ones; counted as if they led"
            )
    if cfg.get("use_qk_norm"):
        notes.append("hf_config: the q/k norms (use_qk_norm) are not counted")


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
    if field == "n_routed_experts":  # DeepseekV3DecoderLayer: MoE where i >= first and i % freq == 0
        first = min(_int(cfg, "first_k_dense_replace", 0, minimum=0), layers)
        freq = _int(cfg, "moe_layer_freq", 1)
        start = -(-first // freq) * freq  # the first MoE layer
        sparse = 0 if start >= layers else (layers - 1 - start) // freq + 1
    else:  # Qwen2MoeDecoderLayer: sparse where (i + 1) % decoder_sparse_step == 0, not mlp_only
        step = _int(cfg, "decoder_sparse_step", 1)
        only = set(_ints(cfg, "mlp_only_layers"))
        sparse = layers // step - sum(1 for i in only if i < layers and (i + 1) % step == 0)
        start = next((i for i in range(step - 1, layers, step) if i not in only), layers)
    dense = layers - sparse
    if dense:
        table["dense_layers"] = dense
        if start < dense:
            notes.append(f"hf_config: the {dense} dense layers are not all leading; counted as if they were")
    if cfg.get("num_nextn_predict_layers"):
        notes.append("hf_config: multi-token prediction layers (num_nextn_predict_layers) not modelled")
