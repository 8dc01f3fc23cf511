"""The model's compute, communication and activation formulas, cut into parts: each whole is its
parts put together, a term no plan has is never priced, and a batch mixing plans with and without
it (MLA, MoE with shared experts and dense layers, each recompute mode, fp8 recipes, tp / cp / ep
of 1 and more) prices every row exactly as the scalar path prices that row alone."""

from __future__ import annotations

import itertools
import pathlib

import attrs
import numpy as np
import pytest

import shardmeter
from shardmeter.inputs.build import build_inputs
from shardmeter.inputs.bundles import Fp8Recipe, Recompute
from shardmeter.model import activations as A
from shardmeter.model.branches import where_needed
from shardmeter.model.comm import layer_comm
from shardmeter.model.compute import full_recompute_share, local_shapes, micro_batch_compute
from shardmeter.model.evaluate import evaluate
from shardmeter.model.memory import layer_activations

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.toml") if "plugins" not in p.parts)
ONE_ISLAND = [p for p in EXAMPLES if len(shardmeter.load_scenario(p).islands) == 1]


def _scalar(model: str, **training):
    """Scalar-path inputs (and their part table) of ``model`` on 8 nodes of H100."""
    sc = {
        "model": {"preset": model},
        "training": {"global_batch": 64, "micro_batch": 1, **training},
        "island": [{"gpu": "h100-sxm", "nodes": 8}],
    }
    est = shardmeter.Estimator()
    return build_inputs(est.resolve(est.load(sc)), scalar=True)


@pytest.mark.parametrize("path", ONE_ISLAND, ids=lambda p: p.name)
def test_the_scalar_path_runs_to_its_end(path):
    """A single-island estimate stays on Python floats: no term a model lacks (a zero-wide MLA or
    shared-expert GEMM) divides by zero and sends it to the array path."""
    est = shardmeter.Estimator()
    inp, table = build_inputs(est.resolve(est.load(path)), scalar=True)
    out = evaluate(inp, table)
    assert type(out.step_time_s) is float and type(out.memory_bytes) is float


def test_the_scalar_path_prices_mla_moe_and_fp8_on_floats():
    inp, _ = _scalar("deepseek-v3", precision="fp8", fp8_recipe="blockwise", recompute="op")
    ms, tr, hw = inp.model, inp.training, inp.hardware
    assert ms.kv_rank > 0 and ms.shared_experts > 0 and ms.dense_layers > 0
    sh = local_shapes(ms, tr, 8.0, 1.0, 1.0, 1.0)
    assert sh.dense_layers_local == 3.0  # one stage: its three leading dense layers too
    ct = micro_batch_compute(ms, tr, hw, sh, 8.0, 8.0, True, hw.peak_flops, hw.peak16_flops)
    assert all(type(getattr(ct, f.name)) is float and getattr(ct, f.name) > 0 for f in attrs.fields(type(ct)))


def test_where_needed_calls_only_the_sides_some_plan_takes():
    calls = []

    def side(name, value):
        def f():
            calls.append(name)
            return value

        return f

    assert where_needed(True, side("a", 1.0), side("b", 2.0)) == 1.0 and calls == ["a"]
    calls.clear()
    c = np.array([[False], [False]])
    got = where_needed(c, side("a", 1.0), side("b", 2.0))
    assert calls == ["b"] and got.shape == (2, 1) and (got == 2.0).all()  # np.where's shape
    calls.clear()
    c = np.array([[True], [False]])
    got = where_needed(c, side("a", (1.0, 3.0)), side("b", (2.0, 4.0)))
    assert sorted(calls) == ["a", "b"]
    assert [x.ravel().tolist() for x in got] == [[1.0, 2.0], [3.0, 4.0]]


def _stack(rows):
    """Scalar bundles as one batch of ``len(rows)`` plans on one island (shape ``(N, 1)``)."""
    first = rows[0]
    return type(first)(
        **{a.name: np.asarray([[getattr(r, a.name)] for r in rows]) for a in attrs.fields(type(first))}
    )


def _row(x, i, n):
    return float(np.broadcast_to(x, (n, 1))[i, 0])


#: Rows: Llama 3 8B (dense, no MLA), DeepSeek-V3 (MLA, MoE with shared experts and leading
#: dense layers) and GPT-3 13B (GELU, with dropout or without) under each recompute mode, bf16 or an fp8
#: recipe, flash or materialised attention, eager or compiled, with tp / cp / ep of 1 and more.
_MODELS = ("llama3-8b", "deepseek-v3", "gpt3-13b")
_BASES = {(m, fp8): _scalar(m, precision="fp8" if fp8 else "bf16")[0] for m in _MODELS for fp8 in (0, 1)}
_GRID = list(itertools.product(_MODELS, Recompute, (None, *Fp8Recipe), (False, True), (False, True)))


def _case(i, model, rec, recipe, materialized, compiled):
    inp = _BASES[(model, recipe is not None)]
    tr = attrs.evolve(
        inp.training,
        recompute=float(rec),
        recompute_layers=float(3 * (i % 2)),
        fp8_recipe=float(recipe or 0),
        materialized=float(materialized),
        compile=float(compiled),
        op_saves_attention=float(i % 3 != 0),
    )
    tp, cp, ep = (1.0, 2.0, 8.0)[i % 3], (1.0, 2.0)[i % 2], (1.0, 8.0)[(i // 2) % 2]
    pp = (1.0, 2.0)[(i // 5) % 2]  # one stage holds DeepSeek-V3's leading dense layers, two do not
    ms = inp.model if model != "gpt3-13b" else attrs.evolve(inp.model, dropout=bool(i % 2))
    return ms, tr, inp.hardware, inp.topology, tp, cp, ep, bool(i % 4 > 1), pp


def _price(model, tr, hw, topo, tp, cp, ep, sp, pp):
    sh = local_shapes(model, tr, tp, pp, cp, 1.0)
    ct = micro_batch_compute(model, tr, hw, sh, tp, ep, sp, hw.peak_flops, hw.peak16_flops)
    lc = layer_comm(
        model,
        sh,
        ct,
        topo,
        tp,
        cp,
        ep,
        tp == 2.0,
        tr.recompute,
        sp,
        full_recompute_share(tr, sh),
        async_tp=sp,
        hbm_bytes_s=hw.hbm_bytes_s * hw.hbm_efficiency,
    )
    return {"ct": ct, "lc": lc, "act": layer_activations(model, tr, sh, tp, sp)}


def test_a_mixed_batch_prices_every_row_as_that_row_alone():
    cases = [_case(i, *g) for i, g in enumerate(_GRID)]
    singles = [_price(*c) for c in cases]
    topo = _BASES[("llama3-8b", 0)].topology
    # one island for every row: (1, 1), its tiers (1, 1, T)
    array_topo = type(topo)(
        **{a.name: np.asarray([[getattr(topo, a.name)]]) for a in attrs.fields(type(topo))}
    )
    col = [np.asarray([[c[k]] for c in cases]) for k in (4, 5, 6, 7, 8)]
    with np.errstate(divide="ignore", invalid="ignore"):  # as evaluate: a zero-wide GEMM's row is not picked
        stacked = (_stack([c[k] for c in cases]) for k in (0, 1, 2))
        batch = _price(*stacked, array_topo, *col)
    for i, one in enumerate(singles):
        for rec in ("ct", "lc"):
            for f in attrs.fields(type(one[rec])):
                want, got = getattr(one[rec], f.name), _row(getattr(batch[rec], f.name), i, len(cases))
                assert type(want) is float, (rec, f.name)
                assert got == pytest.approx(want, rel=1e-12, abs=1e-300), (i, _GRID[i], rec, f.name)
        for k in (0, 1):
            assert _row(batch["act"][k], i, len(cases)) == pytest.approx(one["act"][k], rel=1e-12), (
                i,
                _GRID[i],
                k,
            )


@pytest.mark.parametrize("rec", list(Recompute))
def test_activation_bytes_per_layer_is_the_recompute_modes_own_count(rec):
    s, b, h, heads, q, kv, ffn = 8192.0, 1.0, 4096.0, 32.0, 4096.0, 1024.0, 14336.0
    shape = (s, b, h, heads, q, kv, ffn, True, 2.0, True)
    stored, full = A.activation_bytes_per_layer(*shape, float(rec), False, 1.0, compiled=True)
    kept = A.kept_activation_bytes(*shape, False)
    want = {
        Recompute.NONE: kept,
        Recompute.SELECTIVE: kept,
        Recompute.FULL: A.full_recompute_bytes(s, b, h, 2.0, True),
        Recompute.OP: A.op_recompute_bytes(*shape, False, compiled=True),
    }[rec]
    assert stored == want and full == kept
    # op recompute: the full recompute's layer input plus the saved-list outputs
    op = A.op_recompute_bytes(*shape, False, compiled=False)
    sdpa = A.op_sdpa_bytes(s, b, heads, q, False)
    w2 = A.op_w2_output_bytes(s * b * h, True, False)
    assert op == pytest.approx(
        A.full_recompute_bytes(s, b, h, 2.0, True)
        + (s * b * (2 * q + 2 * kv + 2 * ffn) + sdpa) / 2.0
        + w2
        + 4.0 * s * b * h / 2.0
    )


def test_a_moe_models_dense_layers_cost_a_dense_layer_each_in_place_of_a_moe_layer():
    """DeepSeek-V3's three leading dense layers (``first_k_dense_replace``) on one stage: the
    stage's forward GEMMs and elementwise kernels are those of 61 MoE layers, less three MoE
    layers' and plus three layers of the same model with one ``ffn_hidden`` MLP (no experts)."""
    inp, _ = _scalar("deepseek-v3")
    ms, tr, hw = inp.model, inp.training, inp.hardware

    def terms(m):
        sh = local_shapes(m, tr, 8.0, 1.0, 1.0, 1.0)
        return sh, micro_batch_compute(m, tr, hw, sh, 8.0, 8.0, True, hw.peak_flops, hw.peak16_flops)

    sh, with_dense = terms(ms)
    _, all_moe = terms(attrs.evolve(ms, dense_layers=0.0))
    _, dense = terms(attrs.evolve(ms, experts=1.0, experts_per_token=1.0, shared_experts=0.0))
    assert sh.dense_layers_local == 3.0 and with_dense.dense_forward == all_moe.dense_forward
    one_dense_less_moe = dense.dense_forward - all_moe.dense_forward
    assert with_dense.forward - all_moe.forward == pytest.approx(3.0 * one_dense_less_moe, rel=1e-9)
    assert with_dense.backward - all_moe.backward == pytest.approx(6.0 * one_dense_less_moe, rel=1e-9)
    per_layer = (dense.memory_ops - all_moe.memory_ops) / 61.0
    assert with_dense.memory_ops - all_moe.memory_ops == pytest.approx(3.0 * per_layer, rel=1e-9)
