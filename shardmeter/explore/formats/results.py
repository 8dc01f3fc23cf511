"""The typed results of :func:`shardmeter.sweep`, :func:`shardmeter.plan` and
:func:`shardmeter.sensitivity`: frozen records built from the commands' ``--json`` documents.

Each has ``to_dict()`` (that document, as ``--json`` prints it: non-finite numbers as None),
``to_dataframe()`` (pandas, the ``dataframe`` extra), a short ``repr`` and ``_repr_html_``
(a small escaped table, for Jupyter)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from shardmeter.errors import ShardMeterError
from shardmeter.report.build import Report, json_safe
from shardmeter.report.notebook import flat_report, html_table, require_pandas

__all__ = ["SweepRow", "SweepResult", "Plan", "PlanResult", "SensitivityEntry", "SensitivityResult"]

#: Rows an HTML table shows before it says how many more there are.
HTML_ROWS = 20
_PLAN_KEYS = ("evaluated", "feasible", "seconds", "plans")


def _tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(items)


def _report(doc: Mapping[str, Any]) -> Report:
    """A :class:`Report` from its ``to_dict()`` document."""
    names = {f.name for f in attrs.fields(Report)}
    return Report(**{k: v for k, v in doc.items() if k in names})


def _more(n: int) -> str:
    return f" (first {HTML_ROWS} of {n} rows)" if n > HTML_ROWS else ""


@attrs.frozen
class SweepRow:
    """One grid point: the varied values (key -> value) and its report."""

    vary: Mapping[str, Any]
    report: Report


@attrs.frozen
class SweepResult:
    """A sweep: the varied ``keys`` (first varies slowest), one row per grid point and the
    grid's ``analysis`` (``x``, ``regime``, ``transitions``, ``scaling_efficiency``, ``knee``:
    docs/exploring.md)."""

    keys: tuple[str, ...] = attrs.field(converter=_tuple)
    rows: tuple[SweepRow, ...] = attrs.field(converter=_tuple)
    analysis: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def from_dict(cls, keys: Iterable[str], doc: Mapping[str, Any]) -> SweepResult:
        """From the ``sweep --json`` document of a sweep over ``keys``."""
        rows = [SweepRow(dict(r["vary"]), _report(r["report"])) for r in doc["rows"]]
        return cls(keys, rows, dict(doc["analysis"]))

    def to_dict(self) -> dict[str, Any]:
        """The ``sweep --json`` document."""
        rows = [{"vary": dict(r.vary), "report": r.report.to_dict()} for r in self.rows]
        return json_safe({"rows": rows, "analysis": dict(self.analysis)})

    def to_dataframe(self) -> Any:  # a pandas.DataFrame (an optional dependency, without stubs)
        """One row per grid point: the varied keys, the report's scalar fields
        (``breakdown_s.<term>`` too) and the analysis's per-row lists (``scaling_efficiency``);
        the whole analysis is in ``df.attrs["analysis"]``."""
        pd = require_pandas()
        recs = [{**dict(r.vary), **flat_report(r.report)} for r in self.rows]
        for name, vals in self.analysis.items():
            if isinstance(vals, list) and len(vals) == len(recs) and recs and name not in recs[0]:
                for rec, v in zip(recs, vals, strict=True):
                    rec[name] = v
        df = pd.DataFrame.from_records(recs)
        bd = [c for c in df.columns if str(c).startswith("breakdown_s.")]
        df[bd] = df[bd].where(df[bd].notna() | ~df["feasible"].to_numpy()[:, None], 0.0)
        df.attrs["analysis"] = json_safe(dict(self.analysis))
        return df

    def __repr__(self) -> str:
        ok = sum(r.report.feasible for r in self.rows)
        knee = self.analysis.get("knee")
        tail = f", knee={knee!r}" if "knee" in self.analysis else ""
        return f"<SweepResult {len(self.rows)} rows over {', '.join(self.keys)}: {ok} feasible{tail}>"

    def _repr_html_(self) -> str:
        cols = ("tokens_per_s", "step_time_s", "mfu", "memory_per_gpu_gb", "bottleneck")
        rows = [
            (*(r.vary.get(k) for k in self.keys), *(getattr(r.report, c) for c in cols))
            for r in self.rows[:HTML_ROWS]
        ]
        cap = f"ShardMeter sweep{_more(len(self.rows))}"
        if self.analysis.get("knee") is not None:
            cap += f"; knee at {self.analysis['x']} = {self.analysis['knee']}"
        return html_table((*self.keys, *cols), rows, caption=cap)


@attrs.frozen
class Plan:
    """One plan found by the search: its ``rank`` (1 = best), layout (``parallelism``,
    ``training``, ``islands``), ``report`` and the plan's other fields (``id``,
    ``time_per_token_s``, ``cost_per_token_usd``, ...) in ``fields``."""

    rank: int
    parallelism: Mapping[str, Any]
    training: Mapping[str, Any]
    islands: tuple[Mapping[str, Any], ...] = attrs.field(converter=_tuple)
    report: Report
    fields: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Plan:
        named = ("rank", "parallelism", "training", "islands", "report")
        rest = {k: v for k, v in doc.items() if k not in named}
        return cls(
            doc["rank"],
            dict(doc["parallelism"]),
            dict(doc["training"]),
            doc["islands"],
            _report(doc["report"]),
            rest,
        )

    @property
    def time_per_token_s(self) -> float | None:
        return self.fields.get("time_per_token_s")

    @property
    def cost_per_token_usd(self) -> float | None:
        return self.fields.get("cost_per_token_usd")

    def to_dict(self) -> dict[str, Any]:
        """The plan as ``plan --json`` lists it."""
        return json_safe(
            {
                **dict(self.fields),
                "rank": self.rank,
                "parallelism": dict(self.parallelism),
                "training": dict(self.training),
                "islands": [dict(i) for i in self.islands],
                "report": self.report.to_dict(),
            }
        )

    def flat(self) -> dict[str, Any]:
        """One data frame row: rank, the layout's knobs, each island's fields as
        ``island[i].<field>``, the per-token figures and the report's scalar fields."""
        row: dict[str, Any] = {"rank": self.rank, **dict(self.parallelism), **dict(self.training)}
        for i, isl in enumerate(self.islands):
            row.update({f"island[{i}].{k}": v for k, v in isl.items()})
        row["time_per_token_s"] = self.time_per_token_s
        row["cost_per_token_usd"] = self.cost_per_token_usd
        return row | flat_report(self.report)

    def __repr__(self) -> str:
        p, r = self.parallelism, self.report
        knobs = " ".join(f"{k}={p[k]}" for k in ("tp", "pp", "dp", "cp", "ep") if k in p)
        cost = f", ${r.cost_usd:,.0f}" if r.cost_usd is not None else ""
        speed = f"{r.tokens_per_s:.3g} tok/s" if r.tokens_per_s is not None else "infeasible"
        return f"<Plan #{self.rank} {knobs} {p.get('sharding', '')}: {speed}{cost}>"


@attrs.frozen
class PlanResult:
    """A search: candidates ``evaluated`` and ``feasible``, its wall time ``seconds``, the
    ``plans`` best first, and the rest of the ``plan --json`` document (``objective``,
    ``infeasible`` counts per reason key, ``space_size``, ...) in ``details``."""

    evaluated: int
    feasible: int
    seconds: float
    plans: tuple[Plan, ...] = attrs.field(converter=_tuple)
    details: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> PlanResult:
        """From the ``plan --json`` document."""
        rest = {k: v for k, v in doc.items() if k not in _PLAN_KEYS}
        plans = [Plan.from_dict(p) for p in doc["plans"]]
        return cls(int(doc["evaluated"]), int(doc["feasible"]), float(doc["seconds"]), plans, rest)

    @property
    def best(self) -> Plan | None:
        """The first plan, None when no candidate is feasible."""
        return self.plans[0] if self.plans else None

    def to_dict(self) -> dict[str, Any]:
        """The ``plan --json`` document."""
        head = {"evaluated": self.evaluated, "feasible": self.feasible, "seconds": self.seconds}
        return json_safe({**head, "plans": [p.to_dict() for p in self.plans], **dict(self.details)})

    def to_dataframe(self) -> Any:  # a pandas.DataFrame (an optional dependency, without stubs)
        """One row per plan, best first (see :meth:`Plan.flat`)."""
        pd = require_pandas()
        return pd.DataFrame.from_records([p.flat() for p in self.plans])

    def __repr__(self) -> str:
        best = f", best {self.best!r}" if self.best else ""
        return (
            f"<PlanResult {self.details.get('objective', '')}: {len(self.plans)} plans of "
            f"{self.feasible:,} feasible / {self.evaluated:,} candidates in {self.seconds:.2f} s{best}>"
        )

    def _repr_html_(self) -> str:
        knobs = ("tp", "pp", "dp", "cp", "ep", "sharding", "schedule", "micro_batch", "recompute")
        rows = []
        for p in self.plans[:HTML_ROWS]:
            f = p.flat()
            rows.append(
                (
                    p.rank,
                    *(f.get(k) for k in knobs),
                    p.report.tokens_per_s,
                    p.report.cost_usd,
                    p.report.bottleneck,
                )
            )
        cap = f"ShardMeter plan: {self.feasible:,} feasible of {self.evaluated:,}{_more(len(self.plans))}"
        return html_table(("rank", *knobs, "tokens_per_s", "cost_usd", "bottleneck"), rows, caption=cap)


@attrs.frozen
class SensitivityEntry:
    """One input changed by the step: its stable key ``resource`` and readable ``label``, the
    change (``"+10%"``), the throughput gain and elasticity, the cost's, feasibility and the
    memory left free after the change (:mod:`shardmeter.explore.search.sensitivity`)."""

    rank: int
    resource: str
    label: str
    change: str
    throughput_gain_pct: float | None
    elasticity: float | None
    cost_change_pct: float | None
    cost_elasticity: float | None
    feasible: bool
    memory_headroom_gb: float | None
    step_time_s: float | None
    summary: str
    inputs: tuple[str, ...] = attrs.field(converter=_tuple)


_ENTRY_COLUMNS = [f.name for f in attrs.fields(SensitivityEntry)]


@attrs.frozen
class SensitivityResult:
    """The scenario's own figures (``feasible``, ``step_time_s``, ``tokens_per_s``,
    ``bottleneck``, ``regime``, ``step``), the ranked ``entries`` and the rest of the
    ``sensitivity --json`` document (memory, cost) in ``details``."""

    feasible: bool
    reasons: tuple[str, ...] = attrs.field(converter=_tuple)
    step_time_s: float | None
    tokens_per_s: float | None
    bottleneck: str | None
    regime: str | None
    step: float
    entries: tuple[SensitivityEntry, ...] = attrs.field(converter=_tuple)
    details: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> SensitivityResult:
        """From the ``sensitivity --json`` document."""
        named = ("feasible", "reasons", "step_time_s", "tokens_per_s", "bottleneck", "regime", "step")
        rest = {k: v for k, v in doc.items() if k not in (*named, "resources")}
        entries = [SensitivityEntry(**e) for e in doc["resources"]]
        return cls(**{k: doc[k] for k in named}, entries=entries, details=rest)

    def entry(self, resource: str) -> SensitivityEntry:
        """The entry of machine key ``resource`` (``"gpu_flops"``, ``"inter_node_bandwidth"``...)."""
        for e in self.entries:
            if e.resource == resource:
                return e
        keys = ", ".join(e.resource for e in self.entries)
        raise ShardMeterError(f"resource {resource!r} is not one of this scenario's inputs: {keys}")

    def to_dict(self) -> dict[str, Any]:
        """The ``sensitivity --json`` document."""
        head = {
            k: getattr(self, k) for k in ("feasible", "step_time_s", "tokens_per_s", "bottleneck", "regime")
        }
        entries = [attrs.asdict(e) | {"inputs": list(e.inputs)} for e in self.entries]
        return json_safe(
            {
                **head,
                "reasons": list(self.reasons),
                "step": self.step,
                **dict(self.details),
                "resources": entries,
            }
        )

    def to_dataframe(self) -> Any:  # a pandas.DataFrame (an optional dependency, without stubs)
        """One row per input, ranked (``inputs`` joined by ``", "``)."""
        pd = require_pandas()
        recs = [attrs.asdict(e) | {"inputs": ", ".join(e.inputs)} for e in self.entries]
        return pd.DataFrame.from_records(recs, columns=_ENTRY_COLUMNS)

    def __repr__(self) -> str:
        if not self.feasible:
            return f"<SensitivityResult infeasible: {len(self.entries)} inputs, {self.reasons[0] if self.reasons else ''}>"
        top = self.entries[0] if self.entries else None
        best = (
            f", top: {top.label} (elasticity {top.elasticity:.3f})"
            if top and top.elasticity is not None
            else ""
        )
        return f"<SensitivityResult {len(self.entries)} inputs at {self.step * 100:g}%{best}>"

    def _repr_html_(self) -> str:
        cols = (
            "rank",
            "label",
            "change",
            "throughput_gain_pct",
            "elasticity",
            "cost_elasticity",
            "memory_headroom_gb",
            "feasible",
        )
        rows = [tuple(getattr(e, c) for c in cols) for e in self.entries]
        cap = f"ShardMeter sensitivity: {self.regime or 'infeasible'}, bottleneck {self.bottleneck or '-'}"
        return html_table(
            (
                "rank",
                "input",
                "change",
                "throughput %",
                "elasticity",
                "cost elasticity",
                "memory free (GB)",
                "feasible",
            ),
            rows,
            caption=cap,
        )
