"""``sweep --csv OUT``: one row per grid point (the varied keys, the report fields, the step
breakdown, the scaling efficiency), written atomically; ``--resume`` reads the rows back so
grid points already in OUT are not computed again."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from shardmeter.errors import ShardMeterError
from shardmeter.explore.search.values import fields_of, format_value, parse_values
from shardmeter.io import atomic_write, resolve_output
from shardmeter.model.evaluate import BREAKDOWN_TERMS
from shardmeter.reading import InputError, read_input_bytes

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


#: What a feasible row always has (the sweep writes them; the table, analysis and plot read them).
_FEASIBLE_NEEDS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "gpus")
#: Bytes that were not UTF-8 (decoded as lone surrogates), and NUL: never in a CSV the sweep wrote.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
_NOT_TEXT = re.compile("[\udc80-\udcff\x00]")


def _flat(report: Mapping[str, Any]) -> dict[str, Any]:
    row = {}
    for f in CSV_FIELDS:
        v = report.get(f)
        row[f] = " | ".join(v) if isinstance(v, list) else v
    for t in BREAKDOWN_TERMS:
        row[f"breakdown_{t}"] = (
            (report.get("breakdown_s") or {}).get(t, 0.0) if report.get("feasible") else None
        )
    return row


def _csv_header(keys: Sequence[str]) -> list[str]:
    return [*keys, *CSV_FIELDS, *(f"breakdown_{t}" for t in BREAKDOWN_TERMS), "scaling_efficiency"]


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return format_value(v)


def write_csv(
    path: str | os.PathLike[str],
    keys: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    analysis: Mapping[str, Any] | None,
    *,
    label: str = "",
) -> None:
    """Write sweep ``rows`` over ``keys`` to ``path`` (a resumed row keeps its cells as read),
    atomically (:func:`~shardmeter.io.atomic_write`: a special file is refused, a symlink
    followed); ``label`` (``"--csv"``) goes before ``path`` in error messages."""
    header = _csv_header(keys)
    eff = analysis.get("scaling_efficiency") if analysis else None
    body = header[len(keys) : -1]
    with atomic_write(path, label=label) as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for i, r in enumerate(rows):
            resumed = r.get("_csv") if isinstance(r, dict) else None  # cells as read, kept as they are
            cells: list[Any] = [format_value(r["vary"][k]) for k in keys]
            if resumed:
                cells += [v if isinstance(v, str) else _cell(v) for v in (resumed.get(h) for h in body)]
            else:
                flat = _flat(fields_of(r))
                cells += [_cell(flat.get(h)) for h in body]
            cells.append(_cell(eff[i]) if eff and i < len(eff) else "")
            w.writerow(cells)


def read_resume(path: str | os.PathLike[str], keys: Sequence[str]) -> dict[tuple, dict[str, Any]]:
    """Rows of an earlier ``--csv`` file, by their formatted vary values.

    A damaged file is an error, never guessed at: a cell that is not UTF-8 text, text in a
    number column, a ``feasible`` cell other than ``true``/``false``, a feasible row without
    its step time, throughput or GPU count, a row with another number of columns than the
    header (a truncated or an edited line), or a header without the columns this version
    writes is one :class:`ShardMeterError` naming the file, the line and the column. Such a row
    is not silently computed again: a known row is what the user asked to keep (deleting the
    line computes it again). A row whose vary cells match no grid point is not resumed."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        return {}
    resolve_output(path, label="--csv")  # a FIFO or a device is refused before it is read
    try:  # the one reader: a regular file, bounded; cells that are not UTF-8 are damaged rows
        raw = read_input_bytes(path, what="sweep CSV")
    except InputError as exc:
        raise ShardMeterError(f"--resume: {exc}") from None
    text = raw.decode("utf-8-sig", errors="surrogateescape")
    header, lines = _read_rows(path, text)
    if header is None:
        return {}
    _check_header(path, header, list(keys))
    out = {}
    for ln, line in lines:
        if len(line) != len(header):
            _damaged(path, ln, None, f"{len(line)} columns where the header has {len(header)}")
        cells = dict(zip(header, line, strict=True))
        sig = tuple(line[: len(keys)])
        out[sig] = {
            "vary": {k: _vary_value(k, line[j]) for j, k in enumerate(keys)},
            "report": _resumed_report(path, ln, cells, header, len(keys)),
            "resumed": True,
            "_csv": {h: cells[h] for h in header[len(keys) :]},
        }
    return out


def _damaged(path: str, line: int, column: str | None, problem: str) -> NoReturn:
    where = f"line {line}" + (f", column {column}" if column else "")
    raise ShardMeterError(
        f"--resume: {path} {where}: {problem}; fix or delete that line (a damaged row is not computed again)"
    )


def _read_rows(path: str, text: str) -> tuple[list[str] | None, list[tuple[int, list[str]]]]:
    """The header and the ``(line number, cells)`` of each non-blank row of ``text``; a cell
    that is not text (bytes that are not UTF-8, a NUL) is an error naming its line and column."""
    rd = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, list[str]]] = []
    first = 1
    try:
        for row in rd:
            if row:
                rows.append((first, row))
            first = rd.line_num + 1
    except csv.Error as exc:
        _damaged(path, first, None, f"not CSV ({exc})")
    header = rows[0][1] if rows else None
    for ln, row in rows if _NOT_TEXT.search(text) else ():
        for j, cell in enumerate(row):
            if _NOT_TEXT.search(cell):
                col = header[j] if header is not None and j < len(header) and ln != rows[0][0] else None
                what = "bytes that are not UTF-8 text" if _NOT_UTF8.search(cell) else "a NUL byte"
                _damaged(path, ln, f"{j + 1}" + (f" ({_short(col)})" if col else ""), f"{what} in the cell")
    return header, rows[1:]


def _col(header: list[str], h: str) -> str:
    return f"{header.index(h) + 1} ({_short(h)})"


def _short(text: str, limit: int = 40) -> str:
    text = _NOT_TEXT.sub("?", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_header(path: str, header: list[str], keys: list[str]) -> None:
    if header[: len(keys)] != keys or header[len(keys) : len(keys) + 1] != ["feasible"]:
        raise ShardMeterError(
            f"--resume: {path} was written by a sweep over other keys "
            f"({', '.join(header[: max(1, header.index('feasible') if 'feasible' in header else 1)])})"
        )
    want = _csv_header(keys)[len(keys) :]
    have = header[len(keys) :]
    if sorted(have) != sorted(want):
        missing = [h for h in want if h not in have]
        extra = sorted({h for h in have if h not in want or have.count(h) > 1})
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unexpected {', '.join(_short(h) for h in extra)}"] if extra else []
        )
        raise ShardMeterError(
            f"--resume: {path} line 1: not the columns this version's sweep CSV has ({'; '.join(parts)}); "
            "move it away or rerun without --resume"
        )


def _vary_value(key: str, cell: str) -> Any:
    """The value of ``key`` a vary cell shows (as ``--vary`` reads it; the cell itself when it
    is not one value: such a row matches no grid point and is not resumed)."""
    if cell[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            return json.loads(cell)
    try:
        vals = parse_values(key, cell) if cell.strip() else []
    except ShardMeterError:
        return cell
    return vals[0] if len(vals) == 1 else cell


def _number(path: str, ln: int, header: list[str], h: str, c: str) -> float | None:
    if not c:
        return None
    try:
        return float(c)
    except ValueError:
        _damaged(path, ln, _col(header, h), f"{_short(c)!r} is not a number")


def _resumed_report(
    path: str, ln: int, cells: dict[str, str], header: list[str], n_keys: int
) -> dict[str, Any]:
    """The report fields of one ``--csv`` row (``cells``: header -> cell; line ``ln`` of
    ``path``), as the sweep's table, analysis and plot read them."""
    rep: dict[str, Any] = {}
    for h in header[n_keys:]:
        c = cells[h]
        if h == "feasible":
            if c not in ("true", "false"):
                _damaged(path, ln, _col(header, h), f"{_short(c)!r} is neither true nor false")
            rep[h] = c == "true"
        elif h in ("bottleneck", "regime"):
            rep[h] = c or None
        elif h == "reasons":
            rep[h] = [x for x in c.split(" | ") if x]
        else:
            v = _number(path, ln, header, h, c)
            if not (h.startswith("breakdown_") or h == "scaling_efficiency"):
                rep[h] = v
    gpus = rep.get("gpus")
    if gpus is not None:
        if not (math.isfinite(gpus) and gpus.is_integer() and gpus >= 1):
            _damaged(path, ln, _col(header, "gpus"), f"{_short(cells['gpus'])!r} is not a GPU count")
        rep["gpus"] = int(gpus)
    if rep["feasible"]:
        for h in _FEASIBLE_NEEDS:
            if rep.get(h) is None:
                _damaged(path, ln, _col(header, h), "empty in a feasible row")
    rep["breakdown_s"] = {h[10:]: float(cells[h]) for h in header if h.startswith("breakdown_") and cells[h]}
    return rep
