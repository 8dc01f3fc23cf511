"""Small scenarios several test modules share (imported as a plain module: pytest puts
``tests/`` on ``sys.path`` for the test files in it)."""

from __future__ import annotations

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
