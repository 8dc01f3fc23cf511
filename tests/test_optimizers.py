"""Optimizer state per parameter (``training.optimizer``, shardmeter/model/optimizers.py), each
against its source:

* Adam in mixed precision: K = 12 bytes per parameter (fp32 master, momentum, variance; ZeRO,
  Rajbhandari et al. 2020, Sec. 3.1), 8 in fp32 training.
* torch.optim.SGD keeps ``momentum_buffer`` only with ``momentum != 0`` (default 0).
* torch.optim.Adafactor: ``row_var`` of ``grad_shape[:-1]`` and ``col_var`` of
  ``grad_shape[:-2] + grad_shape[-1:]``, fp32: r + c numbers for an r x c matrix.
* bitsandbytes ``Optimizer2State.init_state`` @ 95f9af30: ``state1``/``state2`` uint8,
  ``blocksize = 256``, ``absmax1``/``absmax2`` fp32 of ``ceil(n / 256)``.
* KellerJordan/Muon @ 857d1adc: ``momentum_buffer = torch.zeros_like(p)`` for the hidden
  matrices, AdamW for embeddings and head."""

from __future__ import annotations

import copy

import pytest

import shardmeter
from shardmeter.inputs.bundles import OPTIMIZER_CODES, Optimizer
from shardmeter.load.specs import OPTIMIZERS
from shardmeter.model import optimizers as opt

H, F = 4096.0, 14336.0


def _bytes(name: str, weight_bytes: float = 2.0, share: float = 0.0) -> float:
    return float(opt.optimizer_bytes_per_param(OPTIMIZER_CODES[name], weight_bytes, H, F, share))


def test_every_accepted_value_has_a_code():
    assert set(OPTIMIZERS) == set(OPTIMIZER_CODES)
    assert OPTIMIZER_CODES["sgd-momentum"] == Optimizer.SGD_MOMENTUM


@pytest.mark.parametrize(
    "name, mixed, fp32",
    [
        ("adam", 12.0, 8.0),
        ("adamw", 12.0, 8.0),
        ("sgd", 4.0, 0.0),
        ("sgd-momentum", 8.0, 4.0),
        ("adam8bit", 4.0 + 2.0 + 2 * 4 / 256, 2.0 + 2 * 4 / 256),
    ],
)
def test_state_bytes_per_parameter(name, mixed, fp32):
    assert _bytes(name, 2.0) == pytest.approx(mixed)
    assert _bytes(name, 4.0) == pytest.approx(fp32)


def test_adafactor_keeps_a_row_and_a_column_per_matrix():
    # an fc1 of 4096 x 14336: 4096 + 14336 fp32 numbers for 58.7 M parameters
    per_param = (H + F) * 4 / (H * F)
    assert _bytes("adafactor", 4.0) == pytest.approx(per_param)
    assert _bytes("adafactor", 2.0) == pytest.approx(4.0 + per_param)


def test_muon_prices_adamw_for_the_embeddings_only():
    assert _bytes("muon", 4.0, share=0.0) == pytest.approx(4.0)
    assert _bytes("muon", 4.0, share=1.0) == pytest.approx(8.0)
    assert _bytes("muon", 2.0, share=0.25) == pytest.approx(4.0 + 0.25 * 8 + 0.75 * 4)


BASE = {
    "model": {"preset": "llama3-8b"},
    "training": {"global_batch": 64, "micro_batch": 1, "recompute": "full"},
    "island": [{"gpu": {"name": "h100-sxm", "memory_gb": 1000.0}, "nodes": 1}],
    "parallelism": {"sharding": "fsdp"},
}


def _estimate(optimizer: str):
    s = copy.deepcopy(BASE)
    s["training"]["optimizer"] = optimizer
    return shardmeter.estimate(s)


def test_the_report_prices_the_chosen_optimizer_and_nothing_else_moves():
    adam, sgd, b8 = (_estimate(o) for o in ("adam", "sgd", "adam8bit"))
    # FSDP over 8 GPUs, bf16 weights: Adam's 12 bytes, SGD's master copy only (4), 8-bit Adam 6.03
    assert sgd.memory_breakdown_gb["optimizer"] == pytest.approx(adam.memory_breakdown_gb["optimizer"] / 3)
    assert b8.memory_breakdown_gb["optimizer"] == pytest.approx(
        adam.memory_breakdown_gb["optimizer"] * (6 + 8 / 256) / 12
    )
    for part in ("weights", "gradients", "activations"):
        assert sgd.memory_breakdown_gb[part] == adam.memory_breakdown_gb[part]
    assert sgd.step_time_s == adam.step_time_s


def test_an_unknown_optimizer_is_refused_naming_the_key():
    with pytest.raises(shardmeter.ScenarioError, match=r"training\.optimizer"):
        _estimate("lion")
