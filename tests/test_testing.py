"""shardmeter.testing: the helpers plugin authors use, tested on the example
plugin (imported from its source folder, not installed) and on faulty plugins."""

from __future__ import annotations

import importlib.util
import pathlib
import types

import pytest

import shardmeter
from shardmeter.testing import HOOKS, check_records, fresh_registry, hookspec_signatures, make_estimator

ACME_DIR = pathlib.Path(__file__).resolve().parents[1] / "examples" / "plugins" / "shardmeter-acme"


@pytest.fixture(scope="module")
def acme():
    spec = importlib.util.spec_from_file_location("shardmeter_acme_src", ACME_DIR / "shardmeter_acme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _plugin(name: str, **hooks) -> types.ModuleType:
    mod = types.ModuleType(name)
    for hook, fn in hooks.items():
        setattr(mod, hook, shardmeter.hookimpl(fn))
    return mod


def test_check_records_returns_the_example_plugins_records(acme):
    found = check_records(acme)
    assert [r.name for r in found["hardware"]] == ["acme-x1"]
    assert [r.name for r in found["interconnect"]] == ["acme-link"]
    assert [r.name for r in found["sharding"]] == ["acme-zero2"]
    assert found["sharding"][0].option_defaults() == {"acme_bucket_mb": 25.0}
    assert [r.name for r in found["cost"]] == ["acme-cloud"]


def test_fresh_registry_holds_bundled_and_plugin_parts(acme):
    reg = fresh_registry(acme)
    assert "acme-x1" in reg.names("hardware") and "a100-sxm-80gb" in reg.names("hardware")
    assert reg.provided("hardware", "acme-x1").distribution == "registered in code"
    assert fresh_registry(acme, bundled=False).names("hardware") == ["acme-x1"]


def test_make_estimator_estimates_a_scenario_using_the_plugin(acme):
    est = make_estimator(acme)
    report = est.estimate(ACME_DIR / "acme-scenario.toml")
    assert report.feasible, report.reasons
    assert report.islands[0]["gpu"] == "acme-x1"
    assert report.cost_usd is not None and report.cost_usd > 0


def test_fresh_registries_are_independent(acme):
    assert "acme-x1" not in fresh_registry().names("hardware")
    assert "acme-x1" in fresh_registry(acme).names("hardware")


def test_check_records_rejects_a_misspelt_hook():
    bad = _plugin("bad", shardmeter_hardware_profile=lambda: [])
    with pytest.raises(AssertionError, match="did you mean shardmeter_hardware_profiles"):
        check_records(bad)


def test_check_records_rejects_a_wrong_record_kind():
    bad = _plugin(
        "bad",
        shardmeter_hardware_profiles=lambda: [
            shardmeter.Interconnect(name="x", bandwidth_gb_s=1.0, latency_us=1.0)
        ],
    )
    with pytest.raises(AssertionError, match="yielded Interconnect, expected HardwareProfile"):
        check_records(bad)


def test_check_records_rejects_a_name_clash_with_a_bundled_part():
    bad = _plugin(
        "bad",
        shardmeter_interconnect_models=lambda: [
            shardmeter.Interconnect(name="nvlink4", bandwidth_gb_s=1.0, latency_us=1.0)
        ],
    )
    with pytest.raises(AssertionError, match="duplicate interconnect name 'nvlink4'"):
        check_records(bad)
    assert check_records(bad, bundled=False)["interconnect"][0].name == "nvlink4"


def test_check_records_rejects_an_option_that_shadows_a_scenario_key():
    bad = _plugin(
        "bad",
        shardmeter_sharding_strategies=lambda: [shardmeter.ShardingStrategy(name="mine", options={"tp": 2})],
    )
    with pytest.raises(AssertionError, match="shadows"):
        check_records(bad)


def test_check_records_rejects_a_plugin_without_hooks():
    with pytest.raises(AssertionError, match="implements no ShardMeter hook"):
        check_records(types.ModuleType("empty"))


def test_a_misspelt_hook_registered_in_code_is_a_plugin_error():
    bad = _plugin("bad", shardmeter_cost_source=lambda: [])
    with pytest.raises(shardmeter.PluginError, match="shardmeter_cost_source"):
        fresh_registry(bad)


def test_hookspec_signatures_name_every_hook():
    sigs = hookspec_signatures()
    assert tuple(sorted(sigs)) == HOOKS
    assert (
        sigs["shardmeter_hardware_profiles"]
        == "def shardmeter_hardware_profiles() -> Iterable[HardwareProfile]"
    )
