"""What activation recompute runs again in the backward pass, per mode (:class:`Recompute`):
selective reruns the attention core, full the layers' whole forward (on the share of the layers
it checkpoints), op recompute every other matrix multiply; full and op recompute rerun the
elementwise kernels of what they recompute."""

from __future__ import annotations

import attrs

from shardmeter.inputs.bundles import REC_FULL, REC_OP, REC_SELECTIVE, ModelShape, Training
from shardmeter.model.attention import AttentionTime
from shardmeter.model.branches import where_needed
from shardmeter.model.gemms import GemmRoof, GemmShapes, LayerGemms
from shardmeter.model.selective import selective_rerun_s
from shardmeter.model.shapes import Shapes
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "RecomputeTime",
    "full_recompute_share",
    "op_recompute_layer_s",
    "op_recompute_s",
    "recompute_time",
]


def full_recompute_share(tr: Training, sh: Shapes) -> Array:
    """The share of the stage's layers that ``recompute = "full"`` recomputes (1 in every other
    mode): Megatron-LM's block method (``--recompute-method block --recompute-num-layers k``,
    ``checkpointed_forward`` in megatron/core/recompute.py @ d98e8a64, formerly
    ``TransformerBlock._checkpointed_forward``) checkpoints layers ``0 .. k-1`` of each model
    chunk (``num_layers_per_pipeline_rank``: one virtual stage's layers) and runs the rest
    without checkpointing. ``recompute_layers = 0`` (the default) or ``k`` at least the chunk's
    layers recomputes all of them: ``min(k, L_chunk) / L_chunk``."""
    chunk = sh.layers_per_stage / sh.virtual_stages
    k = tr.recompute_layers
    full = tr.recompute == REC_FULL
    if type(full) is bool and type(k) is float and type(chunk) is float:  # one plan: plain ifs
        if not full:
            return 1.0
        return ops.minimum(k, chunk) / chunk if k > 0 else 1.0
    share = ops.where(k > 0, ops.minimum(k, chunk) / chunk, 1.0)
    return ops.where(full, share, 1.0)


@attrs.frozen(kw_only=True)
class RecomputeTime:
    """``stage_s``: seconds recompute adds to one micro-batch on the stage; ``rerun_share``: the
    share of the stage's forward elementwise kernels (and fp8 casts) it runs again (the
    recomputed share under full recompute, all under op recompute, none otherwise)."""

    stage_s: Array
    rerun_share: Array


def _rerun_mlp_matrix_s(
    roof: GemmRoof, tokens: Array, ffn: Array, h: Array, swiglu: Array, count: Array = 1.0
) -> Array:
    """Forward seconds of the MLP matrix op recompute reruns (the second of the MLP's matrix
    multiplies in forward order): w3 (``h -> ffn``) under SwiGLU, c_proj (``ffn -> h``)
    without it."""
    return where_needed(
        ops.as_bool(swiglu),
        lambda: roof.seconds(tokens, ffn, h, count=count),
        lambda: roof.seconds(tokens, h, ffn, count=count),
    )


def op_recompute_layer_s(
    ms: ModelShape,
    tr: Training,
    sh: Shapes,
    gs: GemmShapes,
    roof: GemmRoof,
    g: LayerGemms,
    att: AttentionTime,
) -> tuple[Array, Array]:
    """``(one layer's seconds, a MoE model's dense layer's less that)`` of per-operator
    selective checkpointing (torchtitan ``SelectiveAC``, torchtitan/distributed/
    activation_checkpoint.py @ b5bcd76c): the matrix multiplies are counted in forward order
    (wq, wk, wv, wo, w1, w3, w2; c_fc, c_proj without SwiGLU) and every second one is
    recomputed: wk, wo and w3 (c_proj), plus the MoE router, which torchtitan forces to
    recompute (``force_recompute_mm_shapes_by_fqns``), and the shared experts' w3. Attention is
    saved, unless the save list leaves its kernel out (``tr.op_saves_attention`` = 0:
    torchtitan's cuDNN SDPA on compute capability 10.0, absent from ``_save_list`` at accc7027
    and added in b39377f9, 2025-12-01): then it runs once more per layer, as selective
    recompute runs it."""
    T, h, sw = sh.tokens, ms.hidden, ms.swiglu
    wk = roof.seconds(T, sh.kv_local, h)
    mlp = _rerun_mlp_matrix_s(roof, gs.tokens_per_expert, sh.ffn_local, h, sw, count=gs.experts_local)
    shared = where_needed(
        sh.moe & (ms.shared_experts > 0),
        lambda: _rerun_mlp_matrix_s(roof, T, ms.shared_experts * sh.ffn_local, h, sw),
        lambda: 0.0,
    )
    att_s = ops.where(ops.as_bool(tr.op_saves_attention), 0.0, att.forward_s)
    layer = wk + g.proj_s + mlp + g.router_s + shared + att_s
    dense_delta = where_needed(
        sh.dense_layers_local > 0,
        lambda: wk + g.proj_s + att_s + _rerun_mlp_matrix_s(roof, T, gs.dense_ffn_local, h, sw) - layer,
        lambda: 0.0,
    )
    return layer, dense_delta


def op_recompute_s(
    ms: ModelShape,
    tr: Training,
    sh: Shapes,
    gs: GemmShapes,
    roof: GemmRoof,
    g: LayerGemms,
    att: AttentionTime,
) -> Array:
    """Seconds op recompute adds to one micro-batch on the stage (:func:`op_recompute_layer_s`
    over its layers, its dense layers at their own count)."""
    layer, dense_delta = op_recompute_layer_s(ms, tr, sh, gs, roof, g, att)
    return sh.layers_per_stage * layer + sh.dense_layers_local * dense_delta


def recompute_time(
    ms: ModelShape,
    tr: Training,
    sh: Shapes,
    gs: GemmShapes,
    roof: GemmRoof,
    g: LayerGemms,
    att: AttentionTime,
    forward_s: Array,
) -> RecomputeTime:
    """Recompute per mode (module docstring): full reruns :func:`full_recompute_share` of the
    stage's ``forward_s``; selective the attention core of every layer (Korthikanti et al.
    2022, arXiv 2205.05198, selective activation recomputation) and what else
    ``training.recompute_modules`` names (:func:`~.selective.selective_rerun_s`); op :func:`op_recompute_s`,
    priced only where a plan recomputes per operator."""
    rec = tr.recompute
    share = full_recompute_share(tr, sh)
    op = rec == REC_OP
    op_s = where_needed(op, lambda: op_recompute_s(ms, tr, sh, gs, roof, g, att), lambda: 0.0)
    full = rec == REC_FULL
    stage = ops.where(
        full,
        share * forward_s,
        ops.where(rec == REC_SELECTIVE, selective_rerun_s(ms, tr, sh, g, att), ops.where(op, op_s, 0.0)),
    )
    return RecomputeTime(stage_s=stage, rerun_share=ops.where(full, share, ops.where(op, 1.0, 0.0)))
