"""Parts' results are checked where they run (:mod:`shardmeter.registry.guard`): a sharding,
schedule, sync, convergence or framework part that returns NaN, a negative figure, an array of
the wrong shape or the wrong type, or that raises, is a PluginError naming the part, its plugin
and its distribution, and its result never reaches a report; what it prints goes to stderr (so
``--json`` stays one document), and one that has not returned after a few seconds is named on
stderr while it still runs.

Each failure is injected into a bundled part by a subclass that changes one hook's result,
registered in code (``Estimator.with_part``: plugin 'override', "registered in code")."""

from __future__ import annotations

import copy
import json
import time

import attrs
import numpy as np
import pytest
from shared_scenarios import THREE_ISLANDS, TINY

from shardmeter.cli.app import main
from shardmeter.errors import PluginError, ScenarioError
from shardmeter.estimator import Estimator
from shardmeter.parts import CommEvent
from shardmeter.registry import guard

NAN, NEG, SHAPE = float("nan"), -1.0, np.ones(7)


def _changed(kind: str, name: str, hook: str, change):
    """The bundled part ``name`` of ``kind`` whose ``hook`` returns ``change(its result)``."""
    base = Estimator().registry.get(kind, name)

    def hooked(self, *args, **kwargs):
        return change(getattr(super(cls, self), hook)(*args, **kwargs))

    cls = type(f"Broken{type(base).__name__}", (type(base),), {"__slots__": (), hook: hooked})
    part = copy.copy(base)
    object.__setattr__(part, "__class__", cls)
    return part


def _raise(_):
    raise ZeroDivisionError("injected")


def _print(result):
    print("chatty plugin output")
    return result


def _sleep(result):
    time.sleep(0.6)
    return result


def _event(value):
    return lambda events: [*events, CommEvent(collective="all_gather", bytes=value, group_size=2.0)]


MULTI = Estimator().load(THREE_ISLANDS).to_dict()
CONVERGED = copy.deepcopy(MULTI)
CONVERGED["sync"]["convergence"] = "diloco-fits"
SHARDED = {**copy.deepcopy(TINY), "parallelism": {"sharding": "zero1"}}

#: kind, part, hook, the scenario that runs it, and each broken result
HOOKS = {
    "sharding.state": (
        "sharding",
        "zero1",
        "state",
        SHARDED,
        {
            "nan": lambda s: attrs.evolve(s, optimizer=s.optimizer * NAN),
            "negative": lambda s: attrs.evolve(s, optimizer=NEG),
            "shape": lambda s: attrs.evolve(s, optimizer=SHAPE),
            "type": lambda s: "state",
        },
    ),
    "sharding.traffic": (
        "sharding",
        "zero1",
        "traffic",
        SHARDED,
        {
            "nan": _event(NAN),
            "negative": _event(NEG),
            "shape": _event(SHAPE),
            "type": lambda e: 42,
        },
    ),
    "schedule.terms": (
        "schedule",
        "1f1b",
        "terms",
        {**copy.deepcopy(TINY), "parallelism": {"pp": 2}},
        {
            "nan": lambda t: attrs.evolve(t, bubble_s=t.bubble_s * NAN),
            "negative": lambda t: attrs.evolve(t, bubble_s=NEG),
            "shape": lambda t: attrs.evolve(t, bubble_s=SHAPE),
            "type": lambda t: (1.0, 2.0),
        },
    ),
    "sync.exchange": (
        "sync",
        "diloco",
        "exchange",
        MULTI,
        {
            "nan": lambda t: attrs.evolve(t, exposed_s=t.exposed_s * NAN),
            "negative": lambda t: attrs.evolve(t, egress_bytes=NEG + 0 * np.asarray(t.egress_bytes)),
            "shape": lambda t: attrs.evolve(t, exposed_s=np.ones((7, 7))),
            "type": lambda t: None,
        },
    ),
    "convergence.terms": (
        "convergence",
        "diloco-fits",
        "terms",
        CONVERGED,
        {
            "nan": lambda t: attrs.evolve(t, tokens_factor=NAN),
            "negative": lambda t: attrs.evolve(t, tokens_factor=NEG),
            "shape": lambda t: attrs.evolve(t, tokens_factor=np.ones(7)),
            "type": lambda t: {"tokens_factor": 1.0},
        },
    ),
}

CASES = [
    pytest.param(hook, what, id=f"{hook}-{what}")
    for hook, (*_, broken) in HOOKS.items()
    for what in [*broken, "raise"]
]


@pytest.mark.parametrize(("hook", "what"), CASES)
def test_a_broken_result_names_the_plugin_and_never_reaches_a_report(hook, what):
    kind, name, method, scenario, broken = HOOKS[hook]
    change = _raise if what == "raise" else broken[what]
    est = Estimator().with_part(kind, _changed(kind, name, method, change))
    with pytest.raises(PluginError) as err:
        est.estimate(scenario)
    msg = str(err.value)
    assert f"{kind} part '{name}' of plugin 'override' (registered in code): {method}()" in msg
    assert "\n" not in msg
    if what == "raise":
        assert "ZeroDivisionError: injected" in msg
    else:
        assert "not used" in msg


@pytest.mark.parametrize("hook", list(HOOKS))
def test_what_a_part_prints_goes_to_stderr(hook, capsys):
    kind, name, method, scenario, _ = HOOKS[hook]
    good = Estimator().estimate(scenario).to_dict()
    est = Estimator().with_part(kind, _changed(kind, name, method, _print))
    report = est.estimate(scenario)
    out, err = capsys.readouterr()
    assert out == "" and "chatty plugin output" in err
    assert report.to_dict()["step_time_s"] == good["step_time_s"]


@pytest.mark.parametrize("hook", list(HOOKS))
def test_a_slow_part_is_named_while_it_runs(hook, capsys, monkeypatch):
    monkeypatch.setattr(guard, "SLOW_PART_S", 0.2)
    kind, name, method, scenario, _ = HOOKS[hook]
    est = Estimator().with_part(kind, _changed(kind, name, method, _sleep))
    est.estimate(scenario)
    err = capsys.readouterr().err
    assert (
        f"{kind} part '{name}' of plugin 'override' (registered in code): {method}() has not returned" in err
    )


def test_estimate_json_stays_one_document_when_a_part_prints(tmp_path, capsys, monkeypatch):
    est = Estimator().with_part("sharding", _changed("sharding", "zero1", "state", _print))
    monkeypatch.setattr("shardmeter.estimator.get_registry", lambda: est.registry)
    path = tmp_path / "s.toml"
    path.write_text(
        "[model]\nlayers = 8\nhidden = 2048\nheads = 16\nvocab = 32000\nseq_len = 2048\n"
        '[training]\nglobal_batch = 64\n[parallelism]\nsharding = "zero1"\n'
        '[[island]]\ngpu = "a100-sxm-40gb"\nnodes = 2\ngpus_per_node = 4\ninter_node = "ib-hdr"\n'
    )
    assert main(["estimate", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["feasible"] is True
    assert "chatty plugin output" in err


@pytest.mark.parametrize(
    ("what", "change", "message"),
    [
        ("type", lambda v: "yes", "returned str, not a bool"),
        ("raise", _raise, "ZeroDivisionError: injected"),
    ],
)
def test_a_framework_behaviour_hook_is_checked_and_named(what, change, message):
    est = Estimator().with_part("framework", _changed("framework", "torchtitan", "loss_compiled", change))
    sc = {**copy.deepcopy(TINY), "training": {**TINY["training"], "framework": "torchtitan", "compile": True}}
    with pytest.raises(ScenarioError) as err:
        est.estimate(sc)
    msg = str(err.value)
    assert "framework 'torchtitan' failed" in msg and message in msg
    assert "plugin 'override' (registered in code)" in msg
