"""The docs keep their promises: every hook documented with its exact
signature, every record field documented, the README's Quick start is two
commands that CI runs, and the README's Python example runs."""

from __future__ import annotations

import pathlib
import re

import attrs
import pytest

import shardmeter
from shardmeter.testing import HOOKS, hookspec_signatures

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")

RECORDS = [shardmeter.HardwareProfile, shardmeter.Interconnect, shardmeter.CostSource,
           shardmeter.ShardingStrategy, shardmeter.PipelineSchedule, shardmeter.SyncStrategy]


def quick_start_commands() -> list[str]:
    m = re.search(r"^## Quick start[ \t]*\n(.*?)(?=^## )", README, re.S | re.M)
    assert m, "README has no '## Quick start' section"
    fence = re.match(r"\s*```[^\n]*\n(.*?)\n```", m.group(1), re.S)
    assert fence, "the Quick start heading is not followed by a fenced block"
    return [ln.strip() for ln in fence.group(1).splitlines() if ln.strip()]


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_in_contributing_with_its_exact_signature(hook):
    signature = hookspec_signatures()[hook]
    assert signature in CONTRIBUTING, f"CONTRIBUTING.md lacks `{signature}`"


def test_hookspecs_are_the_four_contribution_hooks():
    assert set(hookspec_signatures()) == {
        "shardmeter_hardware_profiles", "shardmeter_interconnect_models", "shardmeter_sharding_strategies",
        "shardmeter_cost_sources"}


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hookspec_has_a_docstring_with_an_example(hook):
    import shardmeter.hookspecs as hs

    doc = getattr(hs, hook).__doc__ or ""
    assert ":returns:" in doc and "Example::" in doc and "@shardmeter.hookimpl" in doc


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_every_record_field_is_documented_in_contributing(record):
    assert f"### `{record.__name__}`" in CONTRIBUTING
    section = CONTRIBUTING.split(f"### `{record.__name__}`", 1)[1].split("\n### ", 1)[0]
    missing = [f.name for f in attrs.fields(record) if f"`{f.name}`" not in section]
    assert not missing, f"CONTRIBUTING.md, {record.__name__}: undocumented fields {missing}"


def test_contributing_states_the_unit_conventions():
    for phrase in ("decimal gigabytes", "one direction", "dense", "per step of a collective algorithm",
                   "per GPU", "per NIC", "per uplink", "SHARDMETER_STRICT_PLUGINS", "SHARDMETER_DISABLE_PLUGINS",
                   "shardmeter.testing", "fresh_registry", "make_estimator", "check_records"):
        assert phrase in CONTRIBUTING, phrase


def test_readme_quick_start_is_two_commands():
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    first, second = commands
    assert first.startswith("pip install ") and "shardmeter estimate examples/" in first
    example = re.search(r"shardmeter estimate (\S+)", first).group(1)
    assert (ROOT / example).is_file(), example
    assert '".[test]"' in second and "pytest" in second


def test_ci_runs_the_readme_test_command():
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert run.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in run
    lines = [ln.strip() for ln in run.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert quick_start_commands()[1] in lines


def test_readme_states_the_flop_formula():
    assert "model_flops_per_token = 3 * (L * (dense + 4 * s * q_dim) + 2 * h * V)" in README
    from shardmeter.model.formulas import model_flops_per_token

    assert "3 * (L * (dense + 4 s q_dim) + 2 h V)" in model_flops_per_token.__doc__


def test_readme_has_the_promised_sections():
    for heading in ("## Quick start", "## Accuracy", "## Exploring the space", "## Python API"):
        assert re.search(rf"^{re.escape(heading)}\s*$", README, re.M), heading
    assert "docs/exploring.md" in README


def test_readme_python_example_runs(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    code = re.search(r"```python\n(.*?)```", README.split("## Python API", 1)[1], re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["faster"].feasible and namespace["small"].feasible
    assert "s per step" in capsys.readouterr().out
