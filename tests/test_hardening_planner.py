"""Hardening of ``plan``, ``validate`` and the plugin registry (the reliability issue):

1. resources: a plan over many islands is refused before it grows (1,000 islands took 16 GB and
   70 s), the node combinations of many islands are counted without int64 overflow and refused
   naming ``--only island[i].nodes``, the model arrays of a search stay bounded whatever the
   islands, and ``--top`` is bounded;
2. ``validate`` never opens a FIFO (a FIFO named ``*.toml`` made it hang), deduplicates files by
   real path, and says so when there is nothing to compare (no ``[measured]`` values);
3. a ``--only`` the plan cannot use is an error naming the knob and the value, never dropped;
   ``SHARDMETER_STRICT_PLUGINS`` is read as people write booleans, anything else an error;
4. plugin isolation: part names differing only by case are rejected naming both providers, a
   slow hook is named in a warning, a part name with control characters is rejected.

CLI runs are in-process (``shardmeter.cli.app.main``) unless a run could exhaust the machine on a
regression: those run in a subprocess with a memory cap and a timeout. FIFOs live only in the
test's ``tmp_path`` and are never opened blocking: a watchdog thread tries, non-blocking, to open
their write end, which succeeds only if someone opened them for reading (and then unblocks
that reader, so a regression fails instead of hanging).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
import types

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from hostile.support import check_error, check_json_report, run_cli, to_toml
from shared_scenarios import TINY

import shardmeter
from shardmeter.errors import ShardMeterError
from shardmeter.explore.search import layouts, plan
from shardmeter.explore.search.plan import search
from shardmeter.records import HardwareProfile
from shardmeter.registry import manager as plugins_core

ROOT = pathlib.Path(__file__).resolve().parents[1]
posix = pytest.mark.skipif(os.name != "posix", reason="FIFOs and resource limits are POSIX")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("SHARDMETER_STRICT_PLUGINS", "SHARDMETER_DISABLE_PLUGINS", "SHARDMETER_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(plugins_core, "_DEFAULT", None)  # the CLI builds a fresh registry
    yield
    plugins_core._DEFAULT = None


def many_islands(n: int, nodes=lambda j: 1 + j % 4) -> dict:
    """A scenario of ``n`` islands joined by the internet (1,000 of them: about 53 kB of TOML)."""
    gpus = ("h100-sxm", "a100-sxm-80gb")
    return {
        "model": {"layers": 8, "hidden": 2048, "heads": 16, "vocab": 32000, "seq_len": 2048},
        "training": {"global_batch": 8 * n, "micro_batch": 1, "tokens": 1e9},
        "island": [
            {"name": f"dc-{j}", "gpu": gpus[j % 2], "nodes": nodes(j), "price": "cloud-on-demand"}
            for j in range(n)
        ],
        "network": {"link": {"name": "internet", "bandwidth_gb_s": 1.0, "latency_us": 30000.0}},
        "sync": {"strategy": "diloco", "inner_steps": 100},
    }


def bounded_run(argv: list[str], *, timeout: float = 60.0, memory_gb: float = 4.0):
    """``python ARGV`` in a subprocess limited to ``memory_gb`` of address space and ``timeout``
    seconds: (exit code, stdout, stderr, seconds); a run that times out fails the test."""

    def cap():
        import resource

        limit = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {k: v for k, v in os.environ.items() if k != "SHARDMETER_DEBUG"}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # no per-core arenas
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    try:
        res = subprocess.run(
            [sys.executable, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            preexec_fn=cap,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv[:3]} did not finish in {timeout} s")
    return res.returncode, res.stdout, res.stderr, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# 1. resources


@posix
def test_a_thousand_island_plan_is_refused_at_once_naming_the_limit(tmp_path):
    scenario = many_islands(1000)
    path = tmp_path / "islands.toml"
    path.write_text(to_toml(scenario))
    assert 40_000 < path.stat().st_size < 80_000  # the 53 kB scenario
    code, out, err, took = bounded_run(["-m", "shardmeter", "plan", str(path), "--json"])
    check_error(code, out, err, "1,000 islands", f"limit {layouts.MAX_PLAN_ISLANDS} islands")
    assert took < 10, f"took {took:.1f} s to refuse"
    # the library call too, from the dict
    script = textwrap.dedent(
        f"""
        import json, time
        from shardmeter.explore.search.plan import search
        scenario = json.loads({json.dumps(json.dumps(scenario))})
        t0 = time.perf_counter()
        try:
            search(scenario)
        except Exception as exc:
            print(json.dumps({{"error": type(exc).__name__, "msg": str(exc), "s": time.perf_counter() - t0}}))
        """
    )
    code, out, err, _ = bounded_run(["-c", script])
    assert code == 0 and out, err[-2000:]
    doc = json.loads(out)
    assert doc["error"] == "ShardMeterError" and "1,000 islands" in doc["msg"], doc
    assert doc["s"] < 3.0, doc


@posix
def test_node_combinations_of_many_islands_are_counted_without_overflow(tmp_path):
    """64 islands of 2 nodes: 2**64 node combinations, which int64 wrapped to 0 (under the limit)."""
    path = tmp_path / "islands.toml"
    path.write_text(to_toml(many_islands(64, nodes=lambda j: 2)))
    code, out, err, took = bounded_run(["-m", "shardmeter", "plan", str(path)])
    check_error(code, out, err, "node combinations", "64 islands", "--only island[i].nodes=")
    assert took < 10, f"took {took:.1f} s to refuse"


def test_pinning_each_island_makes_many_islands_searchable():
    scenario = many_islands(layouts.MAX_PLAN_ISLANDS, nodes=lambda j: 2)
    only = {f"island[{j}].nodes": None for j in range(layouts.MAX_PLAN_ISLANDS)}
    doc = search(scenario, only=only, top=1, build_reports=False)
    assert doc["feasible"] > 0
    too_many = many_islands(layouts.MAX_PLAN_ISLANDS + 1)
    with pytest.raises(ShardMeterError, match=f"limit {layouts.MAX_PLAN_ISLANDS} islands"):
        search(too_many, top=1, build_reports=False)


def test_search_memory_does_not_grow_with_the_islands():
    """The model arrays of one ``evaluate`` call were candidates x islands: ~6 MB more per island."""
    peaks = {}
    for n in (2, 32):
        tracemalloc.start()
        try:
            search(many_islands(n, nodes=lambda j: 1), top=3, build_reports=False, layouts="shared")
            peaks[n] = tracemalloc.get_traced_memory()[1] / 1e6
        finally:
            tracemalloc.stop()
    assert peaks[32] < max(2 * peaks[2], 60.0), peaks


def test_layout_table_of_many_islands_has_a_smaller_row_limit(monkeypatch):
    """Each layout row holds a dp and a node count per island: the limit shrinks with the islands."""
    monkeypatch.setattr(layouts, "MAX_LAYOUTS", 1000)
    scenario = many_islands(4, nodes=lambda j: 8)  # 4**4 = 256 node combinations
    with pytest.raises(ShardMeterError, match=r"256 node combinations of 4 islands .* \(limit 500\)"):
        search(
            scenario,
            only={"tp": [1, 2], "pp": [1], "cp": [1], "sp": [False]},
            build_reports=False,
            layouts="shared",
        )


def test_top_is_bounded_with_the_flag_named(capsys, tmp_path):
    with pytest.raises(ShardMeterError, match=r"^--top: at most 10,000 plans \(got 100,000,000\)"):
        search(TINY, top=100_000_000, build_reports=False)
    path = tmp_path / "tiny.toml"
    path.write_text(to_toml(TINY))
    small = [
        "--only",
        "tp=1",
        "--only",
        "pp=1",
        "--only",
        "cp=1",
        "--only",
        "mbs=1",
        "--only",
        "recompute=none",
    ]
    code, out, err = run_cli(capsys, "plan", path, "--top", "100000000", *small)
    check_error(code, out, err, "--top", "10,000")
    assert plan.MAX_TOP == 10_000


def test_top_at_the_limit_is_accepted(monkeypatch):
    monkeypatch.setattr(plan, "MAX_TOP", 5)
    doc = search(TINY, top=5, only={"tp": [1], "pp": [1]})
    assert len(doc["plans"]) == 5
    with pytest.raises(ShardMeterError, match="--top: at most 5 plans"):
        search(TINY, top=6)
    for bad in (0, -1, True, 2.5, "3"):
        with pytest.raises(ShardMeterError, match="--top"):
            search(TINY, top=bad)


# ---------------------------------------------------------------------------------------------
# 2. validate


MEASURED = "\n[measured]\ntokens_per_s_per_gpu = 1000.0\n"


@contextlib.contextmanager
def fifo_watch(*fifos):
    """Fail-safe for FIFOs: a thread that keeps trying to open each one's write end without
    blocking. That succeeds only while someone has it open for reading (then it closes at
    once, so that reader sees an empty file instead of waiting for ever); yields the list
    of FIFOs it found opened."""
    opened: list[str] = []
    stop = threading.Event()

    def watch():
        while not stop.wait(0.05):
            for f in fifos:
                try:
                    fd = os.open(f, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as exc:
                    assert exc.errno in (errno.ENXIO, errno.ENOENT), exc
                    continue
                os.close(fd)
                opened.append(str(f))

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield opened
    finally:
        stop.set()
        t.join(5)


def _scenario_file(path: pathlib.Path, measured: bool) -> pathlib.Path:
    path.write_text(to_toml(TINY) + (MEASURED if measured else ""))
    return path


@posix
def test_validate_never_opens_a_fifo_in_a_folder(capsys, tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    _scenario_file(folder / "run.toml", measured=True)
    fifo = folder / "pipe.toml"
    os.mkfifo(fifo)
    (folder / "link.toml").symlink_to(fifo)  # a link to a FIFO is a FIFO
    with fifo_watch(fifo) as opened:
        code, out, err = run_cli(capsys, "validate", folder, "--json")
        table = run_cli(capsys, "validate", folder)
    assert not opened, "validate opened the FIFO"
    assert code == 0 and "Traceback" not in err, err
    doc = check_json_report(out, "validate")
    failed = {os.path.basename(f["file"]): f["error"] for f in doc["failures"]}
    assert set(failed) == {"pipe.toml", "link.toml"}, failed
    assert all("FIFO" in e and "\n" not in e for e in failed.values()), failed
    assert [os.path.basename(c["file"]) for c in doc["cases"]] == ["run.toml"]
    assert doc["n_files"] == 3 and doc["n_failed"] == 2
    assert table[0] == 0 and "pipe.toml: is a FIFO" in table[1]


@posix
def test_validate_of_a_fifo_named_on_the_command_line_is_one_line_exit_2(capsys, tmp_path):
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    run = _scenario_file(tmp_path / "run.toml", measured=True)
    with fifo_watch(fifo) as opened:
        code, out, err = run_cli(capsys, "validate", run, fifo)
    assert not opened, "validate opened the FIFO"
    check_error(code, out, err, str(fifo), "FIFO")


def test_validate_of_files_without_measured_values_says_so(capsys, tmp_path):
    bare = _scenario_file(tmp_path / "bare.toml", measured=False)
    code, out, err = run_cli(capsys, "validate", bare, "--json")
    check_error(code, out, err, "bare.toml", "no [measured] values", "nothing to compare")
    other = _scenario_file(tmp_path / "other.toml", measured=False)
    code, out, err = run_cli(capsys, "validate", bare, other)
    check_error(code, out, err, "no [measured] values", "2 files")
    # with a file that has measurements: not an error, and the bare one is named
    run = _scenario_file(tmp_path / "run.toml", measured=True)
    code, out, err = run_cli(capsys, "validate", run, bare, "--json")
    assert code == 0 and err == "", err
    doc = check_json_report(out, "validate")
    assert [os.path.basename(f) for f in doc["no_measured"]] == ["bare.toml"]
    assert len(doc["cases"]) == 1 and doc["n_failed"] == 0
    code, out, err = run_cli(capsys, "validate", run, bare)
    assert code == 0 and "bare.toml: no [measured] values" in out


def test_validate_of_a_folder_counts_files_without_measured_values_as_not_cases(capsys, tmp_path):
    folder = tmp_path / "examples"
    folder.mkdir()
    _scenario_file(folder / "a.toml", measured=False)
    _scenario_file(folder / "b.toml", measured=True)
    code, out, err = run_cli(capsys, "validate", folder, "--json")
    assert code == 0 and err == "", err
    doc = check_json_report(out, "validate")
    assert doc["n_files"] == 2 and len(doc["cases"]) == 1 and doc["no_measured"] == []
    # a folder with nothing to compare at all
    (folder / "b.toml").unlink()
    code, out, err = run_cli(capsys, "validate", folder)
    check_error(code, out, err, "no [measured] values", "a.toml")


def test_validate_counts_a_file_once_however_it_is_named(capsys, tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    run = _scenario_file(folder / "run.toml", measured=True)
    names = [run, run, folder / ".." / "runs" / "run.toml", folder]
    if os.name == "posix":
        (tmp_path / "alias.toml").symlink_to(run)
        names.append(tmp_path / "alias.toml")
    code, out, err = run_cli(capsys, "validate", *names, "--json")
    assert code == 0 and err == "", err
    doc = check_json_report(out, "validate")
    assert doc["n_files"] == 1 and len(doc["cases"]) == 1, doc


def test_validate_table_escapes_control_characters_in_file_names(capsys, tmp_path):
    run = _scenario_file(tmp_path / "new\nline.toml", measured=True)
    code, out, err = run_cli(capsys, "validate", run)
    assert code == 0, err
    assert "new\\nline.toml" in out and "new\nline" not in out


# ---------------------------------------------------------------------------------------------
# 3. options never silently ignored


HEADS_32 = {
    "model": {"layers": 8, "hidden": 4096, "heads": 32, "vocab": 32000, "seq_len": 2048},
    "training": {"global_batch": 128, "micro_batch": 1, "tokens": 5e9},
    "island": [{"name": "a", "gpu": "h100-sxm", "nodes": 2}],
}
TWO = {
    **HEADS_32,
    "island": [
        {"name": "a", "gpu": "h100-sxm", "nodes": 2},
        {"name": "b", "gpu": "a100-sxm-80gb", "nodes": 2},
    ],
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 1.0, "latency_us": 30000.0}},
    "sync": {"strategy": "diloco", "inner_steps": 100},
}

# (scenario, --only items, substrings of the one error line)
BAD_ONLY = [
    (HEADS_32, ["tp=3"], ["--only tp=3", "model.heads (32)"]),
    (HEADS_32, ["tp=2,3"], ["--only tp=3"]),
    (HEADS_32, ["tp=x"], ["--only tp=x", "whole number"]),
    (HEADS_32, ["schedule=nonexistent"], ["--only schedule=nonexistent", "unknown pipeline schedule"]),
    (HEADS_32, ["sharding=zero9"], ["--only sharding=zero9", "zero3"]),
    (HEADS_32, ["sharding="], ["sharding"]),
    (HEADS_32, ["pp=99"], ["--only pp=99", "model.layers (8)"]),
    (HEADS_32, ["tp=8,32"], ["--only tp=32", "fits in no layout", "at most 16 GPUs"]),
    (HEADS_32, ["dp=4,100"], ["--only dp=100", "fits in no layout"]),
    (HEADS_32, ["cp=3"], ["--only cp=3", "model.seq_len"]),
    (HEADS_32, ["ep=2"], ["--only ep=2", "no experts"]),
    (HEADS_32, ["dp=abc"], ["--only dp=abc"]),
    (HEADS_32, ["dp=0"], ["--only dp=0"]),
    (HEADS_32, ["mbs=abc"], ["--only mbs=abc"]),
    (HEADS_32, ["mbs=256"], ["--only mbs=256", "training.global_batch"]),
    (HEADS_32, ["sp=maybe"], ["--only sp=maybe", "true or false"]),
    (HEADS_32, ["recompute=bogus"], ["--only recompute=bogus"]),
    (HEADS_32, ["v=16"], ["--only v=16", "model.layers"]),
    (HEADS_32, ["v=2", "schedule=1f1b"], ["--only v=2", "virtual stages"]),
    (HEADS_32, ["strategy=diloco"], ["--only strategy=diloco", "single-island"]),
    (HEADS_32, ["island[0].nodes=1"], ["--only island[0].nodes=1", "--only dp="]),
    (TWO, ["island[5].nodes=2"], ["--only island[5].nodes=2", "2 islands"]),
    (TWO, ["island[5].nodes"], ["--only island[5].nodes", "2 islands"]),
    (TWO, ["island[0].nodes=7"], ["--only island[0].nodes=7", "'a' has 2 nodes"]),
    (TWO, ["island[x].nodes=1"], ["island[x].nodes", "not a knob"]),
    (TWO, ["dp=4"], ["--only dp=4", "island[i].nodes"]),
    (TWO, ["strategy=gossip"], ["--only strategy=gossip", "unknown sync strategy"]),
    (TWO, ["inner_steps=7", "strategy=allreduce"], ["--only inner_steps=7", "allreduce"]),
    (TWO, ["bits=4", "strategy=allreduce"], ["--only bits=4", "compression_bits"]),
]


@pytest.mark.parametrize(
    "scenario,items,expect", BAD_ONLY, ids=[" ".join(i) + f"/{len(s['island'])}" for s, i, _ in BAD_ONLY]
)
def test_an_only_the_plan_cannot_use_is_an_error_naming_it(scenario, items, expect, capsys, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(to_toml(scenario))
    args = [a for it in items for a in ("--only", it)]
    code, out, err = run_cli(capsys, "plan", path, "--top", "1", *args)
    check_error(code, out, err, *expect, where=" ".join(items))


def test_one_shared_layout_that_fits_no_island_is_an_error_per_island_an_infeasible_result(capsys, tmp_path):
    """``--layouts shared`` puts one layout on every island: a replica larger than an island is
    bad input. Per island (the default with several islands) the island holds no layout and
    the result says so, with the reasons."""
    path = tmp_path / "s.toml"
    path.write_text(to_toml(TWO))
    only = ["--only", "island[0].nodes=1", "--only", "tp=16"]
    code, out, err = run_cli(capsys, "plan", path, "--top", "1", "--layouts", "shared", *only)
    check_error(code, out, err, "fits in no layout", "every island holds a whole replica")
    doc = search(TWO, only={"island[0].nodes": [1], "tp": [16]}, top=1, build_reports=False)
    assert doc["layouts"] == "per-island" and doc["classes"] == 0
    assert doc["plans"] == [] and doc["infeasible"]["parallelism"] > 0  # layouts larger than island 0


@pytest.mark.parametrize(
    "only,expect",
    [
        ({"sharding": []}, "--only sharding: no values"),
        ({"tp": ()}, "--only tp: no values"),
        ({"tp": [2], "parallelism.tp": [4]}, "--only tp: given twice"),
        ({"island[9].nodes": [1]}, "--only island[9].nodes=1"),
    ],
)
def test_the_library_refuses_the_same_only(only, expect):
    with pytest.raises(ShardMeterError) as info:
        search(TWO, only=only, top=1, build_reports=False)
    assert expect in str(info.value)


def test_usable_only_values_still_work_and_repeats_are_tried_once():
    once = search(HEADS_32, only={"tp": [2], "pp": [1]}, top=5, build_reports=False)
    twice = search(HEADS_32, only={"tp": [2, 2], "pp": [1, 1]}, top=5, build_reports=False)
    assert twice["space_size"] == once["space_size"] and twice["ids"] == once["ids"]
    doc = search(TWO, only={"island[1].nodes": None, "island[0].nodes": [1, 2]}, top=3)
    assert {p["islands"][1]["nodes"] for p in doc["plans"]} <= {1, 2}
    assert doc["space"]["layouts"] > 0


# ---------------------------------------------------------------------------------------------
# 3b. SHARDMETER_STRICT_PLUGINS as people write it


class FakeDist:
    def __init__(self, name: str, version: str):
        self.name, self.version = name, version


class FakeEntryPoint:
    def __init__(self, name: str, load, dist=("shardmeter-acme", "1.0")):
        self.name, self._load, self.dist, self.group = name, load, FakeDist(*dist), "shardmeter"

    def load(self):
        return self._load()


REAL_ENTRY_POINTS = plugins_core._entry_points


def install(monkeypatch, *eps):
    monkeypatch.setattr(plugins_core, "_entry_points", lambda: REAL_ENTRY_POINTS() + list(eps))


def registry():
    return shardmeter.Registry.from_plugin_manager(shardmeter.make_plugin_manager())


def hardware_plugin(module: str, *names: str, before=None) -> types.ModuleType:
    """A plugin module yielding one GPU per name (``before()`` runs first in the hook)."""

    def hardware():
        if before is not None:
            before()
        for n in names:
            yield _gpu(n)

    mod = types.ModuleType(module)
    mod.shardmeter_hardware_profiles = shardmeter.hookimpl(hardware)  # type: ignore[attr-defined]
    return mod


def _gpu(name: str) -> HardwareProfile:
    gpu = HardwareProfile(
        name="placeholder", memory_gb=96.0, memory_bandwidth_gb_s=3000.0, peak_tflops={"bf16": 500.0}
    )
    object.__setattr__(gpu, "name", name)  # past the record's own validator: the registry must check
    return gpu


def _broken():
    raise ImportError("boom")


@pytest.mark.parametrize(
    "value,strict",
    [
        ("off", False),
        ("OFF", False),
        (" Off ", False),
        ("No", False),
        ("FALSE", False),
        ("0", False),
        ("", False),
        ("on", True),
        ("ON", True),
        ("Yes", True),
        ("TRUE", True),
        (" 1 ", True),
    ],
)
def test_strict_plugins_reads_booleans_as_written(value, strict, monkeypatch, capsys):
    install(monkeypatch, FakeEntryPoint("broken", _broken))
    monkeypatch.setenv("SHARDMETER_STRICT_PLUGINS", value)
    if strict:
        with pytest.raises(shardmeter.PluginError, match="'broken'"):
            registry()
    else:
        registry()
        assert "'broken'" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["maybe", "2", "enable", "of", "yes please", "t\nrue"])
def test_strict_plugins_with_another_value_is_an_error_naming_it(value, monkeypatch, capsys):
    monkeypatch.setenv("SHARDMETER_STRICT_PLUGINS", value)
    with pytest.raises(shardmeter.PluginError, match="SHARDMETER_STRICT_PLUGINS"):
        registry()  # at once, not only when some plugin fails
    code, out, err = run_cli(capsys, "plugins")
    check_error(code, out, err, "SHARDMETER_STRICT_PLUGINS=", "expected one of")


# ---------------------------------------------------------------------------------------------
# 4. plugin isolation


def test_part_names_differing_only_by_case_are_rejected_naming_both_providers(monkeypatch, capsys):
    one = FakeEntryPoint(
        "acme-one", lambda: hardware_plugin("acme_one", "acme-X1"), ("shardmeter-one", "1.0")
    )
    two = FakeEntryPoint(
        "acme-two", lambda: hardware_plugin("acme_two", "ACME-x1"), ("shardmeter-two", "2.0")
    )
    install(monkeypatch, one, two)
    with pytest.raises(shardmeter.PluginError) as info:
        registry()
    msg = str(info.value)
    for part in ("'acme-X1'", "'ACME-x1'", "differ only by case", "shardmeter-one 1.0", "shardmeter-two 2.0"):
        assert part in msg, msg
    code, out, err = run_cli(capsys, "plugins")
    check_error(code, out, err, "differ only by case", "acme-one", "acme-two")


def test_a_part_named_like_a_bundled_one_but_for_case_is_rejected(monkeypatch):
    install(monkeypatch, FakeEntryPoint("shouty", lambda: hardware_plugin("shouty", "H100-SXM")))
    with pytest.raises(shardmeter.PluginError) as info:
        registry()
    assert "'h100-sxm'" in str(info.value) and "'H100-SXM'" in str(info.value)
    assert "shardmeter-acme 1.0" in str(info.value)


def test_an_override_differing_only_by_case_is_rejected():
    reg = registry()
    with pytest.raises(shardmeter.PluginError, match="differ only by case"):
        reg.override("hardware", _gpu("H100-SXM"))
    assert reg.override("hardware", _gpu("h100-sxm")).get("hardware", "h100-sxm").memory_gb == 96.0


def test_a_slow_hook_is_named_in_a_warning_and_its_parts_kept(monkeypatch, capsys):
    monkeypatch.setattr(plugins_core, "SLOW_HOOK_S", 0.05)
    slow = hardware_plugin("acme_slow", "acme-slow-x1", before=lambda: time.sleep(0.15))
    install(monkeypatch, FakeEntryPoint("acme-slow", lambda: slow, ("shardmeter-slow", "3.0")))
    reg = registry()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    line = lines[0]
    assert (
        line.startswith("shardmeter: warning: ") and "'acme-slow'" in line and "shardmeter-slow 3.0" in line
    )
    assert "shardmeter_hardware_profiles" in line and "SHARDMETER_DISABLE_PLUGINS=acme-slow" in line
    assert "acme-slow-x1" in reg.names("hardware")


FORGING = [
    "evil\nhardware  h100-sxm  hardware  shardmeter 0.1.0",
    "carriage\rreturn",
    "esc\x1b[31mred",
    "nul\x00byte",
    "del\x7f",
    "bidi\u202eoverride",
    "line\u2028separator",
    "next\x85line",
]


@pytest.mark.parametrize("name", FORGING, ids=[ascii(n) for n in FORGING])
def test_a_part_name_with_control_characters_is_rejected_naming_the_plugin(name, monkeypatch, capsys):
    mod = hardware_plugin("acme_forge", name, "acme-fine-x1")
    install(monkeypatch, FakeEntryPoint("acme-forge", lambda: mod, ("shardmeter-forge", "1.0")))
    reg = registry()
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "'acme-forge'" in lines[0] and "shardmeter-forge 1.0" in lines[0], err
    assert name not in err and "acme-fine-x1" in reg.names("hardware")
    assert all(n.isprintable() for n in reg.names("hardware"))
    code, out, err = run_cli(capsys, "plugins")
    assert code == 0 and name not in out and "acme-fine-x1" in out
    monkeypatch.setenv("SHARDMETER_STRICT_PLUGINS", "1")
    with pytest.raises(shardmeter.PluginError, match="'acme-forge'"):
        registry()


def test_only_given_twice_or_empty_is_an_error_naming_only(capsys):
    from shardmeter.cli.app import main

    for argv, words in (
        (["--only", "tp=1", "--only", "tp=2"], "--only tp is given twice"),
        (["--only", "sharding="], "--only sharding=: no values"),
        (["--only", "tp=1,,2"], "--only tp=1,,2: empty item"),
    ):
        assert main(["plan", str(ROOT / "examples" / "gpt3-175b-a100.toml"), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err and "--vary" not in err
