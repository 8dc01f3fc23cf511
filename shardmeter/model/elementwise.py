"""Memory-bound elementwise kernels of one transformer layer: eager PyTorch against fused kernels.

Every kernel is listed as the bytes it reads and writes per element of the tensor it walks, in
the order the framework launches it, forward and backward (autograd's backward of each op). A
kernel takes ``max(bytes / (hbm_bytes_s x hbm_efficiency), ELEMENTWISE_KERNEL_S)``: the
roofline torchao uses for its own cast kernels (``torchao/testing/training/roofline_utils.py``
at pytorch/ao@36027d8, ``get_tensor_memory_traffic_ovhd_s``). Per-row scalars (a norm's mean and
rsqrt, kept per token) and the weight vectors are counted as zero bytes.

Two block families, as the model's ``swiglu`` flag tells them apart: the Llama block (RMSNorm,
rotary embeddings on q and k, SwiGLU) and the GPT block (LayerNorm, learned or ALiBi positions,
GELU). ``compile = false`` is eager PyTorch as the Llama reference and torchtitan write it:

* RMSNorm (meta-llama/llama ``model.py``, ``RMSNorm``): ``x.float()``, ``pow(2)``, ``mean``,
  ``+ eps``, ``rsqrt``, ``x * rsqrt``, ``type_as(x)``, ``* weight``: eight kernels, five of
  them over fp32 copies. A LayerNorm is already one ATen kernel in eager (``native_layer_norm``,
  and ``native_layer_norm_backward``'s dx and dgamma/dbeta kernels).
* Rotary embeddings (pytorch/torchtitan@b5bcd76 ``torchtitan/models/common/rope.py``,
  ``apply_rotary_emb``): per q and k ``float()``, the complex multiply by the cached
  frequencies (``view_as_complex``/``view_as_real`` are views), ``type_as``.
* SwiGLU (torchtitan ``models/common/feed_forward.py``: ``w2(F.silu(w1(x)) * w3(x))``): silu,
  then the multiply; GELU is one ATen kernel.
* Residual adds, each its own kernel; dropout (where the model has it) its own kernel.

``compile = true`` (torch.compile/Inductor, Transformer Engine, Apex): one kernel per norm,
rotary embedding and activation-multiply that reads its inputs once and writes its output once;
dropout's mask is written by the residual add it is fused into (Megatron's bias-dropout-add).
The residual adds and autograd's accumulation of the two gradients of a residual stream are the
same kernels in both (their traffic is already minimal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from shardmeter.model.branches import where_needed
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "ELEMENTWISE_KERNEL_S",
    "EAGER",
    "FUSED",
    "kernel_time",
    "layer_elementwise",
    "bytes_per_element",
]

#: Fixed GPU time of one small elementwise kernel: torchao measured a Triton kernel reading and
#: writing one element on an H100 at 2 us (``KERNEL_LAUNCH_OVERHEAD_SEC``,
#: ``torchao/testing/training/roofline_utils.py`` at pytorch/ao@36027d8).
ELEMENTWISE_KERNEL_S = 2e-6

# Bytes per element: activations in bf16 (2), the eager upcasts in fp32 (4).
_A, _F = 2.0, 4.0

#: Eager PyTorch, per block: ``(forward kernels, backward kernels)``, each ``(read, write)``.
EAGER = {
    "rmsnorm": (
        # float(), pow(2), mean(-1), + eps, rsqrt, x * rsqrt, type_as, * weight
        ((_A, _F), (_F, _F), (_F, 0.0), (0.0, 0.0), (0.0, 0.0), (_F, _F), (_F, _A), (_A, _A)),
        # * weight: dx = g w, dw = sum(g x_hat) (mul, reduction); type_as: g.float();
        # x * r: g r, sum(g x) (mul, reduction); rsqrt, mean (expand and divide) backward;
        # pow: 2 x, then g (2 x); the two fp32 gradients of x summed; float(): g.to(bf16)
        (
            (_A, _A),
            (2 * _A, _A),
            (_A, 0.0),
            (_A, _F),
            (_F, _F),
            (2 * _F, _F),
            (_F, 0.0),
            (0.0, 0.0),
            (0.0, _F),
            (_F, _F),
            (2 * _F, _F),
            (2 * _F, _F),
            (_F, _A),
        ),
    ),
    "layernorm": (((_A, _A),), ((2 * _A, _A), (2 * _A, 0.0))),
    # per q or k element: float(), complex multiply, type_as; backward the same three
    "rope": (((_A, _F), (_F, _F), (_F, _A)), ((_A, _F), (_F, _F), (_F, _A))),
    # per ffn element: silu, multiply; backward: g up, g silu(gate), silu_backward
    "swiglu": (((_A, _A), (2 * _A, _A)), ((2 * _A, _A), (2 * _A, _A), (2 * _A, _A))),
    "gelu": (((_A, _A),), ((2 * _A, _A),)),
    # per hidden element: x + branch; backward: the residual stream's two gradients summed
    "residual": (((2 * _A, _A),), ((2 * _A, _A),)),
    # per hidden element: dropout writes its output and a one-byte mask; backward g mask
    "dropout": (((_A, _A + 1.0),), ((_A + 1.0, _A),)),
}

#: Fused kernels, the same blocks (``dropout`` is what it adds to the residual add).
FUSED = {
    "rmsnorm": (((_A, _A),), ((2 * _A, _A), (0.0, 0.0))),  # dx pass, dgamma finalise
    "layernorm": (((_A, _A),), ((2 * _A, _A), (2 * _A, 0.0))),  # torch's own kernels
    "rope": (((_A, _A),), ((_A, _A),)),
    "swiglu": (((2 * _A, _A),), ((3 * _A, 2 * _A),)),
    "gelu": (((_A, _A),), ((2 * _A, _A),)),
    "residual": (((2 * _A, _A),), ((2 * _A, _A),)),
    "dropout": (((0.0, 1.0),), ((_A + 1.0, _A),)),  # the mask, in the add; backward g mask
}


def bytes_per_element(kernels: Sequence[tuple[float, float]]) -> float:
    """Bytes read and written per element by a list of ``(read, write)`` kernels."""
    return float(sum(r + w for r, w in kernels))


def kernel_time(kernels: Sequence[tuple[float, float]], elements: Array, hbm: Array) -> Array:
    """Seconds for ``kernels`` (``(read, write)`` bytes per element) over ``elements`` elements,
    each ``max(bytes / hbm, ELEMENTWISE_KERNEL_S)`` (torchao's roofline, module docstring)."""
    t = 0.0
    for r, w in kernels:
        t = t + ops.maximum((r + w) * elements / hbm, ELEMENTWISE_KERNEL_S)
    return t


def layer_elementwise(
    n_h: Array,
    n_q: Array,
    n_kv: Array,
    n_ffn: Array,
    swiglu: Array,
    dropout: Array,
    compiled: Array,
    hbm: Array,
) -> tuple[Array, Array]:
    """Seconds of one layer's elementwise kernels, ``(forward, backward)``: two norms, two
    residual adds (and two dropouts where ``dropout``) over ``n_h`` hidden elements (the
    micro-batch's tokens x hidden, divided by tp under sequence parallelism), rotary embeddings
    over ``n_q`` query and ``n_kv`` key elements, and the activation over ``n_ffn`` elements of
    the MLP's hidden width. ``swiglu`` picks the Llama block (RMSNorm, rotary, SwiGLU) over the
    GPT block (LayerNorm, GELU); ``compiled`` fused kernels over eager PyTorch. A block type,
    kernel set or dropout no plan has is not priced (:func:`~.branches.where_needed`)."""
    sw = ops.as_bool(swiglu)
    do = ops.as_bool(dropout)
    eager = ops.logical_not(ops.as_bool(compiled))
    if (
        type(sw) is bool
        and type(do) is bool
        and type(eager) is bool
        and set(map(type, (n_h, n_q, n_kv, n_ffn, hbm))) <= ops.ONLY_FLOAT
    ):
        table = EAGER if eager else FUSED
        return (
            _phase_floats(0, n_h, n_q, n_kv, n_ffn, sw, do, eager, table, hbm),
            _phase_floats(1, n_h, n_q, n_kv, n_ffn, sw, do, eager, table, hbm),
        )
    f, b = (_phase_elementwise(phase, n_h, n_q, n_kv, n_ffn, sw, do, eager, hbm) for phase in (0, 1))
    return f, b


def _kernels_floats(kernels: Sequence[tuple[float, float]], elements: float, hbm: float) -> float:
    """:func:`kernel_time` of plain floats: ``ops.maximum`` written out (nan where neither side
    is the larger, as numpy)."""
    t = 0.0
    k = ELEMENTWISE_KERNEL_S
    for r, w in kernels:
        x = (r + w) * elements / hbm
        t = t + (x if x >= k else (k if k > x else math.nan))
    return t


def _phase_floats(
    phase: int,
    n_h: float,
    n_q: float,
    n_kv: float,
    n_ffn: float,
    sw: bool,
    do: bool,
    eager: bool,
    table: Mapping[str, Sequence[Sequence[tuple[float, float]]]],
    hbm: float,
) -> float:
    """:func:`_phase_elementwise` of one plan (plain floats and bools; ``table``: ``EAGER`` or
    ``FUSED``, as ``eager`` picks): the same kernels summed in the same order, no closure per
    call. tests/test_scalar_twins.py holds it to the general code to the bit."""
    if do:
        if eager or phase == 1:
            drop = _kernels_floats(table["dropout"][phase], n_h, hbm)
        else:  # the fused dropout's forward: its mask bytes in the residual add
            drop = bytes_per_element(FUSED["dropout"][0]) * n_h / hbm
    else:
        drop = 0.0
    if sw:
        norm = _kernels_floats(table["rmsnorm"][phase], n_h, hbm)
    else:
        norm = _kernels_floats(table["layernorm"][phase], n_h, hbm)
    res = _kernels_floats(table["residual"][phase], n_h, hbm)
    rope = (
        _kernels_floats(table["rope"][phase], n_q, hbm) + _kernels_floats(table["rope"][phase], n_kv, hbm)
        if sw
        else 0.0
    )
    act = _kernels_floats(table["swiglu" if sw else "gelu"][phase], n_ffn, hbm)
    return 2.0 * norm + 2.0 * res + 2.0 * drop + rope + act


def _phase_elementwise(
    phase: int,
    n_h: Array,
    n_q: Array,
    n_kv: Array,
    n_ffn: Array,
    sw: Array,
    do: Array,
    eager: Array,
    hbm: Array,
) -> Array:
    """One phase (0 forward, 1 backward) of :func:`layer_elementwise`."""

    one_plan = type(sw) is bool and type(do) is bool and type(eager) is bool

    def block(name: str, n: Array) -> Array:
        if one_plan:  # a plain condition picks the kernel set (where_needed's choice, no closures)
            return kernel_time((EAGER if eager else FUSED)[name][phase], n, hbm)
        return where_needed(
            eager,
            lambda: kernel_time(EAGER[name][phase], n, hbm),
            lambda: kernel_time(FUSED[name][phase], n, hbm),
        )

    def fused_drop() -> Array:
        # the fused dropout's forward adds only its mask bytes to the residual add (no kernel of
        # its own); its backward is a kernel
        if phase == 0:
            return bytes_per_element(FUSED["dropout"][0]) * n_h / hbm
        return kernel_time(FUSED["dropout"][1], n_h, hbm)

    def drop() -> Array:
        return where_needed(eager, lambda: kernel_time(EAGER["dropout"][phase], n_h, hbm), fused_drop)

    if one_plan:  # the same terms in the same order as below, each side called only where taken
        return (
            2.0 * (block("rmsnorm", n_h) if sw else block("layernorm", n_h))
            + 2.0 * block("residual", n_h)
            + 2.0 * (drop() if do else 0.0)
            + (block("rope", n_q) + block("rope", n_kv) if sw else 0.0)
            + (block("swiglu", n_ffn) if sw else block("gelu", n_ffn))
        )
    return (
        2.0 * where_needed(sw, lambda: block("rmsnorm", n_h), lambda: block("layernorm", n_h))
        + 2.0 * block("residual", n_h)
        + 2.0 * where_needed(do, drop, lambda: 0.0)
        + where_needed(sw, lambda: block("rope", n_q) + block("rope", n_kv), lambda: 0.0)
        + where_needed(sw, lambda: block("swiglu", n_ffn), lambda: block("gelu", n_ffn))
    )
