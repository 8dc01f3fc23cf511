"""Hidden data-parallel collectives slow the compute beside them (shardmeter/model/interference.py).

First-principles count: NCCL launches a collective with one thread block per channel
(``ncclLaunchKernel``: ``dim3 grid = {(unsigned)nChannels, 1, 1}``, src/enqueue.cc,
NVIDIA/nccl@5067397c), so ``h`` seconds of a 12-channel collective hidden under compute on one
132-SM H100 node leave the compute 120 SMs and cost ``h x 12 / 132`` seconds. The channels are
NCCL's ring count: 240 GB/s of A100 NVLink (12 x SM80_NVLINK_BW 20.0) over 40 GB/s a channel
(speedArrayIntra[0]) is 6 search channels, duplicated to 12 (connect.cc); an H100's 18 x 20.6
over 60 (sm90SpeedArrayIntra[0]) is 6 -> 12, doubled across nodes (fewer than 16: 24); a
B200's 18 x 40.1 over 90 is 8 -> 16."""

from __future__ import annotations

import attrs
import pytest

import shardmeter
from shardmeter.inputs.build import build_inputs
from shardmeter.model.evaluate import evaluate
from shardmeter.model.interference import nccl_channels, nccl_sm_share, overlap_slowdown_s


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


def test_the_channels_are_nccls_ring_count():
    assert [nccl_channels(cc, False) for cc in (7.0, 8.0, 9.0, 10.0)] == [6.0, 12.0, 12.0, 16.0]
    assert [nccl_channels(cc, True) for cc in (7.0, 8.0, 9.0, 10.0)] == [6.0, 12.0, 24.0, 16.0]
    assert nccl_channels(0.0, True) == 0.0  # compute capability unknown: nothing charged
    # the NVLink arithmetic of the module docstring, with NCCL's constants
    assert 2 * int(12 * 20.0 // 40.0) == 12 and 2 * int(18 * 20.6 // 60.0) == 12
    assert 2 * int(18 * 40.1 // 90.0) == 16


def test_the_share_is_nccls_blocks_over_the_sms():
    assert nccl_sm_share(132.0, 12.0) == pytest.approx(12.0 / 132.0)
    assert nccl_sm_share(108.0, 12.0) == pytest.approx(12.0 / 108.0)
    assert nccl_sm_share(0.0, 12.0) == 0.0  # a GPU of unknown SM count is charged nothing
    assert nccl_sm_share(8.0, 12.0) == 1.0  # never more than the whole GPU
    assert overlap_slowdown_s(1.5, 132.0, 24.0) == pytest.approx(1.5 * 24.0 / 132.0)


def test_fsdp_step_grows_by_the_hidden_traffic_times_the_share(monkeypatch):
    """The step with the share of one H100 node (12 channels of 132 SMs) exceeds the same step
    with no SM lost (sm_count 0: the share is 0, and the GEMMs' wave count taken as unknown in
    both) by the hidden dp seconds x 12/132."""
    inp, table = _inputs()
    base = _with_sms(inp, 0)
    out0 = evaluate(base, table)
    assert out0.step_time_s > 0  # a feasible plan
    hidden = out0.overlapped.dp_comm_s
    assert hidden > 0.05  # FSDP on 8 GPUs hides most of its gathers and reduce-scatters
    # the share alone, with the wave quantisation held fixed: the slowdown the step gains
    slow = overlap_slowdown_s(hidden, 132.0, 12.0)
    from shardmeter.model import interference

    monkeypatch.setattr(interference, "nccl_sm_share", lambda sms, ch: 12.0 / 132.0)
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
