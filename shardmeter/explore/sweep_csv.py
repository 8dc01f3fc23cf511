"""``sweep --csv OUT``: one row per grid point (the varied keys, the report fields, the step
breakdown, the scaling efficiency), written atomically; ``--resume`` reads the rows back so
grid points already in OUT are not computed again."""

from __future__ import annotations

import csv
import os
from typing import Any

from ..errors import ShardMeterError
from ..io import atomic_write
from ..model.evaluate import BREAKDOWN_TERMS
from .values import format_value, parse_values

__all__ = ["CSV_FIELDS", "write_csv", "read_resume"]

#: Report fields written to ``sweep --csv`` (after the varied keys), then the breakdown and analysis.
CSV_FIELDS = (
    "feasible",
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "model_tflops_per_gpu",
    "mfu",
    "hfu",
    "memory_per_gpu_gb",
    "compute_utilization",
    "gpus",
    "wall_clock_s",
    "cost_usd",
    "bottleneck",
    "regime",
    "reasons",
)


def _flat(report: dict[str, Any]) -> dict[str, Any]:
    row = {}
    for f in CSV_FIELDS:
        v = report.get(f)
        row[f] = " | ".join(v) if isinstance(v, list) else v
    for t in BREAKDOWN_TERMS:
        row[f"breakdown_{t}"] = (
            (report.get("breakdown_s") or {}).get(t, 0.0) if report.get("feasible") else None
        )
    return row


def _csv_header(keys):
    return [*keys, *CSV_FIELDS, *(f"breakdown_{t}" for t in BREAKDOWN_TERMS), "scaling_efficiency"]


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return format_value(v)


def write_csv(path, keys, rows, analysis) -> None:
    """Write sweep ``rows`` over ``keys`` to ``path`` (a resumed row keeps its cells as read)."""
    header = _csv_header(keys)
    eff = analysis.get("scaling_efficiency") if analysis else None
    with atomic_write(path) as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for i, r in enumerate(rows):
            flat = r.get("_csv") or _flat(r["report"])
            cells: list[Any] = [format_value(r["vary"][k]) for k in keys]
            cells += [
                flat.get(h) if isinstance(flat.get(h), str) and r.get("_csv") else _cell(flat.get(h))
                for h in header[len(keys) : -1]
            ]
            cells.append(_cell(eff[i]) if eff and i < len(eff) else "")
            w.writerow(cells)


def read_resume(path, keys) -> dict[tuple, dict[str, Any]]:
    """Rows of an earlier ``--csv`` file, by their formatted vary values."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rd = csv.reader(fh)
            header = next(rd, None)
            lines = list(rd)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ShardMeterError(f"--resume: cannot read {path}: {exc}") from None
    if header is None:
        return {}
    if header[: len(keys)] != list(keys) or header[len(keys) : len(keys) + 1] != ["feasible"]:
        raise ShardMeterError(
            f"--resume: {path} was written by a sweep over other keys "
            f"({', '.join(header[: max(1, header.index('feasible') if 'feasible' in header else 1)])})"
        )
    out = {}
    for line in lines:
        if len(line) != len(header):
            continue  # a damaged line is computed again
        cells = dict(zip(header, line, strict=True))
        sig = tuple(line[: len(keys)])
        vary = {k: parse_values(k, line[j])[0] if line[j] else "" for j, k in enumerate(keys)}
        out[sig] = {
            "vary": vary,
            "report": _resumed_report(cells, header, len(keys)),
            "resumed": True,
            "_csv": {h: cells[h] for h in header[len(keys) :]},
        }
    return out


def _resumed_report(cells: dict[str, str], header: list[str], n_keys: int) -> dict[str, Any]:
    """The report fields of one ``--csv`` row (``cells``: header -> cell), as the sweep's
    table, analysis and plot read them."""
    rep: dict[str, Any] = {}
    for h in header[n_keys:]:
        c = cells[h]
        if h == "feasible":
            rep[h] = c == "true"
        elif h in ("bottleneck", "regime"):
            rep[h] = c or None
        elif h == "reasons":
            rep[h] = [x for x in c.split(" | ") if x]
        elif h.startswith("breakdown_") or h == "scaling_efficiency":
            continue
        else:
            try:
                rep[h] = float(c) if c else None
            except ValueError:
                rep[h] = None
    if rep.get("gpus") is not None:
        rep["gpus"] = int(rep["gpus"])
    rep["breakdown_s"] = {h[10:]: float(cells[h]) for h in header if h.startswith("breakdown_") and cells[h]}
    return rep
