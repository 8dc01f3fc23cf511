"""Megatron-LM's model arguments as ``[model]`` keys (megatron/training/arguments.py and
megatron/core/transformer/transformer_config.py, github.com/NVIDIA/Megatron-LM @ d98e8a6).

Defaults: ``ffn_hidden_size`` 4 h (with ``--swiglu``, ``int(4 h x 2/3 / 64) x 64``),
``kv_channels`` h / heads, tied embeddings unless ``--untie-embeddings-and-output-weights``,
dropout 0.1. MoE (``TransformerConfig``): ``--num-experts``, ``--moe-router-topk`` (default
2), ``--moe-ffn-hidden-size`` (default the dense width), ``--moe-shared-expert-intermediate-size``
(one shared MLP of that width: ``shared_experts`` in units of the expert width),
``--moe-layer-freq`` (an int k: layer i is MoE where ``i % k == 0``; or a Python list
expression such as ``([0]*3+[1]*58)``, ``gpt_layer_specs.py``), giving ``dense_layers``.
Multi-latent attention (``MLATransformerConfig``): ``--q-lora-rank`` (default none: a plain
query projection), ``--kv-lora-rank`` (32), ``--qk-head-dim`` (128) + ``--qk-pos-emb-head-dim``
(64) as ``head_dim``, ``--v-head-dim`` (128). The vocabulary is padded to a multiple of
``--make-vocab-size-divisible-by`` (128) x TP (``vocab_size_with_padding``,
megatron/core/tokenizers/utils/build_tokenizer.py).
"""

from __future__ import annotations

import ast
import math
from typing import TYPE_CHECKING, Any

from shardmeter.importers.draft import Draft
from shardmeter.importers.files import ConfigError
from shardmeter.load.specs import RECOMPUTE_MODULES

if TYPE_CHECKING:
    from shardmeter.importers.megatron import Args

__all__ = [
    "model_keys",
    "vocab_keys",
    "padded_vocab",
    "layer_pattern",
    "recompute_modules",
    "GPT2_VOCAB",
    "TOKENIZER_VOCABS",
]

#: GPT-2's BPE vocabulary (gpt2-vocab.json: 50,257 tokens; Radford et al. 2019), the tokenizer of
#: Megatron-LM's GPT examples (``--vocab-file gpt2-vocab.json``, ``GPT2BPETokenizer``).
GPT2_VOCAB = 50257
#: Tokenizer types whose vocabulary is fixed: Llama 2's SentencePiece model has 32,000 tokens
#: (Touvron et al. 2023, arXiv 2307.09288, section 2.1); BERT's WordPiece vocabularies
#: (google-research/bert: uncased 30,522, cased 28,996 entries in vocab.txt).
TOKENIZER_VOCABS = {
    "GPT2BPETokenizer": GPT2_VOCAB,
    "Llama2Tokenizer": 32000,
    "BertWordPieceLowerCase": 30522,
    "BertWordPieceCase": 28996,
}
#: Hugging Face tokenizers (``--tokenizer-model``) by repository prefix: the ``vocab_size`` of
#: the model's config.json (tests/fixtures/hf: llama-3-8b, llama-3.1-8b, deepseek-v3,
#: mixtral-8x7b-v0.1, mistral-7b-v0.1, mistral-7b-v0.3, qwen3-30b-a3b; gpt-oss: torchtitan's
#: ``GptOssModelArgs.vocab_size``). Megatron pads what the tokenizer has to the same multiple.
HF_VOCABS = {
    "meta-llama/Meta-Llama-3": 128256,
    "meta-llama/Llama-3": 128256,
    "deepseek-ai/DeepSeek-V3": 129280,
    "mistralai/Mixtral-8x7B": 32000,
    "mistralai/Mistral-7B-v0.1": 32000,
    "mistralai/Mistral-7B-Instruct-v0.3": 32768,
    "mistralai/Mistral-7B-v0.3": 32768,
    "Qwen/Qwen3-30B-A3B": 151936,
    "openai/gpt-oss": 201088,
}
#: Layers a ``--moe-layer-freq`` list may hold, at most.
MAX_PATTERN = 1 << 16


def padded_vocab(vocab: int, divisible_by: int, tp: int) -> int:
    """Megatron-LM's ``vocab_size_with_padding``: up to a multiple of ``divisible_by x tp``."""
    multiple = divisible_by * tp
    return int(math.ceil(vocab / multiple) * multiple)


def layer_pattern(text: str, layers: int, file: str) -> list[int]:
    """``--moe-layer-freq`` as one 0/1 per layer (1: MoE), as ``moe_freq_type`` and
    ``get_gpt_decoder_block_spec`` read it: an int k (MoE where ``i % k == 0``) or a list
    expression of 0s and 1s with ``+`` and ``*`` (``([0]*3+[1]*58)``), never evaluated as code."""
    s = text.strip()
    if s.isascii() and s.isdigit():
        k = int(s[:9])
        if k < 1:
            raise ConfigError(file, f"--moe-layer-freq {s}: expected an integer >= 1")
        return [1 if i % k == 0 else 0 for i in range(layers)]
    try:
        tree = ast.parse(s, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ConfigError(file, f"--moe-layer-freq {s[:40]!r}: not an integer or a list expression") from None

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add) and isinstance(a, list) and isinstance(b, list):
                out = a + b
            elif isinstance(node.op, ast.Mult) and isinstance(a, list) != isinstance(b, list):
                seq, n = (a, b) if isinstance(a, list) else (b, a)
                if len(seq) * max(n, 0) > MAX_PATTERN:
                    raise ValueError("too long")
                out = seq * n
            else:
                raise ValueError("not a list")
            if len(out) > MAX_PATTERN:
                raise ValueError("too long")
            return out
        raise ValueError("not a 0/1 list")

    try:
        pattern = ev(tree.body)
    except (ValueError, RecursionError, TypeError):
        raise ConfigError(file, f"--moe-layer-freq {s[:40]!r}: not a list of 0s and 1s") from None
    if not isinstance(pattern, list) or any(p not in (0, 1) for p in pattern):
        raise ConfigError(file, f"--moe-layer-freq {s[:40]!r}: not a list of 0s and 1s")
    if len(pattern) != layers:
        raise ConfigError(
            file,
            f"--moe-layer-freq: {len(pattern)} entries for {layers} layers (Megatron asserts they match)",
        )
    return pattern


def model_keys(a: Args, d: Draft) -> None:
    """``[model]``: the shape, attention (GQA or MLA), MLP, MoE and the sequence."""
    for flag, key in (("num-layers", "layers"), ("hidden-size", "hidden"), ("num-attention-heads", "heads")):
        v = a.int(flag, minimum=1)
        if v is not None:
            d.set(f"model.{key}", v, f"--{flag}")
    hidden, heads = d.get("model.hidden"), d.get("model.heads")
    if a.on("multi-latent-attention"):
        _mla(a, d)
    else:
        _gqa(a, d, hidden, heads)
    _mlp(a, d, hidden)
    seq = a.int("seq-length", minimum=1)
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
    _moe(a, d)
    mtp = a.int("mtp-num-layers")
    if mtp:
        d.note(
            "model",
            f"not modelled: --mtp-num-layers {mtp} (multi-token prediction layers; their parameters and compute left out)",
        )
        d.planned("model.mtp_layers", str(mtp), "--mtp-num-layers")
    rates = {f: a.float(f) for f in ("attention-dropout", "hidden-dropout")}
    on = [
        f"--{f} {v:g}" if v is not None else f"--{f} 0.1 (default)"
        for f, v in rates.items()
        if v is None or v > 0
    ]
    d.set("model.dropout", bool(on), ", ".join(on) if on else "--attention-dropout 0, --hidden-dropout 0")


def _gqa(a: Args, d: Draft, hidden: Any, heads: Any) -> None:
    if a.on("group-query-attention"):
        q = a.int("num-query-groups", 1, minimum=1)
        d.set("model.kv_heads", q, "--num-query-groups (with --group-query-attention)")
    elif a.on("num-query-groups"):
        a.int("num-query-groups")
        d.note(
            "model", "ignored: --num-query-groups without --group-query-attention (Megatron uses all heads)"
        )
    kv = a.int("kv-channels", minimum=1)
    if kv is not None and not (hidden and heads and kv * heads == hidden):
        d.set("model.head_dim", kv, "--kv-channels")


def _mla(a: Args, d: Draft) -> None:
    q_rank = a.int("q-lora-rank", minimum=1)
    kv_rank = a.int("kv-lora-rank", 32, minimum=1)
    qk = a.int("qk-head-dim", 128, minimum=1)
    rope = a.int("qk-pos-emb-head-dim", 64, minimum=0)
    v = a.int("v-head-dim", 128, minimum=1)
    a.int("kv-channels")

    def src(flag: str, default: int) -> str:
        return f"--{flag}" if flag in a.flags else f"Megatron's default --{flag} {default}"

    d.set(
        "model.head_dim",
        (qk or 0) + (rope or 0),
        f"{src('qk-head-dim', 128)} + {src('qk-pos-emb-head-dim', 64)}",
    )
    d.set("model.v_head_dim", v, src("v-head-dim", 128))
    d.set("model.kv_lora_rank", kv_rank, src("kv-lora-rank", 32))
    if q_rank is not None:
        d.set("model.q_lora_rank", q_rank, "--q-lora-rank")
    d.note(
        "model",
        "multi-head latent attention approximated: the decoupled RoPE key counted per head, the latents' "
        "norms left out; --kv-channels unused",
    )


def _mlp(a: Args, d: Draft, hidden: Any) -> None:
    swiglu, geglu = a.on("swiglu"), a.on("quick-geglu")
    if geglu:
        d.note(
            "model",
            "--quick-geglu: a gated MLP (GeGLU with quick GELU) counted as the three-matrix 'swiglu' kind",
        )
    kind = "swiglu" if swiglu or geglu else "gelu"
    d.set(
        "model.ffn",
        kind,
        "--swiglu" if swiglu else "--quick-geglu" if geglu else "Megatron's default MLP (GeLU)",
    )
    if a.on("squared-relu"):
        d.note("model", "--squared-relu: a two-matrix MLP priced as GeLU's")
    ffn = a.int("ffn-hidden-size", minimum=1)
    if ffn is not None:
        d.set("model.ffn_hidden", ffn, "--ffn-hidden-size")
    elif isinstance(hidden, int):
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
        d.set(
            "model.ffn_hidden", ffn, "Megatron's default: " + ("int(4h x 2/3 / 64) x 64" if swiglu else "4 h")
        )


def _moe(a: Args, d: Draft) -> None:
    experts = a.int("num-experts", minimum=1)
    topk = a.int("moe-router-topk", minimum=1)
    if not experts or experts == 1:
        for flag in ("moe-ffn-hidden-size", "moe-shared-expert-intermediate-size", "moe-layer-freq"):
            a.value(flag)
        if experts == 1:
            d.note("model", "--num-experts 1: one expert behind a router, priced as a dense MLP")
        return
    d.set("model.experts", experts, "--num-experts")
    d.set(
        "model.experts_per_token",
        topk or 2,
        "--moe-router-topk" if topk else "Megatron's default --moe-router-topk 2",
    )
    dense = d.get("model.ffn_hidden")
    moe = a.int("moe-ffn-hidden-size", minimum=1)
    if moe is not None and moe != dense:
        d.set("model.moe_ffn_hidden", moe, "--moe-ffn-hidden-size")
    width = moe or dense
    shared = a.int("moe-shared-expert-intermediate-size", minimum=1)
    if shared and isinstance(width, int):
        n = max(1, round(shared / width))
        d.set(
            "model.shared_experts",
            n,
            f"--moe-shared-expert-intermediate-size {shared} / the expert width {width}",
        )
        if n * width != shared:
            d.note("model", f"the shared expert of {shared} counted as {n} x {width}")
    freq = a.value("moe-layer-freq")
    layers = d.get("model.layers")
    if freq is not None and isinstance(layers, int):
        pattern = layer_pattern(freq, layers, a.file)
        n_dense = pattern.count(0)
        if n_dense:
            d.set("model.dense_layers", n_dense, f"--moe-layer-freq {freq}: {n_dense} dense layers")
            if any(pattern[:n_dense]):
                d.note(
                    "model",
                    f"the {n_dense} dense layers of --moe-layer-freq are interleaved; counted as if they led",
                )


def vocab_keys(a: Args, d: Draft) -> None:
    """``[model] vocab``: ``--vocab-size``, or the tokenizer's (:data:`TOKENIZER_VOCABS`,
    :data:`HF_VOCABS`), padded as Megatron pads it."""
    div = a.int("make-vocab-size-divisible-by", 128, minimum=1) or 128
    tp = d.get("parallelism.tp", 1)
    vocab, src = a.int("vocab-size", minimum=1), "--vocab-size"
    tok = a.value("tokenizer-type")
    bpe_pair = "vocab-file" in a.flags and "merge-file" in a.flags
    a.read.update(("vocab-file", "merge-file"))
    if vocab is None and "vocab-size" not in a.flags:
        if tok in TOKENIZER_VOCABS:
            vocab, src = TOKENIZER_VOCABS[tok], f"--tokenizer-type {tok}"
        elif tok is None and bpe_pair:
            vocab, src = GPT2_VOCAB, "GPT-2 BPE tokenizer (--vocab-file + --merge-file)"
        elif tok in ("HuggingFaceTokenizer", "MultimodalTokenizer", "SFTTokenizer"):
            model = a.value("tokenizer-model") or ""
            hit = next((v for p, v in HF_VOCABS.items() if model.startswith(p)), None)
            if hit is not None:
                vocab, src = hit, f"--tokenizer-model {model}: the model's config.json vocab_size"
    if vocab is None:
        if not any(key == "model.vocab" for _, key in d.needs.values()):
            what = f"--tokenizer-type {tok}" if tok else "no tokenizer named"
            d.need(
                "model.vocab",
                f"the tokenizer's vocabulary ({what}) is not in the arguments: --set model.vocab=N",
                "model.vocab",
            )
        return
    padded = padded_vocab(vocab, div, tp)
    d.set("model.vocab", padded, f"{src} {vocab} padded to a multiple of {div} x tp {tp}")


def recompute_modules(mods: list[Any], d: Draft, why: str) -> None:
    """Megatron-Core's ``recompute_modules`` as ``training.recompute_modules``: the ones the model
    prices (:data:`~shardmeter.load.specs.RECOMPUTE_MODULES`), a note naming the others (the
    GatedDeltaNet and hyper-connection modules)."""
    names = [m for m in mods if isinstance(m, str)]
    known = [m for m in dict.fromkeys(names) if m in RECOMPUTE_MODULES]
    other = [m for m in names if m not in RECOMPUTE_MODULES]
    if known != ["core_attn"]:
        d.set("training.recompute_modules", known, why)
    if other or len(names) != len(mods):
        d.note("training", f"{why}: not priced: {', '.join(map(str, other)) or 'a value not read'}")
