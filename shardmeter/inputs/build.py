"""Inputs: a :class:`~shardmeter.resolve.resolver.Resolved` scenario -> :class:`~shardmeter.inputs.bundles.ModelInputs`
of shape ``(1, islands)`` (tiers ``(1, islands, tiers)``), its strategies coded in a
:class:`~shardmeter.inputs.bundles.PartTable`."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardmeter.errors import ScenarioError
from shardmeter.inputs.bundles import (
    FP8_RECIPE_CODES,
    OPTIMIZER_CODES,
    RECOMPUTE_CODES,
    Hardware,
    Layout,
    ModelInputs,
    ModelShape,
    Network,
    PartTable,
    Topology,
    Training,
)
from shardmeter.load.scenario import framework_failed
from shardmeter.load.specs import LORA_DEFAULT_RANK, LORA_TARGETS, RECOMPUTE_MODULES
from shardmeter.parts import FrameworkPart, call_framework
from shardmeter.records import Interconnect
from shardmeter.registry.guard import guarded_call
from shardmeter.resolve.resolver import Resolved, ResolvedIsland

__all__ = ["build_inputs", "tier_arrays"]


def _array_row(values) -> np.ndarray:
    return np.asarray([values])


def _scalar(values):
    """The scalar path's value: the only island's, as a float (or a bool)."""
    v = values[0]
    return v if isinstance(v, bool) else float(v)


def tier_arrays(islands: tuple[ResolvedIsland, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(gpus, bytes/s, latency s)`` per island and tier, ``(1, I, T)``.

    Islands with fewer tiers are padded on the inside with one-GPU copies of their innermost
    tier, which no group crosses (a ring of one member costs nothing)."""
    T = max(len(isl.tiers) for isl in islands)
    gpus, bw, lat = [], [], []
    for isl in islands:
        g, b, la = [], [], []
        for i, tier in enumerate(isl.tiers):
            link = tier.link
            share = (
                isl.nics_per_node / isl.gpus_per_node if tier.nic_shared and link.kind == "network" else 1.0
            )
            g.append(float("inf") if i == len(isl.tiers) - 1 or tier.gpus is None else float(tier.gpus))
            b.append(link.bandwidth_gb_s * 1e9 * link.efficiency * share / tier.oversubscription)
            la.append(link.latency_us * 1e-6)
        pad = T - len(g)
        gpus.append([1.0] * pad + g)
        bw.append([b[0]] * pad + b)
        lat.append([la[0]] * pad + la)
    return np.asarray([gpus]), np.asarray([bw]), np.asarray([lat])


def build_inputs(
    res: Resolved, table: PartTable | None = None, *, scalar: bool = False
) -> tuple[ModelInputs, PartTable]:
    """The model inputs of one resolved scenario (a batch of one row); with ``scalar`` and one
    island, Python floats for :func:`~shardmeter.model.evaluate.evaluate`'s scalar path."""
    table = table if table is not None else PartTable()
    scalar = scalar and len(res.islands) == 1
    row = _scalar if scalar else _array_row
    sync = table.code("sync", res.sync, res.sync_options)
    inp = ModelInputs(
        model=_model(res, row),
        training=_training(res, row),
        hardware=_hardware(res, row),
        topology=_topology(res, row, scalar),
        layout=_layout(res, row, table),
        network=_network(res, row, sync if scalar else np.asarray([[sync]])),
    )
    return inp, table


def _model(res: Resolved, row) -> ModelShape:
    m, n = res.scenario.model, len(res.islands)
    return ModelShape(
        layers=row([m.layers] * n),
        hidden=row([m.hidden] * n),
        heads=row([m.heads] * n),
        kv_heads=row([m.n_kv_heads] * n),
        q_dim=row([m.heads * m.d_head] * n),
        kv_dim=row([m.n_kv_heads * m.d_head] * n),
        ffn_hidden=row([m.d_ffn] * n),
        swiglu=row([m.ffn == "swiglu"] * n),
        vocab=row([m.vocab] * n),
        seq_len=row([m.seq_len] * n),
        tied=row([m.tied_embeddings] * n),
        experts=row([m.experts] * n),
        experts_per_token=row([m.experts_per_token] * n),
        capacity_factor=row([m.capacity_factor] * n),
        causal=row([m.causal] * n),
        dropout=row([m.dropout] * n),
        moe_ffn_hidden=row([m.d_moe_ffn] * n),
        shared_experts=row([m.shared_experts] * n),
        dense_layers=row([m.dense_layers] * n),
        q_rank=row([m.q_lora_rank or 0] * n),
        kv_rank=row([m.kv_lora_rank or 0] * n),
        v_dim=row([m.n_kv_heads * m.d_v_head] * n),
        o_dim=row([m.heads * m.d_v_head] * n),
    )


def _framework_says(res: Resolved, hook: str, *args, default: bool) -> bool:
    """The framework profile's behaviour hook ``hook`` at the state the scenario picked
    (``Resolved.framework_version``; :func:`~shardmeter.parts.call_framework`); ``default``
    without a framework."""
    if not isinstance(res.framework, FrameworkPart):
        return default
    try:
        part = res.framework
        return bool(
            guarded_call(
                "framework",
                part,
                hook,
                lambda: call_framework(part, hook, *args, version=res.framework_version),
            )
        )
    except ScenarioError:
        raise
    except Exception as exc:  # a plugin's bug is named, not a traceback
        raise framework_failed(str(res.scenario.training.framework), exc, res.scenario.file) from exc


def _op_saves_attention(res: Resolved, gpu) -> bool:
    """Whether the framework's op-recompute save list holds the attention kernel it runs on
    ``gpu`` (``FrameworkPart.op_saves_attention``); True without a framework."""
    return _framework_says(res, "op_saves_attention", res.scenario.training.attention, gpu, default=True)


def _compiled_loss(res: Resolved) -> bool:
    """With ``compile``, whether the framework compiles its loss too
    (``FrameworkPart.loss_compiled``); False without a framework or without ``compile``."""
    return res.scenario.training.compile and _framework_says(res, "loss_compiled", default=False)


def _fused_loss(res: Resolved) -> bool:
    """Whether the loss backward writes the logits' gradient in place: ``training.fused_loss``
    where written, else the stack's (``FrameworkPart.loss_fused``); False (``F.cross_entropy``)
    without either."""
    written = res.scenario.training.fused_loss
    if written is not None:
        return bool(written)
    return _framework_says(res, "loss_fused", default=False)


def _grad_acc_fused(res: Resolved) -> bool:
    """Whether the micro-batches' weight gradients are summed inside the weight-gradient GEMM:
    ``training.grad_accumulation_fusion`` where written, else the stack's
    (``FrameworkPart.grad_accumulation_fused`` at the scenario's precision); True without either
    (no pass priced)."""
    t = res.scenario.training
    if t.grad_accumulation_fusion is not None:
        return bool(t.grad_accumulation_fusion)
    return _framework_says(res, "grad_accumulation_fused", t.precision, default=True)


def _fp8_te(res: Resolved) -> bool:
    """Whether the fp8 linears are Transformer Engine's: ``training.fp8_backend`` where written,
    else the stack's (``FrameworkPart.fp8_backend_default``), else the recipe's usual home
    (``delayed``: Transformer Engine; the others: torchao's)."""
    t = res.scenario.training
    backend = t.fp8_backend
    if backend is None and isinstance(res.framework, FrameworkPart):
        backend = type(res.framework).fp8_backend_default
    if backend is None:
        return t.fp8_recipe == "delayed"
    return backend == "transformer-engine"


def _expandable_segments(res: Resolved) -> bool:
    """Whether the stack's launcher sets ``expandable_segments:True`` for PyTorch's caching
    allocator (``FrameworkPart.expandable_segments``); False (PyTorch's default) without one."""
    return _framework_says(res, "expandable_segments", default=False)


def _training(res: Resolved, row) -> Training:
    t, isls = res.scenario.training, res.islands
    n = len(isls)
    return Training(
        global_batch=row([t.global_batch] * n),
        micro_batch=row([res.scenario.micro_batch(j) for j in range(n)]),
        island_batch=row([0.0] * n),
        recompute=row([RECOMPUTE_CODES[t.recompute]] * n),
        materialized=row([t.attention == "materialized"] * n),
        weight_bytes=row([4.0 if t.precision in ("fp32", "tf32") else 2.0] * n),
        fp8=row([t.precision == "fp8" and "fp8" in isl.gpu.peak_tflops for isl in isls]),
        recompute_layers=row([t.recompute_layers or 0] * n),
        offload_layers=row([t.offload_layers] * n),
        compile=row([t.compile] * n),
        fp8_recipe=row([FP8_RECIPE_CODES[t.fp8_recipe]] * n),
        fp8_params=row(
            [t.fp8_params and t.precision == "fp8" and "fp8" in isl.gpu.peak_tflops for isl in isls]
        ),
        compiled_loss=row([_compiled_loss(res)] * n),
        op_saves_attention=row([_op_saves_attention(res, isl.gpu) for isl in isls]),
        expandable_segments=row([_expandable_segments(res)] * n),
        optimizer=row([OPTIMIZER_CODES[t.optimizer]] * n),
        fused_loss=row([_fused_loss(res)] * n),
        grad_acc_fused=row([_grad_acc_fused(res)] * n),
        loss_parallel=row([_framework_says(res, "loss_parallel_enabled", default=False)] * n),
        fp8_te=row([_fp8_te(res)] * n),
        **_lora(res, row, n),
        **_recompute_modules(res, row, n),
    )


def _recompute_modules(res: Resolved, row, n: int) -> dict[str, Any]:
    """``training.recompute_modules`` as one flag per module (None: the attention core only)."""
    mods = set(res.scenario.training.recompute_modules or ("core_attn",))
    return {f"rc_{m}": row([m in mods] * n) for m in RECOMPUTE_MODULES}


def _lora(res: Resolved, row, n: int) -> dict[str, Any]:
    """``training.peft = "lora"`` as the rank and the four target flags (zeros: full training)."""
    t = res.scenario.training
    lora = t.peft == "lora"
    rank = (t.lora_rank or LORA_DEFAULT_RANK) if lora else 0
    targets = set(t.lora_targets or LORA_TARGETS) if lora else set()
    flags = {f"lora_{name.removeprefix('linear_')}": row([name in targets] * n) for name in LORA_TARGETS}
    return {"lora_rank": row([rank] * n), **flags}


def _hardware(res: Resolved, row) -> Hardware:
    """Each island's GPU at the scenario's precision and attention kernel."""
    t, gpus = res.scenario.training, [isl.gpu for isl in res.islands]
    fp8, flash2 = t.precision == "fp8", t.attention == "flash2"
    peak16 = "bf16" if t.precision in ("fp8", "bf16") else t.precision
    gemm = [(g.matmul_efficiency_fp8 or g.matmul_efficiency) if fp8 else g.matmul_efficiency for g in gpus]
    att = [
        (g.attention_efficiency_flash2 or g.attention_efficiency) if flash2 else g.attention_efficiency
        for g in gpus
    ]
    return Hardware(
        peak_flops=row([g.peak(t.precision) * 1e12 for g in gpus]),
        peak16_flops=row([g.peak(peak16) * 1e12 for g in gpus]),
        memory_bytes=row([g.memory_gb * 1e9 for g in gpus]),
        hbm_bytes_s=row([g.memory_bandwidth_gb_s * 1e9 for g in gpus]),
        hbm_efficiency=row([g.hbm_efficiency for g in gpus]),
        gemm_efficiency=row(gemm),
        attention_efficiency=row(att),
        sm_count=row([g.sm_count for g in gpus]),
        host_bytes_s=row([g.host_link_gb_s * 1e9 for g in gpus]),
        compute_capability=row([g.compute_capability or 0.0 for g in gpus]),
    )


def _topology(res: Resolved, row, scalar: bool) -> Topology:
    isls = res.islands
    tiers: tuple[Any, Any, Any] = tier_arrays(isls)
    if scalar:
        tiers = tuple(tuple(float(x) for x in np.ravel(a)) for a in tiers)  # type: ignore[assignment]
    tg, tb, tl = tiers
    return Topology(
        gpus_per_node=row([isl.gpus_per_node for isl in isls]),
        nodes=row([isl.nodes for isl in isls]),
        domain_gpus=row([float(isl.tiers[0].gpus or "inf") for isl in isls]),
        tier_gpus=tg,
        tier_bytes_s=tb,
        tier_latency_s=tl,
    )


def _layout(res: Resolved, row, table: PartTable) -> Layout:
    isls = res.islands
    return Layout(
        tp=row([isl.parallelism.tp for isl in isls]),
        pp=row([isl.parallelism.pp for isl in isls]),
        dp=row([isl.dp for isl in isls]),
        cp=row([isl.parallelism.cp for isl in isls]),
        ep=row([isl.parallelism.ep for isl in isls]),
        expert_tp=row([isl.parallelism.expert_tp or 0 for isl in isls]),
        sequence_parallel=row([isl.parallelism.sequence_parallel for isl in isls]),
        virtual_stages=row([isl.parallelism.virtual_stages for isl in isls]),
        tp_comm_overlap=row([isl.parallelism.tp_comm_overlap for isl in isls]),
        dp_comm_overlap=row([isl.parallelism.dp_comm_overlap for isl in isls]),
        sharding=row([table.code("sharding", isl.sharding, isl.sharding_options) for isl in isls]),
        schedule=row([table.code("schedule", isl.schedule, isl.schedule_options) for isl in isls]),
        async_tp=row([isl.parallelism.async_tp for isl in isls]),
        first_stage_layers=row([isl.parallelism.first_stage_layers or 0 for isl in isls]),
        last_stage_layers=row([isl.parallelism.last_stage_layers or 0 for isl in isls]),
        embedding_in_split=row([isl.parallelism.embedding_in_split for isl in isls]),
        loss_in_split=row([isl.parallelism.loss_in_split for isl in isls]),
    )


def _network(res: Resolved, row, sync) -> Network:
    """Each island's uplink (its own, else the ``network`` link; unused with one island) and the
    sync strategy's code."""
    links: list[Interconnect | None] = [None] * len(res.islands)
    if res.network is not None:
        links = [isl.uplink or res.network for isl in res.islands]
    return Network(
        wan_bytes_s=row([ln.bandwidth_gb_s * 1e9 * ln.efficiency if ln is not None else 1.0 for ln in links]),
        wan_latency_s=row([ln.latency_us * 1e-6 if ln is not None else 0.0 for ln in links]),
        sync=sync,
    )
