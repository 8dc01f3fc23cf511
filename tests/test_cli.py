"""The command line (``shardmeter estimate``, ``shardmeter plugins``) and the
Python API (``shardmeter.load_scenario``, ``shardmeter.estimate``,
``shardmeter.Estimator`` recomposition), against SCENARIO.md's report."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import pytest
from cli_helpers import one_line_error, run

import shardmeter
from shardmeter.cli.app import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpt3-175b-a100.toml"

REPORT_FIELDS = [
    "feasible", "reasons", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
    "hardware_tflops_per_gpu", "mfu", "hfu", "memory_per_gpu_gb", "compute_utilization", "wall_clock_s",
    "cost_usd", "bottleneck", "breakdown_s", "overlapped_s", "islands",
]  # fmt: skip
ISLAND_FIELDS = ["name", "gpus", "tokens_per_s", "step_time_s", "memory_per_gpu_gb", "cost_usd"]

NAMES = {
    "hardware": [
        "v100-sxm2-32gb", "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb", "a10g", "l4", "l40s",
        "h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "gh200", "b200", "gb200", "rtx-4090", "rtx-3090",
        "mi250x", "mi300x", "mi325x", "gaudi2", "gaudi3", "tpu-v4", "tpu-v5e", "tpu-v5p",
    ],
    "interconnect": [
        "nvlink2", "nvlink3", "nvlink4", "nvlink5", "pcie4", "pcie5", "xgmi", "ib-edr", "ib-hdr", "ib-ndr",
        "ib-xdr", "roce-100g", "roce-200g", "roce-400g", "efa-v2", "ethernet-10g", "ethernet-25g",
        "ethernet-100g", "internet",
    ],
    "cost": ["cloud-on-demand", "owned", "egress"],
    "sharding": ["none", "zero1", "zero2", "zero3", "fsdp", "hsdp"],
    "schedule": ["gpipe", "1f1b", "interleaved"],
    "sync": ["allreduce", "diloco"],
}  # fmt: skip


@pytest.fixture(scope="module")
def gpt3_report():
    """``shardmeter estimate examples/gpt3-175b-a100.toml --json`` (GPT-3 175B, 1024 A100-80GB,
    TP 8 x PP 8 x DP 16, selective recompute), run once through the real console entry point."""
    res = subprocess.run(
        [sys.executable, "-m", "shardmeter", "estimate", str(EXAMPLE), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    return json.loads(res.stdout)


# -- shardmeter estimate ----------------------------------------------------------------------------


def test_report_has_every_field_of_the_contract(gpt3_report):
    missing = [f for f in REPORT_FIELDS if f not in gpt3_report]
    assert not missing
    assert gpt3_report["feasible"] is True and gpt3_report["reasons"] == []
    for isl in gpt3_report["islands"]:
        assert not [f for f in ISLAND_FIELDS if f not in isl]
    for f in REPORT_FIELDS:
        if f not in ("reasons", "overlapped_s"):
            assert gpt3_report[f] is not None, f


def test_report_describes_the_gpt3_run(gpt3_report):
    r = gpt3_report
    assert r["islands"][0]["gpus"] == 1024
    assert r["memory_per_gpu_gb"] < 80.0
    assert r["tokens_per_s_per_gpu"] * 1024 == pytest.approx(r["tokens_per_s"], rel=1e-9)
    assert r["tokens_per_s"] * r["step_time_s"] == pytest.approx(1536 * 2048, rel=1e-9)
    assert r["wall_clock_s"] == pytest.approx(3.0e11 / r["tokens_per_s"], rel=1e-9)
    assert r["cost_usd"] > 0
    assert r["hfu"] >= r["mfu"] > 0
    assert r["hardware_tflops_per_gpu"] >= r["model_tflops_per_gpu"]
    assert 0 < r["compute_utilization"] <= 1


def test_breakdown_adds_up_to_the_step_time(gpt3_report):
    bd = gpt3_report["breakdown_s"]
    assert all(v >= 0 for v in bd.values())
    assert math.fsum(bd.values()) == pytest.approx(gpt3_report["step_time_s"], rel=1e-9)
    assert all(v >= 0 for v in gpt3_report["overlapped_s"].values())


def test_bottleneck_is_the_largest_breakdown_term(gpt3_report):
    bd = gpt3_report["breakdown_s"]
    assert gpt3_report["bottleneck"] in bd
    assert bd[gpt3_report["bottleneck"]] == max(bd.values())


def test_islands_throughput_adds_up_to_the_total(gpt3_report):
    total = sum(i["tokens_per_s"] for i in gpt3_report["islands"])
    assert total == pytest.approx(gpt3_report["tokens_per_s"], rel=1e-9)


def test_gpt3_mfu_is_in_the_published_range(gpt3_report):
    """Megatron-LM reports 40-56 % MFU for GPT-3 175B class runs on A100s (Korthikanti et al. 2022,
    Table 5: 175B at 51.4 % MFU with SP + selective recompute; Narayanan et al. 2021 Table 1)."""
    assert 0.40 <= gpt3_report["mfu"] <= 0.56


def test_estimate_prints_a_readable_table(capsys):
    code, out, err = run(capsys, "estimate", EXAMPLE)
    assert code == 0 and err == ""
    for word in ("step time", "tokens/s", "MFU", "memory per GPU", "bottleneck", "compute", "cost"):
        assert word in out, word
    assert not out.lstrip().startswith("{")


def test_estimate_json_is_exactly_one_document(capsys):
    code, out, err = run(capsys, "estimate", EXAMPLE, "--json", "--set", "parallelism.pp=4")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["feasible"] in (True, False)


def test_set_overrides_on_the_command_line(capsys):
    code, out, _ = run(
        capsys,
        "estimate",
        EXAMPLE,
        "--json",
        "--set",
        "island[0].gpu=h100-sxm",
        "--set",
        "island[0].inter_node=ib-ndr",
        "--set",
        "parallelism.virtual_stages=1",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["islands"][0]["gpu"] == "h100-sxm"


def test_infeasible_plan_exits_0_with_reasons_naming_the_key(capsys):
    code, out, err = run(capsys, "estimate", EXAMPLE, "--json", "--set", "parallelism.tp=5")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["feasible"] is False
    assert any(r.startswith("parallelism.tp") for r in doc["reasons"]), doc["reasons"]
    assert doc["step_time_s"] is None and doc["tokens_per_s"] is None  # no time is invented


def test_infeasible_plan_table_says_why(capsys):
    code, out, _ = run(capsys, "estimate", EXAMPLE, "--set", "parallelism.tp=5")
    assert code == 0
    assert "parallelism.tp" in out


# -- hostile inputs: exit 2, one line, no traceback ---------------------------------------------------


def _write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _example_with(old: str, new: str) -> str:
    text = EXAMPLE.read_text()
    assert old in text
    return text.replace(old, new, 1)


HOSTILE = {
    "missing-file": (lambda tmp: tmp / "nope.toml", ["no such file"]),
    "directory": (lambda tmp: tmp, ["directory"]),
    "not-toml": (lambda tmp: _write(tmp, "this is : not [ toml\n"), ["not valid TOML"]),
    "binary": (lambda tmp: _write(tmp, "\x00\x01\x02", "b.toml"), ["not a text file"]),
    "unknown-key": (
        lambda tmp: _write(tmp, _example_with("tp = 8", "tp = 8\ntensor_paralel = 2")),
        ["$.parallelism.tensor_paralel", "unknown key"],
    ),
    "wrong-type": (
        lambda tmp: _write(tmp, _example_with("nodes = 128", 'nodes = "many"')),
        ["$.island[0].nodes", "expected an integer"],
    ),
    "negative-count": (
        lambda tmp: _write(tmp, _example_with("nodes = 128", "nodes = -4")),
        ["$.island[0].nodes", ">= 1"],
    ),
    "zero-count": (lambda tmp: _write(tmp, _example_with("tp = 8", "tp = 0")), ["$.parallelism.tp", ">= 1"]),
    "nan": (
        lambda tmp: _write(tmp, _example_with("tokens = 3.0e11", "tokens = nan")),
        ["$.training.tokens", "finite"],
    ),
    "nan-count": (
        lambda tmp: _write(tmp, _example_with("nodes = 128", "nodes = nan")),
        ["$.island[0].nodes"],
    ),
    "inf": (lambda tmp: _write(tmp, _example_with("tokens = 3.0e11", "tokens = inf")), ["$.training.tokens"]),
    "unknown-gpu": (
        lambda tmp: _write(tmp, _example_with('"a100-sxm-80gb"', '"a100-sxm-80g"')),
        ["$.island[0].gpu", "unknown hardware 'a100-sxm-80g'", "did you mean 'a100-sxm-80gb'"],
    ),
    "unknown-link": (
        lambda tmp: _write(tmp, _example_with('"ib-hdr"', '"ib-hrd"')),
        ["$.island[0].inter_node", "did you mean 'ib-hdr'"],
    ),
    "unknown-preset": (lambda tmp: _write(tmp, _example_with('"gpt3-175b"', '"gpt-3"')), ["$.model.preset"]),
    "no-island": (lambda tmp: _write(tmp, EXAMPLE.read_text().split("[[island]]")[0]), ["$.island"]),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_input_is_one_line_exit_2(case, tmp_path, capsys):
    make, expected = HOSTILE[case]
    path = make(tmp_path)
    code, out, err = run(capsys, "estimate", path, "--json")
    assert code == 2
    assert out == ""
    line = one_line_error(err)
    if case != "directory":
        assert str(path) in line
    for e in expected:
        assert e in line, line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["estimate", "--set", "parallelism.tp", str(EXAMPLE)], "KEY=VALUE"),
        (["estimate", "--set", "paralelism.tp=2", str(EXAMPLE)], "paralelism"),
        (["estimate", "--set", "island[9].nodes=2", str(EXAMPLE)], "out of range"),
        (["estimate", "--set", "island[0].nodes=nan", str(EXAMPLE)], "island[0].nodes"),
        (["estimate"], "file"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_command_lines_are_one_line_exit_2(argv, expected, capsys):
    code, _out, err = run(capsys, *argv)
    assert code == 2
    line = [ln for ln in err.splitlines() if ln.strip()][-1]
    assert "Traceback" not in err and expected in line, err


@pytest.mark.parametrize("case", ["missing-file", "not-toml", "nan", "unknown-gpu"])
def test_hostile_input_through_the_real_entry_point(case, tmp_path):
    path = HOSTILE[case][0](tmp_path)
    res = subprocess.run(
        [sys.executable, "-m", "shardmeter", "estimate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2
    assert res.stdout == ""
    one_line_error(res.stderr)


# -- shardmeter plugins --------------------------------------------------------------------------------


def test_plugins_lists_every_contract_name_with_its_provider(capsys):
    code, out, err = run(capsys, "plugins", "--json")
    assert code == 0 and err == ""
    parts = json.loads(out)["parts"]
    by_kind = {}
    for p in parts:
        assert p["plugin"] and p["distribution"], p
        by_kind.setdefault(p["kind"], {})[p["name"]] = p
    for kind, names in NAMES.items():
        missing = sorted(set(names) - set(by_kind.get(kind, {})))
        assert not missing, f"{kind}: {missing}"
    a100 = by_kind["hardware"]["a100-sxm-80gb"]
    assert a100["distribution"].split()[0] == "shardmeter"  # "shardmeter 0.1.0" when installed


def test_plugins_table(capsys):
    code, out, _ = run(capsys, "plugins")
    assert code == 0
    header = out.splitlines()[0].split()
    assert header == ["kind", "name", "plugin", "distribution"]
    assert any("h100-sxm" in ln and "hardware" in ln for ln in out.splitlines())


# -- the Python API -----------------------------------------------------------------------------------


def test_public_api_is_exported():
    for name in (
        "load_scenario",
        "estimate",
        "Estimator",
        "Report",
        "Scenario",
        "hookimpl",
        "HardwareProfile",
        "Interconnect",
        "CostSource",
        "ShardingStrategy",
        "Registry",
        "make_plugin_manager",
    ):
        assert name in shardmeter.__all__ and getattr(shardmeter, name) is not None, name


def test_load_and_estimate_from_python():
    sc = shardmeter.load_scenario(EXAMPLE)
    assert isinstance(sc, shardmeter.Scenario)
    report = shardmeter.estimate(sc)
    assert isinstance(report, shardmeter.Report) and report.feasible
    d = report.to_dict()
    assert set(REPORT_FIELDS) <= set(d)
    assert json.loads(report.to_json())["step_time_s"] == pytest.approx(report.step_time_s)
    assert "step time" in str(report)


def test_estimate_takes_a_dict_and_overrides():
    report = shardmeter.estimate(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"global_batch": 32},
            "island": [{"gpu": "h100-sxm", "nodes": 1}],
            "parallelism": {"sharding": "zero1"},
        },
        overrides=["training.recompute=full"],
    )
    assert report.feasible and report.gpus == 8


def test_load_scenario_accepts_a_dict_with_overrides():
    sc = shardmeter.load_scenario(shardmeter.load_scenario(EXAMPLE).to_dict(), overrides=["parallelism.pp=4"])
    assert sc.parallelism.pp == 4


def test_estimator_with_level_swaps_one_topology_level():
    est = shardmeter.Estimator()
    base = est.estimate(EXAMPLE)
    slow = est.with_level("inter_node", "ethernet-10g").estimate(EXAMPLE)
    assert slow.step_time_s > base.step_time_s
    assert slow.breakdown_s.get("dp_comm", 0) + slow.overlapped_s.get("dp_comm", 0) > base.breakdown_s.get(
        "dp_comm", 0
    ) + base.overlapped_s.get("dp_comm", 0)
    assert est.estimate(EXAMPLE).step_time_s == base.step_time_s  # the original is unchanged


def test_estimator_with_part_adds_a_custom_link_without_touching_the_registry():
    est = shardmeter.Estimator()
    link = shardmeter.Interconnect(name="my-fabric", bandwidth_gb_s=400.0, latency_us=1.0, kind="network")
    mine = est.with_part("interconnect", link)
    report = mine.estimate(EXAMPLE, overrides=["island[0].inter_node=my-fabric"])
    assert report.feasible
    assert "my-fabric" not in est.registry.names("interconnect")
    assert "my-fabric" not in shardmeter.get_registry().names("interconnect")
    with pytest.raises(shardmeter.ScenarioError, match="my-fabric"):
        est.estimate(EXAMPLE, overrides=["island[0].inter_node=my-fabric"])


def test_estimator_with_part_adds_a_custom_strategy():
    strategy = shardmeter.ShardingStrategy(
        name="my-zero2", shard_optimizer=True, shard_gradients=True, options={"my_bucket_mb": 25}
    )
    est = shardmeter.Estimator().with_part("sharding", strategy)
    report = est.estimate(EXAMPLE, overrides=["parallelism.sharding=my-zero2", "parallelism.my_bucket_mb=50"])
    zero1 = shardmeter.Estimator().estimate(EXAMPLE)
    assert report.feasible and report.memory_per_gpu_gb < zero1.memory_per_gpu_gb


def test_estimator_with_cost_source():
    est = shardmeter.Estimator()
    cloud = est.estimate(EXAMPLE)
    owned = est.with_cost_source("owned").estimate(EXAMPLE)
    custom = est.with_cost_source(shardmeter.CostSource(name="flat", usd_per_gpu_hour=1.0)).estimate(EXAMPLE)
    assert cloud.cost_usd and owned.cost_usd and cloud.cost_usd != owned.cost_usd
    assert custom.cost_usd == pytest.approx(1024 * custom.wall_clock_s / 3600.0, rel=1e-9)


@pytest.mark.parametrize(
    "command", [[], ["estimate"], ["sweep"], ["plan"], ["sensitivity"], ["validate"], ["plugins"]]
)
def test_help_of_the_command_and_every_sub_command_exits_cleanly(command, capsys):
    """``--help`` crashed on a literal % in the sensitivity help (argparse formats help text)."""
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: shardmeter") and "Traceback" not in out
