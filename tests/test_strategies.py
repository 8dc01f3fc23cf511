"""The bundled strategy parts compute their own terms: checked against the papers' formulas.

Schedules: Narayanan et al. 2021 (arXiv 2104.04473), Sec. 2.2 (bubble (p-1)/m, interleaved
(p-1)/(v m)) and Korthikanti et al. 2022 (arXiv 2205.05198), Sec. 4.2.3 (activations in flight).
Sharding: Rajbhandari et al. 2020, ZeRO (arXiv 1910.02054), Fig. 1 (memory per GPU of a 7.5B
model on 64 GPUs: 120, 31.4, 16.6 and 1.9 GB) and Sec. 7 (ZeRO-1/2 move what DDP moves; ZeRO-3
1.5x).
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import shardmeter
from shardmeter.inputs.bundles import Topology
from shardmeter.model.comm import price_traffic
from shardmeter.parts import PipeInputs, ShardInputs

REG = shardmeter.Registry.from_plugin_manager(shardmeter.make_plugin_manager())


def _pipe(p, m, v=1.0, stage=1.0):
    a = np.asarray
    return PipeInputs(
        pp=a(p, dtype=float),
        micro_batches=a(m, dtype=float),
        virtual_stages=a(v, dtype=float),
        stage_s=a(stage, dtype=float),
        forward_s=a(stage, dtype=float) / 3,
        weight_grad_s=a(stage, dtype=float) / 3,
    )


def _terms(name, pipe):
    part = REG.get("schedule", name)
    return part.terms(pipe, part.options())


@pytest.mark.parametrize(("p", "m"), [(8, 64), (12, 128), (64, 512), (1, 16)])
def test_1f1b_bubble_is_p_minus_1_over_m_of_the_ideal_step(p, m):
    t = _terms("1f1b", _pipe(p, m))
    assert float(t.bubble_s) / m == pytest.approx((p - 1) / m)
    assert float(t.in_flight) == min(m, p)


@pytest.mark.parametrize(("p", "m", "v"), [(8, 64, 2), (8, 64, 4), (16, 128, 3)])
def test_interleaved_bubble_is_p_minus_1_over_v_m_and_holds_more_in_flight(p, m, v):
    t = _terms("interleaved", _pipe(p, m, v))
    assert float(t.bubble_s) / m == pytest.approx((p - 1) / (v * m))
    assert float(t.in_flight) == pytest.approx(min(m, p) * (1 + (p - 1) / (p * v)))
    assert float(t.p2p_transfers) == 2 * (v * m + p - 1)
    # a non-interleaved schedule ignores v for its bubble
    assert float(_terms("1f1b", _pipe(p, m, v)).bubble_s) / m == pytest.approx((p - 1) / m)


def test_gpipe_holds_every_micro_batch():
    assert float(_terms("gpipe", _pipe(8, 64)).in_flight) == 64


def test_interleaved_needs_micro_batches_a_multiple_of_the_stages():
    part = REG.get("schedule", "interleaved")
    bad = part.infeasible(
        _pipe(np.array([4, 4, 1]), np.array([8, 6, 6]), np.array([2, 2, 2])), part.options()
    )
    assert bad.tolist() == [False, True, True]


def test_schedules_are_vectorised():
    t = _terms("interleaved", _pipe(np.array([1, 2, 8]), 16, np.array([1, 2, 4])))
    np.testing.assert_allclose(np.asarray(t.bubble_s) / 16, [0.0, 0.5 / 16, 7 / 4 / 16])


def _shard(params, n, layer_params=0.0):
    a = np.asarray
    return ShardInputs(
        params_per_gpu=a(params),
        params_per_layer=a(layer_params),
        layers_per_stage=a(1.0),
        weight_bytes=a(2.0),
        grad_bytes=a(2.0),
        optimizer_bytes_per_param=a(12.0),
        tp=a(1.0),
        dp=a(float(n)),
        cp=a(1.0),
        domain_gpus=a(8.0),
    )


@pytest.mark.parametrize(("name", "gb"), [("none", 120.0), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.9)])
def test_zero_memory_is_the_papers_figure_1(name, gb):
    """7.5B parameters, 64 GPUs, mixed-precision Adam (K = 12): ZeRO Fig. 1."""
    part = REG.get("sharding", name)
    st = part.state(_shard(7.5e9, 64), part.options())
    total = float(st.weights + st.gradients + st.optimizer) / 1e9
    assert total == pytest.approx(gb, abs=0.05)


def _flat_topology():
    bw = 100e9
    return Topology(
        gpus_per_node=1,
        nodes=64,
        domain_gpus=1,
        tier_gpus=np.array([1.0, np.inf]),
        tier_bytes_s=np.array([bw, bw]),
        tier_latency_s=np.array([0.0, 0.0]),
    )


def _traffic_s(name, per):
    part = REG.get("sharding", name)
    pt = price_traffic(part.traffic(_shard(1e9, 64), part.options()), _flat_topology())
    return float(pt.micro_batch_s if per == "micro_batch" else pt.step_s)


def test_zero1_and_zero2_move_what_ddp_moves_and_zero3_half_as_much_again():
    """Sec. 7.2: reduce-scatter + all-gather = one all-reduce's 2 Psi; ZeRO-3 moves 3 Psi."""
    ddp = _traffic_s("none", "step")
    assert _traffic_s("zero1", "step") == pytest.approx(ddp)
    assert _traffic_s("zero2", "step") == pytest.approx(ddp)
    assert _traffic_s("zero3", "micro_batch") == pytest.approx(1.5 * ddp)
    assert _traffic_s("zero3", "step") == 0.0


def test_fsdp_issues_one_collective_per_layer_and_exposes_the_first_gather_and_last_reduction():
    """32 layers, 1e9 parameters (2 GB) over 64 ranks, one per node (stride 1, 1-GPU domains):
    every collective is a 64-rank ring of 63 steps at alpha. FSDP gathers each layer in forward
    and backward and reduce-scatters it once: 64 gathers and 32 reductions of 2 GB / 32, so the
    bandwidth term is unchanged and the latency is paid 96 times; the forward's first gather
    and the backward's last reduction are the never-hidden share (Zhao et al. 2023, Fig. 5)."""
    alpha, bw = 10e-6, 100e9
    topo = Topology(
        gpus_per_node=1,
        nodes=64,
        domain_gpus=1,
        tier_gpus=np.array([1.0, np.inf]),
        tier_bytes_s=np.array([bw, bw]),
        tier_latency_s=np.array([alpha, alpha]),
    )
    shard = attrs.evolve(_shard(1e9, 64), layers_per_stage=np.asarray(32.0), domain_gpus=np.asarray(1.0))
    part = REG.get("sharding", "fsdp")
    pt = price_traffic(part.traffic(shard, part.options()), topo)
    one = 63 * alpha + 63 / 64 * (2e9 / 32) / bw  # one layer's gather (or reduction)
    assert float(pt.micro_batch_s) == pytest.approx(96 * one, rel=1e-12)
    assert float(pt.micro_batch_fixed_s) == pytest.approx(2 * one, rel=1e-12)
    assert float(pt.step_s) == 0.0


def test_declarative_record_is_sugar_for_the_zero_part():
    rec = shardmeter.ShardingStrategy(
        name="my-zero2", shard_optimizer=True, shard_gradients=True, options={"my_knob": 3}
    )
    reg = REG.override("sharding", rec)
    part = reg.get("sharding", "my-zero2")
    assert isinstance(part, shardmeter.ShardingPart)
    assert part.option_defaults() == {"my_knob": 3}
    same = REG.get("sharding", "zero2")
    a = part.state(_shard(1e9, 8), part.options())
    b = same.state(_shard(1e9, 8), same.options())
    assert float(a.optimizer) == float(b.optimizer) and float(a.gradients) == float(b.gradients)


def test_the_old_union_hook_still_registers_schedules_and_sync_with_a_deprecation_warning():
    class Old:
        @shardmeter.hookimpl
        def shardmeter_sharding_strategies(self):
            yield shardmeter.ShardingStrategy(name="old-zero1", shard_optimizer=True)
            yield shardmeter.PipelineSchedule(name="old-half", bubble_fraction=0.5)
            yield shardmeter.SyncStrategy(name="old-sync")

    pm = shardmeter.make_plugin_manager(entry_points=False, plugins=[Old()])
    with pytest.warns(DeprecationWarning, match="shardmeter_pipeline_schedules"):
        reg = shardmeter.Registry.from_plugin_manager(pm)
    assert "old-zero1" in reg.names("sharding")
    assert "old-half" in reg.names("schedule") and "old-sync" in reg.names("sync")
    half = reg.get("schedule", "old-half")
    assert float(half.terms(_pipe(5, 20), half.options()).bubble_s) == pytest.approx(2.0)  # 0.5 x (5 - 1)
