"""LoRA fine-tuning (``training.peft = "lora"``): frozen weights, trained low-rank adapters.

Hu et al. 2021 (LoRA, arXiv:2106.09685) add ``W x + B A x`` with ``A: r x in`` and
``B: out x r`` beside each frozen linear ``W``. Megatron-Bridge's ``LoRA`` (megatron/bridge/
peft/lora.py @067f987) wraps Megatron-Core's ``linear_qkv``, ``linear_proj``, ``linear_fc1``
and ``linear_fc2`` by default (``dim = 32``), and ``freeze_model`` sets ``requires_grad =
False`` on every base parameter, the embeddings and the output layer included. What follows,
each from the stack's code:

- no gradient buffer and no optimizer state for the frozen weights: Megatron-Core's DDP
  allocates ``main_grad`` buckets only for parameters that require gradients, and its
  distributed optimizer keeps fp32 master copies and moments only for those
  (:func:`trainable_fraction`);
- no weight-gradient GEMM for a frozen linear: Transformer Engine's ``_Linear`` records
  ``ctx.requires_wgrad = weight.requires_grad`` and skips the wgrad GEMM without it
  (transformer_engine/pytorch/module/linear.py), so the backward of the frozen GEMMs is one
  forward's worth, not two (:func:`weight_grad_share`); Megatron-Bridge's own FLOP count for
  LoRA says the same, ``model_flops_frozen * (2.0 / 3.0)`` for the weight matrices and the
  attention scores in full (megatron/bridge/training/utils/flop_utils.py @067f987).

Activations are priced as in full training: each adapter's ``A`` GEMM saves the same input
its frozen linear would have saved for a weight gradient. The adapters' own GEMMs (rank ``r``,
``2 r (in + out)`` FLOPs a token each way, under 0.5 % of the layer's at ``r = 32`` on models
of 7B and more) are not timed.
"""

from __future__ import annotations

from shardmeter.inputs.bundles import ModelShape, Training
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["adapter_params_per_layer", "is_lora", "trainable_fraction", "weight_grad_share"]

_f = ops.as_float


def is_lora(tr: Training) -> Array:
    """Rows that fine-tune with LoRA (bool)."""
    return _f(tr.lora_rank) > 0


def adapter_params_per_layer(ms: ModelShape, tr: Training, ffn: Array, mlps: Array) -> Array:
    """The adapters' parameters of one layer, all tensor-parallel ranks together: ``r (in + out)``
    for each target linear (``linear_qkv``: ``h -> q + 2 kv``; ``linear_proj``: ``q -> h``;
    ``linear_fc1``: ``h -> 2 ffn`` with SwiGLU's fused gate, else ``ffn``; ``linear_fc2``:
    ``ffn -> h``), the MLP's adapters once per MLP the layer holds (``mlps``: its local experts
    and shared experts in a MoE layer, Megatron-Bridge wrapping each expert's linears; 1 dense).
    0 without LoRA."""
    r, h = _f(tr.lora_rank), ms.hidden
    fc1_out = ops.where(ms.swiglu, 2.0, 1.0) * ffn
    attn = _f(tr.lora_qkv) * (h + ms.q_dim + 2.0 * ms.kv_dim) + _f(tr.lora_proj) * (ms.o_dim + h)
    mlp = _f(tr.lora_fc1) * (h + fc1_out) + _f(tr.lora_fc2) * (ffn + h)
    return r * (attn + mlps * mlp)


def trainable_fraction(params: Array, adapters: Array) -> Array:
    """The share of a GPU's ``params`` (adapters included) that is trained: ``adapters / params``
    with LoRA (every base weight frozen), 1 in full training (``adapters`` = 0)."""
    return ops.where(adapters > 0, adapters / ops.maximum(params, 1.0), 1.0)


def weight_grad_share(tr: Training) -> Array:
    """Weight-gradient GEMMs of the model's weight matrices, in forwards' worth: 1 in full
    training (the backward is a data- and a weight-gradient GEMM), 0 with LoRA (frozen: the
    data gradient only). One plan's plain rank: the side ``ops.where`` picks."""
    r = tr.lora_rank
    if type(r) is float:
        return 0.0 if r > 0 else 1.0
    return ops.where(is_lora(tr), 0.0, 1.0)
