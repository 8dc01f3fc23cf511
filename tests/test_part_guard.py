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


# ---------------------------------------------------------------------------------------------
# the bundled parts take the fast way; every other part keeps every guard


def _counting(monkeypatch):
    """Every guarded hook call, as ``(kind, hook, class name)``."""
    calls = []
    real = guard.guarded_call

    def counted(kind, part, hook, *args, **kwargs):
        calls.append((kind, hook, type(part).__name__))
        return real(kind, part, hook, *args, **kwargs)

    monkeypatch.setattr(guard, "guarded_call", counted)
    return calls


def test_a_bundled_part_is_called_directly_and_a_third_party_one_through_the_guard(monkeypatch):
    calls = _counting(monkeypatch)
    good = Estimator().estimate(SHARDED).to_dict()
    assert [c for c in calls if c[0] in ("sharding", "schedule", "sync")] == []  # bundled: direct

    # the same bundled class, registered in code (what a third party's plugin could register)
    same = copy.copy(Estimator().registry.get("sharding", "zero1"))
    assert not guard.bundled(same)  # no registry holds this copy yet
    calls.clear()
    assert (
        Estimator().with_part("sharding", same).estimate(SHARDED).to_dict()["step_time_s"]
        == good["step_time_s"]
    )
    assert ("sharding", "state", "ZeroSharding") in calls and ("sharding", "traffic", "ZeroSharding") in calls
    assert not guard.bundled(same)

    # a subclass of a bundled part (its module is not the package's)
    calls.clear()
    changed = _changed("sharding", "zero1", "state", lambda s: s)
    assert Estimator().with_part("sharding", changed).estimate(SHARDED).to_dict() == good
    assert ("sharding", "state", type(changed).__name__) in calls


def test_guard_bundled_puts_the_bundled_parts_back_through_every_guard(monkeypatch):
    calls = _counting(monkeypatch)
    monkeypatch.setattr(guard, "GUARD_BUNDLED", True)
    Estimator().estimate(SHARDED)
    kinds = {(c[0], c[1]) for c in calls}
    assert {("sharding", "state"), ("sharding", "traffic"), ("schedule", "terms")} <= kinds


def test_a_pickled_part_table_keeps_who_is_guarded():
    import pickle

    from shardmeter.inputs.bundles import PartTable

    reg = Estimator().registry
    table = PartTable()
    own = table.code("sharding", reg.get("sharding", "zero1"), None)
    # a bundled class with other data, registered in code (not bundled): a third party's record
    third = attrs.evolve(reg.get("sharding", "zero1"), description="a third party's ZeRO-1")
    Estimator().with_part("sharding", third)
    other = table.code("sharding", third, None)
    for t in (table, pickle.loads(pickle.dumps(table))):
        assert not isinstance(t.get("sharding", own)[0], guard.GuardedPart)
        assert isinstance(t.get("sharding", other)[0], guard.GuardedPart)
    # unpickled in a process where no registry records the part: guarded, whatever its class
    bare = PartTable()
    bare.entries = pickle.loads(pickle.dumps(table)).entries
    assert isinstance(bare.get("sharding", own)[0], guard.GuardedPart)


def _bundled_sources(everything: bool) -> list:
    """The examples; ``everything``: also the published runs and the golden record's random
    scenarios."""
    import pathlib

    from shardmeter.validate.run import bundled_validation_dir, collect_files

    root = pathlib.Path(__file__).resolve().parents[1]
    sources: list = [p for p in (root / "examples").rglob("*.toml") if "plugins" not in p.parts]
    if everything:
        golden = json.loads((root / "tests" / "golden" / "predictions.json").read_text())
        sources += [pathlib.Path(p) for p in collect_files([bundled_validation_dir()])]
        sources += [c["scenario"] for c in golden["random"] if "error" not in c]
    return sources


@pytest.mark.parametrize("everything", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_bundled_parts_results_hold_to_every_check_on_every_bundled_scenario(everything, monkeypatch):
    """What lets the bundled parts skip the checks: with them on, no bundled part's result on any
    example (``everything``: published run and random scenario of the golden record too; the
    scalar path), nor on the plans of a search (the array path, many parts per batch), breaks
    one."""
    from shardmeter.explore.search.plan import search

    monkeypatch.setattr(guard, "GUARD_BUNDLED", True)
    est = Estimator()
    done = 0
    for source in _bundled_sources(everything):
        sc = est.load(source)
        if sc.stage_groups:
            continue
        est.estimate(sc)  # a PartFault would raise
        done += 1
    assert done >= (500 if everything else 15)
    for scenario in (SHARDED, MULTI):
        assert search(scenario, top=3)["evaluated"] > 0
