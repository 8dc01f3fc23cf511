"""Faulty plugins: each fault is named (plugin and distribution) in one warning line
and does not take the other plugins down -- unless ``SHARDMETER_STRICT_PLUGINS=1``
makes it fatal (a :class:`shardmeter.PluginError` naming it; exit 2 from the CLI).

Plugins are injected in-process: fake entry points next to the real ones
(``shardmeter.registry.manager._entry_points`` monkeypatched) or plugin objects given
to ``make_plugin_manager(plugins=[...])``. Faults covered: failing imports (any
exception, ``SystemExit``), entry points naming no plugin, misspelt hooks, wrong
hook signatures, hooks that raise, call ``sys.exit()``, return the wrong type or
yield wrong or invalid records, plugins that print to stdout, and slow imports
(ShardMeter imposes no import timeout: a slow plugin loads and is named).
"""

from __future__ import annotations

import json
import sys
import time
import types

import pytest

import shardmeter
from shardmeter.cli.app import main
from shardmeter.estimator import Estimator
from shardmeter.records import HardwareProfile, Interconnect
from shardmeter.registry import manager as plugins_core

REAL_ENTRY_POINTS = plugins_core._entry_points


class FakeDist:
    def __init__(self, name: str, version: str):
        self.name, self.version = name, version


class FakeEntryPoint:
    """Stands in for an ``importlib.metadata.EntryPoint`` of the ``shardmeter`` group."""

    def __init__(self, name: str, load, dist=("shardmeter-broken", "6.6.6")):
        self.name = name
        self._load = load
        self.dist = FakeDist(*dist)
        self.group = "shardmeter"

    def load(self):
        return self._load()


def plugin(name: str, **hooks) -> types.ModuleType:
    """A plugin module with the given hook implementations."""
    mod = types.ModuleType(name)
    for hook, fn in hooks.items():
        setattr(mod, hook, shardmeter.hookimpl(fn))
    return mod


def _gpu(name: str, **kw) -> HardwareProfile:
    return HardwareProfile(
        name=name,
        memory_gb=kw.pop("memory_gb", 96.0),
        memory_bandwidth_gb_s=3000.0,
        peak_tflops={"bf16": 500.0},
        **kw,
    )


def good_plugin() -> types.ModuleType:
    def hardware():
        yield _gpu("acme-good-x1")

    def links():
        yield Interconnect(name="acme-good-link", bandwidth_gb_s=100.0, latency_us=2.0)

    return plugin("acme_good", shardmeter_hardware_profiles=hardware, shardmeter_interconnect_models=links)


GOOD = FakeEntryPoint("acme-good", good_plugin, dist=("shardmeter-acme-good", "1.0"))


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("SHARDMETER_STRICT_PLUGINS", "SHARDMETER_DISABLE_PLUGINS", "SHARDMETER_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(plugins_core, "_DEFAULT", None)  # the CLI builds a fresh registry
    yield
    plugins_core._DEFAULT = None


def install(monkeypatch, *eps):
    """Make ``eps`` visible as installed entry points, after the real ones."""
    monkeypatch.setattr(plugins_core, "_entry_points", lambda: REAL_ENTRY_POINTS() + list(eps))


def registry():
    return shardmeter.Registry.from_plugin_manager(shardmeter.make_plugin_manager())


def warnings_of(err: str) -> list[str]:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    for ln in lines:
        assert ln.startswith("shardmeter: warning: "), ln
    return lines


def assert_others_survive(reg) -> None:
    assert "acme-good-x1" in reg.names("hardware")
    assert "acme-good-link" in reg.names("interconnect")
    assert "h100-sxm" in reg.names("hardware") and "zero3" in reg.names("sharding")
    assert reg.provided("hardware", "acme-good-x1").distribution == "shardmeter-acme-good 1.0"


# ---------------------------------------------------------------------------------------------
# faults while importing a plugin


def _raise(exc):
    def load():
        raise exc

    return load


IMPORT_FAULTS = {
    "ImportError": _raise(ImportError("No module named 'acme_cuda_bindings'")),
    "ModuleNotFoundError": _raise(ModuleNotFoundError("No module named 'shardmeter_broken'")),
    "RuntimeError": _raise(RuntimeError("licence server unreachable\nsecond line of detail")),
    "SyntaxError": _raise(SyntaxError("invalid syntax (shardmeter_broken.py, line 3)")),
    "AttributeError": _raise(AttributeError("module 'shardmeter_broken' has no attribute 'plugin'")),
    "SystemExit": _raise(SystemExit(1)),
    "no-hooks-module": lambda: types.ModuleType("shardmeter_broken"),
    "names-None": lambda: None,
    "names-an-int": lambda: 42,
    "names-a-string": lambda: "shardmeter_broken:plugin",
    "misspelt-hook": lambda: plugin("shardmeter_broken", shardmeter_hardware_profile=lambda: []),
    "wrong-signature": lambda: plugin("shardmeter_broken", shardmeter_hardware_profiles=lambda gpus: []),
}


@pytest.mark.parametrize("fault", sorted(IMPORT_FAULTS))
def test_a_plugin_that_fails_to_load_is_named_and_skipped(fault, monkeypatch, capsys):
    install(monkeypatch, FakeEntryPoint("broken", IMPORT_FAULTS[fault]), GOOD)
    reg = registry()
    err = capsys.readouterr().err
    lines = warnings_of(err)
    assert len(lines) == 1, err
    assert "'broken'" in lines[0] and "shardmeter-broken 6.6.6" in lines[0], lines[0]
    assert_others_survive(reg)


@pytest.mark.parametrize("fault", sorted(IMPORT_FAULTS))
def test_strict_mode_makes_a_load_failure_fatal(fault, monkeypatch):
    install(monkeypatch, FakeEntryPoint("broken", IMPORT_FAULTS[fault]), GOOD)
    monkeypatch.setenv("SHARDMETER_STRICT_PLUGINS", "1")
    with pytest.raises(shardmeter.PluginError) as info:
        registry()
    assert "'broken'" in str(info.value) and "shardmeter-broken 6.6.6" in str(info.value)


def test_keyboard_interrupt_while_importing_is_not_swallowed(monkeypatch):
    install(monkeypatch, FakeEntryPoint("broken", _raise(KeyboardInterrupt())))
    with pytest.raises(KeyboardInterrupt):
        shardmeter.make_plugin_manager()


def test_a_slow_plugin_still_loads_and_is_named(monkeypatch, capsys):
    """ShardMeter imposes no import timeout (a plugin is code the user installed);
    an import slower than ``plugins_core.SLOW_IMPORT_S`` is named in a warning."""
    monkeypatch.setattr(plugins_core, "SLOW_IMPORT_S", 0.1)

    def slow():
        time.sleep(0.2)
        return good_plugin()

    install(monkeypatch, FakeEntryPoint("slowpoke", slow, dist=("shardmeter-acme-good", "1.0")))
    reg = registry()
    lines = warnings_of(capsys.readouterr().err)
    assert len(lines) == 1 and "'slowpoke'" in lines[0] and "shardmeter-acme-good 1.0" in lines[0]
    assert "s to import" in lines[0]
    assert "acme-good-x1" in reg.names("hardware")


def test_the_bundled_parts_are_not_named_slow_on_a_loaded_machine(monkeypatch, capsys):
    """The warning names a plugin to disable; the shardmeter distribution's own entry point is
    the package's import, slow only when the machine is (a full test run on 2 busy cores took
    2.4 s and broke every one-line-error test)."""
    monkeypatch.setattr(plugins_core, "SLOW_IMPORT_S", 0.1)

    def slow():
        time.sleep(0.2)
        return good_plugin()

    ep = FakeEntryPoint("bundled-extra", slow, dist=("shardmeter", "0.1.0"))
    ep.value = "shardmeter.plugins.builtin"
    install(monkeypatch, ep)
    registry()
    assert "to import" not in capsys.readouterr().err


def test_a_plugin_under_the_slow_threshold_is_silent(monkeypatch, capsys):
    install(monkeypatch, GOOD)
    registry()
    assert capsys.readouterr().err == ""


def test_a_plugin_printing_at_import_does_not_corrupt_json(monkeypatch, capsys, tmp_path):
    def chatty():
        print("Welcome to ACME! Licensed to: nobody")
        return good_plugin()

    install(monkeypatch, FakeEntryPoint("chatty", chatty, dist=("shardmeter-acme-good", "1.0")))
    code = main(["plugins", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    doc = json.loads(out)  # stdout holds exactly one JSON document
    assert any(p["name"] == "acme-good-x1" for p in doc["parts"])
    assert "Welcome to ACME" in err


# ---------------------------------------------------------------------------------------------
# faults while calling a plugin's hooks


def _gen_then_fail():
    yield _gpu("acme-partial")
    raise RuntimeError("device table corrupt")


def _corrupted():
    gpu = _gpu("acme-corrupt")
    object.__setattr__(gpu, "memory_gb", float("nan"))  # bypasses the validators
    yield gpu


class _SubProfile(HardwareProfile):
    pass


HOOK_FAULTS = {
    "raises": lambda: (_ for _ in ()).throw(RuntimeError("vendor SDK missing")),
    "raises-multiline": lambda: (_ for _ in ()).throw(ValueError("first\nsecond\nthird")),
    "fails-midway": _gen_then_fail,
    "sys-exit": lambda: sys.exit(7),
    "invalid-record": lambda: [_gpu("acme-bad", memory_gb=-1.0)],  # raises at construction
    "corrupted-record": _corrupted,
    "returns-a-string": lambda: "acme-x1",
    "returns-a-dict": lambda: {"name": "acme-x1", "memory_gb": 96.0},
    "returns-an-int": lambda: 3,
    "yields-a-dict": lambda: [{"name": "acme-x1"}],
    "yields-None": lambda: [None],
    "yields-a-link": lambda: [Interconnect(name="acme-l", bandwidth_gb_s=1.0, latency_us=1.0)],
    "yields-a-subclass": lambda: [
        _SubProfile(name="acme-sub", memory_gb=1.0, memory_bandwidth_gb_s=1.0, peak_tflops={"bf16": 1.0})
    ],
}


@pytest.mark.parametrize("fault", sorted(HOOK_FAULTS))
def test_a_faulty_hook_is_named_and_the_rest_survives(fault, monkeypatch, capsys):
    bad = plugin(
        "shardmeter_broken",
        shardmeter_hardware_profiles=HOOK_FAULTS[fault],
        shardmeter_cost_sources=lambda: [shardmeter.CostSource(name="acme-cheap", usd_per_gpu_hour=0.5)],
    )
    install(monkeypatch, FakeEntryPoint("broken", lambda: bad), GOOD)
    reg = registry()
    lines = warnings_of(capsys.readouterr().err)
    assert len(lines) >= 1, fault
    for ln in lines:
        assert (
            "'broken'" in ln and "shardmeter-broken 6.6.6" in ln and "shardmeter_hardware_profiles" in ln
        ), ln
    assert_others_survive(reg)
    # the same plugin's other hook still counts: faults are isolated per hook
    assert reg.provided("cost", "acme-cheap").plugin == "broken"
    for name in ("acme-bad", "acme-corrupt", "acme-x1", "acme-sub"):
        assert name not in reg.names("hardware")


@pytest.mark.parametrize("fault", sorted(HOOK_FAULTS))
def test_strict_mode_makes_a_faulty_hook_fatal(fault, monkeypatch):
    bad = plugin("shardmeter_broken", shardmeter_hardware_profiles=HOOK_FAULTS[fault])
    install(monkeypatch, FakeEntryPoint("broken", lambda: bad), GOOD)
    monkeypatch.setenv("SHARDMETER_STRICT_PLUGINS", "true")
    with pytest.raises(shardmeter.PluginError) as info:
        registry()
    assert "'broken'" in str(info.value) and "shardmeter-broken 6.6.6" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_hook_returning_none_contributes_nothing_silently(monkeypatch, capsys):
    install(
        monkeypatch, FakeEntryPoint("quiet", lambda: plugin("q", shardmeter_hardware_profiles=lambda: None))
    )
    reg = registry()
    assert capsys.readouterr().err == ""
    assert "h100-sxm" in reg.names("hardware")


def test_a_hook_printing_to_stdout_goes_to_stderr(monkeypatch, capsys):
    def hardware():
        print("debug: yielding profiles")
        yield _gpu("acme-loud")

    install(
        monkeypatch, FakeEntryPoint("loud", lambda: plugin("loud", shardmeter_hardware_profiles=hardware))
    )
    reg = registry()
    out, err = capsys.readouterr()
    assert out == "" and "debug: yielding profiles" in err
    assert "acme-loud" in reg.names("hardware")


@pytest.mark.parametrize(
    "value,strict",
    [("1", True), ("true", True), ("yes", True), ("0", False), ("false", False), ("no", False), ("", False)],
)
def test_strict_switch_values(value, strict, monkeypatch, capsys):
    install(monkeypatch, FakeEntryPoint("broken", IMPORT_FAULTS["ImportError"]))
    monkeypatch.setenv("SHARDMETER_STRICT_PLUGINS", value)
    if strict:
        with pytest.raises(shardmeter.PluginError):
            registry()
    else:
        registry()
        assert "'broken'" in capsys.readouterr().err


@pytest.mark.parametrize("disable", ["broken", "shardmeter-broken", "shardmeter_broken", " broken , other "])
def test_a_disabled_plugin_is_not_imported_at_all(disable, monkeypatch, capsys):
    imported = []

    def load():
        imported.append(True)
        raise ImportError("should never be imported")

    install(monkeypatch, FakeEntryPoint("broken", load), GOOD)
    monkeypatch.setenv("SHARDMETER_DISABLE_PLUGINS", disable)
    monkeypatch.setenv("SHARDMETER_STRICT_PLUGINS", "1")  # even strict: a disabled plugin is no fault
    reg = registry()
    assert not imported and capsys.readouterr().err == ""
    assert_others_survive(reg)


def test_faults_of_plugins_registered_in_code(capsys):
    bad = plugin("inline_bad", shardmeter_hardware_profiles=lambda: [{"not": "a record"}])
    pm = shardmeter.make_plugin_manager(plugins=[good_plugin(), bad])
    reg = shardmeter.Registry.from_plugin_manager(pm)
    lines = warnings_of(capsys.readouterr().err)
    assert len(lines) == 1 and "'inline_bad'" in lines[0] and "registered in code" in lines[0]
    assert "acme-good-x1" in reg.names("hardware")


def test_a_duplicate_part_name_names_both_providers(monkeypatch):
    twin = FakeEntryPoint("twin", good_plugin, dist=("shardmeter-acme-twin", "2.0"))
    install(monkeypatch, GOOD, twin)
    with pytest.raises(shardmeter.PluginError) as info:
        registry()
    msg = str(info.value)
    assert "acme-good-x1" in msg and "shardmeter-acme-good 1.0" in msg and "shardmeter-acme-twin 2.0" in msg


def test_a_corrupted_part_never_reaches_a_report(monkeypatch, capsys):
    install(
        monkeypatch, FakeEntryPoint("broken", lambda: plugin("b", shardmeter_hardware_profiles=_corrupted))
    )
    est = Estimator(registry())
    capsys.readouterr()
    scenario = {
        "model": {"preset": "gpt3-13b", "layers": 4},
        "training": {"global_batch": 8},
        "island": [{"gpu": "acme-corrupt", "nodes": 1}],
    }
    with pytest.raises(
        shardmeter.ScenarioError, match=r"\$\.island\[0\]\.gpu: unknown hardware 'acme-corrupt'"
    ):
        est.estimate(scenario)


# ---------------------------------------------------------------------------------------------
# the command line


SCENARIO = """
[model]
preset = "gpt3-13b"
layers = 4
[training]
global_batch = 16
[[island]]
gpu = "acme-good-x1"
nodes = 1
intra_node = "nvlink4"
"""


def test_cli_estimate_warns_about_the_broken_plugin_and_uses_the_good_one(monkeypatch, capsys, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    bad = plugin("b", shardmeter_hardware_profiles=HOOK_FAULTS["raises"])
    install(
        monkeypatch,
        FakeEntryPoint("broken", IMPORT_FAULTS["ImportError"]),
        FakeEntryPoint("broken2", lambda: bad, dist=("shardmeter-broken2", "0.1")),
        GOOD,
    )
    code = main(["estimate", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert report["islands"][0]["gpu"] == "acme-good-x1"
    lines = warnings_of(err)
    assert len(lines) == 2
    assert "'broken'" in lines[0] + lines[1] and "shardmeter-broken2 0.1" in lines[0] + lines[1]


def test_cli_in_strict_mode_exits_2_naming_the_plugin(monkeypatch, capsys, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    install(monkeypatch, FakeEntryPoint("broken", IMPORT_FAULTS["RuntimeError"]), GOOD)
    monkeypatch.setenv("SHARDMETER_STRICT_PLUGINS", "1")
    for argv in (["estimate", str(path), "--json"], ["plugins"], ["validate", str(path)]):
        plugins_core._DEFAULT = None
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 2 and out == "", argv
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("shardmeter: error: ")
        assert "'broken'" in lines[0] and "shardmeter-broken 6.6.6" in lines[0]


def test_cli_plugins_lists_survivors_with_their_distribution(monkeypatch, capsys):
    install(monkeypatch, FakeEntryPoint("broken", IMPORT_FAULTS["SystemExit"]), GOOD)
    code = main(["plugins", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    parts = {(p["kind"], p["name"]): p for p in json.loads(out)["parts"]}
    assert parts[("hardware", "acme-good-x1")]["distribution"] == "shardmeter-acme-good 1.0"
    assert parts[("hardware", "acme-good-x1")]["plugin"] == "acme-good"
    assert "'broken'" in err
