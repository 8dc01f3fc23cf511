"""Hidden data-parallel collectives slow the compute beside them (shardmeter/model/interference.py).

First-principles count: NCCL launches a collective with one thread block per channel
(``ncclLaunchKernel``: ``dim3 grid = {(unsigned)nChannels, 1, 1}``, src/enqueue.cc,
NVIDIA/nccl@5067397c), so ``h`` seconds of a 32-channel collective hidden under compute on a
132-SM H100 leave the compute 100 SMs and cost ``h x 32 / 132`` seconds."""

from __future__ import annotations

import attrs
import pytest

import shardmeter
from shardmeter.inputs.build import build_inputs
from shardmeter.model.evaluate import evaluate
from shardmeter.model.interference import nccl_sm_share, overlap_slowdown_s
from shardmeter.model.overheads import NCCL_CHANNELS


def _inputs(sharding="fsdp", **training):
    sc = {
        "model": {"preset": "llama3-8b"},
        "training": {
            "global_batch": 64,
            "micro_batch": 1,
            "precision": "bf16",
            "recompute": "full",
            **training,
        },
        "island": [{"gpu": "h100-sxm", "nodes": 1}],
        "parallelism": {"tp": 1, "pp": 1, "dp": 8, "sharding": sharding},
    }
    est = shardmeter.Estimator()
    return build_inputs(est.resolve(est.load(sc)), scalar=True)


def _with_sms(inp, sms):
    return attrs.evolve(inp, hardware=attrs.evolve(inp.hardware, sm_count=float(sms)))


def test_the_share_is_nccls_blocks_over_the_sms():
    assert NCCL_CHANNELS == 32.0
    assert nccl_sm_share(132.0) == pytest.approx(32.0 / 132.0)
    assert nccl_sm_share(108.0) == pytest.approx(32.0 / 108.0)
    assert nccl_sm_share(0.0) == 0.0  # a GPU of unknown SM count is charged nothing
    assert nccl_sm_share(16.0) == 1.0  # never more than the whole GPU
    assert overlap_slowdown_s(1.5, 132.0) == pytest.approx(1.5 * 32.0 / 132.0)


def test_fsdp_step_grows_by_the_hidden_traffic_times_the_share(monkeypatch):
    """The step on 132 SMs exceeds the same step with no SM lost (sm_count 0: the share is 0,
    and the GEMMs' wave count taken as unknown in both) by hidden dp seconds x 32/132."""
    inp, table = _inputs()
    base = _with_sms(inp, 0)
    out0 = evaluate(base, table)
    assert out0.step_time_s > 0  # a feasible plan
    hidden = out0.overlapped.dp_comm_s
    assert hidden > 0.05  # FSDP on 8 GPUs hides most of its gathers and reduce-scatters
    # the share alone, with the wave quantisation held fixed: the slowdown the step gains
    slow = overlap_slowdown_s(hidden, 132.0)
    from shardmeter.model import interference

    monkeypatch.setattr(interference, "nccl_sm_share", lambda sms: 32.0 / 132.0)
    out1 = evaluate(base, table)
    assert out1.step_time_s - out0.step_time_s == pytest.approx(slow, rel=1e-9)
    # it is charged to the data-parallel traffic that causes it, not to compute
    assert out1.breakdown.dp_comm_s - out0.breakdown.dp_comm_s == pytest.approx(slow, rel=1e-9)
    assert out1.breakdown.compute_s == pytest.approx(out0.breakdown.compute_s)


def test_exposed_traffic_costs_no_slowdown():
    """Without overlap (DDP's reduction after the backward pass) nothing is hidden, so nothing
    slows: the step is the same at any SM count but for the GEMMs' own wave quantisation."""
    inp, table = _inputs(sharding="none")
    inp = attrs.evolve(inp, layout=attrs.evolve(inp.layout, dp_comm_overlap=False))
    out = evaluate(inp, table)
    assert out.overlapped.dp_comm_s == pytest.approx(0.0, abs=1e-12)
    assert out.breakdown.dp_comm_s > 0


def test_more_sms_never_slow_a_step():
    inp, table = _inputs()
    steps = [evaluate(_with_sms(inp, s), table).step_time_s for s in (66, 132, 264)]
    assert steps[0] > steps[1] > steps[2]
