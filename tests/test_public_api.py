"""The explore layer through the public names: ``shardmeter.sweep``, ``plan`` and
``sensitivity`` agree with the command line's ``--json``, their data frames hold one row per
grid point / plan / input, and results and reports show themselves in a notebook."""

from __future__ import annotations

import json
import pathlib
import re
import sys

import attrs
import pytest
from cli_helpers import run

import shardmeter
from shardmeter import ShardMeterError

pd = pytest.importorskip("pandas")

SCENARIO = """
[model]
preset = "llama3-8b"
[training]
global_batch = 256
recompute = "full"
[[island]]
name = "dc"
gpu = "h100-sxm"
nodes = 2
[parallelism]
sharding = "zero1"
"""

#: Keys of ``plan --json`` that time the search, so differ between two runs.
TIMING = ("seconds", "candidates_per_s")
ONLY = {"tp": [1, 2], "pp": [1], "cp": [1], "mbs": [1, 2]}
ONLY_CLI = ["--only", "tp=1,2", "--only", "pp=1", "--only", "cp=1", "--only", "mbs=1,2"]


@pytest.fixture
def toml(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(SCENARIO)
    return str(f)


def _cli_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


# -- sweep -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vary",
    [
        {"island[0].nodes": [1, 2, 4]},
        {"island[0].nodes": "1..4x2"},
        ["island[0].nodes=1..4x2"],
        "island[0].nodes=1,2,4",
    ],
)
def test_sweep_to_dict_is_the_cli_json(capsys, toml, vary):
    res = shardmeter.sweep(toml, vary)
    assert isinstance(res, shardmeter.SweepResult)
    assert res.to_dict() == _cli_json(capsys, "sweep", toml, "--vary", "island[0].nodes=1,2,4")
    assert res.keys == ("island[0].nodes",)
    assert [r.vary["island[0].nodes"] for r in res.rows] == [1, 2, 4]
    assert all(isinstance(r.report, shardmeter.Report) for r in res.rows)


def test_sweep_takes_overrides_as_a_dict_and_a_loaded_scenario(capsys, toml):
    cli = _cli_json(capsys, "sweep", toml, "--vary", "training.micro_batch=1,2", "--set", "parallelism.tp=2")
    vary = {"training.micro_batch": [1, 2]}
    assert shardmeter.sweep(toml, vary, overrides={"parallelism.tp": 2}).to_dict() == cli
    assert shardmeter.sweep(toml, vary, overrides=["parallelism.tp=2"]).to_dict() == cli
    sc = shardmeter.load_scenario(toml)
    loaded = shardmeter.sweep(sc, vary, overrides=[("parallelism.tp", 2)]).to_dict()
    # the reports' figures; their notes may differ (a loaded scenario's tables, reloaded by the
    # sweep, can carry defaults that add a note: tracked outside this API)
    for doc in (loaded, cli):
        for row in doc["rows"]:
            row["report"].pop("notes")
    assert loaded == cli


def test_sweep_dataframe_has_one_row_per_point(toml):
    res = shardmeter.sweep(toml, {"island[0].nodes": [1, 2, 4], "training.micro_batch": [1, 2]})
    df = res.to_dataframe()
    assert len(df) == 6 and list(df.columns[:2]) == ["island[0].nodes", "training.micro_batch"]
    assert df["island[0].nodes"].tolist() == [1, 1, 2, 2, 4, 4]  # the first key varies slowest
    assert df["tokens_per_s"].tolist() == [r.report.tokens_per_s for r in res.rows]
    assert df["scaling_efficiency"].tolist() == pytest.approx(res.analysis["scaling_efficiency"])
    terms = [c for c in df.columns if c.startswith("breakdown_s.")]
    assert "breakdown_s.compute" in terms
    assert df[terms].sum(axis=1).tolist() == pytest.approx(df["step_time_s"].tolist(), rel=1e-9)
    assert df.attrs["analysis"]["x"] == "island[0].nodes"
    assert df["wall_clock_s"].dtype.kind == "f"  # null figures are NaN in a float column


def test_an_infeasible_row_has_nan_figures_and_its_reasons(toml):
    df = shardmeter.sweep(toml, {"parallelism.tp": [1, 3]}).to_dataframe()
    assert df["feasible"].tolist() == [True, False]
    assert pd.isna(df["step_time_s"][1]) and "parallelism.tp" in df["reasons"][1]
    assert pd.isna(df["breakdown_s.compute"][1]) and df["breakdown_s.compute"][0] > 0


# -- plan ------------------------------------------------------------------------------------


def test_plan_to_dict_is_the_cli_json(capsys, toml):
    res = shardmeter.plan(toml, top=4, only=ONLY)
    cli = _cli_json(capsys, "plan", toml, "--top", "4", *ONLY_CLI)
    mine = res.to_dict()
    for k in TIMING:
        assert mine.pop(k) >= 0 and cli.pop(k) >= 0
    assert mine == cli
    assert res.evaluated == cli["evaluated"] and res.feasible == cli["feasible"]
    assert res.best is res.plans[0] and res.best.rank == 1


def test_plan_takes_only_as_strings_and_a_cost_objective(capsys, toml):
    res = shardmeter.plan(toml, objective="cost", top=2, only=["tp=1,2", "pp=1", "cp=1", "mbs=1,2"])
    cli = _cli_json(capsys, "plan", toml, "--objective", "cost", "--top", "2", *ONLY_CLI)
    assert [p.to_dict() for p in res.plans] == cli["plans"]
    assert res.details["objective"] == "cost"


def test_plan_dataframe_has_one_row_per_plan(toml):
    res = shardmeter.plan(toml, top=5, only=ONLY)
    df = res.to_dataframe()
    assert len(df) == len(res.plans) == 5
    assert df["rank"].tolist() == [1, 2, 3, 4, 5]
    assert df["tp"].tolist() == [p.parallelism["tp"] for p in res.plans]
    assert df["micro_batch"].tolist() == [p.training["micro_batch"] for p in res.plans]
    assert df["island[0].nodes"].tolist() == [p.islands[0]["nodes"] for p in res.plans]
    assert df["step_time_s"].is_monotonic_increasing  # the time objective: fastest first
    assert df["time_per_token_s"].tolist() == [p.time_per_token_s for p in res.plans]


# -- sensitivity -----------------------------------------------------------------------------


def test_sensitivity_to_dict_is_the_cli_json(capsys, toml):
    res = shardmeter.sensitivity(toml, step=0.05)
    assert res.to_dict() == _cli_json(capsys, "sensitivity", toml, "--step", "0.05")
    assert res.step == 0.05 and res.entries[0].rank == 1


def test_sensitivity_dataframe_has_one_row_per_input(toml):
    res = shardmeter.sensitivity(toml)
    df = res.to_dataframe()
    assert len(df) == len(res.entries) and df.columns[0] == "rank"
    assert df["resource"].tolist() == [e.resource for e in res.entries]
    assert set(df["label"]) >= {"price per GPU-hour (cloud-on-demand)", "GPU memory capacity (h100-sxm)"}
    price = df.set_index("resource").loc["gpu_hour_price"]
    assert price["cost_elasticity"] == pytest.approx(1.0, abs=1e-12)
    assert res.entry("gpu_flops").elasticity == df.set_index("resource").loc["gpu_flops", "elasticity"]


def test_sensitivity_entry_names_the_keys_it_has(toml):
    with pytest.raises(ShardMeterError, match=r"resource 'bw0' is not one of .*gpu_flops"):
        shardmeter.sensitivity(toml).entry("bw0")


# -- notebooks -------------------------------------------------------------------------------


def test_report_repr_is_one_line_of_headline_figures(toml):
    r = shardmeter.estimate(toml)
    text = repr(r)
    assert "\n" not in text and text.startswith("<Report ") and text.endswith(">")
    assert f"{r.tokens_per_s:.3g} tok/s" in text and f"{r.mfu * 100:.1f} % MFU" in text
    assert f"{r.memory_per_gpu_gb:.3g} GB/GPU" in text and f"bottleneck={r.bottleneck}" in text
    bad = shardmeter.estimate(toml, overrides=["parallelism.tp=3"])
    assert repr(bad).startswith("<Report infeasible: parallelism.tp")


def test_report_html_has_the_figures_and_the_breakdown(toml):
    r = shardmeter.estimate(toml)
    page = r._repr_html_()
    assert page.startswith("<table>") and page.count("<table>") == 2  # headline, breakdown
    assert "<td>tokens_per_s</td>" in page and "<td>compute</td>" in page


def test_html_is_escaped():
    sc = {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 256},
        "island": [
            {"name": "<b>a</b>", "gpu": "h100-sxm", "nodes": 1},
            {"name": "b", "gpu": "h100-sxm", "nodes": 1},
        ],
        "parallelism": {"tp": 3},
    }
    page = shardmeter.estimate(sc)._repr_html_()
    assert "&lt;b&gt;a&lt;/b&gt;" in page and "<b>" not in page


def test_results_show_a_short_repr_and_a_table(toml):
    sw = shardmeter.sweep(toml, {"island[0].nodes": [1, 2]})
    pl = shardmeter.plan(toml, top=2, only=ONLY)
    se = shardmeter.sensitivity(toml)
    assert repr(sw) == "<SweepResult 2 rows over island[0].nodes: 2 feasible, knee=None>"
    assert repr(pl).startswith("<PlanResult time: 2 plans of ") and "\n" not in repr(pl)
    assert repr(se).startswith(f"<SensitivityResult {len(se.entries)} inputs at 10%, top: ")
    for res, n in ((sw, 2), (pl, 2), (se, len(se.entries))):
        page = res._repr_html_()
        assert page.startswith("<table><caption>") and page.count("<tr>") == n + 1


def test_results_are_frozen(toml):
    res = shardmeter.sensitivity(toml)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        res.step = 0.2  # type: ignore[misc]


def test_to_dataframe_without_pandas_names_the_extra(toml, monkeypatch):
    res = shardmeter.sensitivity(toml)
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    with pytest.raises(ShardMeterError, match=r"pip install 'shardmeter\[dataframe\]'"):
        res.to_dataframe()


# -- bad arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: shardmeter.sweep(f, 3), r"^vary: expected a dict"),
        (lambda f: shardmeter.sweep(f, {}), r"^vary: give at least one key"),
        (
            lambda f: shardmeter.sweep(f, {"island[0].nodes": 4}),
            r"^vary\['island\[0\].nodes'\]: expected a list",
        ),
        (lambda f: shardmeter.sweep(f, {"island[0].nodes": []}), r"^vary\['island\[0\].nodes'\]: no values"),
        (lambda f: shardmeter.sweep(f, ["island[0].nodes"]), r"^--vary expects KEY=V1,V2"),
        (
            lambda f: shardmeter.sweep(f, {"island[0].nodes": [1]}, workers=0),
            r"^workers: expected a whole number",
        ),
        (lambda f: shardmeter.plan(f, budget_usd=-1), r"^budget_usd: expected a number > 0"),
        (lambda f: shardmeter.plan(f, only=["tp=1", "tp=2"]), r"^only: tp is given twice"),
        (lambda f: shardmeter.plan(f, objective="fast"), r"^--objective must be one of"),
        (lambda f: shardmeter.sensitivity(f, step=2), r"^step: expected a relative change"),
    ],
)
def test_bad_arguments_are_one_line_errors_naming_them(toml, call, message):
    with pytest.raises(ShardMeterError, match=message) as exc:
        call(toml)
    assert "\n" not in str(exc.value)


def test_every_public_name_resolves():
    for name in shardmeter.__all__:
        assert getattr(shardmeter, name) is not None
    assert shardmeter.sweep.__module__ == "shardmeter.api"


def test_the_walkthrough_in_the_docs_runs(monkeypatch):
    root = pathlib.Path(__file__).resolve().parents[1]
    blocks = re.findall(r"```python\n(.*?)```", (root / "docs" / "python-api.md").read_text("utf-8"), re.S)
    assert len(blocks) == 4
    monkeypatch.chdir(root)  # the examples' paths are relative to the repository
    ns: dict = {}
    for block in blocks:
        exec(compile(block, "docs/python-api.md", "exec"), ns)
    assert isinstance(ns["report"], shardmeter.Report) and len(ns["df"]) == 6
    assert ns["best"].rank == 1 and ns["sens"].step == 0.05
