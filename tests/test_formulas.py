"""The model's closed-form formulas against the numbers and equations of the papers.

Sources (figures in ``docs/reference/``):

* Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
  Clusters Using Megatron-LM" (arXiv 2104.04473): FLOPs per iteration (Sec. 5.1,
  Eq. 3 with activation recomputation, and the same count without it), the
  pipeline bubble (Sec. 2.2), Table 1's model rows.
* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models" (arXiv 2205.05198): activation memory per layer, Table 2,
  for the models of Table 3.
* Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective
  Communication Operations in MPICH": ring all-gather / reduce-scatter /
  all-reduce cost in the alpha-beta model.
"""

from __future__ import annotations

import csv
import math
import os

import numpy as np
import pytest

from shardmeter.inputs.bundles import ModelInputs, Topology
from shardmeter.model import formulas as F
from shardmeter.model.activations import activation_bytes_per_layer
from shardmeter.model.attention import ATTENTION_RAMP_KEYS
from shardmeter.model.tiers import collective_time

# -- FLOPs (Narayanan et al. 2021) ------------------------------------------------------------------

GPT3 = dict(l=96, h=12288, a=96, V=51200, s=2048)  # Table 1, 175B row
MEGATRON_1T = dict(l=128, h=25600, a=160, V=51200, s=2048)  # Table 1, 1008B row


def _flops(m, **kw):
    return F.model_flops_per_token(m["l"], m["h"], m["h"], m["h"], 4 * m["h"], False, m["V"], m["s"], **kw)


def _narayanan_no_recompute(m):
    """72 B s l h^2 (1 + s/6h + V/12lh) per iteration, per token (B s tokens)."""
    l, h, s, V = m["l"], m["h"], m["s"], m["V"]
    return 72.0 * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))


def _narayanan_eq3(m):
    """Eq. 3 (with full activation recomputation): 96 B s l h^2 (1 + s/6h + V/16lh), per token."""
    l, h, s, V = m["l"], m["h"], m["s"], m["V"]
    return 96.0 * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))


@pytest.mark.parametrize(
    "m", [GPT3, MEGATRON_1T], ids=["narayanan2021-table1-gpt3-175b", "narayanan2021-table1-1t"]
)
def test_model_flops_per_token_is_narayanans_count(m):
    assert _flops(m) == pytest.approx(_narayanan_no_recompute(m), rel=1e-12)


def test_gpt3_175b_model_flops_per_token_value():
    # 72 * 96 * 12288^2 * (1 + 2048/73728 + 51200/14155776) = 1.0764e12 FLOPs per token (~6 x 175e9 + attention)
    assert _flops(GPT3) == pytest.approx(1.07644e12, rel=1e-4)


@pytest.mark.parametrize(
    "m", [GPT3, MEGATRON_1T], ids=["narayanan2021-eq3-gpt3-175b", "narayanan2021-eq3-1t"]
)
def test_full_recompute_adds_one_forward_of_the_layers_eq3(m):
    """Eq. 3: recomputation runs the layers' forward again (4/3 of the layer FLOPs), the logits once."""
    dense, att = F.layer_flops_per_token(m["h"], m["h"], m["h"], 4 * m["h"], False, m["s"])
    hardware = _flops(m) + m["l"] * (dense + att)
    assert hardware == pytest.approx(_narayanan_eq3(m), rel=1e-12)
    layers = 3.0 * m["l"] * (dense + att)
    assert (layers + m["l"] * (dense + att)) / layers == pytest.approx(4.0 / 3.0)


def test_megatron_1t_table1_row_is_consistent():
    """Table 1, 1T row: 502 PFLOP/s aggregate on 3072 A100s (312 dense BF16 TFLOP/s) is ~163 TFLOP/s
    per GPU, 52 % of peak; these are hardware FLOPs counted with Eq. 3 (recompute included), so the
    model FLOPs utilisation is 3/4 of the layer share lower."""
    per_gpu = 502e15 / 3072
    assert per_gpu / 1e12 == pytest.approx(163.0, abs=0.5)
    assert per_gpu / 312e12 == pytest.approx(0.52, abs=0.005)
    mfu = per_gpu * _flops(MEGATRON_1T) / _narayanan_eq3(MEGATRON_1T) / 312e12
    assert 0.39 < mfu < 0.40


def test_layer_flops_attention_term_is_4_s_h():
    dense, att = F.layer_flops_per_token(12288, 12288, 12288, 49152, False, 2048)
    assert dense == 24 * 12288**2
    assert att == 4 * 2048 * 12288


def test_swiglu_and_gqa_generalise_the_dense_count():
    # Llama-3 8B layer: QKV 2h(h + 2*1024), out 2h^2, SwiGLU 3 matrices of h x 14336
    dense, _ = F.layer_flops_per_token(4096, 4096, 1024, 14336, True, 8192)
    assert dense == 2 * 4096 * (4096 + 2 * 1024) + 2 * 4096 * 4096 + 2 * 3 * 4096 * 14336


def test_flops_are_vectorised_over_plans():
    h = np.array([4096, 12288, 25600])
    out = F.model_flops_per_token(np.array([32, 96, 128]), h, h, h, 4 * h, np.array([False] * 3), 51200, 2048)
    scalar = [
        F.model_flops_per_token(l_, h_, h_, h_, 4 * h_, False, 51200, 2048)
        for l_, h_ in zip([32, 96, 128], [4096, 12288, 25600], strict=True)
    ]
    np.testing.assert_allclose(out, scalar, rtol=1e-15)


# -- parameters -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "expected", "rel"),
    [
        # (layers, h, heads, kv_heads, ffn, swiglu, vocab, tied)
        ((96, 12288, 96, 96, 49152, False, 51200, False), 175e9, 0.005),  # GPT-3 175B (Brown et al. 2020)
        ((128, 25600, 160, 160, 102400, False, 51200, False), 1008e9, 0.005),  # Narayanan 2021 Table 1
        ((32, 4096, 32, 8, 14336, True, 128256, False), 8.03e9, 0.002),  # Llama 3 8B model card
        ((80, 8192, 64, 8, 28672, True, 128256, False), 70.6e9, 0.002),  # Llama 3 70B model card
        ((32, 4096, 32, 32, 11008, True, 32000, False), 6.74e9, 0.002),  # Llama 2 7B (6.74B)
    ],
    ids=["gpt3-175b", "megatron-1t", "llama3-8b", "llama3-70b", "llama2-7b"],
)
def test_parameter_counts(shape, expected, rel):
    layers, h, heads, kv, ffn, swiglu, vocab, tied = shape
    d = h // heads
    n = F.model_params(layers, h, heads * d, kv * d, ffn, swiglu, vocab, tied)
    assert float(n) == pytest.approx(expected, rel=rel)


def test_narayanan_parameter_formula_for_the_1t_row():
    """P = 12 l h^2 (1 + 13/12h + (V + s)/12lh) (Narayanan 2021, Sec. 5.1) = 1008B for the 1T row;
    ShardMeter counts no biases and untied embeddings, within 0.2 % of it."""
    l, h, V, s = 128, 25600, 51200, 2048
    paper = 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert paper == pytest.approx(1008e9, rel=1e-3)
    ours = F.model_params(l, h, h, h, 4 * h, False, V, False)
    assert float(ours) == pytest.approx(paper, rel=2e-3)


# -- activation memory (Korthikanti et al. 2022, Table 2 for the Table 3 models) ----------------------

KORTHIKANTI_TABLE3 = {  # name: (h, a, s, t)
    "22b": (6144, 64, 2048, 8),
    "175b": (12288, 96, 2048, 8),
    "530b": (20480, 128, 2048, 8),
    "1t": (25600, 160, 2048, 8),
}


def _act(h, a, s, t, *, sp, recompute, b=1):
    stored, _ = activation_bytes_per_layer(s, b, h, a, h, h, 4 * h, False, t, sp, recompute, True)
    return float(stored)


@pytest.mark.parametrize(
    "name", list(KORTHIKANTI_TABLE3), ids=[f"korthikanti2022-{n}" for n in KORTHIKANTI_TABLE3]
)
def test_activation_memory_per_layer_table2(name):
    h, a, s, t = KORTHIKANTI_TABLE3[name]
    for b in (1, 4):
        sbh = s * b * h
        # no parallelism: s b h (34 + 5 a s / h)
        assert _act(h, a, s, 1, sp=False, recompute=0, b=b) == pytest.approx(
            sbh * (34 + 5 * a * s / h), rel=1e-12
        )
        # tensor parallel: s b h (10 + 24/t + 5 a s / (h t))
        assert _act(h, a, s, t, sp=False, recompute=0, b=b) == pytest.approx(
            sbh * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12
        )
        # tensor + sequence parallel: s b h / t (34 + 5 a s / h)
        assert _act(h, a, s, t, sp=True, recompute=0, b=b) == pytest.approx(
            sbh / t * (34 + 5 * a * s / h), rel=1e-12
        )
        # tensor parallel + selective recompute: s b h (10 + 24/t)
        assert _act(h, a, s, t, sp=False, recompute=1, b=b) == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
        # tensor + sequence parallel + selective recompute: 34 s b h / t
        assert _act(h, a, s, t, sp=True, recompute=1, b=b) == pytest.approx(34 * sbh / t, rel=1e-12)
        # full activation recomputation: 2 s b h
        assert _act(h, a, s, t, sp=False, recompute=2, b=b) == pytest.approx(2 * sbh, rel=1e-12)


def test_gpt3_attention_term_is_80_against_34():
    """Korthikanti Sec. 5: for GPT-3 175B, 5as/h = 80 while the rest is 34 per s b h."""
    h, a, s, _ = KORTHIKANTI_TABLE3["175b"]
    assert _act(h, a, s, 1, sp=False, recompute=0) / (s * h) - 34 == pytest.approx(80.0)


def test_selective_recompute_with_sp_saves_5x_on_gpt3():
    """Korthikanti Sec. 5: SP + selective recompute cut activation memory ~5x vs TP alone (175B)."""
    h, a, s, t = KORTHIKANTI_TABLE3["175b"]
    ratio = _act(h, a, s, t, sp=False, recompute=0) / _act(h, a, s, t, sp=True, recompute=1)
    assert 4.5 < ratio < 6.0


def test_activation_memory_is_vectorised_over_plans():
    t = np.array([1, 2, 4, 8])
    sp = np.array([False, True, False, True])
    rc = np.array([0, 1, 2, 1])
    stored, _ = activation_bytes_per_layer(2048, 1, 12288, 96, 12288, 12288, 49152, False, t, sp, rc, True)
    scalar = [
        _act(12288, 96, 2048, int(t_), sp=bool(s_), recompute=int(r_))
        for t_, s_, r_ in zip(t, sp, rc, strict=True)
    ]
    np.testing.assert_allclose(stored, scalar, rtol=1e-15)


# -- collectives (Thakur, Rabenseifner and Gropp 2005) ---------------------------------------------

ALPHA = 5e-6  # s per step
BW = 100e9  # bytes/s per rank
S = 1e9  # bytes


@pytest.mark.parametrize("n", [2, 4, 8, 64])
def test_ring_all_gather_and_reduce_scatter(n):
    assert F.ring_collective_time(S, n, BW, ALPHA) == pytest.approx((n - 1) * ALPHA + (n - 1) / n * S / BW)


def test_ring_over_one_rank_costs_nothing():
    assert F.ring_collective_time(S, 1, BW, ALPHA) == 0.0


def _two_tiers(gpn, bw0, lat0, bw1, lat1) -> Topology:
    """A node of ``gpn`` GPUs, then the network (the two-tier spelling of SCENARIO.md)."""
    return Topology(
        gpus_per_node=gpn,
        nodes=1,
        domain_gpus=gpn,
        tier_gpus=np.array([gpn, np.inf]),
        tier_bytes_s=np.array([bw0, bw1]),
        tier_latency_s=np.array([lat0, lat1]),
    )


@pytest.mark.parametrize("n", [2, 8])
def test_ring_all_reduce_is_reduce_scatter_plus_all_gather(n):
    """Inside one node: 2 (n-1) alpha + 2 (n-1)/n S beta."""
    topo = _two_tiers(8, BW, ALPHA, BW / 4, 10 * ALPHA)
    t = collective_time("all_reduce", S, n, 1, topo)
    assert t == pytest.approx(2 * (n - 1) * ALPHA + 2 * (n - 1) / n * S / BW)
    rs = collective_time("reduce_scatter", S, n, 1, topo)
    ag = collective_time("all_gather", S, n, 1, topo)
    assert rs == pytest.approx(ag) and t == pytest.approx(rs + ag)


def test_group_with_one_member_per_node_rings_over_the_network():
    """A data-parallel group with stride 8 (TP fills the node): one rank per node, 16 nodes."""
    bw1, lat1 = 25e9, 20e-6
    t = collective_time("all_gather", S, 16, 8, _two_tiers(8, BW, ALPHA, bw1, lat1))
    assert t == pytest.approx(15 * lat1 + 15 / 16 * S / bw1)


def test_two_level_collective_splits_the_volume():
    """k = 8 members per node on 2 nodes: (k-1)/k S inside, (n-1)/n S/k across; NCCL's ring
    latency (tuning.cc): nRanks - 1 = 15 steps, nNodes - 1 = 1 across the network, 14 inside."""
    bw1, lat1 = 25e9, 20e-6
    t = collective_time("reduce_scatter", S, 16, 1, _two_tiers(8, BW, ALPHA, bw1, lat1))
    assert t == pytest.approx(14 * ALPHA + 7 / 8 * S / BW + 1 * lat1 + 1 / 2 * (S / 8) / bw1)


def test_ring_latency_grows_with_the_ranks_as_nccls_model():
    """NCCL's tuning model (src/graph/tuning.cc @ 5067397): a ring reduce-scatter over 512 ranks
    on 64 nodes of 8 takes 511 steps, 63 at the network's latency and 448 at NVLink's; the old
    per-tier rings counted 7 + 63. The bandwidth term does not depend on the steps: a tiny
    message costs the latency alone, which quadruples (nearly) from 128 to 512 ranks."""
    lat0, bw1, lat1 = 2.65e-6, 50e9, 9e-6
    topo = _two_tiers(8, BW, lat0, bw1, lat1)
    tiny = 8.0  # bytes
    t512 = collective_time("reduce_scatter", tiny, 512, 1, topo)
    assert t512 == pytest.approx(448 * lat0 + 63 * lat1, rel=1e-6)
    t128 = collective_time("all_gather", tiny, 128, 1, topo)
    assert t128 == pytest.approx(112 * lat0 + 15 * lat1, rel=1e-6)
    # the bandwidth share is still the hierarchical one (NCCL's channels spread the crossings)
    big = collective_time("all_gather", S, 512, 1, topo) - t512
    assert big == pytest.approx(7 / 8 * S / BW + 63 / 64 * (S / 8) / bw1, rel=1e-6)


def test_all_reduce_takes_nccls_tree_when_its_log_latency_wins():
    """NCCL's all-reduce is the faster of the ring (2 (n - 1) steps) and the double binary tree:
    latency 2 ((ppn - 1) intraLat + log2i(nNodes) interLat), bus bandwidth 0.92 x the ring's
    (tuning.cc @ 5067397). 1024 ranks on 128 nodes, a small message: the tree's 2 (7 + 7) steps
    against the ring's 2 (896 + 127); a 10 GB message: the ring's bandwidth wins."""
    from shardmeter.model.tiers import TREE_BW_FACTOR

    lat0, bw1, lat1 = 2.65e-6, 50e9, 9e-6
    topo = _two_tiers(8, BW, lat0, bw1, lat1)
    small = 1e6
    bw_small = 7 / 8 * small / BW + 127 / 128 * (small / 8) / bw1
    t = collective_time("all_reduce", small, 1024, 1, topo)
    assert t == pytest.approx(2 * (bw_small / TREE_BW_FACTOR + 7 * lat0 + 7 * lat1), rel=1e-9)
    big = 1e10
    bw_big = 7 / 8 * big / BW + 127 / 128 * (big / 8) / bw1
    t = collective_time("all_reduce", big, 1024, 1, topo)
    assert t == pytest.approx(2 * (bw_big + 896 * lat0 + 127 * lat1), rel=1e-9)
    # a flat ring (DeepSpeed ZeRO-3) is always the ring
    flat = collective_time("all_reduce", small, 1024, 1, topo, flat=True)
    assert flat > collective_time("all_reduce", small, 1024, 1, topo)


def test_flat_collective_carries_the_whole_share_across_the_network():
    """flat: one pipelined ring through all 16 members: each GPU forwards (n-1)/n S of it (not
    S/k), at the pace of the slowest link the ring crosses (the NIC), not the sum of the tiers'
    terms; the latency is NCCL's, 14 steps inside the two nodes and one across."""
    bw1, lat1 = 25e9, 20e-6
    assert bw1 < BW
    t = collective_time("all_gather", S, 16, 1, _two_tiers(8, BW, ALPHA, bw1, lat1), flat=True)
    assert t == pytest.approx(14 * ALPHA + 1 * lat1 + 15 / 16 * S / bw1)
    # inside one node the ring's slowest link is NVLink
    one = collective_time("all_gather", S, 8, 1, _two_tiers(8, BW, ALPHA, bw1, lat1), flat=True)
    assert one == pytest.approx(7 * ALPHA + 7 / 8 * S / BW)


def test_three_tier_all_reduce_against_a_hand_calculation():
    """NVL72 domains, then rail-optimised IB joining 8 domains (576 GPUs), then a 2:1 spine.

    A 2304-rank all-reduce of 1 GB (stride 1): 72 members per domain ring over NVLink, 8 domains
    per rail group ring over IB carrying S/72, 4 rail groups ring over the spine carrying
    S/(72 x 8) at half the IB bandwidth. Latency is NCCL's: the ring's 2303 steps are 2304 - 32
    inside the 32 domains, 32 - 4 across IB and 4 - 1 across the spine, twice for an all-reduce;
    the tree's are 71 + log2(8) + log2(4), twice, at 0.92 x the ring's bandwidth; NCCL takes the
    faster (here the tree).
    """
    nvl, ib = 900e9 * 0.8, 50e9 * 0.85
    lat = (1e-6, 5e-6, 8e-6)
    topo = Topology(
        gpus_per_node=4,
        nodes=576,
        domain_gpus=72,
        tier_gpus=np.array([72.0, 576.0, np.inf]),
        tier_bytes_s=np.array([nvl, ib, ib / 2.0]),
        tier_latency_s=np.array(lat),
    )
    t = collective_time("all_reduce", S, 2304, 1, topo)
    bw = 71 / 72 * S / nvl + 7 / 8 * (S / 72) / ib + 3 / 4 * (S / 576) / (ib / 2.0)
    ring = 2.0 * (bw + 2272 * lat[0] + 28 * lat[1] + 3 * lat[2])
    tree = 2.0 * (bw / 0.92 + 71 * lat[0] + 3 * lat[1] + 2 * lat[2])
    assert tree < ring and t == pytest.approx(tree, rel=1e-12)
    assert collective_time("reduce_scatter", S, 2304, 1, topo) == pytest.approx(ring / 2.0, rel=1e-12)
    # a group inside one NVLink domain never touches IB; one spanning two domains pays IB only
    assert collective_time("all_reduce", S, 72, 1, topo) == pytest.approx(
        2 * (71 * lat[0] + 71 / 72 * S / nvl)
    )
    two = collective_time("reduce_scatter", S, 144, 1, topo)
    assert two == pytest.approx(142 * lat[0] + 71 / 72 * S / nvl + 1 * lat[1] + 1 / 2 * (S / 72) / ib)
    # all-to-all over 2304 ranks: each tier carries its share at once; the slowest tier sets the time
    a2a = collective_time("all_to_all", S, 2304, 1, topo)
    parts = (
        71 / 2304 * S / nvl + 71 * lat[0],
        (576 - 72) / 2304 * S / ib + 7 * lat[1],
        (2304 - 576) / 2304 * S / (ib / 2.0) + 3 * lat[2],
    )
    assert a2a == pytest.approx(max(parts), rel=1e-12)


# ---- fused-attention ramp (ATTENTION_RAMP_KEYS) ----------------------------------------------


def _h200_attention_points():
    path = os.path.join(
        os.path.dirname(__file__), "..", "benchmarks", "results", "h200-2026-11-30", "attention.csv"
    )
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["mode"] == "fwd+bwd"]


@pytest.mark.parametrize("head_dim", ["64", "128"])
def test_attention_ramp_reproduces_the_measured_h200_curve(head_dim):
    """E / (1 + k / kv) with the model's k fits the measured SDPA forward+backward curve (1k-32k tokens,
    causal and not) within 5 % mean error for the best E; with no ramp (k = 0) no E comes within 15 %."""
    rows = [r for r in _h200_attention_points() if r["head_dim"] == head_dim]
    kv = np.array([float(r["seq"]) * (0.5 if r["causal"] == "True" else 1.0) for r in rows])
    frac = np.array([float(r["frac_of_peak"]) for r in rows])

    def best(k):
        shape = 1.0 / (1.0 + k / kv)
        return min(np.mean(np.abs(e * shape - frac) / frac) for e in np.linspace(0.2, 0.9, 701))

    assert best(ATTENTION_RAMP_KEYS) < 0.05
    assert best(0.0) > 0.15


def test_attention_runs_closer_to_its_asymptote_at_long_sequences():
    """Per attention FLOP, a 32k-token sequence is faster than a 2k one, and the ratio is the ramp's."""
    from shardmeter.estimator import Estimator
    from shardmeter.model.evaluate import evaluate

    est = Estimator()
    sc = est.load(os.path.join(os.path.dirname(__file__), "..", "examples", "gpt3-175b-a100.toml"))
    base, table = est.inputs(sc)
    times = []
    for s, att_eff in ((2048.0, 0.3), (2048.0, 0.6), (32768.0, 0.3), (32768.0, 0.6)):
        cols = {k: np.array(v, dtype=float) for k, v in base.columns().items()}
        set_to = {
            "model.seq_len": s,
            "hardware.attention_efficiency": att_eff,
            "training.global_batch": 1536.0 * 2048 / s,
            "layout.pp": 1.0,
            "layout.tp": 8.0,
            "layout.dp": 1.0,
            "topology.nodes": 1.0,
            "model.layers": 2.0,
            "training.materialized": 0.0,
            "hardware.memory_bytes": 1e15,
        }
        cols.update({k: np.full_like(cols[k], v) for k, v in set_to.items()})
        times.append(float(evaluate(ModelInputs.from_columns(cols), table).breakdown.compute_s[0]))
    # The attention part is what changes with att_eff: t(0.3) - t(0.6) = t_att(0.6).
    att_short, att_long = times[0] - times[1], times[2] - times[3]
    flops_ratio = 32768.0 / 2048.0  # same tokens per step, keys per query 16x longer
    per_flop = (att_short * flops_ratio) / att_long
    expected = (1 + ATTENTION_RAMP_KEYS / 1024.0) / (1 + ATTENTION_RAMP_KEYS / 16384.0)
    assert per_flop == pytest.approx(expected, rel=0.02)


# ---- GEMM tile quantisation (NVIDIA "Matrix Multiplication Background", Sec. 3.1) ----------------

_H200 = dict(peak_flops=989.4e12, efficiency=0.803, hbm_bytes_s=4.8e12 * 0.9, sm_count=132)


def test_odd_vocab_is_padded_to_whole_tiles():
    """GPT-2's vocab 50257 on 128-wide tiles: ceil(50257 / 128) = 393 tiles = 50304 columns, the
    same tiles (and so the same compute time) as a 50304 vocab; per useful FLOP that is
    50304 / 50257 slower. 16384 tokens x 4096 hidden keeps it compute-bound."""
    assert math.ceil(50257 / 128) * 128 == 50304
    odd = F.gemm_time(16384, 50257, 4096, **_H200)
    even = F.gemm_time(16384, 50304, 4096, **_H200)
    out_write = 2.0 * 16384 * (50304 - 50257) / _H200["hbm_bytes_s"]  # the only difference
    assert even - odd == pytest.approx(out_write, rel=1e-9)


def test_aligned_shapes_lose_nothing_to_padding():
    """M, N multiples of 256 and K of 64: the time is the wave-quantised roofline, 2 M N K at
    the ceiling divided by the SM fill of the last wave (here 32 x 16 = 512 tiles of 128x256 on
    132 SMs: 4 waves, 512 / 528 full)."""
    m, n, k = 4096, 4096, 4096
    t = F.gemm_time(m, n, k, **_H200)
    fill = 512 / (4 * 132)
    flop = 2.0 * m * n * k / (_H200["peak_flops"] * _H200["efficiency"] * fill)
    out = 2.0 * m * n / _H200["hbm_bytes_s"]
    assert t == pytest.approx(flop + out + F.KERNEL_OVERHEAD_S, rel=1e-12)


def test_an_odd_inner_dimension_pays_its_last_k_block():
    """K = 4097 steps through ceil(4097 / 64) = 65 blocks of 64: the main loop does 4160 deep,
    4160 / 4097 of the work of K = 4097; K = 4160 costs the same compute."""
    m, n = 4096, 4096
    a = F.gemm_time(m, n, 4097, **_H200)
    b = F.gemm_time(m, n, 4160, **_H200)
    assert a == pytest.approx(b, rel=1e-12)
    assert a > F.gemm_time(m, n, 4096, **_H200) * 4097 / 4096


_A100 = dict(peak_flops=312e12, efficiency=0.7, hbm_bytes_s=1.555e12 * 0.9, sm_count=108)


def test_a_batched_kernel_fills_the_sms_with_all_its_gemms():
    """Megatron's attention scores: one ``torch.baddbmm`` over 15 heads x 16 sequences of
    [1024, 128] @ [128, 1024]. Alone, one such GEMM has 8 x 4 = 32 tiles of 128x256 on 108 A100
    SMs: one wave 32 / 108 full (64 tiles of 128x128: 64 / 108). As one strided-batched kernel
    its 240 x 64 = 15360 tiles of 128x128 run in ceil(15360 / 108) = 143 waves, 15360 / 15444
    full (better than 7680 tiles of 128x256 in 72 waves, 7680 / 7776), with one overhead."""
    m = n = 1024
    k, b = 128, 240
    batched = F.gemm_time(m, n, k, **_A100, batch=b)
    fill = 15360 / (143 * 108)
    flop = b * 2.0 * m * n * 128 / (_A100["peak_flops"] * _A100["efficiency"] * fill)
    t_in = b * 2.0 * (m * k + k * n) / _A100["hbm_bytes_s"]
    out = b * 2.0 * m * n / _A100["hbm_bytes_s"]
    assert batched == pytest.approx(max(flop, t_in) + out + F.KERNEL_OVERHEAD_S, rel=1e-12)
    # the same GEMMs as 240 kernels one after another: each a third-full wave, each its overhead
    separate = F.gemm_time(m, n, k, **_A100, count=b)
    assert separate > 2.5 * batched
    assert F.gemm_time(m, n, k, **_A100, count=2, batch=b) == pytest.approx(2 * batched, rel=1e-12)
