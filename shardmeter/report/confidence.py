"""How far an estimate lies from what was validated: the report's ``confidence`` object.

The bundled published runs (``validation_data/published``) were predicted once by
``tools/confidence_table.py --write`` and their signed residuals stored, with each run's
features, in ``validation_data/residuals.json`` (:func:`validated_runs`, loaded once). An
estimate is never re-validated: :func:`confidence_of` only compares its features with that table.

Features (:class:`Features`): the software ``stack`` (``training.framework``; a run without one
is named by its source group), the GPU ``generation`` (:func:`gpu_generation`), the layout
``family`` (:func:`layout_family`), the ``precision`` class (``16-bit`` or ``fp8``), the GPUs and
the parameters.

Nearest runs: sorted by the distance ``(stack differs, generation differs, family differs,
|ln(GPUs / GPUs_run)| + |ln(params / params_run)|)`` compared as a tuple, so any run of the same
stack is nearer than any of another stack, then the generation, then the family decide, and the
scale breaks ties (an estimate that names no stack matches every stack). The :data:`K` nearest
give the band: ``bias_pct`` their mean residual and ``band_pct`` their RMS residual, in percent of
the measured value (a residual is ``predicted / measured - 1``: positive means the model
over-predicts).

Envelope (``within_envelope`` false with one reason each): the GPU generation has no validated
run; the stated stack has none; the layout family has none on that generation; the precision
class has none on that generation; the GPUs or the parameters lie more than :data:`SCALE_FACTOR`
times beyond the range validated on that generation; the estimate's MFU exceeds the highest
measured MFU of the generation's runs at that precision class (measured MFU: the measured
tokens/s per GPU x the model's FLOPs per token over the GPU's peak, i.e. the run's predicted MFU
over ``1 + residual``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable
from importlib import resources
from typing import Any

import attrs
import numpy as np

__all__ = [
    "Features",
    "ValidatedRun",
    "K",
    "SCALE_FACTOR",
    "TABLE_FILE",
    "gpu_generation",
    "layout_family",
    "precision_class",
    "features_of",
    "validated_runs",
    "confidence_of",
]

#: Nearest validated runs the band is built from.
K = 5
#: How far beyond the validated range of GPUs or parameters (a factor) still counts as validated.
SCALE_FACTOR = 2.0
#: The stored table, in ``shardmeter.validation_data``.
TABLE_FILE = "residuals.json"
#: The one command that regenerates it.
REGENERATE = "python tools/confidence_table.py --write"

#: GPU name prefixes by generation class: a GPU of one class runs the same tensor cores and
#: kernels as the validated runs of that class (H200 and GH200 are H100 silicon with more HBM).
_GENERATIONS = (
    ("v100", "v100"),
    ("a100", "a100"),
    ("h100", "h100"),
    ("h200", "h100"),
    ("gh200", "h100"),
    ("b200", "b200"),
    ("gb200", "b200"),
)


@attrs.frozen
class Features:
    """What the nearest-run search compares. ``stack`` is None when the estimate names none."""

    stack: str | None
    generation: str
    family: str
    precision: str
    gpus: int
    params: float


@attrs.frozen
class ValidatedRun:
    """One bundled published run: its features, the field compared, its signed residual
    (``predicted / measured - 1``) and its measured MFU (a fraction; None where the source
    measured no throughput, e.g. compute utilisation only)."""

    id: str
    group: str
    features: Features
    field: str
    residual: float
    measured_mfu: float | None


def gpu_generation(gpu: Any) -> str:
    """The generation class of a GPU profile: ``v100``, ``a100``, ``h100`` or ``b200`` for the
    NVIDIA data-centre parts of those generations (by name prefix, :data:`_GENERATIONS`), else
    the profile's own name (a generation of its own, which no run validates)."""
    name = str(getattr(gpu, "name", gpu))
    if getattr(gpu, "vendor", "nvidia") in ("nvidia", ""):
        for prefix, gen in _GENERATIONS:
            if name.startswith(prefix):
                return gen
    return name


def layout_family(res: Any) -> str:
    """The layout family of a resolved scenario: ``diloco`` for a local-step sync strategy
    between islands; else the model-parallel degrees above 1 joined by ``+`` (``tp``,
    ``tp+pp``, ``tp+pp+cp``, ``ep`` ...; the largest over islands), or ``dp/fsdp`` for pure data
    parallelism, sharded or not."""
    if len(res.islands) > 1 and hasattr(res.sync_options, "inner_steps"):
        return "diloco"
    axes = [a for a in ("tp", "pp", "cp", "ep") if max(getattr(i.parallelism, a) for i in res.islands) > 1]
    return "+".join(axes) or "dp/fsdp"


def precision_class(precision: str) -> str:
    """The precision's class for comparing MFU (each has its own peak): ``16-bit`` (bf16, fp16),
    ``fp8``, or the precision itself (``fp32``, ``tf32``: never validated)."""
    return "16-bit" if precision in ("bf16", "fp16") else str(precision)


def features_of(res: Any, gpus: int, params: float, stack: str | None = None) -> Features:
    """The features of resolved scenario ``res`` using ``gpus`` GPUs on ``params`` parameters;
    ``stack`` defaults to ``training.framework`` (None when the scenario names none)."""
    if stack is None:
        stack = getattr(res.scenario.training, "framework", None) or None
    gens = sorted({gpu_generation(i.gpu) for i in res.islands})
    return Features(
        stack=stack,
        generation="+".join(gens),
        family=layout_family(res),
        precision=precision_class(res.scenario.training.precision),
        gpus=int(gpus),
        params=float(params),
    )


def _run_from_json(d: dict[str, Any]) -> ValidatedRun:
    f = d["features"]
    return ValidatedRun(
        id=d["id"],
        group=d["group"],
        features=Features(**f),
        field=d["field"],
        residual=float(d["residual"]),
        measured_mfu=None if d["measured_mfu"] is None else float(d["measured_mfu"]),
    )


@functools.cache
def validated_runs() -> tuple[ValidatedRun, ...]:
    """The stored table (read once per process)."""
    text = resources.files("shardmeter.validation_data").joinpath(TABLE_FILE).read_text(encoding="utf-8")
    return tuple(_run_from_json(d) for d in json.loads(text)["runs"])


@attrs.frozen
class _Index:
    """The table as arrays for the distance (built once)."""

    runs: tuple[ValidatedRun, ...]
    stack: np.ndarray
    generation: np.ndarray
    family: np.ndarray
    log_gpus: np.ndarray
    log_params: np.ndarray
    residual: np.ndarray


@functools.cache
def _index() -> _Index:
    runs = validated_runs()
    col = lambda get: np.array([get(r.features) for r in runs], dtype=object)  # noqa: E731
    return _Index(
        runs=runs,
        stack=col(lambda f: f.stack),
        generation=col(lambda f: f.generation),
        family=col(lambda f: f.family),
        log_gpus=np.log([r.features.gpus for r in runs]),
        log_params=np.log([r.features.params for r in runs]),
        residual=np.array([r.residual for r in runs]),
    )


def _nearest(f: Features, k: int = K) -> list[int]:
    """Indices of the ``k`` runs nearest ``f`` (the module's distance; ties by table order)."""
    ix = _index()
    scale = np.abs(ix.log_gpus - math.log(f.gpus)) + np.abs(ix.log_params - math.log(f.params))
    keys = [scale, ix.family != f.family, ix.generation != f.generation]
    if f.stack is not None:
        keys.append(ix.stack != f.stack)
    order = np.lexsort(keys)  # the last key is the primary one
    return [int(i) for i in order[:k]]


def _range(xs: Iterable[float]) -> tuple[float, float]:
    xs = list(xs)
    return min(xs), max(xs)


def _fmt_count(x: float) -> str:
    for k, s in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if x >= k:
            return f"{x / k:.3g}{s}"
    return f"{x:.3g}"


def _envelope(f: Features) -> tuple[list[str], float | None, str | None]:
    """Why ``f`` lies outside the validated envelope whatever its MFU; the MFU ceiling (the
    highest measured MFU of the runs of its generation, precision class and family, else of its
    generation and precision class; None without one) and those runs in words."""
    runs = validated_runs()
    reasons: list[str] = []
    if f.stack is not None and not any(r.features.stack == f.stack for r in runs):
        reasons.append(f"stack '{f.stack}' was never validated")
    gen = [r for r in runs if r.features.generation == f.generation]
    if not gen:
        reasons.append(
            f"GPU generations {f.generation} were never validated together"
            if "+" in f.generation
            else f"GPU generation '{f.generation}' was never validated"
        )
        return reasons, None, None
    fam = [r for r in gen if r.features.family == f.family]
    if not fam:
        fams = ", ".join(sorted({r.features.family for r in gen}))
        reasons.append(
            f"layout family {f.family} was never validated on {f.generation.upper()} (validated: {fams})"
        )
    same = [r for r in fam if r.features.precision == f.precision]
    if not any(r.features.precision == f.precision for r in gen):
        reasons.append(f"no {f.precision} run was validated on {f.generation.upper()}")
    elif fam and not same:
        reasons.append(f"no {f.precision} {f.family} run was validated on {f.generation.upper()}")
    lo, hi = _range(r.features.gpus for r in gen)
    if f.gpus > hi * SCALE_FACTOR or f.gpus < lo / SCALE_FACTOR:
        reasons.append(
            f"{f.gpus:,} GPUs is far outside the {lo:,}-{hi:,} validated on {f.generation.upper()}"
        )
    plo, phi = _range(r.features.params for r in gen)
    if f.params > phi * SCALE_FACTOR or f.params < plo / SCALE_FACTOR:
        reasons.append(
            f"{_fmt_count(f.params)} parameters is far outside the {_fmt_count(plo)}-{_fmt_count(phi)} "
            f"validated on {f.generation.upper()}"
        )
    # the ceiling: the same generation, precision and family; else the generation and precision
    over = f"{f.generation.upper()} {f.precision} {f.family}"
    mfus = [r.measured_mfu for r in same if r.measured_mfu is not None]
    if not mfus:
        over = f"{f.generation.upper()} {f.precision}"
        mfus = [
            r.measured_mfu for r in gen if r.features.precision == f.precision and r.measured_mfu is not None
        ]
    return (reasons, max(mfus), over) if mfus else (reasons, None, None)


@functools.lru_cache(maxsize=4096)
def _static(f: Features) -> dict[str, Any]:
    """Everything of the ``confidence`` object that does not depend on the MFU (cached: the
    plans of one search share a model, so a handful of features)."""
    runs = validated_runs()
    near = [runs[i] for i in _nearest(f)]
    res = np.array([r.residual for r in near])
    reasons, ceiling, over = _envelope(f)
    glo, ghi = _range(r.features.gpus for r in near)
    groups = ", ".join(sorted({r.group for r in near}))
    gens = "/".join(sorted({r.features.generation for r in near}))
    fams = "/".join(sorted({r.features.family for r in near}))
    return {
        "band_pct": float(np.sqrt(np.mean(res**2)) * 100),
        "bias_pct": float(np.mean(res) * 100),
        "basis": f"{len(near)} runs: {groups}; {gens} {fams}, GPUs {glo:,}-{ghi:,}",
        "runs": tuple(r.id for r in near),
        "max_validated_mfu": ceiling,
        "max_validated_mfu_of": over,
        "reasons": tuple(reasons),
    }


def confidence_of(res: Any, report: Any) -> dict[str, Any]:
    """The ``confidence`` object of a feasible ``report`` of resolved scenario ``res`` (``{}``
    when infeasible): ``band_pct``, ``bias_pct``, ``basis``, ``runs`` (the nearest runs' ids),
    ``max_validated_mfu`` with ``max_validated_mfu_of`` (the runs it is the highest of, in
    words), ``within_envelope`` and ``reasons``."""
    if not report.feasible:
        return {}
    f = features_of(res, report.gpus, report.params)
    st = _static(f)
    reasons = list(st["reasons"])
    ceiling, mfu = st["max_validated_mfu"], report.mfu
    if ceiling is not None and mfu is not None and mfu > ceiling:
        dec = 1 if f"{mfu:.1%}" != f"{ceiling:.1%}" else 2  # never "56.3 % above 56.3 %"
        reasons.append(
            f"MFU {mfu:.{dec}%} above the highest validated {st['max_validated_mfu_of']} run ({ceiling:.{dec}%})"
        )
    return {**st, "runs": list(st["runs"]), "within_envelope": not reasons, "reasons": reasons}


def confidence_line(c: dict[str, Any]) -> str:
    """The readable table's one line: band, bias, basis and the envelope verdict."""
    verdict = "within the validated envelope" if c["within_envelope"] else "OUTSIDE the validated envelope: "
    verdict += "; ".join(c["reasons"])
    return f"+/-{c['band_pct']:.1f}% (bias {c['bias_pct']:+.1f}%) from {c['basis']}; {verdict}"
