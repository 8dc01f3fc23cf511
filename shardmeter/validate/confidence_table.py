"""The table the report's confidence band is looked up in (``validation_data/residuals.json``):
every bundled published run predicted, its residual and features recorded, and its
out-of-sample residual: the run predicted with the efficiencies fitted without its source group
(the document's ``holdout.fits``, written by ``tools/fit_efficiency.py --holdout
--write-residuals``). Written by ``tools/confidence_table.py --write``; read by
:mod:`shardmeter.report.confidence`."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from shardmeter.estimator import Estimator
from shardmeter.model.evaluate import evaluate_columns
from shardmeter.report.confidence import TABLE_FILE, features_of
from shardmeter.validate.run import _group, bundled_validation_dir, collect_files

__all__ = ["compute_runs", "param_keys", "stored_document", "SAME_CHIP", "TABLE_PATH"]

#: The stored table (inside the package: an editable install writes the source tree's copy).
TABLE_PATH = Path(str(resources.files("shardmeter.validation_data").joinpath(TABLE_FILE)))


def stored_document() -> dict[str, Any]:
    """The stored table's whole JSON document."""
    import json

    text = resources.files("shardmeter.validation_data").joinpath(TABLE_FILE).read_text(encoding="utf-8")
    return dict(json.loads(text))


def _run_stack(path: str, group: str) -> str:
    """A published run's stack: its file's ``training.framework``, else its source group."""
    from shardmeter.load.files import read_scenario_file

    training = read_scenario_file(path)[0].get("training", {})
    fw = training.get("framework") if isinstance(training, dict) else None
    return fw if isinstance(fw, str) and fw else group


#: The measured field a run's residual is taken from, in order of preference.
_FIELDS = ("tokens_per_s_per_gpu", "step_time_s", "compute_utilization")
#: The input column each kind of fitted parameter sets.
_COLUMNS = {"matmul": "hardware.gemm_efficiency", "attention": "hardware.attention_efficiency"}


#: GPUs that share another's fitted efficiencies: the same die, so the same kernels at the same
#: fraction of peak (the model prices each one's own peaks, HBM and links apart). The H200 is a
#: GH100 with HBM3e (NVIDIA H200 datasheet); its two bundled runs are not enough to fit a chip of
#: their own (a 2-case fit put it 0.05 above the H100's 110 FlashAttention-2 cases).
SAME_CHIP: dict[str, str] = {
    "h200-sxm": "h100-sxm",
    "h100-pcie": "h100-sxm",
    "h100-nvl": "h100-sxm",
    "gh200": "h100-sxm",
    "gb200": "b200",
}


def param_keys(res: Any, island: Any) -> dict[str, str]:
    """The fitted parameters one island of ``res`` reads, by kind, spelled as
    ``tools/fit_efficiency.py`` stores them: ``matmul/GPU/16bit`` or ``matmul/GPU/fp8``, and
    ``attention/GPU/flash2`` where the scenario runs FlashAttention-2 on a GPU with its own
    figure for it, else ``attention/GPU/``; none for attention where the scenario materialises
    its scores (two batched GEMMs: it reads no attention figure), as the tool's ``_param_keys``
    and ``_kernel``; a GPU of :data:`SAME_CHIP` reads its chip's figures (``GPU`` is the chip)."""
    t, gpu = res.scenario.training, island.gpu
    chip = SAME_CHIP.get(gpu.name, gpu.name)
    matmul = f"matmul/{chip}/{'fp8' if t.precision == 'fp8' else '16bit'}"
    if t.attention == "materialized":
        return {"matmul": matmul}
    kernel = "flash2" if t.attention == "flash2" and gpu.attention_efficiency_flash2 is not None else ""
    return {"matmul": matmul, "attention": f"attention/{chip}/{kernel}"}


def _held_out(est: Estimator, res: Any, field: str, fit: Mapping[str, float]) -> tuple[float, bool]:
    """``field`` predicted with the efficiencies of ``fit`` in place of the catalogue's, and
    whether ``fit`` holds every parameter the run reads (one it lacks keeps the catalogue's)."""
    inp, table = est.inputs(res)
    cols = dict(inp.columns())
    for c in _COLUMNS.values():
        cols[c] = np.array(cols[c], dtype=float, copy=True)
    informed = True
    for j, isl in enumerate(res.islands):
        for kind, key in param_keys(res, isl).items():
            if key in fit:
                cols[_COLUMNS[kind]][..., j] = fit[key]
            else:
                informed = False
    out = evaluate_columns(cols, table)
    return float(np.asarray(getattr(out, field)).ravel()[0]), informed


def _ratio(field: str, pred: float, meas: float) -> float:
    """A rate's ``predicted / measured``; a time's ``measured / predicted``."""
    return meas / pred if field == "step_time_s" else pred / meas


def compute_runs(
    paths: Iterable[str] | None = None, fits: Mapping[str, Mapping[str, float]] | None = None
) -> list[dict[str, Any]]:
    """The table :func:`validated_runs` reads, computed now by predicting every run of
    ``paths`` (default: the bundled published runs), as JSON-ready dicts sorted by file; runs
    that fail (invalid or infeasible) have no residual and are left out. With ``fits`` (per
    source group, the parameters fitted without it) each run of a group in it also gets
    ``logo_residual`` and ``logo_informed``. Numbers are rounded to 6 decimals (residuals, MFU)
    so the stored file compares exactly across machines."""
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
        ratio = _ratio(field, pred, meas)
        mfu = None if field == "compute_utilization" or rep.mfu is None else rep.mfu / ratio
        group = _group(path)
        f = features_of(res, rep.gpus, rep.params, stack=_run_stack(path, group))
        row: dict[str, Any] = {
            "id": os.path.splitext(os.path.basename(path))[0],
            "group": group,
            "features": attrs.asdict(f),
            "field": field,
            "residual": round(ratio - 1.0, 6),
            "measured_mfu": None if mfu is None else round(mfu, 6),
        }
        if fits is not None and group in fits:
            held, informed = _held_out(est, res, field, fits[group])
            row["logo_residual"] = round(_ratio(field, held, meas) - 1.0, 6)
            row["logo_informed"] = informed
        out.append(row)
    return out
