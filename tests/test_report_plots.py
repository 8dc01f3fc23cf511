"""``plot_report`` (``estimate --plot``): the charts' data follows the report, the PNG and SVG are
drawn without a display, and bad paths or a missing matplotlib are one-line errors."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from shardmeter import estimate
from shardmeter.errors import ShardMeterError
from shardmeter.render.plots import breakdown_rows, check_plot_path, memory_bars, plot_report

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPT3 = str(ROOT / "examples" / "gpt3-175b-1536-a100.toml")
THREE = str(ROOT / "examples" / "multi-island" / "three-islands.toml")
SPLIT = {"weights": 4.0, "gradients": 2.0, "optimizer": 12.0, "activations": 10.5, "other": 1.5}


@pytest.fixture(scope="module")
def gpt3():
    return estimate(GPT3)


@pytest.fixture(scope="module")
def three():
    return estimate(THREE)


def test_breakdown_rows_are_the_reports_exposed_and_hidden_time(gpt3):
    rows = breakdown_rows(gpt3)
    assert [kind for _, kind, _ in rows] == ["exposed", "hidden"]
    exposed, hidden = rows[0][2], rows[1][2]
    assert exposed == {k: v for k, v in gpt3.breakdown_s.items() if v > 0}
    assert sum(exposed.values()) == pytest.approx(gpt3.step_time_s, rel=1e-9)
    assert hidden == gpt3.overlapped_s and hidden["dp_comm"] > 0


def test_several_islands_get_a_bar_each_that_adds_up_to_the_step(three):
    rows = breakdown_rows(three)
    islands = [r for r in rows if r[1] == "island"]
    assert [label for label, _, _ in islands] == [f"island {i['name']}" for i in three.islands]
    for _, _, terms in islands:
        assert sum(terms.values()) == pytest.approx(three.step_time_s, rel=1e-9)


def test_an_infeasible_report_has_no_breakdown_but_its_memory(gpt3):
    bad = estimate(GPT3, overrides=["parallelism.tp=1"])
    assert not bad.feasible
    assert breakdown_rows(bad) == []
    d = bad.to_dict() | {"memory_breakdown_gb": {}}
    assert memory_bars(d) == [("per GPU", {"total": bad.memory_per_gpu_gb}, bad.memory_capacity_gb)]


def test_memory_falls_back_to_the_total_and_uses_the_split_when_there_is_one(gpt3):
    d = gpt3.to_dict()
    d.pop("memory_breakdown_gb", None)
    assert memory_bars(d) == [("per GPU", {"total": gpt3.memory_per_gpu_gb}, 80.0)]
    d["memory_breakdown_gb"] = {
        "other": 1.5,
        "activations": 10.5,
        "weights": 4.0,
        "optimizer": 12.0,
        "gradients": 2.0,
    }
    ((_, parts, cap),) = memory_bars(d)
    assert list(parts) == ["weights", "gradients", "optimizer", "activations", "other"]
    assert parts == SPLIT and cap == 80.0


def test_memory_has_one_bar_per_island_with_its_own_split_if_any(three):
    d = three.to_dict()
    for isl in d["islands"]:
        isl.pop("memory_breakdown_gb", None)
    d["memory_breakdown_gb"] = {}
    d["islands"][1]["memory_breakdown_gb"] = SPLIT
    d["islands"][2]["memory_capacity_gb"] = 141.0
    bars = memory_bars(d)
    assert [b[0] for b in bars] == [f"island {i['name']}" for i in three.islands]
    assert bars[0][1] == {"total": three.islands[0]["memory_per_gpu_gb"]}
    assert bars[1][1] == SPLIT
    assert [b[2] for b in bars] == [80.0, 80.0, 141.0]


def test_the_reports_split_goes_to_the_busiest_island(three):
    d = three.to_dict()
    for isl in d["islands"]:
        isl.pop("memory_breakdown_gb", None)
    d["memory_breakdown_gb"] = SPLIT
    mem = [i["memory_per_gpu_gb"] for i in three.islands]
    busiest = mem.index(max(mem))
    parts = [b[1] for b in memory_bars(d)]
    assert parts[busiest] == SPLIT
    assert all(p == {"total": m} for j, (p, m) in enumerate(zip(parts, mem, strict=True)) if j != busiest)


def test_png_is_drawn_and_not_blank(gpt3, tmp_path):
    import matplotlib.image

    out = tmp_path / "plot.png"
    plot_report(gpt3, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(str(out))
    assert img.shape[0] > 300 and img.shape[1] > 800
    ink = (img[..., :3] < 0.9).any(axis=-1).mean()
    assert ink > 0.05, f"only {ink:.1%} of the image is drawn on"


def test_svg_by_suffix_with_both_charts(three, tmp_path):
    out = tmp_path / "plot.svg"
    plot_report(three.to_dict() | {"memory_breakdown_gb": SPLIT}, out)
    text = out.read_text(encoding="utf-8")
    root = ET.fromstring(text)
    assert root.tag.endswith("svg")
    # matplotlib writes each text as a comment before its glyphs
    for words in (
        "step time breakdown",
        "memory per GPU",
        "island us-east",
        "capacity (80 GB)",
        "hidden (overlapped)",
    ):
        assert f"<!-- {words} -->" in text, words


def test_bad_suffix_and_special_files_are_one_line_errors(gpt3, tmp_path):
    with pytest.raises(
        ShardMeterError, match=r"^--plot .*out\.pdf: the file name must end in \.png or \.svg"
    ):
        plot_report(gpt3, tmp_path / "out.pdf")
    with pytest.raises(ShardMeterError, match="must end in"):
        check_plot_path(tmp_path / "out")
    folder = tmp_path / "dir.png"
    folder.mkdir()
    with pytest.raises(ShardMeterError, match=r"--plot .*dir\.png: is a directory"):
        plot_report(gpt3, folder)
    assert folder.is_dir() and not list(folder.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.png"]  # no temporary file left


def test_an_existing_file_is_replaced_and_keeps_its_mode(gpt3, tmp_path):
    out = tmp_path / "plot.png"
    out.write_bytes(b"old")
    os.chmod(out, 0o640)
    plot_report(gpt3, out)
    assert out.read_bytes()[:4] == b"\x89PNG" and (out.stat().st_mode & 0o777) == 0o640


def test_missing_matplotlib_names_the_plot_extra(gpt3, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ShardMeterError, match=r"^--plot needs matplotlib: pip install 'shardmeter\[plot\]'$"):
        plot_report(gpt3, tmp_path / "x.png")
    with pytest.raises(ShardMeterError, match=r"shardmeter\[plot\]"):
        check_plot_path(tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_plotting_never_needs_a_display_nor_pyplot(tmp_path):
    code = (
        "import sys; from shardmeter import estimate; from shardmeter.render.plots import plot_report;"
        f"plot_report(estimate({GPT3!r}), {str(tmp_path / 'p.png')!r});"
        "assert 'matplotlib.pyplot' not in sys.modules"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["MPLBACKEND"] = "TkAgg"  # a GUI backend asked for: never used
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-800:]
    assert (tmp_path / "p.png").stat().st_size > 10_000
