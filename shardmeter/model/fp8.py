"""FP8 training's extra passes over the data, per recipe, and what fp8 changes in memory.

A linear ``input (M x K) @ weight (K x N)`` runs three GEMMs (output, dgrad, wgrad), whose
three 16-bit operands -- ``input``, ``weight`` and ``grad_output`` -- are quantised first. The
kernels each recipe runs per operand, with the bytes they read and write per element, are
torchao's own roofline (``torchao/testing/training/roofline_utils.py`` at
pytorch/ao@36027d8, ``get_tensor_memory_traffic_ovhd_s``); each kernel takes
``max(bytes / HBM rate, ELEMENTWISE_KERNEL_S)`` as there:

* ``tensorwise`` (current scaling; torchao ``tensorwise``, TE ``Float8CurrentScaling``): an amax
  pass (read 2), the amax's second stage (no traffic), one cast writing the fp8 copy in both
  layouts (read 2, write 1 + 1; the transposed copy reuses the scale); a weight is cast once per
  layout (read 2, write 1, twice). With torch.compile the amax read of an activation or gradient
  is fused into the op that produced it (that module's docstring, assumption 2).
* ``rowwise`` (torchao ``rowwise``): one scale per row, so each GEMM orientation quantises along
  its own axis: an activation is cast along dim 0 while a bf16 transposed copy is written
  (read 2, write 1 + 2), then that copy cast along dim 1 (read 2, write 1); a weight is cast
  (2 + 1), transposed in bf16 (2 + 2) and cast again (2 + 1). The dgrad and wgrad GEMMs run
  without fast accumulation, where torchao calls the tensorwise cuBLAS GEMM and rescales the
  output afterwards, one more pass over each output (read 2, write 2;
  ``torchao/float8/float8_ops.py``, ``addmm_float8_unwrapped``, and ``config.py``: only
  ``gemm_config_output`` uses fast accumulation; pytorch/ao #2184).
* ``delayed`` (Transformer Engine ``DelayedScaling``): the scale comes from the amax history, so
  one fused cast-transpose per operand (read 2, write 1 + 1) that also records the amax.
* ``blockwise`` (DeepSeek-V3, arXiv 2412.19437, Sec. 3.3.2: 1 x 128 activation tiles, 128 x 128
  weight tiles): an activation or gradient is cast along each axis (read 2, write 1, twice); a
  weight's square tiles serve both layouts, so one cast and an fp8 transpose (read 1, write 1) --
  the pattern of torchao's ``mxfp8_32x32_weight`` roofline. Scales (4 bytes per 128) are added.
* ``mxfp8`` (torchao ``mxfp8_cublas``, 1 x 32 blocks): every operand cast along each axis (read
  2, write 1 + 1/32 of e8m0 scales, twice); with compile the first read of an activation or
  gradient is fused into the op before it.

The linears are torchtitan's, as torchao converts them (each ``nn.Linear`` its own
``Float8Linear``, quantising its own input): ``wq``, ``wk``, ``wv``, ``wo``, ``w1``, ``w3``,
``w2`` (GELU: ``fc1``, ``fc2``); with ``delayed`` they are Transformer Engine's fused QKV and
fc1 GEMMs. Weights are cast every micro-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from shardmeter.inputs.bundles import REC_NONE, REC_SELECTIVE, Fp8Recipe, Training
from shardmeter.model.branches import any_row, where_needed
from shardmeter.model.elementwise import kernel_time
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = [
    "CAST_KERNELS",
    "CAST_HBM_SHARE",
    "cast_hbm_bytes_s",
    "cast_kernels",
    "linear_cast_time",
    "layer_cast_time",
    "block_cast_time",
    "saved_input_bytes_per_byte",
    "activation_saving",
    "full_layer_saving",
]

_A, _8 = 2.0, 1.0

#: Per recipe and operand: ``(phase, read, write)`` per element, phase 0 forward, 1 backward;
#: ``act`` is an input or an output gradient (the latter's kernels all run in backward).
#: ``fusable``: the recipes whose first activation read torch.compile fuses into the op before.
CAST_KERNELS: dict[str, dict[str, tuple[tuple[float, float, float], ...]]] = {
    "tensorwise": {
        "act": ((0, _A, 0.0), (0, 0.0, 0.0), (0, _A, 2 * _8)),
        "weight": ((0, _A, 0.0), (0, 0.0, 0.0), (0, _A, _8), (1, _A, _8)),
    },
    "rowwise": {
        "act": ((0, _A, _8 + _A), (0, _A, _8)),
        "weight": ((0, _A, _8), (1, _A, _A), (1, _A, _8)),
    },
    "delayed": {
        "act": ((0, _A, 2 * _8),),
        "weight": ((0, _A, 2 * _8),),
    },
    "blockwise": {
        "act": ((0, _A, _8 + 4.0 / 128), (0, _A, _8 + 4.0 / 128)),
        "weight": ((0, _A, _8 + 4.0 / 128**2), (1, _8, _8)),
    },
    "mxfp8": {
        "act": ((0, _A, _8 + 1.0 / 32), (0, _A, _8 + 1.0 / 32)),
        "weight": ((0, _A, _8 + 1.0 / 32), (1, _A, _8 + 1.0 / 32)),
    },
}
_FUSABLE = ("tensorwise", "rowwise", "mxfp8")

#: Achieved share of the HBM rate of a recipe's cast kernels where it is below the roofline.
#: ``rowwise``: torch.compile generates torchao's axiswise casts (a per-row and a per-column
#: scale of each operand, the column-wise one a reduction across rows, and bf16 transposed
#: copies), and such cast-plus-transpose kernels stay well below the HBM rate (pytorch/pytorch
#: #133242: "the maximum bandwidth I can achieve with the cast to float8 + transpose of
#: grad_output ... is ~1.4 [TB/s] on an H100, while other float8 overhead kernels top out at
#: ~2.2"). 0.30 is the best share (least mean absolute error, steps of 0.025) over torchao's published rowwise table (216
#: shapes, M, K, N from 1024 to 32768: LayerNorm -> Linear -> Sigmoid forward and backward
#: against bf16 on an H100, pytorch/ao docs/static/fp8-rowwise-perf.png at fdddb2cf, PR #2312;
#: ``benchmarks/fp8_rowwise_check.py``): with it the model's per-shape speedup is off the
#: table's by 9.8 % on average (+1.6 % signed), with the GEMMs at the tensorwise fp8 rate (the table leaves no room for
#: a slower rowwise GEMM: pytorch/pytorch #147971 puts most shapes at 90-100 % of tensorwise).
#: At the roofline (share 1) the model over-predicted the table's speedups by 63 % on average.
CAST_HBM_SHARE: dict[str, float] = {"rowwise": 0.30}
#: rowwise: the dgrad and wgrad outputs rescaled after a cuBLAS tensorwise GEMM (read 2, write 2)
_RESCALE = 2 * _A


def cast_kernels(recipe: str, operand: str, compiled: bool, phase: int) -> tuple[tuple[float, float], ...]:
    """The ``(read, write)`` kernels of one operand (``"act"`` or ``"weight"``) in one phase;
    with ``compiled`` the first read of an activation is fused away where torchao says so."""
    ks = CAST_KERNELS[recipe][operand]
    out = []
    for i, (ph, r, w) in enumerate(ks):
        if ph != phase:
            continue
        if compiled and operand == "act" and i == 0 and recipe in _FUSABLE:
            r = 0.0
            if w == 0.0:  # the whole kernel (tensorwise's amax pass) is fused away
                continue
        out.append((r, w))
    return tuple(out)


def _act(recipe: str, compiled: bool, phase: int, n: Array, hbm: Array) -> Array:
    # an output gradient's kernels all run in the backward pass, whatever CAST_KERNELS's phase
    return kernel_time(cast_kernels(recipe, "act", compiled, phase), n, hbm)


def cast_hbm_bytes_s(recipe: str, hbm: Array) -> Array:
    """The HBM rate a recipe's cast kernels achieve: ``hbm`` times :data:`CAST_HBM_SHARE`."""
    return hbm * CAST_HBM_SHARE.get(recipe, 1.0)


def linear_cast_time(
    recipe: str,
    compiled: bool,
    M: Array,
    K: Array,
    N: Array,
    hbm: Array,
    count: Array = 1.0,
    input_cast: bool = True,
) -> tuple[Array, Array]:
    """Seconds of one linear's quantisation passes, ``(forward, backward)``: its input (M x K) in
    forward, its weight (K x N) in forward and backward, its output gradient (M x N) in backward
    (all of an activation's kernels in the phase where it appears), and rowwise's rescale of the
    dgrad (M x K) and wgrad (K x N) outputs; ``count`` such linears (experts). The kernels run
    at the recipe's achieved HBM rate (:func:`cast_hbm_bytes_s`). ``input_cast = False``: the
    input's casts are a sibling linear's (:func:`block_cast_time`), not priced here."""
    hbm = cast_hbm_bytes_s(recipe, hbm)
    x_cast = _act(recipe, compiled, 0, M * K, hbm) if input_cast else 0.0
    fwd = x_cast + kernel_time(cast_kernels(recipe, "weight", compiled, 0), K * N, hbm)
    bwd = _act(recipe, compiled, 0, M * N, hbm) + kernel_time(
        cast_kernels(recipe, "weight", compiled, 1), K * N, hbm
    )
    if recipe == "rowwise":
        bwd = bwd + kernel_time(((_RESCALE, 0.0),), M * K, hbm) + kernel_time(((_RESCALE, 0.0),), K * N, hbm)
    return count * fwd, count * bwd


def layer_cast_time(
    recipe_code: Array,
    compiled: Array,
    M: Array,
    m_mlp: Array,
    h: Array,
    q: Array,
    kv: Array,
    v: Array,
    o: Array,
    ffn: Array,
    experts: Array,
    swiglu: Array,
    hbm: Array,
) -> tuple[Array, Array]:
    """One layer's fp8 quantisation seconds, ``(forward, backward)``, for the recipe code
    (:class:`~shardmeter.inputs.bundles.Fp8Recipe`): attention projections over ``M`` tokens
    (q, kv, v, o widths on this GPU), the MLP's linears over ``m_mlp`` tokens per expert,
    ``experts`` of them (``ffn`` wide each), as the module docstring lists them
    (:func:`block_cast_time`). The code picks a recipe per row (``ops.where``), so rows may
    carry different recipes; a recipe, compile mode or block type no row has is not priced."""
    code = ops.as_float(recipe_code)
    sw = ops.as_bool(swiglu)
    comp = ops.as_bool(compiled)
    shape = (M, m_mlp, h, q, kv, v, o, ffn, experts, hbm)
    fwd_out, bwd_out = 0.0, 0.0
    for recipe in Fp8Recipe:
        row = code == recipe
        if not any_row(row):
            continue
        f, b = where_needed(
            comp,
            partial(block_cast_time, recipe, True, sw, *shape),
            partial(block_cast_time, recipe, False, sw, *shape),
        )
        fwd_out = ops.where(row, f, fwd_out)
        bwd_out = ops.where(row, b, bwd_out)
    return fwd_out, bwd_out


def block_cast_time(
    recipe: Fp8Recipe,
    compiled: bool,
    swiglu: Array,
    M: Array,
    m_mlp: Array,
    h: Array,
    q: Array,
    kv: Array,
    v: Array,
    o: Array,
    ffn: Array,
    experts: Array,
    hbm: Array,
) -> tuple[Array, Array]:
    """``(forward, backward)`` quantisation seconds of one layer's linears under one recipe and
    compile mode: torchtitan's separate ``wq``, ``wk``, ``wv``, ``wo`` and MLP linears (``w1``
    and ``w3`` beside ``w2`` where ``swiglu``, else ``fc1`` and ``fc2``), or with ``delayed``
    Transformer Engine's fused QKV and fc1 GEMMs (module docstring).

    Compiled, the linears that read one input (``wq``, ``wk``, ``wv``; ``w1``, ``w3``) cast it
    once: their casts of that input are the same ops on the same tensor, and AOTAutograd's
    partitioner runs common-subexpression elimination over the joint graph before Inductor
    (``torch/_functorch/partitioners.py``, ``min_cut_rematerialization_partition``: ``if
    config.cse: cse_graph = fx_graph_cse(fx_g)``, pytorch/pytorch@00c07b93; ``cse`` is on by
    default). Eager, each ``Float8Linear`` casts its own input."""
    name = recipe.name.lower()
    shared = bool(compiled)  # the sibling's input casts are CSE'd away
    if recipe == Fp8Recipe.DELAYED:  # Transformer Engine's fused QKV and fc1
        lin = [(M, h, q + kv + v, 1.0, False), (M, o, h, 1.0, False)]
        up = [(m_mlp, h, 2.0 * ffn, experts, False)]
    else:
        lin = [(M, h, q, 1.0, False), (M, h, kv, 1.0, shared), (M, h, v, 1.0, shared), (M, o, h, 1.0, False)]
        up = [(m_mlp, h, ffn, experts, False), (m_mlp, h, ffn, experts, shared)]
    gelu_up = [(m_mlp, h, ffn, experts, False)]
    down = [(m_mlp, ffn, h, experts, False)]
    return where_needed(
        swiglu,
        lambda: _sum(name, compiled, lin + up + down, hbm),
        lambda: _sum(name, compiled, lin + gelu_up + down, hbm),
    )


def _sum(
    recipe: str, compiled: bool, linears: Sequence[tuple[Array, Array, Array, Array, bool]], hbm: Array
) -> tuple[Array, Array]:
    f, b = 0.0, 0.0
    for M, K, N, n, sibling in linears:
        lf, lb = linear_cast_time(recipe, compiled, M, K, N, hbm, n, input_cast=not sibling)
        f, b = f + lf, b + lb
    return f, b


def saved_input_bytes_per_byte(te_linears: Array) -> Array:
    """Bytes an fp8 linear keeps for backward per byte of its 16-bit input: Transformer Engine
    saves the fp8 copy (1 byte for 2) whatever the recipe (``_Linear.forward``: ``saved_inputmat
    = inputmat``, the quantized input with only its column-wise data kept for the wgrad GEMM,
    ``inputmat.update_usage(rowwise_usage=False, columnwise_usage=True)``, unless
    ``save_original_input``, default False; transformer_engine/pytorch/module/linear.py @
    d0067d0d); torchao's ``Float8Linear`` saves the high-precision input
    (``ctx.save_for_backward(input_hp, weight_hp_t)``, ``torchao/float8/float8_linear.py`` at
    pytorch/ao@36027d8). ``te_linears``: the stack's fp8 linears are Transformer Engine's
    (``Training.fp8_te``)."""
    return ops.where(ops.as_bool(te_linears), 0.5, 1.0)


def activation_saving(
    tr: Training, tokens: Array, h_rep: Array, q: Array, ffn_k: Array, recompute: Array
) -> Array:
    """Activation bytes one layer saves with fp8 GEMMs, per micro-batch: the 16-bit inputs of
    the QKV, MLP-up (``h_rep`` wide each: the hidden size, over tp under sequence parallelism),
    output-projection (``q``) and MLP-down (``ffn_k``: the MLP width times the experts a token
    visits) GEMMs (Korthikanti et al. 2022, Sec. 4.1: 2 bytes each) kept at
    :func:`saved_input_bytes_per_byte`; only without recompute or with selective recompute,
    where those inputs are what is stored."""
    keep = (recompute == REC_NONE) | (recompute == REC_SELECTIVE)
    return ops.where(keep, full_layer_saving(tr, tokens, h_rep, q, ffn_k), 0.0)


def full_layer_saving(tr: Training, tokens: Array, h_rep: Array, q: Array, ffn_k: Array) -> Array:
    """:func:`activation_saving` for a layer that runs its forward with every activation kept:
    one full recompute leaves unrecomputed (``recompute_layers`` = k < the chunk's layers), or
    the one being recomputed in backward, whose linears save their inputs as in any forward."""
    fp8 = ops.as_float(tr.fp8) > 0
    frac = 1.0 - saved_input_bytes_per_byte(tr.fp8_te)
    return ops.where(fp8, frac * 2.0 * tokens * (2.0 * h_rep + q + ffn_k), 0.0)
