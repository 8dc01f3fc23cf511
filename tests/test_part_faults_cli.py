"""Every hook of :mod:`shardmeter.hookspecs` x every way a plugin's code can fail, through the
command line in a subprocess (``estimate --json``, stdout the process's own): a result that is
NaN, negative, wrongly shaped or of the wrong type, or a hook that raises, never reaches a
report (exit 2, nothing on stdout, one line naming the plugin and its distribution on stderr);
a hook that prints or sleeps changes nothing in the report (stdout one valid JSON document, the
same as the working plugin's), its text goes to stderr and a slow one is named there.

The plugin (``tests/fault_plugin.py``) is an entry point of a distribution ``shardmeter-broken``
beside the real ones, contributing a copy of a bundled part named ``broken``; a record hook
(GPUs, links, cost sources) fails where it builds its records, a behaviour part (sharding,
schedules, sync, convergence, frameworks, failure and variability models) in the method the
model calls.
"""

from __future__ import annotations

import inspect
import json
import os
import pathlib
import subprocess
import sys

import pytest
from fault_plugin import FAULTS, HOOKS

from shardmeter import hookspecs

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent

MODEL = """[model]
layers = 8
hidden = 2048
heads = 16
vocab = 32000
seq_len = 2048
[training]
global_batch = 64
tokens = 2e9
"""
ISLAND = """[[island]]
name = "{name}"
gpu = "a100-sxm-40gb"
nodes = 2
gpus_per_node = 4
inter_node = "ib-hdr"
price = "cloud-on-demand"
"""
ONE = MODEL + ISLAND.format(name="c")
TWO = (
    MODEL
    + ISLAND.format(name="c")
    + ISLAND.format(name="d")
    + '[network]\nlink = { name = "internet", bandwidth_gb_s = 0.25, latency_us = 60000 }\n'
    + '[sync]\nstrategy = "diloco"\ninner_steps = 20\n'
)

#: hook -> (scenario, the --set that makes it use the plugin's part 'broken')
USES = {
    "hardware_profiles": (ONE, ["island[0].gpu=broken"]),
    "interconnect_models": (ONE, ["island[0].inter_node=broken"]),
    "cost_sources": (ONE, ["island[0].price=broken"]),
    "sharding_strategies": (ONE, ["parallelism.sharding=broken"]),
    "pipeline_schedules": (ONE, ["parallelism.pp=2", "parallelism.schedule=broken"]),
    "sync_strategies": (TWO, ["sync.strategy=broken"]),
    "convergence_models": (TWO, ["sync.convergence=broken"]),
    "frameworks": (ONE, ["training.framework=broken"]),
    "failure_models": (ONE, ["reliability.model=broken"]),
    "variability_models": (ONE, ["variability.model=broken", "variability.gpu_step_cv=0.05"]),
}


def test_every_hook_of_the_hookspecs_is_covered():
    specs = {
        n.removeprefix("shardmeter_") for n, f in inspect.getmembers(hookspecs) if n.startswith("shardmeter_")
    }
    specs = {n for n in specs if callable(getattr(hookspecs, f"shardmeter_{n}"))}
    assert specs == set(HOOKS) == set(USES)


def _strict_json(text: str):
    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _run(hook: str, fault: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    text, sets = USES[hook]
    path = tmp_path / "s.toml"
    path.write_text(text)
    argv = ["estimate", str(path), "--json", *(a for s in sets for a in ("--set", s))]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("SHARDMETER_STRICT_PLUGINS", None)
    env.pop("SHARDMETER_DISABLE_PLUGINS", None)
    return subprocess.run(
        [sys.executable, str(HERE / "fault_plugin.py"), hook, fault, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )


_GOOD: dict[str, dict] = {}


def _good(hook: str, tmp_path: pathlib.Path) -> dict:
    """The report with the plugin's part working (computed once per hook)."""
    if hook not in _GOOD:
        done = _run(hook, "none", tmp_path)
        assert done.returncode == 0, done.stderr
        assert "broken" not in done.stderr
        _GOOD[hook] = _strict_json(done.stdout)
    return _GOOD[hook]


NAMED = "plugin 'broken' (shardmeter-broken 6.6.6)"


BROKEN = [f for f in FAULTS if f != "none"]
#: Every hook x every fault; the default run keeps one fault per hook (each fault at least
#: once), CI's slow stage the rest (each case is a ShardMeter process, about a second).
CASES = [
    pytest.param(
        hook, fault, marks=() if BROKEN[i % len(BROKEN)] == fault else pytest.mark.slow, id=f"{hook}-{fault}"
    )
    for i, hook in enumerate(HOOKS)
    for fault in BROKEN
]


@pytest.mark.parametrize(("hook", "fault"), CASES)
def test_a_failing_plugin_never_reaches_a_report_and_is_named(hook, fault, tmp_path):
    done = _run(hook, fault, tmp_path)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    if fault in ("print", "sleep"):
        assert done.returncode == 0, done.stderr
        assert _strict_json(done.stdout) == _good(hook, tmp_path)
        if fault == "print":
            assert "injected plugin chatter" in lines
        else:
            slow = [ln for ln in lines if NAMED in ln and ("has not returned" in ln or " took " in ln)]
            assert slow, done.stderr
        return
    assert done.returncode == 2, (done.stdout[:300], done.stderr)
    assert done.stdout == ""
    assert lines[-1].startswith("shardmeter: error: ")
    named = [ln for ln in lines if NAMED in ln]
    assert named, done.stderr
    assert all(len(ln) < 600 for ln in lines)
    if fault == "raise":
        assert any("ZeroDivisionError: injected fault" in ln for ln in named)
