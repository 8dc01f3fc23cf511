"""Variants of a loaded scenario (``shardmeter.load.variants``): the one place above the loader
that turns a ``Scenario`` back into tables. The explore room makes its variants there or on the
records, never by loading tables itself."""

from __future__ import annotations

import ast
import pathlib

import pytest

from shardmeter.errors import ScenarioError
from shardmeter.load.scenario import load_scenario
from shardmeter.load.variants import variant_tables, with_overrides

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPT3 = ROOT / "examples" / "gpt3-175b-a100.toml"
THREE = ROOT / "examples" / "multi-island" / "three-islands.toml"


def test_an_override_applies_as_on_the_file():
    sc = load_scenario(GPT3)
    got = with_overrides(sc, [("parallelism.pp", 4), "island[0].nodes=64"])
    assert got == load_scenario(GPT3, overrides=[("parallelism.pp", 4), "island[0].nodes=64"])
    assert (got.parallelism.pp, got.islands[0].nodes) == (4, 64)
    assert got.file == sc.file


def test_a_preset_override_takes_the_new_presets_keys_as_written_and_not_when_pinned():
    sc = load_scenario(GPT3)
    written = with_overrides(sc, [("model.preset", "gpt3-13b")])
    assert written.model == load_scenario(GPT3, overrides=[("model.preset", "gpt3-13b")]).model
    assert written.model.layers != sc.model.layers
    pinned = with_overrides(sc, [("model.preset", "gpt3-13b")], as_written=False)
    assert pinned.model.layers == sc.model.layers  # every loaded value pinned, only the name changes


def test_a_none_value_removes_its_key_and_a_later_key_starts_a_new_table():
    sc = load_scenario(THREE)
    data = variant_tables(sc, [("network", None), ("sync", None), ("sync.convergence", "diloco-fits")])
    assert "network" not in data
    assert data["sync"] == {"convergence": "diloco-fits"}
    assert list(data)[-1] == "sync"  # as a key added after the others


def test_a_bad_override_is_one_line_naming_the_key_and_the_file():
    sc = load_scenario(GPT3)
    with pytest.raises(ScenarioError) as err:
        with_overrides(sc, [("parallelism.tp", "two")])
    assert "parallelism.tp" in str(err.value) and "gpt3-175b-a100.toml" in str(err.value)
    assert "\n" not in str(err.value)


def test_no_explore_module_loads_tables_itself():
    """Every variant the planner, the sweep or the sensitivity makes goes through
    ``with_overrides`` or ``attrs.evolve`` on the records."""
    banned = {"load_scenario", "apply_override", "scenario_tables"}
    found = []
    for path in sorted((ROOT / "shardmeter" / "explore").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shardmeter.load"):
                found += [f"{path.name}: {a.name}" for a in node.names if a.name in banned]
    assert found == []
