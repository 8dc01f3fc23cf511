"""Pipeline layouts as the stacks write them: Megatron-LM's embedding and loss in the split
(``get_num_layers_to_build``, megatron/core/transformer/transformer_block.py at
NVIDIA/Megatron-LM@d98e8a64), an interleaved schedule without ``virtual_stages``, and the
interleaved micro-batch rule of each stack (counts worked out in each test)."""

from __future__ import annotations

import copy

import pytest

import shardmeter
from shardmeter.model.stages import stage_layers


def test_llama3_405b_puts_embedding_and_loss_in_chunks_of_their_own():
    # 126 layers + embedding + loss = 128 over pp = 16: 8 per stage; the first stage builds
    # 8 - 1 = 7 transformer layers, the last 7, every middle stage 8
    st = stage_layers(126.0, 16.0, 1.0, 0.0, 0.0, 1.0, 1.0)
    assert (st.first, st.middle, st.last, bool(st.bad)) == (7.0, 8.0, 7.0, False)
    # without the flags Megatron splits 126 evenly only where it divides: 126 / 16 does not,
    # the model's even split puts the 14 extra layers on the first chunks (8 on the first)
    plain = stage_layers(126.0, 16.0, 1.0, 0.0, 0.0)
    assert plain.first == 8.0 and plain.last == 7.0


def test_embedding_only_and_interleaved_chunks():
    # 31 layers + embedding = 32 over pp = 4, v = 2: 8 per rank, 4 per chunk; rank 0's first
    # chunk builds 3, so rank 0 holds 7; ranks 1..3 hold 8
    st = stage_layers(31.0, 4.0, 2.0, 0.0, 0.0, 1.0, 0.0)
    assert (st.first, st.middle, st.last, bool(st.bad)) == (7.0, 8.0, 8.0, False)


@pytest.mark.parametrize(
    ("layers", "pp", "v", "first", "emb", "loss"),
    [
        (32, 4, 1, 0, 1, 0),  # 33 does not divide by pp = 4 (Megatron asserts num_layers % pp == 0)
        (30, 4, 4, 0, 1, 1),  # 32 / 4 = 8 per rank, but 8 % v = 4 is fine; see the next row
        (34, 4, 4, 0, 1, 1),  # 36 / 4 = 9 per rank, 9 % 4 != 0: refused
        (32, 4, 1, 8, 1, 0),  # a flag with first_stage_layers: "Does not support ... with uneven pp"
    ],
)
def test_megatrons_asserts_with_the_flags(layers, pp, v, first, emb, loss):
    units = layers + emb + loss
    expected = units % pp != 0 or (units // pp) % v != 0 or first > 0
    st = stage_layers(float(layers), float(pp), float(v), float(first), 0.0, float(emb), float(loss))
    assert bool(st.bad) == expected


def test_flags_do_nothing_without_a_pipeline():
    st = stage_layers(32.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0)
    assert (st.first, st.middle, st.last, bool(st.bad)) == (32.0, 32.0, 32.0, False)


_PP = {
    "model": {"preset": "llama3-8b"},
    "training": {"global_batch": 64, "micro_batch": 1},
    "island": [{"gpu": "h100-sxm", "nodes": 2}],
    "parallelism": {"tp": 4, "pp": 4},
}


def _est(training=None, model=None, **par):
    d = copy.deepcopy(_PP)
    d["parallelism"] |= par
    d["training"] |= training or {}
    d["model"] |= model or {}
    return shardmeter.estimate(d)


def test_the_embedding_in_the_split_moves_a_layer_to_the_last_stage():
    # 31 layers on pp = 4: the even split is 8, 8, 8, 7 (the last stage, with the output layer
    # and loss, the lightest); with the embedding in the split, 32 units of 8: the first stage
    # builds 7 and the last 8, so the last stage (8 layers + head) sets a slower pace
    layers = {"layers": 31}
    plain = _est(model=layers)
    split = _est(model=layers, embedding_in_split=True)
    assert (plain.layout["first_stage_layers"], plain.layout["last_stage_layers"]) == (8, 7)
    assert (split.layout["first_stage_layers"], split.layout["last_stage_layers"]) == (7, 8)
    assert split.step_time_s > plain.step_time_s
    # 32 layers + embedding = 33 over pp = 4 does not divide: refused, as Megatron-LM; 30 + 2 does
    refused = _est(embedding_in_split=True)
    assert not refused.feasible and "embedding_in_split" in str(refused)
    assert _est(model={"layers": 30}, embedding_in_split=True, loss_in_split=True).feasible


def test_interleaved_without_virtual_stages_takes_two_chunks():
    unset = _est(schedule="interleaved")
    two = _est(schedule="interleaved", virtual_stages=2)
    one = _est(schedule="interleaved", virtual_stages=1)
    assert unset.layout["virtual_stages"] == 2
    assert unset.step_time_s == two.step_time_s and unset.step_time_s < one.step_time_s


def test_torchtitans_interleaved_layout_is_not_refused_by_megatrons_rule():
    # 10 micro-batches on pp = 4: Megatron-LM needs a multiple of pp (refused); PyTorch's
    # ScheduleInterleaved1F1B (torchtitan) runs max(1, 10 // 4) = 2 rounds, 10 % 2 == 0
    gb = {"global_batch": 10}
    megatron = _est(gb, schedule="interleaved", virtual_stages=2)
    assert not megatron.feasible
    torchtitan = _est({**gb, "framework": "torchtitan"}, schedule="interleaved", virtual_stages=2)
    assert torchtitan.feasible
    # 9 micro-batches: 2 rounds, 9 % 2 != 0: PyTorch refuses it too
    odd = _est({"global_batch": 9, "framework": "torchtitan"}, schedule="interleaved", virtual_stages=2)
    assert not odd.feasible
