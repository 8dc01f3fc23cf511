"""DeepSpeed ZeRO-3's recompute re-gather and its pre-4912e0ad7 synchronised fetch."""

from __future__ import annotations

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
