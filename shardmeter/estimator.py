"""The Estimator: resolve a scenario's part names against a registry, build the
input arrays, evaluate, and produce a :class:`~shardmeter.report.Report`.

An Estimator is assembled from registered parts and can be recomposed in code
without touching the registry::

    est = Estimator()                                   # installed plugins
    est = est.with_part("interconnect", my_link)        # add or replace a part
    est = est.with_level("inter_node", "roce-400g")     # swap one topology level
    est = est.with_cost_source("owned")                 # a different price
    report = est.estimate(scenario)
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs
import numpy as np

from .convert import structure_record
from .errors import ScenarioError
from .model.step import INPUTS, evaluate
from .plugins_core import Registry, get_registry
from .records import CostSource, HardwareProfile, Interconnect, ShardingStrategy, PipelineSchedule, SyncStrategy
from .scenario import Scenario, load_scenario

__all__ = ["Estimator", "ResolvedIsland", "estimate"]

_RECOMPUTE = {"none": 0, "selective": 1, "full": 2}
_KIND_CLS = {"hardware": HardwareProfile, "interconnect": Interconnect, "cost": CostSource}


@attrs.frozen
class ResolvedIsland:
    """One island with every part resolved to a record."""

    name: str
    gpu: HardwareProfile
    nodes: int
    gpus_per_node: int
    intra: Interconnect
    inter: Interconnect | None
    nics_per_node: int
    cost: CostSource | None
    parallelism: Any
    sharding: ShardingStrategy
    schedule: PipelineSchedule
    dp: int


def _resolve_part(reg: Registry, kind: str, ref: Any, path: str, file: str | None):
    cls = _KIND_CLS[kind]
    if isinstance(ref, str):
        return reg.get(kind, ref, path=path, file=file)
    if isinstance(ref, Mapping):
        ref = dict(ref)
        name = ref.get("name")
        if name is None:
            return structure_record(ref, cls, path=path, file=file)
        if not isinstance(name, str):
            raise ScenarioError("expected a string", path=f"{path}.name", file=file)
        base = reg.get(kind, name, path=f"{path}.name", file=file)
        merged = attrs.asdict(base, recurse=False)
        merged.update(ref)  # unknown override keys are rejected by the strict converter
        return structure_record(merged, cls, path=path, file=file)
    raise ScenarioError("expected a part name or an inline table { name = ... }", path=path, file=file)


def _option_values(record, given: Mapping[str, Any], where: str, file: str | None) -> dict[str, Any]:
    """A strategy's options: defaults overridden by the scenario, type-checked against the default."""
    out = dict(record.options)
    for k, v in given.items():
        if k not in record.options:
            continue
        default = record.options[k]
        if isinstance(default, bool):
            ok = isinstance(v, bool)
        elif isinstance(default, int):
            ok = isinstance(v, int) and not isinstance(v, bool) and (v >= 1 or (default < 1 and v >= 0))
        elif isinstance(default, float):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        else:
            ok = isinstance(v, type(default))
        if not ok:
            want = ("true or false" if isinstance(default, bool) else
                    "an integer >= 1" if isinstance(default, int) and default >= 1 else
                    "an integer >= 0" if isinstance(default, int) else "a number >= 0")
            raise ScenarioError(f"expected {want}, got {v!r}", path=f"{where}.{k}", file=file)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 2**40:  # an overflow, not a plan
            raise ScenarioError(f"{v!r} is absurdly large (limit {2**40})", path=f"{where}.{k}", file=file)
        out[k] = v
    return out


class Estimator:
    """Predicts one scenario (or a batch of plans) from registered parts."""

    def __init__(self, registry: Registry | None = None, *, levels: Mapping[str, Any] | None = None,
                 cost_source: str | CostSource | None = None):
        self.registry = registry if registry is not None else get_registry()
        self._levels = dict(levels or {})
        self._cost = cost_source

    # -- recomposition -----------------------------------------------------------------------
    def with_part(self, kind: str, record) -> "Estimator":
        """A copy whose registry also holds (or replaces) ``record`` of ``kind``."""
        return Estimator(self.registry.override(kind, record), levels=self._levels, cost_source=self._cost)

    def with_level(self, level: str, link: str | Interconnect) -> "Estimator":
        """A copy that prices topology ``level`` (``"intra_node"``, ``"inter_node"`` or
        ``"network"``) with ``link`` on every island, whatever the scenario says."""
        if level not in ("intra_node", "inter_node", "network"):
            raise ValueError(f"unknown topology level {level!r}")
        levels = dict(self._levels)
        levels[level] = link
        return Estimator(self.registry, levels=levels, cost_source=self._cost)

    def with_cost_source(self, cost: str | CostSource) -> "Estimator":
        """A copy that prices every island with ``cost``."""
        return Estimator(self.registry, levels=self._levels, cost_source=cost)

    # -- resolution --------------------------------------------------------------------------
    def load(self, source, overrides=()) -> Scenario:
        if isinstance(source, Scenario):
            return source
        return load_scenario(source, overrides=overrides, registry=self.registry)

    def _link(self, ref, path, file):
        if isinstance(ref, Interconnect):
            return ref
        return _resolve_part(self.registry, "interconnect", ref, path, file)

    def resolve(self, sc: Scenario) -> list[ResolvedIsland]:
        """Every island's parts as records (raises :class:`ScenarioError` on unknown names)."""
        reg, file = self.registry, sc.file
        out = []
        for i, isl in enumerate(sc.islands):
            where = f"island[{i}]"
            gpu = _resolve_part(reg, "hardware", isl.gpu, f"{where}.gpu", file)
            gpn = isl.gpus_per_node or gpu.gpus_per_node
            intra_ref = self._levels.get("intra_node", isl.intra_node or gpu.intra_node or "pcie4")
            intra = self._link(intra_ref, f"{where}.intra_node", file)
            inter_ref = self._levels.get("inter_node", isl.inter_node or gpu.inter_node)
            inter = self._link(inter_ref, f"{where}.inter_node", file) if inter_ref else None
            if inter is None and isl.nodes > 1:
                raise ScenarioError("required with more than one node (no default for this GPU)",
                                    path=f"{where}.inter_node", file=file)
            nics = isl.nics_per_node or gpu.nics_per_node or gpn
            cost_ref = self._cost if self._cost is not None else (isl.price or "cloud-on-demand")
            if isinstance(cost_ref, CostSource):
                cost = cost_ref
            elif cost_ref == "cloud-on-demand" and "cloud-on-demand" not in reg.names("cost"):
                cost = None
            else:
                cost = _resolve_part(reg, "cost", cost_ref, f"{where}.price", file)
            par = isl.parallelism or sc.parallelism
            ppath = f"{where}.parallelism" if isl.parallelism else "parallelism"
            sharding = reg.get("sharding", par.sharding, path=f"{ppath}.sharding", file=file)
            schedule = reg.get("schedule", par.schedule, path=f"{ppath}.schedule", file=file)
            dp = par.dp or max(1, (isl.nodes * gpn) // (par.tp * par.pp * par.cp))
            out.append(ResolvedIsland(isl.name, gpu, isl.nodes, gpn, intra, inter, nics, cost, par, sharding,
                                      schedule, dp))
        return out

    def sync_strategy(self, sc: Scenario) -> tuple[SyncStrategy, dict[str, Any]]:
        rec = self.registry.get("sync", sc.sync.strategy, path="sync.strategy", file=sc.file)
        return rec, _option_values(rec, sc.sync.options, "sync", sc.file)

    def network_link(self, sc: Scenario) -> Interconnect | None:
        if len(sc.islands) < 2:
            if sc.network is not None and "network" not in self._levels:  # unused, but must be well-formed
                self._link(sc.network.link, "network.link", sc.file)
            return None
        ref = self._levels.get("network", sc.network.link if sc.network else "internet")
        return self._link(ref, "network.link", sc.file)

    # -- arrays --------------------------------------------------------------------------------
    def inputs(self, sc: Scenario) -> dict[str, np.ndarray]:
        """Input arrays of shape (1, islands) for :func:`shardmeter.model.step.evaluate`."""
        islands = self.resolve(sc)
        sync, opts = self.sync_strategy(sc)
        net = self.network_link(sc)
        m, t = sc.model, sc.training
        cols: dict[str, list] = {k: [] for k in INPUTS}
        for isl in islands:
            par, gpu = isl.parallelism, isl.gpu
            inter = isl.inter or isl.intra
            row = {
                "L": m.layers, "h": m.hidden, "heads": m.heads, "kv_heads": m.n_kv_heads,
                "q_dim": m.heads * m.d_head, "kv_dim": m.n_kv_heads * m.d_head, "ffn": m.d_ffn,
                "swiglu": m.ffn == "swiglu", "V": m.vocab, "s": m.seq_len, "tied": m.tied_embeddings,
                "E": m.experts, "k_top": m.experts_per_token, "causal": m.causal, "dropout": m.dropout,
                "capacity": m.capacity_factor,
                "gbs": t.global_batch, "mbs": t.micro_batch, "recompute": _RECOMPUTE[t.recompute],
                "materialized": t.attention == "materialized", "w_bytes": 4.0 if t.precision in ("fp32", "tf32")
                else 2.0, "peak": gpu.peak(t.precision) * 1e12,
                "peak16": gpu.peak("bf16" if t.precision in ("fp8", "bf16") else t.precision) * 1e12,
                "fp8": t.precision == "fp8" and "fp8" in gpu.peak_tflops,
                "mem": gpu.memory_gb * 1e9, "hbm": gpu.memory_bandwidth_gb_s * 1e9,
                "gemm_eff": (gpu.matmul_efficiency_fp8 or gpu.matmul_efficiency) if t.precision == "fp8"
                else gpu.matmul_efficiency, "att_eff": (gpu.attention_efficiency_flash2 or gpu.attention_efficiency)
                if t.attention == "flash2" else gpu.attention_efficiency, "hbm_eff": gpu.hbm_efficiency, "sms": gpu.sm_count,
                "gpn": isl.gpus_per_node, "nodes": isl.nodes,
                "bw0": isl.intra.bandwidth_gb_s * 1e9 * isl.intra.efficiency,
                "lat0": isl.intra.latency_us * 1e-6,
                "bw1": inter.bandwidth_gb_s * 1e9 * inter.efficiency
                * (isl.nics_per_node / isl.gpus_per_node if inter.kind == "network" else 1.0),
                "lat1": inter.latency_us * 1e-6,
                "tp": par.tp, "pp": par.pp, "dp": isl.dp, "cp": par.cp, "ep": par.ep,
                "sp": par.sequence_parallel, "v": par.virtual_stages,
                "sched_all": isl.schedule.in_flight == "all", "over_v": isl.schedule.bubble_over_virtual,
                "bubble_frac": isl.schedule.bubble_fraction,
                "sh_opt": isl.sharding.shard_optimizer, "sh_grad": isl.sharding.shard_gradients,
                "sh_param": isl.sharding.shard_parameters, "sh_node": isl.sharding.shard_group == "node",
                "gather_layer": isl.sharding.gather_per_layer, "flat": isl.sharding.flat_collectives, "tp_ovl": par.tp_comm_overlap,
                "dp_ovl": par.dp_comm_overlap,
                "wan_bw": (net.bandwidth_gb_s * 1e9 * net.efficiency) if net else 1.0,
                "wan_lat": (net.latency_us * 1e-6) if net else 0.0,
                "local_steps": sync.local_steps and len(islands) > 1,
                "H": opts.get("inner_steps", 1) if sync.local_steps else 1,
                "bits": opts.get("compression_bits", 16), "F": opts.get("fragments", 1),
                "ovl_steps": opts.get("overlap_steps", 0),
                "outer_bytes": sync.outer_state_bytes_per_param if len(islands) > 1 else 0.0,
            }
            for k in INPUTS:
                cols[k].append(row[k])
        return {k: np.asarray([v]) for k, v in cols.items()}

    # -- estimate ------------------------------------------------------------------------------
    def estimate(self, source, overrides=()):
        """Predict a scenario (a :class:`Scenario`, a path or a dict) -> :class:`Report`."""
        from .report import build_report

        sc = self.load(source, overrides)
        islands = self.resolve(sc)
        out = evaluate(self.inputs(sc))
        return build_report(sc, islands, out, self, row=0)


def estimate(scenario, *, overrides=(), registry: Registry | None = None):
    """Predict one scenario with the installed plugins -> :class:`~shardmeter.report.Report`."""
    return Estimator(registry).estimate(scenario, overrides)
