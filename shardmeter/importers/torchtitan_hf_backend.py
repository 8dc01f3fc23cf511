"""torchtitan's ``transformers_modeling_backend`` jobs: a Hugging Face model's shape with the
job flavour's ``TitanDenseModelArgs`` written over it
(torchtitan/experiments/transformers_modeling_backend @ 238fa99)."""

from __future__ import annotations

from typing import Any

from shardmeter.importers.torchtitan_models import Flavours, ffn_hidden, model_keys

__all__ = ["HF_BACKEND_MODELS", "HF_BACKEND_FLAVOURS", "hf_backend_keys"]


#: The Hugging Face models a ``transformers_modeling_backend`` job names (``[hf_transformers]
#: model``) whose shape torchtitan itself ships: Qwen3-4B is torchtitan's qwen3 "4B" flavour.
HF_BACKEND_MODELS = {
    f"Qwen/Qwen3-{size}{suffix}": ("qwen3", size)
    for size in ("0.6B", "1.7B", "4B", "8B", "14B", "32B")
    for suffix in ("", "-Base", "-Instruct-2507")
}
#: The flavours of torchtitan/experiments/transformers_modeling_backend/__init__.py @ 238fa99:
#: ``TitanDenseModelArgs`` fields that override the Hugging Face config (``None`` keeps it).
HF_BACKEND_FLAVOURS: Flavours = {
    "debugmodel": {"dim": 256, "n_layers": 2, "n_heads": 16, "n_kv_heads": 16},
    "full": {"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": None},
}
#: b5bcd76 adds the same shapes with a block-causal mask for SFT (``sft_debugmodel``, ``sft_full``).
HF_BACKEND_FLAVOURS["sft_debugmodel"] = HF_BACKEND_FLAVOURS["debugmodel"]
HF_BACKEND_FLAVOURS["sft_full"] = HF_BACKEND_FLAVOURS["full"]


def hf_backend_keys(hf_model: str, flavor: str) -> tuple[dict[str, Any], list[str], str] | None:
    """A ``transformers_modeling_backend`` job's model: the Hugging Face model's config with the
    flavour's ``TitanDenseModelArgs`` written over it, then (``update_from_config``,
    model/args.py @ 238fa99) ``intermediate_size`` re-derived from ``dim`` by Llama's rounding
    (``multiple_of = 256``) and ``head_dim = dim // n_heads``."""
    base = HF_BACKEND_MODELS.get(hf_model)
    over = HF_BACKEND_FLAVOURS.get(flavor)
    if base is None or over is None:
        return None
    got = model_keys(*base)
    if got is None:  # pragma: no cover - the table names shipped flavours
        return None
    table = dict(got[0])
    table.update(layers=over["n_layers"], hidden=over["dim"], heads=over["n_heads"])
    if over["n_kv_heads"] is not None:
        table["kv_heads"] = over["n_kv_heads"]
    table["ffn_hidden"] = ffn_hidden(over["dim"], 256, None)
    table.pop("head_dim", None)
    notes = [
        f"transformers_modeling_backend: {hf_model} (torchtitan's {base[0]} {base[1]} shape) with the "
        f"{flavor!r} flavour's dim/n_layers/n_heads written over it; intermediate_size from dim"
    ]
    src = "torchtitan/experiments/transformers_modeling_backend @ 238fa99"
    return table, notes, src
