"""torchao's rowwise fp8 against its published A/Bs: the per-linear table of rowwise over bf16
(pytorch/ao PR #2312, 216 shapes, bundled in tests/fixtures/torchao/) and torchtitan's 2025-06
runs of rowwise against tensorwise; and the casts a compiled layer shares (first-principles
count from AOTAutograd's CSE)."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest
from shared_scenarios import TT_AB_70B, torchtitan_ab

import shardmeter
from shardmeter.inputs.bundles import Fp8Recipe
from shardmeter.model import fp8 as F8
from shardmeter.model.elementwise import kernel_time
from shardmeter.model.formulas import gemm_time

HBM = 3350e9 * 0.94  # h100-sxm memory_bandwidth_gb_s x hbm_efficiency (gpus.toml)
TABLE = os.path.join(os.path.dirname(__file__), "fixtures", "torchao", "fp8_rowwise_linear_speedup.csv")


def _table():
    with open(TABLE) as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    return tuple(np.array([float(r[c]) for r in rows]) for c in ("M", "K", "N", "speedup"))


def _speedup(M, K, N):
    # torchao's benchmark module, LayerNorm -> Linear -> Sigmoid, forward + backward, compiled:
    # the fused LayerNorm and Sigmoid (read 2 + write 2 forward, read 4 + write 2 backward per
    # element) run in both; bf16 runs 3 bf16 GEMMs, rowwise 3 fp8 GEMMs and its casts (h100-sxm:
    # 989.4 / 1979 TFLOP/s at 0.64 / 0.68, 132 SMs)
    around = sum(kernel_time(((r, w),), n, HBM) for n in (M * K, M * N) for r, w in ((2, 2), (4, 2)))
    bf16 = 3 * gemm_time(M, N, K, 989.4e12, 0.64, HBM, 132, 2.0) + around
    cf, cb = F8.linear_cast_time("rowwise", True, M, K, N, HBM)
    return bf16 / (3 * gemm_time(M, N, K, 1979e12, 0.68, HBM, 132, 1.0) + cf + cb + around)


def test_per_linear_speedup_follows_torchaos_rowwise_table():
    M, K, N, measured = _table()
    assert len(measured) == 216
    err = _speedup(M, K, N) / measured - 1.0
    # at the roofline (cast kernels at the full HBM rate) the mean error was +63 %, every shape
    # over-predicted; small linears lose to their casts in both (table: 0.38-0.65 at N = 1024)
    assert np.mean(np.abs(err)) < 0.12 and abs(np.mean(err)) < 0.05
    small = N == 1024
    assert np.all(_speedup(M, K, N)[small] < 1.0) and np.all(measured[small] < 1.0)
    # the big shapes gain: M = K = 16384, N = 32768 measured 1.55
    big = (M == 16384) & (K == 16384) & (N == 32768)
    assert _speedup(M, K, N)[big] == pytest.approx(1.55, rel=0.12)


def test_compiled_siblings_cast_their_shared_input_once():
    # Llama-3-8B layer, 8192 tokens, tp 1: compiled, wk and wv reuse wq's casts of the layer
    # input and w3 reuses w1's (AOTAutograd's CSE), so the compiled layer prices 2 input casts
    # of M x h fewer in attention and 1 in the MLP than the sum over its seven linears
    M, h, q, kv, ffn = 8192.0, 4096.0, 4096.0, 1024.0, 14336.0
    f, b = F8.block_cast_time(Fp8Recipe.ROWWISE, True, True, M, M, h, q, kv, kv, q, ffn, 1.0, HBM)
    lin = [(h, q), (h, kv), (h, kv), (q, h), (h, ffn), (h, ffn), (ffn, h)]
    every = [F8.linear_cast_time("rowwise", True, M, k, n, HBM) for k, n in lin]
    x_cast = (
        F8.linear_cast_time("rowwise", True, M, h, q, HBM)[0]
        - F8.linear_cast_time("rowwise", True, M, h, q, HBM, input_cast=False)[0]
    )
    assert x_cast > 0
    assert f == pytest.approx(sum(e[0] for e in every) - 3 * x_cast, rel=1e-9)
    assert b == pytest.approx(sum(e[1] for e in every), rel=1e-9)  # backward casts are per linear
    # eager: each Float8Linear casts its own input
    fe, _ = F8.block_cast_time(Fp8Recipe.ROWWISE, False, True, M, M, h, q, kv, kv, q, ffn, 1.0, HBM)
    assert fe == pytest.approx(sum(F8.linear_cast_time("rowwise", False, M, k, n, HBM)[0] for k, n in lin))


# torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (pytorch/torchtitan@2887250b),
# vanilla TP: Llama 3 8B on 64 H100 (96 GB, 500 W), tp 8 x FSDP 8, compile, per-op SAC:
# fp8 rowwise 3708 vs tensorwise 5078 tokens/s per GPU (0.730); Llama 3 70B on 256, tp 8 x FSDP
# 32, local batch 16, full AC: 599.6 vs 809.8 (0.740).
@pytest.mark.parametrize(
    ("model", "nodes", "training", "measured"),
    [
        ({}, 8, {}, 3708.0 / 5078.0),
        (TT_AB_70B["model"], TT_AB_70B["nodes"], TT_AB_70B["training"], 599.6 / 809.8),
    ],
    ids=["llama3-8b-n64", "llama3-70b-n256"],
)
def test_rowwise_against_tensorwise_in_torchtitans_runs(model, nodes, training, measured):
    d = torchtitan_ab(model, nodes, {**training, "precision": "fp8", "fp8_recipe": "tensorwise"})
    tw = shardmeter.estimate(d).tokens_per_s_per_gpu
    d["training"]["fp8_recipe"] = "rowwise"
    rw = shardmeter.estimate(d).tokens_per_s_per_gpu
    # before the cast kernels ran at their achieved rate and shared casts were counted once,
    # the model put rowwise at 0.89 (8B) and 0.92 (70B) of tensorwise, 22-24 % above the
    # measured ratio; now 0.65 (8B, 11 % below) and 0.72 (70B, 3 % below)
    assert rw / tw == pytest.approx(measured, rel=0.12)
