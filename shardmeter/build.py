"""Inputs: a :class:`~shardmeter.resolve.Resolved` scenario -> :class:`~shardmeter.model.inputs.ModelInputs`
of shape ``(1, islands)`` (tiers ``(1, islands, tiers)``), its strategies coded in a
:class:`~shardmeter.model.inputs.PartTable`."""

from __future__ import annotations

from typing import Any

import numpy as np

from .model.inputs import (
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
from .resolve import Resolved, ResolvedIsland

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
    sc, isls = res.scenario, res.islands
    scalar = scalar and len(isls) == 1
    _row = _scalar if scalar else _array_row
    m, t = sc.model, sc.training
    n = len(isls)
    fp8 = t.precision == "fp8"
    flash2 = t.attention == "flash2"
    peak16_prec = "bf16" if t.precision in ("fp8", "bf16") else t.precision
    model = ModelShape(
        layers=_row([m.layers] * n),
        hidden=_row([m.hidden] * n),
        heads=_row([m.heads] * n),
        kv_heads=_row([m.n_kv_heads] * n),
        q_dim=_row([m.heads * m.d_head] * n),
        kv_dim=_row([m.n_kv_heads * m.d_head] * n),
        ffn_hidden=_row([m.d_ffn] * n),
        swiglu=_row([m.ffn == "swiglu"] * n),
        vocab=_row([m.vocab] * n),
        seq_len=_row([m.seq_len] * n),
        tied=_row([m.tied_embeddings] * n),
        experts=_row([m.experts] * n),
        experts_per_token=_row([m.experts_per_token] * n),
        capacity_factor=_row([m.capacity_factor] * n),
        causal=_row([m.causal] * n),
        dropout=_row([m.dropout] * n),
    )
    training = Training(
        global_batch=_row([t.global_batch] * n),
        micro_batch=_row([t.micro_batch] * n),
        recompute=_row([RECOMPUTE_CODES[t.recompute]] * n),
        materialized=_row([t.attention == "materialized"] * n),
        weight_bytes=_row([4.0 if t.precision in ("fp32", "tf32") else 2.0] * n),
        fp8=_row([fp8 and "fp8" in isl.gpu.peak_tflops for isl in isls]),
    )
    hardware = Hardware(
        peak_flops=_row([isl.gpu.peak(t.precision) * 1e12 for isl in isls]),
        peak16_flops=_row([isl.gpu.peak(peak16_prec) * 1e12 for isl in isls]),
        memory_bytes=_row([isl.gpu.memory_gb * 1e9 for isl in isls]),
        hbm_bytes_s=_row([isl.gpu.memory_bandwidth_gb_s * 1e9 for isl in isls]),
        hbm_efficiency=_row([isl.gpu.hbm_efficiency for isl in isls]),
        gemm_efficiency=_row(
            [
                (isl.gpu.matmul_efficiency_fp8 or isl.gpu.matmul_efficiency)
                if fp8
                else isl.gpu.matmul_efficiency
                for isl in isls
            ]
        ),
        attention_efficiency=_row(
            [
                (isl.gpu.attention_efficiency_flash2 or isl.gpu.attention_efficiency)
                if flash2
                else isl.gpu.attention_efficiency
                for isl in isls
            ]
        ),
        sm_count=_row([isl.gpu.sm_count for isl in isls]),
    )
    tiers: tuple[Any, Any, Any] = tier_arrays(isls)
    if scalar:
        tiers = tuple(tuple(float(x) for x in np.ravel(a)) for a in tiers)  # type: ignore[assignment]
    tg, tb, tl = tiers
    topology = Topology(
        gpus_per_node=_row([isl.gpus_per_node for isl in isls]),
        nodes=_row([isl.nodes for isl in isls]),
        domain_gpus=_row([float(isl.tiers[0].gpus or "inf") for isl in isls]),
        tier_gpus=tg,
        tier_bytes_s=tb,
        tier_latency_s=tl,
    )
    layout = Layout(
        tp=_row([isl.parallelism.tp for isl in isls]),
        pp=_row([isl.parallelism.pp for isl in isls]),
        dp=_row([isl.dp for isl in isls]),
        cp=_row([isl.parallelism.cp for isl in isls]),
        ep=_row([isl.parallelism.ep for isl in isls]),
        sequence_parallel=_row([isl.parallelism.sequence_parallel for isl in isls]),
        virtual_stages=_row([isl.parallelism.virtual_stages for isl in isls]),
        tp_comm_overlap=_row([isl.parallelism.tp_comm_overlap for isl in isls]),
        dp_comm_overlap=_row([isl.parallelism.dp_comm_overlap for isl in isls]),
        sharding=_row([table.code("sharding", isl.sharding, isl.sharding_options) for isl in isls]),
        schedule=_row([table.code("schedule", isl.schedule, isl.schedule_options) for isl in isls]),
    )
    net = res.network
    network = Network(
        wan_bytes_s=_row([net.bandwidth_gb_s * 1e9 * net.efficiency if net is not None else 1.0] * n),
        wan_latency_s=_row([net.latency_us * 1e-6 if net is not None else 0.0] * n),
        sync=_row([table.code("sync", res.sync, res.sync_options)])
        if scalar
        else np.asarray([[table.code("sync", res.sync, res.sync_options)]]),
    )
    return ModelInputs(
        model=model, training=training, hardware=hardware, topology=topology, layout=layout, network=network
    ), table
