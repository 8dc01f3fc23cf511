"""The explore layer in Python: :func:`sweep`, :func:`plan` and :func:`sensitivity`, the
``shardmeter sweep | plan | sensitivity`` commands as functions returning typed results
(:mod:`shardmeter.explore.formats.results`; docs/python-api.md).

``scenario`` is what :func:`shardmeter.estimate` takes: a path, a dict of tables or a loaded
:class:`~shardmeter.Scenario`; ``overrides`` are ``--set`` items (``"KEY=VALUE"`` strings,
``(key, value)`` pairs or a ``{key: value}`` dict). Bad arguments are one-line
:class:`~shardmeter.ShardMeterError`\\ s naming the argument."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from shardmeter.errors import ShardMeterError
from shardmeter.explore.formats.results import PlanResult, SensitivityResult, SweepResult
from shardmeter.explore.search.sensitivity import STEP
from shardmeter.explore.search.values import parse_values, parse_vary
from shardmeter.numbers import check_argument

#: Most of any count an argument gives (the scenario's counts, ``load.specs.MAX_COUNT``).
MAX_COUNT = 2**40

__all__ = ["sweep", "plan", "sensitivity"]


def _overrides(overrides: Any) -> list[Any]:
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, Mapping):
        return list(overrides.items())
    return list(overrides or ())


def _values(arg: str, key: Any, vals: Any, *, allow_none: bool = False) -> list[Any] | None:
    """One key's values: a list, tuple, range or array, or a ``--vary`` string (``"1..64x2"``)."""
    if not isinstance(key, str) or not key:
        raise ShardMeterError(f"{arg}: keys are scenario keys as strings, got {key!r}")
    if vals is None and allow_none:
        return None
    if isinstance(vals, str):
        return parse_values(key, vals)
    if hasattr(vals, "tolist") and not isinstance(vals, (str, bytes)):
        vals = vals.tolist()
    if not isinstance(vals, (list, tuple, range)):
        raise ShardMeterError(
            f"{arg}[{key!r}]: expected a list of values or a range string like '1..64x2', got {vals!r}"
        )
    if not vals:
        raise ShardMeterError(f"{arg}[{key!r}]: no values")
    return list(vals)


def _vary(vary: Any) -> list[tuple[str, list[Any]]]:
    """``vary`` as ``(key, values)`` pairs: a ``{key: values}`` dict, ``"KEY=V1,V2"`` strings
    or ``(key, values)`` pairs."""
    if isinstance(vary, str):
        vary = [vary]
    if isinstance(vary, Mapping):
        items = list(vary.items())
    elif isinstance(vary, Sequence):
        items = [parse_vary(v) if isinstance(v, str) else v for v in vary]
    else:
        raise ShardMeterError(f"vary: expected a dict of key -> values or 'KEY=V1,V2' strings, got {vary!r}")
    out = []
    for item in items:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise ShardMeterError(f"vary: expected 'KEY=V1,V2' or a (key, values) pair, got {item!r}")
        vals = _values("vary", item[0], item[1])
        assert vals is not None
        out.append((item[0], vals))
    if not out:
        raise ShardMeterError("vary: give at least one key to vary")
    return out


def _only(only: Any) -> dict[str, Any]:
    """``only`` as knob -> values (None: the scenario's value): a dict or ``"KNOB=V1,V2"`` /
    ``"KNOB"`` strings."""
    if only is None:
        return {}
    if isinstance(only, str):
        only = [only]
    if isinstance(only, Mapping):
        return {k: _values("only", k, v, allow_none=True) for k, v in only.items()}
    out: dict[str, Any] = {}
    for it in only:
        if not isinstance(it, str):
            raise ShardMeterError(f"only: expected a dict or 'KNOB=V1,V2' strings, got {it!r}")
        key, has, text = (s.strip() for s in it.partition("="))
        if key in out:
            raise ShardMeterError(f"only: {key} is given twice")
        out[key] = _values("only", key, text) if has else None
    return out


def _workers(workers: Any) -> int | None:
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1
    ):
        raise ShardMeterError(f"workers: expected a whole number >= 1, got {workers!r}")
    if workers is None:
        return None
    return int(check_argument(workers, name="workers", integer=True, minimum=1, maximum=MAX_COUNT))


def sweep(
    scenario: Any,
    vary: Any,
    *,
    overrides: Any = (),
    estimator: Any = None,
    workers: int | None = None,
    dask: Any = None,
) -> SweepResult:
    """``shardmeter sweep``: evaluate the grid of ``vary`` (first key slowest), e.g.
    ``{"island[0].nodes": [1, 2, 4]}``, ``{"island[0].nodes": "1..64x2"}`` or
    ``["island[0].nodes=1..64x2"]``; ``workers`` local processes or a ``dask`` scheduler
    address (or ``"local"``) score the chunks."""
    from shardmeter.explore.search.sweep import run_sweep

    pairs = _vary(vary)
    res = run_sweep(
        scenario,
        pairs,
        estimator=estimator,
        overrides=_overrides(overrides),
        workers=_workers(workers),
        dask=dask,
    )
    return SweepResult.from_dict([k for k, _ in pairs], res.to_dict())


def plan(
    scenario: Any,
    *,
    objective: str = "time",
    top: int = 10,
    max_gpus: int | None = None,
    budget_usd: float | None = None,
    deadline_days: float | None = None,
    only: Any = None,
    overrides: Any = (),
    estimator: Any = None,
    workers: int | None = None,
    dask: Any = None,
) -> PlanResult:
    """``shardmeter plan``: search the scenario's layouts for the ``top`` fastest
    (``objective="time"``), cheapest (``"cost"``) or the Pareto front (``"pareto"``);
    ``only`` restricts knobs (``{"tp": [1, 2], "pp": None}``: None keeps the scenario's
    value; or ``["tp=1,2", "pp"]``)."""
    from shardmeter.explore.search.plan import search

    budget_usd, deadline_days = (
        None if v is None else check_argument(v, name=name, above=0.0)
        for name, v in (("budget_usd", budget_usd), ("deadline_days", deadline_days))
    )
    if max_gpus is not None:
        max_gpus = int(check_argument(max_gpus, name="max_gpus", integer=True, minimum=1, maximum=MAX_COUNT))
    doc = search(
        scenario,
        estimator=estimator,
        overrides=_overrides(overrides),
        objective=objective,
        top=top,
        max_gpus=max_gpus,
        budget_usd=budget_usd,
        deadline_days=deadline_days,
        only=_only(only),
        workers=_workers(workers),
        dask=dask,
    )
    return PlanResult.from_dict(doc)


def sensitivity(
    scenario: Any, *, step: float = STEP, overrides: Any = (), estimator: Any = None
) -> SensitivityResult:
    """``shardmeter sensitivity``: throughput and cost elasticities to each input changed by the
    relative ``step`` (0 < step < 1), ranked."""
    from shardmeter.explore.search.sensitivity import sensitivity as run

    return SensitivityResult.from_dict(
        run(scenario, estimator=estimator, overrides=_overrides(overrides), step=step)
    )
