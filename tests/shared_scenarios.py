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


#: torchtitan's 2025-06 H100 A/B runs (benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md at
#: pytorch/torchtitan@2887250b): Llama 3 8B on 8 nodes x 8 H100 (96 GB, 500 W), tp 8 x FSDP 8,
#: local batch 12 at 8,192 tokens, torch.compile, per-op SAC; ``torchtitan_ab`` varies it.
_TT_AB = {
    "model": {
        "layers": 32,
        "hidden": 4096,
        "heads": 32,
        "kv_heads": 8,
        "ffn_hidden": 14336,
        "ffn": "swiglu",
        "vocab": 128256,
        "seq_len": 8192,
        "tied_embeddings": False,
    },
    "training": {
        "global_batch": 96,
        "micro_batch": 12,
        "precision": "bf16",
        "framework": "torchtitan",
        "attention": "flash2",
        "recompute": "op",
        "compile": True,
    },
    "island": [
        {
            "name": "cluster",
            "gpu": {"name": "h100-sxm", "memory_gb": 96.0, "memory_bandwidth_gb_s": 2400.0},
            "nodes": 8,
            "gpus_per_node": 8,
            "intra_node": "nvlink4",
            "inter_node": "roce-400g",
            "nics_per_node": 8,
        }
    ],
    "parallelism": {"tp": 8, "pp": 1, "dp": 8, "sequence_parallel": True, "sharding": "fsdp"},
}

#: The same runs' Llama 3 70B (on 32 nodes, tp 8 x FSDP 32, local batch 16, full AC).
TT_AB_70B = {
    "model": {"layers": 80, "hidden": 8192, "heads": 64, "ffn_hidden": 28672},
    "nodes": 32,
    "training": {"global_batch": 512, "micro_batch": 16, "recompute": "full"},
}


def torchtitan_ab(model: dict | None = None, nodes: int = 8, training: dict | None = None) -> dict:
    """A fresh copy of the torchtitan A/B scenario with ``model`` and ``training`` keys replaced and
    ``nodes`` nodes (FSDP over the nodes: dp = nodes)."""
    d = copy.deepcopy(_TT_AB)
    d["model"] |= model or {}
    d["island"][0]["nodes"] = nodes
    d["parallelism"]["dp"] = nodes
    d["training"] |= training or {}
    return d
