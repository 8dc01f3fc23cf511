"""`shardmeter sweep`: value ranges, the vectorised grid, scaling analysis, CSV/resume, plot."""

from __future__ import annotations

import csv
import json
import os
import sys
from itertools import pairwise

import numpy as np
import pytest

from shardmeter.cli.app import main
from shardmeter.errors import ShardMeterError
from shardmeter.estimator import Estimator
from shardmeter.explore.search.scaling import analyse, knee
from shardmeter.explore.search.sweep import run_sweep
from shardmeter.explore.search.sweep_inputs import grid_columns, plan_grid
from shardmeter.explore.search.values import parse_values, parse_vary
from shardmeter.inputs.bundles import PartTable
from shardmeter.load.scenario import load_scenario

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALE = os.path.join(ROOT, "examples", "studies", "scale-nodes.toml")

SMALL = {
    "model": {"layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 1024},
    "training": {"global_batch": 256, "micro_batch": 1, "tokens": 1e10},
    "island": [{"name": "c", "gpu": "a100-sxm-80gb", "nodes": 2, "gpus_per_node": 8, "inter_node": "ib-hdr"}],
}

TWO = {
    "model": {"layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 1024},
    "training": {"global_batch": 256, "micro_batch": 1},
    "island": [
        {"name": "a", "gpu": "h100-sxm", "nodes": 1},
        {"name": "b", "gpu": "a100-sxm-80gb", "nodes": 2},
    ],
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 1.0, "latency_us": 20000}},
    "sync": {"strategy": "diloco", "inner_steps": 100},
}


def _json(capsys, argv):
    assert main(argv) == 0
    out = capsys.readouterr().out
    return json.loads(out)


# -- values -------------------------------------------------------------------------------------


def test_geometric_range_doubles_up_to_the_end():
    assert parse_values("k", "1..512x2") == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert parse_values("k", "3..100x3") == [3, 9, 27, 81]


def test_arithmetic_range_and_lists_mix():
    assert parse_values("k", "0..100+25") == [0, 25, 50, 75, 100]
    assert parse_values("k", "1,2..8x2,12") == [1, 2, 4, 8, 12]
    assert parse_values("k", "1..4") == [1, 2, 3, 4]
    assert parse_values("k", "0.5..2x2") == [0.5, 1.0, 2.0]
    assert parse_values("k", "0.1..0.3+0.1") == [0.1, 0.2, 0.3]


def test_values_read_like_set_values():
    assert parse_values("island[0].gpu", "h100-sxm,a100-sxm-80gb") == ["h100-sxm", "a100-sxm-80gb"]
    assert parse_values("x", 'true,2.5,"s"') == [True, 2.5, "s"]
    assert parse_vary("parallelism.tp=1,2") == ("parallelism.tp", [1, 2])


@pytest.mark.parametrize("bad", ["k=8..1x2", "k=1..8x1", "k=1..8+0", "k", "k=", "k=1,,2", "k=1..1e9+1"])
def test_bad_vary_is_an_error(bad):
    with pytest.raises(ShardMeterError):
        parse_vary(bad)


# -- grid and vectorised inputs -------------------------------------------------------------------


def test_several_vary_form_a_grid_first_key_slowest():
    res = run_sweep(SMALL, [("parallelism.tp", [1, 2]), ("training.micro_batch", [1, 2, 4])])
    assert [tuple(r["vary"].values()) for r in res.rows] == [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4)]


@pytest.mark.parametrize(
    "scenario, vary",
    [
        (SMALL, [("island[0].nodes", [1, 2, 4]), ("parallelism.tp", [1, 2, 8])]),
        (SMALL, [("training.micro_batch", [1, 2]), ("training.global_batch", [128, 512])]),
        (SMALL, [("island[0].gpu", ["a100-sxm-80gb", "h100-sxm"]), ("island[0].nodes", [1, 4])]),
        (SMALL, [("training.recompute", ["none", "full"]), ("parallelism.pp", [1, 2])]),
        (SMALL, [("parallelism.dp", [2, 4]), ("parallelism.sequence_parallel", [False, True])]),
        (TWO, [("network.link.bandwidth_gb_s", [0.1, 1, 10]), ("sync.inner_steps", [10, 500])]),
        (TWO, [("sync.compression_bits", [4, 16]), ("island[1].nodes", [1, 3])]),
        (TWO, [("sync.strategy", ["allreduce", "diloco"]), ("sync.inner_steps", [10, 100])]),
        (TWO, [("network.link.latency_us", [1000, 100000])]),
    ],
)
def test_vectorised_inputs_equal_per_row_inputs(scenario, vary):
    from shardmeter.explore.search.sweep import grid

    est = Estimator()
    base = load_scenario(scenario, registry=est.registry)
    rows = grid(vary)
    scs = [load_scenario(scenario, overrides=list(r.items()), registry=est.registry) for r in rows]
    table = PartTable()  # one table: a strategy has the same code in every row
    plan = plan_grid(
        est,
        vary,
        np.arange(len(rows)),
        base,
        lambda ov: load_scenario(scenario, overrides=list(ov.items()), registry=est.registry),
        table,
    )
    vec = grid_columns(plan, base)
    for r, sc in enumerate(scs):
        assert plan.scenario(r) == sc  # the row's scenario is the loaded one
        one = est.inputs(sc, table)[0].columns()
        for k, v in one.items():
            np.testing.assert_allclose(vec[k][r], np.asarray(v, dtype=float)[0], rtol=1e-12, err_msg=k)
    a = run_sweep(scenario, vary).to_dict()
    b = run_sweep(scenario, vary, vectorised=False).to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_whole_grid_is_one_evaluate_call(monkeypatch):
    import shardmeter.explore.search.sweep as sw

    calls = []
    real = sw.evaluate

    def counting(inp, table):
        calls.append(1)
        return real(inp, table)

    monkeypatch.setattr(sw, "evaluate", counting)
    res = run_sweep(
        SMALL, [("island[0].nodes", [1, 2, 4, 8]), ("island[0].gpu", ["a100-sxm-80gb", "h100-sxm"])]
    )
    assert len(res.rows) == 8
    assert len(calls) == 1


def test_invalid_grid_value_is_an_error_naming_the_key(capsys):
    assert main(["sweep", SCALE, "--vary", "island[0].nodes=0,1"]) == 2
    err = capsys.readouterr().err
    assert "island[0].nodes" in err and len(err.strip().splitlines()) == 1


# -- JSON and analysis --------------------------------------------------------------------------


def test_sweep_json_shape(capsys):
    doc = _json(capsys, ["sweep", SCALE, "--vary", "island[0].nodes=1..8x2", "--json"])
    assert set(doc) == {"rows", "analysis"}
    assert len(doc["rows"]) == 4
    for r in doc["rows"]:
        assert set(r) == {"vary", "report"}
        assert list(r["vary"]) == ["island[0].nodes"]
        for field in (
            "feasible",
            "step_time_s",
            "tokens_per_s",
            "tokens_per_s_per_gpu",
            "mfu",
            "memory_per_gpu_gb",
            "bottleneck",
            "breakdown_s",
            "islands",
        ):
            assert field in r["report"]
    an = doc["analysis"]
    assert len(an["scaling_efficiency"]) == len(an["regime"]) == 4
    assert "knee" in an


def test_node_sweep_scaling_efficiency_knee_and_regimes(capsys):
    doc = _json(capsys, ["sweep", SCALE, "--vary", "island[0].nodes=1..128x2", "--json"])
    rows, an = doc["rows"], doc["analysis"]
    assert an["x"] == "island[0].nodes"
    feas = [i for i, r in enumerate(rows) if r["report"]["feasible"]]
    assert feas, "the study scenario must have feasible points"
    assert an["scaling_efficiency"][feas[0]] == pytest.approx(1.0)
    for i in feas:
        rep = rows[i]["report"]
        per = rep["tokens_per_s"] / rep["gpus"]
        per0 = rows[feas[0]]["report"]["tokens_per_s"] / rows[feas[0]]["report"]["gpus"]
        assert an["scaling_efficiency"][i] == pytest.approx(per / per0)
        assert an["regime"][i] in ("compute-bound", "communication-bound", "memory-bound", "bubble-bound")
    # the knee follows its definition, recomputed here from the rows
    expect = None
    for a, b in pairwise(feas):
        ra, rb = rows[a]["report"], rows[b]["report"]
        if (rb["tokens_per_s"] - ra["tokens_per_s"]) / (rb["gpus"] - ra["gpus"]) < 0.5 * ra[
            "tokens_per_s"
        ] / ra["gpus"]:
            expect = rows[a]["vary"]["island[0].nodes"]
            break
    assert an["knee"] == expect
    # 25 GbE between nodes: plain data parallelism stops paying well before 128 nodes
    assert an["knee"] is not None and an["knee"] < 128
    assert an["scaling_efficiency"][feas[-1]] < 0.75
    for t in an["transitions"]:
        assert t["from"] != t["to"]


def test_knee_definition_on_a_synthetic_series():
    # doubling GPUs: 2x, 1.95x, then 1.4x the throughput -> knee at the point before the 1.4x step
    assert knee([1, 2, 4, 8], [100.0, 200.0, 390.0, 546.0], [1, 2, 4, 8]) == 4
    assert knee([1, 2, 4], [100.0, 190.0, 370.0], [1, 2, 4]) is None
    # marginal exactly half the average is not yet a knee
    assert knee([1, 2], [100.0, 150.0], [1, 2]) is None


def test_regime_transitions_are_named():
    rows = [
        {
            "vary": {"island[0].nodes": n},
            "report": {"feasible": True, "gpus": 8 * n, "tokens_per_s": t, "regime": r},
        }
        for n, t, r in (
            (1, 100.0, "compute-bound"),
            (2, 190.0, "compute-bound"),
            (4, 260.0, "communication-bound"),
        )
    ]
    an = analyse(["island[0].nodes"], rows)
    assert an["transitions"] == [{"after": 2, "at": 4, "from": "compute-bound", "to": "communication-bound"}]
    assert an["knee"] == 2


def test_table_marks_knee_and_transition(capsys):
    assert main(["sweep", SCALE, "--vary", "island[0].nodes=1..128x2"]) == 0
    out = capsys.readouterr().out
    assert "efficiency" in out and "knee" in out


# -- CSV, resume, plot ----------------------------------------------------------------------------


def test_csv_written_and_resume_skips_known_rows(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert main(["sweep", SCALE, "--vary", "island[0].nodes=8,16", "--csv", str(out)]) == 0
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["island[0].nodes"] for r in rows] == ["8", "16"]
    assert float(rows[0]["tokens_per_s"]) > 0
    # mark a known row: a resumed sweep must keep it as it is, not compute it again
    rows[0]["tokens_per_s"] = "12345.0"
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    capsys.readouterr()
    assert main(["sweep", SCALE, "--vary", "island[0].nodes=8..64x2", "--csv", str(out), "--resume"]) == 0
    with open(out, newline="") as fh:
        again = list(csv.DictReader(fh))
    assert [r["island[0].nodes"] for r in again] == ["8", "16", "32", "64"]
    assert again[0]["tokens_per_s"] == "12345.0"
    assert float(again[3]["tokens_per_s"]) > 0
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_resume_refuses_a_csv_of_other_keys(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert main(["sweep", SCALE, "--vary", "training.micro_batch=1", "--csv", str(out)]) == 0
    assert main(["sweep", SCALE, "--vary", "island[0].nodes=8", "--csv", str(out), "--resume"]) == 2
    assert "--resume" in capsys.readouterr().err


def test_plot_is_a_readable_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "scale.png"
    assert main(["sweep", SCALE, "--vary", "island[0].nodes=1..128x2", "--plot", str(png)]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000


def test_plot_of_a_named_key_grid(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "g.png"
    assert (
        main(
            [
                "sweep",
                SCALE,
                "--vary",
                "training.recompute=none,selective,full",
                "--vary",
                "training.micro_batch=1,2",
                "--plot",
                str(png),
            ]
        )
        == 0
    )
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_plot_without_matplotlib_is_one_clear_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["sweep", SCALE, "--vary", "island[0].nodes=8", "--plot", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert "shardmeter[plot]" in err and len(err.splitlines()) == 1


def test_every_command_in_docs_exploring_runs(tmp_path, capsys, monkeypatch):
    """The commands of docs/exploring.md run as written from the repository root (output files go to a
    temporary folder)."""
    import re
    import shlex

    monkeypatch.chdir(ROOT)
    with open(os.path.join(ROOT, "docs", "exploring.md"), encoding="utf-8") as fh:
        text = fh.read()
    cmds = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("shardmeter "):
                cmds.append(shlex.split(line)[1:])
    assert len(cmds) >= 12
    for argv in cmds:
        if argv[0] == "sweep" and "--plot" in argv:
            pytest.importorskip("matplotlib")
        for flag in ("--plot", "--csv"):
            if flag in argv:
                k = argv.index(flag) + 1
                argv[k] = str(tmp_path / os.path.basename(argv[k]))
        assert main(argv) == 0, shlex.join(argv)
        capsys.readouterr()


def test_interrupted_sweep_has_reported_the_rows_done():
    seen = []

    def on_progress(rows):
        seen.append(len(rows))
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            SMALL, [("training.micro_batch", [1, 2, 4, 8, 16, 32])], chunk_rows=2, on_progress=on_progress
        )
    assert seen == [2, 4]


def test_a_huge_grid_is_refused():
    with pytest.raises(ShardMeterError, match="grid"):
        run_sweep(
            SMALL, [("island[0].nodes", list(range(1, 1001))), ("training.micro_batch", list(range(1, 1001)))]
        )


def test_util_column_only_where_islands_sync():
    """Compute utilization is 1 by definition on one island: the column is left out there and kept
    between islands, where DiLoCo's outer exchange shows in the step."""
    from shardmeter.explore.formats.sweep_table import sweep_table
    from shardmeter.explore.search.sweep import run_sweep

    one = sweep_table(
        run_sweep(os.path.join(ROOT, "examples/studies/scale-nodes.toml"), [("island[0].nodes", [1, 2])])
    )
    two = sweep_table(
        run_sweep(os.path.join(ROOT, "examples/studies/diloco.toml"), [("sync.inner_steps", [10, 100])])
    )
    assert " util " not in one.splitlines()[1] and " mem GB " in one.splitlines()[1]
    assert " util " in two.splitlines()[1]
