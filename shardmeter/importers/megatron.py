"""``shardmeter import megatron SCRIPT``: Megatron-LM command-line arguments as a scenario.

The file is a launch script or a file of arguments as Megatron-LM's examples write them (one
``--flag value`` per line, ``\\`` continuations, ``#`` comments, bash arrays such as
``MODEL_ARGS=(`` / ``)``, strings of arguments such as ``MEGATRON_PARAMS="--num-layers ..."``).
The script's own variables are expanded as bash would (:mod:`.shell`: ``NAME=value``,
``${NAME:-default}``, ``$((...))``, simple ``if`` tests), without running it; one it never sets
comes from ``--var NAME=VALUE``, and where a flag this importer maps needs one that is not
given, the import ends with one line naming each (:attr:`Draft.needs`). A Megatron-Bridge or
NeMo 2 recipe (a ``.py`` file) is read by :mod:`.recipes`.

Defaults are Megatron-LM's (``megatron/training/arguments.py``,
``megatron/core/transformer/transformer_config.py``, github.com/NVIDIA/Megatron-LM @ d98e8a6):
the model's keys (:mod:`.megatron_model`), a global batch of ``micro-batch-size x dp``, fp32
unless ``--bf16``/``--fp16``, ``--fp8-recipe delayed``.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Mapping

from shardmeter.importers.draft import Draft
from shardmeter.importers.files import ConfigError, number_text, read_text
from shardmeter.importers.megatron_model import (
    GPT2_VOCAB,
    model_keys,
    padded_vocab,
    recompute_modules,
    vocab_keys,
)
from shardmeter.importers.shell import END, MARK, ShellLimit, logical_lines, missing_in, read_script

__all__ = ["draft_from_file", "draft_from_text", "parse_args_text", "padded_vocab", "GPT2_VOCAB", "Args"]

#: Longest script read (Megatron-LM's example scripts are under 20 kB).
MAX_SCRIPT_CHARS = 1 << 20

#: The scenario key each flag's value sets, so that ``--set KEY=VALUE`` can stand in for a
#: variable the script reads from outside.
FLAG_KEYS = {
    "num-layers": "model.layers",
    "hidden-size": "model.hidden",
    "num-attention-heads": "model.heads",
    "seq-length": "model.seq_len",
    "ffn-hidden-size": "model.ffn_hidden",
    "num-query-groups": "model.kv_heads",
    "kv-channels": "model.head_dim",
    "num-experts": "model.experts",
    "moe-router-topk": "model.experts_per_token",
    "moe-ffn-hidden-size": "model.moe_ffn_hidden",
    "vocab-size": "model.vocab",
    "micro-batch-size": "training.micro_batch",
    "global-batch-size": "training.global_batch",
    "tensor-model-parallel-size": "parallelism.tp",
    "pipeline-model-parallel-size": "parallelism.pp",
    "context-parallel-size": "parallelism.cp",
    "expert-model-parallel-size": "parallelism.ep",
    "train-iters": "training.tokens",
    "train-samples": "training.tokens",
}


def _flags(lines: list[tuple[int, str]]) -> tuple[list[tuple[str, list[str], int]], list[str]]:
    """``(flag, values, line)`` for every ``--flag`` in ``lines`` and the lines shlex cannot split.

    Words before the first flag of a line that are not flags (``torchrun``, ``python``) and the
    brackets of a bash array are shell syntax; a word that itself holds flags (a quoted
    ``"--fp8-format hybrid"``) is split again."""
    found: list[tuple[str, list[str], int]] = []
    bad: list[str] = []
    for no, line in lines:
        try:
            tokens = shlex.split(line)
        except ValueError:
            if "--" in line:
                bad.append(f"line {no}: {line.strip()[:80]}")
            continue
        words: list[str] = []
        for t in tokens:
            if " --" in f" {t}" and any(c.isspace() for c in t):
                try:
                    words.extend(shlex.split(t))
                except ValueError:
                    words.append(t)
            else:
                words.append(t)
        current: tuple[str, list[str], int] | None = None
        for w in words:
            if w.startswith("--") and len(w) > 2 and not w.startswith("---"):
                flag, eq, val = w.partition("=")
                current = (flag[2:], [val] if eq else [], no)
                found.append(current)
            elif w.endswith(".py") or w in ("python", "python3", "torchrun"):
                current = None  # the program launched (torchrun --nproc_per_node 8 pretrain_gpt.py)
            elif current is not None and w not in ("(", ")", "\\"):
                current[1].append(w)
    return found, bad


def parse_args_text(text: str) -> tuple[list[tuple[str, list[str], int]], list[str]]:
    """The flags of ``text`` as written (no variable expanded): see :func:`_flags`."""
    return _flags(logical_lines(text))


def draft_from_file(
    path: str | os.PathLike,
    *,
    gpus: int | None = None,
    node: int = 8,
    config: str | None = None,
    variables: Mapping[str, str] | None = None,
) -> Draft:
    """The draft scenario of the Megatron-LM script at ``path`` (:func:`draft_from_text`), or
    of the recipe function ``config`` of a Megatron-Bridge / NeMo 2 ``.py`` file."""
    if os.fspath(path).endswith(".py"):
        from shardmeter.importers.recipes import draft_from_recipe

        return draft_from_recipe(path, config, gpus=gpus, node=node)
    text, name = read_text(path)
    if config is not None:
        raise ConfigError(name, "--config names a recipe function of a .py file; a script is one job")
    return draft_from_text(text, name, gpus=gpus, node=node, variables=variables, include=_includer(name))


def _includer(file: str):
    """``. NAME`` / ``source NAME`` of a file beside the script (the sc21 scripts source
    CONFIG.sh): its text through the one reader, nothing outside the script's folder."""
    folder = os.path.dirname(os.path.abspath(file))

    def include(path: str) -> str | None:
        name = path[2:] if path.startswith("./") else path
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            return None
        full = os.path.join(folder, name)
        if not os.path.isfile(full):
            return None
        return read_text(full)[0]

    return include


class Args:
    """The parsed flags, each marked when read; a flag given twice keeps its last value
    (argparse's rule). Numbers go through :func:`~.files.number_text`."""

    def __init__(self, found: list[tuple[str, list[str], int]], file: str, draft: Draft):
        self.file = file
        self.d = draft
        self.flags: dict[str, list[str]] = {}
        self.order: list[str] = []
        for flag, values, _ in found:
            if flag not in self.flags:
                self.order.append(flag)
            self.flags[flag] = values
        self.read: set[str] = set()

    def on(self, flag: str) -> bool:
        self.read.add(flag)
        return flag in self.flags

    def value(self, flag: str) -> str | None:
        """The flag's value; ``None`` when absent, or when it needs what the file does not set
        (recorded in the draft's ``needs``)."""
        self.read.add(flag)
        vals = self.flags.get(flag)
        if not vals:
            return None
        v = " ".join(vals)
        names = missing_in(v)
        if not names:
            return v
        key = FLAG_KEYS.get(flag, "")
        for n in names:
            if n.startswith("("):
                self.d.need(
                    f"--{flag}", f"a command's output ({_shown(v)}): write the value in the script", key
                )
            else:
                how = f"--var {n}=VALUE" + (f" or --set {key}=VALUE" if key else "")
                self.d.need(n, f"--{flag}: {how}", key)
        return None

    def int(self, flag: str, default: int | None = None, minimum: int = 0) -> int | None:
        v = self.value(flag)
        if v is None:
            return default
        return int(number_text(v, field=f"--{flag}", file=self.file, integer=True, minimum=minimum))

    def float(self, flag: str) -> float | None:
        v = self.value(flag)
        if v is None:
            return None
        return float(number_text(v, field=f"--{flag}", file=self.file))


def _shown(text: str) -> str:
    return re.sub(f"{MARK}([^{END}]*){END}", lambda m: "${" + m.group(1) + "}", text)[:60]


def draft_from_text(
    text: str,
    file: str,
    *,
    gpus: int | None = None,
    node: int = 8,
    variables: Mapping[str, str] | None = None,
    include=None,
) -> Draft:
    """A :class:`Draft` of a Megatron-LM script's arguments.

    :param gpus: the world size (``--gpus``); without it, the torchrun ``--nproc_per_node x
        --nnodes`` of the script where they fit the degrees, else the fewest whole
        ``node``-GPU nodes that hold them (the examples' ``GPUS_PER_NODE=8``).
    :param variables: shell variables set outside the script (``--var``)."""
    if len(text) > MAX_SCRIPT_CHARS:
        raise ConfigError(file, f"{len(text):,} characters; a launch script is at most {MAX_SCRIPT_CHARS:,}")
    try:
        script = read_script(text, variables, include)
    except ShellLimit as exc:
        raise ConfigError(file, f"{exc}; not a launch script") from None
    program = _program(script.lines, file)
    found, bad = _flags(script.lines)
    if not any(f in ("num-layers", "hidden-size", "num-attention-heads", "seq-length") for f, _, _ in found):
        why = "no Megatron-LM model arguments (--num-layers, --hidden-size ...) in the file"
        sourced = [n.split("not read: ", 1)[-1].split(" (")[0] for n in script.notes if "another file" in n]
        outside = [v for v in script.missing if not v.isdigit()]
        if sourced:
            why += f"; it sources {', '.join(sourced)[:80]}: import the file that holds them"
        elif outside:
            why += f"; it reads variables set outside it ({', '.join(outside[:6])}): if they hold the arguments, give them with --var NAME=VALUE"
        raise ConfigError(file, why)
    d = Draft(kind="megatron", file=file)
    a = Args(found, file, d)
    d.header = [
        f"Scenario imported from the Megatron-LM arguments in {os.path.basename(file)} by `shardmeter import megatron`.",
        "Each key says the argument it came from; arguments with no scenario key are comments.",
        "Megatron-LM defaults: megatron/training/arguments.py (github.com/NVIDIA/Megatron-LM).",
    ]
    for name in variables or {}:
        d.header.append(f"--var {name}: given outside the script.")
    model_keys(a, d)
    if program == "pretrain_bert.py":
        d.set("model.causal", False, "pretrain_bert.py: a bidirectional encoder")
        d.note("model", "not counted: BERT's pooler, LM-head transform and binary head")
    elif "multimodal" in program or program == "pretrain_vlm.py":
        d.note(
            "model", f"{program}: a vision-language model; the vision encoder and projector are not modelled"
        )
    _parallel(a, d, gpus, node)
    _training(a, d)
    vocab_keys(a, d)
    for line in bad:
        d.note("source", f"not read (unbalanced quotes): {line}")
    for n in script.notes:
        d.note("source", n)
    for flag in a.order:
        if flag not in a.read:
            joined = " ".join(a.flags[flag])
            outer = " (set outside the file)" if missing_in(joined) else ""
            d.unmapped("source", f"--{flag}" + (f" {_shown(joined)}" if joined else "") + outer)
    d.set("source.imported_from", f"Megatron-LM arguments {os.path.basename(file)}")
    return d


#: Megatron-LM entry points whose model is not one decoder stack ShardMeter prices.
_OTHER_PROGRAMS = {
    "pretrain_t5.py": "trains T5, an encoder-decoder (--encoder-num-layers and --decoder-num-layers)",
    "pretrain_mamba.py": "trains a Mamba state-space model (its SSM layers are not modelled)",
    "pretrain_hybrid.py": "trains a hybrid Mamba-attention model (its SSM layers are not modelled)",
    "pretrain_ict.py": "trains an ICT biencoder (a query and a context BERT tower)",
}


def _program(lines: list[tuple[int, str]], file: str) -> str:
    """The Megatron-LM entry point the script runs (``pretrain_gpt.py`` when it names none);
    one that trains a model ShardMeter cannot price is a one-line error."""
    for _, line in lines:
        m = re.search(r"(pretrain_\w+\.py|multimodal/train\.py)", line)
        if m:
            prog = os.path.basename(m.group(1))
            if prog in _OTHER_PROGRAMS:
                raise ConfigError(
                    file,
                    f"{prog} {_OTHER_PROGRAMS[prog]}: ShardMeter prices one stack of transformer layers, so this script does not import",
                )
            return m.group(1)
    return "pretrain_gpt.py"


def _world(a: Args, d: Draft, deg: dict[str, int], gpus: int | None, node: int) -> int:
    """The GPUs: ``--gpus``, else torchrun's ``--nproc_per_node x --nnodes`` where that fits the
    degrees, else the fewest whole nodes that do (``tp x pp x lcm(cp, ep)``: the experts are
    spread over the data- and context-parallel ranks)."""
    unit = deg["tp"] * deg["pp"] * math.lcm(deg["cp"], deg["ep"])
    if gpus is not None:
        d.world_why = "--gpus"
        return gpus
    per, nodes = (
        _launcher_int(a, "nproc_per_node") or _launcher_int(a, "nproc-per-node"),
        _launcher_int(a, "nnodes"),
    )
    if per and nodes and (per * nodes) % unit == 0:
        d.world_why = f"torchrun --nproc_per_node {per} x --nnodes {nodes}; give --gpus N"
        return per * nodes
    world = math.lcm(node, unit)
    d.world_why = f"{world} GPUs: tp x pp x lcm(cp, ep) on whole {node}-GPU nodes; give --gpus N"
    if per and nodes:
        d.note("island", f"torchrun's {per} x {nodes} GPUs do not hold tp x pp x lcm(cp, ep) = {unit}")
    return world


def _launcher_int(a: Args, flag: str) -> int | None:
    """A torchrun count (``--nnodes 2``), or ``None`` where it is not a plain integer."""
    v = a.value(flag) if flag in a.flags and not missing_in(" ".join(a.flags[flag])) else None
    a.read.add(flag)
    return int(v) if v and v.isascii() and v.isdigit() and 0 < len(v) < 7 else None


def _parallel(a: Args, d: Draft, gpus: int | None, node: int) -> None:
    deg = {}
    for flag, key in (
        ("tensor-model-parallel-size", "tp"),
        ("pipeline-model-parallel-size", "pp"),
        ("context-parallel-size", "cp"),
        ("expert-model-parallel-size", "ep"),
    ):
        v = a.int(flag, 1, minimum=1) or 1
        deg[key] = v
        if v != 1:
            d.set(f"parallelism.{key}", v, f"--{flag}")
    etp = a.int("expert-tensor-parallel-size", minimum=1)
    if etp is not None and etp != deg["tp"]:
        d.set("parallelism.expert_tp", etp, "--expert-tensor-parallel-size")
    world = _world(a, d, deg, gpus, node)
    fixed = deg["tp"] * deg["pp"] * deg["cp"]
    if world % fixed:
        raise ConfigError(
            d.file,
            f"--gpus {world}: not a multiple of tp x pp x cp = {fixed} (Megatron's data-parallel size is the rest)",
        )
    d.world, d.dp = world, world // fixed
    if a.on("sequence-parallel"):
        d.set("parallelism.sequence_parallel", True, "--sequence-parallel")
    _pipeline(a, d, deg["pp"])
    if a.on("use-torch-fsdp2"):
        d.set("parallelism.sharding", "fsdp", "--use-torch-fsdp2")
    elif a.on("use-megatron-fsdp"):
        strategy = a.value("data-parallel-sharding-strategy") or "optim_grads_params"
        zero = {"no_shard": "none", "optim": "zero1", "optim_grads": "zero2", "optim_grads_params": "zero3"}
        d.set("parallelism.sharding", zero.get(strategy, "zero3"), f"--use-megatron-fsdp {strategy}")
    elif a.on("use-distributed-optimizer"):
        d.set(
            "parallelism.sharding", "zero1", "--use-distributed-optimizer (optimizer state sharded over dp)"
        )
    else:
        d.set("parallelism.sharding", "none", "Megatron's DDP (no --use-distributed-optimizer)")
    a.on("use-distributed-optimizer")
    if a.on("tp-comm-overlap"):
        d.set("parallelism.tp_comm_overlap", True, "--tp-comm-overlap")
    if a.on("overlap-grad-reduce"):
        d.set("parallelism.dp_comm_overlap", True, "--overlap-grad-reduce")
    a.on("overlap-param-gather")


def _pipeline(a: Args, d: Draft, pp: int) -> None:
    if pp > 1:
        v_layers = a.int("num-layers-per-virtual-pipeline-stage")
        v_stages = a.int("num-virtual-stages-per-pipeline-rank")
        layers = d.get("model.layers")
        if v_stages and v_stages > 1:
            d.set("parallelism.schedule", "interleaved", "--num-virtual-stages-per-pipeline-rank")
            d.set("parallelism.virtual_stages", v_stages, "--num-virtual-stages-per-pipeline-rank")
        elif v_layers and isinstance(layers, int) and layers // (pp * v_layers) > 1:
            d.set("parallelism.schedule", "interleaved", "--num-layers-per-virtual-pipeline-stage")
            d.set("parallelism.virtual_stages", layers // (pp * v_layers), f"layers / (pp x {v_layers})")
        else:
            d.set("parallelism.schedule", "1f1b", "Megatron's non-interleaved 1F1B")
    first, last = a.int("decoder-first-pipeline-num-layers"), a.int("decoder-last-pipeline-num-layers")
    if first is not None:
        d.planned("parallelism.first_stage_layers", str(first), "--decoder-first-pipeline-num-layers")
    if last is not None:
        d.planned("parallelism.last_stage_layers", str(last), "--decoder-last-pipeline-num-layers")
    for flag, key in (
        ("account-for-embedding-in-pipeline-split", "embedding_in_split"),
        ("account-for-loss-in-pipeline-split", "loss_in_split"),
    ):
        if a.on(flag):
            d.set(f"parallelism.{key}", True, f"--{flag}")


def _training(a: Args, d: Draft) -> None:
    mbs = a.int("micro-batch-size", minimum=1)
    if mbs is not None:
        d.set("training.micro_batch", mbs, "--micro-batch-size")
    gbs = a.int("global-batch-size", minimum=1)
    if gbs is not None:
        d.set("training.global_batch", gbs, "--global-batch-size")
    elif mbs is not None:
        d.set("training.global_batch", mbs * d.dp, f"Megatron's default: micro-batch-size x dp ({d.dp})")
    elif "micro-batch-size" not in d.needs and "global-batch-size" not in d.needs:
        d.set("training.global_batch", d.dp, f"Megatron's default: micro-batch-size 1 x dp ({d.dp})")
    rampup = a.value("rampup-batch-size") or a.value("step-batch-size-schedule")
    if rampup:
        d.note("training", f"not mapped: the batch ramp-up ({rampup}); priced at the final global batch")
    if a.on("bf16"):
        d.set("training.precision", "bf16", "--bf16")
    elif a.on("fp16"):
        d.set("training.precision", "fp16", "--fp16")
    else:
        d.set("training.precision", "fp32", "Megatron's default without --bf16/--fp16")
    fmt = a.value("fp8-format")
    if fmt:
        d.set("training.precision", "fp8", f"--fp8-format {fmt}")
        recipe = a.value("fp8-recipe") or "delayed"
        d.planned("training.fp8_recipe", f'"{recipe}"', "--fp8-recipe (Megatron's default: delayed)")
        d.set("training.fp8_backend", "transformer-engine", "Megatron's fp8 linears are Transformer Engine's")
        if a.on("fp8-param-gather"):
            d.planned("training.fp8_params", "true", "--fp8-param-gather")
    fp4 = a.value("fp4-format")
    if fp4:
        d.note(
            "training", f"not modelled yet: --fp4-format {fp4} (NVFP4 linears); priced at the precision above"
        )
    _recompute(a, d)
    d.set(
        "training.fused_loss",
        True,
        "Megatron's vocab_parallel_cross_entropy writes the gradient into its saved softmax",
    )
    if a.on("no-gradient-accumulation-fusion"):
        d.set(
            "training.grad_accumulation_fusion",
            False,
            "--no-gradient-accumulation-fusion (each micro-batch's weight gradient added in a pass of its own)",
        )
    optimizer = a.value("optimizer") or "adam"
    if optimizer in ("adam", "sgd"):
        d.set(
            "training.optimizer",
            optimizer,
            "--optimizer" if a.flags.get("optimizer") else "Megatron's default (adam)",
        )
    else:
        d.unmapped("training", f"--optimizer {optimizer}", "priced as Adam")
    backend = a.value("attention-backend")
    if a.on("use-flash-attn"):
        d.set("training.attention", "flash", "--use-flash-attn")
    elif backend in ("unfused", "local"):
        d.set("training.attention", "materialized", f"--attention-backend {backend}")
    elif backend:
        d.set("training.attention", "flash", f"--attention-backend {backend}")
    iters, samples = a.int("train-iters"), a.int("train-samples")
    seq, gbs_final = d.get("model.seq_len"), d.get("training.global_batch")
    if isinstance(seq, int):
        if samples and samples * seq <= 1e18:
            d.set("training.tokens", float(samples * seq), "--train-samples x seq_len")
        elif iters and isinstance(gbs_final, int) and iters * gbs_final * seq <= 1e18:
            d.set("training.tokens", float(iters * gbs_final * seq), "--train-iters x global batch x seq_len")


def _recompute(a: Args, d: Draft) -> None:
    gran = a.value("recompute-granularity")
    if a.on("recompute-activations"):
        gran = gran or "selective"
    method, layers = a.value("recompute-method"), a.int("recompute-num-layers")
    if gran in ("selective", "full"):
        d.set("training.recompute", gran, f"--recompute-granularity {gran}")
        if gran == "full" and method == "block" and layers is not None and layers >= 1:
            d.set("training.recompute_layers", layers, "--recompute-method block --recompute-num-layers")
        elif gran == "full" and method:
            d.note(
                "training",
                f"--recompute-method {method} --recompute-num-layers {layers}: every layer recomputed",
            )
        modules = a.value("recompute-modules")
        if gran == "selective" and modules:
            recompute_modules(modules.split(), d, "--recompute-modules")
    elif gran:
        d.unmapped("training", f"--recompute-granularity {gran}")
    a.value("recompute-modules")
