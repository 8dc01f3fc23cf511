"""How far an estimate lies from what was validated: the report's ``confidence`` object.

The bundled published runs (``validation_data/published``) were predicted by
``tools/confidence_table.py --write`` and their residuals stored, with each run's features, in
``validation_data/residuals.json`` (:func:`validated_runs`, loaded once): the in-sample
``residual`` and the out-of-sample ``logo_residual``, the run predicted by the efficiency fit
that left its own source group out (``tools/fit_efficiency.py --holdout --write-residuals``
stores those fits). An estimate is never re-validated: :func:`confidence_of` only compares its
features with that table.

Features (:class:`Features`): the software ``stack`` (``training.framework``; a run without one
is named by its source group), the GPU ``generation`` (:func:`gpu_generation`), the
``model_family`` (``dense`` or ``moe``: experts > 1), the layout ``family``
(:func:`layout_family`), the ``precision`` class (``16-bit`` or ``fp8``), the GPUs and the
parameters.

Nearest runs: sorted by the distance ``(stack differs, generation differs, model family
differs, layout family differs, |ln(GPUs / GPUs_run)| + |ln(params / params_run)|)`` compared as
a tuple (an estimate that names no stack matches every stack). The :data:`K` nearest give the
band (:mod:`.band`): ``band_pct`` is the half-width of an 80 % prediction interval of the
throughput, the split-conformal bound of their out-of-sample errors (``measured / predicted -
1``; with ``K = 19`` the 16th smallest), widened outside the envelope: at least the bound of the
whole table where a kind is unvalidated, ``x (1 + octaves)`` beyond the scale envelope. ``bias_pct`` is their mean out-of-sample residual
(``predicted / measured - 1``: positive means the model over-predicts). A run without an
out-of-sample residual (a table written before any holdout fit) counts with its in-sample one.

Envelope (``within_envelope`` false with one reason each): the GPU generation has no validated
run; the stated stack has none; the model family has none; the layout family has none on that
generation; the precision class has none on that generation; the GPUs or the parameters lie
more than :data:`SCALE_FACTOR` times beyond the range validated on that generation; the
estimate's MFU exceeds the highest measured MFU of the generation's runs at that precision class
(measured MFU: the measured tokens/s per GPU x the model's FLOPs per token over the GPU's peak,
i.e. the run's predicted MFU over ``1 + residual``).

Every lookup takes ``exclude``: a source group whose runs are left out of the table, as if never
validated (:mod:`shardmeter.validate.coverage` measures the band's coverage that way).
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

from shardmeter.report import band as B

__all__ = [
    "Features",
    "ValidatedRun",
    "K",
    "SCALE_FACTOR",
    "TABLE_FILE",
    "gpu_generation",
    "layout_family",
    "model_family",
    "precision_class",
    "features_of",
    "validated_runs",
    "static_band",
    "band_of",
    "confidence_of",
]

#: Nearest validated runs the band is built from: 19, the 16th smallest of their 19 absolute
#: out-of-sample errors (the split-conformal rank ``(K + 1) x 0.8``, whole for K = 4, 9, 14, 19,
#: ...). Chosen among those by the held-out coverage of the bundled runs (docs/scenario.md,
#: "Confidence"): 9 gave 90 % with a median band of 21 % (two bad runs in 9 set the bound), 14
#: 82 % / 9.3 %, 19 83 % / 9.3 %, 24 83 % / 9.7 %; 19 is the smallest past which the figures
#: stop moving.
K = 19
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
    model_family: str = "dense"


@attrs.frozen
class ValidatedRun:
    """One bundled published run: its features, the field compared, its signed in-sample
    residual (``predicted / measured - 1``), its out-of-sample one (``logo_residual``: predicted
    by the fit that left its group out; None where the table has none), whether that fit
    informed every parameter the run reads (``logo_informed``), and its measured MFU (a
    fraction; None where the source measured no throughput, e.g. compute utilisation only)."""

    id: str
    group: str
    features: Features
    field: str
    residual: float
    measured_mfu: float | None
    logo_residual: float | None = None
    logo_informed: bool = False

    @property
    def held_out_residual(self) -> float:
        """The out-of-sample residual, else the in-sample one."""
        return self.residual if self.logo_residual is None else self.logo_residual


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
    if len(res.islands) == 1:  # one island's own degrees (the largest of one)
        par = res.islands[0].parallelism
        return family_of_degrees(par.tp, par.pp, par.cp, par.ep)
    return family_of_degrees(*(max(getattr(i.parallelism, a) for i in res.islands) for a in _AXES))


#: The model-parallel axes a layout family names, in its order.
_AXES = ("tp", "pp", "cp", "ep")


def family_of_degrees(tp: int, pp: int, cp: int, ep: int) -> str:
    """The layout family of one set of degrees (``dp/fsdp`` when none is above 1)."""
    return "+".join(a for a, d in zip(_AXES, (tp, pp, cp, ep), strict=True) if d > 1) or "dp/fsdp"


def model_family(model: Any) -> str:
    """``moe`` for a mixture-of-experts model (``experts > 1``), else ``dense``."""
    return "moe" if int(getattr(model, "experts", 1) or 1) > 1 else "dense"


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
        model_family=model_family(res.scenario.model),
    )


def _run_from_json(d: dict[str, Any]) -> ValidatedRun:
    f = d["features"]
    logo = d.get("logo_residual")
    return ValidatedRun(
        id=d["id"],
        group=d["group"],
        features=Features(**f),
        field=d["field"],
        residual=float(d["residual"]),
        measured_mfu=None if d["measured_mfu"] is None else float(d["measured_mfu"]),
        logo_residual=None if logo is None else float(logo),
        logo_informed=bool(d.get("logo_informed", False)),
    )


@functools.cache
def validated_runs() -> tuple[ValidatedRun, ...]:
    """The stored table (read once per process)."""
    text = resources.files("shardmeter.validation_data").joinpath(TABLE_FILE).read_text(encoding="utf-8")
    return tuple(_run_from_json(d) for d in json.loads(text)["runs"])


@attrs.frozen
class _Index:
    """The table (less an excluded group) as arrays for the distance (built once each)."""

    runs: tuple[ValidatedRun, ...]
    stack: np.ndarray
    generation: np.ndarray
    model_family: np.ndarray
    family: np.ndarray
    log_gpus: np.ndarray
    log_params: np.ndarray
    abs_error: np.ndarray
    table_bound: float


@functools.cache
def _index(exclude: str | None = None) -> _Index:
    runs = tuple(r for r in validated_runs() if r.group != exclude)
    col = lambda get: np.array([get(r.features) for r in runs], dtype=object)  # noqa: E731
    err = np.abs(B.prediction_errors([r.held_out_residual for r in runs]))
    return _Index(
        runs=runs,
        stack=col(lambda f: f.stack),
        generation=col(lambda f: f.generation),
        model_family=col(lambda f: f.model_family),
        family=col(lambda f: f.family),
        log_gpus=np.log([r.features.gpus for r in runs]),
        log_params=np.log([r.features.params for r in runs]),
        abs_error=err,
        table_bound=B.conformal_quantile(err),
    )


def _nearest(f: Features, k: int = K, exclude: str | None = None) -> list[int]:
    """Indices (into the table less ``exclude``) of the ``k`` runs nearest ``f`` (the module's
    distance; ties by table order)."""
    ix = _index(exclude)
    scale = np.abs(ix.log_gpus - math.log(f.gpus)) + np.abs(ix.log_params - math.log(f.params))
    keys = [scale, ix.family != f.family, ix.model_family != f.model_family, ix.generation != f.generation]
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


@attrs.frozen
class _Envelope:
    """Where ``f`` lies against the validated envelope, whatever its MFU: the reasons of kind
    (never validated) and of scale, the octaves beyond the scale envelope, and the MFU ceiling
    with the runs it is the highest of (in words; both None without one)."""

    kinds: tuple[str, ...]
    scale: tuple[str, ...]
    octaves: float
    ceiling: float | None
    ceiling_of: str | None


def _kind_reasons(f: Features, runs: tuple[ValidatedRun, ...]) -> tuple[list[str], list[ValidatedRun]]:
    """The reasons of kind, and the runs of ``f``'s generation."""
    reasons: list[str] = []
    if f.stack is not None and not any(r.features.stack == f.stack for r in runs):
        reasons.append(f"stack '{f.stack}' was never validated")
    if not any(r.features.model_family == f.model_family for r in runs):
        reasons.append(f"model family {f.model_family} was never validated (no {f.model_family} run)")
    gen = [r for r in runs if r.features.generation == f.generation]
    if not gen:
        reasons.append(
            f"GPU generations {f.generation} were never validated together"
            if "+" in f.generation
            else f"GPU generation '{f.generation}' was never validated"
        )
        return reasons, gen
    fam = [r for r in gen if r.features.family == f.family]
    if not fam:
        fams = ", ".join(sorted({r.features.family for r in gen}))
        reasons.append(
            f"layout family {f.family} was never validated on {f.generation.upper()} (validated: {fams})"
        )
    if not any(r.features.precision == f.precision for r in gen):
        reasons.append(f"no {f.precision} run was validated on {f.generation.upper()}")
    elif fam and not any(r.features.precision == f.precision for r in fam):
        reasons.append(f"no {f.precision} {f.family} run was validated on {f.generation.upper()}")
    return reasons, gen


def _envelope(f: Features, exclude: str | None = None) -> _Envelope:
    runs = _index(exclude).runs
    kinds, gen = _kind_reasons(f, runs)
    if not gen:
        return _Envelope(tuple(kinds), (), 0.0, None, None)
    scale: list[str] = []
    lo, hi = _range(r.features.gpus for r in gen)
    plo, phi = _range(r.features.params for r in gen)
    octaves = B.octaves_outside(f.gpus, lo, hi, SCALE_FACTOR)
    poct = B.octaves_outside(f.params, plo, phi, SCALE_FACTOR)
    if octaves > 0:
        scale.append(f"{f.gpus:,} GPUs is far outside the {lo:,}-{hi:,} validated on {f.generation.upper()}")
    if poct > 0:
        scale.append(
            f"{_fmt_count(f.params)} parameters is far outside the {_fmt_count(plo)}-{_fmt_count(phi)} "
            f"validated on {f.generation.upper()}"
        )
    # the ceiling: the same generation, precision and family; else the generation and precision
    same = [r for r in gen if r.features.family == f.family and r.features.precision == f.precision]
    over = f"{f.generation.upper()} {f.precision} {f.family}"
    mfus = [r.measured_mfu for r in same if r.measured_mfu is not None]
    if not mfus:
        over = f"{f.generation.upper()} {f.precision}"
        mfus = [
            r.measured_mfu for r in gen if r.features.precision == f.precision and r.measured_mfu is not None
        ]
    ceiling = (max(mfus), over) if mfus else (None, None)
    return _Envelope(tuple(kinds), tuple(scale), octaves + poct, *ceiling)


@functools.lru_cache(maxsize=4096)
def static_band(f: Features, exclude: str | None = None) -> dict[str, Any]:
    """Everything of the ``confidence`` object that does not depend on the MFU (cached: the
    plans of one search share a model, so a handful of features); ``band_nearest_pct`` is the
    nearest runs' bound before any widening."""
    ix = _index(exclude)
    idx = _nearest(f, exclude=exclude)
    near = [ix.runs[i] for i in idx]
    env = _envelope(f, exclude)
    nearest = B.conformal_quantile(ix.abs_error[idx])
    band = B.widened(nearest, len(env.kinds), ix.table_bound, env.octaves)
    glo, ghi = _range(r.features.gpus for r in near)
    groups = ", ".join(sorted({r.group for r in near}))
    gens = "/".join(sorted({r.features.generation for r in near}))
    fams = "/".join(sorted({r.features.family for r in near}))
    held = sum(r.logo_residual is not None for r in near)
    how = "held-out" if held == len(near) else f"{held} held-out, {len(near) - held} in-sample"
    return {
        "band_pct": float(band * 100),
        "band_nearest_pct": float(nearest * 100),
        "bias_pct": float(np.mean([r.held_out_residual for r in near]) * 100),
        "basis": f"{len(near)} runs ({how}): {groups}; {gens} {fams}, GPUs {glo:,}-{ghi:,}",
        "runs": tuple(r.id for r in near),
        "max_validated_mfu": env.ceiling,
        "max_validated_mfu_of": env.ceiling_of,
        "reasons": (*env.kinds, *env.scale),
    }


def band_of(f: Features, exclude: str | None = None) -> float:
    """The band (a fraction) of features ``f`` (:func:`static_band`'s ``band_pct`` / 100)."""
    return float(static_band(f, exclude)["band_pct"]) / 100


def confidence_of(res: Any, report: Any, static: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``confidence`` object of a feasible ``report`` of resolved scenario ``res`` (``{}``
    when infeasible): ``band_pct``, ``band_nearest_pct``, ``bias_pct``, ``basis``, ``runs``
    (the nearest runs' ids), ``max_validated_mfu`` with ``max_validated_mfu_of`` (the runs it is
    the highest of, in words), ``within_envelope`` and ``reasons``. ``static``: the
    :func:`static_band` of the report's features, where the caller has it."""
    if not report.feasible:
        return {}
    st = static_band(features_of(res, report.gpus, report.params)) if static is None else static
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
    return f"+/-{c['band_pct']:.1f}% (80 % interval; bias {c['bias_pct']:+.1f}%) from {c['basis']}; {verdict}"
