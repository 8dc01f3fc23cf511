"""How often the confidence band holds the measured value: its coverage.

* :func:`held_out_coverage`: the honest figure. Each bundled run with an out-of-sample residual
  (predicted by the efficiency fit that left its source group out; ``residuals.json``) is
  given the band an estimate of its features would get from a table without its group
  (:func:`~shardmeter.report.confidence.band_of` with ``exclude``: its neighbours, the
  envelope and the widening all as if the group had never been validated); it is inside when ``|measured / predicted - 1|``
  is at most that band.
* :func:`case_coverage`: the same test for the cases ``validate`` just predicted, each against
  its own report's band (in-sample where the case is a bundled run: its own residual is among
  its neighbours').

Both count runs (each once) and give the median band. A band of 80 % nominal coverage is
honest when about 80 % of the runs fall inside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from shardmeter.report import band as B
from shardmeter.report.confidence import band_of, validated_runs

__all__ = ["held_out_coverage", "case_coverage", "case_band", "BAND_FIELDS", "summary"]

#: The measured fields the band (of the throughput) is tested on: rates, and the step time.
BAND_FIELDS = ("tokens_per_s_per_gpu", "tokens_per_s", "model_tflops_per_gpu", "mfu", "step_time_s")


def summary(inside: Iterable[bool], bands: Iterable[float]) -> dict[str, Any]:
    """``runs``, ``inside``, ``coverage`` (a fraction; None without runs) and
    ``median_band_pct`` of paired verdicts and bands (fractions)."""
    ins, bs = list(inside), [b * 100 for b in bands]
    n = len(ins)
    return {
        "runs": n,
        "inside": sum(ins),
        "coverage": sum(ins) / n if n else None,
        "median_band_pct": statistics.median(bs) if bs else None,
    }


def held_out_coverage() -> dict[str, Any]:
    """The leave-one-group-out coverage of the bundled table: overall, and ``by_group``."""
    by: dict[str, tuple[list[bool], list[float]]] = {}
    for r in validated_runs():
        if r.logo_residual is None:
            continue
        band = band_of(r.features, exclude=r.group)
        err = abs(float(B.prediction_errors(r.logo_residual)))
        ins, bs = by.setdefault(r.group, ([], []))
        ins.append(err <= band)
        bs.append(band)
    out = summary([x for v in by.values() for x in v[0]], [x for v in by.values() for x in v[1]])
    out["by_group"] = {g: summary(*v) for g, v in sorted(by.items())}
    return out


def case_coverage(cases: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Coverage of ``validate``'s cases that carry a ``band_pct`` (the throughput fields of
    :data:`BAND_FIELDS`)."""
    ins, bs = [], []
    for c in cases:
        if c.get("band_pct") is None:
            continue
        ins.append(bool(c["inside_band"]))
        bs.append(float(c["band_pct"]) / 100)
    return summary(ins, bs)


def case_band(field: str, measured: float, predicted: float, confidence: Mapping[str, Any]) -> dict[str, Any]:
    """A case's ``band_pct`` and ``inside_band`` (``{}`` for a field the band is not of, or
    without a band): inside when ``|measured / predicted - 1|`` of the throughput is at most the
    band (a time's throughput is its inverse)."""
    if field not in BAND_FIELDS or not confidence or not measured or not predicted:
        return {}
    ratio = predicted / measured if field == "step_time_s" else measured / predicted
    band = float(confidence["band_pct"])
    return {"band_pct": band, "inside_band": bool(abs(ratio - 1.0) <= band / 100)}
