"""Words for the report: what each breakdown term is, the regime, the bottleneck sentence, and
the notes on assumptions a reader cannot see in the numbers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "regime_of",
    "describe_bottleneck",
    "assumption_notes",
    "sync_notes",
    "hidden_notes",
    "hidden_share",
    "TERM_WORDS",
    "HIDDEN_NOTE_ABOVE",
    "HIDDEN_FLAG_ABOVE",
]

_COMM = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "island_sync")

TERM_WORDS = {
    "compute": "matrix multiplies and attention (compute-bound)",
    "memory_ops": "memory-bound elementwise kernels (norms, rotary, activations, residual adds, dropout; eager or fused) and fp8 casts",
    "tp_comm": "tensor-parallel communication",
    "cp_comm": "context-parallel (ring attention) communication",
    "ep_comm": "expert-parallel all-to-all",
    "pp_comm": "pipeline point-to-point transfers",
    "pp_bubble": "the pipeline bubble",
    "dp_comm": "data-parallel gradient / parameter communication",
    "offload": "activation copies to and from host memory (offload_layers) the compute does not hide",
    "optimizer": "the optimizer step",
    "island_sync": "synchronisation between islands over the WAN",
    "idle": "waiting for slower islands",
}


def regime_of(breakdown: dict[str, float]) -> str:
    """``compute-bound``, ``communication-bound``, ``memory-bound`` or ``bubble-bound``:
    whichever group of breakdown terms is largest (communication sums every
    exposed ``*_comm`` term, the island sync and the exposed activation offload: a transfer)."""
    get = breakdown.get
    compute = get("compute", 0.0) + get("optimizer", 0.0)
    # sum() itself (Python 3.12+ sums floats with Neumaier's compensation: a chain of + is not it)
    comm = sum(
        (
            get("tp_comm", 0.0),
            get("cp_comm", 0.0),
            get("ep_comm", 0.0),
            get("pp_comm", 0.0),
            get("dp_comm", 0.0),
            get("island_sync", 0.0),
            get("offload", 0.0),
        )
    )
    memory = get("memory_ops", 0.0)
    bubble = get("pp_bubble", 0.0) + get("idle", 0.0)
    # max() of the four groups in this order, written out: a later group only when it is larger
    regime, top = "compute-bound", compute
    if comm > top:
        regime, top = "communication-bound", comm
    if memory > top:
        regime, top = "memory-bound", memory
    if bubble > top:
        regime = "bubble-bound"
    return regime


def describe_bottleneck(report: Any) -> str:
    """``"dp_comm: data-parallel ... , 41% of the step"`` (``"infeasible"`` without a step)."""
    if not report.feasible or not report.bottleneck:
        return "infeasible"
    share = report.breakdown_s[report.bottleneck] / report.step_time_s
    return f"{report.bottleneck}: {TERM_WORDS.get(report.bottleneck, report.bottleneck)}, {share:.0%} of the step"


#: A note says how much communication was hidden when it exceeds this share of the compute
#: time: the prediction then rests on that overlap being achieved.
HIDDEN_NOTE_ABOVE = 0.8

#: The hidden share above which ``plan``'s table flags a plan: most of its compute time then
#: has communication running under it, so its step rests on an overlap no validated run at that
#: share confirms.
HIDDEN_FLAG_ABOVE = 0.5


def hidden_share(overlapped_s: Mapping[str, float], breakdown_s: Mapping[str, float]) -> float | None:
    """The time hidden under other work (``overlapped_s``, summed) over the exposed compute time
    (``breakdown_s["compute"]``); None without compute. Above 1 when more communication is
    hidden than there is compute (overlapped terms run in parallel with each other)."""
    compute = breakdown_s.get("compute", 0.0)
    return sum(overlapped_s.values()) / compute if compute > 0 else None


#: Sync options a local-step strategy (DiLoCo) defaults when the scenario leaves them out.
_SYNC_DEFAULTS = ("inner_steps", "compression_bits")


def assumption_notes(res: Any, report: Any) -> list[str]:
    """Notes on what the scenario did not say and the model assumed (``res`` the resolved
    scenario, ``report`` a feasible report): :func:`sync_notes` of ``res``, then
    :func:`hidden_notes` of ``report``."""
    return [*sync_notes(res), *hidden_notes(report)]


def sync_notes(res: Any) -> list[str]:
    """A local-step sync strategy's defaulted ``inner_steps`` / ``compression_bits``; that its
    effect on the tokens needed for a given quality is not priced (Douillard et al. 2023,
    arXiv:2311.08105, measure it against synchronous training). Of ``res`` alone."""
    notes: list[str] = []
    opts, given = res.sync_options, res.scenario.sync.options
    if len(res.islands) > 1 and hasattr(opts, "inner_steps"):
        name = res.scenario.sync.strategy
        assumed = [
            f"sync.{k} = {getattr(opts, k)}" for k in _SYNC_DEFAULTS if hasattr(opts, k) and k not in given
        ]
        if assumed:
            it = "them" if len(assumed) > 1 else "it"
            notes.append(
                f"{' and '.join(assumed)} assumed ({name}'s default; the scenario does not set {it})"
            )
        notes.append(
            f"convergence not priced: {name} with {opts.inner_steps} local steps may need more "
            "tokens than synchronous training to reach the same loss; wall-clock and cost are for "
            "training.tokens as given"
        )
    return notes


def hidden_notes(report: Any) -> list[str]:
    """Communication hidden under more than :data:`HIDDEN_NOTE_ABOVE` of the compute time (of a
    feasible ``report``)."""
    notes: list[str] = []
    hidden = sum(report.overlapped_s.values())
    compute = report.breakdown_s.get("compute", 0.0)
    # hidden_share's figure, its sum once: that sum over the compute, None without compute
    if compute > 0 and hidden / compute > HIDDEN_NOTE_ABOVE:
        terms = ", ".join(f"{k} {v:.3f} s" for k, v in report.overlapped_s.items() if v > 0)
        notes.append(
            f"{hidden:.3f} s of communication per step is hidden under other work ({hidden / compute:.0%} of "
            f"the {compute:.3f} s of compute: {terms}); the step assumes that overlap is achieved "
            f"(none: up to {report.step_time_s + hidden:.3f} s)"
        )
    return notes
