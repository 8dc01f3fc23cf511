"""The sharding strategy's stage: what it sees of one GPU (:func:`shard_inputs`), and the state
bytes and priced traffic of each row's strategy (:func:`sharding_terms`, one call per distinct
strategy, :func:`~.dispatch.by_code`)."""

from __future__ import annotations

import math
from typing import Any

import attrs

from shardmeter.inputs.bundles import REC_FULL, ModelShape, PartTable, Topology, Training
from shardmeter.model.branches import where_needed
from shardmeter.model.comm import PricedTraffic, price_traffic
from shardmeter.model.compute import Shapes
from shardmeter.model.degrees import Degrees
from shardmeter.model.dispatch import by_code
from shardmeter.model.flops import attention_shape
from shardmeter.model.formulas import attention_params, params_per_layer
from shardmeter.model.lora import adapter_params_per_layer, is_lora, trainable_fraction
from shardmeter.model.optimizers import optimizer_bytes_per_param
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.parts import ShardInputs, StateBytes

__all__ = ["ShardingTerms", "shard_inputs", "sharding_terms", "sharding_state"]

_f = ops.as_float
_PLAIN = (float, int, bool)


@attrs.frozen(kw_only=True)
class ShardingTerms:
    """One stage's sharding strategy: its ``state`` bytes per GPU and its ``traffic`` priced on
    the island's tiers (seconds, by when it runs)."""

    state: StateBytes
    traffic: PricedTraffic


def _state(st: StateBytes) -> StateBytes:
    """A part's state as a plain :class:`~shardmeter.parts.StateBytes` (one record type for every
    code, so :func:`~.dispatch.by_code` merges them field by field); one already is, as is."""
    if type(st) is StateBytes:
        return st
    return StateBytes(
        weights=st.weights,
        gradients=st.gradients,
        optimizer=st.optimizer,
        param_shards=st.param_shards,
        optimizer_shards=st.optimizer_shards,
        extra=st.extra,
    )


def sharding_terms(
    parts: PartTable,
    shard: ShardInputs,
    topo: Topology,
    codes: Array,
    windows: tuple[Array, Array, Array] | None = None,
) -> ShardingTerms:
    """State bytes and priced traffic of each row's sharding strategy (``codes``); ``windows``:
    the forward, recompute and backward passes' work (:func:`~.comm.price_traffic`).

    One plan's stage that sees the last call's record (:func:`shard_inputs` gives the first
    and last stages of an even split the same one) has that call's state and events; their
    prices too where no event is ``paired`` (the windows price only those)."""
    global _LAST_TERMS
    if type(codes) is float and type(shard.params_per_gpu) is float:
        last = _LAST_TERMS
        if (
            last is not None
            and last[0] is parts
            and last[1] is shard
            and last[2] is topo
            and last[3] == codes
        ):
            events, terms = last[4], last[5]
            if not any(ev.paired for ev in events):
                return terms
            return ShardingTerms(state=terms.state, traffic=price_traffic(events, topo, windows))
        part, opts = parts.get("sharding", int(codes))
        state = _state(part.state(shard, opts))
        events = part.traffic(shard, opts)
        terms = ShardingTerms(state=state, traffic=price_traffic(events, topo, windows))
        _LAST_TERMS = (parts, shard, topo, codes, events, terms)
        return terms

    def run(code: int) -> ShardingTerms:
        part, opts = parts.get("sharding", code)
        return ShardingTerms(
            state=_state(part.state(shard, opts)),
            traffic=price_traffic(part.traffic(shard, opts), topo, windows),
        )

    return by_code(codes, run)


#: The last one plan's :func:`sharding_terms`: ``(parts, shard, topo, code, events, terms)``.
_LAST_TERMS: tuple[Any, ...] | None = None


def sharding_state(parts: PartTable, shard: ShardInputs, codes: Array) -> StateBytes:
    """The sharding strategy's state bytes of one stage (no traffic)."""

    def run(code: int) -> StateBytes:
        part, opts = parts.get("sharding", code)
        return _state(part.state(shard, opts))

    return by_code(codes, run)


def shard_inputs(
    ms: ModelShape, tr: Training, sh: Shapes, topo: Topology, deg: Degrees, *, emb_here: Array, head: Array
) -> ShardInputs:
    """What the sharding strategy sees: this GPU's parameters (its stage's layers, its
    tensor-parallel slice, its local experts; the word embedding where the stage holds it
    (``emb_here``: the first), the output layer where it holds that (``head``: the last; with one
    stage only when untied: Megatron-LM's last stage keeps its own copy of a tied embedding,
    ``LanguageModule.setup_embeddings_and_output_layer`` at NVIDIA/Megatron-LM@d98e8a64), of its
    largest weight matrix (fused QKV, fc1, an expert's fc1 or the embedding) and the bytes per
    element of weights, gradients and the optimizer. A MoE layer's
    shared experts are tensor-parallel like a dense MLP, not spread over ``ep``; the stage's dense
    layers (``dense_layers_local``) hold one ``ffn_hidden`` MLP each; the routed experts' share
    (``expert_params_per_gpu``, split by the experts' own tensor parallelism ``etp``,
    ``parallelism.expert_tp``) is sharded over the expert-data-parallel group
    (:func:`~shardmeter.strategies.zero.expert_shard_group_size`). With ``training.fp8_params``
    the layers' weights are held and all-gathered in fp8 (1 byte; Megatron ``--fp8-param-gather``,
    torchao ``enable_fsdp_float8_all_gather``: only the linears' weights, the embeddings stay 16-bit),
    the gradients and the optimizer's fp32 master copy unchanged. Full recompute re-runs the
    forward of ``training.recompute_layers`` (0: all) of the stage. The optimizer's state per
    parameter is ``training.optimizer``'s (:func:`~.optimizers.optimizer_bytes_per_param`: its
    matrices ``hidden`` by the layer's mean other side, the embeddings' share for Muon). With
    LoRA (:mod:`.lora`) the GPU also holds its adapters, and gradients and optimizer state are
    the adapters' only: their bytes per parameter are averaged over all the GPU's parameters,
    as the fp8 gather bytes are (``trainable_fraction`` of them trained).

    One plan's stage that holds as many embedding parameters as the last call's, of the same
    stage invariants (:func:`_stage_invariants`: the same frozen records), is that call's
    record (``_LAST_SHARD``; the first and last stages of an even split, untied)."""
    global _LAST_SHARD
    v = _stage_invariants(ms, tr, sh, topo, deg)
    tp, pp = deg.tp, deg.pp
    wb, fp8_params, gather16, emb = v["wb"], v["fp8_params"], v["gather16"], v["emb"]
    # one plan (plain numbers and bools): its conditions as plain ifs (the values ops.where
    # picks, as plain numbers as it gives them), the fp8 means only where it has fp8
    one = type(emb_here) is bool and type(head) is bool and type(pp) is float and type(ms.tied) in _PLAIN
    if one:
        holds = (1.0 if emb_here else 0.0), (1.0 if head and (pp > 1 or not ms.tied) else 0.0)
    else:
        holds = (
            ops.where(ops.as_bool(emb_here), 1.0, 0.0),
            ops.where(ops.as_bool(head) & ((pp > 1) | ops.logical_not(ops.as_bool(ms.tied))), 1.0, 0.0),
        )
    emb_gpu = emb * holds[0] + emb * holds[1]
    last = _LAST_SHARD
    if one and last is not None and last[0] is v and _same_float(last[1], emb_gpu):
        # the first and last stages of an even split hold as many parameters (the embedding
        # and the untied output layer): every field is the last record's, so it is that record
        return last[2]
    p_base = v["layers_params"] + v["dense_delta"] + emb_gpu
    a_gpu = v["a_gpu"]
    p_gpu = p_base + a_gpu
    if type(a_gpu) is float and type(p_gpu) is float:
        trained = _trainable_floats(p_gpu, a_gpu)
    else:
        trained = trainable_fraction(p_gpu, a_gpu)

    def fp8_mean(b16: Array) -> Array:
        """Bytes per element with the layers' weights in fp8 and the embeddings' at ``b16``."""
        return ((p_gpu - emb_gpu) * 1.0 + emb_gpu * b16) / p_gpu

    if type(fp8_params) is bool and set(map(type, (p_gpu, emb_gpu, wb, gather16))) <= ops.ONLY_FLOAT:
        weight_bytes = fp8_mean(wb) if fp8_params else wb
        gather_bytes = fp8_mean(gather16) if fp8_params else gather16
    else:
        weight_bytes = ops.where(fp8_params, fp8_mean(wb), wb)
        gather_bytes = ops.where(fp8_params, fp8_mean(gather16), gather16)
    shard = ShardInputs(
        params_layer_linears=v["params_layer_linears"],
        recompute_layers=v["recompute_layers"],
        params_last_module=v["params_last_module"],
        params_largest_module=v["params_largest_module"],
        params_per_gpu=p_gpu,
        params_per_layer=v["params_per_layer"],
        expert_params_per_gpu=v["expert_params_per_gpu"],
        ep=deg.ep,
        expert_tp=deg.etp,
        pp=pp,
        layers_per_stage=sh.layers_per_stage,
        weight_bytes=weight_bytes,
        param_gather_bytes=gather_bytes,
        grad_bytes=gather16 * trained,  # where(wb > 2, 4.0, 2.0), as the gather: fp32 or 16-bit
        optimizer_bytes_per_param=optimizer_bytes_per_param(
            tr.optimizer, wb, ms.hidden, v["p_layer"] / ((4.0 + v["mats"]) * ms.hidden), emb_gpu / p_gpu
        )
        * trained,
        trainable_fraction=trained,
        tp=tp,
        dp=deg.dp,
        cp=deg.cp,
        domain_gpus=topo.domain_gpus if type(topo.domain_gpus) is float else _f(topo.domain_gpus),
        tier_gpus=topo.tier_gpus,
        tier_bytes_s=topo.tier_bytes_s,
        tier_latency_s=topo.tier_latency_s,
    )
    if one and type(emb_gpu) is float:
        _LAST_SHARD = (v, emb_gpu, shard)
    return shard


def _trainable_floats(params: float, adapters: float) -> float:
    """:func:`~.lora.trainable_fraction` of plain floats: the side ``ops.where`` picks (the
    other's quotient never raises: its divisor is at least 1, or nan), ``ops.maximum`` written
    out. tests/test_scalar_twins.py holds it to the arrays to the bit."""
    if adapters > 0:
        return adapters / (params if params >= 1.0 else (1.0 if params < 1.0 else math.nan))
    return 1.0


def _same_float(a: Any, b: float) -> bool:
    """Whether ``a`` is a float of the same bits as ``b`` (``0.0`` is not ``-0.0``; a nan is
    no number's)."""
    return type(a) is float and a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


#: The last one plan's :func:`shard_inputs`: ``(its stage invariants, emb_gpu, the record)``.
_LAST_SHARD: tuple[Any, float, ShardInputs] | None = None


#: The last :func:`_stage_invariants` of one plan: ``(ms, tr, sh, topo, deg, terms)``.
_LAST: tuple[Any, ...] | None = None


def _stage_invariants(
    ms: ModelShape, tr: Training, sh: Shapes, topo: Topology, deg: Degrees
) -> dict[str, Any]:
    """What :func:`shard_inputs` computes of a stage that does not depend on whether it holds
    the embedding or the output layer: one plan's stages of as many layers (the body and a
    rank of the busiest GPU: the same frozen records) compute it once (``_LAST``, the last
    call's, by identity; a batch's arrays every time)."""
    global _LAST
    last = _LAST
    if (
        last is not None
        and last[0] is ms
        and last[1] is tr
        and last[2] is sh
        and last[3] is topo
        and last[4] is deg
    ):
        return last[5]
    terms = (
        _invariants_floats(ms, tr, sh, deg) if _plain_stage(ms, tr, sh, deg) else _invariants(ms, tr, sh, deg)
    )
    if type(sh.layers_per_stage) is float:  # one plan's plain numbers: frozen, reused
        _LAST = (ms, tr, sh, topo, deg, terms)
    return terms


def _plain_stage(ms: ModelShape, tr: Training, sh: Shapes, deg: Degrees) -> bool:
    """Whether :func:`_stage_invariants` reads plain numbers only (one plan; the flags
    ``ops.where`` takes as they are bools) of a plan :func:`_invariants_floats` writes out:
    full training (LoRA's adapters take the general code)."""
    sizes = (
        *(ms.hidden, ms.q_dim, ms.kv_dim, ms.v_dim, ms.o_dim, ms.ffn_hidden, ms.vocab, ms.experts),
        *(ms.shared_experts, ms.q_rank, ms.kv_rank, tr.weight_bytes, tr.lora_rank, tr.recompute),
        *(tr.recompute_layers, sh.ffn_local, sh.layers_per_stage, sh.dense_layers_local),
        *(deg.tp, deg.ep, deg.etp),
    )
    return (
        type(sh.moe) is bool
        and type(ms.swiglu) is bool
        and type(tr.fp8_params) in ops.FLOAT_OR_BOOL
        and set(map(type, sizes)) <= ops.ONLY_FLOAT
        and not tr.lora_rank > 0
    )


def _invariants_floats(ms: ModelShape, tr: Training, sh: Shapes, deg: Degrees) -> dict[str, Any]:
    """:func:`_invariants` of one plan in full training (:func:`_plain_stage`): the same
    operations in the same order, each ``ops.where`` both sides as there (the side it picks
    kept), ``ops.maximum``/``minimum`` written out (nan where neither side is the larger, as
    numpy), no adapters (0, as ``where_needed`` gives without LoRA).
    tests/test_scalar_twins.py holds it to the arrays to the bit."""
    nan = math.nan
    tp, moe, h, sw = deg.tp, sh.moe, ms.hidden, ms.swiglu
    wb = tr.weight_bytes
    mats = 3.0 if sw else 2.0
    ffn = sh.ffn_local * tp
    mlp = mats * h * ffn
    routed = mlp * ms.experts / deg.ep / deg.etp
    routed = routed if moe else 0.0
    # params_per_layer(h, q, kv, f, sw, 1.0, **attn) of one plan, its attention's parameters
    # taken once: att + mats h f (1.0 + 0) + 0.0 (no router) + 4 h
    att = attention_params(h, ms.q_dim, ms.kv_dim, **attention_shape(ms))
    four_h = 4.0 * h
    p_layer = (att + mlp * 1.0 + 0.0 + four_h - mlp + mlp * (ms.shared_experts if moe else 1.0)) / tp + routed
    p_dense = (att + mats * h * ms.ffn_hidden * 1.0 + 0.0 + four_h) / tp
    Ls, Ld = sh.layers_per_stage, sh.dense_layers_local
    x = Ls - Ld
    moe_layers = x if x >= 0.0 else (0.0 if x < 0.0 else nan)
    dense_four = not moe and ms.q_rank + ms.kv_rank <= 0
    linears = (h * (ms.q_dim + ms.kv_dim + ms.v_dim), ms.o_dim * h, (2.0 if sw else 1.0) * h * ffn, h * ffn)
    # _recompute_layers
    rl = tr.recompute_layers
    if tr.recompute == REC_FULL:
        rec_layers = (rl if rl <= Ls else (Ls if Ls < rl else nan)) if rl > 0 else Ls
    else:
        rec_layers = 0.0
    # _largest_matrix
    gemm_in = (2.0 if sw else 1.0) * ms.ffn_hidden
    a, b = h * (ms.q_dim + 2.0 * ms.kv_dim), h * gemm_in
    c, d = h * gemm_in / ms.ffn_hidden * ffn, ms.vocab * h
    ab = a if a >= b else (b if b > a else nan)
    cd = c if c >= d else (d if d > c else nan)
    last_module = h * ms.ffn_hidden / tp
    dense_delta = Ld * (p_dense - p_layer)
    return {
        "wb": wb,
        "fp8_params": bool(tr.fp8_params),
        "mats": mats,
        "p_layer": p_layer,
        "emb": ms.vocab * h / tp,
        "layers_params": Ls * p_layer,
        "dense_delta": dense_delta if Ld > 0 else 0.0,
        "a_gpu": 0.0,
        "gather16": 4.0 if wb > 2 else 2.0,
        "expert_params_per_gpu": moe_layers * routed,
        "params_layer_linears": tuple((m if dense_four else 0.0) / tp for m in linears),
        "recompute_layers": rec_layers,
        "params_last_module": 0.0 if moe else last_module,
        "params_largest_module": (ab if ab >= cd else (cd if cd > ab else nan)) / tp,
        "params_per_layer": p_layer + 0.0,
    }


def _invariants(ms: ModelShape, tr: Training, sh: Shapes, deg: Degrees) -> dict[str, Any]:
    """:func:`_stage_invariants` computed through :mod:`~shardmeter.numeric.ops` (arrays, or
    any numbers)."""
    tp = deg.tp
    wb, fp8_params = _f(tr.weight_bytes), ops.as_bool(tr.fp8_params)
    mats = ops.where(ms.swiglu, 3.0, 2.0)
    ffn = sh.ffn_local * tp  # an expert's width in a MoE layer
    mlp = mats * ms.hidden * ffn
    attn = attention_shape(ms)
    # a MoE layer's routed experts are split by their own tensor parallelism (``etp``)
    routed = ops.where(sh.moe, mlp * ms.experts / deg.ep / deg.etp, 0.0)
    p_layer = (
        params_per_layer(ms.hidden, ms.q_dim, ms.kv_dim, ffn, ms.swiglu, 1.0, **attn)
        - mlp
        + mlp * ops.where(sh.moe, ms.shared_experts, 1.0)
    ) / tp + routed
    p_dense = params_per_layer(ms.hidden, ms.q_dim, ms.kv_dim, ms.ffn_hidden, ms.swiglu, 1.0, **attn) / tp
    Ld = sh.dense_layers_local
    emb = ms.vocab * ms.hidden / tp

    def adapters() -> tuple[Array, Array]:
        """LoRA's adapters of one layer and of the stage (:mod:`.lora`), split like their linears."""
        mlps = ops.where(sh.moe, ms.experts / deg.ep + ms.shared_experts, 1.0)
        a_layer = adapter_params_per_layer(ms, tr, ffn, mlps) / tp
        a_dense = adapter_params_per_layer(ms, tr, ms.ffn_hidden, 1.0) / tp
        return a_layer, sh.layers_per_stage * a_layer + ops.where(Ld > 0, Ld * (a_dense - a_layer), 0.0)

    # none in full training (rank 0: the adapters' count is 0), computed only where a row has them
    a_layer, a_gpu = where_needed(is_lora(tr), adapters, lambda: (0.0, 0.0))
    # the stage's routed experts (its MoE layers' experts / ep), sharded over dp x cp / ep
    moe_layers = ops.maximum(sh.layers_per_stage - Ld, 0.0)
    # a dense layer's four matrices (not a MoE layer's experts, nor MLA's low-rank projections)
    dense_four = ops.logical_not(ops.as_bool(sh.moe)) & (_f(ms.q_rank) + _f(ms.kv_rank) <= 0)
    return {
        "wb": wb,
        "fp8_params": fp8_params,
        "mats": mats,
        "p_layer": p_layer,
        "emb": emb,
        "layers_params": sh.layers_per_stage * p_layer,
        "dense_delta": ops.where(Ld > 0, Ld * (p_dense - p_layer), 0.0),
        "a_gpu": a_gpu,
        "gather16": ops.where(wb > 2, 4.0, 2.0),
        "expert_params_per_gpu": moe_layers * routed,
        "params_layer_linears": tuple(
            ops.where(dense_four, m, 0.0) / tp
            for m in (
                ms.hidden * (ms.q_dim + ms.kv_dim + ms.v_dim),
                ms.o_dim * ms.hidden,
                ops.where(ms.swiglu, 2.0, 1.0) * ms.hidden * ffn,
                ms.hidden * ffn,
            )
        ),
        "recompute_layers": _recompute_layers(tr, sh),
        "params_last_module": ops.where(sh.moe, 0.0, ms.hidden * ms.ffn_hidden / tp),
        "params_largest_module": _largest_matrix(ms, ffn) / tp,
        "params_per_layer": p_layer + a_layer,
    }


def _largest_matrix(ms: ModelShape, ffn: Array) -> Array:
    """Elements of the largest weight matrix: fused QKV, fc1 (Megatron fuses gate and up), an
    expert's fc1 (``ffn`` wide) or the embedding."""
    gemm_in = ops.where(ms.swiglu, 2.0, 1.0) * ms.ffn_hidden
    return ops.maximum(
        ops.maximum(ms.hidden * (ms.q_dim + 2.0 * ms.kv_dim), ms.hidden * gemm_in),
        ops.maximum(ms.hidden * gemm_in / ms.ffn_hidden * ffn, ms.vocab * ms.hidden),
    )


def _recompute_layers(tr: Training, sh: Shapes) -> Array:
    """Layers of the stage whose forward full recompute re-runs (``recompute_layers``, 0: all)."""
    rl = _f(tr.recompute_layers)
    all_layers = sh.layers_per_stage
    return ops.where(
        _f(tr.recompute) == REC_FULL, ops.where(rl > 0, ops.minimum(rl, all_layers), all_layers), 0.0
    )
