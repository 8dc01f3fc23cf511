"""The dense GEMMs of one transformer layer on one GPU, forward, through the roofline
:func:`~.formulas.gemm_time` (wave and tile quantisation).

A layer's GEMMs are its Q/K/V projections (multi-head latent attention's down- and
up-projections where the model has them), the output projection, the MLP's up (gate and up
under SwiGLU) and down projections over each local expert's tokens, a MoE layer's router and its
shared experts. Their backward is twice their forward (the data- and the weight-gradient GEMMs).
The weights are fp8 where the precision says so (one byte per input element), the router 16-bit.
"""

from __future__ import annotations

import attrs

from shardmeter.inputs.bundles import ModelShape
from shardmeter.model.branches import where_needed
from shardmeter.model.formulas import gemm_time
from shardmeter.model.shapes import Shapes
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["GemmRoof", "GemmShapes", "LayerGemms", "gemm_shapes", "layer_gemms", "mlp_seconds"]


@attrs.frozen(kw_only=True)
class GemmRoof:
    """What :func:`~.formulas.gemm_time` prices a GEMM at: ``peak_flops_s`` (the precision's,
    missing rates replaced), ``efficiency`` (of the peak, the large-GEMM ceiling),
    ``hbm_bytes_s`` (achieved), ``sm_count`` and ``bytes_per_element`` of its inputs."""

    peak_flops_s: Array
    efficiency: Array
    hbm_bytes_s: Array
    sm_count: Array
    bytes_per_element: Array = 2.0

    def seconds(self, m: Array, n: Array, k: Array, count: Array = 1.0, batch: Array = 1.0) -> Array:
        """Seconds of ``count`` kernels of ``batch`` GEMMs ``[m,k] @ [k,n]`` (:func:`gemm_time`)."""
        return gemm_time(
            m,
            n,
            k,
            self.peak_flops_s,
            self.efficiency,
            self.hbm_bytes_s,
            self.sm_count,
            self.bytes_per_element,
            count=count,
            batch=batch,
        )


@attrs.frozen(kw_only=True)
class GemmShapes:
    """Widths and token counts of one layer's GEMMs on one GPU beyond :class:`~.shapes.Shapes`:
    ``v_local`` and ``o_local`` (the V projection's and the output projection's input width,
    narrower than K and Q under MLA), ``experts_local`` (experts on this GPU, 1 in a dense
    layer), ``tokens_per_expert`` (rows of each local expert's GEMMs) and ``dense_ffn_local``
    (the MLP slice of a MoE model's dense layer, ``ffn_hidden / tp``)."""

    v_local: Array
    o_local: Array
    experts_local: Array
    tokens_per_expert: Array
    dense_ffn_local: Array


def gemm_shapes(ms: ModelShape, sh: Shapes, tp: Array, ep: Array) -> GemmShapes:
    """Top-k routing spreads the ``T k`` tokens of each EP rank over ``E`` experts; a capacity
    factor ``c`` pads every expert's buffer to ``c`` x the even share (Fedus et al. 2022, Switch
    Transformers, Sec. 2.2; ``c = 1`` is dropless-balanced): ``c T k ep / E`` rows per expert."""
    moe = sh.moe
    cap = ops.where(moe, ops.maximum(ms.capacity_factor, 1e-9), 1.0)
    return GemmShapes(
        v_local=sh.kv_local + (ms.v_dim - ms.kv_dim) / tp,
        o_local=sh.q_local + (ms.o_dim - ms.q_dim) / tp,
        experts_local=ops.where(moe, ms.experts / ep, 1.0),
        tokens_per_expert=ops.where(moe, cap * sh.tokens * ms.experts_per_token * ep / ms.experts, sh.tokens),
        dense_ffn_local=ms.ffn_hidden / tp,
    )


@attrs.frozen(kw_only=True)
class LayerGemms:
    """Forward seconds of one layer's GEMMs on one GPU: ``qkv_s``, ``proj_s``, ``mlp_up_s``,
    ``mlp_down_s``, ``router_s`` and ``shared_s`` (0 without them), ``forward_s`` (their sum),
    and ``dense_delta_s``: a MoE model's dense layer's forward GEMMs less this layer's (0 where
    the stage holds no dense layer)."""

    qkv_s: Array
    proj_s: Array
    mlp_up_s: Array
    mlp_down_s: Array
    router_s: Array
    shared_s: Array
    forward_s: Array
    dense_delta_s: Array


def layer_gemms(ms: ModelShape, sh: Shapes, gs: GemmShapes, roof: GemmRoof, roof16: GemmRoof) -> LayerGemms:
    """One layer's forward GEMMs (module docstring); ``roof16`` prices the 16-bit router.
    Shared experts (DeepSeekMoE, arXiv 2401.06066): one MLP of ``shared`` x the expert width
    over every token. A MoE model's dense layer runs its ``ffn_hidden`` MLP in place of the
    experts. The MLA, shared-expert and dense-layer GEMMs are priced only where a plan has them
    (:func:`~.branches.where_needed`)."""
    T, h = sh.tokens, ms.hidden
    qkv_n = sh.q_local + 2.0 * sh.kv_local + (gs.v_local - sh.kv_local)
    qkv = where_needed(
        ms.kv_rank > 0,
        lambda: _mla_projections(ms, T, sh.q_local, sh.kv_local + gs.v_local, roof),
        lambda: roof.seconds(T, qkv_n, h),
    )
    proj = roof.seconds(T, h, gs.o_local)
    m_exp, e_loc = gs.tokens_per_expert, gs.experts_local
    mlp_up = roof.seconds(m_exp, sh.mlp_up, h, count=e_loc)
    mlp_down = roof.seconds(m_exp, h, sh.ffn_local, count=e_loc)
    moe = sh.moe
    router = where_needed(moe, lambda: roof16.seconds(T, ms.experts, h), lambda: 0.0)
    shared = where_needed(
        moe & (ms.shared_experts > 0),
        lambda: mlp_seconds(roof, T, ms.shared_experts * sh.ffn_local, h, ms.swiglu),
        lambda: 0.0,
    )
    forward = qkv + proj + (mlp_up + mlp_down) + router + shared
    dense_delta = where_needed(
        sh.dense_layers_local > 0,
        lambda: qkv + proj + mlp_seconds(roof, T, gs.dense_ffn_local, h, ms.swiglu) - forward,
        lambda: 0.0,
    )
    return LayerGemms(
        qkv_s=qkv,
        proj_s=proj,
        mlp_up_s=mlp_up,
        mlp_down_s=mlp_down,
        router_s=router,
        shared_s=shared,
        forward_s=forward,
        dense_delta_s=dense_delta,
    )


def mlp_seconds(roof: GemmRoof, tokens: Array, ffn: Array, h: Array, swiglu: Array) -> Array:
    """Forward seconds of one MLP ``ffn`` wide over ``tokens``: the up projection (gate and up
    together, ``2 ffn`` wide, under SwiGLU) and the down projection."""
    return roof.seconds(tokens, ops.where(swiglu, 2.0, 1.0) * ffn, h) + roof.seconds(tokens, h, ffn)


def _mla_projections(ms: ModelShape, T: Array, q_t: Array, kv_t: Array, roof: GemmRoof) -> Array:
    """Q, K and V projections of multi-head latent attention (DeepSeek-V2, arXiv 2405.04434,
    Sec. 2.1): the down-projections to the query and KV latents (``h -> r_q + r_kv``, replicated
    on every tensor-parallel rank as in Megatron-LM's MLA), then the up-projections of this
    rank's heads (``r_q -> q``, ``r_kv -> k + v``); a query of full rank (``r_q = 0``) is one
    ``h -> q`` GEMM. ``kv_t`` is this rank's K and V width together."""
    h = ms.hidden
    q_low = ms.q_rank > 0
    down = roof.seconds(T, ms.q_rank + ms.kv_rank, h)
    q_up = roof.seconds(T, q_t, ops.where(q_low, ms.q_rank, h))
    kv_up = roof.seconds(T, kv_t, ops.maximum(ms.kv_rank, 1.0))
    return down + q_up + kv_up
