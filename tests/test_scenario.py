"""Scenario loading (SCENARIO.md, "Scenario"): presets, ``--set`` overrides with
dotted paths, inline part tables, strategy options, and one-line errors that
name the file and the key path with close matches."""

from __future__ import annotations

import pathlib

import pytest

import shardmeter
from shardmeter.load.scenario import apply_override, load_scenario, model_presets, parse_override
from shardmeter.testing import fresh_registry

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpt3-175b-a100.toml"


@pytest.fixture(scope="module")
def reg():
    return fresh_registry()


@pytest.fixture(scope="module")
def est(reg):
    return shardmeter.Estimator(reg)


def _base(**over):
    d = {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 64, "recompute": "full"},
        "island": [{"gpu": "h100-sxm", "nodes": 2}],
        "parallelism": {"sharding": "zero1"},
    }
    d.update(over)
    return d


def _two_islands():
    return _base(
        island=[{"name": "a", "gpu": "h100-sxm", "nodes": 2}, {"name": "b", "gpu": "h100-sxm", "nodes": 2}]
    )


# -- presets --------------------------------------------------------------------------------------

PRESETS = {  # name: (layers, hidden, parameters as published)
    "gpt3-175b": (96, 12288, 175e9),
    "megatron-1t": (128, 25600, 1008e9),
    "llama3-8b": (32, 4096, 8.03e9),
    "llama3-70b": (80, 8192, 70.6e9),
    "llama3-405b": (126, 16384, 405.9e9),
    "llama2-7b": (32, 4096, 6.74e9),
    "llama2-70b": (80, 8192, 68.98e9),
    "mpt-7b": (32, 4096, 6.7e9),
    "mpt-30b": (48, 7168, 29.96e9),
}


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_loads_with_its_shape_and_parameter_count(name, reg, est):
    layers, hidden, params = PRESETS[name]
    sc = load_scenario(_base(model={"preset": name}), registry=reg)
    assert (sc.model.layers, sc.model.hidden) == (layers, hidden)
    assert est.estimate(sc).params == pytest.approx(params, rel=0.01)


def test_every_bundled_preset_loads(reg):
    for name in model_presets():
        load_scenario(_base(model={"preset": name}), registry=reg)


def test_keys_override_the_preset(reg):
    sc = load_scenario(_base(model={"preset": "gpt3-175b", "seq_len": 4096, "layers": 48}), registry=reg)
    assert (sc.model.seq_len, sc.model.layers, sc.model.hidden) == (4096, 48, 12288)


def test_documented_defaults(reg):
    sc = load_scenario(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"global_batch": 8},
            "island": [{"gpu": "h100-sxm", "nodes": 1}],
        },
        registry=reg,
    )
    t, p = sc.training, sc.parallelism
    assert (t.micro_batch, t.precision, t.recompute) == (1, "bf16", "none")
    assert (p.tp, p.pp, p.cp, p.ep, p.dp, p.sharding, p.schedule, p.virtual_stages, p.sequence_parallel) == (
        1,
        1,
        1,
        1,
        None,
        "none",
        "1f1b",
        1,
        False,
    )
    assert sc.sync.strategy == "allreduce"
    assert sc.islands[0].gpus_per_node is None  # taken from the GPU profile (8)


def test_platform_defaults_come_from_the_gpu_profile(est):
    isl = est.resolve(est.load(_base())).islands[0]
    assert (isl.tiers[0].link.name, isl.tiers[-1].link.name, isl.nics_per_node, isl.gpus_per_node) == (
        "nvlink4",
        "ib-ndr",
        8,
        8,
    )
    assert isl.dp == 16  # dp fills the island


# -- --set overrides ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("parallelism.tp=2", "parallelism.tp", 2),
        ("training.tokens=1e12", "training.tokens", 1e12),
        ("parallelism.sequence_parallel=true", "parallelism.sequence_parallel", True),
        ('island[0].gpu="h100-sxm"', "island[0].gpu", "h100-sxm"),
        ("island[0].gpu=h100-sxm", "island[0].gpu", "h100-sxm"),  # a bare string
        (
            'island[0].gpu={ name = "h100-sxm", memory_gb = 96.0 }',
            "island[0].gpu",
            {"name": "h100-sxm", "memory_gb": 96.0},
        ),
    ],
)
def test_parse_override_reads_toml_values_or_bare_strings(text, key, value):
    assert parse_override(text) == (key, value)


def test_set_dotted_paths_with_list_indices(reg):
    sc = load_scenario(
        _two_islands(),
        registry=reg,
        overrides=[
            "island[1].nodes=4",
            "parallelism.tp=2",
            "island[0].gpu=a100-sxm-80gb",
            "sync.strategy=diloco",
            "sync.inner_steps=100",
            "network.link.bandwidth_gb_s=0.5",
            "training.micro_batch=2",
        ],
    )
    assert sc.islands[1].nodes == 4 and sc.islands[0].nodes == 2
    assert sc.parallelism.tp == 2
    assert sc.islands[0].gpu == "a100-sxm-80gb"
    assert sc.sync.strategy == "diloco" and sc.sync.options["inner_steps"] == 100
    assert sc.network.link == {"name": "internet", "bandwidth_gb_s": 0.5}
    assert sc.training.micro_batch == 2


def test_set_a_field_of_a_named_part_makes_an_inline_override(est):
    sc = est.load(_base(), overrides=["island[0].gpu.memory_gb=96.0"])
    assert sc.islands[0].gpu == {"name": "h100-sxm", "memory_gb": 96.0}
    gpu = est.resolve(sc).islands[0].gpu
    assert (gpu.name, gpu.memory_gb, gpu.peak_tflops["bf16"]) == (
        "h100-sxm",
        96.0,
        pytest.approx(989.4, abs=1),
    )


def test_network_link_override_prices_the_wan(est):
    slow = est.estimate(_two_islands(), overrides=["network.link.bandwidth_gb_s=0.05"])
    fast = est.estimate(_two_islands(), overrides=["network.link.bandwidth_gb_s=50.0"])
    assert (
        est.resolve(est.load(_two_islands(), ["network.link.bandwidth_gb_s=0.05"])).network.bandwidth_gb_s
        == 0.05
    )
    assert slow.feasible and fast.feasible
    assert slow.step_time_s > fast.step_time_s


def test_apply_override_does_not_touch_its_input():
    data = _base()
    out = apply_override(data, "island[0].nodes", 7)
    assert data["island"][0]["nodes"] == 2 and out["island"][0]["nodes"] == 7


def test_override_of_a_file(reg):
    sc = load_scenario(EXAMPLE, registry=reg, overrides=[("parallelism.pp", 4), "island[0].nodes=64"])
    assert (sc.parallelism.pp, sc.islands[0].nodes) == (4, 64)
    assert sc.file == str(EXAMPLE)


# -- inline part tables ---------------------------------------------------------------------------------


def test_inline_gpu_table_overrides_fields_of_a_named_profile(est):
    sc = _base(
        island=[{"gpu": {"name": "h100-sxm", "memory_gb": 96.0, "peak_tflops": {"bf16": 800.0}}, "nodes": 2}]
    )
    report = est.estimate(sc)
    assert report.memory_capacity_gb == 96.0
    gpu = est.resolve(est.load(sc)).islands[0].gpu
    assert gpu.peak_tflops == {"bf16": 800.0} and gpu.memory_bandwidth_gb_s == pytest.approx(3350.0)


def test_inline_link_table(est):
    sc = _two_islands()
    sc["network"] = {"link": {"name": "internet", "bandwidth_gb_s": 0.5, "latency_us": 80000}}
    link = est.resolve(est.load(sc)).network
    assert (link.name, link.bandwidth_gb_s, link.latency_us, link.kind) == ("internet", 0.5, 80000, "wan")


def test_inline_table_with_a_wrong_field_is_an_error(est):
    sc = _base(island=[{"gpu": {"name": "h100-sxm", "memory_gib": 96.0}, "nodes": 2}])
    with pytest.raises(
        shardmeter.ScenarioError, match=r"island\[0\]\.gpu\.memory_gib: unknown key.*memory_gb"
    ):
        est.estimate(sc)


# -- strategy options --------------------------------------------------------------------------------


def test_option_of_the_chosen_strategy_is_accepted(reg):
    sc = load_scenario(
        _two_islands(), registry=reg, overrides=["sync.strategy=diloco", "sync.inner_steps=50"]
    )
    assert sc.sync.options == {"inner_steps": 50}
    assert not sc.notes


def test_option_of_a_non_chosen_strategy_is_listed_in_notes(est):
    report = est.estimate(_two_islands(), overrides=["sync.inner_steps=50"])
    assert any("sync.inner_steps" in n and "diloco" in n and "allreduce" in n for n in report.notes), (
        report.notes
    )


def test_option_of_a_plugin_strategy(reg):
    import types

    plugin = types.ModuleType("bucket_plugin")
    plugin.shardmeter_sharding_strategies = shardmeter.hookimpl(
        lambda: [
            shardmeter.ShardingStrategy(name="bucketed", shard_optimizer=True, options={"bucket_mb": 25})
        ]
    )
    preg = fresh_registry(plugin)
    sc = load_scenario(_base(parallelism={"sharding": "bucketed", "bucket_mb": 40}), registry=preg)
    assert sc.parallelism.options == {"bucket_mb": 40} and not sc.notes
    sc = load_scenario(_base(parallelism={"sharding": "zero1", "bucket_mb": 40}), registry=preg)
    assert any("parallelism.bucket_mb" in n and "bucketed" in n for n in sc.notes)
    with pytest.raises(shardmeter.ScenarioError, match=r"parallelism\.bucket_mb: unknown key"):
        load_scenario(_base(parallelism={"sharding": "zero1", "bucket_mb": 40}), registry=reg)


# -- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "path", "message"),
    [
        (["parallelism.tpp=2"], "$.parallelism.tpp", "unknown key (did you mean 'tp'"),
        (["training.global_bach=8"], "$.training.global_bach", "did you mean 'global_batch'"),
        (
            ["island[0].gpu=h100-sxn"],
            "$.island[0].gpu",
            "unknown hardware 'h100-sxn' (did you mean 'h100-sxm'",
        ),
        (["island[0].inter_node=ib-nrd"], "$.island[0].inter_node", "did you mean 'ib-ndr'"),
        (["parallelism.sharding=zero4"], "$.parallelism.sharding", "unknown sharding 'zero4'"),
        (["model.preset=gpt3-175"], "$.model.preset", "did you mean 'gpt3-175b'"),
        (["training.precision=bf17"], "$.training.precision", "got 'bf17' (did you mean 'bf16'?)"),
        (["island[0].nodes=0"], "$.island[0].nodes", "expected an integer >= 1"),
        (["island[0].nodes=-3"], "$.island[0].nodes", "expected an integer >= 1"),
        (["island[0].nodes=2.5"], "$.island[0].nodes", "expected an integer"),
        (["island[0].nodes=nan"], "$.island[0].nodes", "expected an integer"),
        (["training.tokens=nan"], "$.training.tokens", "finite"),
        (['parallelism.tp="8"'], "$.parallelism.tp", "expected an integer, got a string"),
        (["parallelism.sequence_parallel=1"], "$.parallelism.sequence_parallel", "expected true or false"),
        (["island[3].nodes=2"], "$.island[3].nodes", "out of range"),
    ],
)
def test_errors_name_the_file_and_key_path(overrides, path, message, est):
    with pytest.raises(shardmeter.ScenarioError) as info:
        est.estimate(EXAMPLE, overrides=overrides)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{EXAMPLE}: {path}: "), text
    assert message in text


def test_unknown_top_level_table(reg):
    with pytest.raises(
        shardmeter.ScenarioError, match=r"\$\.paralelism: unknown table \(did you mean 'parallelism'"
    ):
        load_scenario({**_base(), "paralelism": {}}, registry=reg)


def test_missing_required_keys(reg):
    with pytest.raises(shardmeter.ScenarioError, match=r"\$\.model\.hidden: required key is missing"):
        load_scenario(_base(model={"layers": 2, "heads": 2, "vocab": 10, "seq_len": 8}), registry=reg)
    with pytest.raises(shardmeter.ScenarioError, match=r"\$\.island\[0\]\.gpu"):
        load_scenario(_base(island=[{"nodes": 1}]), registry=reg)
    with pytest.raises(shardmeter.ScenarioError, match=r"\$\.training"):
        load_scenario(
            {"model": {"preset": "llama3-8b"}, "island": [{"gpu": "h100-sxm", "nodes": 1}]}, registry=reg
        )


def test_bool_is_not_an_integer_and_float_is_not_truncated(reg):
    with pytest.raises(shardmeter.ScenarioError, match="nodes"):
        load_scenario(_base(island=[{"gpu": "h100-sxm", "nodes": True}]), registry=reg)
    with pytest.raises(shardmeter.ScenarioError, match="global_batch"):
        load_scenario(_base(training={"global_batch": 7.9}), registry=reg)


def test_files_errors(tmp_path, reg):
    with pytest.raises(shardmeter.ScenarioError, match="no such file"):
        load_scenario(tmp_path / "missing.toml", registry=reg)
    with pytest.raises(shardmeter.ScenarioError, match="directory"):
        load_scenario(tmp_path, registry=reg)
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\nlayers = 2\n")
    with pytest.raises(shardmeter.ScenarioError, match=r"bad\.toml: not valid TOML"):
        load_scenario(bad, registry=reg)


def test_scenario_round_trips_through_to_dict(reg):
    sc = load_scenario(EXAMPLE, registry=reg)
    again = load_scenario(sc.to_dict(), registry=reg)
    assert again.model == sc.model and again.parallelism == sc.parallelism and again.islands == sc.islands


@pytest.mark.parametrize("value", ['"abc"', "true", "-5", "2.5", "0"])
def test_option_of_the_chosen_strategy_must_have_the_type_of_its_default(value):
    import types

    plugin = types.ModuleType("bucket_plugin")
    plugin.shardmeter_sharding_strategies = shardmeter.hookimpl(
        lambda: [
            shardmeter.ShardingStrategy(name="bucketed", shard_optimizer=True, options={"bucket_mb": 25})
        ]
    )
    preg = fresh_registry(plugin)
    # the strict converter refuses a non-integer, the declarative record's rule one below 1
    with pytest.raises(shardmeter.ScenarioError, match=r"\$\.parallelism\.bucket_mb: expected an integer"):
        load_scenario(
            EXAMPLE,
            registry=preg,
            overrides=["parallelism.sharding=bucketed", f"parallelism.bucket_mb={value}"],
        )


def test_option_of_the_chosen_schedule_is_not_noted_as_ignored():
    import types

    plugin = types.ModuleType("schedule_plugin")
    plugin.shardmeter_sharding_strategies = shardmeter.hookimpl(
        lambda: [shardmeter.PipelineSchedule(name="zb", bubble_fraction=0.5, options={"zb_warmup": 2})]
    )
    preg = fresh_registry(plugin)
    sc = load_scenario(
        EXAMPLE, registry=preg, overrides=["parallelism.schedule=zb", "parallelism.zb_warmup=3"]
    )
    assert sc.parallelism.options == {"zb_warmup": 3} and not sc.notes
    sc = load_scenario(EXAMPLE, registry=preg, overrides=["parallelism.zb_warmup=3"])
    assert any("parallelism.zb_warmup" in n and "zb" in n for n in sc.notes)
