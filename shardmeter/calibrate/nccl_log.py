"""Reading nccl-tests logs as they come off real clusters: one file, one or more runs.

The layout is NVIDIA/nccl-tests' (``src/util.cu`` and ``src/common.cu`` at a0b82b2, 2.19.6;
the 2.13 layout of 51af557 and the 2019-2022 one before it). Per run: ``# nccl-tests
version``, ``# Collective test starting: BINARY`` (since 2.15; older runs print none, and the
file name must then say it), ``# nThread ...``, one ``#  Rank N Group G Pid P on HOST device D
[BUS] NAME`` line per rank (rank 0 gathers them under MPI), the column header and the rows,
``# Out of bounds values : N OK|FAILED``. The columns are read by the header's names, so the
older layouts (no ``root``, no ``redop``, an ``error`` delta for ``#wrong``) and the
per-iteration one (``-I 1``) read alike. What a row's numbers mean (``writeBenchmarkLinePreamble``
and each collective's ``GetCollByteCount``): ``size`` is the whole buffer S in bytes,
``max(sendBytes, recvBytes)``, whatever the element type; ``count`` is the elements passed to
NCCL: all of S for all-reduce, send/recv, broadcast and reduce (``S = count x element``), one
rank's share for all-gather, reduce-scatter and all-to-all (``S = count x element x ranks``).
A row whose ``size`` does not match its ``count``, type and the ranks listed is an error: the
rank lines and the table disagree.

Launchers' line prefixes are dropped first: Open MPI's ``--tag-output`` (``[1,0]<stdout>:``;
``<stderr>`` lines are skipped), Slurm's ``srun --label`` (``0: ``), MPICH/Intel MPI
``-prepend-rank`` (``[0] ``), and a ``(name, rank=0, pid=3808)`` prefix (Ray / SkyPilot).
Comment lines, NCCL's own ``NCCL INFO`` lines and launcher chatter are skipped; so are rows
with ``#wrong > 0`` (the collective returned wrong data) and rows cut short by interleaved
output, each counted in a warning. Every other bad row is one error naming ``file:line``.
"""

from __future__ import annotations

import os
import re

import attrs

from shardmeter.errors import ScenarioError
from shardmeter.numbers import check_number, parse_number
from shardmeter.reading import InputText, read_input
from shardmeter.tables import safe_text

__all__ = [
    "COLLECTIVES",
    "ELEMENT_BYTES",
    "MAX_LOG_BYTES",
    "MAX_ROWS",
    "NcclRow",
    "NcclLog",
    "read_nccl_logs",
    "strip_prefix",
]

#: nccl-tests binary -> the model's collective (``_mpi`` builds print ``all_reduce_perf_mpi``).
COLLECTIVES = {
    "all_reduce_perf": "all_reduce",
    "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "all_to_all",
    "sendrecv_perf": "sendrecv",
}

#: nccl-tests' type names (``test_typenames``, ``src/common.cu``) -> bytes per element (``wordSize``).
ELEMENT_BYTES = {
    "int8": 1,
    "uint8": 1,
    "char": 1,
    "int32": 4,
    "uint32": 4,
    "int": 4,
    "int64": 8,
    "uint64": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "bfloat16": 2,
    "f8e4m3": 1,
    "f8e5m2": 1,
}

#: Collectives whose ``count`` is one rank's share (``S = count x element x ranks``).
_PER_RANK_COUNT = ("all_gather", "reduce_scatter", "all_to_all")

#: Largest log read (a 1,024-rank run with ``NCCL_DEBUG=INFO`` is a few MB).
MAX_LOG_BYTES = 16 * 1024 * 1024
#: Most result rows one file may hold (a full sweep is 31 rows per type).
MAX_ROWS = 20_000
#: Most runs (``# nThread`` headers) one file may hold.
MAX_RUNS = 512

_PREFIX = re.compile(
    r"^(?:\([^()\n]{1,200}\)[ \t]+"  # (head, rank=0, pid=3808)
    r"|\[\d+,\d+\]<(stdout|stderr)>:[ \t]?"  # Open MPI --tag-output
    r"|[ \t]*\d+:[ \t]"  # srun --label
    r"|\[\d+\][ \t]?"  # mpirun -prepend-rank / -l
    r")+"
)
_RANK = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$"
)
_START = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_RUN = re.compile(r"^#\s*(?:nThread\s|nccl-tests version|Collective test starting:)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")


@attrs.frozen(kw_only=True)
class NcclRow:
    """One result row: ``size_bytes`` (S), out-of-place ``time_us`` and ``busbw_gb_s``, the
    element ``dtype``, its ``line`` in the file."""

    size_bytes: int
    time_us: float
    busbw_gb_s: float
    dtype: str
    line: int


@attrs.frozen(kw_only=True)
class NcclLog:
    """One run of one nccl-tests binary: ``collective`` (the model's name), ``ranks``, ``nodes``,
    ranks per node ``gpus_per_node``, rank 0's ``device``, the ``rows``, the ``line`` where the
    run starts in ``file``, and the ``warnings`` its reading gave (rows skipped)."""

    file: str
    line: int
    collective: str
    ranks: int
    nodes: int
    gpus_per_node: int
    device: str
    rows: tuple[NcclRow, ...]
    warnings: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """``file:line`` of the run's first line, for messages and the overlay's record."""
        return f"{self.file}:{self.line}"

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.dtype for r in self.rows))


def strip_prefix(line: str) -> tuple[str, bool]:
    """``(line without launcher prefixes, whether it came from a stderr stream)``."""
    m = _PREFIX.match(line)
    if not m:
        return line, False
    return line[m.end() :], "<stderr>" in m.group(0)


@attrs.define
class _Run:
    """A run being read: its first line, header columns and what it found so far."""

    line: int
    started: str | None = None
    columns: dict[str, int] | None = None
    ranks: dict[int, tuple[str, str]] = attrs.Factory(dict)  # rank -> (pid, host)
    device: str = ""
    rows: list[tuple[int, list[str]]] = attrs.Factory(list)  # (line, tokens)
    short: list[int] = attrs.Factory(list)
    failed_footer: bool = False


def _columns(header: str) -> dict[str, int] | None:
    """Column name -> token index of a table header (``# size count type ...``); the first of
    a repeated name (out-of-place before in-place)."""
    toks = header.lstrip("#").split()
    if len(toks) < 4 or toks[0] not in ("size", "bytes") or "busbw" not in toks:
        return None
    if toks[0] == "bytes":  # nccl-tests before 2.4 (2019): times in ms, "res" for #wrong
        return {"legacy": 0}
    cols: dict[str, int] = {}
    for i, t in enumerate(toks):
        name = {"cputime": "time"}.get(t, t)
        cols.setdefault(name, i)
    return cols if all(k in cols for k in ("size", "count", "type", "time", "busbw")) else None


def _runs(text: InputText, shown: str) -> list[_Run]:
    """The runs of one log's lines (prefixes dropped, stderr skipped)."""
    runs: list[_Run] = []
    cur: _Run | None = None
    for i, raw in enumerate(text.text.splitlines(), 1):
        body, is_err = strip_prefix(raw)
        ln = body.strip()
        if is_err or not ln:
            continue
        if ln.startswith("#"):
            if _RUN.match(ln) and (cur is None or cur.rows or cur.columns is not None):
                if len(runs) >= MAX_RUNS:
                    raise ScenarioError(f"more than {MAX_RUNS:,} nccl-tests runs in one file", file=shown)
                cur = _Run(line=i)
                runs.append(cur)
            if cur is None:
                continue
            _comment(cur, ln, i, shown)
            continue
        if cur is not None and cur.columns is not None and ln[:1].isdigit():
            toks = ln.split()
            if len(toks) > 1 and toks[1].isdigit():
                cur.rows.append((i, toks))
                if sum(len(r.rows) for r in runs) > MAX_ROWS:
                    raise ScenarioError(f"more than {MAX_ROWS:,} result rows in one file", file=shown)
    return runs


def _comment(cur: _Run, ln: str, i: int, shown: str) -> None:
    """What a ``#`` line of the run ``cur`` says: the binary, a rank, the header, the footer."""
    if m := _START.match(ln):
        cur.started = m.group(1)
    elif m := _RANK.match(ln):
        rank, pid, host = int(m.group(1)), m.group(2) or "", m.group(3)
        seen = cur.ranks.get(rank)
        if seen is not None and seen != (pid, host):
            raise ScenarioError(
                f"rank {rank} is listed twice (pid {safe_text(seen[0])} and {safe_text(pid)}): several "
                "processes each ran their own test; build nccl-tests with MPI=1 or give -g",
                file=f"{shown}:{i}",
            )
        cur.ranks[rank] = (pid, host)
        cur.device = cur.device or m.group(5).strip()
    elif (cols := _columns(ln)) is not None:
        if "legacy" in cols:
            raise ScenarioError(
                "a log of nccl-tests before 2.4 (times in ms, 'bytes N type op' columns): rerun a "
                "current nccl-tests",
                file=f"{shown}:{i}",
            )
        cur.columns = cols
    elif (m := _OOB.match(ln)) and (m.group(2) == "FAILED" or int(m.group(1)) > 0):
        cur.failed_footer = True


def _collective(run: _Run, path: str, shown: str) -> str:
    if run.started:
        base = os.path.basename(run.started)
        for binary, coll in COLLECTIVES.items():
            if base.startswith(binary):
                return coll
        raise ScenarioError(
            f"'{safe_text(base)}' is not one of {', '.join(COLLECTIVES)}",
            path="Collective test starting",
            file=f"{shown}:{run.line}",
        )
    for binary, coll in COLLECTIVES.items():  # older nccl-tests print no starting line
        if binary.removesuffix("_perf") in os.path.basename(path):
            return coll
    raise ScenarioError(
        "cannot tell the collective: the run has no '# Collective test starting:' line; "
        f"name the file after the binary ({', '.join(COLLECTIVES)})",
        file=f"{shown}:{run.line}",
    )


def _number(tok: str, field: str, col: int, at: str, *, integer: bool = False) -> float:
    return check_number(
        parse_number(tok, integer=integer, field=f"{field} (column {col + 1})", file=at),
        field=f"{field} (column {col + 1})",
        file=at,
        integer=integer,
        minimum=0,
    )


def _row(run: _Run, line: int, toks: list[str], coll: str, ranks: int, shown: str) -> NcclRow | str | None:
    """One row as a :class:`NcclRow`; ``"short"`` / ``"wrong"`` for a row skipped with a
    warning; None for a size-0 row (nothing moved)."""
    cols = run.columns
    assert cols is not None
    need = max(cols.get("#wrong", 0), cols.get("error", 0), cols["busbw"]) + 1
    if len(toks) < need:
        return "short"
    at = f"{shown}:{line}"
    size = int(_number(toks[cols["size"]], "size", cols["size"], at, integer=True))
    count = int(_number(toks[cols["count"]], "count", cols["count"], at, integer=True))
    dtype = toks[cols["type"]]
    if dtype not in ELEMENT_BYTES:
        raise ScenarioError(
            f"unknown type {safe_text(dtype)!r} (nccl-tests' {', '.join(ELEMENT_BYTES)})",
            path=f"type (column {cols['type'] + 1})",
            file=at,
        )
    per = ELEMENT_BYTES[dtype] * (ranks if coll in _PER_RANK_COUNT else 1)
    if size != count * per:
        rank_note = f" x {ranks} ranks" if coll in _PER_RANK_COUNT else ""
        raise ScenarioError(
            f"size {size:,} B is not count {count:,} x {ELEMENT_BYTES[dtype]} B ({dtype}){rank_note}: "
            "the table and the log's '# Rank' lines (or its collective) disagree",
            file=at,
        )
    time_us = _number(toks[cols["time"]], "time", cols["time"], at)
    busbw = _number(toks[cols["busbw"]], "busbw", cols["busbw"], at)
    if "#wrong" in cols and (w := toks[cols["#wrong"]]) != "N/A":  # wrong elements (2.13+)
        if _number(w, "#wrong", cols["#wrong"], at) > 0:
            return "wrong"
    elif "error" in cols and (w := toks[cols["error"]]) != "N/A":  # before 2.13: the largest
        _number(w, "error", cols["error"], at)  # relative delta, judged by the footer
    return (
        NcclRow(size_bytes=size, time_us=time_us, busbw_gb_s=busbw, dtype=dtype, line=line) if size else None
    )


def _log(run: _Run, path: str, shown: str) -> NcclLog:
    coll = _collective(run, path, shown)
    at = f"{shown}:{run.line}"
    if not run.ranks:
        raise ScenarioError(
            "no '#  Rank N ... on HOST device D' lines: the ranks and nodes are unknown", file=at
        )
    ranks = len(run.ranks)
    if sorted(run.ranks) != list(range(ranks)):
        raise ScenarioError(
            f"the '# Rank' lines list ranks {sorted(run.ranks)[:8]}..., not 0 to {ranks - 1}", file=at
        )
    per_host: dict[str, int] = {}
    for _, host in run.ranks.values():
        per_host[host] = per_host.get(host, 0) + 1
    if len(set(per_host.values())) != 1:
        raise ScenarioError(
            f"the nodes hold different numbers of ranks ({sorted(per_host.values())})", file=at
        )
    if ranks < 2:
        raise ScenarioError("one rank: a collective over one GPU moves nothing", file=at)
    rows: list[NcclRow] = []
    short: list[int] = []
    wrong: list[int] = []
    for line, toks in run.rows:
        got = _row(run, line, toks, coll, ranks, shown)
        if got == "short":
            short.append(line)
        elif got == "wrong":
            wrong.append(line)
        elif isinstance(got, NcclRow) and got.time_us > 0:
            rows.append(got)
    warnings = [
        f"{at}: {len(lines)} {what} left out (lines {', '.join(map(str, lines[:6]))}{', ...' if len(lines) > 6 else ''})"
        for lines, what in ((short, "rows cut short by interleaved output"), (wrong, "rows with #wrong > 0"))
        if lines
    ]
    if run.failed_footer and not wrong:
        warnings.append(f"{at}: nccl-tests reported out-of-bounds values (wrong results) for this run")
    if not rows:
        raise ScenarioError(
            "no nccl-tests result rows (size count type redop root time algbw busbw #wrong)", file=at
        )
    return NcclLog(
        file=path,
        line=run.line,
        collective=coll,
        ranks=ranks,
        nodes=len(per_host),
        gpus_per_node=ranks // len(per_host),
        device=run.device,
        rows=tuple(rows),
        warnings=tuple(warnings),
    )


def read_nccl_logs(path: str) -> list[NcclLog]:
    """Every run in the nccl-tests log at ``path`` (read through :func:`shardmeter.reading.read_input`:
    a regular file of at most :data:`MAX_LOG_BYTES`, UTF-8); see the module docstring."""
    text = read_input(path, what="nccl-tests log", max_bytes=MAX_LOG_BYTES)
    shown = safe_text(path, limit=400)
    runs = [r for r in _runs(text, shown) if r.rows or r.columns is not None]
    if not runs:
        raise ScenarioError(
            "no nccl-tests result rows (size count type redop root time algbw busbw #wrong)", file=shown
        )
    return [_log(r, path, shown) for r in runs]
