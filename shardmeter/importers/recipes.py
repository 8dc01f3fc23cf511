"""``shardmeter import megatron RECIPE.py --config NAME``: a Megatron-Bridge or NeMo 2 recipe
function, read without running it (:mod:`.pyconfig`, the same reader as torchtitan's registry;
calls into the recipe's own source tree are followed).

Both stacks configure Megatron-Core, so both are read as Megatron-Core's field names
(``tensor_model_parallel_size``, ``seq_length``, ``global_batch_size`` ...) and mapped once.

* Megatron-Bridge (github.com/NVIDIA-NeMo/Megatron-Bridge @ 067f987): a ``ConfigContainer``
  (``cfg = _pretrain_common()``, then ``cfg.model.* / cfg.train.* / cfg.dataset.* /
  cfg.ddp.*`` assignments); the model is ``AutoBridge.from_hf_pretrained(ID)`` (its shape:
  :data:`HF_MODELS`) or a ``GPTModelProvider(...)`` of literal fields; ``mixed_precision`` a
  recipe name (``"bf16_mixed"``, ``bf16_with_fp8_current_scaling_mixed`` ...). A function named
  ``..._<N>gpu_<gpu>_...`` gives the GPU count when ``--gpus`` does not.
* NeMo 2 (github.com/NVIDIA/NeMo @ 8cfedd7, nemo/collections/llm/recipes): ``run.Partial(fn,
  model=run.Config(LlamaModel, config=run.Config(Llama3Config8B)), trainer=run.Config(nl.Trainer,
  strategy=run.Config(nl.MegatronStrategy, ...), num_nodes, devices, plugins), data=run.Config(
  MockDataModule, seq_length, global_batch_size, micro_batch_size))``; the config class gives
  the shape (:data:`NEMO_CONFIGS`).
"""

from __future__ import annotations

import os
import re
from typing import Any

from shardmeter.importers.draft import Draft
from shardmeter.importers.files import ConfigError, number, read_text
from shardmeter.importers.megatron_model import recompute_modules
from shardmeter.importers.pyconfig import BadNumber, Opaque, Rec, evaluate, parse_tree
from shardmeter.importers.torchtitan_models import model_keys
from shardmeter.importers.torchtitan_registry import registry_functions
from shardmeter.load.specs import LORA_DEFAULT_RANK, LORA_TARGETS

__all__ = ["draft_from_recipe", "HF_MODELS", "NEMO_CONFIGS"]

#: Hugging Face checkpoints whose shape the project has: a bundled preset
#: (shardmeter/presets/models.toml) or torchtitan's flavour of the same model
#: (:mod:`.torchtitan_models`).
HF_MODELS: dict[str, tuple[str, ...]] = {
    "meta-llama/Meta-Llama-3-8B": ("preset", "llama3-8b"),
    "meta-llama/Meta-Llama-3-70B": ("preset", "llama3-70b"),
    "meta-llama/Meta-Llama-3.1-8B": ("preset", "llama3.1-8b"),
    "meta-llama/Llama-3.1-8B": ("preset", "llama3.1-8b"),
    "meta-llama/Meta-Llama-3.1-70B": ("preset", "llama3.1-70b"),
    "meta-llama/Llama-3.1-70B": ("preset", "llama3.1-70b"),
    "meta-llama/Meta-Llama-3.1-405B": ("preset", "llama3.1-405b"),
    "meta-llama/Llama-3.1-405B": ("preset", "llama3.1-405b"),
    "meta-llama/Llama-3.3-70B-Instruct": ("preset", "llama3.3-70b"),
    "meta-llama/Llama-3.2-1B": ("torchtitan", "llama3", "1B"),
    "meta-llama/Llama-3.2-3B": ("torchtitan", "llama3", "3B"),
    "meta-llama/Llama-2-7b-hf": ("preset", "llama2-7b"),
    "meta-llama/Llama-2-70b-hf": ("preset", "llama2-70b"),
    "deepseek-ai/DeepSeek-V3": ("preset", "deepseek-v3"),
    "deepseek-ai/DeepSeek-V3-Base": ("preset", "deepseek-v3"),
    "deepseek-ai/DeepSeek-V2-Lite": ("torchtitan", "deepseek_v3", "16B"),
    "deepseek-ai/DeepSeek-V2": ("torchtitan", "deepseek_v3", "236B"),
    "mistralai/Mixtral-8x7B-v0.1": ("preset", "mixtral-8x7b"),
    "mistralai/Mixtral-8x22B-v0.1": ("preset", "mixtral-8x22b"),
    "openai/gpt-oss-20b": ("torchtitan", "gpt_oss", "20b"),
    "openai/gpt-oss-120b": ("torchtitan", "gpt_oss", "120b"),
    "moonshotai/Moonlight-16B-A3B": ("torchtitan", "kimi_k2_7", "moonlight-16B-A3B"),
    **{f"Qwen/Qwen2.5-{s}": ("preset", f"qwen2.5-{s.lower()}") for s in ("7B", "14B", "32B", "72B")},
    **{
        f"Qwen/Qwen3-{s}{x}": ("torchtitan", "qwen3", s)
        for s in ("0.6B", "1.7B", "4B", "8B", "14B", "32B", "30B-A3B", "235B-A22B")
        for x in ("", "-Base")
    },
}
#: NeMo 2's model config classes (nemo/collections/llm/gpt/model/*.py) and ``qwen3_model``
#: versions, by the same sources.
NEMO_CONFIGS: dict[str, tuple[str, ...]] = {
    "Llama3Config8B": ("preset", "llama3-8b"),
    "Llama3Config70B": ("preset", "llama3-70b"),
    "Llama31Config8B": ("preset", "llama3.1-8b"),
    "Llama31Config70B": ("preset", "llama3.1-70b"),
    "Llama31Config405B": ("preset", "llama3.1-405b"),
    "GPTConfig175B": ("preset", "gpt3-175b"),
    "MixtralConfig8x7B": ("preset", "mixtral-8x7b"),
    "MixtralConfig8x22B": ("preset", "mixtral-8x22b"),
    "DeepSeekV3Config": ("preset", "deepseek-v3"),
    "Llama4Experts16Config": ("torchtitan", "llama4", "17bx16e"),
    "Llama4Experts128Config": ("torchtitan", "llama4", "17bx128e"),
    "qwen3_30b_a3b": ("torchtitan", "qwen3", "30B-A3B"),
    "qwen3_235b_a22b": ("torchtitan", "qwen3", "235B-A22B"),
    "qwen3_32b": ("torchtitan", "qwen3", "32B"),
    "GPTProvider175B": ("preset", "gpt3-175b"),  # Megatron-Bridge's GPT-3 175B provider (recipes/gpt)
}
#: Megatron-Core model fields -> [model] keys (a GPTModelProvider's, or set on cfg.model).
_MODEL_FIELDS = {
    "num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
    "num_query_groups": "kv_heads", "kv_channels": "head_dim", "ffn_hidden_size": "ffn_hidden",
    "vocab_size": "vocab", "num_moe_experts": "experts", "moe_router_topk": "experts_per_token",
    "moe_ffn_hidden_size": "moe_ffn_hidden", "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
    "v_head_dim": "v_head_dim",
}  # fmt: skip
#: Precision recipes (megatron/bridge/training/mixed_precision.py, nemo/collections/llm/recipes/
#: precision/mixed_precision.py) -> (precision, fp8_recipe).
_PRECISIONS = {
    "bf16_mixed": ("bf16", None), "bf16-mixed": ("bf16", None), "fp16_mixed": ("fp16", None),
    "16-mixed": ("fp16", None), "bf16_with_fp8_delayed_scaling_mixed": ("fp8", "delayed"),
    "bf16_with_fp8_current_scaling_mixed": ("fp8", "tensorwise"), "bf16_with_mxfp8_mixed": ("fp8", "mxfp8"),
    "bf16_with_fp8_subchannel_scaling_mixed": ("fp8", "blockwise"), "fp8_cs": ("fp8", "tensorwise"),
    "fp8_ds": ("fp8", "delayed"), "fp8_mx": ("fp8", "mxfp8"), "bf16": ("bf16", None),
}  # fmt: skip


def _cls(v: Any) -> str:
    """The class a record builds: ``run.Config(Cls, ...)``'s ``Cls``, else the call's name."""
    if not isinstance(v, Rec):
        return ""
    if v.name.split(".")[-1] in ("Config", "Partial") and v.name.split(".")[0] in ("run", "fdl") and v.args:
        first = v.args[0]
        return (
            first.text if isinstance(first, Opaque) else first.name if isinstance(first, Rec) else str(first)
        )
    return v.name


def _short(v: Any) -> str:
    return _cls(v).rsplit(".", 1)[-1]


def _peft(peft: Any, d: Draft) -> None:
    """A Megatron-Bridge ``cfg.peft``: ``LoRA(...)``, ``DoRA(...)`` or the recipes'
    ``default_peft_config(peft_scheme)`` (megatron/bridge/recipes/utils/dataset_utils.py
    @067f987: ``"lora"`` -> ``LoRA(**kwargs)``, ``"dora"`` -> ``DoRA``, ``None``/``"none"`` -> full
    fine-tuning) as ``training.peft``, with ``dim`` and ``target_modules`` where it writes them.
    DoRA is priced as LoRA (its per-output magnitude vector is a few parameters more)."""
    name = _short(peft)
    if name == "default_peft_config":
        scheme = peft.args[0] if isinstance(peft, Rec) and peft.args else peft.get("peft_scheme", "lora")
        if scheme is None or (isinstance(scheme, str) and scheme.lower() == "none"):
            return
        name = {"lora": "LoRA", "dora": "DoRA"}.get(str(scheme).lower(), _short(scheme) or str(scheme))
    if name not in ("LoRA", "DoRA"):
        d.note(
            "training",
            f"not modelled: PEFT ({name}: frozen base weights, adapters trained); priced as full training",
        )
        return
    d.set("training.peft", "lora", f"peft {name}" + (" (priced as LoRA)" if name == "DoRA" else ""))
    dim = peft.get("dim") if isinstance(peft, Rec) else None
    if isinstance(dim, int) and not isinstance(dim, bool) and dim >= 1:
        d.set("training.lora_rank", dim, f"{name}.dim")
    else:
        d.note(
            "training", f"lora_rank: {name}.dim not read here; LoRA's default ({LORA_DEFAULT_RANK}) priced"
        )
    targets = peft.get("target_modules") if isinstance(peft, Rec) else None
    if isinstance(targets, list) and targets and all(t in LORA_TARGETS for t in targets):
        d.set("training.lora_targets", list(dict.fromkeys(targets)), f"{name}.target_modules")
    elif targets is not None:
        d.note("training", f"not mapped: {name}.target_modules = {targets!r}; all four linears priced")


def draft_from_recipe(
    path: str | os.PathLike, config: str | None, *, gpus: int | None = None, node: int = 8
) -> Draft:
    """The draft scenario of the recipe function ``config`` of the file at ``path``."""
    text, name = read_text(path)
    m = parse_tree(text, name, lambda p: read_text(p)[0])
    jobs = [f for f in registry_functions(m) if re.search(r"config$|recipe", f)] or registry_functions(m)
    if config is None:
        listed = ", ".join(jobs[:6]) + (f", ... ({len(jobs)} in all)" if len(jobs) > 6 else "")
        raise ConfigError(name, f"--config NAME: which recipe function to import ({listed or 'none here'})")
    if config not in m.functions:
        import difflib

        close = difflib.get_close_matches(config, jobs, n=3, cutoff=0.6)
        raise ConfigError(
            name,
            f"--config {config}: no such function"
            + (f" (did you mean {', '.join(close)}?)" if close else ""),
        )
    value = evaluate(m, config)
    d = Draft(kind="megatron", file=name)
    if isinstance(value, Rec) and _short(value) == "ConfigContainer":
        fields, stack = _bridge(value, name), "Megatron-Bridge"
    elif isinstance(value, Rec) and value.name.endswith("Partial"):
        fields, stack = _nemo(value, name), "NeMo 2"
    elif isinstance(value, Rec) and not value.name.endswith(("Config", "Container")):
        raise ConfigError(
            name,
            f"{config}() returns {value.name}(...), which is not defined in the files read "
            "(the recipe's source tree); import the file that defines it",
        )
    else:
        raise ConfigError(
            name,
            f"{config}() returns {_short(value) or value!s:.60}, not a ConfigContainer or run.Partial recipe",
        )
    d.header = [
        f"Scenario imported from the {stack} recipe {config}() in {os.path.basename(name)} by "
        "`shardmeter import megatron --config`, read without running it.",
        "Each key says the field it came from (Megatron-Core's names); fields with no scenario key are comments.",
    ]
    _map(fields, d, name, config, gpus, node)
    for n in m.notes:
        d.note("source", n)
    d.set("source.imported_from", f"{stack} recipe {config}() ({os.path.basename(name)})")
    return d


def _fields(rec: Any) -> dict[str, Any]:
    return dict(rec.fields) if isinstance(rec, Rec) else {}


def _bridge(cfg: Rec, file: str) -> dict[str, Any]:
    """A ``ConfigContainer`` as Megatron-Core fields (``_model``: the model's source)."""
    model = cfg.get("model")
    out: dict[str, Any] = {"_model": model}
    for part in ("train", "dataset", "ddp"):
        out.update(_fields(cfg.get(part)))
    out.update({k: v for k, v in _fields(model).items()})
    prec = cfg.get("mixed_precision")
    out["_precision"] = prec if isinstance(prec, str) else _short(prec)
    comm = cfg.get("comm_overlap")
    out["tp_comm_overlap"] = _fields(comm).get("tp_comm_overlap", False)
    peft = cfg.get("peft")
    if peft is not None and not isinstance(peft, Opaque):
        out["_peft"] = peft
    tok = _fields(cfg.get("tokenizer"))
    if isinstance(tok.get("vocab_size"), int):
        out.setdefault("_tokenizer_vocab", tok["vocab_size"])
    return out


def _nemo(recipe: Rec, file: str) -> dict[str, Any]:
    """A NeMo 2 ``run.Partial`` recipe as Megatron-Core fields."""
    model = recipe.get("model")
    config = _fields(model).get("config", model)
    trainer = _fields(recipe.get("trainer"))
    made_here = isinstance(config, Rec) and isinstance(model, Rec) and config.name == f"{model.name}.config"
    out: dict[str, Any] = {
        "_model": model if made_here else config
    }  # recipe.model.config.x = ... on a factory's model
    out.update(_fields(config))
    out.update(_fields(trainer.get("strategy")))
    out.update(_fields(out.pop("ddp", None)))
    out.update(_fields(recipe.get("data")))
    optim = _fields(
        recipe.get("optim")
    )  # MegatronOptimizerModule(config=OptimizerConfig(use_distributed_optimizer))
    opt = _fields(optim.get("config"))
    if "use_distributed_optimizer" in opt:
        out["use_distributed_optimizer"] = opt["use_distributed_optimizer"]
    out["train_iters"] = trainer.get("max_steps")
    out["_nodes"], out["_devices"] = trainer.get("num_nodes"), trainer.get("devices")
    plugins = trainer.get("plugins")
    out["_precision"] = _fields(plugins).get("precision") or _short(plugins)
    for cb in trainer.get("callbacks") or []:
        if _short(cb) == "MegatronCommOverlapCallback":
            out["tp_comm_overlap"] = _fields(cb).get("tp_comm_overlap", False)
    return out


def _int(f: dict[str, Any], key: str, file: str, default: Any = None) -> Any:
    v = f.get(key, default)
    if isinstance(v, BadNumber):
        return number(v.value, field=key, file=file, integer=True)
    if v is None or isinstance(v, (Opaque, Rec, str, list, dict)):
        return default
    return int(number(v, field=key, file=file, integer=True, minimum=0))


def _model_source(src: Any, file: str, fn: str) -> tuple[dict[str, Any], str]:
    """The ``[model]`` keys the recipe's model comes from, and where."""
    chain = src.chain() if isinstance(src, Rec) else []
    hf = next((r for r in chain if r.name.endswith("from_hf_pretrained")), None)
    if hf is not None:
        hid = hf.args[0] if hf.args else hf.get("hf_path")
        where = HF_MODELS.get(hid) if isinstance(hid, str) else None
        if where is None:
            raise ConfigError(
                file,
                f"{fn}(): the model is the Hugging Face checkpoint {hid!s:.60} (AutoBridge.from_hf_pretrained), "
                "whose shape is not bundled: give its config.json with --set model.hf_config=PATH",
            )
        return _keys(where), f"AutoBridge.from_hf_pretrained({hid!r})"
    name = _short(src)
    fields = _fields(src)
    if (
        "hybrid_override_pattern" in fields
        or any(k.startswith("mamba_") for k in fields)
        or "NemotronH" in name
    ):
        raise ConfigError(
            file,
            f"{fn}(): {name} is a hybrid Mamba-attention model (hybrid_override_pattern): its SSM layers are "
            "not modelled, so this recipe does not import",
        )
    key = fields.get("version") if name.endswith("qwen3_model") else name
    if isinstance(key, str) and key in NEMO_CONFIGS:
        return _keys(NEMO_CONFIGS[key]), f"NeMo {key}"
    if name.endswith("ModelProvider") and "num_layers" in _fields(src):
        return {}, name
    raise ConfigError(
        file,
        f"{fn}(): the model {name or src!s:.60} has no bundled shape: give it with --set model.preset=NAME "
        "or --set model.hf_config=PATH",
    )


def _keys(where: tuple[str, ...]) -> dict[str, Any]:
    if where[0] == "preset":
        return {"preset": where[1]}
    got = model_keys(where[1], where[2], era="registry")
    assert got is not None, where  # the tables above name shipped flavours
    return dict(got[0])


def _map(f: dict[str, Any], d: Draft, file: str, fn: str, gpus: int | None, node: int) -> None:
    model, src = _model_source(f.get("_model"), file, fn)
    for k, v in model.items():
        d.set(f"model.{k}", v, src)
    for field, key in _MODEL_FIELDS.items():
        v = _int(f, field, file)
        if v:
            d.set(f"model.{key}", v, f"{field}" + (" (over the model's own)" if model else ""))
    if d.get("model.vocab") is None and d.get("model.preset") is None:
        from shardmeter.importers.megatron_model import padded_vocab

        vocab = _int(f, "_tokenizer_vocab", file)
        if vocab:
            tp = _int(f, "tensor_model_parallel_size", file, 1) or 1
            d.set(
                "model.vocab",
                padded_vocab(vocab, 128, tp),
                f"tokenizer vocab_size {vocab} padded to 128 x tp",
            )
        else:
            d.need(
                "model.vocab",
                "the tokenizer's vocabulary is not in the recipe: --set model.vocab=N",
                "model.vocab",
            )
    seq = _int(f, "seq_length", file) or _int(f, "sequence_length", file)
    if seq:
        d.set("model.seq_len", seq, "seq_length")
    deg = {}
    for field, key in (
        ("tensor_model_parallel_size", "tp"),
        ("pipeline_model_parallel_size", "pp"),
        ("context_parallel_size", "cp"),
        ("expert_model_parallel_size", "ep"),
    ):
        deg[key] = _int(f, field, file, 1) or 1
        if deg[key] > 1:
            d.set(f"parallelism.{key}", deg[key], field)
    etp = _int(f, "expert_tensor_parallel_size", file)
    if etp and etp != deg["tp"]:
        d.set("parallelism.expert_tp", etp, "expert_tensor_parallel_size")
    vp = _int(f, "virtual_pipeline_model_parallel_size", file)
    if vp and vp > 1 and deg["pp"] > 1:
        d.set("parallelism.schedule", "interleaved", "virtual_pipeline_model_parallel_size")
        d.set("parallelism.virtual_stages", vp, "virtual_pipeline_model_parallel_size")
    if f.get("sequence_parallel") is True:
        d.set("parallelism.sequence_parallel", True, "sequence_parallel")
    if f.get("_peft") is not None:
        _peft(f["_peft"], d)
    _world(f, d, deg, file, fn, gpus, node)
    _sharding(f, d)
    _training(f, d, file)
    _unmapped(f, d)


#: The Megatron-Core fields :func:`_map` reads (the others are listed as not mapped).
_READ = {
    *_MODEL_FIELDS, "seq_length", "sequence_length", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "context_parallel_size", "expert_model_parallel_size", "virtual_pipeline_model_parallel_size",
    "sequence_parallel", "use_megatron_fsdp", "fsdp", "data_parallel_sharding_strategy",
    "use_distributed_optimizer", "tp_comm_overlap", "overlap_grad_reduce", "micro_batch_size",
    "global_batch_size", "recompute_granularity", "recompute_method", "recompute_num_layers", "train_iters",
    "recompute_modules",
    "mtp_num_layers",
}  # fmt: skip


def _unmapped(f: dict[str, Any], d: Draft) -> None:
    from shardmeter.importers.settings import shown

    for key, value in f.items():
        if key.startswith("_") or key in _READ or value is None:
            continue
        text = (
            value.text
            if isinstance(value, Opaque)
            else f"{_short(value)}(...)"
            if isinstance(value, Rec)
            else shown(value)
        )
        d.unmapped("source", f"{key} = {text}")


def _world(
    f: dict[str, Any], d: Draft, deg: dict[str, int], file: str, fn: str, gpus: int | None, node: int
) -> None:
    import math

    unit = deg["tp"] * deg["pp"] * math.lcm(deg["cp"], deg["ep"])
    nodes, devices = _int(f, "_nodes", file), _int(f, "_devices", file)
    named = re.search(r"_(\d+)gpu_([a-z0-9]+)", fn)
    fixed = deg["tp"] * deg["pp"] * deg["cp"]
    if gpus is not None:
        if gpus % fixed:
            raise ConfigError(file, f"--gpus {gpus}: not a multiple of tp x pp x cp = {fixed}")
        d.world, d.dp, d.world_why = gpus, gpus // fixed, "--gpus"
        return
    candidates = []
    if nodes and devices:
        candidates.append((nodes * devices, f"trainer num_nodes {nodes} x devices {devices}"))
    if named:
        candidates.append(
            (int(named.group(1)), f"the recipe's name: {named.group(1)} {named.group(2).upper()} GPUs")
        )
    for world, why in candidates:
        if world % unit == 0:
            d.world, d.dp, d.world_why = world, world // fixed, f"{why}; give --gpus N"
            return
        d.note("island", f"{why} do not hold tp x pp x lcm(cp, ep) = {unit}")
    world = math.lcm(node, unit)
    d.world, d.dp = world, world // fixed
    d.world_why = f"tp x pp x lcm(cp, ep) on whole {node}-GPU nodes; give --gpus N"


def _sharding(f: dict[str, Any], d: Draft) -> None:
    if f.get("use_megatron_fsdp") is True or f.get("fsdp") == "megatron":
        strategy = f.get("data_parallel_sharding_strategy", "optim_grads_params")
        zero = {"no_shard": "none", "optim": "zero1", "optim_grads": "zero2", "optim_grads_params": "zero3"}
        d.set("parallelism.sharding", zero.get(str(strategy), "zero3"), f"use_megatron_fsdp ({strategy})")
    elif f.get("fsdp") == "pytorch":
        d.set("parallelism.sharding", "fsdp", "fsdp = 'pytorch' (FSDP2)")
    elif f.get("use_distributed_optimizer") is True:
        d.set("parallelism.sharding", "zero1", "use_distributed_optimizer (optimizer state sharded over dp)")
    else:
        d.set("parallelism.sharding", "none", "Megatron's DDP (no distributed optimizer)")
    if f.get("tp_comm_overlap") is True:
        d.set("parallelism.tp_comm_overlap", True, "tp_comm_overlap")
    if f.get("overlap_grad_reduce") is True:
        d.set("parallelism.dp_comm_overlap", True, "overlap_grad_reduce")


def _training(f: dict[str, Any], d: Draft, file: str) -> None:
    mbs = _int(f, "micro_batch_size", file, 1) or 1
    d.set("training.micro_batch", mbs, "micro_batch_size")
    d.set(
        "training.fused_loss",
        True,
        "Megatron's vocab_parallel_cross_entropy writes the gradient into its saved softmax",
    )
    fusion = f.get("gradient_accumulation_fusion")
    if isinstance(fusion, bool):
        d.set("training.grad_accumulation_fusion", fusion, f"gradient_accumulation_fusion = {fusion}")
    gbs = _int(f, "global_batch_size", file)
    if gbs:
        d.set("training.global_batch", gbs, "global_batch_size")
    else:
        d.set("training.global_batch", mbs * d.dp, f"micro_batch_size x dp ({d.dp})")
    name = str(f.get("_precision") or "bf16_mixed").rsplit(".", 1)[-1]
    prec, recipe = _PRECISIONS.get(name, ("bf16", None))
    if name not in _PRECISIONS:
        d.unmapped(
            "training",
            f"mixed_precision = {name}",
            "priced as bf16" + (" (NVFP4 not modelled yet)" if "fp4" in name else ""),
        )
    d.set("training.precision", prec, f"mixed_precision {name}")
    if recipe:
        d.planned("training.fp8_recipe", f'"{recipe}"', f"mixed_precision {name}")
        d.set("training.fp8_backend", "transformer-engine", "Megatron's fp8 linears are Transformer Engine's")
    gran = f.get("recompute_granularity")
    if gran in ("full", "selective"):
        d.set("training.recompute", gran, "recompute_granularity")
        layers = _int(f, "recompute_num_layers", file)
        if gran == "full" and f.get("recompute_method") == "block" and layers:
            d.set("training.recompute_layers", layers, "recompute_method block, recompute_num_layers")
        mods = f.get("recompute_modules")
        if gran == "selective" and isinstance(mods, list):
            recompute_modules(mods, d, "recompute_modules")
    iters, seq = _int(f, "train_iters", file), d.get("model.seq_len")
    gb = d.get("training.global_batch")
    if iters and isinstance(seq, int) and isinstance(gb, int) and iters * gb * seq <= 1e18:
        d.set("training.tokens", float(iters * gb * seq), "train_iters x global batch x seq_length")
    if f.get("mtp_num_layers"):
        d.note("model", f"not modelled: mtp_num_layers = {f['mtp_num_layers']} (multi-token prediction)")
