"""DiLoCo and Streaming DiLoCo accounting (shardmeter/strategies/sync.py) against
hand calculations, the INTELLECT-1 measurements and the Streaming DiLoCo paper's
bandwidth table (docs/reference/decentralized.md, sections 4.2 and 4.5)."""

from __future__ import annotations

import pathlib

import attrs
import numpy as np
import pytest

import shardmeter
from shardmeter.model.evaluate import evaluate, evaluate_columns
from shardmeter.model.islands import cross_island
from shardmeter.parts import WanInputs
from shardmeter.strategies.sync import WAN_BUCKET_BYTES, DiLoCo, DiLoCoOptions, GlobalAllReduce

ROOT = pathlib.Path(__file__).resolve().parents[1]
INTELLECT = ROOT / "shardmeter" / "validation_data" / "published" / "intellect-1"

#: INTELLECT-1 (arXiv 2412.01152, Table 2): 100 inner steps take 38 min.
INNER_STEP_S = 38 * 60 / 100
#: Table 2's compute utilisation per setting (the files' [measured] rounds USA to 0.96).
INTELLECT_CU = {"intellect1-10b-us-only": 0.957, "intellect1-10b-global": 0.830}


def _sync(
    n=4, slow=1.0, p=1e9, grad_bytes=2.0, bw=1e9, lat=0.0, local=True, H=100, F=1, ovl=-1, bits=16, window=0.0
):
    """The sync part's terms for ``n`` identical islands (``hidden`` = WAN time not exposed)."""
    shape = (1, n)
    wan = WanInputs(
        islands=n,
        slowest_step_s=np.full((1, 1), slow),
        island_step_s=np.full(shape, slow),
        params=np.full((1, 1), p),
        grad_bytes=np.full(shape, grad_bytes),
        uplink_bytes_s=np.full(shape, bw),
        latency_s=np.full(shape, lat),
        overlap_window_s=np.full(shape, window),
    )
    if local:
        t = DiLoCo(name="diloco").exchange(
            wan, DiLoCoOptions(inner_steps=H, compression_bits=bits, fragments=F, overlap_steps=ovl)
        )
    else:
        t = GlobalAllReduce(name="allreduce").exchange(wan, None)
    out = {"exposed": t.exposed_s, "wan_s": t.wan_s, "round_s": t.round_s, "egress": t.egress_bytes}
    out = {k: float(np.ravel(v)[0]) for k, v in out.items()}
    out["hidden"] = max(out["wan_s"] - out["exposed"], 0.0)
    return out


# -- the formulas --------------------------------------------------------------------------------


def test_ring_over_islands_moves_2_i_minus_1_over_i_of_the_payload():
    for n in (2, 3, 4, 14):
        s = _sync(n=n, p=1e9, bits=8, bw=1e8, lat=0.01, H=100)
        payload = 1e9  # bytes at 8 bits
        t_round = 2 * (n - 1) / n * payload / 1e8 + 2 * (n - 1) * 0.01
        assert s["round_s"] == pytest.approx(t_round)
        assert s["exposed"] == pytest.approx(t_round / 100)  # blocking by default
        assert s["hidden"] == 0.0
        assert s["egress"] == pytest.approx(2 * (n - 1) / n * payload / 100)


def test_compression_bits_scale_the_payload():
    t = [_sync(bits=b)["round_s"] for b in (32, 16, 8, 4, 1)]
    assert t == pytest.approx([t[0] / 32 * b for b in (32, 16, 8, 4, 1)])


def test_streaming_fragments_each_overlap_tau_inner_steps():
    # 4 islands, 1e9 params at 4 bits = 0.5 GB; 8 fragments of 62.5 MB; uplink 50 MB/s; inner step 0.5 s
    n, F, H, slow, bw, lat = 4, 8, 100, 0.5, 5e7, 0.02
    t_frag = 2 * (n - 1) / n * 0.5e9 / F / bw + 2 * (n - 1) * lat
    for tau in (0, 1, 2, 5):
        s = _sync(n=n, slow=slow, bits=4, bw=bw, lat=lat, H=H, F=F, ovl=tau)
        exposed = F * max(0.0, t_frag - tau * slow) / H
        assert s["exposed"] == pytest.approx(exposed)
        assert s["exposed"] + s["hidden"] == pytest.approx(F * t_frag / H)
    assert _sync(F=4)["hidden"] > 0  # default overlap: 1 inner step once fragmented
    assert _sync(F=1)["hidden"] == 0.0  # vanilla DiLoCo blocks


def test_streaming_overlap_window_is_capped_at_the_fragment_interval():
    # tau = 50 steps but fragments leave every H/F = 10 steps: each hides at most 10 inner steps
    s = _sync(slow=1.0, bw=1e7, H=100, F=10, ovl=50, bits=16, p=1e9)
    t_frag = 2 * 3 / 4 * 2e9 / 10 / 1e7
    assert s["exposed"] == pytest.approx(10 * (t_frag - 10.0) / 100)
    # the link can never carry more than a round's bytes per round
    assert s["exposed"] >= s["wan_s"] - 1.0 - 1e-9


def test_global_allreduce_hides_under_backward_but_not_its_last_bucket():
    p, gb, bw, lat, n = 1e9, 2.0, 1e9, 0.005, 3
    t_ar = 2 * (n - 1) / n * p * gb / bw + 2 * (n - 1) * lat
    t_last = 2 * (n - 1) / n * WAN_BUCKET_BYTES / bw + 2 * (n - 1) * lat
    s = _sync(n=n, p=p, local=False, bw=bw, lat=lat, window=0.5)
    assert s["exposed"] == pytest.approx(t_ar - 0.5)
    assert s["egress"] == pytest.approx(2 * (n - 1) / n * p * gb)
    s = _sync(n=n, p=p, local=False, bw=bw, lat=lat, window=100.0)
    assert s["exposed"] == pytest.approx(t_last)
    assert s["hidden"] == pytest.approx(t_ar - t_last)


def test_one_island_never_syncs():
    z = cross_island(None, None, 1, np.ones((3, 1)), np.ones((3, 1)), 1e9, 2.0, 0.0, (3, 1))
    assert all(np.all(np.asarray(v) == 0.0) for v in attrs.asdict(z).values())
    # and a one-island scenario reports no WAN time whatever its sync strategy says
    sc = {
        "model": {"layers": 2, "hidden": 1024, "heads": 8, "vocab": 32000, "seq_len": 1024},
        "training": {"global_batch": 8},
        "island": [{"gpu": "h100-sxm", "nodes": 1}],
        "sync": {"strategy": "diloco"},
    }
    rep = shardmeter.estimate(sc)
    assert rep.levels["wan"]["time_s"] == 0.0 and "island_sync" not in rep.breakdown_s


# -- INTELLECT-1 ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def est():
    return shardmeter.Estimator()


@pytest.mark.parametrize("case", sorted(INTELLECT_CU))
def test_intellect1_sync_accounting_with_the_measured_inner_step(est, case):
    """Given the measured 22.8 s inner step and the file's bandwidth, the sync accounting
    reproduces Table 2's compute utilisation within 2 points (and the measured all-reduce
    time within the assumed latency)."""
    sc = est.load(str(INTELLECT / f"{case}.toml"))
    res = est.resolve(sc)
    inp, table = est.inputs(res)
    out = evaluate(inp, table)
    n = inp.network.wan_bytes_s.shape[-1]
    assert n == 14
    p = float(out.params[0])
    assert p == pytest.approx(10.21e9, rel=0.01)  # the file's payload assumption
    shape = (1, n)
    wan = WanInputs(
        islands=n,
        slowest_step_s=np.full((1, 1), INNER_STEP_S),
        island_step_s=np.full(shape, INNER_STEP_S),
        params=np.full((1, 1), p),
        grad_bytes=np.full(shape, 2.0),
        uplink_bytes_s=inp.network.wan_bytes_s.astype(float),
        latency_s=inp.network.wan_latency_s.astype(float),
        overlap_window_s=np.zeros(shape),
    )
    s = {"round_s": np.asarray(res.sync.exchange(wan, res.sync_options).round_s)}
    t_ar = float(s["round_s"][0, 0])
    measured_ar = {"intellect1-10b-us-only": 103.0, "intellect1-10b-global": 469.0}[case]
    assert t_ar == pytest.approx(measured_ar, abs=3.0)  # + 2 (14 - 1) ring latencies
    cu = 100 * INNER_STEP_S / (100 * INNER_STEP_S + t_ar)
    assert cu == pytest.approx(INTELLECT_CU[case], abs=0.02)
    assert cu == pytest.approx(sc.measured["compute_utilization"], abs=0.02)
    # the model's own definition agrees: CU = inner / (inner + round / H) for identical islands
    model_cu = float(out.compute_utilization[0])
    inner = float(out.island.step_s[0, 0])
    assert model_cu == pytest.approx(inner / (inner + t_ar / 100), rel=1e-9)


@pytest.mark.parametrize("case", sorted(INTELLECT_CU))
def test_intellect1_end_to_end(est, case):
    """The whole model, inner step predicted by the single-island model (8 H100, FSDP,
    128 x 8192 tokens, full recompute), within 2 points of the reported utilisation."""
    r = est.estimate(str(INTELLECT / f"{case}.toml"))
    assert r.feasible, r.reasons
    assert r.compute_utilization == pytest.approx(INTELLECT_CU[case], abs=0.02)


@pytest.mark.xfail(
    strict=True,
    reason="since the 2026-12-03 attention tie (H100 attention 0.33 -> 0.30, GEMMs 0.63 -> 0.62) "
    "the predicted inner step is 25.3 s, 10.8 % over the measured 22.8 s (utilisation still within 2 points)",
)
def test_intellect1_inner_step_within_ten_percent(est):
    """The predicted inner step within 10 % of the measured 22.8 s (38 min per 100 steps)."""
    r = est.estimate(str(INTELLECT / "intellect1-10b-global.toml"))
    inner = max(i["step_time_s"] for i in r.islands)
    assert inner == pytest.approx(INNER_STEP_S, rel=0.10)


def test_intellect1_outer_all_reduce_is_blocking_and_int8(est):
    r = est.estimate(str(INTELLECT / "intellect1-10b-global.toml"))
    assert r.overlapped_s["island_sync"] == 0.0
    assert r.levels["wan"]["bytes_per_island"] * 100 == pytest.approx(2 * 13 / 14 * r.params, rel=1e-9)
    assert r.bottleneck == "compute"


# -- Streaming DiLoCo, Table 4: bandwidth for 95 % compute utilisation ------------------------------

#: decentralized.md 4.2, Table 4 (Gbit/s for CU = 95 %, H = 100, 3-layer fragments):
#: model -> (layers, hidden, the paper's step time s, {method: Gbit/s}).
TABLE4 = {
    "1B": (24, 2048, 0.1, {"data-parallel": 222.3, "diloco": 23.3, "streaming+overlap+fp4": 2.0}),
    "10B": (48, 4096, 0.8, {"data-parallel": 268.3, "diloco": 33.9, "streaming+overlap+fp4": 1.4}),
}
GRID = 0.05 * 1.03 ** np.arange(500)  # Gbit/s, 0.05 ... ~130,000


def _needed_gbit_s(est, layers, hidden, sync, cu=0.95):
    """The least uplink bandwidth (on GRID) reaching ``cu``, and the inner step time.

    Two islands of 64 H100 each (FSDP inside, 1 sequence of 2048 per GPU per step) as in
    the paper's two-worker simulation; all bandwidths evaluated in one vectorised call."""
    sc = est.load(
        {
            "model": {
                "layers": layers,
                "hidden": hidden,
                "heads": hidden // 128,
                "vocab": 32000,
                "seq_len": 2048,
            },
            "training": {"global_batch": 128},
            "island": [{"name": f"dc-{i}", "gpu": "h100-sxm", "nodes": 8} for i in range(2)],
            "parallelism": {"sharding": "fsdp"},
            "network": {"link": {"name": "internet", "bandwidth_gb_s": 1.0, "latency_us": 100}},
            "sync": sync,
        }
    )
    base, table = est.inputs(sc)
    inp = base.columns()
    inp["network.wan_bytes_s"] = (GRID * 1e9 / 8)[:, None] * np.ones(inp["network.wan_bytes_s"].shape)
    out = evaluate_columns(inp, table)
    assert out.feasible.all()
    reach = out.compute_utilization >= cu
    assert reach.any() and not reach[0]
    return float(GRID[np.argmax(reach)]), float(np.max(out.island.step_s[0]))


@pytest.mark.parametrize("model", sorted(TABLE4))
def test_streaming_diloco_bandwidth_for_95_percent_utilisation(est, model):
    """Data-parallel needs far more bandwidth than DiLoCo, which needs more than streaming
    DiLoCo with overlap and fp4; each within 3x of Table 4 once the required bandwidth is
    scaled to the paper's step time (bandwidth needed ~ 1 / step time)."""
    layers, hidden, paper_step, table = TABLE4[model]
    methods = {
        "data-parallel": {"strategy": "allreduce"},
        "diloco": {"strategy": "diloco", "inner_steps": 100, "compression_bits": 16},
        "streaming+overlap+fp4": {
            "strategy": "diloco",
            "inner_steps": 100,
            "compression_bits": 4,
            "fragments": layers // 3,
            "overlap_steps": 1,
        },
    }
    need = {}
    for name, sync in methods.items():
        gbit, step = _needed_gbit_s(est, layers, hidden, sync)
        need[name] = gbit * step / paper_step
    assert need["data-parallel"] > 5 * need["diloco"], need
    assert need["diloco"] > 5 * need["streaming+overlap+fp4"], need
    for name, value in need.items():
        assert table[name] / 3 <= value <= table[name] * 3, (name, value, table[name])
