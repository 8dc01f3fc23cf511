"""Words for the report: what each breakdown term is, the regime, the bottleneck sentence."""

from __future__ import annotations

from typing import Any

__all__ = ["regime_of", "describe_bottleneck", "TERM_WORDS"]

_COMM = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "island_sync")

TERM_WORDS = {
    "compute": "matrix multiplies and attention (compute-bound)",
    "memory_ops": "memory-bound elementwise kernels (norms, activations, dropout)",
    "tp_comm": "tensor-parallel communication",
    "cp_comm": "context-parallel (ring attention) communication",
    "ep_comm": "expert-parallel all-to-all",
    "pp_comm": "pipeline point-to-point transfers",
    "pp_bubble": "the pipeline bubble",
    "dp_comm": "data-parallel gradient / parameter communication",
    "optimizer": "the optimizer step",
    "island_sync": "synchronisation between islands over the WAN",
    "idle": "waiting for slower islands",
}


def regime_of(breakdown: dict[str, float]) -> str:
    """``compute-bound``, ``communication-bound``, ``memory-bound`` or ``bubble-bound``:
    whichever group of breakdown terms is largest (communication sums every
    exposed ``*_comm`` term and the island sync)."""
    groups = {
        "compute-bound": breakdown.get("compute", 0.0) + breakdown.get("optimizer", 0.0),
        "communication-bound": sum(breakdown.get(k, 0.0) for k in _COMM),
        "memory-bound": breakdown.get("memory_ops", 0.0),
        "bubble-bound": breakdown.get("pp_bubble", 0.0) + breakdown.get("idle", 0.0),
    }
    return max(groups, key=lambda g: groups[g])


def describe_bottleneck(report: Any) -> str:
    """``"dp_comm: data-parallel ... , 41% of the step"`` (``"infeasible"`` without a step)."""
    if not report.feasible or not report.bottleneck:
        return "infeasible"
    share = report.breakdown_s[report.bottleneck] / report.step_time_s
    return f"{report.bottleneck}: {TERM_WORDS.get(report.bottleneck, report.bottleneck)}, {share:.0%} of the step"
