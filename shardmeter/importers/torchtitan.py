"""``shardmeter import torchtitan JOB.toml`` (or ``config_registry.py --config NAME``): a
torchtitan job as a scenario.

The job TOML of torchtitan up to commit 238fa99 (2026-02-23, the last with TOML job files;
``torchtitan/config/job_config.py`` for the defaults), in its older layouts too (before
2025-06: ``[training] batch_size``, the degrees under ``[training]`` and ``[experimental]``,
``[training] compile``), and a ``config_registry.py`` function, read without running it
(:mod:`.torchtitan_registry`), which gives the same settings. What is read:

* ``[model] name / flavor`` -> the model's shape from torchtitan's own flavour tables
  (:mod:`.torchtitan_models`), else from a ``config.json`` under ``hf_assets_path``.
* the parallel layout (:mod:`.torchtitan_layout`).
* ``[training]``: ``global_batch_size`` (``-1``: ``local_batch_size`` x the data-parallel
  degree, as ``train.py`` computes it), the micro-batch (``local_batch_size``, or
  ``pipeline_parallel_microbatch_size`` with PP), ``seq_len``, ``steps`` (x tokens per step ->
  ``training.tokens``); the precision as ``maybe_enable_amp`` applies it
  (``mixed_precision_param`` under FSDP or DDP, ``training.dtype`` under TP/PP alone); the
  converters: float8 (``fp8_recipe`` from ``recipe_name``), MXFP8 (``fp8_recipe = "mxfp8"``),
  NVFP4 named as not modelled.
* ``[activation_checkpoint] mode`` and ``[optimizer] name``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from shardmeter.importers.draft import Draft
from shardmeter.importers.files import ConfigError, read_toml
from shardmeter.importers.settings import Settings, shown
from shardmeter.importers.torchtitan_hf_backend import hf_backend_keys
from shardmeter.importers.torchtitan_layout import parallelism, setting_int, stage_layers
from shardmeter.importers.torchtitan_models import (
    LLAMA3,
    NOT_LANGUAGE_MODELS,
    base_flavour,
    ffn_hidden,
    known_flavours,
    model_keys,
)

__all__ = [
    "draft_from_file",
    "draft_from_config",
    "normalise_layout",
    "LLAMA3_FLAVOURS",
    "ffn_hidden",
    "llama3_model",
    "stage_layers",
]

#: torchtitan's Llama 3 flavours (:data:`.torchtitan_models.LLAMA3`).
LLAMA3_FLAVOURS = LLAMA3

#: Tables whose settings change nothing the model prices (logging, checkpoints, data, validation).
_NOT_MODELLED = {
    "job", "profiling", "profiler", "metrics", "checkpoint", "lr_scheduler", "validation", "validator",
    "comm", "fault_tolerance", "experimental", "debug", "memory_estimation", "dataloader", "tokenizer",
    "override", "data", "inference", "encoder",
}  # fmt: skip
#: Where the comment on an unread setting of each torchtitan table goes.
_NOTE_TABLE = {"model": "model", "parallelism": "parallelism"}
#: The degrees and pipeline settings that lived under ``[training]`` or ``[experimental]``
#: before ``[parallelism]`` (torchtitan/config_manager.py @ 9dec370).
_LEGACY_PARALLEL = (
    "data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
    "pipeline_parallel_degree", "pipeline_parallel_schedule", "pipeline_parallel_microbatches",
    "pipeline_parallel_split_points", "context_parallel_degree", "enable_async_tensor_parallel",
    "fsdp_reshard_after_forward", "expert_parallel_degree",
)  # fmt: skip


def llama3_model(flavor: str) -> dict[str, Any] | None:
    """The ``[model]`` keys of a torchtitan Llama 3 flavour (``None`` if unknown)."""
    got = model_keys("llama3", flavor)
    return got[0] if got else None


def draft_from_file(
    path: str | os.PathLike, *, gpus: int | None = None, node: int = 8, config: str | None = None, **_: Any
) -> Draft:
    """The draft scenario of the torchtitan job at ``path``: a job TOML, or the function
    ``config`` of a ``config_registry.py`` (:mod:`.torchtitan_registry`)."""
    if os.fspath(path).endswith(".py"):
        from shardmeter.importers.torchtitan_registry import draft_from_registry

        return draft_from_registry(path, config, gpus=gpus, node=node)
    cfg, name = read_toml(path)
    if config is not None:
        raise ConfigError(name, "--config names a function of a config_registry.py; a job TOML is one job")
    return draft_from_config(cfg, name, gpus=gpus, node=node)


def normalise_layout(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], str, list[str]]:
    """A job in torchtitan's 238fa99 layout, the era of its flavour tables
    (:data:`.torchtitan_models.ERAS`) and what was moved: before 2025-06-05 the local batch was
    ``[training] batch_size``; before 2025-03 the degrees were under ``[training]`` and
    ``[experimental]`` and ``compile`` a ``[training]`` boolean."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in cfg.items()}
    moved: list[str] = []
    era = "toml"
    training = out.get("training")
    if isinstance(training, dict) and "batch_size" in training and "local_batch_size" not in training:
        training["local_batch_size"] = training.pop("batch_size")
        moved.append("[training] batch_size as local_batch_size")
        era = "2024"
    par = out.setdefault("parallelism", {})
    if not isinstance(par, dict):
        return out, era, moved
    for table in ("training", "experimental"):
        src = out.get(table)
        if not isinstance(src, dict):
            continue
        for key in _LEGACY_PARALLEL:
            if key in src and key not in par:
                par[key] = src.pop(key)
                moved.append(f"[{table}] {key}")
                era = "2024"
    if isinstance(training, dict) and isinstance(training.get("compile"), bool):
        out.setdefault("compile", {})
        if isinstance(out["compile"], dict):
            out["compile"].setdefault("enable", training.pop("compile"))
            moved.append("[training] compile as [compile] enable")
    if not par:
        out.pop("parallelism")
    return out, era, moved


def draft_from_config(
    cfg: Mapping[str, Any],
    file: str,
    *,
    gpus: int | None = None,
    node: int = 8,
    era: str | None = None,
    header: list[str] | None = None,
) -> Draft:
    """A :class:`Draft` of a torchtitan job configuration's tables.

    :param gpus: the world size (``--gpus``); without it, the fewest whole ``node``-GPU nodes
        that hold the fixed degrees (one node at least: torchtitan's ``run_train.sh`` runs
        ``NGPU=8`` by default).
    :param era: which flavour tables apply (:data:`.torchtitan_models.ERAS`); by default the
        job's layout says."""
    if not isinstance(cfg.get("model", {}), Mapping) or not any(
        isinstance(cfg.get(t), Mapping) for t in ("model", "training", "parallelism")
    ):
        raise ConfigError(file, "not a torchtitan job file (no [model], [training] or [parallelism] table)")
    cfg, found_era, moved = normalise_layout(cfg)
    s = Settings(cfg)
    d = Draft(kind="torchtitan", file=file)
    d.header = header or [
        f"Scenario imported from the torchtitan job {os.path.basename(file)} by `shardmeter import torchtitan`.",
        "Each key says the setting it came from; settings with no scenario key are comments.",
        "torchtitan defaults: torchtitan/config/job_config.py (github.com/pytorch/torchtitan).",
    ]
    if moved:
        d.header.append("An older torchtitan layout, read as 238fa99's: " + "; ".join(moved) + ".")
    era = era or found_era
    _model(s, d, file, era)
    world = parallelism(s, d, file, gpus, node)
    _training(s, d, file, world, era)
    _version(d, era, moved)
    _unread(s, d)
    return d


def _version(d: Draft, era: str, moved: list[str]) -> None:
    """``training.framework_version``: the newest torchtitan whose job-file layout this one is,
    so the profile fills what the file leaves out as that torchtitan did (its fp8 recipe, its
    attention kernel, whether it compiles the loss). The degrees moved out of ``[training]`` and
    ``[experimental]`` into ``[parallelism]`` in 2025-03; ``[training] batch_size`` became
    ``local_batch_size`` in 8570415c (2025-06-05); TOML job files end with 238fa99
    (2026-02-23; 9810191b replaced them with ``config_registry.py``). A registry is read at the
    newest state the profile knows (unset)."""
    if era == "registry":
        return
    # each older layout bounds the date from above; the oldest bound wins
    bounds = [("2026-02-23", "a TOML job file: torchtitan up to 238fa99 (2026-02-23), its last")]
    if any("as [compile] enable" in m for m in moved):
        bounds.append(("2025-08-19", "[training] compile: torchtitan before 08b8b244 (2025-08-20)"))
    if any("batch_size" in m for m in moved):
        bounds.append(("2025-06-04", "[training] batch_size: torchtitan before 8570415c (2025-06-05)"))
    if any(m.split("] ", 1)[-1] in _LEGACY_PARALLEL for m in moved):
        bounds.append(("2025-02", "degrees under [training] / [experimental]: torchtitan before 2025-03"))
    version, why = min(bounds)
    d.set("training.framework_version", version, why)


def _model(s: Settings, d: Draft, file: str, era: str) -> None:
    name = str(s.take("model.name", "llama3"))
    flavor = str(s.take("model.flavor", "debugmodel"))
    if name in NOT_LANGUAGE_MODELS:
        raise ConfigError(
            file,
            f"[model] name = {name!r}: {NOT_LANGUAGE_MODELS[name]}; ShardMeter prices decoder-only "
            "language models, so this job does not import",
        )
    got = model_keys(name, flavor, era=era)
    if name == "transformers_modeling_backend":
        hf_model = s.take("hf_transformers.model")
        got = hf_backend_keys(str(hf_model), flavor)
    assets = s.take("model.hf_assets_path")
    if got is None:
        got = _hf_assets(assets, file)
        if got is None:
            known = ", ".join(known_flavours(name)) or "none"
            raise ConfigError(
                file,
                f"[model] name = {name!r}, flavor = {flavor!r} is not a flavour torchtitan ships (known "
                f"for {name!r}: {known}); give the model's config.json under hf_assets_path, or "
                "--set model.preset=NAME",
            )
    table, notes, src = got
    label = f"torchtitan {name} {flavor}"
    for k, v in table.items():
        d.set(f"model.{k}", v, f"{label} ({src})" if k == "layers" else label)
    if "ffn_hidden" in table and name in ("llama3", "llama", "llama4"):
        d.why["model.ffn_hidden"] = f"{label}: FeedForward rounding of 8/3 dim"
    d.why["model.vocab"] = f"{label}: vocab_size" + (
        " (Llama 3 tokenizer)" if table["vocab"] == 128256 else ""
    )
    for n in notes:
        d.note("model", n)
    base, suffix = base_flavour(flavor)
    if suffix:
        d.unmapped("model", f"flavor {flavor}: its attention kernel/mask", "priced as causal flash attention")
    if era == "2024" and base == "debugmodel":
        d.note(
            "model", "debugmodel of 2024-12..2025-04: 8 layers; its vocabulary came from the test tokenizer"
        )
    backend = s.take("model.attn_backend")
    if backend is not None:
        d.unmapped("model", f"attn_backend = {shown(backend)}", "priced as the GPU's fused causal attention")
    seq = setting_int(s, "training.seq_len", 2048, file, minimum=1)
    d.set("model.seq_len", seq, "[training] seq_len")
    if assets is not None and "hf_assets" not in src:
        d.note(
            "model",
            f"hf_assets_path = {shown(assets)}: the tokenizer and checkpoint; the flavour gives the shape",
        )
    tok = s.take("model.tokenizer_path")
    if tok is not None:
        d.note("model", f"tokenizer_path = {shown(tok)}: the flavour gives the vocabulary")


def _hf_assets(assets: Any, file: str) -> tuple[dict[str, Any], list[str], str] | None:
    """The ``[model]`` keys of the ``config.json`` under ``hf_assets_path`` (as given, then
    beside the job file), if there is one."""
    if not isinstance(assets, str) or not assets:
        return None
    from shardmeter.errors import ScenarioError
    from shardmeter.importers.files import read_json
    from shardmeter.load.hf_config import model_table_from_hf

    for base in (assets, os.path.join(os.path.dirname(file), assets)):
        path = os.path.join(base, "config.json")
        if os.path.isfile(path):
            cfg, name = read_json(path)
            try:
                table, notes = model_table_from_hf(cfg)
            except ScenarioError as exc:
                raise ConfigError(name, exc.message) from None
            table.pop("seq_len", None)
            return table, notes, f"hf_assets {path}"
    return None


def _training(s: Settings, d: Draft, file: str, world: int, era: str) -> None:
    pp = d.get("parallelism.pp", 1)
    dp = d.dp
    local = setting_int(s, "training.local_batch_size", 8, file, minimum=1)
    gbs = setting_int(s, "training.global_batch_size", -1, file, minimum=-1)
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
    _micro_batch(s, d, file, local, gbs, pp, era)
    fsdp = d.get("parallelism.sharding") in ("fsdp", "hsdp") or d.get("parallelism.cp", 1) > 1
    _precision(s, d, fsdp, d.get("parallelism.tp", 1) > 1 or pp > 1)
    _recompute(s, d)
    name = s.take("optimizer.name", "AdamW")
    opt = {"adamw": "adamw", "adam": "adam", "sgd": "sgd"}.get(str(name).lower())
    if opt:
        d.set("training.optimizer", opt, "[optimizer] name")
    else:
        d.unmapped("training", f"[optimizer] name = {shown(name)}", "priced as Adam")
    if s.take("compile.enable", False) is True:
        d.planned("training.compile", "true", "[compile] enable")
    else:
        d.planned("training.compile", "false", "[compile] enable = false: eager PyTorch")
    s.take("compile.components")
    steps = setting_int(s, "training.steps", 10000, file, minimum=0)
    seq = d.get("model.seq_len")
    if steps > 0 and isinstance(seq, int) and steps * gbs * seq <= 1e18:
        d.set("training.tokens", float(steps * gbs * seq), f"steps {steps} x global batch x seq_len")
    _loss(s, d)
    d.set("source.imported_from", f"torchtitan job {os.path.basename(file)}")
    if s.has("training.dataset"):
        dataset = s.take("training.dataset")
        d.set("source.dataset", dataset if isinstance(dataset, str) else shown(dataset), "[training] dataset")
    desc = s.take("job.description")
    if isinstance(desc, str):
        d.set("source.title", desc, "[job] description")


def _micro_batch(s: Settings, d: Draft, file: str, local: int, gbs: int, pp: int, era: str) -> None:
    key = "parallelism.pipeline_parallel_microbatch_size"
    if pp > 1 and era == "2024" and not s.has(key):
        stages = pp * d.get("parallelism.virtual_stages", 1)
        n = setting_int(s, "parallelism.pipeline_parallel_microbatches", stages, file, minimum=1)
        mbs = local // n if local % n == 0 else 1
        d.set("training.micro_batch", mbs, f"local_batch_size {local} in {n} pipeline micro-batches")
        d.note(
            "training",
            "torchtitan before 2025-04-07 split the local batch into pp (until 2025-01-07) or "
            "pp x stages-per-rank micro-batches: priced as the latter",
        )
    elif pp > 1:
        mbs = setting_int(s, key, 1, file, minimum=1)
        if local % mbs:
            raise ConfigError(
                file,
                f"parallelism.pipeline_parallel_microbatch_size {mbs} does not divide local_batch_size {local}",
            )
        d.set("training.micro_batch", mbs, "pipeline_parallel_microbatch_size")
    else:
        s.take(key)
        s.take("parallelism.pipeline_parallel_microbatches")
        acc = gbs // (local * d.dp)
        d.set(
            "training.micro_batch",
            local,
            "local_batch_size" + (f" ({acc} accumulation steps)" if acc > 1 else ""),
        )


def _converters(s: Settings) -> list[str]:
    conv = s.take("model.converters", [])
    return [str(c) for c in conv] if isinstance(conv, list) else [str(conv)]


def _precision(s: Settings, d: Draft, g_fsdp: bool, tp_or_pp: bool) -> None:
    converters = _converters(s)
    old_fp8 = s.take("float8.enable_float8_linear", False) is True
    fp8 = old_fp8 or any(c in ("float8", "quantize.linear.float8") for c in converters)
    mx = any(c in ("mx", "mxfp8", "quantize.linear.mx") for c in converters)
    for c in converters:
        if "nvfp4" in c.lower():
            d.note(
                "training",
                f"not modelled yet: the {c} converter (NVFP4 linears); priced at the precision below",
            )
        elif "grouped_mm" in c:
            d.note(
                "training",
                f"not modelled: {c} (fp8/MX grouped GEMMs of the experts only); priced at the precision below",
            )
        elif c not in ("float8", "quantize.linear.float8", "mx", "mxfp8", "quantize.linear.mx"):
            d.unmapped("training", f"converter {c}")
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
            "model.converters: " + ", ".join(converters) if converters else "[float8] enable_float8_linear",
        )
    else:
        d.set("training.precision", precision, src)
    recipe = s.take("quantize.linear.float8.recipe_name") or s.take("float8.recipe_name")
    s.take("quantize.linear.mx.recipe_name")
    if mx:
        d.planned("training.fp8_recipe", '"mxfp8"', "MXFP8 linears (torchao MX converter)")
    elif fp8 and recipe:
        d.planned("training.fp8_recipe", shown(recipe), "recipe_name")
    elif fp8:
        d.planned("training.fp8_recipe", '"tensorwise"', "torchao's default: tensorwise scaling")
    for path in (
        "quantize.linear.float8.enable_fsdp_float8_all_gather",
        "float8.enable_fsdp_float8_all_gather",
    ):
        if s.take(path, False) is True and fp8:
            d.planned("training.fp8_params", "true", path)


def _recompute(s: Settings, d: Draft) -> None:
    mode = s.take("activation_checkpoint.mode", "selective")
    option = str(s.take("activation_checkpoint.selective_ac_option", "2"))
    if mode in ("none", "full"):
        d.set("training.recompute", mode, f"[activation_checkpoint] mode = {shown(mode)}")
    elif mode == "selective" and option == "op":
        d.set("training.recompute", "op", 'selective_ac_option = "op": per-operator selective checkpointing')
    elif mode == "selective" and option != "op" and option.strip():
        from shardmeter.importers.files import number_text

        k = int(
            number_text(
                option,
                field="activation_checkpoint.selective_ac_option",
                file=d.file,
                integer=True,
                minimum=1,
            )
        )
        d.set(
            "training.recompute", "full", f'selective_ac_option = "{k}": every {k}th layer fully recomputed'
        )
        layers, pp = d.get("model.layers"), d.get("parallelism.pp", 1)
        if isinstance(layers, int) and isinstance(pp, int) and layers // pp >= k:
            d.set("training.recompute_layers", layers // pp // k, f"1 in {k} layers of each stage")
        else:
            d.planned("training.recompute_layers", "...", f"1 in {k} layers of each stage")
    else:
        d.unmapped(
            "training",
            f"[activation_checkpoint] mode = {shown(mode)}, selective_ac_option = {shown(option)}",
            "priced without recompute",
        )


def _loss(s: Settings, d: Draft) -> None:
    """torchtitan's ``ChunkedLossWrapper`` (torchtitan/components/loss.py @ b5bcd76): the output
    layer and loss run over ``num_chunks`` pieces of the sequence, so the full logits are never
    held."""
    if s.take("loss.chunked", False) is True:
        n = s.take("loss.num_chunks", 8)
        d.note(
            "training",
            f"ChunkedLossWrapper: the logits are never held whole ({shown(n)} chunks of the sequence)",
        )
        d.planned("training.loss_chunks", shown(n), "ChunkedLossWrapper num_chunks: priced as full logits")


def _unread(s: Settings, d: Draft) -> None:
    for table, items in s.unread().items():
        if table in _NOT_MODELLED or table == "":
            d.note("source", f"not modelled [{table}]: " + ", ".join(items))
        else:
            for item in items:
                d.unmapped(_NOTE_TABLE.get(table, "training"), f"[{table}] {item}")
