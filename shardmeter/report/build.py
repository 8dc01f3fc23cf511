"""The report of one scenario (SCENARIO.md, "Report")."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable
from operator import attrgetter
from typing import Any, TypeVar

import attrs

from shardmeter.model.feasibility import REASONS, Reason, part_templates, reason_messages
from shardmeter.model.outputs import Breakdown, MemoryParts, Outputs, Overlapped
from shardmeter.report.confidence import confidence_of, features_of, static_band
from shardmeter.report.layout import IslandLayout, island_layout, layout_of
from shardmeter.report.pricing import IslandPrice, cost_breakdown, egress_usd, gpu_time_usd, island_prices
from shardmeter.report.reliability import apply_reliability
from shardmeter.report.text import format_report
from shardmeter.report.words import describe_bottleneck, hidden_notes, regime_of, sync_notes
from shardmeter.resolve.resolver import Resolved

__all__ = ["Report", "ReportFigures", "build_report", "json_safe", "regime_of", "describe_bottleneck"]

T = TypeVar("T")


#: The figures of one step (rates and utilisations) that a feasible report gives and an
#: infeasible one leaves null; also what ``calibrate`` can fit a measured step to.
STEP_FIELDS = (
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "model_tflops_per_gpu",
    "hardware_tflops_per_gpu",
    "mfu",
    "hfu",
    "compute_utilization",
)


#: The terms' names and one getter of their values, in field order, of the records the model
#: gives (:meth:`Breakdown.terms`, :meth:`Overlapped.terms`, :meth:`MemoryParts.parts` without
#: building their dicts; another class of record is asked for them).
_TERMS = {
    cls: (
        tuple(f.name.removesuffix("_s") for f in attrs.fields(cls)),
        attrgetter(*(f.name for f in attrs.fields(cls))),
    )
    for cls in (Breakdown, Overlapped)
}
_NOT_OWN = ("island_sync_s", "idle_s")
_PART_NAMES = tuple(f.name.removesuffix("_bytes") for f in attrs.fields(MemoryParts))[:-1]
_PART_VALUES = attrgetter(*(f.name for f in attrs.fields(MemoryParts)[:-1]))


def _terms(rec: Any) -> Iterable[tuple[str, Any]]:
    """``rec.terms().items()``: ``(name, seconds)`` in field order."""
    got = _TERMS.get(type(rec))
    return zip(got[0], got[1](rec)) if got is not None else rec.terms().items()  # noqa: B905 (one field list)


def _at(x: Any, row: int, j: int | None = None) -> Any:
    """Row ``row`` (island ``j``) of an output array; the scalar path's outputs are plain numbers
    (most of them floats: the exact type first, cheaper than ``isinstance`` of a tuple)."""
    if type(x) is float or isinstance(x, (float, int, bool)):
        return x
    return x[row] if j is None else x[row, j]


def _fat(x: Any, row: int, j: int | None = None) -> float:
    """``float(_at(x, row, j))``: a plain float (the scalar path's outputs) as it is, with no
    call to convert it."""
    if type(x) is float:
        return x
    return float(_at(x, row, j))


def _gb(x: Any, row: int, j: int | None = None) -> float:
    """Row ``row`` (island ``j``) of an output in bytes, as GB."""
    return _fat(x, row, j) / 1e9


def _detailed(x: T | None) -> T:
    """An output :func:`~shardmeter.model.evaluate.evaluate` gives only with ``detail`` (a report
    needs it)."""
    if x is None:
        raise ValueError("build_report needs evaluate(..., detail=True) outputs")
    return x


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def json_safe(o: Any) -> Any:
    """``o`` with every non-finite float as None and numpy scalars and arrays as Python
    numbers and lists, ready for ``json.dumps(..., allow_nan=False)``."""
    if hasattr(o, "tolist") and not isinstance(o, (str, bytes)):  # numpy scalars and arrays
        o = o.tolist()
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_safe(v) for v in o]
    return o


class _Figure(float):
    """A number in an infeasibility reason: ``{mem_gb:.1f}`` prints an absurd one (1e22 GB)
    in scientific notation instead of all its digits."""

    def __format__(self, spec: str) -> str:
        if not math.isfinite(self):
            return "-"
        if abs(self) >= 1e9 and spec.endswith("f"):
            return format(float(self), ".3e")
        return format(float(self), spec)


@attrs.define
class Report:
    """A prediction. Every field of SCENARIO.md's report, plus ``reasons``,
    ``notes``, ``regime``, ``overlapped_s``, ``gpus``, the model's size, the ``layout``
    and the cost's split (``cost_breakdown_usd``)."""

    feasible: bool
    reasons: list[str]
    step_time_s: float | None
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    model_tflops_per_gpu: float | None
    hardware_tflops_per_gpu: float | None
    mfu: float | None
    hfu: float | None
    memory_per_gpu_gb: float | None
    memory_capacity_gb: float | None
    compute_utilization: float | None
    wall_clock_s: float | None
    cost_usd: float | None
    bottleneck: str | None
    regime: str | None
    breakdown_s: dict[str, float]
    overlapped_s: dict[str, float]
    islands: list[dict[str, Any]]
    gpus: int
    params: float
    model_flops_per_token: float
    notes: list[str]
    #: Communication time per step by topology level: ``intra_island`` (every collective inside an
    #: island, exposed + hidden, GPU-weighted over islands like the breakdown) and ``wan`` (the
    #: cross-island stage: ``time_s`` exposed + hidden, ``exposed_s``, ``bytes_per_island`` sent
    #: through each island's uplink, ``round_s`` the WAN's busy time per outer round). Empty when
    #: infeasible.
    levels: dict[str, dict[str, float]] = attrs.field(factory=dict)
    #: The resolved layout (:func:`~shardmeter.report.layout.layout_of`): degrees, gradient accumulation, layers per stage,
    #: parameters per GPU; ``islands`` lists each island's where they differ.
    layout: dict[str, Any] = attrs.field(factory=dict)
    #: What PyTorch's caching allocator would reserve on the busiest GPU at the peak
    #: (``max_memory_reserved``): ``memory_per_gpu_gb`` plus the allocator's rounding and
    #: segment slack (:mod:`~shardmeter.model.allocator`); feasibility compares it with the
    #: GPU's memory. None without a prediction.
    memory_reserved_gb: float | None = None
    #: Of ``memory_per_gpu_gb`` (and ``memory_reserved_gb``), what the process holds outside
    #: PyTorch's caching allocator: the CUDA context and NCCL's buffers (in the breakdown's
    #: ``other``; :mod:`~shardmeter.model.overheads`). A measured ``max_memory_allocated`` or
    #: ``max_memory_reserved`` leaves it out, and ``validate`` compares them without it. None
    #: without a prediction.
    memory_outside_allocator_gb: float | None = None
    #: The busiest GPU's memory by part (``weights``, ``gradients``, ``optimizer``,
    #: ``activations``, ``other``: the strategy's buffers and the
    #: framework's reservation), GB, adding up to ``memory_per_gpu_gb``.
    memory_breakdown_gb: dict[str, float] = attrs.field(factory=dict)
    #: ``cost_usd`` as rate x GPU-hours + egress (:func:`~shardmeter.report.pricing.cost_breakdown`);
    #: empty without a cost (infeasible, or no ``training.tokens``).
    cost_breakdown_usd: dict[str, Any] = attrs.field(factory=dict)
    #: What the model assumed that the numbers do not show (:func:`~shardmeter.report.words.assumption_notes`):
    #: defaulted sync options, convergence not priced, communication hidden under compute.
    assumptions: list[str] = attrs.field(factory=list)
    #: Time and cost to the data-parallel loss with a ``[sync] convergence`` model
    #: (:func:`~shardmeter.report.quality.quality_figures`); empty without one, or when infeasible.
    quality: dict[str, Any] = attrs.field(factory=dict)
    #: How far the estimate lies from the validated runs: a band from the nearest runs'
    #: residuals and whether it is inside the validated envelope
    #: (:func:`~shardmeter.report.confidence.confidence_of`); empty when infeasible.
    confidence: dict[str, Any] = attrs.field(factory=dict)
    #: The step's median and 90th percentile when ranks vary (``[variability]``); both
    #: ``step_time_s`` without it (:mod:`~shardmeter.report.reliability`). None when infeasible.
    step_time_p50_s: float | None = None
    step_time_p90_s: float | None = None
    #: One checkpoint's stall and the seconds of work between two (``[reliability]``); None
    #: without it.
    checkpoint_s: float | None = None
    checkpoint_interval_s: float | None = None
    #: The useful fraction of wall time under failures, checkpoints and preemption (1 without
    #: ``[reliability]``); None when infeasible.
    goodput: float | None = None
    #: ``wall_clock_s`` and ``cost_usd`` at the ``[variability] quantile`` step, over ``goodput``;
    #: None without ``training.tokens``.
    expected_wall_clock_s: float | None = None
    expected_cost_usd: float | None = None
    #: The figures behind ``goodput`` (job MTBF, interruptions, checkpoint size and write time);
    #: empty without ``[reliability]``.
    reliability: dict[str, Any] = attrs.field(factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    def to_json(self, **kw) -> str:
        """The report as strict JSON (indented by default): a number that is not finite is
        ``null``, as the CLI's ``--json`` writes it (JSON has no NaN or Infinity)."""
        return json.dumps(json_safe(self.to_dict()), **({"indent": 2, "allow_nan": False} | kw))

    def __str__(self) -> str:
        return format_report(self)

    def __repr__(self) -> str:
        """One line of headline figures (:func:`shardmeter.report.notebook.report_repr`)."""
        from shardmeter.report.notebook import report_repr

        return report_repr(self)

    def _repr_html_(self) -> str:
        """A compact HTML table for Jupyter (:func:`shardmeter.report.notebook.report_html`)."""
        from shardmeter.report.notebook import report_html

        return report_html(self)


class ReportFigures:
    """What a report reads of the resolved scenario alone: the figures of :func:`build_report`
    that depend on nothing but the :class:`Resolved` ``res`` (its islands' prices and layouts,
    the GPUs, the notes on them, the sync strategy's notes, the confidence band's features),
    each worked out where a report first reads it (``functools.cached_property``: afterwards a
    plain attribute) and then kept with it.

    Load once, estimate many: an :class:`~shardmeter.Estimator` keeps one beside the Resolved it
    prepared for a loaded Scenario, so estimating that same Scenario object again reuses them;
    another Scenario (a modified one is another object: scenarios are frozen) is resolved again
    and gets figures of its own. ``build_report`` given none, or those of another Resolved,
    works them out afresh. A Resolved is frozen and the figures hold a reference to it
    (``res``), so they never describe another scenario; the report copies every dict and list
    it takes from them."""

    def __init__(self, res: Resolved):
        self.res = res
        #: the last ``(params, static band)`` of :meth:`band`
        self._band: tuple[float, dict[str, Any]] | None = None

    @functools.cached_property
    def gpus(self) -> int:
        """The GPUs the plan uses, over all islands."""
        return int(sum(isl.gpus_used for isl in self.res.islands))

    @functools.cached_property
    def memory_capacity_gb(self) -> float:
        """The smallest GPU's memory."""
        return min(isl.gpu.memory_gb for isl in self.res.islands)

    @functools.cached_property
    def used_notes(self) -> tuple[str, ...]:
        """A feasible report's note on each island that leaves some of its GPUs idle."""
        return tuple(
            f"island '{isl.name}' uses {isl.gpus_used} of its {isl.gpus} GPUs"
            for isl in self.res.islands
            if isl.gpus_used < isl.gpus
        )

    @functools.cached_property
    def any_micro_batch(self) -> bool:
        """Whether any island sets its own ``micro_batch``."""
        return any(isl.micro_batch is not None for isl in self.res.scenario.islands)

    @functools.cached_property
    def prices(self) -> tuple[IslandPrice, ...]:
        """Each island's :func:`~shardmeter.report.pricing.island_prices`."""
        return island_prices(self.res)

    @functools.cached_property
    def gpu_names(self) -> tuple[str, ...]:
        """Each island's GPU."""
        return tuple(isl.gpu.name for isl in self.res.islands)

    @functools.cached_property
    def unpriced_notes(self) -> tuple[str, ...]:
        """Each island's note when it has no GPU-hour price."""
        return tuple(
            f"island '{isl.name}': no GPU-hour price for '{isl.gpu.name}' in cost source "
            f"'{isl.cost.name if isl.cost else 'none'}'; cost_usd is null"
            for isl in self.res.islands
        )

    @functools.cached_property
    def steps(self) -> float | None:
        """The run's steps, ``training.tokens / (global_batch x seq_len)`` (None without tokens)."""
        sc = self.res.scenario
        tokens = sc.training.tokens
        return tokens / (sc.training.global_batch * sc.model.seq_len) if tokens else None

    @functools.cached_property
    def layouts(self) -> tuple[IslandLayout, ...]:
        """Each island's :func:`~shardmeter.report.layout.island_layout`."""
        return tuple(island_layout(self.res, isl, j) for j, isl in enumerate(self.res.islands))

    @functools.cached_property
    def sync_notes(self) -> tuple[str, ...]:
        """:func:`~shardmeter.report.words.sync_notes`."""
        return tuple(sync_notes(self.res))

    def band(self, params: float) -> dict[str, Any]:
        """:func:`~shardmeter.report.confidence.static_band` of the features of :attr:`gpus` GPUs
        on ``params`` parameters (the last one kept: the same model gives the same count)."""
        last = self._band
        if last is not None and last[0] == params:
            return last[1]
        st = static_band(features_of(self.res, self.gpus, params))
        self._band = (params, st)
        return st


def build_report(res: Resolved, out: Outputs, row: int = 0, figures: ReportFigures | None = None) -> Report:
    """Row ``row`` of :func:`~shardmeter.model.evaluate.evaluate`'s output (with ``detail``), for
    the resolved scenario ``res``, as a :class:`Report` (from those two alone). ``figures``:
    ``res``'s :class:`ReportFigures`, where the caller keeps
    them (an Estimator, for a scenario estimated again); else worked out here."""
    if figures is None or figures.res is not res:
        figures = ReportFigures(res)
    sc, islands = res.scenario, res.islands
    n_isl = len(islands)
    feasible = bool(_at(out.feasible, row))
    # the scalar path's reason bits are one int for every island: none set, no line to write
    bits = out.reasons
    reasons = [] if type(bits) is int and bits == 0 else _reasons(res, out, row, figures.any_micro_batch)
    step = _fat(_detailed(out.step_time_s), row)
    if feasible and not (math.isfinite(step) and step > 0):
        # a part's figures overflowed the model (inf or nan): no number of this plan means anything
        feasible = False
        reasons.append(
            "step_time_s: the predicted step time is not a finite number > 0 "
            "(a part's figures overflow the model)"
        )
    notes = list(sc.notes)
    assumed: list[str] = []
    if feasible:
        notes.extend(figures.used_notes)
    memory_gb = _num(_gb(_detailed(out.memory_bytes), row))
    reserved_gb = _num(_gb(_detailed(out.memory_reserved_bytes), row))
    params = _fat(out.params, row)
    flops_per_token = _fat(_detailed(out.model_flops_per_token), row)
    lay = _layout(res, out, row, figures)
    memory_bd = _memory_breakdown(out, row, n_isl)
    outside_gb = _outside_allocator(out, row, n_isl)
    if not feasible:
        common: dict[str, Any] = {
            "memory_per_gpu_gb": memory_gb,
            "memory_reserved_gb": reserved_gb,
            "memory_capacity_gb": figures.memory_capacity_gb,
            "gpus": figures.gpus,
            "params": params,
            "model_flops_per_token": flops_per_token,
            "notes": notes,
            "assumptions": assumed,
            "layout": lay,
            "memory_breakdown_gb": memory_bd,
            "memory_outside_allocator_gb": outside_gb,
        }
        return _infeasible_report(res, out, row, reasons, common)
    bd, ov, top = _breakdowns(out, row, n_isl)
    tps = _fat(out.tokens_per_s, row)
    isl_reports, total_cost, wall = _island_entries(res, out, row, step, tps, notes, figures)
    # the record built at once (no dict of the fields shared with an infeasible report to unpack)
    report = Report(
        feasible=True,
        reasons=[],
        step_time_s=step,
        tokens_per_s=tps,
        tokens_per_s_per_gpu=_fat(out.tokens_per_s_per_gpu, row),
        model_tflops_per_gpu=_fat(out.model_tflops_per_gpu, row),
        hardware_tflops_per_gpu=_fat(out.hardware_tflops_per_gpu, row),
        mfu=_fat(out.mfu, row),
        hfu=_fat(out.hfu, row),
        memory_per_gpu_gb=memory_gb,
        memory_capacity_gb=figures.memory_capacity_gb,
        compute_utilization=_fat(out.compute_utilization, row),
        wall_clock_s=wall,
        cost_usd=total_cost,
        bottleneck=top,
        regime=regime_of(bd),
        breakdown_s=bd,
        overlapped_s=ov,
        islands=isl_reports,
        gpus=figures.gpus,
        params=params,
        model_flops_per_token=flops_per_token,
        notes=notes,
        levels=_levels(out, row, bd, ov),
        layout=lay,
        memory_reserved_gb=reserved_gb,
        memory_outside_allocator_gb=outside_gb,
        memory_breakdown_gb=memory_bd,
        cost_breakdown_usd=_cost_split(res, isl_reports, wall, figures),
        assumptions=assumed,
    )
    assumed.extend(figures.sync_notes)
    assumed.extend(hidden_notes(report))
    report.confidence = confidence_of(res, report, figures.band(report.params))
    apply_reliability(res, report)
    if res.convergence is not None or sc.training.critical_batch != "none":  # raw figures unchanged
        from shardmeter.report.quality import apply_quality

        apply_quality(res, report)
    return report


def _layout(res: Resolved, out: Outputs, row: int, figures: ReportFigures) -> dict[str, Any]:
    """:func:`~shardmeter.report.layout.layout_of` with the kept island layouts (its own test
    first: outputs without a layout never work one out)."""
    if out.island.layers_per_stage is None:
        return {}
    return layout_of(res, out, row, figures.layouts)


def _cost_split(
    res: Resolved, isl_reports: list[dict[str, Any]], wall: float | None, figures: ReportFigures
) -> dict[str, Any]:
    """:func:`~shardmeter.report.pricing.cost_breakdown` of the run (empty without a token budget)."""
    if wall is None or not isl_reports or isl_reports[0]["egress_gb"] is None:
        return {}
    return cost_breakdown(res, wall, isl_reports[0]["egress_gb"], figures.prices)


def _busiest_island(out: Outputs, row: int, n_isl: int) -> int:
    """The island whose GPU ``memory_per_gpu_gb`` reports (of one island, that one)."""
    if n_isl == 1:
        return 0
    mem = [_gb(out.island.memory_bytes, row, j) for j in range(n_isl)]
    return max(range(n_isl), key=lambda j: mem[j] if math.isfinite(mem[j]) else math.inf)


def _memory_breakdown(out: Outputs, row: int, n_isl: int) -> dict[str, float]:
    """The busiest island's memory parts (its GPU is the one ``memory_per_gpu_gb`` reports)."""
    parts = out.island.memory_parts
    if parts is None:
        return {}
    busiest = _busiest_island(out, row, n_isl)
    # the scalar path's floats: no call each (_gb's division of them)
    exact = type(parts) is MemoryParts
    items = zip(_PART_NAMES, _PART_VALUES(parts)) if exact else parts.parts().items()  # noqa: B905
    return {k: (v if type(v) is float else _fat(v, row, busiest)) / 1e9 for k, v in items}


def _outside_allocator(out: Outputs, row: int, n_isl: int) -> float | None:
    """The busiest GPU's memory outside PyTorch's caching allocator, GB (None without detail)."""
    parts = out.island.memory_parts
    if parts is None:
        return None
    return _num(_gb(parts.outside_allocator_bytes, row, _busiest_island(out, row, n_isl)))


def batch_split_key(sc: Any, j: int, *, any_island: bool | None = None) -> str:
    """The key a batch that does not split on island ``j`` names: ``island[j].micro_batch`` when
    the island sets its own, ``training.micro_batch`` when another island does, else (no island
    sets one: as before the per-island key) ``training.global_batch``. ``any_island``: whether
    any island sets one, where the caller knows (a loop over thousands of islands asks once)."""
    if sc.islands[j].micro_batch is not None:
        return f"island[{j}].micro_batch"
    if any_island is None:
        any_island = any(isl.micro_batch is not None for isl in sc.islands)
    if any_island:
        return "training.micro_batch"
    return REASONS[Reason.BATCH_SPLIT][0]


def _reasons(res: Resolved, out: Outputs, row: int, any_island: bool | None = None) -> list[str]:
    """Each island's reason bits as ``key: message`` lines (the key names the island's own
    parallelism when it has one). ``any_island``: whether any island sets its own
    ``micro_batch``, where the caller knows."""
    sc, islands = res.scenario, res.islands
    n_isl = len(islands)
    reasons: list[str] = []
    o = out.island
    if any_island is None:
        any_island = any(isl.micro_batch is not None for isl in sc.islands)
    for j, isl in enumerate(islands):
        bits = int(_at(out.reasons, row, j))
        if not bits:
            continue
        par = isl.parallelism
        vals = {
            "tp": par.tp,
            "heads": sc.model.heads,
            "cp": par.cp,
            "s": sc.model.seq_len,
            "ep": par.ep,
            "E": sc.model.experts,
            "dpcp": isl.dp * par.cp,
            "etp_ep": (par.expert_tp or par.tp) * par.ep,
            "tcd": par.tp * par.cp * isl.dp,
            "used": isl.gpus_used,
            "gpus": isl.gpus,
            "bi": _fmt_int(_at(_detailed(o.batch_sequences), row, j)),
            "mbs_dp": sc.micro_batch(j) * isl.dp,
            "mem_gb": _Figure(_gb(o.memory_reserved_bytes, row, j)),
            "cap_gb": _Figure(_gb(o.memory_capacity_bytes, row, j)),
            "m": _fmt_int(_at(_detailed(o.micro_batches), row, j)),
            "pp": par.pp,
            "pv": par.pp * par.virtual_stages,
            "v": par.virtual_stages,
            "L": sc.model.layers,
        }
        templates = part_templates(isl.schedule, isl.schedule_options, isl.sharding, isl.sharding_options)
        prefix = f"island[{j}]." if n_isl > 1 and isl.own_parallelism else ""
        for key, msg in reason_messages(bits, vals, templates):
            if key.startswith("island["):
                label = key.format(j=j)
            else:
                label = f"{prefix}{key}" if not key.startswith("training") else key
            if key == REASONS[Reason.BATCH_SPLIT][0]:
                label = batch_split_key(sc, j, any_island=any_island)
            where = f" (island '{isl.name}')" if n_isl > 1 else ""
            reasons.append(f"{label}: {msg}{where}")
    return reasons


def _infeasible_report(
    res: Resolved, out: Outputs, row: int, reasons: list[str], common: dict[str, Any]
) -> Report:
    """A report with the reasons and the memory, and no time, throughput or cost."""
    islands = [
        {
            "name": isl.name,
            "gpus": isl.gpus,
            "tokens_per_s": None,
            "step_time_s": None,
            "memory_per_gpu_gb": _num(_gb(out.island.memory_bytes, row, j)),
            "cost_usd": None,
            "feasible": int(_at(out.reasons, row, j)) == 0,
        }
        for j, isl in enumerate(res.islands)
    ]
    none: dict[str, Any] = dict.fromkeys((*STEP_FIELDS, "wall_clock_s", "cost_usd", "bottleneck", "regime"))
    return Report(
        feasible=False, reasons=reasons, breakdown_s={}, overlapped_s={}, islands=islands, **none, **common
    )


def _breakdowns(out: Outputs, row: int, n_isl: int) -> tuple[dict[str, float], dict[str, float], str]:
    """The exposed breakdown (terms > 0; compute always, the island sync between islands), the
    hidden time per term, and the bottleneck: ``max(bd, key=bd.__getitem__)`` (the first of the
    largest; no term kept is nan), found on the way."""
    keep = ("compute", "island_sync") if n_isl > 1 else ("compute",)
    bd: dict[str, float] = {}
    top, top_x = "", -1.0  # every term kept is >= 0.0: the first one kept replaces it
    for k, v in _terms(_detailed(out.breakdown)):  # BREAKDOWN_TERMS, in order
        x = v if type(v) is float else _fat(v, row)  # the scalar path's floats: no call each
        if x > 0:  # max(0.0, x) kept where > 0 (a negative, zero or nan term: 0.0 where kept)
            bd[k] = x
        elif k in keep:
            bd[k] = x = 0.0
        else:
            continue
        if x > top_x:  # max's own test: a later term only where strictly larger
            top, top_x = k, x
    ov: dict[str, float] = {}
    for k, v in _terms(_detailed(out.overlapped)):
        x = v if type(v) is float else _fat(v, row)
        if x > 0 or (k == "island_sync" and n_isl > 1):
            ov[k] = x
    return bd, ov, top


def _levels(out: Outputs, row: int, bd: dict[str, float], ov: dict[str, float]) -> dict[str, Any]:
    """Communication time per step by topology level (see :attr:`Report.levels`)."""
    # sum() itself (Python 3.12+ sums floats with Neumaier's compensation: a chain of + is not it)
    b, o = bd.get, ov.get
    comm_in = sum(
        (b("tp_comm", 0.0), b("cp_comm", 0.0), b("ep_comm", 0.0), b("pp_comm", 0.0), b("dp_comm", 0.0))
    )
    return {
        "intra_island": {
            "time_s": comm_in + sum((o("tp_comm", 0.0), o("cp_comm", 0.0), o("dp_comm", 0.0))),
            "exposed_s": comm_in,
        },
        "wan": {
            "time_s": _fat(out.wan_s, row),
            "exposed_s": bd.get("island_sync", 0.0),
            "bytes_per_island": _fat(out.egress_bytes_per_step, row),
            "round_s": _fat(out.wan_round_s, row),
        },
    }


def _island_entries(
    res: Resolved, out: Outputs, row: int, step: float, tps: float, notes: list[str], figures: ReportFigures
):
    """Per-island report entries, the total cost and the wall-clock time.

    * ``tokens_per_s``: the island's share of the global batch (proportional to its
      data-parallel replicas) per averaged step, so the islands sum to the total;
      ``tokens_per_s_per_gpu`` over the GPUs it uses (``gpus``).
    * ``breakdown_s``: the island's own terms + its ``idle`` + the exposed ``island_sync``,
      adding up to the global ``step_time_s``.
    * ``step_time_s``: the island's own inner step; ``idle_s`` / ``idle_fraction``:
      time per step it waits for slower islands; ``compute_utilization``: its own
      step over the global step (it waits on the WAN sync and on slower islands).
    * ``wall_clock_s`` = ``training.tokens / tokens_per_s`` (islands train side by side,
      so every island's wall-clock is the total); ``tokens``: the island's share.
    * ``cost_usd`` = ``gpus_billed x wall_clock_s / 3600 x usd_per_gpu_hour`` (every GPU
      the island has -- ``nodes x gpus_per_node`` -- is rented or owned for the whole
      run, used or not) ``+ egress_gb x egress_usd_per_gb``, where ``egress_gb`` is
      the traffic the island sends to other islands over the run
      (bytes per step x ``training.tokens / (global_batch x seq_len)`` steps) and
      the egress price is the island's cost source's (the party that bills the
      island), or the network link's when the island has no cost source. Null
      when the price is unknown (``CostSource.gpu_hour_usd`` is nan); the total
      is then null too.
    """
    tokens = res.scenario.training.tokens
    wall = tokens / tps if tokens else None
    steps = figures.steps
    egress_step = _fat(out.egress_bytes_per_step, row)
    o = out.island
    obd = _detailed(o.breakdown)
    entries = []
    total_cost = 0.0 if wall is not None else None
    for j, p in enumerate(figures.prices):
        g = int(_at(o.gpus, row, j))
        isl_tps = o.tokens_per_s
        if type(isl_tps) is not float:  # the scalar path's floats as they are (no call each)
            isl_tps = _fat(isl_tps, row, j)
        price = p.rate
        egress_gb = egress_step * steps / 1e9 if steps is not None else None
        cost = gpu_cost = egress_cost = None
        if wall is not None and egress_gb is not None:
            if p.known:  # island_cost_usd of the island's kept prices
                gpu_cost = gpu_time_usd(p.gpus_billed, price, wall)
                egress_cost = egress_usd(egress_gb * 1e9, p.egress_usd_per_gb)
                cost = gpu_cost + egress_cost
            else:
                notes.append(figures.unpriced_notes[j])
        if total_cost is not None:
            total_cost = None if cost is None else total_cost + cost
        # max(0.0, x) of a float written out: x where x > 0.0, else 0.0 (a nan or -0.0 too)
        idle = o.idle_s
        if type(idle) is not float:
            idle = _fat(idle, row, j)
        idle = idle if idle > 0.0 else 0.0
        own_bd = _own_breakdown(obd, row, j)
        own_bd["idle"] = idle
        sync = obd.island_sync_s
        if type(sync) is not float:
            sync = _fat(sync, row, j)
        own_bd["island_sync"] = sync if sync > 0.0 else 0.0
        # (the scalar path's floats as they are: _fat's test written out, no call each)
        entries.append(
            {
                "name": p.name,
                "gpu": figures.gpu_names[j],
                "gpus": g,
                "gpus_billed": p.gpus_billed,
                "tokens_per_s": isl_tps,
                "tokens_per_s_per_gpu": isl_tps / g if g else None,
                "step_time_s": x if type(x := o.step_s) is float else _fat(x, row, j),
                "idle_s": idle,
                "idle_fraction": idle / step,
                "compute_utilization": x if type(x := o.utilization) is float else _fat(x, row, j),
                "breakdown_s": own_bd,
                "memory_per_gpu_gb": (x if type(x := o.memory_bytes) is float else _fat(x, row, j)) / 1e9,
                "batch_per_step": x if type(x := o.batch_sequences) is float else _fat(x, row, j),
                "tokens": tokens * isl_tps / tps if tokens else None,
                "wall_clock_s": wall,
                "cost_source": p.price_source,
                "usd_per_gpu_hour": price if p.known else None,
                "gpu_cost_usd": gpu_cost,
                "egress_gb": egress_gb,
                "egress_cost_usd": egress_cost,
                "cost_usd": cost,
            }
        )
    return entries, total_cost, wall


#: :class:`Breakdown`'s own terms (without the island sync and idle time): their names and one
#: getter of their values, in field order.
_OWN_NAMES = tuple(f.name.removesuffix("_s") for f in attrs.fields(Breakdown) if f.name not in _NOT_OWN)
_OWN_VALUES = attrgetter(*(f.name for f in attrs.fields(Breakdown) if f.name not in _NOT_OWN))


def _own_breakdown(bd: Breakdown, row: int, j: int) -> dict[str, float]:
    """Island ``j``'s own terms (> 0; compute always), without the island sync and idle time."""
    own: dict[str, float] = {}
    if type(bd) is Breakdown:  # the kept getter of the own terms: no test of each name
        for k, v in zip(_OWN_NAMES, _OWN_VALUES(bd)):  # noqa: B905 (one field list)
            x = v if type(v) is float else _fat(v, row, j)
            if x > 0 or k == "compute":
                own[k] = x
        return own
    for k, v in _terms(bd):
        if k != "island_sync" and k != "idle":
            x = v if type(v) is float else _fat(v, row, j)
            if x > 0 or k == "compute":
                own[k] = x
    return own


def _fmt_int(x) -> str:
    x = float(x)
    if not math.isfinite(x):
        return "-"
    return str(round(x)) if abs(x) < 1e15 and abs(x - round(x)) < 1e-9 else f"{x:.3g}"
