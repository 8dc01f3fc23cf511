"""Uneven first/last pipeline stages, micro-batches in flight per rank, the busiest rank, and
PyTorch's asynchronous TP: counts worked out by hand in each test."""

from __future__ import annotations

import copy

import pytest

import shardmeter
from shardmeter.model.comm import async_tp_exposed
from shardmeter.model.stages import stage_layers
from shardmeter.parts import PipeInputs
from shardmeter.strategies.builtin import shardmeter_pipeline_schedules


def _pipe(pp, m, v=1.0):
    return PipeInputs(
        pp=float(pp),
        micro_batches=float(m),
        virtual_stages=float(v),
        stage_s=1.0,
        forward_s=0.5,
        weight_grad_s=0.1,
    )


# ---- stage layer counts (Megatron-LM get_num_layers_to_build) ----------------------------------------


def test_first_and_last_stages_leave_the_rest_evenly_to_the_middle():
    # 126 layers on pp = 16 with first = last = 7: 112 left over 14 middle stages = 8 each
    st = stage_layers(126.0, 16.0, 1.0, 7.0, 7.0)
    assert (st.first, st.middle, st.last, st.bad) == (7.0, 8.0, 7.0, False)


def test_only_the_first_stage_set_makes_the_last_a_middle_stage():
    # 126 - 6 = 120 over the 15 other stages (the last among them) = 8 each
    st = stage_layers(126.0, 16.0, 1.0, 6.0, 0.0)
    assert (st.first, st.middle, st.last, st.bad) == (6.0, 8.0, 8.0, False)


@pytest.mark.parametrize(
    ("layers", "pp", "v", "first", "last"),
    [
        (126, 16, 1, 6, 7),  # 113 over 14 middle stages does not divide
        (32, 4, 2, 5, 5),  # 5 layers on the first stage is not whole chunks of v = 2
        (32, 4, 2, 4, 4),  # 24 / 2 = 12 per middle stage, fine, but check the next
        (16, 2, 1, 8, 7),  # no middle stage but one layer left over
        (16, 4, 1, 10, 10),  # more layers than the model has
    ],
)
def test_megatrons_split_rule(layers, pp, v, first, last):
    st = stage_layers(float(layers), float(pp), float(v), float(first), float(last))
    rest, mid = layers - first - last, pp - 2
    expected = rest < 0 or (rest > 0) != (mid > 0) or (mid > 0 and (rest % mid or (rest // mid) % v))
    expected = expected or first % v != 0 or last % v != 0
    assert bool(st.bad) == bool(expected)


def test_an_unsplittable_first_stage_is_infeasible_naming_the_key():
    d = {
        "model": {"layers": 126, "hidden": 256, "heads": 8, "vocab": 1024, "seq_len": 512},
        "training": {"global_batch": 64},
        "island": [{"gpu": "h100-sxm", "nodes": 2}],
        "parallelism": {"pp": 16, "first_stage_layers": 6, "last_stage_layers": 7},
    }
    r = shardmeter.estimate(d)
    assert not r.feasible
    assert any(x.startswith("parallelism.first_stage_layers:") for x in r.reasons), r.reasons
    d["parallelism"]["first_stage_layers"] = 7
    ok = shardmeter.estimate(d)
    assert ok.feasible, ok.reasons
    assert (
        ok.layout["layers_per_stage"],
        ok.layout["first_stage_layers"],
        ok.layout["last_stage_layers"],
    ) == (8, 7, 7)


# ---- micro-batches in flight per rank ------------------------------------------------------------------


def _schedule(name):
    return {s.name: s for s in shardmeter_pipeline_schedules()}[name]


def test_1f1b_rank_r_holds_p_minus_r():
    part = _schedule("1f1b")
    # Megatron num_warmup_microbatches = p - r - 1, plus the steady slot's forward: p - r (<= m)
    assert [part.in_flight_at(_pipe(4, 8), None, float(r)) for r in range(4)] == [4, 3, 2, 1]
    assert [part.in_flight_at(_pipe(4, 2), None, float(r)) for r in range(4)] == [2, 2, 2, 1]


def test_interleaved_warmup_per_rank():
    part = _schedule("interleaved")
    # p = 4, v = 2, m = 8: warm-up (p - r - 1) 2 + (v - 1) p, + 1, capped at m v = 16 chunks of 1/2 stage
    # rank 0: 6 + 4 + 1 = 11 chunks = 5.5 stages; rank 3: 0 + 4 + 1 = 5 chunks = 2.5
    assert part.in_flight_at(_pipe(4, 8, 2), None, 0.0) == 5.5
    assert part.in_flight_at(_pipe(4, 8, 2), None, 3.0) == 2.5
    # m = p = 4: rank 0's 11 warm-up chunks exceed m v = 8: all 8 chunks = 4 stages
    assert part.in_flight_at(_pipe(4, 4, 2), None, 0.0) == 4.0


def test_gpipe_holds_every_micro_batch_on_every_rank_and_loss():
    part = _schedule("gpipe")
    assert [part.in_flight_at(_pipe(4, 8), None, float(r)) for r in range(4)] == [8, 8, 8, 8]
    assert part.loss_in_flight(_pipe(4, 8), None) == 8
    assert _schedule("1f1b").loss_in_flight(_pipe(4, 8), None) == 1


# ---- the busiest rank --------------------------------------------------------------------------------

_SMALL = {
    "model": {"layers": 16, "hidden": 1024, "heads": 8, "vocab": 512, "seq_len": 2048},
    "training": {"global_batch": 64},
    "island": [{"gpu": "h100-sxm", "nodes": 1}],
    "parallelism": {"pp": 4},
}


def _act(d):
    r = shardmeter.estimate(d)
    assert r.feasible, r.reasons
    return r.memory_breakdown_gb["activations"]


def test_a_middle_stage_with_more_layers_is_the_busiest():
    even = _act(_SMALL)  # 4 layers x 4 in flight on rank 0 = 16 layer-micro-batches
    d = copy.deepcopy(_SMALL)
    d["parallelism"] |= {"first_stage_layers": 1, "last_stage_layers": 1}
    # 1 / 7 / 7 / 1: rank 1 holds 7 layers x 3 in flight = 21 (rank 0: 1 x 4; rank 3: 1 + tiny logits)
    assert _act(d) == pytest.approx(even * 21 / 16, rel=1e-12)


def test_the_last_stage_with_its_logits_is_the_busiest_with_a_large_vocabulary():
    d = copy.deepcopy(_SMALL)
    d["model"] |= {"vocab": 256_000}
    d["parallelism"] |= {"first_stage_layers": 1, "last_stage_layers": 1}
    per_mb_layer = _act(_SMALL) * 1e9 / 16  # one layer, one micro-batch
    logits = 2048 * 256_000 * 4  # s b V / t x 4 bytes of fp32 logits, one micro-batch in flight
    # rank 3: 1 layer x 1 in flight + logits (5.4 GB) beats rank 1's 21 layer-micro-batches
    assert 21 * per_mb_layer < per_mb_layer + logits
    assert _act(d) * 1e9 == pytest.approx(per_mb_layer + logits, rel=1e-12)


def test_the_embedding_sits_on_the_first_stage_only():
    d = copy.deepcopy(_SMALL)
    d["model"] |= {"vocab": 256_000}
    d["parallelism"] |= {"first_stage_layers": 1, "last_stage_layers": 1}
    r = shardmeter.estimate(d)
    # the busiest (last) stage holds one layer and the output layer, not the embedding too
    h = 1024
    layer = 12 * h * h + 4 * h  # Megatron's 12 h^2 (4h GELU MLP) plus two LayerNorms' weights
    assert r.layout["params_per_gpu"] == pytest.approx(layer + 256_000 * h, rel=1e-2)


# ---- asynchronous tensor parallelism ------------------------------------------------------------------


def test_async_tp_exposes_what_the_other_gemm_chunks_cannot_cover():
    # tp = 4 chunks: 3 copies of comm/3 beside 3 GEMM chunks of gemm/4; the local chunk covers one end
    assert async_tp_exposed(10.0, 8.0, 4.0) == pytest.approx(10.0 - 8.0 * 3 / 4)  # 4.0
    assert async_tp_exposed(5.0, 8.0, 4.0) == 0.0  # 5 <= 6: hidden


_TP = {
    "model": {"preset": "llama3-8b"},
    "training": {"global_batch": 64},
    "island": [{"gpu": "h100-sxm", "nodes": 2}],
    "parallelism": {"tp": 8, "pp": 2, "sequence_parallel": True},
}


def _with(**par):
    d = copy.deepcopy(_TP)
    d["parallelism"] |= par
    return shardmeter.estimate(d)


def test_async_tp_hides_part_of_the_sequence_parallel_collectives():
    plain, fast = _with(), _with(async_tp=True)
    assert 0 < fast.breakdown_s["tp_comm"] < plain.breakdown_s["tp_comm"]
    assert fast.step_time_s < plain.step_time_s


def test_async_tp_needs_sequence_parallelism_and_compile():
    # without sequence parallelism TP runs all-reduces: nothing for the pass to rewrite
    assert (
        _with(sequence_parallel=False, async_tp=True).step_time_s
        == _with(sequence_parallel=False).step_time_s
    )
    d = copy.deepcopy(_TP)
    d["parallelism"] |= {"async_tp": True}
    d["training"] |= {"compile": False}
    eager = copy.deepcopy(d)
    eager["parallelism"]["async_tp"] = False
    assert shardmeter.estimate(d).step_time_s == shardmeter.estimate(eager).step_time_s


def test_tp_comm_overlap_wins_over_async_tp():
    assert _with(tp_comm_overlap=True, async_tp=True).step_time_s == _with(tp_comm_overlap=True).step_time_s
