"""The weight gradients' sum over a step's micro-batches, where the stack adds each micro-batch's
gradient in a pass of its own instead of inside the weight-gradient GEMM.

Megatron-LM before 83b1e42f (2022-02-13; with fp16 before 07916bf2, 2022-09-27) let each
backward write a fresh gradient and added it to the held one: autograd's ``AccumulateGrad``
(``grad += new``) on the 16-bit parameters, or with contiguous buffers the DDP hook
``param.main_grad.add_(param.grad.data)`` (megatron/model/distributed.py, ``param_hook``,
NVIDIA/Megatron-LM@de7dc40f). Its ``--gradient-accumulation-fusion`` later had the
weight-gradient GEMM accumulate into ``main_grad`` (``fused_weight_gradient_mlp_cuda``), which
costs no pass. PyTorch's FSDP2 adds in a pass of its own too
(``FSDPParam.accumulate_unsharded_grad_if_needed``, the ``torchtitan`` profile). The first
micro-batch's gradient is the buffer itself (nothing to add to; FSDP2's upcast of it to the
reduce dtype, 6 bytes an element once a step, is not counted), so a step of ``m`` micro-batches
adds ``m - 1`` times; each add reads the held buffer and the new gradient and writes the buffer
back. The adds are priced once a step (in ``memory_ops``), not inside the pipeline's time per
micro-batch, so the bubble does not grow by them; a 1F1B schedule would add ``(p - 1) / (m - 1)``
of their time more (``/ v`` interleaved): 11-12 % of it on narayanan2021's plain pipelined rows,
100 % on torchtitan's 405B 1F1B row (8 stages, 8 micro-batches), under 0.6 % of the step on
every bundled run.
"""

from __future__ import annotations

from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["accumulation_bytes_per_add", "grad_accumulation_s"]


def accumulation_bytes_per_add(gradients_bytes: Array, weight_bytes: Array, grad_bytes: Array) -> Array:
    """HBM bytes one add moves on one GPU: the held gradient buffer read and written
    (``2 x gradients_bytes``) and the new gradient read, one element per buffer element at the
    parameters' width (``gradients_bytes / grad_bytes x weight_bytes``)."""
    return gradients_bytes * (2.0 + weight_bytes / ops.maximum(grad_bytes, 1.0))


def grad_accumulation_s(
    micro_batches: Array,
    gradients_bytes: Array,
    weight_bytes: Array,
    grad_bytes: Array,
    fused: Array,
    hbm: Array,
) -> Array:
    """Seconds per step of the separate adds (0 where ``fused``): ``micro_batches - 1`` passes of
    :func:`accumulation_bytes_per_add` over the gradient state the stage holds
    (``gradients_bytes``) at the achieved HBM rate ``hbm``. Under FSDP with a pipeline schedule
    that state is the unsharded accumulator and the reduced shard, which the adds do not touch:
    the shard is counted too, ``1 / (2 dp)`` more with a bf16 shard beside an fp32 accumulator."""
    adds = ops.maximum(micro_batches - 1.0, 0.0)
    per_add = accumulation_bytes_per_add(gradients_bytes, weight_bytes, grad_bytes) / hbm
    return ops.where(ops.as_bool(fused), 0.0, adds * per_add)
