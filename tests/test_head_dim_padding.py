"""Fused attention on a head dim that is not a multiple of 8: PyTorch SDPA's flash path pads
q, k and v to the next multiple (``pad_last_dim<8, false>``, aten attention.cpp) and Dao's
flash_attn does the same; counts worked out in each test."""

from __future__ import annotations

import copy

import pytest

import shardmeter
from shardmeter.model.attention import head_dim_pad_s, padded_head_dim_share


class _Ms:
    def __init__(self, q_dim: float, heads: float) -> None:
        self.q_dim, self.heads = q_dim, heads


class _Sh:
    tokens, q_local, kv_local = 1000.0, 1600.0, 400.0


class _Gs:
    v_local = 400.0


def test_the_padded_share_of_the_work():
    assert padded_head_dim_share(_Ms(1600.0, 16.0)) == pytest.approx(104.0 / 100.0)  # d = 100 -> 104
    assert padded_head_dim_share(_Ms(4096.0, 32.0)) == 1.0  # d = 128: nothing to pad
    assert padded_head_dim_share(_Ms(1200.0, 16.0)) == pytest.approx(80.0 / 75.0)  # d = 75 -> 80


def test_the_pad_copies():
    # 1000 tokens x (1600 + 400 + 400) elements of q, k and v: forward read 2 + write 2 x 1.04
    # bytes each, backward the gradients' slices the same bytes; none where nothing is padded
    f, b = head_dim_pad_s(_Sh(), _Gs(), 1.04, 1e9)
    assert f == b == pytest.approx(1000 * 2400 * (2 + 2 * 1.04) / 1e9)
    assert head_dim_pad_s(_Sh(), _Gs(), 1.0, 1e9) == (0.0, 0.0)


_M = {
    "model": {"layers": 4, "hidden": 1600, "heads": 16, "vocab": 32000, "seq_len": 4096},
    "training": {"global_batch": 8, "micro_batch": 1},
    "island": [{"gpu": "h100-sxm", "nodes": 1}],
}


def test_a_misaligned_head_dim_costs_more_attention_than_its_flops():
    # head dim 100 (1600 / 16): the fused kernels do 104 / 100 of the attention work, so the
    # compute time grows while the model FLOPs stay the same
    aligned = copy.deepcopy(_M)
    aligned["model"] |= {"heads": 20}  # head dim 80, a multiple of 8, same hidden
    r_pad, r_al = shardmeter.estimate(_M), shardmeter.estimate(aligned)
    assert r_pad.model_flops_per_token == pytest.approx(r_al.model_flops_per_token, rel=1e-12)
    assert r_pad.breakdown_s["compute"] > r_al.breakdown_s["compute"]
