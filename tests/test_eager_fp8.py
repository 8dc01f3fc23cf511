"""Eager PyTorch against fused kernels (training.compile) and the fp8 recipes' extra passes.

First-principles counts, stated per test: the bytes each kernel reads and writes per element are
read off the code the model cites (meta-llama's RMSNorm, torchtitan's rope.py and feed_forward.py,
torchao's roofline_utils.py), and times are those bytes at the GPU's HBM rate.
"""

from __future__ import annotations

import attrs
import pytest

import shardmeter
from shardmeter.model import elementwise as E
from shardmeter.model import fp8 as F8
from shardmeter.model.degrees import Degrees
from shardmeter.model.formulas import gemm_time
from shardmeter.model.sharding import shard_inputs

H100_HBM = 3350e9 * 0.94  # h100-sxm: memory_bandwidth_gb_s x hbm_efficiency (gpus.toml)


def _llama8b(**training):
    tr = {"global_batch": 64, "micro_batch": 1, "recompute": "none", **training}
    return {
        "model": {"preset": "llama3-8b"},
        "training": tr,
        "island": [{"gpu": "h100-sxm", "nodes": 1}],
        "parallelism": {"dp": 8, "sharding": "fsdp"},
    }


def test_eager_rmsnorm_is_eight_kernels_and_36_bytes_per_element():
    # x.float() 2+4, pow 4+4, mean 4, +eps 0, rsqrt 0, x*r 4+4, type_as 4+2, *w 2+2 = 36
    fwd, bwd = E.EAGER["rmsnorm"]
    assert len(fwd) == 8 and E.bytes_per_element(fwd) == 36.0
    # autograd: *w (4, 6, 2), float (6), x*r (8, 12, 4), rsqrt 0, mean 4, pow (8, 12),
    # the two fp32 gradients summed 12, float() backward 6 = 84
    assert E.bytes_per_element(bwd) == 84.0
    # fused: read x, write y; backward read x and dy, write dx
    assert E.bytes_per_element(E.FUSED["rmsnorm"][0]) == 4.0
    assert E.bytes_per_element(E.FUSED["rmsnorm"][1]) == 6.0


def test_eager_rope_and_swiglu_bytes():
    # rope per element of q or k: float() 2+4, complex mul 4+4, type_as 4+2 = 20, backward the same
    assert [E.bytes_per_element(k) for k in E.EAGER["rope"]] == [20.0, 20.0]
    assert [E.bytes_per_element(k) for k in E.FUSED["rope"]] == [4.0, 4.0]
    # SwiGLU per ffn element: silu 2+2, mul 4+2 = 10; backward 6 + 6 + 6 = 18; fused 6 and 10
    assert [E.bytes_per_element(k) for k in E.EAGER["swiglu"]] == [10.0, 18.0]
    assert [E.bytes_per_element(k) for k in E.FUSED["swiglu"]] == [6.0, 10.0]
    # LayerNorm and GELU are single ATen kernels in eager: nothing for compile to fuse
    assert E.EAGER["layernorm"] == E.FUSED["layernorm"] and E.EAGER["gelu"] == E.FUSED["gelu"]


def test_eager_is_slower_than_compiled_at_8b_by_the_byte_count():
    # Llama-3-8B (h 4096, q 4096, kv 1024, ffn 14336, 32 layers), 8192 tokens per micro-batch,
    # tp = 1, 8 micro-batches per GPU. Eager minus fused bytes per token per layer:
    # forward 2 x (36 - 4) h + (20 - 4)(q + kv) + (10 - 6) ffn, backward 2 x (84 - 6) h +
    # (20 - 4)(q + kv) + (18 - 10) ffn; plus the per-row kernels that move no bytes and take
    # the 2 us floor: eager RMSNorm's + eps, rsqrt and rsqrt backward against fused's dgamma
    # finalise, (3 - 1) per norm.
    h, q, kv, ffn, T, L, m = 4096, 4096, 1024, 14336, 8192, 32, 8
    extra = (2 * 32 * h + 16 * (q + kv) + 4 * ffn) + (2 * 78 * h + 16 * (q + kv) + 8 * ffn)
    expected = m * L * (T * extra / H100_HBM + 2 * 2 * E.ELEMENTWISE_KERNEL_S)
    fused = shardmeter.estimate(_llama8b(compile=True))
    eager = shardmeter.estimate(_llama8b(compile=False))
    d = eager.breakdown_s["memory_ops"] - fused.breakdown_s["memory_ops"]
    assert d == pytest.approx(expected, rel=1e-6)
    assert eager.breakdown_s["compute"] == fused.breakdown_s["compute"]
    # a double-digit slowdown at 8B (about 15 %), as PyTorch's compiled-vs-eager runs report
    assert 1.10 < eager.step_time_s / fused.step_time_s < 1.25


def _linear_s(M, K, N, recipe):
    """fwd + dgrad + wgrad of one linear on an H100 (3 x the forward GEMM, the model's
    convention), bf16 when ``recipe`` is None, else fp8 plus the recipe's casts (compiled)."""
    if recipe is None:
        return 3 * gemm_time(M, N, K, 989.4e12, 0.65, H100_HBM, 132, 2.0)
    cf, cb = F8.linear_cast_time(recipe, True, M, K, N, H100_HBM)
    return 3 * gemm_time(M, N, K, 1979e12, 0.65, H100_HBM, 132, 1.0) + cf + cb


def test_tensorwise_beats_bf16_and_rowwise_loses_on_8b_kv_projection_under_tp2():
    # Llama-3-8B wk under tp = 2 (pytorch/torchtitan #1207's layout, FSDP 2 x TP 2): M = 8192
    # tokens, K = 4096, N = 1024 / 2 = 512. Casts with compile (the input's amax read fused):
    # tensorwise input 2 + 2 bytes, weight 2 + 3 + 3, grad_output 2 + 2 (after its fused read);
    # rowwise input (1 + 2) + (2 + 1), weight 3 + 4 + 3, grad_output 3 + 3, plus the rescale
    # of the dgrad (M x K) and wgrad (K x N) outputs, 4 bytes each.
    # Each kernel takes max(bytes / HBM, 2 us); the amax second stages move no bytes. Rowwise's
    # kernels run at F8.CAST_HBM_SHARE["rowwise"] of the HBM rate.
    M, K, N = 8192, 4096, 512

    def k(b, share=1.0):
        return max(b / (H100_HBM * share), E.ELEMENTWISE_KERNEL_S)

    tw = k(0) + k(4 * M * K) + k(2 * K * N) + k(0) + 2 * k(3 * K * N) + k(0) + k(4 * M * N)
    r = F8.CAST_HBM_SHARE["rowwise"]
    rw = 2 * k(3 * M * K, r) + k(3 * K * N, r) + k(4 * K * N, r) + k(3 * K * N, r) + 2 * k(3 * M * N, r)
    rw += k(4 * M * K, r) + k(4 * K * N, r)
    assert sum(F8.linear_cast_time("tensorwise", True, M, K, N, H100_HBM)) == pytest.approx(tw, rel=1e-6)
    assert sum(F8.linear_cast_time("rowwise", True, M, K, N, H100_HBM)) == pytest.approx(rw, rel=1e-6)
    bf16 = _linear_s(M, K, N, None)
    assert _linear_s(M, K, N, "tensorwise") < bf16 < _linear_s(M, K, N, "rowwise")
    # the large MLP linear w1 without TP (N = 14336) gains with either recipe (torchao's rowwise
    # table: M, K, N = 8192, 4096, 16384 at 1.17x)
    assert _linear_s(M, K, 14336, "rowwise") < _linear_s(M, K, 14336, None)


def test_recipe_order_at_8b_follows_the_cast_traffic():
    # torchao's README (pytorch/ao #1793): Llama3-8B on 8 H100, FSDP2, compile: tensorwise
    # faster than rowwise, both faster than bf16. The model orders them the same way, by cast
    # traffic alone (the GEMMs are the same fp8 GEMMs).
    bf16 = shardmeter.estimate(_llama8b()).tokens_per_s
    tw = shardmeter.estimate(_llama8b(precision="fp8", fp8_recipe="tensorwise")).tokens_per_s
    rw = shardmeter.estimate(_llama8b(precision="fp8", fp8_recipe="rowwise")).tokens_per_s
    assert rw < tw and bf16 < rw


def test_delayed_recipe_keeps_fp8_inputs_for_backward():
    # TE saves the fp8 copy of each GEMM input: per layer T (2h + q + ffn) bytes fewer
    # (QKV and MLP-up inputs h wide, projection q, MLP-down ffn; 2 bytes -> 1); torchao keeps bf16.
    T, h, q, ffn, L = 8192, 4096, 4096, 14336, 32
    base = shardmeter.estimate(_llama8b(precision="fp8", fp8_recipe="tensorwise"))
    te = shardmeter.estimate(_llama8b(precision="fp8", fp8_recipe="delayed"))
    saved = base.memory_breakdown_gb["activations"] - te.memory_breakdown_gb["activations"]
    assert saved == pytest.approx(L * T * (2 * h + q + ffn) / 1e9, rel=1e-6)


def test_fp8_params_gather_the_layers_weights_in_one_byte():
    from shardmeter.estimator import Estimator
    from shardmeter.model.compute import local_shapes

    est = Estimator()
    inp, _ = est.inputs(est.load(_llama8b(precision="fp8", fp8_params=True)))

    ms, tr = inp.model, inp.training
    sh = local_shapes(ms, tr, 1.0, 1.0, 1.0, 1.0)
    deg = Degrees(tp=1.0, pp=1.0, dp=8.0, cp=1.0, ep=1.0, v=1.0, sp=False)

    def shard(fp8_params: float):
        tr_w = attrs.evolve(tr, weight_bytes=2.0, fp8_params=fp8_params)
        return shard_inputs(ms, tr_w, sh, inp.topology, deg, emb_here=True, head=True)

    plain, fp8p = shard(0.0), shard(1.0)
    p = float(plain.params_per_gpu.item())
    emb = 2 * 128256 * 4096  # untied embedding and output head, kept in bf16
    assert float(plain.param_gather_bytes.item()) == 2.0
    assert float(fp8p.param_gather_bytes.item()) * p == pytest.approx((p - emb) * 1.0 + emb * 2.0, rel=1e-9)
    # the gradients and the fp32 master copy are untouched
    assert float(fp8p.grad_bytes.item()) == 2.0 and float(fp8p.optimizer_bytes_per_param.item()) == 12.0
    # FSDP's parameter all-gathers carry those bytes: (p - emb + 2 emb) / 2p of the bf16 volume
    from shardmeter.strategies.zero import ZeroSharding

    fsdp = ZeroSharding(
        name="fsdp", shard_optimizer=True, shard_gradients=True, shard_parameters=True, gather_per_layer=True
    )

    def gathered(si):
        return sum(float(e.bytes.item()) for e in fsdp.traffic(si, None) if e.collective == "all_gather")

    assert gathered(fp8p) / gathered(plain) == pytest.approx((p + emb) / (2 * p), rel=1e-9)


def test_defaults_and_no_fp8_leave_recipes_inert():
    base = shardmeter.estimate(_llama8b())
    assert (
        base.step_time_s == shardmeter.estimate(_llama8b(compile=True, fp8_recipe="tensorwise")).step_time_s
    )
    for r in ("rowwise", "delayed", "blockwise", "mxfp8"):
        assert shardmeter.estimate(_llama8b(fp8_recipe=r)).step_time_s == base.step_time_s
    assert shardmeter.estimate(_llama8b(fp8_params=True)).step_time_s == base.step_time_s
