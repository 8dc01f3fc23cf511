"""``shardmeter import torchtitan JOB.toml``: a torchtitan job configuration as a scenario.

What is read, and from where in torchtitan (github.com/pytorch/torchtitan at commit 238fa99,
2026-02-23, the last release with TOML job files; ``torchtitan/config/job_config.py`` for the
defaults):

* ``[model] name/flavor`` -> the model's shape, from ``torchtitan/models/llama3/__init__.py``
  (``llama3_args``) and ``model/args.py`` (defaults: ``n_kv_heads = n_heads``,
  ``vocab_size = 128256``, the Llama 3 tokenizer's, ``multiple_of = 256``); the SwiGLU width by
  ``FeedForward``'s rounding (:func:`ffn_hidden`). Llama 3 ties no embeddings.
* ``[parallelism]``: ``data_parallel_shard_degree`` (``-1``: the GPUs left over) is FSDP, HSDP
  with ``data_parallel_replicate_degree > 1``, DDP (``sharding = "none"``) when it is 1;
  ``tensor_parallel_degree`` with sequence parallelism (torchtitan's TP plan shards the norms'
  activations: ``SequenceParallel``); ``pipeline_parallel_degree`` and ``_schedule``
  (``Interleaved1F1B`` with 2 stages per rank unless ``pipeline_parallel_layers_per_stage``
  says otherwise, as ``pipeline_llm`` does); ``context_parallel_degree``,
  ``expert_parallel_degree``.
* ``[training]``: ``global_batch_size`` (``-1``: ``local_batch_size`` x the data-parallel
  degree, as ``train.py`` computes it), the micro-batch (``local_batch_size``, or
  ``pipeline_parallel_microbatch_size`` with PP), ``seq_len``, ``steps`` (x tokens per step ->
  ``training.tokens``); the precision as ``maybe_enable_amp`` applies it
  (``mixed_precision_param`` under FSDP or DDP, ``training.dtype`` under TP/PP alone), fp8 from
  ``[model] converters = ["float8"]`` (or the 2024 ``[float8] enable_float8_linear``).
* ``[activation_checkpoint] mode`` and ``[optimizer] name``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from shardmeter.importers.draft import Draft
from shardmeter.importers.files import ConfigError, read_toml
from shardmeter.importers.settings import Settings, shown

__all__ = [
    "draft_from_file",
    "draft_from_config",
    "LLAMA3_FLAVOURS",
    "ffn_hidden",
    "llama3_model",
    "stage_layers",
]

#: torchtitan's ``llama3_args`` (torchtitan/models/llama3/__init__.py, commit 238fa99): the keys
#: a flavour sets; the others take ``TransformerModelArgs``' defaults.
LLAMA3_FLAVOURS: dict[str, dict[str, Any]] = {
    "debugmodel": {"dim": 256, "n_layers": 6, "n_heads": 16, "vocab_size": 2048},
    "8B": {
        "dim": 4096,
        "n_layers": 32,
        "n_heads": 32,
        "n_kv_heads": 8,
        "ffn_dim_multiplier": 1.3,
        "multiple_of": 1024,
    },
    "70B": {
        "dim": 8192,
        "n_layers": 80,
        "n_heads": 64,
        "n_kv_heads": 8,
        "ffn_dim_multiplier": 1.3,
        "multiple_of": 4096,
    },
    "405B": {
        "dim": 16384,
        "n_layers": 126,
        "n_heads": 128,
        "n_kv_heads": 8,
        "ffn_dim_multiplier": 1.2,
        "multiple_of": 4096,
    },
}
#: Flavour suffixes that change only the attention kernel or mask (``8B_flex``, ``debugmodel_varlen_attn``).
_ATTENTION_SUFFIXES = ("_flex_attn", "_varlen_attn", "_flex", "_varlen")
#: ``TransformerModelArgs``' defaults (torchtitan/models/llama3/model/args.py).
_ARG_DEFAULTS = {"vocab_size": 128256, "multiple_of": 256, "ffn_dim_multiplier": None}

#: torchtitan pipeline schedules -> (schedule, looped: several stages per rank).
_SCHEDULES = {"1f1b": ("1f1b", False), "gpipe": ("gpipe", False), "interleaved1f1b": ("interleaved", True)}

#: Tables whose settings change nothing the model prices (logging, checkpoints, data, validation).
_NOT_MODELLED = {
    "job",
    "profiling",
    "metrics",
    "checkpoint",
    "lr_scheduler",
    "validation",
    "comm",
    "fault_tolerance",
    "experimental",
    "debug",
    "memory_estimation",
}
#: Where the comment on an unread setting of each torchtitan table goes.
_NOTE_TABLE = {"model": "model", "parallelism": "parallelism"}


def ffn_hidden(dim: int, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    """torchtitan's ``FeedForward`` width: ``int(2 * 4 dim / 3)``, times ``ffn_dim_multiplier``
    (truncated), rounded up to a multiple of ``multiple_of`` (Llama 3 8B: 14336)."""
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def llama3_model(flavor: str) -> dict[str, Any] | None:
    """The ``[model]`` keys of a torchtitan Llama 3 flavour (``None`` if unknown)."""
    base = flavor
    for suffix in _ATTENTION_SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    if base not in LLAMA3_FLAVOURS:
        return None
    a = {**_ARG_DEFAULTS, **LLAMA3_FLAVOURS[base]}
    return {
        "layers": a["n_layers"],
        "hidden": a["dim"],
        "heads": a["n_heads"],
        "kv_heads": a.get("n_kv_heads") or a["n_heads"],
        "ffn_hidden": ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"]),
        "ffn": "swiglu",
        "vocab": a["vocab_size"],
        "tied_embeddings": False,
    }


def draft_from_file(path: str | os.PathLike, *, gpus: int | None = None, node: int = 8) -> Draft:
    """The draft scenario of the torchtitan job TOML at ``path`` (see :func:`draft_from_config`)."""
    cfg, name = read_toml(path)
    return draft_from_config(cfg, name, gpus=gpus, node=node)


def _int(s: Settings, path: str, default: int, file: str) -> int:
    v = s.take(path, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(file, f"{path}: expected an integer, got {shown(v)}")
    return v


def draft_from_config(cfg: Mapping[str, Any], file: str, *, gpus: int | None = None, node: int = 8) -> Draft:
    """A :class:`Draft` of a torchtitan job configuration's tables.

    :param gpus: the world size (``--gpus``); without it, the fewest whole ``node``-GPU nodes
        that hold the fixed degrees (one node at least: torchtitan's ``run_train.sh`` runs
        ``NGPU=8`` by default)."""
    if not isinstance(cfg.get("model", {}), Mapping) or not any(
        isinstance(cfg.get(t), Mapping) for t in ("model", "training", "parallelism")
    ):
        raise ConfigError(file, "not a torchtitan job file (no [model], [training] or [parallelism] table)")
    s = Settings(cfg)
    d = Draft(kind="torchtitan", file=file)
    d.header = [
        f"Scenario imported from the torchtitan job {os.path.basename(file)} by `shardmeter import torchtitan`.",
        "Each key says the setting it came from; settings with no scenario key are comments.",
        "torchtitan defaults: torchtitan/config/job_config.py (github.com/pytorch/torchtitan).",
    ]
    _model(s, d, file)
    world = _parallelism(s, d, file, gpus, node)
    _training(s, d, file, world)
    _unread(s, d)
    return d


def _model(s: Settings, d: Draft, file: str) -> None:
    name = s.take("model.name", "llama3")
    flavor = s.take("model.flavor", "debugmodel")
    model = llama3_model(str(flavor)) if name == "llama3" else None
    if model is None:
        known = ", ".join(LLAMA3_FLAVOURS)
        d.unmapped(
            "model",
            f"[model] name = {shown(name)}, flavor = {shown(flavor)}",
            f"known: llama3 {known}; write layers, hidden, heads, kv_heads, ffn_hidden, ffn and vocab",
        )
    else:
        src = f"torchtitan llama3 {flavor}"
        for k, v in model.items():
            d.set(f"model.{k}", v, f"{src}")
        d.why["model.ffn_hidden"] = f"{src}: FeedForward rounding of 8/3 dim"
        d.why["model.vocab"] = f"{src}: vocab_size" + (
            " (Llama 3 tokenizer)" if model["vocab"] == 128256 else ""
        )
        base = str(flavor)
        if base.endswith(_ATTENTION_SUFFIXES):
            d.unmapped(
                "model", f"flavor {flavor}: its attention kernel/mask", "priced as causal flash attention"
            )
    seq = s.take("training.seq_len", 2048)
    d.set("model.seq_len", seq, "[training] seq_len")
    for key in ("hf_assets_path", "tokenizer_path"):
        if s.has(f"model.{key}"):
            d.unmapped(
                "model",
                f"[model] {key} = {shown(s.take(f'model.{key}'))}",
                "the flavour gives the vocabulary",
            )


def _degrees(s: Settings, file: str) -> dict[str, int]:
    p = "parallelism."
    return {
        "replicate": _int(s, p + "data_parallel_replicate_degree", 1, file),
        "shard": _int(s, p + "data_parallel_shard_degree", -1, file),
        "tp": _int(s, p + "tensor_parallel_degree", 1, file),
        "pp": _int(s, p + "pipeline_parallel_degree", 1, file),
        "cp": _int(s, p + "context_parallel_degree", 1, file),
        "ep": _int(s, p + "expert_parallel_degree", 1, file),
    }


def _world(g: dict[str, int], gpus: int | None, node: int, file: str) -> tuple[int, int]:
    """(world size, data_parallel_shard_degree) as torchtitan's ``ParallelDims`` resolves them."""
    for k in ("replicate", "tp", "pp", "cp"):
        if g[k] < 1:
            raise ConfigError(file, f"parallelism: a degree must be >= 1, got {g[k]}")
    if g["shard"] == 0 or g["shard"] < -1:
        raise ConfigError(
            file, f"parallelism.data_parallel_shard_degree: expected -1 or >= 1, got {g['shard']}"
        )
    fixed = g["replicate"] * g["tp"] * g["pp"] * g["cp"]
    if g["shard"] > 0:
        need = fixed * g["shard"]
        if gpus is not None and gpus != need:
            raise ConfigError(
                file,
                f"--gpus {gpus}: the job's degrees use {need} GPUs (replicate x shard x tp x pp x cp; "
                "torchtitan requires their product to be the world size)",
            )
        return need, g["shard"]
    world = gpus if gpus is not None else max(node, node * math.ceil(fixed / node))
    if world % fixed:
        raise ConfigError(
            file,
            f"--gpus {world}: not a multiple of replicate x tp x pp x cp = {fixed}, so "
            "data_parallel_shard_degree = -1 has no whole value",
        )
    return world, world // fixed


def _parallelism(s: Settings, d: Draft, file: str, gpus: int | None, node: int) -> int:
    g = _degrees(s, file)
    world, shard = _world(g, gpus, node, file)
    d.world = world
    d.world_why = (
        "--gpus"
        if gpus is not None
        else (f"{world} GPUs: the fixed degrees' product on whole {node}-GPU nodes; give --gpus N")
    )
    rep = g["replicate"]
    d.dp = rep * shard
    for k, key in (
        ("tp", "tensor_parallel_degree"),
        ("pp", "pipeline_parallel_degree"),
        ("cp", "context_parallel_degree"),
        ("ep", "expert_parallel_degree"),
    ):
        if g[k] != 1:
            d.set(f"parallelism.{k}", g[k], f"{key}")
    shard_src = "data_parallel_shard_degree" + (" = -1: the GPUs left over" if g["shard"] == -1 else "")
    if shard > 1 and rep > 1:
        d.set("parallelism.sharding", "hsdp", f"{shard_src} ({shard}) x replicate {rep}")
        d.note(
            "parallelism",
            f"hsdp shards inside a node and replicates across nodes; torchtitan shards over "
            f"{shard} ranks and replicates {rep} times",
        )
    elif shard > 1:
        d.set("parallelism.sharding", "fsdp", f"{shard_src} ({shard}): FSDP2 fully_shard")
    else:
        d.set(
            "parallelism.sharding",
            "none",
            "data_parallel_shard_degree 1: " + ("DDP" if rep > 1 else "no data parallelism"),
        )
    if g["shard"] > 0 or gpus is None:
        d.set("parallelism.dp", rep * shard, "replicate x shard" if g["shard"] > 0 else shard_src)
    if g["tp"] > 1:
        d.set("parallelism.sequence_parallel", True, "torchtitan's TP plan (SequenceParallel norms)")
    reshard = s.take("parallelism.fsdp_reshard_after_forward", "default")
    if reshard != "default":
        d.unmapped(
            "parallelism",
            f"fsdp_reshard_after_forward = {shown(reshard)}",
            "ShardMeter's fsdp reshards after forward",
        )
    if s.take("parallelism.enable_async_tensor_parallel", False):
        d.planned("parallelism.async_tp", "true", "enable_async_tensor_parallel")
    _schedule(s, d, g, file)
    return world


def _schedule(s: Settings, d: Draft, g: dict[str, int], file: str) -> None:
    p = "parallelism."
    name = s.take(p + "pipeline_parallel_schedule", "1F1B")
    per_stage = s.take(p + "pipeline_parallel_layers_per_stage")
    first = s.take(p + "pipeline_parallel_first_stage_less_layers", 1)
    last = s.take(p + "pipeline_parallel_last_stage_less_layers", 1)
    if g["pp"] == 1:
        if s.has(p + "pipeline_parallel_schedule"):
            d.note(
                "parallelism",
                f"ignored: pipeline_parallel_schedule = {shown(name)} (pipeline_parallel_degree = 1)",
            )
        return
    known = _SCHEDULES.get(str(name).lower())
    if known is None:
        d.unmapped(
            "parallelism",
            f"pipeline_parallel_schedule = {shown(name)}",
            "no bundled schedule; priced as 1f1b (a plugin may add it: examples/plugins/shardmeter-zero-bubble)",
        )
        return
    schedule, looped = known
    d.set("parallelism.schedule", schedule, f"pipeline_parallel_schedule = {shown(name)}")
    if looped:
        layers = d.get("model.layers")
        if isinstance(per_stage, int) and per_stage > 0 and isinstance(layers, int):
            stages = math.ceil((layers + first + last) / per_stage)
            d.set(
                "parallelism.virtual_stages", max(2, stages // g["pp"]), "pipeline_parallel_layers_per_stage"
            )
        else:
            d.set(
                "parallelism.virtual_stages",
                2,
                "torchtitan's default for a looped schedule: 2 stages per rank",
            )
    layers = d.get("model.layers")
    v = d.get("parallelism.virtual_stages", 1)
    if isinstance(layers, int) and (first or last):
        split = stage_layers(g["pp"] * v, layers, first, last)
        if split:
            d.planned("parallelism.first_stage_layers", str(split[0]), f"first_stage_less_layers = {first}")
            d.planned("parallelism.last_stage_layers", str(split[-1]), f"last_stage_less_layers = {last}")


def stage_layers(stages: int, layers: int, input_weight: int, output_weight: int) -> list[int]:
    """Transformer layers per pipeline stage as torchtitan's ``generate_llm_fqn_per_model_part``
    splits them: the embedding counts as ``input_weight`` layers and the output as
    ``output_weight``, the remainder goes to the first stages (``[]`` where torchtitan refuses)."""
    effective = layers + input_weight + output_weight
    if stages < 2 or stages > effective:
        return []
    per, extra = divmod(effective, stages)
    if input_weight > per or output_weight > per:
        return []
    out, used = [], 0
    for i in range(stages):
        want = per + (1 if i < extra else 0) - (input_weight if i == 0 else 0)
        if i == stages - 1:
            out.append(layers - used)
            break
        n = min(max(want, 0), layers - used)
        out.append(n)
        used += n
    return out


def _precision(s: Settings, d: Draft, g_fsdp: bool, tp_or_pp: bool) -> None:
    converters = s.take("model.converters", [])
    converters = converters if isinstance(converters, list) else [converters]
    old_fp8 = s.take("float8.enable_float8_linear", False)
    fp8 = old_fp8 or any("float8" in str(c) for c in converters)
    mx = any(str(c).startswith(("mx", "quantize.linear.mx")) for c in converters)
    param = s.take("training.mixed_precision_param", "bfloat16")
    dtype = s.take("training.dtype", "float32")
    if g_fsdp or not tp_or_pp:
        word, src = param, "mixed_precision_param (" + ("fully_shard" if g_fsdp else "autocast") + ")"
    else:
        word, src = dtype, "training.dtype (torchtitan applies no mixed precision under TP/PP without FSDP)"
    precision = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}.get(str(word), "bf16")
    if fp8 or mx:
        d.set(
            "training.precision",
            "fp8",
            "model.converters: " + ", ".join(str(c) for c in converters)
            if converters
            else "[float8] enable_float8_linear",
        )
    else:
        d.set("training.precision", precision, src)
    recipe = s.take("quantize.linear.float8.recipe_name") or s.take("float8.recipe_name")
    if mx:
        d.planned("training.fp8_recipe", '"mxfp8"', "torchao MX converter")
    elif fp8 and recipe:
        d.planned("training.fp8_recipe", shown(recipe), "recipe_name")
    for path in (
        "quantize.linear.float8.enable_fsdp_float8_all_gather",
        "float8.enable_fsdp_float8_all_gather",
    ):
        if s.take(path, False) and fp8:
            d.planned("training.fp8_params", "true", path)


def _training(s: Settings, d: Draft, file: str, world: int) -> None:
    pp = d.get("parallelism.pp", 1)
    dp = d.dp
    local = _int(s, "training.local_batch_size", 8, file)
    gbs = _int(s, "training.global_batch_size", -1, file)
    if local < 1:
        raise ConfigError(file, f"training.local_batch_size: expected >= 1, got {local}")
    if gbs < 0:
        gbs, why = local * dp, f"global_batch_size -1: local_batch_size {local} x data-parallel degree {dp}"
    else:
        why = "[training] global_batch_size"
        if gbs == 0 or gbs % (local * dp):
            raise ConfigError(
                file,
                f"training.global_batch_size {gbs} is not a multiple of local_batch_size {local} x "
                f"data-parallel degree {dp} (torchtitan asserts it)",
            )
    d.set("training.global_batch", gbs, why)
    d.set(
        "training.framework", "torchtitan", "a torchtitan job: its profile fills what the config leaves out"
    )
    if pp > 1:
        mbs = _int(s, "parallelism.pipeline_parallel_microbatch_size", 1, file)
        if mbs < 1 or local % mbs:
            raise ConfigError(
                file,
                f"parallelism.pipeline_parallel_microbatch_size {mbs} does not divide local_batch_size {local}",
            )
        d.set("training.micro_batch", mbs, "pipeline_parallel_microbatch_size")
    else:
        s.take("parallelism.pipeline_parallel_microbatch_size")
        acc = gbs // (local * dp)
        d.set(
            "training.micro_batch",
            local,
            "local_batch_size" + (f" ({acc} accumulation steps)" if acc > 1 else ""),
        )
    fsdp = d.get("parallelism.sharding") in ("fsdp", "hsdp") or d.get("parallelism.cp", 1) > 1
    _precision(s, d, fsdp, d.get("parallelism.tp", 1) > 1 or pp > 1)
    _recompute(s, d)
    name = s.take("optimizer.name", "AdamW")
    opt = {"adamw": "adamw", "adam": "adam", "sgd": "sgd"}.get(str(name).lower())
    if opt:
        d.set("training.optimizer", opt, "[optimizer] name")
    else:
        d.unmapped("training", f"[optimizer] name = {shown(name)}", "priced as Adam")
    if s.take("compile.enable", False):
        d.planned("training.compile", "true", "[compile] enable")
    else:
        d.planned("training.compile", "false", "[compile] enable = false: eager PyTorch")
    s.take("compile.components")
    steps = _int(s, "training.steps", 10000, file)
    seq = d.get("model.seq_len")
    if steps > 0 and isinstance(seq, int):
        d.set("training.tokens", float(steps * gbs * seq), f"steps {steps} x global batch x seq_len")
    dataset = s.take("training.dataset", "c4_test")
    d.set("source.imported_from", f"torchtitan job {os.path.basename(file)}")
    d.set("source.dataset", str(dataset), "[training] dataset")
    desc = s.take("job.description")
    if isinstance(desc, str):
        d.set("source.title", desc, "[job] description")


def _recompute(s: Settings, d: Draft) -> None:
    mode = s.take("activation_checkpoint.mode", "selective")
    option = str(s.take("activation_checkpoint.selective_ac_option", "2"))
    if mode in ("none", "full"):
        d.set("training.recompute", mode, f"[activation_checkpoint] mode = {shown(mode)}")
    elif mode == "selective" and option == "op":
        d.set("training.recompute", "op", 'selective_ac_option = "op": per-operator selective checkpointing')
    elif mode == "selective" and option.isdigit() and int(option) >= 1:
        k = int(option)
        d.set(
            "training.recompute", "full", f'selective_ac_option = "{k}": every {k}th layer fully recomputed'
        )
        layers, pp = d.get("model.layers"), d.get("parallelism.pp", 1)
        if isinstance(layers, int) and isinstance(pp, int) and layers // pp >= k:
            d.set("training.recompute_layers", layers // pp // k, f"1 in {k} layers of each stage")
        else:
            d.planned("training.recompute_layers", "...", f"1 in {k} layers of each stage")
    else:
        d.unmapped("training", f"[activation_checkpoint] mode = {shown(mode)}", "priced without recompute")


def _unread(s: Settings, d: Draft) -> None:
    for table, items in s.unread().items():
        if table in _NOT_MODELLED or table == "":
            d.note("source", f"not modelled [{table}]: " + ", ".join(items))
        else:
            for item in items:
                d.unmapped(_NOTE_TABLE.get(table, "training"), f"[{table}] {item}")
