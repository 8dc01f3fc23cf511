"""``--dask ADDRESS`` against a real scheduler and against servers that are not one: the same
answer as serial on a real ``dask.distributed`` scheduler (with one worker, both subprocesses),
and one line with exit code 2, within the timeout, on a silent server, an HTTP server, a bad
address, or without dask installed. All traffic stays on 127.0.0.1; every server stops by itself."""

from __future__ import annotations

import http.server
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

import pytest
from cli_helpers import one_line_error, run

from shardmeter.explore.execution import executors

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCALE = str(ROOT / "examples" / "studies" / "scale-nodes.toml")
PLAN = ["plan", SCALE, "--json", "--top", "3", "--only", "tp=1,2", "--only", "pp=1,2", "--only", "cp=1"]
SWEEP = ["sweep", SCALE, "--json", "--vary", "island[0].nodes=1,2,4"]
TIMING = ("seconds", "candidates_per_s")  # what may differ between two runs of the same plan
START_S = 30  # the scheduler and its worker must be up within this, else the test is skipped


def _log_tail(path: pathlib.Path) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-3:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A ``dask scheduler`` on 127.0.0.1 and one ``dask worker`` (one thread, no nanny), both
    subprocesses; yields ``(scheduler address, worker address)``. Both stop by themselves if
    this process dies without tearing them down: the scheduler after --idle-timeout, the
    worker --death-timeout after losing the scheduler."""
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed")
    tmp = tmp_path_factory.mktemp("dask")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    procs: list[tuple[subprocess.Popen, object]] = []

    def start(args, log):
        fh = open(log, "wb")  # noqa: SIM115 - closed in the finalizer
        proc = subprocess.Popen(
            [sys.executable, "-m", *args], stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=tmp
        )
        procs.append((proc, fh))
        return proc

    try:
        sched_file, sched_log = tmp / "scheduler.json", tmp / "scheduler.log"
        sched = start(
            [
                "distributed.cli.dask_scheduler",
                "--host", "127.0.0.1",
                "--port", "0",
                "--no-dashboard",
                "--dashboard-address", "127.0.0.1:0",
                "--scheduler-file", str(sched_file),
                "--idle-timeout", "300s",
            ],
            sched_log,
        )  # fmt: skip
        deadline = time.monotonic() + START_S
        address = None
        while address is None:
            if sched.poll() is not None:
                pytest.skip(
                    f"the dask scheduler exited at start (code {sched.returncode}): {_log_tail(sched_log)}"
                )
            if time.monotonic() > deadline:
                pytest.skip(f"the dask scheduler did not start within {START_S} s: {_log_tail(sched_log)}")
            try:
                address = json.loads(sched_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        worker_log = tmp / "worker.log"
        worker_args = ["--nthreads", "1", "--no-nanny", "--no-dashboard", "--death-timeout", "10"]
        worker = start(["distributed.cli.dask_worker", address, *worker_args], worker_log)
        left = max(deadline - time.monotonic(), 5.0)
        try:
            with distributed.Client(address, timeout=left, set_as_default=False) as client:
                client.wait_for_workers(1, timeout=left)
                [worker_address] = client.scheduler_info()["workers"]
        except (OSError, TimeoutError) as exc:
            why = "exited" if worker.poll() is not None else f"did not join within {START_S} s"
            pytest.skip(f"the dask worker {why} ({exc}): {_log_tail(worker_log)}")
        yield address, worker_address
    finally:
        for proc, fh in reversed(procs):  # the worker first
            _stop(proc)
            fh.close()


def _plan(doc: str) -> dict:
    d = json.loads(doc)
    for k in TIMING:
        d.pop(k, None)
    return d


def test_plan_on_a_real_scheduler_equals_serial(capsys, cluster):
    address, _ = cluster
    code, out, err = run(capsys, *PLAN)
    assert code == 0, err
    serial = _plan(out)
    code, out, err = run(capsys, *PLAN, "--dask", address, "--dask-timeout", "20")
    assert code == 0, err
    assert _plan(out) == serial
    assert serial["evaluated"] > serial["feasible"] > 0


def test_sweep_on_a_real_scheduler_equals_serial(capsys, cluster):
    address, _ = cluster
    code, serial, err = run(capsys, *SWEEP)
    assert code == 0, err
    host_port = address.removeprefix("tcp://")  # the HOST:PORT form
    code, out, err = run(capsys, *SWEEP, "--dask", host_port)
    assert code == 0, err
    assert json.loads(out) == json.loads(serial)


def test_a_worker_address_is_not_a_scheduler(capsys, cluster):
    _, worker = cluster
    code, _, err = run(capsys, *PLAN, "--dask", worker, "--dask-timeout", "10")
    assert code == 2
    line = one_line_error(err)
    assert worker in line and "Worker" in line and "not the scheduler" in line


@pytest.fixture
def silent_server():
    """A listening socket on 127.0.0.1 that accepts every connection and never sends a byte
    (it stops after 30 s at most); yields ``HOST:PORT``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.settimeout(0.1)
    stop, held = threading.Event(), []

    def serve():
        end = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < end:
            try:
                conn, _ = sock.accept()
            except OSError:  # the accept timeout, or the socket closed
                continue
            held.append(conn)

    thread = threading.Thread(target=serve, name="silent-server", daemon=True)
    thread.start()
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    sock.close()


def test_a_silent_server_fails_within_the_timeout(capsys, silent_server):
    t0 = time.monotonic()
    code, _, err = run(capsys, *PLAN, "--dask", silent_server, "--dask-timeout", "2")
    elapsed = time.monotonic() - t0
    assert code == 2
    line = one_line_error(err)
    assert silent_server in line and "no answer within 2 s" in line
    assert 1.5 < elapsed < 5, elapsed
    assert executors.DASK_TIMEOUT is None  # --dask-timeout does not outlive its command


def test_the_timeout_comes_from_the_environment(capsys, silent_server, monkeypatch):
    monkeypatch.setenv("SHARDMETER_DASK_TIMEOUT", "1")
    t0 = time.monotonic()
    code, _, err = run(capsys, *SWEEP, "--dask", f"tcp://{silent_server}")
    assert code == 2
    assert "no answer within 1 s" in one_line_error(err)
    assert time.monotonic() - t0 < 4


def test_a_bad_timeout_in_the_environment_is_one_line(capsys, silent_server, monkeypatch):
    monkeypatch.setenv("SHARDMETER_DASK_TIMEOUT", "soon")
    code, _, err = run(capsys, *PLAN, "--dask", silent_server)
    assert code == 2
    assert "SHARDMETER_DASK_TIMEOUT" in one_line_error(err)


class _QuietHandler(http.server.BaseHTTPRequestHandler):
    timeout = 5  # no handler thread waits longer for a request line

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, format, *args):  # keep stderr to shardmeter's one line
        pass


@pytest.fixture
def http_server():
    """An HTTP server on 127.0.0.1 (it shuts down after 30 s at most); yields ``HOST:PORT``."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _QuietHandler)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    guard = threading.Timer(30, srv.shutdown)
    guard.daemon = True
    guard.start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    guard.cancel()
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def test_an_http_server_does_not_speak_the_dask_protocol(capsys, http_server):
    pytest.importorskip("distributed", reason="dask.distributed is not installed")
    t0 = time.monotonic()
    code, _, err = run(capsys, *PLAN, "--dask", http_server, "--dask-timeout", "5")
    assert code == 2
    line = one_line_error(err)
    assert f"{http_server} does not speak the dask scheduler protocol" in line
    assert "input too large" not in line
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize(
    "address",
    [
        "nonsense",
        "tcp://host-without-port",
        "http://127.0.0.1:8786",
        "tls://127.0.0.1:8786",
        "127.0.0.1:70000",
        ":8786",
        "tcp://",
    ],
)
def test_a_bad_address_names_the_accepted_form(capsys, address):
    code, _, err = run(capsys, *PLAN, "--dask", address)
    assert code == 2
    line = one_line_error(err)
    assert repr(address) in line and "tcp://HOST:PORT" in line and "or HOST:PORT" in line


@pytest.mark.parametrize("address", ["127.0.0.1:8786", "local"])
def test_without_dask_the_hint_is_the_extra(capsys, monkeypatch, address):
    for name in ("distributed", "dask", "dask.distributed"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails, as when it is not installed
    code, _, err = run(capsys, *PLAN, "--dask", address)
    assert code == 2
    line = one_line_error(err)
    assert "pip install" in line and "shardmeter[dask]" in line


def test_a_bad_address_is_reported_before_a_missing_dask(capsys, monkeypatch):
    for name in ("distributed", "dask", "dask.distributed"):
        monkeypatch.setitem(sys.modules, name, None)
    code, _, err = run(capsys, *PLAN, "--dask", "nonsense")
    assert code == 2
    line = one_line_error(err)
    assert "'nonsense'" in line and "tcp://HOST:PORT" in line and "pip install" not in line


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("tcp://127.0.0.1:8786", "tcp://127.0.0.1:8786"),
        ("127.0.0.1:8786", "tcp://127.0.0.1:8786"),
        (" localhost:1 ", "tcp://localhost:1"),
        ("[::1]:8786", "tcp://[::1]:8786"),
    ],
)
def test_the_accepted_address_forms(address, url):
    assert executors.parse_dask_address(address)[0] == url


def test_where_the_timeout_comes_from(monkeypatch):
    monkeypatch.delenv("SHARDMETER_DASK_TIMEOUT", raising=False)
    assert executors.dask_timeout() == executors.DEFAULT_DASK_TIMEOUT <= 30
    monkeypatch.setenv("SHARDMETER_DASK_TIMEOUT", "7")
    assert executors.dask_timeout() == 7
    with executors.dask_timeout_override(3):
        assert executors.dask_timeout() == 3
        assert executors.dask_timeout(1.5) == 1.5
    assert executors.dask_timeout() == 7
