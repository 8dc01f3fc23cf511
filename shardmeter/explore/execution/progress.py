"""A one-line progress bar on stderr, shown only for searches longer than a second,
only when stderr is a terminal, and never with ``--json``."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["Progress", "SweepProgress", "sweep_progress"]


class Progress:
    """Call with ``(done, total)``; draws after ``delay`` seconds at most ``hz`` times a second."""

    def __init__(
        self,
        label: str = "",
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        delay: float = 1.0,
        hz: float = 8.0,
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label, self.delay, self.period = label, delay, 1.0 / hz
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        el = now - self.t0
        if el < self.delay or (now - self.last < self.period and done < total):
            return
        self.last = now
        frac = done / total if total else 1.0
        width = 30
        fill = round(frac * width)
        rate = done / el if el > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else float("inf")
        eta_s = f"{eta:.0f}s" if eta != float("inf") else "?"
        self.stream.write(
            f"\r{self.label}[{'#' * fill}{'.' * (width - fill)}] {frac:6.1%} "
            f"{_si(done)}/{_si(total)} {_si(rate)}/s ETA {eta_s}  "
        )
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def _si(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


class SweepProgress:
    """A ``rich.progress`` bar of the sweep's rows on stderr (a context manager; ``update(done,
    total)`` after each chunk). Disabled, it draws nothing: ``sweep`` enables it only when
    stderr is a terminal and not with ``--json``."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> SweepProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self._bar = Progress(
                "sweep",
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.__enter__()
        return self

    def update(self, done: int, total: int) -> None:
        if self._bar is None:
            return
        if self._task is None:
            self._task = self._bar.add_task("rows", total=total)
        self._bar.update(self._task, completed=done)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None


def sweep_progress(*, enabled: bool) -> SweepProgress:
    """The sweep's progress bar (:class:`SweepProgress`)."""
    return SweepProgress(enabled)
