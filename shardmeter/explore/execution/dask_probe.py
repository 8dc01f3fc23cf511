"""Reaching a dask scheduler at an address: parsing ``tcp://HOST:PORT`` / ``HOST:PORT``, and a
probe bounded by one timeout (a TCP connection, then dask's own handshake and an identity call
on a helper thread), so a silent server, a server speaking another protocol (HTTP) or a
worker's address ends in one :class:`~shardmeter.errors.ShardMeterError` instead of a hang or
a misleading message."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
import time
from typing import Any

from shardmeter.errors import ShardMeterError

__all__ = ["DASK_ADDRESS_FORMS", "DASK_TIMEOUT_ENV", "parse_dask_address", "probe_scheduler"]

#: The environment variable that sets the timeout when --dask-timeout is not given.
DASK_TIMEOUT_ENV = "SHARDMETER_DASK_TIMEOUT"

DASK_ADDRESS_FORMS = "tcp://HOST:PORT or HOST:PORT"

_ADDRESS = re.compile(r"(?:tcp://)?(?P<host>\[[0-9A-Fa-f:.%]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")


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


def probe_scheduler(address: str, url: str, host: str, port: int, timeout: float) -> None:
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
