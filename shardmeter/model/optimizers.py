"""Optimizer state bytes per parameter (``training.optimizer``), each from its paper or code.

The states are fp32 (the optimizers below create them ``zeros_like`` an fp32 parameter or
explicitly fp32), and with 16-bit weights the stacks keep an fp32 master copy of the weights
beside them (Micikevicius et al. 2018, mixed precision; Megatron's distributed optimizer and
``Float16OptimizerWithFloat16Params``; FSDP2 holds its sharded parameters in fp32): 4 bytes
more per parameter, :data:`MASTER_BYTES`.

* ``adam`` / ``adamw``: ``exp_avg`` and ``exp_avg_sq`` (torch/optim/adam.py, adamw.py;
  Kingma & Ba 2015, Loshchilov & Hutter 2019): 8 bytes.
* ``sgd``: none. ``torch.optim.SGD`` keeps a ``momentum_buffer`` only when ``momentum != 0``
  (its default is 0: ``momentum_buffer_list`` stays None); ``sgd-momentum``: that buffer, 4 bytes.
* ``adafactor``: factored second moments, no first moment (Shazeer & Stern 2018, arXiv
  1804.04235, Sec. 3 and Alg. 4, beta1 = 0): a matrix of ``r x c`` keeps ``r + c`` fp32
  numbers (``torch.optim.Adafactor``: ``state["row_var"] = torch.zeros(grad_shape[:-1],
  dtype=torch.float32)``, ``state["col_var"]`` likewise), so ``4 (1/r + 1/c)`` bytes per
  parameter (:func:`adafactor_bytes`).
* ``adam8bit``: bitsandbytes' blockwise 8-bit Adam (Dettmers et al. 2022, arXiv 2110.02861):
  two uint8 states and one fp32 absmax per block of each (``Optimizer2State.init_state``:
  ``blocksize = 256``, ``state["absmax1"] = torch.zeros((blocks,), dtype=torch.float32)``,
  bitsandbytes-foundation/bitsandbytes@95f9af30; the paper's blocks are 2048, the code's 256
  since 0cafa7f4 names the 256 it used before): ``2 + 2 x 4 / 256`` bytes. Tensors under
  ``min_8bit_size = 4096`` elements (norms, biases) keep fp32 states; their share is not counted.
* ``muon``: a momentum buffer for the hidden weight matrices and AdamW for the rest
  (KellerJordan/Muon@857d1adc, muon.py: ``state["momentum_buffer"] = torch.zeros_like(p)``
  for ``use_muon`` groups; its README: "embeddings, classifier heads, and hidden gains/biases
  should be optimized using standard AdamW"): 4 bytes for the layers' matrices, 8 for the
  embedding and output layer (:func:`optimizer_bytes_per_param`'s ``embedding_share``).
"""

from __future__ import annotations

from shardmeter.inputs.bundles import (
    OPT_ADAFACTOR,
    OPT_ADAM8BIT,
    OPT_MUON,
    OPT_SGD,
    OPT_SGD_MOMENTUM,
)
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "MASTER_BYTES",
    "ADAM_STATE_BYTES",
    "BNB_BLOCKSIZE",
    "adafactor_bytes",
    "adam8bit_bytes",
    "optimizer_bytes_per_param",
]

#: The fp32 master copy of 16-bit weights, bytes per parameter.
MASTER_BYTES = 4.0
#: Adam's two fp32 moments, bytes per parameter.
ADAM_STATE_BYTES = 8.0
#: bitsandbytes' block of the 8-bit states (``blocksize = 256`` in ``Optimizer2State.init_state``).
BNB_BLOCKSIZE = 256.0


def adafactor_bytes(rows: Array, cols: Array) -> Array:
    """Adafactor's factored second moment of an ``rows x cols`` matrix, bytes per parameter:
    ``4 (rows + cols) / (rows cols)``."""
    return 4.0 * (1.0 / rows + 1.0 / cols)


def adam8bit_bytes() -> float:
    """bitsandbytes' 8-bit Adam, bytes per parameter: two uint8 states and their fp32 absmax per
    :data:`BNB_BLOCKSIZE` elements."""
    return 2.0 + 2.0 * 4.0 / BNB_BLOCKSIZE


def optimizer_bytes_per_param(
    optimizer: Array, weight_bytes: Array, hidden: Array, other_dim: Array, embedding_share: Array
) -> Array:
    """Optimizer state per parameter, bytes (module docstring), plus the fp32 master copy where
    the weights are 16-bit (``weight_bytes`` <= 2). Adafactor's matrices are counted as
    ``hidden x other_dim`` (every transformer matrix has the hidden size as one side; the other
    is the layer's mean); Muon keeps AdamW's 8 bytes for ``embedding_share`` of the
    parameters (the word embedding and output layer) and its 4-byte momentum for the rest."""
    code = ops.as_float(optimizer)
    master = ops.where(weight_bytes > 2, 0.0, MASTER_BYTES)
    if set(map(type, (code, weight_bytes, hidden, other_dim, embedding_share))) <= ops.ONLY_FLOAT:
        # one plan: its own optimizer's state only, the value ops.where picks
        return _one_state(code, hidden, other_dim, embedding_share) + master
    emb = ops.clip(embedding_share, 0.0, 1.0)
    state = ops.where(
        code == OPT_SGD,
        0.0,
        ops.where(
            code == OPT_SGD_MOMENTUM,
            4.0,
            ops.where(
                code == OPT_ADAFACTOR,
                adafactor_bytes(hidden, ops.maximum(other_dim, 1.0)),
                ops.where(
                    code == OPT_ADAM8BIT,
                    adam8bit_bytes(),
                    ops.where(
                        code == OPT_MUON,
                        ADAM_STATE_BYTES * emb + 4.0 * (1.0 - emb),
                        ADAM_STATE_BYTES,
                    ),
                ),
            ),
        ),
    )
    return state + master


def _one_state(code: float, hidden: Array, other_dim: Array, embedding_share: Array) -> Array:
    """The state bytes per parameter of one optimizer ``code`` (:func:`optimizer_bytes_per_param`'s
    branch for it, the others not computed)."""
    if code == OPT_SGD:
        return 0.0
    if code == OPT_SGD_MOMENTUM:
        return 4.0
    if code == OPT_ADAFACTOR:
        return adafactor_bytes(hidden, ops.maximum(other_dim, 1.0))
    if code == OPT_ADAM8BIT:
        return adam8bit_bytes()
    if code == OPT_MUON:
        emb = ops.clip(embedding_share, 0.0, 1.0)
        return ADAM_STATE_BYTES * emb + 4.0 * (1.0 - emb)
    return ADAM_STATE_BYTES
