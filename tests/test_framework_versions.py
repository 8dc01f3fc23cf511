"""``training.framework_version`` (SCENARIO.md, "Software stacks"; docs/frameworks.md): a profile's
dated table of states (``FrameworkPart.versions``, one ``StackVersion`` each), the state a date,
a month or a release picks (the newest when unset), the note naming it, the errors, the version
reaching the profile's defaults and behaviour hooks (through ``Resolved``), and a profile without
a table working as it always did.

The profiles here are registered in code; the bundled profiles' dated changes are in
``test_framework_states.py``."""

from __future__ import annotations

import attrs
import pytest
from cli_helpers import one_line_error, run

import shardmeter
from shardmeter import StackVersion
from shardmeter.load.scenario import load_scenario, scenario_tables
from shardmeter.testing import fresh_registry

OLD = StackVersion(since="2024-03-05", commit="a" * 40, change='"compile = False" (first state)')
MID = StackVersion(since="2024-11-20", commit="b" * 40, change='"- compile = False" / "+ compile = True"')
REL = StackVersion(since="2025-01-31", commit="c" * 40, release="v1.0", change="release v1.0")
NEW = StackVersion(since="2025-06-02", commit="d" * 40, change='"+ save_attention = True"')


@attrs.frozen(kw_only=True)
class _Dated(shardmeter.FrameworkPart):
    """A stack that turned compile on at MID and started saving attention under op SAC at NEW,
    and compiles its loss from MID on."""

    versions = (OLD, MID, REL, NEW)

    def defaults(self, tables, gpus, version=None):
        v = version or self.versions[-1]
        return {"training.compile": (v.at_least(MID), f"dated.py@{v.short}: compile")}

    def op_saves_attention(self, attention, gpu, version=None):
        return (version or self.versions[-1]).at_least(NEW)

    def loss_compiled(self, version=None):
        return (version or self.versions[-1]).at_least(MID)


@attrs.frozen(kw_only=True)
class _Undated(shardmeter.FrameworkPart):
    """A profile written before tables existed: two-argument defaults and hook."""

    compiled_loss = True

    def defaults(self, tables, gpus):
        return {"parallelism.sharding": ("zero2", "undated config.py: zero_stage = 2")}

    def op_saves_attention(self, attention, gpu):
        return False


class _Plugin:
    __name__ = "dated-stacks"

    @shardmeter.hookimpl
    def shardmeter_frameworks(self):
        yield _Dated(name="dated")
        yield _Undated(name="undated")


REG = fresh_registry(_Plugin())


def _sc(framework: str | None = "dated", version=None, **training) -> dict:
    tr = {"global_batch": 64, "recompute": "op", **training}
    if framework is not None:
        tr["framework"] = framework
    if version is not None:
        tr["framework_version"] = version
    return {"model": {"preset": "llama3-8b"}, "training": tr, "island": [{"gpu": "h100-sxm", "nodes": 1}]}


def _load(*args, **kwargs):
    return load_scenario(_sc(*args, **kwargs), registry=REG)


@pytest.mark.parametrize(
    ("asked", "state"),
    [
        (None, NEW),  # unset: the newest state the profile knows
        ("2024-03-05", OLD),  # the day of a change: that state
        ("2024-11-19", OLD),
        ("2024-11-20", MID),
        ("2024-11", MID),  # a month: its last day
        ("2024-10", OLD),
        ("2025-01-31", REL),
        ("v1.0", REL),  # a release: its own state
        ("2025-06", NEW),
        ("2031-01-01", NEW),  # after the newest: the newest
    ],
)
def test_framework_version_picks_the_newest_state_at_or_before_it(asked, state):
    sc = _load(version=asked)
    assert sc.training.compile is state.at_least(MID)
    notes = [n for n in sc.notes if n.startswith("framework dated as of ")]
    assert notes == [notes[0]] and notes[0].startswith(f"framework dated as of {state.since} ({state.short}")
    assert notes[0].endswith(state.change)
    assert sc.notes.index(notes[0]) < sc.notes.index(next(n for n in sc.notes if " set " in n))


def test_the_version_note_says_how_it_was_picked():
    def note(asked):
        return next(n for n in _load(version=asked).notes if n.startswith("framework dated as of"))

    assert note(None) == (
        "framework dated as of 2025-06-02 (dddddddd; the newest state it knows: training.framework_version "
        'picks another): "+ save_attention = True"'
    )
    assert note("2024-11") == (
        'framework dated as of 2024-11-20 (bbbbbbbb; framework_version "2024-11" = 2024-11-30): '
        '"- compile = False" / "+ compile = True"'
    )
    assert note("v1.0") == "framework dated as of 2025-01-31 (cccccccc; release v1.0): release v1.0"
    assert 'release v1.0; framework_version "2025-02-01"' in note("2025-02-01")


@pytest.mark.parametrize(
    ("asked", "says"),
    [
        (
            "2024-03-04",
            "'2024-03-04' is before the oldest state: framework dated knows its states from 2024-03-05",
        ),
        ("2024-02", "'2024-02' is before the oldest state"),  # its last day, 02-29, is still before
        ("2024-13", "'2024-13' is not a date"),
        ("2024-02-30", "'2024-02-30' is not a date"),
        ("2024-3", "'2024-3' is not a date"),
        ("v1.1", "unknown release 'v1.1' (did you mean 'v1.0'?)"),
        ("latest", "unknown release 'latest'"),
        (2024, 'expected a date "YYYY-MM" or "YYYY-MM-DD" or a release name (a string), got 2024'),
    ],
)
def test_a_bad_framework_version_is_one_line_naming_the_key_and_the_range(asked, says):
    with pytest.raises(shardmeter.ScenarioError) as exc:
        _load(version=asked)
    assert exc.value.path == "training.framework_version"
    assert says in exc.value.message and "\n" not in str(exc.value)
    if isinstance(asked, str) and not asked.startswith("2024-0"):
        assert "from 2024-03-05 on, or a release: v1.0" in exc.value.message


def test_framework_version_without_framework_is_an_error_naming_it():
    with pytest.raises(shardmeter.ScenarioError, match=r"needs training\.framework") as exc:
        _load(framework=None, version="2025-01")
    assert exc.value.path == "training.framework_version"


def test_a_profile_without_versions_works_as_before_and_refuses_a_version():
    sc = _load("undated")
    assert sc.parallelism.sharding == "zero2"
    assert not [n for n in sc.notes if " as of " in n]  # one undated state: no version note
    est = shardmeter.Estimator(registry=REG)
    inp, _ = est.inputs(est.load(_sc("undated")))
    assert inp.training.op_saves_attention.item() == 0.0  # its two-argument hook still runs
    assert inp.training.compiled_loss.item() == 1.0  # its compiled_loss class attribute still counts
    assert est.resolve(est.load(_sc("undated"))).framework_version is None
    with pytest.raises(
        shardmeter.ScenarioError, match=r"one undated state: framework_version does not apply"
    ):
        _load("undated", version="2025-01")


@pytest.mark.parametrize(
    ("asked", "saves", "compiled"), [("2024-06", 0.0, 0.0), ("2024-12", 0.0, 1.0), (None, 1.0, 1.0)]
)
def test_the_version_reaches_the_behaviour_hooks_through_resolved(asked, saves, compiled):
    est = shardmeter.Estimator(registry=REG)
    sc = est.load(_sc(version=asked, compile=True))
    res = est.resolve(sc)
    assert res.framework_version == {None: NEW, "2024-06": OLD, "2024-12": MID}[asked]
    inp, _ = est.inputs(sc)
    assert inp.training.op_saves_attention.item() == saves
    assert inp.training.compiled_loss.item() == compiled


def test_a_toml_date_an_override_and_a_round_trip_keep_the_version(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\n[training]\nglobal_batch = 64\nframework = "dated"\n'
        'framework_version = 2024-11-20\n[[island]]\ngpu = "h100-sxm"\nnodes = 1\n'
    )
    sc = load_scenario(path, registry=REG)
    assert sc.training.framework_version == "2024-11-20" and sc.training.compile is True
    over = load_scenario(path, overrides=["training.framework_version=2024-06"], registry=REG)
    assert over.training.framework_version == "2024-06" and over.training.compile is False
    again = load_scenario(scenario_tables(over), registry=REG)
    assert again.training == over.training and again.notes == over.notes


def test_the_command_line_names_the_key_in_one_line(capsys, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\n[training]\nglobal_batch = 64\nframework = "torchtitan"\n'
        'framework_version = "2019-01"\n[[island]]\ngpu = "h100-sxm"\nnodes = 1\n'
    )
    code, _, err = run(capsys, "estimate", path)
    assert code == 2
    line = one_line_error(err)
    assert "$.training.framework_version: '2019-01' is before the oldest state" in line
    assert "framework torchtitan knows its states from 2024-05-21 (aafe0e87)" in line


def test_a_table_out_of_date_order_or_naming_a_release_twice_is_refused():
    """Checked when the profile is made, so a plugin's hook fails at registration."""
    with pytest.raises(ValueError, match="oldest first"):
        type("Backwards", (_Dated,), {"versions": (MID, OLD)})(name="backwards")
    with pytest.raises(ValueError, match="release is named twice"):
        type("Twice", (_Dated,), {"versions": (REL, REL)})(name="twice")


def test_a_stack_version_checks_its_fields():
    with pytest.raises(ValueError, match="since: expected a date YYYY-MM-DD"):
        StackVersion(since="2024-1-05", commit="a" * 8, change="x")
    with pytest.raises(ValueError, match="commit: expected a git commit"):
        StackVersion(since="2024-01-05", commit="main", change="x")
    with pytest.raises(ValueError, match="change: expected one line"):
        StackVersion(since="2024-01-05", commit="a" * 8, change="two\nlines")
    assert MID.at_least(OLD) and MID.at_least(MID) and not OLD.at_least(MID) and MID.short == "bbbbbbbb"
