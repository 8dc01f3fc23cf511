"""Signals: a command that runs the planner inside it (``init``, ``import hf --gpu``) honours
Ctrl-C as an interruption, exit 130 with its output untouched, never as "the best layout so far"
written over the user's file (that answer is ``plan``'s alone, which says it was interrupted).
SIGTERM ends the process by its default action (exit status 143 in a shell, -15 from
``subprocess``) and leaves the output as it was too: the file is only ever replaced whole
(:func:`shardmeter.io.atomic_write`), after the search.

Each run starts the real command in a child process whose planner announces that it has merged
its first chunk of results and then waits, so the signal arrives mid-search, deterministically.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: The child: the CLI with a planner that says READY after its first merged chunk, then waits.
CHILD = r"""
import sys, time
import shardmeter.explore.search.plan as plan
merge = plan._merge
def merged_then_wait(*args, **kwargs):
    out = merge(*args, **kwargs)
    sys.stderr.write("READY\n"); sys.stderr.flush()
    time.sleep(60)
    return out
plan._merge = merged_then_wait
from shardmeter.cli.app import main
sys.exit(main(sys.argv[1:]))
"""

OLD = b"# my scenario, hand-written\n[model]\npreset = 'llama3-8b'\n"


def _interrupt(args: list[str], sig: int, cwd: pathlib.Path) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
        assert "READY" in line, line + proc.stderr.read()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


def _hf_config(path: pathlib.Path) -> pathlib.Path:
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
    }
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_init_interrupted_leaves_an_existing_output_byte_identical(tmp_path, sig):
    out = tmp_path / "run.toml"
    out.write_bytes(OLD)
    code, err = _interrupt(["init", "--preset", "llama3-8b", "--gpus", "16", "-o", str(out)], sig, tmp_path)
    assert out.read_bytes() == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["run.toml"]  # no temporary file left
    if sig == signal.SIGINT:
        assert code == 130, err
        assert err.strip().splitlines()[-1] == "shardmeter: interrupted"
    else:
        assert code in (-signal.SIGTERM, 128 + signal.SIGTERM), err
    assert "Traceback" not in err


def test_import_hf_with_a_gpu_interrupted_writes_nothing(tmp_path):
    cfg = _hf_config(tmp_path / "config.json")
    out = tmp_path / "run.toml"
    out.write_bytes(OLD)
    code, err = _interrupt(
        ["import", "hf", str(cfg), "--gpu", "a100-sxm-80gb", "--gpus", "16", "-o", str(out)],
        signal.SIGINT,
        tmp_path,
    )
    assert code == 130, err
    assert out.read_bytes() == OLD


def test_plan_interrupted_still_returns_the_best_so_far(tmp_path):
    """``plan`` keeps its documented answer: the plans found so far, marked interrupted, exit 130."""
    code, err = _interrupt(
        ["plan", "--json", str(ROOT / "examples" / "gpt3-175b-a100.toml")], signal.SIGINT, tmp_path
    )
    assert code == 130, err
    assert "best found so far" in err
