"""Run chunk tasks serially, on local processes or on a dask cluster, with retries.

Every exploration (``plan``, ``sweep``) is split into independent *tasks*
(ranges of candidate rows). A task function ``fn(payload, task)`` is pure:
the same payload and task give the same result wherever it runs, so results
can be merged in any order and a task that failed can simply run again.

:func:`run_tasks` maps ``fn`` over the tasks and yields ``(task, result)``
pairs as they complete:

* serially in this process (the default);
* on a :class:`concurrent.futures.ProcessPoolExecutor` (``workers=N``): the
  payload is sent once per worker process (pool initializer); a task that
  raises is resubmitted, and a worker process that dies (the pool breaks) is
  replaced by a fresh pool on which every unfinished task is resubmitted;
* on a dask.distributed cluster (``dask=ADDRESS`` or a ``Client``; the
  optional extra ``shardmeter[dask]``): the payload is scattered once
  (broadcast to every worker) and tasks are submitted with ``retries``, so a
  task that raises, or that was running on a worker that died, runs again
  elsewhere. ``ADDRESS = "local"`` starts a ``LocalCluster``.

Reaching a scheduler at an address (``tcp://HOST:PORT`` or ``HOST:PORT``) is bounded by a
timeout (:func:`dask_timeout`: ``dask_timeout=``, else :data:`DASK_TIMEOUT`, else the
environment variable ``SHARDMETER_DASK_TIMEOUT``, else :data:`DEFAULT_DASK_TIMEOUT`): before
the ``Client`` connects, a probe checks that the address accepts TCP connections and answers
the dask handshake, so a server that never answers, or one speaking another protocol (an
HTTP server), ends in one :class:`~shardmeter.errors.ShardMeterError` within the timeout
instead of a hang or a misleading error.

No task is lost: each one either yields its result or, after ``retries``
failed attempts, raises :class:`TaskFailed`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from shardmeter.errors import ShardMeterError
from shardmeter.explore.execution.dask_probe import DASK_TIMEOUT_ENV, parse_dask_address, probe_scheduler

__all__ = [
    "run_tasks",
    "TaskFailed",
    "FailOnce",
    "DEFAULT_RETRIES",
    "DEFAULT_DASK_TIMEOUT",
    "DASK_TIMEOUT_ENV",
    "dask_timeout",
    "dask_timeout_override",
    "parse_dask_address",
]

#: Attempts after the first for a task that raised or whose worker died.
#: A task function's payload, task and result (an executor runs any picklable ones).
P = TypeVar("P")
T = TypeVar("T")
R = TypeVar("R")
DEFAULT_RETRIES = 3

#: Seconds to reach a dask scheduler at an address (TCP connection, handshake, ``Client``).
DEFAULT_DASK_TIMEOUT = 30.0

#: The environment variable that overrides :data:`DEFAULT_DASK_TIMEOUT` (seconds).

#: Overrides the environment variable and the default when not ``None`` (the CLI's
#: ``--dask-timeout`` sets it for the duration of a command: :func:`dask_timeout_override`).
DASK_TIMEOUT: float | None = None

#: The accepted forms of a scheduler address (besides ``"local"``).
_PAYLOAD: Any = None  # set in each worker process by the pool initializer


class TaskFailed(ShardMeterError):
    """A task failed on every attempt."""


def _init_worker(payload: Any) -> None:
    global _PAYLOAD
    _PAYLOAD = payload


def _call_with_global(fn: Callable[[Any, T], R], task: T) -> R:
    return fn(_PAYLOAD, task)


def run_tasks(
    fn: Callable[[P, T], R],
    payload: P,
    tasks: Iterable[T],
    *,
    workers: int | None = None,
    dask: Any = None,
    retries: int = DEFAULT_RETRIES,
    dask_timeout: float | None = None,
) -> Iterator[tuple[T, R]]:
    """Yield ``(task, fn(payload, task))`` for every task, in completion order.

    :param fn: a module-level (picklable) function of ``(payload, task)``.
    :param workers: local worker processes (``None`` or ``<= 1``: run here).
    :param dask: a ``dask.distributed.Client``, a scheduler address (``tcp://HOST:PORT`` or
        ``HOST:PORT``), or ``"local"``.
    :param retries: attempts after the first for a task that fails.
    :param dask_timeout: seconds to reach the scheduler at ``dask`` (default: :func:`dask_timeout`).
    :raises TaskFailed: a task failed ``retries + 1`` times.
    :raises ShardMeterError: ``dask`` is not a valid address, dask is not installed, or the
        scheduler cannot be reached, does not answer in time, or speaks another protocol.
    """
    tasks = list(tasks)
    if dask is not None:
        yield from _run_dask(fn, payload, tasks, dask, workers, retries, dask_timeout)
    elif workers is not None and workers > 1 and len(tasks) > 1:
        yield from _run_processes(fn, payload, tasks, workers, retries)
    else:
        for task in tasks:
            for attempt in range(retries + 1):
                try:
                    result = fn(payload, task)
                    break
                except (KeyboardInterrupt, MemoryError):
                    raise
                except Exception as exc:
                    if attempt == retries:
                        raise TaskFailed(
                            f"task {task!r} failed {retries + 1} times: {type(exc).__name__}: {exc}"
                        ) from exc
            yield task, result


def _run_processes(
    fn: Callable[[P, T], R], payload: P, tasks: list[T], workers: int, retries: int
) -> Iterator[tuple[T, R]]:
    pending = dict(enumerate(tasks))  # task id -> task, not yet done
    failures = {i: 0 for i in pending}

    def new_pool() -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(payload,))

    pool = new_pool()
    try:
        while pending:
            futs = {pool.submit(_call_with_global, fn, task): i for i, task in pending.items()}
            broken = False
            for fut in cf.as_completed(futs):
                i = futs[fut]
                try:
                    result = fut.result()
                except cf.process.BrokenProcessPool:
                    broken = True  # a worker died: every unfinished task is resubmitted on a new pool
                    failures[i] += 1
                    if failures[i] > retries:
                        raise TaskFailed(
                            f"task {pending[i]!r} lost {failures[i]} times: a worker process "
                            "died while running it"
                        ) from None
                    continue
                except Exception as exc:
                    failures[i] += 1
                    if failures[i] > retries:
                        raise TaskFailed(
                            f"task {pending[i]!r} failed {failures[i]} times: {type(exc).__name__}: {exc}"
                        ) from exc
                    continue  # resubmitted in the next round
                yield pending.pop(i), result
            if broken:
                pool.shutdown(wait=False, cancel_futures=True)
                pool = new_pool()
    except BaseException:
        # interrupted (Ctrl-C) or abandoned: stop the workers now rather than let them finish their chunks
        procs = getattr(pool, "_processes", None) or {}  # CPython's pid -> Process map
        for proc in list(procs.values()):
            if proc.is_alive():
                proc.terminate()
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def dask_timeout(explicit: float | None = None) -> float:
    """Seconds to reach a dask scheduler at an address: ``explicit``, else :data:`DASK_TIMEOUT`
    (the CLI's ``--dask-timeout``), else ``$SHARDMETER_DASK_TIMEOUT``, else
    :data:`DEFAULT_DASK_TIMEOUT`.

    :raises ShardMeterError: the value that applies is not a number of seconds > 0.
    """
    if explicit is not None:
        return _seconds(explicit, "dask_timeout")
    if DASK_TIMEOUT is not None:
        return _seconds(DASK_TIMEOUT, "--dask-timeout")
    env = os.environ.get(DASK_TIMEOUT_ENV, "").strip()
    if env:
        return _seconds(env, DASK_TIMEOUT_ENV)
    return DEFAULT_DASK_TIMEOUT


def _seconds(value: Any, origin: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise ShardMeterError(f"{origin} must be a number of seconds > 0, got {value!r}")
    return v


@contextlib.contextmanager
def dask_timeout_override(seconds: float | None) -> Iterator[None]:
    """Within the ``with`` block, :data:`DASK_TIMEOUT` is ``seconds`` (``None``: unchanged)."""
    global DASK_TIMEOUT
    previous = DASK_TIMEOUT
    if seconds is not None:
        DASK_TIMEOUT = seconds
    try:
        yield
    finally:
        DASK_TIMEOUT = previous


def _import_distributed() -> tuple[Any, Any, Any]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ShardMeterError(
            "--dask needs dask.distributed, which is not installed: pip install 'shardmeter[dask]'"
        ) from None
    return Client, LocalCluster, as_completed


def _dask_client(dask: Any, workers: int | None, timeout: float | None) -> tuple[Any, list[Any]]:
    """``(client, to_close)``: the client to use, and what this call started (closed after).
    A bad address is reported before a missing dask (it needs no dask to be found wrong)."""
    if not isinstance(dask, str):
        return dask, []
    if dask.strip() == "local":
        Client, LocalCluster, _ = _import_distributed()
        cluster = LocalCluster(
            n_workers=workers or os.cpu_count() or 2, threads_per_worker=1, dashboard_address=":0"
        )
        client = Client(cluster, set_as_default=False)
        return client, [client, cluster]
    url, host, port = parse_dask_address(dask)
    Client, _, _ = _import_distributed()
    timeout = dask_timeout(timeout)
    deadline = time.monotonic() + timeout
    probe_scheduler(dask, url, host, port, timeout)
    try:
        client = Client(url, timeout=max(deadline - time.monotonic(), 1.0), set_as_default=False)
    except (OSError, asyncio.TimeoutError, TimeoutError) as exc:
        raise ShardMeterError(f"--dask {dask}: cannot connect to the scheduler: {exc}") from None
    return client, [client]


def _run_dask(
    fn: Callable[[P, T], R],
    payload: P,
    tasks: list[T],
    dask: Any,
    workers: int | None,
    retries: int,
    timeout: float | None,
) -> Iterator[tuple[T, R]]:
    client, to_close = _dask_client(dask, workers, timeout)
    _, _, as_completed = _import_distributed()
    futs = []
    try:
        try:
            [shared] = client.scatter([payload], broadcast=True, hash=False)
        except (asyncio.TimeoutError, TimeoutError) as exc:  # no worker joined within the client's timeout
            raise ShardMeterError(
                f"--dask {dask}: cannot send the work to the cluster: {exc} (has the scheduler any workers?)"
            ) from None
        futs = [client.submit(fn, shared, task, retries=retries, pure=False) for task in tasks]
        index = {f.key: t for f, t in zip(futs, tasks, strict=True)}
        for fut in as_completed(futs, loop=client.loop):
            task = index[fut.key]
            try:
                result = fut.result()
            except Exception as exc:
                raise TaskFailed(
                    f"task {task!r} failed {retries + 1} times on the dask cluster: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            yield task, result
    finally:
        for f in futs:
            f.cancel()
        for started in to_close:
            started.close()


class FailOnce:
    """Wrap a task function so that it fails once, for one task (a fault to test retries).

    The first attempt at ``task`` either raises ``RuntimeError`` (``mode="raise"``)
    or kills its worker process (``mode="exit"``); every later attempt runs
    normally. "Once" holds across processes and machines sharing a folder: the
    first attempt creates ``marker`` (exclusively); later ones find it.
    """

    def __init__(
        self, fn: Callable[[Any, Any], Any], task: Any, marker: str | os.PathLike[str], mode: str = "raise"
    ) -> None:
        self.fn, self.task, self.marker, self.mode = fn, task, os.fspath(marker), mode

    def __call__(self, payload: Any, task: Any) -> Any:
        if task == self.task:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                if self.mode == "exit":
                    os._exit(1)
                raise RuntimeError(f"injected failure on task {task!r}")
        return self.fn(payload, task)
