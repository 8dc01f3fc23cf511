"""Frozen attrs records that plugins contribute: hardware, links, strategies, cost sources.

Units live in the field names (see CONTRIBUTING.md, "Units"):

* ``memory_gb`` decimal gigabytes (1e9 bytes), ``memory_bandwidth_gb_s`` and
  ``bandwidth_gb_s`` decimal GB/s, **one direction**;
* ``peak_tflops`` dense (not 2:4-sparse) TFLOP/s per precision;
* ``latency_us`` microseconds; prices in US dollars.

Every record carries a ``name`` (unique per kind) and a free-text ``source``
citing where its figures come from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from shardmeter.frozen import FrozenDict, freeze
from shardmeter.record_checks import PRECISIONS, _fraction, _name, _nonneg, _peaks, _positive, _prices

__all__ = [
    "HardwareProfile",
    "Interconnect",
    "CostSource",
    "ShardingStrategy",
    "PipelineSchedule",
    "SyncStrategy",
    "PRECISIONS",
    "PART_KINDS",
]


def _freeze_map(value: Mapping[str, float] | None) -> FrozenDict[str, float]:
    return freeze(value)


@attrs.frozen(kw_only=True)
class HardwareProfile:
    """One accelerator type.

    Required: ``name``, ``memory_gb``, ``memory_bandwidth_gb_s``, ``peak_tflops``.

    Defaults of the optional fields:

    * ``matmul_efficiency`` = 0.80: achievable fraction of the dense peak for a
      large, well-shaped GEMM (the "MAMF" of ml-engineering's
      ``compute/accelerator`` table: A100 SXM 86.9 %, H100 80.3 %, B200 77.6 %).
    * ``matmul_efficiency_fp8`` = None: the same for FP8 GEMMs (ml-engineering's
      MAMF table: H100 70.9 %, H200 73.4 %, B200 76.3 %); None = ``matmul_efficiency``.
    * ``attention_efficiency`` = 0.30 (about the mean of the fitted GPUs): achieved fraction of the 16-bit dense
      peak by fused (flash) attention, forward and backward (Dao 2023,
      FlashAttention-2: 50-73 % on A100; ~35-40 % for FA2 on H100, Shah et al.
      2024, FlashAttention-3: up to 75 % on H100). It is the long-sequence value of the
      GPU's current-generation kernel (FlashAttention-2 on Ampere; FlashAttention-3 or
      cuDNN fused attention on Hopper and Blackwell); the model lowers it for short
      sequences (``ATTENTION_RAMP_KEYS``).
    * ``attention_efficiency_flash2`` = None: the same for the FlashAttention-2 kernels
      (``training.attention = "flash2"``), written for Ampere and not using Hopper's
      asynchronous tensor cores, so well below the native kernel there (FlashAttention-3,
      Shah et al. 2024: FA2 reaches about 35 % of H100 peak against 75 %); None = the
      GPU's ``attention_efficiency`` (Ampere and older, where FA2 is the native kernel).
    * ``hbm_efficiency`` = 0.90: achievable fraction of HBM bandwidth for
      streaming kernels (scaling-book measures ~94 % on H100).
    * ``sm_count`` = 0 (unknown): streaming multiprocessors, used for GEMM
      wave quantisation; 0 disables that term.
    * ``tile_m`` x ``tile_n`` = 128 x 128: the GEMM output tile one SM computes
      per wave (CUTLASS/cuBLAS default class for the generation).
    * ``gpus_per_node`` = 8, ``intra_node`` / ``inter_node`` / ``nics_per_node``:
      the platform's usual links (used when a scenario leaves them out).
    * ``tdp_w``: board power for the ``owned`` cost source's energy term.
    * ``host_link_gb_s`` = 31.5: the GPU's link to host memory, one direction, for
      activation offload: PCIe Gen4 x16 31.5 GB/s, Gen5 x16 63, NVLink-C2C (GH200, GB200)
      450 (ml-engineering ``network`` chapter; PCI-SIG lane rates).
    * ``compute_capability`` = None: an NVIDIA GPU's CUDA compute capability, as NVIDIA's
      CUDA GPUs page lists it (https://developer.nvidia.com/cuda-gpus: V100 7.0, A100 8.0,
      A10G and RTX 3090 8.6, L4, L40S and RTX 4090 8.9, H100, H200 and GH200 9.0, B200 and
      GB200 10.0); None for other vendors. Framework profiles read it to pick what a stack does
      per generation (torchtitan runs cuDNN attention from 10.0; ``docs/frameworks.md``).
    """

    name: str = attrs.field(validator=_name)
    memory_gb: float = attrs.field(validator=_positive)
    memory_bandwidth_gb_s: float = attrs.field(validator=_positive)
    peak_tflops: Mapping[str, float] = attrs.field(converter=_freeze_map, validator=_peaks)
    vendor: str = ""
    matmul_efficiency: float = attrs.field(default=0.80, validator=_fraction)
    matmul_efficiency_fp8: float | None = attrs.field(default=None, validator=_fraction)
    attention_efficiency: float = attrs.field(default=0.30, validator=_fraction)
    attention_efficiency_flash2: float | None = attrs.field(default=None, validator=_fraction)
    hbm_efficiency: float = attrs.field(default=0.90, validator=_fraction)
    sm_count: int = attrs.field(default=0, validator=_nonneg)
    tile_m: int = attrs.field(default=128, validator=_positive)
    tile_n: int = attrs.field(default=128, validator=_positive)
    tdp_w: float | None = attrs.field(default=None, validator=_positive)
    host_link_gb_s: float = attrs.field(default=31.5, validator=_positive)
    compute_capability: float | None = attrs.field(default=None, validator=_positive)
    gpus_per_node: int = attrs.field(default=8, validator=_positive)
    intra_node: str | None = None
    inter_node: str | None = None
    nics_per_node: int | None = attrs.field(default=None, validator=_positive)
    source: str = ""

    def peak(self, precision: str) -> float:
        """Dense peak TFLOP/s for a training precision.

        ``fp8`` falls back to ``bf16``/``fp16`` on parts without FP8 units and
        ``bf16`` falls back to ``fp16`` (V100 has no BF16); ``tf32`` falls back
        to ``fp32``. Returns 0.0 when nothing applies (the plan is infeasible).
        """
        order = {
            "fp8": ("fp8", "bf16", "fp16"),
            "bf16": ("bf16", "fp16"),
            "fp16": ("fp16", "bf16"),
            "tf32": ("tf32", "fp32"),
            "fp32": ("fp32",),
        }[precision]
        for p in order:
            if p in self.peak_tflops:
                return float(self.peak_tflops[p])
        return 0.0


@attrs.frozen(kw_only=True)
class Interconnect:
    """One link technology at one level of the topology.

    Required: ``name``, ``bandwidth_gb_s`` (one direction), ``latency_us``.

    ``bandwidth_gb_s`` is per GPU for scale-up fabrics (``kind = "scale-up"``:
    NVLink, xGMI, PCIe), per NIC for scale-out networks (``kind = "network"``;
    a node's GPUs share ``nics_per_node`` NICs), and per island uplink for
    wide-area links (``kind = "wan"``). ``latency_us`` is the latency of one
    step of a collective algorithm on this link (NCCL's ``hwLat``, or the
    one-way WAN latency).

    * ``efficiency`` = 0.80: achievable fraction of ``bandwidth_gb_s`` for
      large collectives (nccl-tests busbw / wire rate: A100 NVLink 78 %, H200
      ring 82 %, NDR 46-48 of 50 GB/s).
    * ``egress_usd_per_gb`` = 0: price of data leaving a site over this link.
    """

    name: str = attrs.field(validator=_name)
    bandwidth_gb_s: float = attrs.field(validator=_positive)
    latency_us: float = attrs.field(validator=_nonneg)
    kind: str = attrs.field(default="network", validator=attrs.validators.in_(("scale-up", "network", "wan")))
    efficiency: float = attrs.field(default=0.80, validator=_fraction)
    egress_usd_per_gb: float = attrs.field(default=0.0, validator=_nonneg)
    source: str = ""


@attrs.frozen(kw_only=True)
class CostSource:
    """A price for GPU time, and for traffic leaving an island.

    The GPU-hour price is the sum of three parts, any of which may be zero:

    * rent: ``usd_per_gpu_hour`` (one price for every GPU) or ``gpu_prices``
      (per GPU name; ``usd_per_gpu_hour`` wins when both are set);
    * ownership: ``purchase_usd`` (per GPU name) over ``lifetime_years``
      (8766 hours a year);
    * energy: ``tdp_w`` x ``utilization`` x ``pue`` x ``usd_per_kwh``.

    ``egress_usd_per_gb`` prices bytes an island sends to other islands.
    ``date`` says when the prices were read.
    """

    name: str = attrs.field(validator=_name)
    usd_per_gpu_hour: float | None = attrs.field(default=None, validator=_nonneg)
    gpu_prices: Mapping[str, float] = attrs.field(factory=dict, converter=_freeze_map, validator=_prices)
    purchase_usd: Mapping[str, float] = attrs.field(factory=dict, converter=_freeze_map, validator=_prices)
    lifetime_years: float = attrs.field(default=4.0, validator=_positive)
    usd_per_kwh: float = attrs.field(default=0.0, validator=_nonneg)
    pue: float = attrs.field(default=1.0, validator=_positive)
    utilization: float = attrs.field(default=0.8, validator=_nonneg)
    egress_usd_per_gb: float = attrs.field(default=0.0, validator=_nonneg)
    date: str = ""
    source: str = ""

    def prices_hardware(self) -> bool:
        """Whether this source prices GPU time (rent or purchase) at all; a source
        that does not is *energy-only by design* (or egress-only)."""
        return self.usd_per_gpu_hour is not None or bool(self.gpu_prices) or bool(self.purchase_usd)

    def gpu_hour_usd(self, gpu: HardwareProfile) -> float:
        """US dollars per GPU-hour for ``gpu`` (rent + amortised purchase + energy).

        Returns ``nan`` (cost unknown; the report's ``cost_usd`` is then null)
        when any part that applies is unknown:

        * the source prices GPU time (:meth:`prices_hardware`) but has neither a
          rent nor a purchase price for this GPU -- it is never priced at energy
          only by accident;
        * the source charges energy (``usd_per_kwh > 0``) but the GPU has no
          ``tdp_w``;
        * the source prices nothing for GPU time at all (no rent, no purchase,
          no energy).

        A source with no rent or purchase prices but ``usd_per_kwh > 0`` is
        energy-only by design and returns the energy term alone.
        """
        rent = self.usd_per_gpu_hour if self.usd_per_gpu_hour is not None else self.gpu_prices.get(gpu.name)
        buy = self.purchase_usd.get(gpu.name)
        own = buy / (self.lifetime_years * 8766.0) if buy is not None else None
        if rent is None and own is None and self.prices_hardware():
            return float("nan")
        energy = 0.0
        if self.usd_per_kwh:
            if not gpu.tdp_w:
                return float("nan")
            energy = gpu.tdp_w / 1000.0 * self.utilization * self.pue * self.usd_per_kwh
        elif rent is None and own is None:
            return float("nan")
        return (rent or 0.0) + (own or 0.0) + energy


def _options(value: Mapping[str, object] | None) -> FrozenDict[str, object]:
    return freeze(value)


@attrs.frozen(kw_only=True)
class ShardingStrategy:
    """How model state is partitioned over the data-parallel group (ZeRO / FSDP).

    The model reads these declarative fields (vectorised over candidate plans):

    * ``shard_optimizer`` / ``shard_gradients`` / ``shard_parameters``: which of
      the ZeRO stages' states are divided by the sharding group (Rajbhandari et
      al. 2020, ZeRO-1/2/3).
    * ``shard_group``: ``"dp"`` (the whole data-parallel group) or ``"node"``
      (HSDP: shard inside a node, replicate across nodes).
    * ``gather_per_layer``: parameters are all-gathered per layer in forward
      and again in backward (ZeRO-3 / FSDP), else once per step (ZeRO-1/2).
    * ``flat_collectives``: those per-layer gathers run as one flat ring over
      the whole sharding group, so each GPU's full share crosses its NIC
      (DeepSpeed ZeRO-3 as measured by Narayanan et al. 2021, Table 2), rather
      than NCCL's node-aggregated hierarchical algorithm (PyTorch FSDP).
    * ``options``: extra ``[parallelism]`` keys this strategy reads, with defaults.
    """

    name: str = attrs.field(validator=_name)
    shard_optimizer: bool = False
    shard_gradients: bool = False
    shard_parameters: bool = False
    shard_group: str = attrs.field(default="dp", validator=attrs.validators.in_(("dp", "node")))
    gather_per_layer: bool = False
    flat_collectives: bool = False
    options: Mapping[str, object] = attrs.field(factory=dict, converter=_options)
    description: str = ""
    source: str = ""


@attrs.frozen(kw_only=True)
class PipelineSchedule:
    """A pipeline-parallel schedule (Narayanan et al. 2021, Sec. 2.2).

    * ``bubble_over_virtual``: the bubble (p-1)(t_f+t_b) is divided by the
      number of virtual stages v (interleaved 1F1B).
    * ``in_flight``: micro-batches whose activations the first stage holds:
      ``"pipeline"`` (min(m, p), 1F1B) or ``"all"`` (m, GPipe).
    * ``bubble_fraction``: multiplier on the classic bubble (1 for GPipe/1F1B;
      a zero-bubble schedule would set less).
    """

    name: str = attrs.field(validator=_name)
    bubble_over_virtual: bool = False
    in_flight: str = attrs.field(default="pipeline", validator=attrs.validators.in_(("pipeline", "all")))
    bubble_fraction: float = attrs.field(default=1.0, validator=_nonneg)
    options: Mapping[str, object] = attrs.field(factory=dict, converter=_options)
    description: str = ""
    source: str = ""


@attrs.frozen(kw_only=True)
class SyncStrategy:
    """How islands synchronise (only with two islands or more).

    * ``local_steps``: ``False`` = one global data-parallel all-reduce every
      step (``allreduce``); ``True`` = DiLoCo: ``inner_steps`` local steps,
      then an outer all-reduce of pseudo-gradients at ``compression_bits``.
    * ``outer_state_bytes_per_param``: memory of the outer optimizer (DiLoCo:
      fp32 Nesterov momentum + fp32 copy of the weights = 8).
    * ``options``: the ``[sync]`` keys it reads, with their defaults.
    """

    name: str = attrs.field(validator=_name)
    local_steps: bool = False
    outer_state_bytes_per_param: float = attrs.field(default=0.0, validator=_nonneg)
    options: Mapping[str, object] = attrs.field(factory=dict, converter=_options)
    description: str = ""
    source: str = ""


#: What each declarative record is sugar for: the bundled part class that implements its flags
#: (the core names bundled code only here, as dotted strings).
SUGAR: dict[str, Any] = {
    "ShardingStrategy": "shardmeter.strategies.zero:ZeroSharding",
    "PipelineSchedule": "shardmeter.strategies.schedules:ClassicSchedule",
    "SyncStrategy": ("shardmeter.strategies.sync:GlobalAllReduce", "shardmeter.strategies.sync:DiLoCo"),
}


def _load(dotted: str) -> Callable[..., object]:
    import importlib

    mod, _, attr = dotted.partition(":")
    return getattr(importlib.import_module(mod), attr)


def as_part(record: Any) -> object:  # any part or record: matched by its class's name
    """The behaviour part a declarative strategy record stands for (a part is returned as is).

    ``ShardingStrategy`` -> ZeRO-family sharding with its flags, ``PipelineSchedule`` ->
    the classic GPipe/1F1B/interleaved schedule, ``SyncStrategy`` -> the global all-reduce or,
    with ``local_steps``, DiLoCo; the record's ``options`` table becomes an options class.
    """
    from shardmeter.parts import make_options_class

    kind = type(record).__name__
    if kind not in SUGAR or not attrs.has(type(record)):
        return record
    fields = attrs.asdict(record, recurse=False)
    opts = make_options_class(record.name, fields.pop("options"))
    if kind == "SyncStrategy":
        local = fields.pop("local_steps")
        outer = fields.pop("outer_state_bytes_per_param")
        cls = _load(SUGAR[kind][1] if local else SUGAR[kind][0])
        extra = {"outer_state_bytes_per_param": outer} if local else {}
        return cls(
            name=record.name, options=opts, description=record.description, source=record.source, **extra
        )
    return _load(SUGAR[kind])(options=opts, **fields)


def part_kinds() -> dict[str, tuple[tuple[type, ...], str]]:
    """Registry namespace -> (classes it accepts, hook that contributes them)."""
    from shardmeter.parts import (
        ConvergencePart,
        FailurePart,
        FrameworkPart,
        SchedulePart,
        ShardingPart,
        SyncPart,
        VariabilityPart,
    )

    return {
        "hardware": ((HardwareProfile,), "shardmeter_hardware_profiles"),
        "interconnect": ((Interconnect,), "shardmeter_interconnect_models"),
        "sharding": ((ShardingPart, ShardingStrategy), "shardmeter_sharding_strategies"),
        "schedule": ((SchedulePart, PipelineSchedule), "shardmeter_pipeline_schedules"),
        "sync": ((SyncPart, SyncStrategy), "shardmeter_sync_strategies"),
        "cost": ((CostSource,), "shardmeter_cost_sources"),
        # a behaviour part only, with no declarative record as sugar
        "convergence": ((ConvergencePart,), "shardmeter_convergence_models"),
        "framework": ((FrameworkPart,), "shardmeter_frameworks"),
        "failures": ((FailurePart,), "shardmeter_failure_models"),
        "variability": ((VariabilityPart,), "shardmeter_variability_models"),
    }


#: The hook that yielded all three strategy kinds before they were split (issue 10); schedules
#: and sync strategies from it still register, with a DeprecationWarning, for one release.
LEGACY_STRATEGY_HOOK = "shardmeter_sharding_strategies"

#: Part kinds: registry namespace -> (declarative record class, hook that contributes it).
PART_KINDS = {
    "hardware": (HardwareProfile, "shardmeter_hardware_profiles"),
    "interconnect": (Interconnect, "shardmeter_interconnect_models"),
    "sharding": (ShardingStrategy, "shardmeter_sharding_strategies"),
    "schedule": (PipelineSchedule, "shardmeter_pipeline_schedules"),
    "sync": (SyncStrategy, "shardmeter_sync_strategies"),
    "cost": (CostSource, "shardmeter_cost_sources"),
    # a behaviour part (shardmeter.parts.ConvergencePart) with no declarative record
    "convergence": (object, "shardmeter_convergence_models"),
    # a software-stack profile (shardmeter.parts.FrameworkPart), also with no record
    "framework": (object, "shardmeter_frameworks"),
    # failure and variability models (shardmeter.parts.FailurePart, VariabilityPart), no record
    "failures": (object, "shardmeter_failure_models"),
    "variability": (object, "shardmeter_variability_models"),
}
