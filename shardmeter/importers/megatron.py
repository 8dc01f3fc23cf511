"""``shardmeter import megatron ARGS``: Megatron-LM command-line arguments as a scenario.

The file holds the arguments as Megatron-LM's example scripts write them (one ``--flag value``
per line, with ``\\`` continuations, ``#`` comments and bash array lines such as
``MODEL_ARGS=(`` / ``)``); a value that is a shell variable (``$TP``, ``${SEQ}``) cannot be
known and is reported, not guessed. Defaults are Megatron-LM's own
(``megatron/training/arguments.py``, ``megatron/core/transformer/transformer_config.py``,
github.com/NVIDIA/Megatron-LM): ``ffn_hidden_size`` 4 h (with ``--swiglu``,
``int(4 h x 2/3 / 64) x 64``), ``kv_channels`` h / heads, tied embeddings unless
``--untie-embeddings-and-output-weights``, fp32 unless ``--bf16``/``--fp16``, a global batch of
``micro-batch-size x dp``, the vocabulary padded to a multiple of
``make-vocab-size-divisible-by`` (128) x TP (``vocab_utils._vocab_size_with_padding``).
"""

from __future__ import annotations

import math
import os
import re
import shlex

from shardmeter.importers.draft import Draft
from shardmeter.importers.files import ConfigError, read_text

__all__ = ["draft_from_file", "draft_from_text", "parse_args_text", "padded_vocab", "GPT2_VOCAB"]

#: GPT-2's BPE vocabulary (gpt2-vocab.json: 50,257 tokens; Radford et al. 2019), the tokenizer of
#: Megatron-LM's GPT examples (``--vocab-file gpt2-vocab.json``, ``GPT2BPETokenizer``).
GPT2_VOCAB = 50257

_VAR = re.compile(r"\$")


def padded_vocab(vocab: int, divisible_by: int, tp: int) -> int:
    """Megatron-LM's ``_vocab_size_with_padding``: up to a multiple of ``divisible_by x tp``."""
    multiple = divisible_by * tp
    return int(math.ceil(vocab / multiple) * multiple)


def parse_args_text(text: str) -> tuple[list[tuple[str, list[str], int]], list[str]]:
    """``(flag, values, line)`` for every ``--flag`` in ``text`` and the lines shlex cannot split.

    Each physical line is split on its own (a continuation ``\\`` ends it); a quoted token that
    itself holds a flag (``"--fp8-format hybrid"``) is split again; ``(``, ``)`` and words that
    are not flags before the first flag of a line (``torchrun``, ``NAME=(``) are shell syntax."""
    found: list[tuple[str, list[str], int]] = []
    bad: list[str] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if line.endswith("\\"):
            line = line[:-1]
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            if "--" in line:
                bad.append(f"line {no}: {line.strip()}")
            continue
        words: list[str] = []
        for t in tokens:
            words.extend(t.split() if t.startswith("--") and " " in t else [t])
        current: tuple[str, list[str], int] | None = None
        for w in words:
            if w.startswith("--") and len(w) > 2:
                flag, eq, val = w.partition("=")
                current = (flag[2:], [val] if eq else [], no)
                found.append(current)
            elif current is not None and w not in ("(", ")"):
                current[1].append(w)
    return found, bad


def draft_from_file(
    path: str | os.PathLike,
    *,
    gpus: int | None = None,
    node: int = 8,
    config: str | None = None,
    variables: dict[str, str] | None = None,
) -> Draft:
    """The draft scenario of the Megatron-LM arguments in ``path`` (:func:`draft_from_text`)."""
    text, name = read_text(path)
    return draft_from_text(text, name, gpus=gpus, node=node)


class _Args:
    """The parsed flags, each marked when read; the value of a flag given twice is the last one
    (argparse's rule)."""

    def __init__(self, found: list[tuple[str, list[str], int]], file: str):
        self.file = file
        self.flags: dict[str, list[str]] = {}
        self.order: list[str] = []
        for flag, values, _ in found:
            if flag not in self.flags:
                self.order.append(flag)
            self.flags[flag] = values
        self.read: set[str] = set()
        self.shell: list[str] = []

    def on(self, flag: str) -> bool:
        self.read.add(flag)
        return flag in self.flags

    def value(self, flag: str) -> str | None:
        self.read.add(flag)
        vals = self.flags.get(flag)
        if not vals:
            return None
        v = " ".join(vals)
        if _VAR.search(v):
            self.shell.append(f"--{flag} {v}")
            return None
        return v

    def int(self, flag: str, default: int | None = None) -> int | None:
        v = self.value(flag)
        if v is None:
            return default
        try:
            n = int(float(v)) if re.fullmatch(r"\d+(\.0*)?([eE]\d+)?", v) else int(v)
        except ValueError:
            raise ConfigError(self.file, f"--{flag}: expected an integer, got {v!r}") from None
        if n < 0:
            raise ConfigError(self.file, f"--{flag}: expected an integer >= 0, got {n}")
        return n


def draft_from_text(text: str, file: str, *, gpus: int | None = None, node: int = 8) -> Draft:
    """A :class:`Draft` of Megatron-LM arguments.

    :param gpus: the world size (``--gpus``); without it, the fewest whole ``node``-GPU nodes
        that hold ``tp x pp x cp`` (the examples' ``GPUS_PER_NODE=8``)."""
    found, bad = parse_args_text(text)
    if not found:
        raise ConfigError(file, "no Megatron-LM arguments (--flag value) found")
    a = _Args(found, file)
    d = Draft(kind="megatron", file=file)
    d.header = [
        f"Scenario imported from the Megatron-LM arguments in {os.path.basename(file)} by `shardmeter import megatron`.",
        "Each key says the argument it came from; arguments with no scenario key are comments.",
        "Megatron-LM defaults: megatron/training/arguments.py (github.com/NVIDIA/Megatron-LM).",
    ]
    _model(a, d)
    _parallel(a, d, gpus, node)
    _training(a, d)
    _vocab(a, d)
    for line in bad:
        d.note("source", f"not read (unbalanced quotes): {line}")
    for s in a.shell:
        d.note("source", f"not mapped: {s} (a shell variable; write its value in the file)")
    for flag in a.order:
        if flag not in a.read:
            vals = " ".join(a.flags[flag])
            d.unmapped("source", f"--{flag}" + (f" {vals}" if vals else ""))
    d.set("source.imported_from", f"Megatron-LM arguments {os.path.basename(file)}")
    return d


def _model(a: _Args, d: Draft) -> None:
    for flag, key in (("num-layers", "layers"), ("hidden-size", "hidden"), ("num-attention-heads", "heads")):
        v = a.int(flag)
        if v is not None:
            d.set(f"model.{key}", v, f"--{flag}")
    hidden, heads = d.get("model.hidden"), d.get("model.heads")
    if a.on("group-query-attention"):
        q = a.int("num-query-groups", 1)
        d.set("model.kv_heads", q, "--num-query-groups (with --group-query-attention)")
    elif a.on("num-query-groups"):
        a.int("num-query-groups")
        d.note(
            "model", "ignored: --num-query-groups without --group-query-attention (Megatron uses all heads)"
        )
    kv = a.int("kv-channels")
    if kv is not None and not (hidden and heads and kv * heads == hidden):
        d.set("model.head_dim", kv, "--kv-channels")
    swiglu = a.on("swiglu")
    d.set(
        "model.ffn", "swiglu" if swiglu else "gelu", "--swiglu" if swiglu else "Megatron's default MLP (GeLU)"
    )
    ffn = a.int("ffn-hidden-size")
    if ffn is not None:
        d.set("model.ffn_hidden", ffn, "--ffn-hidden-size")
    elif isinstance(hidden, int):
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
        d.set(
            "model.ffn_hidden", ffn, "Megatron's default: " + ("int(4h x 2/3 / 64) x 64" if swiglu else "4 h")
        )
    seq = a.int("seq-length")
    if seq is not None:
        d.set("model.seq_len", seq, "--seq-length")
    pos = a.int("max-position-embeddings")
    if pos is not None and pos != seq:
        d.note("model", f"--max-position-embeddings {pos}: the position table only; seq_len is --seq-length")
    untie = a.on("untie-embeddings-and-output-weights")
    d.set(
        "model.tied_embeddings",
        not untie,
        "--untie-embeddings-and-output-weights"
        if untie
        else "Megatron ties them unless --untie-embeddings-and-output-weights",
    )
    experts = a.int("num-experts")
    if experts:
        d.set("model.experts", experts, "--num-experts")
        d.set(
            "model.experts_per_token", a.int("moe-router-topk", 2), "--moe-router-topk (Megatron's default 2)"
        )
    else:
        a.int("moe-router-topk")
    rates = {f: a.value(f) for f in ("attention-dropout", "hidden-dropout")}
    on = [f"--{f} {v}" if v is not None else f"--{f} 0.1 (default)" for f, v in rates.items() if _rate(v) > 0]
    d.set("model.dropout", bool(on), ", ".join(on) if on else "--attention-dropout 0, --hidden-dropout 0")


def _rate(v: str | None) -> float:
    """A dropout rate; Megatron's default is 0.1 for both (``TransformerConfig``)."""
    if v is None:
        return 0.1
    try:
        return float(v)
    except ValueError:
        return 0.1


def _parallel(a: _Args, d: Draft, gpus: int | None, node: int) -> None:
    deg = {}
    for flag, key in (
        ("tensor-model-parallel-size", "tp"),
        ("pipeline-model-parallel-size", "pp"),
        ("context-parallel-size", "cp"),
        ("expert-model-parallel-size", "ep"),
    ):
        v = a.int(flag, 1)
        deg[key] = v or 1
        if v and v != 1:
            d.set(f"parallelism.{key}", v, f"--{flag}")
    fixed = deg["tp"] * deg["pp"] * deg["cp"]
    world = gpus if gpus is not None else node * max(1, math.ceil(fixed / node))
    if world % fixed:
        raise ConfigError(
            d.file,
            f"--gpus {world}: not a multiple of tp x pp x cp = {fixed} (Megatron's data-parallel size is the rest)",
        )
    d.world, d.dp = world, world // fixed
    d.world_why = (
        "--gpus"
        if gpus is not None
        else f"{world} GPUs: tp x pp x cp on whole {node}-GPU nodes; give --gpus N"
    )
    if a.on("sequence-parallel"):
        d.set("parallelism.sequence_parallel", True, "--sequence-parallel")
    if deg["pp"] > 1:
        v_layers = a.int("num-layers-per-virtual-pipeline-stage")
        v_stages = a.int("num-virtual-stages-per-pipeline-rank")
        layers = d.get("model.layers")
        if v_stages and v_stages > 1:
            d.set("parallelism.schedule", "interleaved", "--num-virtual-stages-per-pipeline-rank")
            d.set("parallelism.virtual_stages", v_stages, "--num-virtual-stages-per-pipeline-rank")
        elif v_layers and isinstance(layers, int) and layers // (deg["pp"] * v_layers) > 1:
            d.set("parallelism.schedule", "interleaved", "--num-layers-per-virtual-pipeline-stage")
            d.set(
                "parallelism.virtual_stages", layers // (deg["pp"] * v_layers), f"layers / (pp x {v_layers})"
            )
        else:
            d.set("parallelism.schedule", "1f1b", "Megatron's non-interleaved 1F1B")
    first, last = a.int("decoder-first-pipeline-num-layers"), a.int("decoder-last-pipeline-num-layers")
    if first is not None:
        d.planned("parallelism.first_stage_layers", str(first), "--decoder-first-pipeline-num-layers")
    if last is not None:
        d.planned("parallelism.last_stage_layers", str(last), "--decoder-last-pipeline-num-layers")
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
    if a.on("tp-comm-overlap"):
        d.set("parallelism.tp_comm_overlap", True, "--tp-comm-overlap")
    if a.on("overlap-grad-reduce"):
        d.set("parallelism.dp_comm_overlap", True, "--overlap-grad-reduce")
    a.on("overlap-param-gather")


def _training(a: _Args, d: Draft) -> None:
    mbs = a.int("micro-batch-size")
    if mbs is not None:
        d.set("training.micro_batch", mbs, "--micro-batch-size")
    gbs = a.int("global-batch-size")
    if gbs is not None:
        d.set("training.global_batch", gbs, "--global-batch-size")
    elif mbs is not None:
        d.set("training.global_batch", mbs * d.dp, f"Megatron's default: micro-batch-size x dp ({d.dp})")
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
        if a.on("fp8-param-gather"):
            d.planned("training.fp8_params", "true", "--fp8-param-gather")
    gran = a.value("recompute-granularity")
    if a.on("recompute-activations"):
        gran = gran or "selective"
    method, layers = a.value("recompute-method"), a.int("recompute-num-layers")
    if gran in ("selective", "full"):
        d.set("training.recompute", gran, f"--recompute-granularity {gran}")
        if gran == "full" and method == "block" and layers is not None:
            d.set("training.recompute_layers", layers, "--recompute-method block --recompute-num-layers")
        elif gran == "full" and method:
            d.note(
                "training",
                f"--recompute-method {method} --recompute-num-layers {layers}: every layer recomputed",
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
        if samples:
            d.set("training.tokens", float(samples * seq), "--train-samples x seq_len")
        elif iters and isinstance(gbs_final, int):
            d.set("training.tokens", float(iters * gbs_final * seq), "--train-iters x global batch x seq_len")


def _vocab(a: _Args, d: Draft) -> None:
    div = a.int("make-vocab-size-divisible-by", 128) or 128
    tp = d.get("parallelism.tp", 1)
    vocab, src = a.int("vocab-size"), "--vocab-size"
    tok = a.value("tokenizer-type")
    bpe_pair = "vocab-file" in a.flags and "merge-file" in a.flags
    a.read.update(("vocab-file", "merge-file"))
    if vocab is None and (tok == "GPT2BPETokenizer" or (tok is None and bpe_pair)):
        vocab, src = (
            GPT2_VOCAB,
            "GPT-2 BPE tokenizer (" + ("--tokenizer-type" if tok else "--vocab-file + --merge-file") + ")",
        )
    if vocab is None:
        d.note(
            "model",
            "vocab: not in the arguments (it comes from the tokenizer); write [model] vocab",
        )
        return
    padded = padded_vocab(vocab, div, tp)
    d.set("model.vocab", padded, f"{src} {vocab} padded to a multiple of {div} x tp {tp}")
