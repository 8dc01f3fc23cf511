"""DeepSpeed ZeRO-3's recompute re-gather and its pre-4912e0ad7 synchronised fetch."""

from __future__ import annotations

import numpy as np
import pytest

import shardmeter
from shardmeter.model.comm import PricedTraffic, exposed_traffic
from shardmeter.parts import ShardInputs

H = 1024.0
L = 8.0
P_LAYER = 12.0 * H * H  # GPT layer: qkv 3h^2, proj h^2, fc1 4h^2, fc2 4h^2


def _inp(recompute_layers: float) -> ShardInputs:
    return ShardInputs(
        params_per_gpu=L * P_LAYER,
        params_per_layer=P_LAYER,
        layers_per_stage=L,
        weight_bytes=2.0,
        grad_bytes=2.0,
        optimizer_bytes_per_param=12.0,
        tp=1.0,
        dp=64.0,
        cp=1.0,
        domain_gpus=8.0,
        recompute_layers=recompute_layers,
        params_last_module=4.0 * H * H,
    )


@pytest.fixture(scope="module")
def zero3():
    return shardmeter.Estimator().registry.get("sharding", "zero3")


def test_full_recompute_gathers_each_layer_again_but_its_last_linear(zero3):
    # forward L layers, recompute L, backward L less the fc2 kept after the recompute (4 of 12)
    f, r, b = (float(x) for x in zero3.gathers(_inp(L)))
    assert (f, r, b) == (L, L, pytest.approx(L - L * 4.0 / 12.0))
    assert tuple(float(x) for x in zero3.gathers(_inp(0.0))) == (L, 0.0, L)
    events = zero3.traffic(_inp(L), zero3.options())
    gathers = [e for e in events if e.collective == "all_gather"]
    assert len(gathers) == 1 and float(gathers[0].count) == pytest.approx(L + L + L * 8.0 / 12.0)
    # the first forward gather is still the only exposed one
    assert float(gathers[0].count * gathers[0].exposed_fraction) == pytest.approx(1.0)


def test_fsdp_does_not_regather_for_recompute():
    fsdp = shardmeter.Estimator().registry.get("sharding", "fsdp")
    assert tuple(float(x) for x in fsdp.gathers(_inp(L))) == (L, 0.0, L)


def test_fetch_sync_puts_each_pass_in_its_own_window(zero3):
    opts = attrs_evolve(zero3.options(), fetch_sync=True)
    windows = [e.window for e in zero3.traffic(_inp(L), opts)]
    assert windows == ["forward", "recompute", "backward", "backward"]


def attrs_evolve(o, **kw):
    import attrs

    return attrs.evolve(o, **kw)


def test_a_pass_cannot_borrow_another_pass_slack():
    # forward 3 s of gathers under 1 s of forward compute; backward 1 s under 5 s of backward
    pt = PricedTraffic(
        micro_batch_s=4.0, micro_batch_fixed_s=0.0, step_s=0.0, bucket_s=0.0, forward_s=3.0, backward_s=1.0
    )
    whole, _, _ = exposed_traffic(pt, 6.0, 5.0, False)
    assert float(whole) == 0.0
    split, _, _ = exposed_traffic(pt, 6.0, 5.0, False, pass_windows=(1.0, 0.0, 5.0))
    assert float(split) == pytest.approx(2.0)


# -- the synchronised fetch, submodule by submodule (DeepSpeed v0.3.13, 12a53b43) ---------------

GPT = (3.0 * H * H, H * H, 4.0 * H * H, 4.0 * H * H)  # qkv, proj, fc1, fc2 in forward order


def _shares(pairs):
    return [(float(a) * 12.0, float(c) * 12.0) for a, c in pairs]


def test_each_matrix_runs_beside_the_gather_of_the_next_one():
    from shardmeter.strategies.zero import fetch_sync_pairs, fetch_sync_reduce_pairs

    fwd, bwd = fetch_sync_pairs(GPT)
    # forward: qkv beside proj's gather, proj beside fc1's, fc1 beside fc2's, fc2 beside next qkv
    np.testing.assert_allclose(_shares(fwd), [(1, 3), (4, 1), (4, 4), (3, 4)], rtol=1e-12)
    # backward, in reverse: fc2 beside fc1's gather, fc1 beside proj's, proj beside qkv's, qkv
    # beside the previous layer's fc2 (listed in forward order of the computing matrix)
    np.testing.assert_allclose(_shares(bwd), [(4, 3), (3, 1), (1, 4), (4, 4)], rtol=1e-12)
    # a gradient is reduced beside the compute of the matrix two after it in backward order
    np.testing.assert_allclose(
        _shares(fetch_sync_reduce_pairs(GPT)), [(4, 3), (4, 1), (3, 4), (1, 4)], rtol=1e-12
    )
    assert fetch_sync_pairs(()) == ((), ()) and fetch_sync_reduce_pairs(()) == ()


def test_segment_pairing_counts_the_small_matrix_beside_a_large_gather():
    from shardmeter.model.comm import paired_exposed_s
    from shardmeter.strategies.zero import fetch_sync_pairs

    fwd, _ = fetch_sync_pairs(GPT)
    # gathers as long as the compute (12 units each): the pass-level rule hides everything, but
    # the projection's 1 unit of compute runs beside fc1's 4 units of gather: 3 units exposed
    # (max(0, 1-3) + max(0, 4-1) + max(0, 4-4) + max(0, 3-4) = 3)
    assert float(paired_exposed_s(12.0, 12.0, fwd)) == pytest.approx(3.0)
    # one segment of shares (1, 1) is the pass-level rule
    assert float(paired_exposed_s(5.0, 3.0, ((1.0, 1.0),))) == pytest.approx(2.0)
    assert float(paired_exposed_s(3.0, 5.0, ((1.0, 1.0),))) == 0.0


def test_paired_events_of_one_pass_share_its_segments():
    from shardmeter.model.comm import price_traffic
    from shardmeter.parts import CommEvent

    topo = _topology()
    one = dict(collective="all_gather", bytes=1e9, group_size=8.0, per="micro_batch", window="backward")
    ev = CommEvent(paired=((1.0, 0.5), (0.0, 0.5)), **one)
    t = float(price_traffic([ev], topo).backward_s)
    # two such events put 2t into the first segment, beside half of the window W = 2t
    pt = price_traffic([ev, ev], topo, windows=(0.0, 0.0, 2.0 * t))
    assert float(pt.backward_paired_s) == pytest.approx(2.0 * t - 0.5 * 2.0 * t)
    # priced one by one, each would hide under the same half window: nothing exposed
    assert float(price_traffic([ev], topo, windows=(0.0, 0.0, 2.0 * t)).backward_paired_s) == 0.0


def _topology():
    from shardmeter.inputs.bundles import Topology

    return Topology(
        gpus_per_node=8.0,
        nodes=1.0,
        tier_gpus=(8.0, float("inf")),
        tier_bytes_s=(300e9, 40e9),
        tier_latency_s=(3e-6, 10e-6),
        domain_gpus=8.0,
    )


def _published(name):
    import os

    here = os.path.dirname(__file__)
    return os.path.join(here, "..", "shardmeter", "validation_data", "published", "narayanan2021", name)


def test_zero3_2021_throughput_falls_with_the_micro_batch_as_published():
    # Narayanan et al. 2021, Table 2 (ZeRO-3, GPT-3 174.6B, global batch 1536): 144 TFLOP/s per
    # GPU at micro-batch 4 on 384 GPUs, 88 at micro-batch 2 on 768 (100.42 and 61.37 tokens/s
    # per GPU): 1.64x. Priced pass by pass the model gave 2.03x (the micro-batch 4 run +26 %);
    # each matrix beside the next one's gather alone it stays within 8 % of the table.
    est = shardmeter.Estimator()
    mb4 = est.estimate(_published("narayanan2021-t2-zero3-gpt174.6b-n384.toml")).tokens_per_s_per_gpu
    mb2 = est.estimate(_published("narayanan2021-t2-zero3-gpt174.6b-n768.toml")).tokens_per_s_per_gpu
    assert mb4 / mb2 == pytest.approx(100.42 / 61.367, rel=0.08)


def test_the_modern_fetch_is_not_paired(zero3):
    events = zero3.traffic(_inp(L), zero3.options())
    assert all(e.paired == () for e in events)
