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
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import ShardMeterError

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
DEFAULT_RETRIES = 3

#: Seconds to reach a dask scheduler at an address (TCP connection, handshake, ``Client``).
DEFAULT_DASK_TIMEOUT = 30.0

#: The environment variable that overrides :data:`DEFAULT_DASK_TIMEOUT` (seconds).
DASK_TIMEOUT_ENV = "SHARDMETER_DASK_TIMEOUT"

#: Overrides the environment variable and the default when not ``None`` (the CLI's
#: ``--dask-timeout`` sets it for the duration of a command: :func:`dask_timeout_override`).
DASK_TIMEOUT: float | None = None

#: The accepted forms of a scheduler address (besides ``"local"``).
DASK_ADDRESS_FORMS = "tcp://HOST:PORT or HOST:PORT"

_ADDRESS = re.compile(r"(?:tcp://)?(?P<host>\[[0-9A-Fa-f:.%]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")

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
    dask_timeout: float | None = None,
) -> Iterator[tuple[Any, Any]]:
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


def parse_dask_address(address: str) -> tuple[str, str, int]:
    """``(url, host, port)`` of a scheduler address ``tcp://HOST:PORT`` or ``HOST:PORT`` (an IPv6
    HOST in brackets); ``url`` is the ``tcp://`` form a ``Client`` takes.

    :raises ShardMeterError: anything else, naming the address and the accepted forms.
    """
    text = address.strip()
    m = _ADDRESS.fullmatch(text)
    if m and 1 <= int(m["port"]) <= 65535:
        host, port = m["host"], int(m["port"])
        return f"tcp://{host}:{port}", host.strip("[]"), port
    scheme = text.split("://", 1)[0] if "://" in text else None
    if scheme is not None and scheme.lower() != "tcp":
        why = f"scheme {scheme + '://'!r} is not supported"
        if scheme.lower() in ("http", "https"):
            why += "; http:// is the dashboard, the scheduler listens on tcp:// (port 8786 by default)"
    elif m:
        why = "the port must be 1 to 65535"
    elif not re.search(r":[0-9]+$", text):
        why = "no :PORT"
    else:
        why = "not a host name or IP address"
    raise ShardMeterError(
        f"--dask {address!r} is not a scheduler address ({why}): expected {DASK_ADDRESS_FORMS}, or 'local'"
    )


def _import_distributed():
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ShardMeterError(
            "--dask needs dask.distributed, which is not installed: pip install 'shardmeter[dask]'"
        ) from None
    return Client, LocalCluster, as_completed


#: Added to the probe's dask handshake (a peer ignores keys it does not know): the line end
#: makes a line-based server (HTTP) answer at once, instead of waiting with the probe for a
#: line that never comes.
_PROBE_HANDSHAKE = {"shardmeter-probe": "\r\n\r\n"}

_TIMEOUT_HINT = f"; raise --dask-timeout or {DASK_TIMEOUT_ENV} if the scheduler is just slow"


async def _handshake(url: str, timeout: float) -> Any:
    """Connect with dask's own comm (so the handshake is whatever the installed version
    speaks), ask the peer who it is, and hang up; returns its ``identity`` reply."""
    from distributed.comm import connect

    comm = await connect(url, timeout=timeout, handshake_overrides=_PROBE_HANDSHAKE)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        with contextlib.suppress(Exception):
            await comm.write({"op": "close", "reply": False})
            await comm.close()


def _probe_scheduler(address: str, url: str, host: str, port: int, timeout: float) -> None:
    """Check, within ``timeout`` seconds in all, that ``address`` accepts a TCP connection and
    answers the dask handshake as a scheduler; raise a one-line :class:`ShardMeterError` if not.

    dask's ``Client(timeout=...)`` alone bounds neither its wait for the handshake (a server
    that accepts and stays silent hangs it) nor what it makes of a reply in another protocol
    (an HTTP server's ``HTTP/1.0 ...`` read as a message length: a MemoryError)."""
    where = f"--dask {address}"
    outcome: dict[str, Any] = {}

    def probe() -> None:  # on a thread: bounded below, and free of any event loop the caller runs
        deadline = time.monotonic() + timeout
        outcome["phase"] = "tcp"
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome["phase"] = "dask"
            left = max(deadline - time.monotonic(), 0.001)
            outcome["identity"] = asyncio.run(asyncio.wait_for(_handshake(url, left), left))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            outcome["error"] = exc

    thread = threading.Thread(target=probe, name="shardmeter-dask-probe", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)  # the probe bounds itself; the second is for its clean-up
    exc = outcome.get("error")
    if thread.is_alive() or isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        if outcome.get("phase") == "tcp":
            raise ShardMeterError(
                f"{where}: cannot reach the scheduler: no TCP connection within {timeout:g} s{_TIMEOUT_HINT}"
            )
        raise ShardMeterError(
            f"{where}: no answer within {timeout:g} s: the server accepted the connection but sent no "
            f"dask handshake{_TIMEOUT_HINT}"
        )
    if exc is None:
        ident = outcome.get("identity")
        kind = ident.get("type") if isinstance(ident, dict) else None
        if isinstance(kind, str) and kind != "Scheduler":
            raise ShardMeterError(
                f"{where}: that is a dask {kind}, not the scheduler: give the scheduler's address"
            )
        return
    from distributed.comm.core import CommClosedError

    if outcome["phase"] == "tcp":
        if isinstance(exc, socket.gaierror):
            raise ShardMeterError(f"{where}: cannot resolve the host {host!r} ({exc.strerror or exc})")
        if isinstance(exc, OSError):
            raise ShardMeterError(f"{where}: cannot reach the scheduler: {exc.strerror or exc}")
    elif isinstance(exc, CommClosedError):
        raise ShardMeterError(
            f"{address} does not speak the dask scheduler protocol: it closed the connection during "
            "the dask handshake"
        )
    elif isinstance(exc, OSError):
        raise ShardMeterError(f"{where}: cannot reach the scheduler: {exc}")
    if isinstance(exc, Exception):
        raise ShardMeterError(f"{address} does not speak the dask scheduler protocol: {_reply_detail(exc)}")
    raise exc  # KeyboardInterrupt, SystemExit on the probe's thread


def _reply_detail(exc: BaseException) -> str:
    """What a peer that is not a dask scheduler answered, as far as ``exc`` shows: the first 8
    bytes dask's TCP comm read (the message length, a local of its ``read``), else the error."""
    head = None
    tb = exc.__traceback__
    while tb is not None:
        v = tb.tb_frame.f_locals.get("frames_nosplit_nbytes_bin")
        if isinstance(v, (bytes, bytearray)):
            head = bytes(v)
        tb = tb.tb_next
    if head:
        looks_http = head.lstrip().lower().startswith((b"http/", b"<!doctyp", b"<html", b"<!--", b"<?xml"))
        http = " (an HTTP server?)" if looks_http else ""
        return f"it answered the dask handshake with {head!r}...{http}"
    return f"its answer to the dask handshake is not a dask message ({type(exc).__name__})"


def _dask_client(dask, workers, timeout):
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
    _probe_scheduler(dask, url, host, port, timeout)
    try:
        client = Client(url, timeout=max(deadline - time.monotonic(), 1.0), set_as_default=False)
    except (OSError, asyncio.TimeoutError, TimeoutError) as exc:
        raise ShardMeterError(f"--dask {dask}: cannot connect to the scheduler: {exc}") from None
    return client, [client]


def _run_dask(fn, payload, tasks, dask, workers, retries, timeout):
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
