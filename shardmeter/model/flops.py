"""The whole model's FLOPs per token, with and without recompute, and its parameters."""

from __future__ import annotations

import attrs

from shardmeter.inputs.bundles import REC_FULL, REC_OP, REC_SELECTIVE, ModelShape, Training
from shardmeter.model.formulas import (
    flops_per_token_of,
    layers_forward_flops,
    model_params,
    op_recompute_flops_per_token,
)
from shardmeter.model.lora import weight_grad_share
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["ModelFlops", "model_flops", "model_flops_values", "attention_shape"]

_f = ops.as_float


@attrs.frozen(kw_only=True)
class ModelFlops:
    """``model_flops_per_token`` (the step's useful FLOPs per token), ``hardware_flops_per_token``
    (with what recompute reruns) and ``params`` (the model's parameters); the model's own
    shape only, the same on every island."""

    model_flops_per_token: Array
    hardware_flops_per_token: Array
    params: Array


def attention_shape(ms: ModelShape) -> dict[str, Array]:
    """The attention projections' shape keywords of the formulas (MLA's low ranks, V width)."""
    return {"v_dim": ms.v_dim, "o_dim": ms.o_dim, "q_rank": ms.q_rank, "kv_rank": ms.kv_rank}


def model_flops(ms: ModelShape, tr: Training, share: Array = 1.0) -> ModelFlops:
    """:func:`model_flops_values` as a :class:`ModelFlops`."""
    mf_tok, hw_tok, params = model_flops_values(ms, tr, share)
    return ModelFlops(model_flops_per_token=mf_tok, hardware_flops_per_token=hw_tok, params=params)


def model_flops_values(ms: ModelShape, tr: Training, share: Array = 1.0) -> tuple[Array, Array, Array]:
    """:class:`ModelFlops`' ``(model_flops_per_token, hardware_flops_per_token, params)``, no
    record built (the evaluator reads each once). Full recompute reruns the forward of its ``share`` of the layers
    (:func:`~.compute.full_recompute_share`), selective the attention core, op the matrix
    multiplies it does not save (:func:`~.formulas.op_recompute_flops_per_token`) and, where
    its save list leaves the attention kernel out (``training.op_saves_attention`` = 0), the
    attention core too."""
    rec, E, ktop = tr.recompute, ms.experts, ms.experts_per_token
    if not (type(rec) is float and type(E) is float and type(ktop) is float):
        rec, E, ktop = _f(rec), _f(E), _f(ktop)
    args = (ms.hidden, ms.q_dim, ms.kv_dim, ms.ffn_hidden, ms.swiglu)
    # the MoE and attention shape keywords (attention_shape's among them), one dict
    shape = {
        "moe_ffn": ms.moe_ffn_hidden,
        "shared_experts": ms.shared_experts,
        "dense_layers": ms.dense_layers,
        "v_dim": ms.v_dim,
        "o_dim": ms.o_dim,
        "q_rank": ms.q_rank,
        "kv_rank": ms.kv_rank,
    }
    # the layers' forward FLOPs once: model_flops_per_token is 3 x (them + the output layer)
    dense_all, att_all = layers_forward_flops(ms.layers, *args, ms.seq_len, ktop, E, **shape)
    mf_tok = flops_per_token_of(dense_all, att_all, ms.hidden, ms.vocab)
    # LoRA: no weight gradients for the frozen matrices and the output layer, 2/3 of their
    # FLOPs; the attention scores in full (Megatron-Bridge flop_utils.py @067f987, :mod:`.lora`)
    mf_tok = mf_tok - (1.0 - weight_grad_share(tr)) * (dense_all + 2.0 * ms.hidden * ms.vocab)
    if type(rec) is float and type(E) is float:
        # one plan: its recompute mode's term only (the others' plain products raise nothing)
        if rec == REC_FULL:
            extra = share * (dense_all + att_all)
        elif rec == REC_SELECTIVE:
            extra = att_all
        elif rec == REC_OP:
            extra = _op_flops(ms, E, ktop) + (0.0 if ops.as_bool(tr.op_saves_attention) else att_all)
        else:
            extra = 0.0
        hw_tok = mf_tok + extra
    else:
        hw_tok = mf_tok + ops.where(
            rec == REC_FULL,
            share * (dense_all + att_all),
            ops.where(
                rec == REC_SELECTIVE,
                att_all,
                ops.where(
                    rec == REC_OP,
                    _op_flops(ms, E, ktop) + ops.where(ops.as_bool(tr.op_saves_attention), 0.0, att_all),
                    0.0,
                ),
            ),
        )
    tied = ms.tied
    params = model_params(
        ms.layers, *args, ms.vocab, tied if type(tied) is bool else ops.as_bool(tied), E, **shape
    )
    return mf_tok, hw_tok, params


def _op_flops(ms: ModelShape, E: Array, ktop: Array) -> Array:
    """The forward FLOPs per token that op recompute runs again over all the layers
    (:func:`~.formulas.op_recompute_flops_per_token` of a MoE layer and of a dense one)."""
    op_moe = op_recompute_flops_per_token(
        ms.hidden,
        ms.q_dim,
        ms.kv_dim,
        ms.moe_ffn_hidden,
        ms.swiglu,
        ktop,
        E,
        shared_experts=ms.shared_experts,
        o_dim=ms.o_dim,
    )
    op_dense = op_recompute_flops_per_token(
        ms.hidden, ms.q_dim, ms.kv_dim, ms.ffn_hidden, ms.swiglu, o_dim=ms.o_dim
    )
    moe = E > 1
    return ops.where(moe, ms.layers * op_moe + ms.dense_layers * (op_dense - op_moe), ms.layers * op_dense)
