"""``shardmeter import torchtitan config_registry.py --config NAME``: one function of torchtitan's
Python configuration registry, read without running it (:mod:`.pyconfig`), as the job tables
:func:`.torchtitan.draft_from_config` maps.

Two generations are read. At 9810191 (2026-02-23, the first registry) the dataclasses carry the
TOML's fields (``TrainingConfig(local_batch_size, seq_len)``, ``ActivationCheckpointConfig``,
``model_converters=ModelConvertersContainer.Config(converters=[...])``). At b5bcd76 (2026-08-21):
``TrainingConfig(num_tokens_per_microbatch_per_dp_rank, max_context_length,
num_tokens_per_train_step)`` (torchtitan/config/configs.py: a micro-batch is that many tokens
per data-parallel rank, ``num_pp_microbatches`` of them per step with PP), the converters as
``model_registry(flavor, converters=[Float8LinearConverter.Config(...)])`` (float8's
``recipe_name`` defaults to ``"rowwise"``, torchtitan/components/quantization/float8.py),
``SelectiveAC.Config`` (per-operator SAC, the default) / ``FullAC.Config``
(torchtitan/distributed/activation_checkpoint.py), ``CompileConfig(enable_async_tensor_parallel)``
and ``ChunkedLossWrapper.Config`` (torchtitan/components/loss.py).
"""

from __future__ import annotations

import difflib
import os
from typing import Any

from shardmeter.importers.draft import Draft
from shardmeter.importers.files import ConfigError, number, read_text
from shardmeter.importers.pyconfig import MAX_DEPTH, BadNumber, Module, Opaque, Rec, evaluate, parse_tree
from shardmeter.importers.torchtitan import draft_from_config
from shardmeter.importers.torchtitan_models import FAMILIES, NOT_LANGUAGE_MODELS

__all__ = ["draft_from_registry", "registry_functions", "to_job"]

#: Converter classes -> the name ``[model] converters`` gives them in a job TOML.
_CONVERTERS = {
    "Float8LinearConverter": "float8",
    "MXFP8LinearConverter": "mxfp8",
    "NVFP4LinearConverter": "nvfp4",
    "Float8GroupedExpertsConverter": "quantize.grouped_mm.float8",
    "MXFP8GroupedExpertsConverter": "quantize.grouped_mm.mx",
    "LoRAConverter": "lora",
}
#: The fields of ``Trainer.Config`` read as model or training settings; the others are tables
#: of settings ShardMeter does not price (named in the not-modelled comments).
_READ = {
    "model_spec",
    "model_converters",
    "training",
    "parallelism",
    "activation_checkpoint",
    "compile",
    "optimizer",
    "loss",
}


def registry_functions(module: Module) -> list[str]:
    """The functions of a registry that return a job (public, no required arguments)."""
    out = []
    for name, fn in module.functions.items():
        a = fn.args
        required = len(a.posonlyargs + a.args) - len(a.defaults)
        if not name.startswith("_") and required == 0:
            out.append(name)
    return out


def draft_from_registry(
    path: str | os.PathLike, config: str | None, *, gpus: int | None = None, node: int = 8
) -> Draft:
    """The draft scenario of ``config()`` in the registry at ``path``."""
    text, name = read_text(path)
    m = parse_tree(text, name, lambda p: read_text(p)[0])
    jobs = registry_functions(m)
    if config is None:
        shown_ = ", ".join(jobs[:8]) + (f", ... ({len(jobs)} in all)" if len(jobs) > 8 else "")
        raise ConfigError(name, f"--config NAME: which function to import ({shown_ or 'none here'})")
    if config not in m.functions:
        close = difflib.get_close_matches(config, jobs, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(name, f"--config {config}: no such function{hint}")
    value = evaluate(m, config)
    if not isinstance(value, Rec):
        raise ConfigError(name, f"{config}() returns {value!s:.60}, not a Trainer.Config")
    if value.name.endswith("Controller.Config"):
        raise ConfigError(
            name,
            f"{config}() is an RL Controller.Config (a trainer and vLLM generators): ShardMeter prices "
            "pre-training and fine-tuning jobs; import a Trainer.Config function",
        )
    era = (
        "toml" if {"ActivationCheckpointConfig", "ModelConvertersContainer"} & set(m.imports) else "registry"
    )
    job, notes = to_job(value, m, name, config, era)
    doc = _docstring(m, config)
    header = [
        f"Scenario imported from {config}() of the torchtitan registry {os.path.basename(name)} by "
        "`shardmeter import torchtitan --config`, read without running it.",
        "Each key says the setting it came from; settings with no scenario key are comments.",
        "torchtitan defaults: torchtitan/config/configs.py (github.com/pytorch/torchtitan).",
    ]
    d = draft_from_config(job, name, gpus=gpus, node=node, era=era, header=header)
    for n in notes + m.notes:
        d.note("source", n)
    d.set("source.imported_from", f"torchtitan {os.path.basename(name)} {config}()")
    d.set("source.title", doc or config, "the function's docstring" if doc else "the function")
    return d


def _docstring(m: Module, fn: str) -> str:
    import ast

    doc = ast.get_docstring(m.functions[fn]) or ""
    return doc.strip().splitlines()[0][:200] if doc.strip() else ""


def _plain(v: Any, depth: int = 0) -> Any:
    """A value as TOML-like data: a record as its fields, an opaque expression as its text."""
    if depth > MAX_DEPTH:
        return "..."
    if isinstance(v, Rec):
        return {k: _plain(x, depth + 1) for k, x in v.fields.items()} or v.name
    if isinstance(v, BadNumber):
        return v.value  # checked, and named, where it is read
    if isinstance(v, Opaque):
        return f"<{v.text}>"
    if isinstance(v, (list, tuple)):
        return [_plain(x, depth + 1) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x, depth + 1) for k, x in v.items()}
    return v


def _cls(rec: Any) -> str:
    """``Float8LinearConverter`` of ``Float8LinearConverter.Config``."""
    if not isinstance(rec, Rec):
        return ""
    name = rec.name[: -len(".Config")] if rec.name.endswith(".Config") else rec.name
    return name.rsplit(".", 1)[-1]


def _literal(v: Any, what: str, notes: list[str], file: str = "") -> Any:
    """``v``, or ``None`` with a not-mapped note when it is an expression the reader did not
    compute; a number out of range is a one-line error naming the field."""
    if isinstance(v, BadNumber):
        number(v.value, field=what, file=file)
    if isinstance(v, (Opaque, Rec)):
        notes.append(
            f"not mapped: {what} = {v.text if isinstance(v, Opaque) else v.name + '(...)'} (an expression)"
        )
        return None
    return v


def _family(rec: Rec, m: Module, file: str, fn: str) -> str:
    """The model family whose ``model_registry`` made ``rec``."""
    target = m.imports.get(rec.name, "")
    parts = [p for p in target.replace("..", ".").split(".") if p]
    if (
        len(parts) >= 2
        and parts[-1] == "model_registry"
        and (parts[-2] in FAMILIES or parts[-2] in NOT_LANGUAGE_MODELS)
    ):
        return parts[-2]
    folder = os.path.basename(os.path.dirname(os.path.abspath(file)))
    if folder in FAMILIES or folder in NOT_LANGUAGE_MODELS:
        return folder
    for fam in sorted(FAMILIES, key=len, reverse=True):
        if fn.startswith(fam) or f"_{fam}_" in fn or rec.name.startswith(fam):
            return fam
    return folder


def _model(cfg: Rec, m: Module, file: str, fn: str, era: str, notes: list[str]) -> dict[str, Any]:
    spec = cfg.get("model_spec")
    if not isinstance(spec, Rec) or not spec.name.endswith("model_registry"):
        what = spec.name if isinstance(spec, Rec) else spec
        raise ConfigError(file, f"{fn}(): model_spec = {what!s:.60} is not a model_registry(flavor) call")
    flavor = spec.args[0] if spec.args else spec.get("flavor")
    if not isinstance(flavor, str):
        raise ConfigError(file, f"{fn}(): model_registry's flavour is {flavor!s:.60}, not a literal string")
    model: dict[str, Any] = {"name": _family(spec, m, file, fn), "flavor": flavor}
    for key in ("attn_backend",):
        if key in spec.fields:
            model[key] = _literal(spec.fields[key], key, notes, file)
    for key, why in (
        ("moe_comm_backend", "the MoE token dispatcher (all-to-all priced)"),
        ("tp_gemm_backend", "TP collectives fused into GEMMs (priced as TP)"),
        ("num_mtp_layers", "multi-token prediction layers, not modelled"),
    ):
        if key in spec.fields:
            notes.append(f"not mapped: model_registry({key} = {_plain(spec.fields[key])}): {why}")
    converters = spec.get("converters")
    holder = cfg.get("model_converters")
    if isinstance(holder, Rec):
        converters = holder.get("converters", converters)
    quant: dict[str, Any] = {}
    names = []
    for c in converters if isinstance(converters, (list, tuple)) else []:
        cname = _cls(c)
        kind = _CONVERTERS.get(cname, cname or str(c))
        names.append(kind)
        if kind == "float8" and isinstance(c, Rec):
            recipe = c.get("recipe_name", "rowwise" if era == "registry" else None)
            f8 = {k: _plain(v) for k, v in c.fields.items() if k not in ("model_compile_enabled",)}
            if recipe is not None:
                f8["recipe_name"] = _literal(recipe, "recipe_name", notes, file)
            if f8.get("emulate") is True:
                notes.append(
                    "Float8LinearConverter(emulate = true): fp8 emulated in bf16 on the GPU; priced as fp8"
                )
            f8.pop("emulate", None)
            quant["float8"] = f8
        elif kind == "lora":
            notes.append(
                "not modelled: LoRAConverter (frozen base weights, low-rank adapters): priced as full training"
            )
    if names:
        model["converters"] = names
    return {"model": model, **({"quantize": {"linear": quant}} if quant else {})}


def _training(rec: Any, par: dict[str, Any], era: str, notes: list[str], file: str) -> dict[str, Any]:
    out = {
        k: _literal(v, f"training.{k}", notes, file)
        for k, v in (rec.fields.items() if isinstance(rec, Rec) else [])
    }
    out = {k: v for k, v in out.items() if v is not None}
    if era != "registry":
        return out
    tokens = out.pop("num_tokens_per_microbatch_per_dp_rank", 16384)
    seq = out.pop("max_context_length", 2048)
    step = out.pop("num_tokens_per_train_step", -1)
    n_micro = par.pop("num_pp_microbatches", 1)
    if (
        not all(isinstance(x, int) and not isinstance(x, bool) for x in (tokens, seq, step, n_micro))
        or seq < 1
    ):
        notes.append(
            "not mapped: the token counts of TrainingConfig (not whole numbers); priced with the defaults"
        )
        tokens, seq, step, n_micro = 16384, 2048, -1, 1
    micro = max(1, tokens // seq)
    if tokens % seq:
        notes.append(
            f"num_tokens_per_microbatch_per_dp_rank {tokens} is not a whole number of {seq}-token sequences"
        )
    out["seq_len"] = seq
    pp = par.get("pipeline_parallel_degree", 1)
    if isinstance(pp, int) and pp > 1 and isinstance(n_micro, int) and n_micro >= 1:
        out["local_batch_size"] = micro * n_micro
        par["pipeline_parallel_microbatch_size"] = micro
    else:
        out["local_batch_size"] = micro
    if step != -1 and step >= seq:
        out["global_batch_size"] = step // seq
    notes.append(
        f"TrainingConfig: {tokens} tokens per micro-batch per data-parallel rank = {micro} sequences of "
        f"{seq} (max_context_length)" + (f"; {n_micro} PP micro-batches" if n_micro != 1 else "")
    )
    return out


def _activation_checkpoint(rec: Any, era: str, notes: list[str]) -> dict[str, Any]:
    if rec is None:
        return {"mode": "none"}
    cls = _cls(rec)
    if cls in ("SelectiveAC", "activation_checkpoint") and era == "registry":
        return {"mode": "selective", "selective_ac_option": "op"}
    if cls == "FullAC":
        return {"mode": "full"}
    if cls == "MemoryBudgetAC":
        budget = _plain(rec.get("memory_budget", 0.5))
        return {"mode": "memory_budget", "memory_budget": budget}
    if isinstance(rec, Rec):
        return {k: _plain(v) for k, v in rec.fields.items()}
    return {"mode": _plain(rec)}


def _optimizer(rec: Any, notes: list[str]) -> dict[str, Any]:
    cls = _cls(rec)
    if cls == "default_adamw":
        return {"name": "AdamW", **{k: _plain(v) for k, v in rec.fields.items()}}
    if cls == "OptimizersInBackwardContainer":
        notes.append(
            "OptimizersInBackwardContainer: the optimizer steps inside the backward pass (priced after it)"
        )
    if isinstance(rec, Rec):
        return {"name": "AdamW", **{k: _plain(v) for k, v in rec.fields.items()}}
    return {}


def to_job(cfg: Rec, m: Module, file: str, fn: str, era: str) -> tuple[dict[str, Any], list[str]]:
    """A ``Trainer.Config`` record as the tables of a 238fa99 job file, and notes."""
    notes: list[str] = []
    job = _model(cfg, m, file, fn, era, notes)
    assets = cfg.get("hf_assets_path")
    if isinstance(assets, str):
        job["model"]["hf_assets_path"] = assets
    if isinstance(cfg.get("hf_model"), str):  # transformers_modeling_backend's TransformersBackendConfig
        job["hf_transformers"] = {"model": cfg.get("hf_model")}
    par_rec = cfg.get("parallelism")
    par = {k: _plain(v) for k, v in par_rec.fields.items()} if isinstance(par_rec, Rec) else {}
    job["training"] = _training(cfg.get("training"), par, era, notes, file)
    comp = cfg.get("compile")
    compile_ = {k: _plain(v) for k, v in comp.fields.items()} if isinstance(comp, Rec) else {}
    if "enable_async_tensor_parallel" in compile_:
        par["enable_async_tensor_parallel"] = compile_.pop("enable_async_tensor_parallel")
    job["parallelism"] = par
    job["compile"] = compile_
    ac = cfg.fields.get(
        "activation_checkpoint", Rec(name="SelectiveAC.Config") if era == "registry" else None
    )
    job["activation_checkpoint"] = (
        _activation_checkpoint(ac, era, notes)
        if "activation_checkpoint" in cfg.fields or era == "registry"
        else {}
    )
    if isinstance(cfg.get("optimizer"), Rec):
        job["optimizer"] = _optimizer(cfg.get("optimizer"), notes)
    loss = cfg.get("loss")
    if _cls(loss) == "ChunkedLossWrapper":
        job["loss"] = {"chunked": True, "num_chunks": _plain(loss.get("num_chunks", 8))}
    elif isinstance(loss, Rec) and _cls(loss) not in ("CrossEntropyLoss",):
        notes.append(f"not mapped: loss = {loss.name}(...)")
    for key, v in cfg.fields.items():
        if key in _READ or key in ("hf_assets_path", "hf_model"):
            continue
        plain = _plain(v)
        if isinstance(plain, dict):
            job[key] = plain
        else:
            job.setdefault("job", {})[key] = plain
    return job, notes
