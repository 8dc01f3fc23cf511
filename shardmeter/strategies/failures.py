"""Bundled failure models (``[reliability] model``): interruption rates from published fleet studies.

Each model is a :class:`FleetFailures`: a constant (exponential) interruption rate per GPU,
so a job's rate is its GPU count over ``gpu_mtbf_h`` (the contract's "job MTBF is
``gpu_mtbf_h x 3600 / GPUs``"), plus a planned-stop rate per GPU where the study counts one.
``gpu_mtbf_h`` and ``restart_s`` are options (``[reliability]`` keys) whose defaults are the
study's; a written key wins.

* ``llama3-h100``: Llama 3 405B pre-training (Dubey et al. 2024, "The Llama 3 Herd of Models",
  arXiv 2407.21783, Sec. 3.3.4 and Table 5): 466 job interruptions in a 54-day snapshot on
  16,384 H100 GPUs, 47 planned (automated maintenance) and 419 unexpected. Over the snapshot's
  16,384 x 54 x 24 = 21,233,664 GPU-hours that is one unexpected interruption per
  50,676.9 GPU-hours (``gpu_mtbf_h``) and 47 planned ones per 21.2 M GPU-hours.
  :data:`LLAMA3_CAUSES` is Table 5's count per cause (they add up to 419; the table prints
  30.1 % beside "Faulty GPU", 148, which is 35.3 % of 419: the counts are what is bundled).
* ``meta-rsc1-a100`` and ``meta-rsc2-a100``: Meta's two research clusters (Kokolis et al.
  2024, "Revisiting Reliability in Large-Scale Machine Learning Research Clusters", arXiv
  2410.21680, HPCA 2025): 6.50 (RSC-1) and 2.34 (RSC-2) failures per 1000 node-days, on
  nodes of 8 A100 GPUs, i.e. ``gpu_mtbf_h = 1000 x 24 x 8 / r_f``: 29,538 h and 82,051 h. The
  paper projects an MTTF of 1.8 h for a 16,384-GPU job on RSC-1 (2,048 nodes: 24 / (2.048 x
  6.50) h), which this model reproduces. No planned-stop rate is given.
* ``per-gpu``: the contract's example figures (``gpu_mtbf_h = 50000``), no planned stops.

``restart_s`` (detect, re-schedule, reload, warm up) defaults to the contract's 600 s for
every model: none of these studies states one restart time for a whole job.
"""

from __future__ import annotations

from typing import Any

import attrs

from shardmeter.parts import FailureInputs, FailurePart, FailureTerms

__all__ = [
    "FleetFailures",
    "fleet_options",
    "LLAMA3_GPUS",
    "LLAMA3_DAYS",
    "LLAMA3_UNEXPECTED",
    "LLAMA3_PLANNED",
    "LLAMA3_CAUSES",
    "RSC_FAILURES_PER_1000_NODE_DAYS",
    "RSC_GPUS_PER_NODE",
    "DEFAULT_RESTART_S",
    "bundled_failure_models",
]

# --- Llama 3, arXiv 2407.21783, Sec. 3.3.4 ---------------------------------------------------
LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54
LLAMA3_UNEXPECTED = 419
LLAMA3_PLANNED = 47
#: Table 5: root causes of the 419 unexpected interruptions (component, category, count).
LLAMA3_CAUSES: tuple[tuple[str, str, int], ...] = (
    ("Faulty GPU", "GPU", 148),
    ("GPU HBM3 Memory", "GPU", 72),
    ("Software Bug", "Dependency", 54),
    ("Network Switch/Cable", "Network", 35),
    ("Host Maintenance", "Unplanned Maintenance", 32),
    ("GPU SRAM Memory", "GPU", 19),
    ("GPU System Processor", "GPU", 17),
    ("NIC", "Host", 7),
    ("NCCL Watchdog Timeouts", "Unknown", 7),
    ("Silent Data Corruption", "GPU", 6),
    ("GPU Thermal Interface + Sensor", "GPU", 6),
    ("SSD", "Host", 3),
    ("Power Supply", "Host", 3),
    ("Server Chassis", "Host", 2),
    ("IO Expansion Board", "Host", 2),
    ("Dependency", "Dependency", 2),
    ("CPU", "Host", 2),
    ("System Memory", "Host", 2),
)
_LLAMA3_GPU_HOURS = LLAMA3_GPUS * LLAMA3_DAYS * 24.0

# --- Kokolis et al. 2024, arXiv 2410.21680 ---------------------------------------------------
#: Failures per 1000 node-days (the paper's r_f) of RSC-1 and RSC-2.
RSC_FAILURES_PER_1000_NODE_DAYS = {"rsc1": 6.50, "rsc2": 2.34}
#: GPUs per node on both clusters (8 x A100).
RSC_GPUS_PER_NODE = 8

#: The scenario contract's restart time (SCENARIO.md, ``[reliability] restart_s``).
DEFAULT_RESTART_S = 600.0


def _positive(inst: Any, attribute: Any, value: float) -> None:
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{attribute.name} must be a finite number > 0, got {value!r}")


def _non_negative(inst: Any, attribute: Any, value: float) -> None:
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


def fleet_options(name: str, gpu_mtbf_h: float, restart_s: float = DEFAULT_RESTART_S) -> type:
    """The ``[reliability]`` keys of a fleet model, with its study's defaults: ``gpu_mtbf_h``
    (hours between unexpected interruptions per GPU) and ``restart_s``."""
    fields = {
        "gpu_mtbf_h": attrs.field(default=float(gpu_mtbf_h), type=float, validator=_positive),
        "restart_s": attrs.field(default=float(restart_s), type=float, validator=_non_negative),
    }
    cls = "".join(w.capitalize() for w in name.replace("-", "_").split("_") if w) + "Options"
    return attrs.make_class(cls, fields, frozen=True, kw_only=True)


@attrs.frozen(kw_only=True)
class FleetFailures(FailurePart):
    """A constant interruption rate per GPU (exponential failures, as Young 1974 and Daly 2006
    assume): ``gpus / gpu_mtbf_h`` unexpected and ``gpus x planned_per_gpu_h`` planned
    interruptions per hour, each followed by ``restart_s``. ``causes``: the study's count per
    root cause (``(component, category, count)``), for the report's reader."""

    planned_per_gpu_h: float = 0.0
    causes: tuple[tuple[str, str, int], ...] = ()

    def terms(self, inp: FailureInputs, opts: Any) -> FailureTerms:
        return FailureTerms(
            failures_per_h=inp.gpus / opts.gpu_mtbf_h,
            planned_per_h=inp.gpus * self.planned_per_gpu_h,
            restart_s=inp.gpus * 0.0 + opts.restart_s,
        )


def _rsc(key: str) -> float:
    """An RSC cluster's ``gpu_mtbf_h``: GPU-hours per failure, ``1000 x 24 x 8 / r_f``."""
    return 1000.0 * 24.0 * RSC_GPUS_PER_NODE / RSC_FAILURES_PER_1000_NODE_DAYS[key]


def bundled_failure_models() -> list[FleetFailures]:
    """The bundled models (module docstring)."""
    llama_mtbf = _LLAMA3_GPU_HOURS / LLAMA3_UNEXPECTED
    return [
        FleetFailures(
            name="llama3-h100",
            options=fleet_options("llama3-h100", llama_mtbf),
            planned_per_gpu_h=LLAMA3_PLANNED / _LLAMA3_GPU_HOURS,
            causes=LLAMA3_CAUSES,
            description="Llama 3 405B pre-training on 16,384 H100: 419 unexpected interruptions (one per "
            f"{llama_mtbf:,.0f} GPU-hours) and 47 planned ones in 54 days; restart 600 s (the contract's).",
            source="Dubey et al. 2024, The Llama 3 Herd of Models (arXiv 2407.21783), Sec. 3.3.4, Table 5",
        ),
        FleetFailures(
            name="meta-rsc1-a100",
            options=fleet_options("meta-rsc1-a100", _rsc("rsc1")),
            description="Meta RSC-1 (16k A100): 6.50 failures per 1000 node-days of 8 GPUs (MTTF 1.8 h "
            "projected at 16,384 GPUs); restart 600 s (the contract's).",
            source="Kokolis et al. 2024, Revisiting Reliability in Large-Scale ML Research Clusters "
            "(arXiv 2410.21680)",
        ),
        FleetFailures(
            name="meta-rsc2-a100",
            options=fleet_options("meta-rsc2-a100", _rsc("rsc2")),
            description="Meta RSC-2 (8k A100): 2.34 failures per 1000 node-days of 8 GPUs; restart 600 s.",
            source="Kokolis et al. 2024, Revisiting Reliability in Large-Scale ML Research Clusters "
            "(arXiv 2410.21680)",
        ),
        FleetFailures(
            name="per-gpu",
            options=fleet_options("per-gpu", 50_000.0),
            description="A constant rate per GPU: gpu_mtbf_h = 50,000 h and restart_s = 600 s by default "
            "(the contract's example), no planned stops; set both from your own fleet.",
            source="SCENARIO.md [reliability] example",
        ),
    ]
