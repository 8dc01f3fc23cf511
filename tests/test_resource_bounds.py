"""No input of 1 MB or less makes a command run longer than 10 s or use more than 1 GB (issue 25,
"Bounds before work"): each hostile input runs the real command line in a child process whose
address space is capped at 1 GiB (``RLIMIT_AS``) and its CPU time at 10 s (``RLIMIT_CPU``: the
kernel kills it with SIGXCPU; CPU time, so that a machine shared with other jobs does not fail
the bound), with a wall-clock timeout for a command that blocks without computing. These are
bounds, not speed measurements: a command that finishes in 0.1 s or in 9 s passes alike; one that
builds a list per layer of a 10^9-layer model, copies the registry once per overlay entry, or
scans every island once per island does not finish (or runs out of memory, which the command line
reports as ``MemoryError: input too large``).

Each command must end with its answer (exit 0) or a one-line error (exit 2, never a traceback,
never the out-of-memory line)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIMIT_S = 10
#: The wall-clock limit: a command blocked on something (a FIFO, a lock) uses no CPU time.
WALL_S = 60.0
LIMIT_BYTES = 1 << 30
MB = 1_000_000

MODEL = """[model]
layers = {layers}
hidden = 2048
heads = 16
vocab = 32000
seq_len = 2048
{extra}
[training]
global_batch = 64
tokens = 2e9
"""
ISLAND = """[[island]]
name = "{name}"
gpu = "{gpu}"
nodes = 1
gpus_per_node = 8
inter_node = "ib-hdr"
"""
OFFER = """[[offer]]
name = "o{i}"
gpu = "a100-sxm-40gb"
max_nodes = 4
gpus_per_node = 8
inter_node = "ib-hdr"
price_usd_per_gpu_hour = 2.0
"""
NETWORK = '[network]\nlink = { name = "internet", bandwidth_gb_s = 0.25, latency_us = 60000 }\n'
GPU = """[[gpu]]
name = "g{i}"
memory_gb = 80
memory_bandwidth_gb_s = 2000
peak_tflops = {{ bf16 = 300, fp32 = 19 }}
"""


def _up_to_1mb(head: str, item: str, tail: str = "", **fmt) -> str:
    """``head`` + as many ``item`` (formatted with ``i``) as fit in 1 MB with ``tail``."""
    parts, size, i = [head], len(head) + len(tail), 0
    while True:
        one = item.format(i=i, **fmt)
        if size + len(one) > MB:
            break
        parts.append(one)
        size += len(one)
        i += 1
    return "".join(parts) + tail


def _one(layers: int = 8, extra: str = "", gpu: str = "a100-sxm-40gb") -> str:
    return MODEL.format(layers=layers, extra=extra) + ISLAND.format(name="c", gpu=gpu)


def _hf(**over) -> str:
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_hidden_layers": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
        **over,
    }
    return json.dumps(cfg)


MOE = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "num_local_experts": 10**9,
    "num_experts_per_tok": 2,
}
QWEN_MOE = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "num_hidden_layers": 10**6,
    "num_experts": 10**6,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 1408,
    "mlp_only_layers": list(range(0, 150_000, 2)),
}

#: id -> ({file name: text}, command line, marks)
CASES = {
    "estimate-1e9-layers": ({"s.toml": _one(layers=10**9)}, ["estimate", "s.toml", "--json"]),
    "plan-1e9-layers": ({"s.toml": _one(layers=10**9)}, ["plan", "s.toml", "--json"]),
    "estimate-1e9-experts": (
        {"s.toml": _one(layers=48, extra="experts = 1000000000\nexperts_per_token = 2")},
        ["estimate", "s.toml", "--json"],
    ),
    "plan-1e9-experts": (
        {"s.toml": _one(layers=48, extra="experts = 1000000000\nexperts_per_token = 2")},
        ["plan", "s.toml", "--json"],
    ),
    "import-hf-1e9-layers": ({"config.json": _hf(num_hidden_layers=10**9)}, ["import", "hf", "config.json"]),
    "import-hf-1e9-experts": ({"config.json": _hf(**MOE)}, ["import", "hf", "config.json"]),
    "import-hf-per-layer-list": ({"config.json": _hf(**QWEN_MOE)}, ["import", "hf", "config.json"]),
    "init-hf-1e9-layers": (
        {"config.json": _hf(num_hidden_layers=10**9)},
        ["init", "--hf", "config.json", "--gpus", "16", "-o", "out.toml"],
    ),
    "estimate-1mb-overlay": (
        {
            "s.toml": 'catalog = ["overlay.toml"]\n' + _one(gpu="g100"),
            "overlay.toml": _up_to_1mb("", GPU),
        },
        ["estimate", "s.toml", "--json"],
    ),
    "plan-1mb-overlay": (
        {
            "s.toml": 'catalog = ["overlay.toml"]\n' + _one(gpu="g100"),
            "overlay.toml": _up_to_1mb("", GPU),
        },
        ["plan", "s.toml", "--json"],
    ),
    "estimate-1mb-of-islands": (
        {
            "s.toml": _up_to_1mb(
                MODEL.format(layers=8, extra=""),
                '[[island]]\nname = "{i}"\ngpu = "a100-sxm-40gb"\nnodes = 1\n',
                NETWORK,
            )
        },
        ["estimate", "s.toml", "--json"],
    ),
    "plan-1mb-of-offers": (
        {"s.toml": _up_to_1mb(MODEL.format(layers=8, extra=""), OFFER, NETWORK)},
        ["plan", "s.toml", "--json"],
    ),
    "sweep-1e9-values": (
        {"s.toml": _one()},
        ["sweep", "s.toml", "--json", "--vary", "model.layers=1..1000000000+1"],
    ),
    "sweep-3e6-point-grid": (
        {"s.toml": _one()},
        [
            "sweep",
            "s.toml",
            "--json",
            "--vary",
            "model.layers=1..3000+1",
            "--vary",
            "training.global_batch=64..64000+64",
        ],
    ),
    # the largest grid a sweep takes (sweep.MAX_GRID, 4,096 points): whole reports, in --json
    "sweep-at-the-grid-limit": (
        {"s.toml": _one()},
        [
            "sweep",
            "s.toml",
            "--json",
            "--vary",
            "training.micro_batch=1,2,4,8",
            "--vary",
            "training.global_batch=64..65536+64",
        ],
    ),
    "sweep-1e300-geometric": (
        {"s.toml": _one()},
        ["sweep", "s.toml", "--json", "--vary", "training.global_batch=1..1e300x1.0000001"],
    ),
}
SLOW = {"plan-1e9-layers", "plan-1e9-experts", "plan-1mb-overlay", "plan-1mb-of-offers", "init-hf-1e9-layers"}


def _limits() -> None:  # in the child, before exec
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (LIMIT_S, LIMIT_S))


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in CASES])
def test_a_small_hostile_input_is_bounded_in_time_and_memory(case, tmp_path):
    files, argv = CASES[case]
    for name, text in files.items():
        assert len(text.encode()) <= MB
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "shardmeter", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=WALL_S,
            preexec_fn=_limits,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: still running after {WALL_S:g} s of wall-clock time")
    assert done.returncode != -signal.SIGXCPU, f"{case}: used more than {LIMIT_S} s of CPU time"
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "input too large" not in done.stderr, done.stderr[-500:]  # the 1 GiB cap was hit
    assert done.returncode in (0, 2), done.stderr[-2000:]
    if done.returncode == 2:
        errors = [ln for ln in done.stderr.splitlines() if ln.startswith("shardmeter: error: ")]
        assert len(errors) == 1 and len(errors[0]) < 600, done.stderr[-2000:]
    elif "--json" in argv:
        json.loads(done.stdout)
