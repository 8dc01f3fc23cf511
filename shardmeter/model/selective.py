"""Megatron-Core's selective recompute by module (``training.recompute_modules``).

``TransformerConfig.recompute_modules`` (megatron/core/transformer/transformer_config.py
@d98e8a64; default ``["core_attn"]``) names the submodules ``recompute_granularity =
"selective"`` recomputes: ``core_attn`` the attention core; ``mlp`` a dense MLP (not a MoE
layer's: ``transformer_layer.py``, ``if "mlp" in recompute_modules: if not self.is_moe_layer``);
``moe`` a whole MoE layer and ``shared_experts`` its shared experts (normal checkpointing: the
module's input kept, everything inside rerun); ``moe_act`` the experts' activation function,
``layernorm`` the layer norms' outputs and ``mla_up_proj`` MLA's up projections and RoPE
(output-discarding checkpointing: the output is freed once consumed and recomputed before the
backward needs it).

Bytes are :func:`~.activations.kept_activation_bytes`' terms (Korthikanti et al. 2022, Table 2,
generalised): an MLP keeps ``6 ffn`` bytes a token under SwiGLU (the fused gate and up output
``4 ffn`` and the activation's output ``2 ffn``; ``4 ffn`` with GELU), the MLP's input ``2 h``
(replicated over TP without sequence parallelism), the attention kernel's Q, K and V ``2 q +
2 kv + 2 kv``. ``layernorm`` frees only the pre-MLP norm of a MoE layer: with Transformer
Engine's layer specs the input norm and a dense layer's pre-MLP norm are fused into the next
linear (``TELayerNormColumnParallelLinear``; Megatron then has ``IdentityOp`` norms, which the
flag skips). ``mla_up_proj`` keeps the query and KV latents (``q_rank + kv_rank`` a token, not
split over TP) in place of the up-projected Q, K and V.

Time: ``core_attn`` reruns the attention core, ``mlp`` / ``moe`` / ``shared_experts`` their
forward GEMMs; the elementwise reruns (``moe_act``, ``layernorm``, RoPE), MLA's up-projection
GEMMs and a recomputed MoE layer's second dispatch are not timed.
"""

from __future__ import annotations

from shardmeter.inputs.bundles import REC_SELECTIVE, ModelShape, Training
from shardmeter.model.attention import AttentionTime
from shardmeter.model.gemms import LayerGemms
from shardmeter.model.shapes import Shapes
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["selective_rerun_s", "selective_saving_bytes"]

_f = ops.as_float


def selective_saving_bytes(
    ms: ModelShape, tr: Training, sh: Shapes, tp: Array, sp: Array, ffn: Array, moe_layer: Array
) -> Array:
    """Bytes one layer (one micro-batch) keeps less than :func:`~.activations.kept_activation_bytes`
    says under ``recompute = "selective"`` with the modules of ``training.recompute_modules``
    (0 in other modes and with ``["core_attn"]``); ``ffn``: the layer's MLP width (an expert's
    in a MoE layer), ``moe_layer``: the layer routes its tokens (bool)."""
    sel = _f(tr.recompute) == REC_SELECTIVE
    sb = sh.seq_local * _f(tr.micro_batch)
    mats = ops.where(ms.swiglu, 6.0, 4.0)
    per_mlp = sb * ffn / tp  # bytes per byte-per-ffn-element of one MLP on this GPU
    k, shared = _f(ms.experts_per_token), _f(ms.shared_experts)
    rep = ops.where(sp, 1.0 / tp, 1.0)
    moe = ops.as_bool(moe_layer)
    whole_moe = _f(tr.rc_moe) > 0
    routed = ops.where(whole_moe, mats * k, _f(tr.rc_moe_act) * 2.0 * k)
    shared_b = ops.where(whole_moe | (_f(tr.rc_shared_experts) > 0), mats * shared, 0.0)
    moe_saving = per_mlp * (routed + shared_b) + _f(tr.rc_layernorm) * 2.0 * sb * ms.hidden * rep
    dense_saving = _f(tr.rc_mlp) * per_mlp * mats
    mla = (ms.kv_rank > 0) | (ms.q_rank > 0)
    up = ops.where(
        mla & (_f(tr.rc_mla_up_proj) > 0),
        sb * (2.0 * ms.q_dim + 4.0 * ms.kv_dim) / tp - 2.0 * sb * (ms.q_rank + ms.kv_rank),
        0.0,
    )
    return ops.where(sel, ops.where(moe, moe_saving, dense_saving) + ops.maximum(up, 0.0), 0.0)


def selective_rerun_s(ms: ModelShape, tr: Training, sh: Shapes, g: LayerGemms, att: AttentionTime) -> Array:
    """Seconds ``recompute = "selective"`` reruns of one micro-batch on the stage: the attention
    core of every layer with ``core_attn``, a dense layer's MLP GEMMs with ``mlp``, a MoE
    layer's router, experts and shared experts with ``moe`` (its shared experts alone with
    ``shared_experts``)."""
    Ls, Ld = sh.layers_per_stage, sh.dense_layers_local
    moe = ops.as_bool(sh.moe)
    attn = _f(tr.rc_core_attn) * Ls * att.forward_s
    dense_mlp = ops.where(
        moe, Ld * (g.forward_s + g.dense_delta_s - g.qkv_s - g.proj_s), Ls * (g.mlp_up_s + g.mlp_down_s)
    )
    moe_layers = ops.where(moe, Ls - Ld, 0.0)
    moe_s = ops.where(
        _f(tr.rc_moe) > 0,
        g.mlp_up_s + g.mlp_down_s + g.router_s + g.shared_s,
        _f(tr.rc_shared_experts) * g.shared_s,
    )
    return attn + _f(tr.rc_mlp) * dense_mlp + moe_layers * moe_s
