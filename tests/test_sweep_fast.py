"""The sweep's fast path (parse once, vary the resolved inputs) against the per-row path:
the same rows, reports, CSV bytes and errors; the table, analysis and plot on large grids."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardmeter.cli.app import main
from shardmeter.errors import ScenarioError
from shardmeter.estimator import Estimator
from shardmeter.explore.formats.sweep_csv import CSV_FIELDS, write_csv
from shardmeter.explore.formats.sweep_table import TABLE_ROWS, sweep_table
from shardmeter.explore.search.sweep import run_sweep
from shardmeter.explore.search.sweep_inputs import plan_grid
from shardmeter.explore.search.values import fields_of
from shardmeter.inputs.bundles import PartTable
from shardmeter.load.scenario import load_scenario

MODEL = {"layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 1024}
ONE = {
    "model": MODEL,
    "training": {"global_batch": 256, "micro_batch": 1, "tokens": 1e10},
    "island": [{"name": "c", "gpu": "a100-sxm-80gb", "nodes": 2, "gpus_per_node": 8, "inter_node": "ib-hdr"}],
}
# three islands: one with its own parallelism, one with network tiers; priced, with a token budget
MULTI = {
    "model": MODEL,
    "training": {"global_batch": 512, "micro_batch": 1, "tokens": 1e10},
    "island": [
        {"name": "a", "gpu": "h100-sxm", "nodes": 2},
        {"name": "b", "gpu": "a100-sxm-80gb", "nodes": 2, "parallelism": {"tp": 2, "sharding": "zero1"}},
        {
            "name": "t",
            "gpu": "h100-sxm",
            "nodes": 2,
            "tiers": [{"link": "nvlink4", "gpus": 8}, {"link": "ib-ndr", "gpus": 64}],
        },
    ],
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 1.0, "latency_us": 20000}},
    "sync": {"strategy": "diloco", "inner_steps": 100},
}

GRIDS = [
    # infeasible rows: batch split, too many GPUs (dp pinned), tp not dividing heads, memory
    (
        ONE,
        [
            ("training.global_batch", [8, 64, 96, 256]),
            ("island[0].nodes", [1, 2, 3]),
            ("training.micro_batch", [1, 4]),
        ],
    ),
    (
        ONE,
        [
            ("parallelism.tp", [1, 3, 8]),
            ("parallelism.dp", [2, 64]),
            ("training.recompute", ["none", "full"]),
        ],
    ),
    (
        ONE,
        [
            ("island[0].gpu", ["a100-sxm-80gb", "h100-sxm"]),
            ("training.micro_batch", [1, 64]),
            ("parallelism.pp", [1, 2]),
        ],
    ),
    (
        MULTI,
        [
            ("island[0].nodes", [1, 2, 4]),
            ("island[1].parallelism.tp", [1, 2, 3]),
            ("network.link.bandwidth_gb_s", [0.1, 10]),
        ],
    ),
    (
        MULTI,
        [
            ("training.global_batch", [96, 512]),
            ("island[2].nodes", [1, 8]),
            ("sync.strategy", ["allreduce", "diloco"]),
        ],
    ),
    # an island's own micro_batch: training.micro_batch (fast) sets the other islands only;
    # batch splits that fail on either name their own key
    (
        MULTI | {"island": [MULTI["island"][0] | {"micro_batch": 2}, *MULTI["island"][1:]]},
        [
            ("training.micro_batch", [1, 3, 4]),
            ("island[0].micro_batch", [2, 3]),
            ("training.global_batch", [320, 480]),
        ],
    ),
]


def _csv(tmp_path, name, res) -> bytes:
    path = tmp_path / name
    write_csv(path, res.keys, res.rows, res.analysis)
    return path.read_bytes()


@pytest.mark.parametrize("scenario, vary", GRIDS)
def test_fast_path_equals_the_per_row_path(tmp_path, scenario, vary):
    fast = run_sweep(scenario, vary)
    slow = run_sweep(scenario, vary, vectorised=False)
    assert _csv(tmp_path, "fast.csv", fast) == _csv(tmp_path, "slow.csv", slow)
    assert sweep_table(fast) == sweep_table(slow)
    feasible = [fields_of(r)["feasible"] for r in fast.rows]
    assert any(feasible) and not all(feasible), "each grid mixes feasible and infeasible rows"
    for r_fast, r_slow in zip(fast.rows, slow.rows, strict=True):
        fields = fields_of(r_fast)
        assert fields is not r_fast["report"]  # known before the report is built
        for k in (*CSV_FIELDS, "breakdown_s"):
            assert fields[k] == r_slow["report"][k], k
    a, b = fast.to_dict(), slow.to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("scenario, vary", GRIDS)
def test_a_rows_scenario_is_the_loaded_one(scenario, vary):
    from shardmeter.explore.search.sweep import grid

    est = Estimator()
    rows = grid(vary)
    plan = plan_grid(
        est,
        vary,
        np.arange(len(rows)),
        load_scenario(scenario, registry=est.registry),
        lambda ov: load_scenario(scenario, overrides=list(ov.items()), registry=est.registry),
        PartTable(),
    )
    for r, row in enumerate(rows):
        assert plan.scenario(r) == load_scenario(scenario, overrides=list(row.items()), registry=est.registry)


@pytest.mark.parametrize(
    "scenario, vary",
    [
        # a bad value mid-grid (load error), the first bad row in grid order wins
        (ONE, [("training.micro_batch", [1, 2]), ("island[0].nodes", [1, 0, -1])]),
        (ONE, [("parallelism.tp", [1, 2.5]), ("training.global_batch", [0, 64])]),
        # a value that loads but does not resolve: more GPUs than the island's last tier joins
        (MULTI, [("training.micro_batch", [1, 2]), ("island[2].nodes", [1, 8, 9])]),
        (ONE, [("island[0].gpu", ["h100-sxm", "no-such-gpu"]), ("island[0].nodes", [1, 2])]),
    ],
)
def test_a_bad_row_is_the_same_one_line_error(scenario, vary):
    with pytest.raises(ScenarioError) as fast:
        run_sweep(scenario, vary)
    with pytest.raises(ScenarioError) as slow:
        run_sweep(scenario, vary, vectorised=False)
    assert str(fast.value) == str(slow.value)
    assert "\n" not in str(fast.value)


def test_reports_are_built_only_when_read(monkeypatch):
    import shardmeter.explore.search.sweep as sw

    built = []
    real = sw.build_report
    monkeypatch.setattr(sw, "build_report", lambda *a, **k: built.append(1) or real(*a, **k))
    res = run_sweep(ONE, [("island[0].nodes", [1, 2, 4]), ("training.micro_batch", [1, 2])])
    sweep_table(res)
    assert built == []
    assert res.rows[2]["report"]["gpus"] == fields_of(res.rows[2])["gpus"]
    assert len(built) == 1


def test_pinned_dp_claims_no_scaling_efficiency(capsys):
    res = run_sweep(ONE, [("island[0].nodes", [1, 2, 4])], overrides=[("parallelism.dp", 8)])
    an = res.analysis
    assert an["scaling_efficiency"] == [None, None, None]
    assert "does not change" in an["scaling_note"] and an["knee"] is None
    text = sweep_table(res)
    assert "efficiency" not in text.splitlines()[1] and "note: the number of GPUs" in text
    free = run_sweep(ONE, [("island[0].nodes", [1, 2, 4])]).analysis
    assert free["scaling_efficiency"][0] == 1.0 and "scaling_note" not in free


def test_a_large_grid_prints_a_bounded_table(tmp_path, capsys):
    out = tmp_path / "big.csv"
    argv = ["sweep", "-", "--vary", "training.global_batch=64..4096+64", "--vary", "island[0].nodes=1..8"]
    path = tmp_path / "s.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\n[training]\nglobal_batch = 1024\n'
        '[[island]]\ngpu = "h100-sxm"\nnodes = 8\ninter_node = "ib-ndr"\n'
    )
    argv[1] = str(path)
    assert main([*argv, "--csv", str(out)]) == 0
    text, err = capsys.readouterr()
    assert err == ""  # no progress bar when stderr is not a terminal
    assert f"{512 - TABLE_ROWS} more points not shown" in text
    assert len(out.read_text().splitlines()) == 1 + 512


def test_plot_shades_each_series_and_keeps_the_legend_off_the_data():
    pytest.importorskip("matplotlib")
    from shardmeter.explore.formats.plot import sweep_figure

    res = run_sweep(ONE, [("island[0].nodes", [1, 2, 4, 8]), ("training.micro_batch", [1, 2, 4])])
    fig = sweep_figure(res)
    ax = fig.axes[0]
    n_series, n_points = 3, 4
    spans = [p for p in ax.patches if p.get_alpha() == pytest.approx(0.16)]
    assert len(spans) == n_series * n_points  # every point of every series shaded
    strips = sorted({(round(p.get_path().get_extents(p.get_transform()).y0)) for p in spans})
    assert len(strips) == n_series  # each series in its own strip
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    data = ax.get_window_extent()
    assert legend.y1 <= data.y0 or legend.x0 >= data.x1  # outside the axes
