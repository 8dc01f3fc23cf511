"""The table the report's confidence band is looked up in (``validation_data/residuals.json``):
every bundled published run predicted, its residual and features recorded. Written by
``tools/confidence_table.py --write``; read by :mod:`shardmeter.report.confidence`."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import attrs

from shardmeter.estimator import Estimator
from shardmeter.report.confidence import features_of
from shardmeter.validate.run import _group, bundled_validation_dir, collect_files

__all__ = ["compute_runs"]


def _run_stack(path: str, group: str) -> str:
    """A published run's stack: its file's ``training.framework``, else its source group."""
    from shardmeter.load.files import read_scenario_file

    training = read_scenario_file(path)[0].get("training", {})
    fw = training.get("framework") if isinstance(training, dict) else None
    return fw if isinstance(fw, str) and fw else group


#: The measured field a run's residual is taken from, in order of preference.
_FIELDS = ("tokens_per_s_per_gpu", "step_time_s", "compute_utilization")


def compute_runs(paths: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The table :func:`validated_runs` reads, computed now by predicting every run of
    ``paths`` (default: the bundled published runs), as JSON-ready dicts sorted by file; runs
    that fail (invalid or infeasible) have no residual and are left out. Numbers are rounded
    to 6 decimals (residuals, MFU) so the stored file compares exactly across machines."""
    est = Estimator()
    out: list[dict[str, Any]] = []
    for path in collect_files(paths or [bundled_validation_dir()]):
        sc = est.load(path)
        field = next((k for k in _FIELDS if k in sc.measured), None)
        if field is None:
            continue
        res = est.resolve(sc)
        rep = est.estimate(sc)
        if not rep.feasible:
            continue
        pred, meas = float(getattr(rep, field)), float(sc.measured[field])
        # a rate's residual is predicted / measured - 1; a time's is measured / predicted - 1
        ratio = meas / pred if field == "step_time_s" else pred / meas
        mfu = None if field == "compute_utilization" or rep.mfu is None else rep.mfu / ratio
        group = _group(path)
        f = features_of(res, rep.gpus, rep.params, stack=_run_stack(path, group))
        out.append(
            {
                "id": os.path.splitext(os.path.basename(path))[0],
                "group": group,
                "features": attrs.asdict(f),
                "field": field,
                "residual": round(ratio - 1.0, 6),
                "measured_mfu": None if mfu is None else round(mfu, 6),
            }
        )
    return out
