"""A written key keeps its documented meaning whatever the profile (SCENARIO.md, "Software
stacks"): a profile fills only keys the scenario leaves unset, and never a key whose absence is
part of what a written key means (``recompute = "full"`` written means every layer, so no
profile then supplies ``recompute_layers``).

The property runs every bundled profile against every key it can set (found by asking each
profile on scenarios that vary what profiles read: the GPU generation, fp8, pipelines), each
written with each of its values: the written key and every key that qualifies it must resolve
exactly as they do without the profile."""

from __future__ import annotations

import attrs
import pytest

from shardmeter.load.scenario import load_scenario
from shardmeter.load.specs import QUALIFIES, ParallelismSpec, TrainingSpec
from shardmeter.registry.manager import get_registry

REG = get_registry()
PROFILES = REG.names("framework")
GPUS = ("h100-sxm", "b200", "v100-sxm2-32gb", "a100-sxm-80gb")
MODEL = {"layers": 8, "hidden": 1024, "heads": 8, "vocab": 32000, "seq_len": 2048}

#: Every value a test writes for each key a profile can set (a key no entry covers fails
#: :func:`test_every_key_a_profile_sets_is_covered`).
VALUES: dict[str, tuple] = {
    "training.attention": ("flash", "flash2", "materialized"),
    "training.compile": (True, False),
    "training.fp8_recipe": ("tensorwise", "rowwise", "delayed", "blockwise", "mxfp8"),
    "training.recompute": ("none", "selective", "op", "full"),
    "training.recompute_layers": (1, 2, 4),
    "parallelism.dp_comm_overlap": (True, False),
    "parallelism.schedule": ("1f1b", "gpipe", "interleaved"),
    "parallelism.sequence_parallel": (True, False),
    "parallelism.sharding": ("none", "zero1", "zero2", "zero3", "fsdp"),
    "parallelism.tp_comm_overlap": (True, False),
}

#: What a written value needs beside it to be valid (recompute_layers only with full recompute).
NEEDS = {
    "training.recompute_layers": {"training.recompute": "full"},
    "training.fp8_recipe": {"training.precision": "fp8"},
    "parallelism.schedule": {"parallelism.pp": 2},
}


def _tables(framework: str | None, gpu: str, written: dict[str, object]) -> dict:
    tables: dict = {
        "model": dict(MODEL),
        "training": {"global_batch": 16},
        "parallelism": {},
        "island": [{"gpu": gpu, "nodes": 1, "gpus_per_node": 4}],
    }
    if framework is not None:
        tables["training"]["framework"] = framework
    for key, value in written.items():
        table, _, field = key.partition(".")
        tables[table][field] = value
    if tables["parallelism"].get("schedule") == "interleaved":
        tables["parallelism"]["virtual_stages"] = 2
    if tables["training"].get("precision") == "fp8" and gpu == "v100-sxm2-32gb":
        tables["training"]["precision"] = "fp16"
        tables["training"].pop("fp8_recipe", None)
    return tables


def _profile_keys() -> dict[str, set[str]]:
    """The keys each profile sets, over the GPU generations, fp8, recompute and pipelines."""
    out: dict[str, set[str]] = {}
    for name in PROFILES:
        part = REG.get("framework", name)
        keys: set[str] = set()
        for gpu in GPUS:
            for tr in ({}, {"precision": "fp8"}, {"recompute": "full"}):
                for par in ({}, {"pp": 2}, {"pp": 2, "virtual_stages": 2, "schedule": "interleaved"}):
                    tables = {"model": dict(MODEL), "training": dict(tr), "parallelism": dict(par)}
                    keys |= set(part.defaults(tables, [REG.get("hardware", gpu)]))
        out[name] = keys
    return out


KEYS = _profile_keys()


def _qualifiers(key: str) -> list[str]:
    """The keys whose absence qualifies ``key`` (their ``QUALIFIES`` metadata names it)."""
    table, _, field = key.partition(".")
    spec = {"training": TrainingSpec, "parallelism": ParallelismSpec}[table]
    return [f"{table}.{a.name}" for a in attrs.fields(spec) if a.metadata.get(QUALIFIES) == field]


def _resolved(tables: dict, key: str):
    sc = load_scenario(tables, registry=REG)
    table, _, field = key.partition(".")
    return getattr(getattr(sc, table), field)


def test_every_key_a_profile_sets_is_covered():
    assert set().union(*KEYS.values()) <= set(VALUES)


def test_recompute_layers_qualifies_recompute():
    """The one key of the contract whose absence is part of a written key's meaning."""
    assert _qualifiers("training.recompute") == ["training.recompute_layers"]


CASES = [
    pytest.param(name, key, value, gpu, id=f"{name}-{key}={value}-{gpu}")
    for name in PROFILES
    for key in sorted(KEYS[name])
    for value in VALUES[key]
    for gpu in ("h100-sxm", "b200")
]


@pytest.mark.parametrize(("framework", "key", "value", "gpu"), CASES)
def test_a_written_key_resolves_as_it_does_without_the_profile(framework, key, value, gpu):
    written = {**NEEDS.get(key, {}), key: value}
    for k in (key, *_qualifiers(key)):
        with_profile = _resolved(_tables(framework, gpu, written), k)
        without = _resolved(_tables(None, gpu, written), k)
        assert with_profile == without, f"{framework}: {key} = {value!r} written, {k} resolves differently"


def test_torchtitan_full_recompute_written_means_every_layer():
    """The case the rule was made for: torchtitan's default (selective option "2", every
    second block) is ``recompute = "full"`` with half the layers, and applies only when the
    scenario writes no ``recompute``; ``mode = "full"`` written wraps every block."""
    unwritten = load_scenario(_tables("torchtitan", "h100-sxm", {}), registry=REG)
    assert (unwritten.training.recompute, unwritten.training.recompute_layers) == ("full", 4)
    written = load_scenario(_tables("torchtitan", "h100-sxm", {"training.recompute": "full"}), registry=REG)
    assert (written.training.recompute, written.training.recompute_layers) == ("full", None)
    assert any(
        "left training.recompute_layers unset: training.recompute is written" in n for n in written.notes
    )
