"""Small scenarios several test modules share (imported as a plain module: pytest puts
``tests/`` on ``sys.path`` for the test files in it)."""

from __future__ import annotations

import copy
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: The three-island, two-GPU example of issue 6.
THREE_ISLANDS = ROOT / "examples" / "multi-island" / "three-islands.toml"

#: A small model on 2 nodes x 4 GPUs: the whole default plan space is ~10^5 candidates.
TINY = {
    "model": {"layers": 8, "hidden": 2048, "heads": 16, "vocab": 32000, "seq_len": 2048},
    "training": {"global_batch": 64, "micro_batch": 1, "tokens": 2e9},
    "island": [
        {
            "name": "c",
            "gpu": "a100-sxm-40gb",
            "nodes": 2,
            "gpus_per_node": 4,
            "inter_node": "ib-hdr",
            "price": "cloud-on-demand",
        }
    ],
}


# Llama 3 8B as torchtitan's llama3_8b.toml builds it (tests/fixtures/torchtitan/2026-02-23_238fa99_last_toml/torchtitan/models/llama3/train_configs/llama3_8b.toml):
# FSDP over 8 H100, seq 8192, local batch 1, per-op selective recompute, compiled. Its shape:
H, Q, KV, FFN, HEADS, LAYERS, VOCAB, SEQ = 4096, 4096, 1024, 14336, 32, 32, 128256, 8192

LLAMA3_8B = {
    "model": {
        "layers": LAYERS,
        "hidden": H,
        "heads": HEADS,
        "kv_heads": 8,
        "ffn_hidden": FFN,
        "ffn": "swiglu",
        "vocab": VOCAB,
        "tied_embeddings": False,
        "seq_len": SEQ,
    },
    "training": {
        "global_batch": 8,
        "micro_batch": 1,
        "precision": "bf16",
        "recompute": "op",
        "compile": True,
    },
    "island": [{"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8}],
    "parallelism": {"sharding": "fsdp"},
}


def llama3_8b(**training) -> dict:
    """A fresh copy of :data:`LLAMA3_8B` with ``[training]`` keys set (None: removed)."""
    sc = copy.deepcopy(LLAMA3_8B)
    for k, v in training.items():
        if v is None:
            sc["training"].pop(k, None)
        else:
            sc["training"][k] = v
    return sc
