"""The shapes one GPU computes on: a micro-batch's local sequence and tokens, the largest pipeline
stage's layers, and the tensor-parallel slices of the attention and MLP widths."""

from __future__ import annotations

import math

import attrs

from shardmeter.inputs.bundles import ModelShape, Training
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["Shapes", "local_shapes"]


@attrs.frozen(kw_only=True)
class Shapes:
    """Per-GPU shapes: ``seq_local`` (s / cp), ``tokens`` of one micro-batch, ``layers_per_stage``
    (the largest stage), tensor-parallel slices ``q_local``, ``kv_local`` (KV heads replicate
    past ``kv_heads``), ``ffn_local`` (an expert's slice in a MoE layer), ``mlp_up`` (2 x
    ffn_local for SwiGLU), ``moe`` (bool), ``dense_layers_local``: the stage's dense layers of a
    MoE model (its leading ``dense_layers`` sit on the first stages, so the largest stage holds
    only those that do not fit before it)."""

    seq_local: Array
    tokens: Array
    layers_per_stage: Array
    q_local: Array
    kv_local: Array
    ffn_local: Array
    mlp_up: Array
    moe: Array
    virtual_stages: Array
    dense_layers_local: Array = 0.0


def local_shapes(
    ms: ModelShape, tr: Training, tp: Array, pp: Array, cp: Array, v: Array, layers: Array | None = None
) -> Shapes:
    """The shapes one GPU computes on (``v`` already 1 where ``pp = 1``), for a stage of
    ``layers`` layers (default: ``ceil(L / (p v)) v``, at least the largest stage's)."""
    sizes = (
        ms.seq_len,
        ms.experts,
        ms.moe_ffn_hidden,
        ms.ffn_hidden,
        ms.layers,
        ms.q_dim,
        ms.kv_dim,
        ms.kv_heads,
    )
    if (
        type(ms.swiglu) is bool
        and set(map(type, (*sizes, ms.dense_layers, tr.micro_batch, tp, pp, cp, v))) <= ops.ONLY_FLOAT
        and (layers is None or type(layers) is float)
    ):
        return _local_shapes_floats(ms, tr, tp, pp, cp, v, layers)
    return _local_shapes_ops(ms, tr, tp, pp, cp, v, layers)


def _local_shapes_ops(
    ms: ModelShape, tr: Training, tp: Array, pp: Array, cp: Array, v: Array, layers: Array | None = None
) -> Shapes:
    """:func:`local_shapes` of a batch, or of any numbers."""
    s_loc = ms.seq_len / cp
    moe = ms.experts > 1
    ffn_t = ops.where(moe, ms.moe_ffn_hidden, ms.ffn_hidden) / tp
    ls = ops.ceil(ms.layers / (pp * v)) * v if layers is None else layers  # unequal splits allowed
    return Shapes(
        seq_local=s_loc,
        tokens=tr.micro_batch * s_loc,
        layers_per_stage=ls,
        q_local=ms.q_dim / tp,
        kv_local=ops.maximum(ms.kv_dim / tp, ms.kv_dim / ops.maximum(ms.kv_heads, 1.0)),
        ffn_local=ffn_t,
        mlp_up=ops.where(ms.swiglu, 2.0, 1.0) * ffn_t,
        moe=moe,
        virtual_stages=v,
        dense_layers_local=ops.where(
            moe, ops.minimum(ops.maximum(ms.dense_layers - (ms.layers - ls), 0.0), ls), 0.0
        ),
    )


def _local_shapes_floats(
    ms: ModelShape, tr: Training, tp: float, pp: float, cp: float, v: float, layers: float | None
) -> Shapes:
    """:func:`local_shapes` of one plan (plain floats): the same operations in the same order,
    each ``ops.where`` the value it picks (both sides computed where the general code's could
    raise), ``ops.ceil`` and the maxima and minimum written out (nan as numpy's).
    tests/test_scalar_twins_busiest.py holds it to the arrays to the bit."""
    nan = math.nan
    s_loc = ms.seq_len / cp
    moe = ms.experts > 1
    ffn_t = (ms.moe_ffn_hidden if moe else ms.ffn_hidden) / tp
    if layers is None:
        c = ms.layers / (pp * v)
        ls = (float(math.ceil(c)) if c - c == 0.0 else c) * v
    else:
        ls = layers
    kv_t = ms.kv_dim / tp
    heads = ms.kv_heads
    kv_h = ms.kv_dim / (heads if heads >= 1.0 else (1.0 if heads < 1.0 else nan))
    if moe:
        x = ms.dense_layers - (ms.layers - ls)
        x = x if x >= 0.0 else (0.0 if x < 0.0 else nan)
        dense = x if x <= ls else (ls if ls < x else nan)
    else:
        dense = 0.0
    return Shapes(
        seq_local=s_loc,
        tokens=tr.micro_batch * s_loc,
        layers_per_stage=ls,
        q_local=ms.q_dim / tp,
        kv_local=kv_t if kv_t >= kv_h else (kv_h if kv_h > kv_t else nan),
        ffn_local=ffn_t,
        mlp_up=(2.0 if ms.swiglu else 1.0) * ffn_t,
        moe=moe,
        virtual_stages=v,
        dense_layers_local=dense,
    )
