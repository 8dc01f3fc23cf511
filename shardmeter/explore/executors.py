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

No task is lost: each one either yields its result or, after ``retries``
failed attempts, raises :class:`TaskFailed`.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import ShardMeterError

__all__ = ["run_tasks", "TaskFailed", "FailOnce", "DEFAULT_RETRIES"]

#: Attempts after the first for a task that raised or whose worker died.
DEFAULT_RETRIES = 3

_PAYLOAD: Any = None  # set in each worker process by the pool initializer


class TaskFailed(ShardMeterError):
    """A task failed on every attempt."""


def _init_worker(payload) -> None:
    global _PAYLOAD
    _PAYLOAD = payload


def _call_with_global(fn, task):
    return fn(_PAYLOAD, task)


def run_tasks(
    fn: Callable[[Any, Any], Any],
    payload: Any,
    tasks: Iterable[Any],
    *,
    workers: int | None = None,
    dask: Any = None,
    retries: int = DEFAULT_RETRIES,
) -> Iterator[tuple[Any, Any]]:
    """Yield ``(task, fn(payload, task))`` for every task, in completion order.

    :param fn: a module-level (picklable) function of ``(payload, task)``.
    :param workers: local worker processes (``None`` or ``<= 1``: run here).
    :param dask: a ``dask.distributed.Client``, a scheduler address, or ``"local"``.
    :param retries: attempts after the first for a task that fails.
    :raises TaskFailed: a task failed ``retries + 1`` times.
    """
    tasks = list(tasks)
    if dask is not None:
        yield from _run_dask(fn, payload, tasks, dask, workers, retries)
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


def _run_processes(fn, payload, tasks, workers, retries):
    pending = dict(enumerate(tasks))  # task id -> task, not yet done
    failures = {i: 0 for i in pending}

    def new_pool():
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


def _dask_client(dask, workers):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - depends on the environment
        raise ShardMeterError("--dask needs dask.distributed: pip install 'shardmeter[dask]'") from None
    if not isinstance(dask, str):
        return dask, None
    if dask == "local":
        cluster = LocalCluster(
            n_workers=workers or os.cpu_count() or 2, threads_per_worker=1, dashboard_address=":0"
        )
        return Client(cluster), cluster
    try:
        return Client(dask, timeout=10), None
    except (OSError, TimeoutError) as exc:
        raise ShardMeterError(f"--dask {dask}: cannot reach the scheduler ({exc})") from None


def _run_dask(fn, payload, tasks, dask, workers, retries):
    from dask.distributed import as_completed

    client, cluster = _dask_client(dask, workers)
    futs = []
    try:
        [shared] = client.scatter([payload], broadcast=True, hash=False)
        futs = [client.submit(fn, shared, task, retries=retries, pure=False) for task in tasks]
        index = {f.key: t for f, t in zip(futs, tasks, strict=True)}
        for fut in as_completed(futs):
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
        if cluster is not None:
            client.close()
            cluster.close()


class FailOnce:
    """Wrap a task function so that it fails once, for one task (a fault to test retries).

    The first attempt at ``task`` either raises ``RuntimeError`` (``mode="raise"``)
    or kills its worker process (``mode="exit"``); every later attempt runs
    normally. "Once" holds across processes and machines sharing a folder: the
    first attempt creates ``marker`` (exclusively); later ones find it.
    """

    def __init__(self, fn, task, marker: str, mode: str = "raise"):
        self.fn, self.task, self.marker, self.mode = fn, task, os.fspath(marker), mode

    def __call__(self, payload, task):
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
