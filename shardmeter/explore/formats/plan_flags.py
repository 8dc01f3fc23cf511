"""What the plan table says about how far to trust each plan: its confidence band, its flags,
and the winner's caveats as ``estimate`` prints them.

Flags (:func:`plan_flags`):

* ``MFU>val``: the plan's MFU exceeds ``confidence.max_validated_mfu``, the highest MFU any
  validated run of its kind measured (``docs/scenario.md``, "Confidence"): the model promises
  more than anything it was checked against.
* ``hidden N%``: the plan's hidden share (:func:`~shardmeter.report.words.hidden_share`: the
  communication hidden under other work over the exposed compute time) exceeds
  :data:`~shardmeter.report.words.HIDDEN_FLAG_ABOVE` (50 %): most of its compute time has
  traffic running under it, and the step rests on that overlap being achieved.
* ``conv-extrap``: the plan's convergence factor (``report.quality.tokens_factor``) is
  extrapolated: ``quality.in_validity_range`` is false, the plan lies outside the published
  points of its convergence model (inner steps, replicas, parameters, compression bits below the
  published table, overlap) or of its critical-batch model (``docs/convergence.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardmeter.report.confidence import confidence_line
from shardmeter.report.words import HIDDEN_FLAG_ABOVE, hidden_share

__all__ = ["plan_flags", "band_cell", "flag_legend", "winner_caveats"]

#: A plan's report (a JSON object).
Doc = Mapping[str, Any]


def plan_flags(rep: Doc) -> list[str]:
    """The flags of report ``rep`` (``[]`` for none)."""
    out = []
    conf = rep.get("confidence") or {}
    ceiling, mfu = conf.get("max_validated_mfu"), rep.get("mfu")
    if ceiling is not None and mfu is not None and mfu > ceiling:
        out.append("MFU>val")
    share = hidden_share(rep.get("overlapped_s") or {}, rep.get("breakdown_s") or {})
    if share is not None and share > HIDDEN_FLAG_ABOVE:
        out.append(f"hidden {share:.0%}")
    quality = rep.get("quality") or {}
    if quality and quality.get("in_validity_range") is False:
        out.append("conv-extrap")
    return out


def band_cell(rep: Doc) -> str:
    """The band's cell: ``+/-N%`` (``-`` without a band)."""
    band = (rep.get("confidence") or {}).get("band_pct")
    return f"+/-{band:.0f}%" if band is not None else "-"


def flag_legend() -> list[str]:
    """The footnote that says what the flags mean."""
    return [
        "flags: MFU>val = MFU above the highest validated run of its kind (report.confidence."
        f"max_validated_mfu); hidden N% = communication hidden under compute, over {HIDDEN_FLAG_ABOVE:.0%} "
        "of the compute time (the step assumes that overlap is achieved); conv-extrap = the convergence "
        "factor is extrapolated beyond its published points (report.quality.outside); band = half-width of the "
        "80 % interval of the throughput (report.confidence.band_pct)",
    ]


def winner_caveats(best: Doc) -> list[str]:
    """The caveats ``estimate`` prints, for the winning plan: its confidence line and its notes
    (the report's ``notes`` and ``assumptions``)."""
    rep = best["report"]
    conf = rep.get("confidence") or {}
    notes = [*(rep.get("notes") or []), *(rep.get("assumptions") or [])]
    if not conf and not notes:
        return []
    out = ["", f"caveats of #{best.get('rank', 1)} (as estimate prints them):"]
    if conf:
        out.append(f"confidence: {confidence_line(conf)}")
    out.extend(f"note: {n}" for n in notes)
    return out
