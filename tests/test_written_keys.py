"""A written key keeps its documented meaning whatever the profile (SCENARIO.md, "Software
stacks"): a profile fills only keys the scenario leaves unset, and never a key whose absence is
part of what a written key means (``recompute = "full"`` written means every layer, so no
profile then supplies ``recompute_layers``).

The property runs every bundled profile, at each of its dated states (``framework_version``),
against every key it can set (found by asking each profile at each state on scenarios that vary
what profiles read: the GPU generation, fp8, pipelines, interleaving), each written with each of
its values: the written key and every key that qualifies it must resolve exactly as they do
without the profile."""

from __future__ import annotations

import attrs
import pytest

from shardmeter.load.scenario import load_scenario
from shardmeter.load.specs import QUALIFIES, ParallelismSpec, TrainingSpec
from shardmeter.parts import call_framework
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
    "training.micro_batch": (1, 2, 4),
    "parallelism.dp_comm_overlap": (True, False),
    "parallelism.schedule": ("1f1b", "gpipe", "interleaved"),
    "parallelism.sequence_parallel": (True, False),
    "parallelism.sharding": ("none", "zero1", "zero2", "zero3", "fsdp"),
    "parallelism.tp_comm_overlap": (True, False),
    "parallelism.virtual_stages": (1, 2, 4),
    "parallelism.grad_partitioned": (True, False),
    "parallelism.microbatch_rule": ("megatron", "pytorch"),
}

#: What a written value needs beside it to be valid (recompute_layers only with full recompute).
NEEDS = {
    "training.recompute_layers": {"training.recompute": "full"},
    "training.fp8_recipe": {"training.precision": "fp8"},
    "parallelism.schedule": {"parallelism.pp": 2},
    "parallelism.virtual_stages": {"parallelism.pp": 2, "parallelism.schedule": "interleaved"},
    "training.micro_batch": {"parallelism.pp": 2},
    "parallelism.grad_partitioned": {"parallelism.pp": 2},
    "parallelism.microbatch_rule": {"parallelism.pp": 2, "parallelism.schedule": "interleaved"},
}

#: Each profile's states: every dated one (None for a profile without a table, its one state).
STATES = {
    name: [s.release or s.since for s in REG.get("framework", name).versions] or [None] for name in PROFILES
}


def _tables(framework: str | None, gpu: str, written: dict[str, object], version: str | None = None) -> dict:
    tables: dict = {
        "model": dict(MODEL),
        "training": {"global_batch": 16},
        "parallelism": {},
        "island": [{"gpu": gpu, "nodes": 1, "gpus_per_node": 4}],
    }
    if framework is not None:
        tables["training"]["framework"] = framework
        if version is not None:
            tables["training"]["framework_version"] = version
    for key, value in written.items():
        table, _, field = key.partition(".")
        tables[table][field] = value
    if tables["parallelism"].get("schedule") == "interleaved":
        tables["parallelism"].setdefault("virtual_stages", 2)
    if tables["training"].get("precision") == "fp8" and gpu == "v100-sxm2-32gb":
        tables["training"]["precision"] = "fp16"
        tables["training"].pop("fp8_recipe", None)
    return tables


_PROBE_PARALLELISM = (
    {},
    {"pp": 2},
    {"pp": 2, "tp": 2},
    {"pp": 2, "schedule": "interleaved"},
    {"pp": 2, "virtual_stages": 2, "schedule": "interleaved"},
)


def _profile_keys() -> dict[str, set[str]]:
    """The keys each profile sets, at each of its states, over the GPU generations, fp8,
    recompute, pipelines and interleaving."""
    out: dict[str, set[str]] = {}
    for name in PROFILES:
        part = REG.get("framework", name)
        keys: set[str] = set()
        for state in part.versions or (None,):
            for gpu in GPUS:
                for tr in ({}, {"precision": "fp8"}, {"recompute": "full"}):
                    for par in _PROBE_PARALLELISM:
                        tables = _tables(None, gpu, {})
                        tables["training"].update(tr)
                        tables["parallelism"].update(par)
                        gpus = [REG.get("hardware", gpu)]
                        keys |= set(call_framework(part, "defaults", tables, gpus, version=state))
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
    rec = getattr(sc, table)
    return getattr(rec, field) if hasattr(rec, field) else rec.options.get(field)  # a strategy's option


def test_every_key_a_profile_sets_is_covered():
    assert set().union(*KEYS.values()) <= set(VALUES)


def test_recompute_layers_qualifies_recompute():
    """The keys whose absence is part of a written key's meaning: recompute_layers (the
    contract's: a written "full" recomputes every layer) and recompute_modules (a written
    "selective" recomputes the attention core only), and LoRA's rank and targets qualify peft."""
    assert _qualifiers("training.recompute") == ["training.recompute_layers", "training.recompute_modules"]
    assert _qualifiers("training.peft") == ["training.lora_rank", "training.lora_targets"]


CASES = [
    pytest.param(name, state, key, gpu, id=f"{name}@{state}-{key}-{gpu}")
    for name in PROFILES
    for state in STATES[name]
    for key in sorted(KEYS[name])
    for gpu in ("h100-sxm", "b200")
]


@pytest.mark.parametrize(("framework", "state", "key", "gpu"), CASES)
def test_a_written_key_resolves_as_it_does_without_the_profile(framework, state, key, gpu):
    for value in VALUES[key]:
        written = {**NEEDS.get(key, {}), key: value}
        for k in (key, *_qualifiers(key)):
            with_profile = _resolved(_tables(framework, gpu, written, state), k)
            without = _resolved(_tables(None, gpu, written), k)
            assert with_profile == without, (
                f"{framework}@{state}: {key} = {value!r} written, {k} resolves differently"
            )


def test_every_state_of_every_profile_is_run():
    """The cases above cover each profile at each of its states (a release by its name)."""
    assert STATES["torchtitan"][:2] == ["2024-05-21", "2024-10-10"] and "v0.1.0" in STATES["torchtitan"]
    assert all(len(STATES[name]) >= 1 and STATES[name] != [None] for name in PROFILES)
    assert {c.values[:2] for c in CASES} == {(n, s) for n in PROFILES for s in STATES[n]}


def test_torchtitan_full_recompute_written_means_every_layer():
    """The case the rule was made for: torchtitan's default (selective option "2", every
    second block) is ``recompute = "full"`` with half the layers, and applies only when the
    scenario writes no ``recompute``; ``mode = "full"`` written wraps every block."""
    old = "2025-08-30"  # accc7027; per-op SAC became the default in 114151ad (2026-03-23)
    unwritten = load_scenario(_tables("torchtitan", "h100-sxm", {}, old), registry=REG)
    assert (unwritten.training.recompute, unwritten.training.recompute_layers) == ("full", 4)
    full = {"training.recompute": "full"}
    written = load_scenario(_tables("torchtitan", "h100-sxm", full, old), registry=REG)
    assert (written.training.recompute, written.training.recompute_layers) == ("full", None)
    assert any(
        "left training.recompute_layers unset: training.recompute is written" in n for n in written.notes
    )
    newest = load_scenario(_tables("torchtitan", "h100-sxm", {}), registry=REG)
    assert (newest.training.recompute, newest.training.recompute_layers) == ("op", None)
