"""``plan --csv`` and ``--plot``, the plan table's collapsed rows and notes, and
docs/planning-questions.md: every command there runs and prints the figures the page shows."""

from __future__ import annotations

import csv
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import pytest
from cli_helpers import one_line_error, run

from shardmeter.explore.formats.plan_csv import ISLAND_FIELDS, PLAN_CSV_FIELDS, objective_value, plan_rows
from shardmeter.explore.formats.plan_plot import axis_labels, front_points, plan_figure, plan_points
from shardmeter.explore.formats.plan_table import equivalence_groups, plan_table
from shardmeter.explore.search.plan import search

ROOT = Path(__file__).resolve().parents[1]
SCALE = str(ROOT / "examples" / "studies" / "scale-nodes.toml")
TWO_DC = str(ROOT / "examples" / "multi-island" / "two-datacenters-allreduce.toml")
DILOCO_10B = str(ROOT / "examples" / "studies" / "diloco-h-10b.toml")
SMALL = {"cp": [1], "tp": [1, 2], "pp": [1, 2]}
TWO_DC_ONLY = ("--only", "tp=1,2", "--only", "pp=1", "--only", "cp=1")


@functools.cache
def _scale(objective: str, per_token: bool = False) -> dict:
    source: object = SCALE
    if per_token:  # the same scenario without a token budget
        with open(SCALE, "rb") as fh:
            source = tomllib.load(fh)
        del source["training"]["tokens"]  # type: ignore[index]
    return search(source, objective=objective, only=SMALL, top=8)


@functools.cache
def _two_dc() -> dict:
    return search(TWO_DC, objective="pareto", layouts="per-island", only={"tp": [1, 2], "pp": [1], "cp": [1]})


def _read(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# -- plan --csv ------------------------------------------------------------------------------------


def test_csv_has_one_row_per_returned_plan_with_its_figures(tmp_path, capsys):
    out = tmp_path / "plans.csv"
    code, stdout, _ = run(capsys, "plan", SCALE, "--objective", "pareto", *_flags(SMALL), "--csv", out)
    assert code == 0 and f"wrote {out}" in stdout
    rows = _read(out)
    doc = _scale("pareto")
    assert [int(r["rank"]) for r in rows] == [p["rank"] for p in doc["plans"]]
    for r, p in zip(rows, doc["plans"], strict=True):
        rep = p["report"]
        assert float(r["step_time_s"]) == pytest.approx(rep["step_time_s"], rel=1e-12)
        assert float(r["wall_clock_s"]) == pytest.approx(rep["wall_clock_s"], rel=1e-12)
        assert float(r["cost_usd"]) == pytest.approx(rep["cost_usd"], rel=1e-12)
        assert float(r["objective_value"]) == float(r["wall_clock_s"])  # pareto: fastest first
        assert r["island[0].name"] == "cloud" and int(r["island[0].nodes"]) == p["islands"][0]["nodes"]
        assert f"dp={p['parallelism']['dp']} " in r["island[0].layout"]
        assert float(r["island[0].share"]) == rep["islands"][0]["batch_per_step"]
    walls = [float(r["wall_clock_s"]) for r in rows]
    costs = [float(r["cost_usd"]) for r in rows]
    assert walls == sorted(walls) and costs == sorted(costs, reverse=True)  # a front


def test_csv_of_per_island_plans_gives_each_island_nodes_layout_and_share(tmp_path, capsys):
    out = tmp_path / "plans.csv"
    code, _, err = run(capsys, "plan", TWO_DC, "--layouts", "per-island", "--objective", "pareto",
                       *TWO_DC_ONLY, "--csv", out)  # fmt: skip
    assert code == 0, err
    rows = _read(out)
    doc = _two_dc()
    header = list(rows[0])
    assert header == [*PLAN_CSV_FIELDS, *(f"island[{j}].{f}" for j in range(2) for f in ISLAND_FIELDS)]
    assert len(rows) == len(doc["plans"]) > 1
    for r, p in zip(rows, doc["plans"], strict=True):
        for j, e in enumerate(p["islands"]):
            assert int(r[f"island[{j}].nodes"]) == (0 if e.get("dropped") else e["nodes"])
            if e.get("dropped"):
                assert r[f"island[{j}].layout"] == "" and float(r[f"island[{j}].share"]) == 0
            else:
                assert f"tp={e['parallelism']['tp']} " in r[f"island[{j}].layout"]
                assert float(r[f"island[{j}].share"]) == e["batch_share"]
        shares = [float(r[f"island[{j}].share"]) for j in range(2)]
        assert sum(shares) == 1024  # the global batch, split between the islands kept
    assert any(r["island[0].nodes"] == "0" for r in rows)  # the front drops an island


def test_csv_counts_plans_equal_in_time_and_cost():
    doc = _scale("time")
    header, rows = plan_rows(doc)
    eq, same = header.index("equivalent"), header.index("same_as_rank")
    groups = equivalence_groups(doc["plans"])
    assert any(len(g) > 1 for g in groups)  # the case this test is about
    for g in groups:
        for i in g:
            assert rows[i][eq] == len(g)
            assert rows[i][same] == (None if i == g[0] else doc["plans"][g[0]]["rank"])


def test_objective_value_follows_the_objective():
    t, c = _scale("time")["plans"][0], _scale("cost")["plans"][0]
    assert objective_value(t, "time") == t["report"]["wall_clock_s"]
    assert objective_value(c, "cost") == c["report"]["cost_usd"]
    per_tok = _scale("time", per_token=True)["plans"][0]
    assert per_tok["report"]["wall_clock_s"] is None
    assert objective_value(per_tok, "time") == per_tok["time_per_token_s"]
    q = {"report": {"quality": {"wall_clock_to_quality_s": 5.0, "cost_to_quality_usd": 7.0}}}
    assert objective_value(q, "time-to-quality") == 5.0 and objective_value(q, "cost-to-quality") == 7.0


# -- plan --plot -----------------------------------------------------------------------------------


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_plot_marks_each_returned_plan_by_rank_on_the_front():
    doc = _two_dc()
    fig = plan_figure(doc)
    (ax,) = fig.axes
    assert ax.get_xlabel() == "wall-clock (days)" and ax.get_ylabel() == "cost (USD)"
    assert _texts(ax) == [f"#{p['rank']}" for p in doc["plans"]]
    (line,) = ax.get_lines()
    front = front_points(doc)
    assert len(front) == len(doc["front"]["time_s"])
    assert list(line.get_xdata()) == [x for x, _ in front]
    assert list(line.get_ydata()) == [y for _, y in front]
    (dots,) = ax.collections
    pts = plan_points(doc)
    days = [p["report"]["wall_clock_s"] / 86400 for p in doc["plans"]]
    assert [tuple(o) for o in dots.get_offsets()] == [(x, y) for _, x, y in pts]
    assert [x for _, x, _ in pts] == pytest.approx(days)
    # the front the search kept is the returned plans here (objective pareto)
    assert [x for x, _ in front] == pytest.approx(sorted(days))


def test_plot_of_a_shared_layout_front_is_in_days_and_dollars():
    doc = _scale("pareto")
    front = front_points(doc)
    want = sorted((p["report"]["wall_clock_s"] / 86400, p["report"]["cost_usd"]) for p in doc["plans"])
    assert [v for pt in front for v in pt] == pytest.approx([v for pt in want for v in pt], rel=1e-9)


def test_plot_without_tokens_is_per_step():
    doc = _scale("pareto", per_token=True)
    assert doc["per_token"] and axis_labels(doc) == ("time per step (s)", "cost per step (USD)")
    pts = plan_points(doc)
    p = doc["plans"][0]
    assert pts[0][1] == p["report"]["step_time_s"]
    gpu_h = p["report"]["gpus"] * p["report"]["step_time_s"] / 3600
    assert pts[0][2] == pytest.approx(gpu_h * p["report"]["islands"][0]["usd_per_gpu_hour"], rel=1e-9)
    want = sorted((x, y) for _, x, y in pts)
    assert [v for pt in front_points(doc) for v in pt] == pytest.approx([v for pt in want for v in pt])
    (ax,) = plan_figure(doc).axes
    assert ax.get_xlabel() == "time per step (s)"


def test_plot_of_the_fastest_plans_has_no_front_but_every_plan():
    doc = _scale("time")
    assert front_points(doc) == []
    (ax,) = plan_figure(doc).axes
    assert ax.get_lines() == [] and len(_texts(ax)) == len(doc["plans"])


def test_plot_writes_a_png_and_never_pyplot(tmp_path):
    code = (
        "import sys; from shardmeter.cli.app import main;"
        f"rc = main(['plan', {SCALE!r}, '--only', 'tp=1', '--only', 'pp=1', '--only', 'cp=1', '--plot', "
        f"{str(tmp_path / 'p.png')!r}]); assert rc == 0, rc;"
        "assert 'matplotlib.pyplot' not in sys.modules"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["MPLBACKEND"] = "TkAgg"  # a GUI backend asked for: never used
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-800:]
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


# -- output safety ---------------------------------------------------------------------------------


def _flags(only: dict) -> list[str]:
    return [x for k, v in only.items() for x in ("--only", f"{k}={','.join(map(str, v))}")]


def test_a_plot_suffix_other_than_png_or_svg_names_plot(tmp_path, capsys):
    code, _, err = run(capsys, "plan", SCALE, *_flags(SMALL), "--plot", tmp_path / "front.pdf")
    assert code == 2
    assert one_line_error(err).startswith(f"shardmeter: error: --plot {tmp_path / 'front.pdf'}: ")
    assert not (tmp_path / "front.pdf").exists()


def test_outputs_never_replace_the_scenario_or_each_other_or_a_special_file(tmp_path, capsys):
    scen = tmp_path / "s.toml"
    scen.write_text(Path(SCALE).read_text(encoding="utf-8"), encoding="utf-8")
    before = scen.read_bytes()
    code, _, err = run(capsys, "plan", scen, "--csv", scen)
    assert code == 2 and "--csv" in one_line_error(err) and "refusing to overwrite an input" in err
    code, _, err = run(capsys, "plan", scen, "--csv", tmp_path / "a.png", "--plot", tmp_path / "a.png")
    assert code == 2 and "give each output its own file" in one_line_error(err)
    (tmp_path / "dir").mkdir()
    code, _, err = run(capsys, "plan", scen, "--csv", tmp_path / "dir")
    assert code == 2 and "--csv" in one_line_error(err)
    (tmp_path / "link.csv").symlink_to(tmp_path / "dir")
    code, _, err = run(capsys, "plan", scen, "--csv", tmp_path / "link.csv")
    assert code == 2 and "--csv" in one_line_error(err)
    assert scen.read_bytes() == before and (tmp_path / "dir").is_dir()


def test_csv_replaces_a_regular_file_keeping_its_mode(tmp_path, capsys):
    out = tmp_path / "old.csv"
    out.write_text("old\n", encoding="utf-8")
    out.chmod(0o640)
    code, _, _ = run(capsys, "plan", SCALE, *_flags(SMALL), "--csv", out)
    assert code == 0 and _read(out)[0]["rank"] == "1" and (out.stat().st_mode & 0o777) == 0o640


# -- the table -------------------------------------------------------------------------------------


def test_table_collapses_plans_of_equal_time_and_cost_into_one_row():
    doc = _scale("time")
    text = plan_table(doc)
    groups = equivalence_groups(doc["plans"])
    big = next(g for g in groups if len(g) > 1)
    ranks = [doc["plans"][i]["rank"] for i in big]
    row = next(ln for ln in text.splitlines() if ln.startswith(f"{ranks[0]}-{ranks[-1]} "))
    assert f" x{len(big)} " in row
    body = [ln for ln in text.splitlines() if re.match(r"^\d+(-\d+)?\s", ln)]
    assert len(body) == len(groups) < len(doc["plans"])
    assert "stands for N plans of equal step time and cost" in text


def test_table_says_how_infeasible_candidates_are_counted_and_names_the_front_unit():
    shared = plan_table(_scale("pareto"))
    assert "infeasible candidates by reason (the reasons overlap" in shared
    assert "Pareto front of wall-clock (days) vs cost (USD)" in shared
    per = plan_table(_two_dc())
    assert "infeasible candidates by primary reason (each counted once" in per
    assert "collapsed by the search" in per  # the search's own count of equal plans
    assert "time per token (s) vs cost per million tokens (USD)" in plan_table(
        _scale("pareto", per_token=True)
    )


# -- docs/planning-questions.md --------------------------------------------------------------------

DOC = ROOT / "docs" / "planning-questions.md"
#: What changes from run to run: the search's own speed.
VOLATILE = re.compile(r"scored in [\d.]+ s \([\d.]+ M/s\)")
#: The figures compared: dollars, durations, percentages and plain numbers.
FIGURE = re.compile(r"\$[\d,]+(?:\.\d+)?|\d[\d,]*(?:\.\d+)?(?:\s?(?:d|h|s|ms|%))?")


def _doc_examples() -> list:
    """A ``pytest.param(section, command, output)`` per ``sh`` block followed by a ``text`` block."""
    text = DOC.read_text(encoding="utf-8")
    out = []
    for n, sec in enumerate(re.split(r"^## ", text, flags=re.M)[1:]):
        title = sec.splitlines()[0]
        for k, (cmd, shown) in enumerate(re.findall(r"```sh\n(.*?)```\s*```text\n(.*?)```", sec, re.S)):
            out.append(pytest.param(title, cmd.strip(), shown, id=f"question{n + 1}-command{k + 1}"))
    return out


def _figures(lines: list[str]) -> list[str]:
    return [m.group(0) for ln in lines for m in FIGURE.finditer(VOLATILE.sub("", ln))]


def test_the_page_asks_the_three_questions_each_with_its_command_and_output():
    titles = [p.values[0] for p in _doc_examples()]
    assert len(set(titles)) >= 3 and len(titles) >= 4
    assert "planning-questions.md" in (ROOT / "docs" / "multi-island.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("section", "command", "shown"), _doc_examples())
def test_every_documented_command_prints_the_figures_the_page_shows(section, command, shown):
    """Each command runs as written from the repository root (``shardmeter`` and ``python`` are
    this interpreter); the page's output block is what it prints, a ``...`` line standing for
    lines left out: each piece's first line is found in the output (after the piece before), and
    the figures of the piece's lines match those of the output's lines from there."""
    shell = re.sub(r"^shardmeter ", f"{sys.executable} -m shardmeter ", command.replace("\\\n", " "))
    shell = re.sub(r"\|\s*python ", f"| {sys.executable} ", shell)
    p = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, (command, p.stderr[-800:])
    got = [VOLATILE.sub("", ln) for ln in p.stdout.splitlines()]
    pieces = re.split(r"^\.\.\.\n", shown, flags=re.M)
    at = 0
    for piece in pieces:
        want = [VOLATILE.sub("", ln) for ln in piece.rstrip("\n").splitlines()]
        starts = [i for i in range(at, len(got)) if got[i] == want[0]]
        assert starts, f"{section}: the output no longer has the line {want[0]!r}:\n{p.stdout[:3000]}"
        at = starts[0]
        excerpt = got[at : at + len(want)]
        assert _figures(excerpt) == _figures(want), f"{section}: rerun `{command}` and paste its output"
        at += len(want)
    assert _figures(want), "a piece without figures checks nothing"


def test_table_and_csv_show_the_figures_to_quality_when_convergence_is_priced():
    doc = search(
        DILOCO_10B, only={"tp": [1], "pp": [1], "cp": [1]}, top=3, overrides=("sync.inner_steps=500",)
    )
    q = doc["plans"][0]["report"]["quality"]
    assert q["tokens_factor"] > 1  # H = 500 costs tokens on a 10B model (docs/convergence.md)
    text = plan_table(doc)
    assert "tokens x" in text and "cost to q." in text
    row = next(ln for ln in text.splitlines() if re.match(r"^1(-\d+)?\s", ln))
    assert f"{q['tokens_factor']:.3f}" in row and f"${q['cost_to_quality_usd']:,.0f}" in row
    header, rows = plan_rows(doc)
    assert rows[0][header.index("cost_to_quality_usd")] == q["cost_to_quality_usd"]
    assert "tokens x" not in plan_table(_scale("time"))  # not priced: no such columns


def test_the_command_line_offers_every_objective_of_the_planner():
    from shardmeter.explore.cli import PLAN_OBJECTIVES
    from shardmeter.explore.search.plan import OBJECTIVES

    assert tuple(OBJECTIVES) == PLAN_OBJECTIVES
    block = (ROOT / "docs" / "scenario.md").read_text(encoding="utf-8")
    assert f"[--objective {'|'.join(OBJECTIVES)}]" in block


def test_cost_to_quality_on_the_command_line_ranks_by_cost_to_quality(tmp_path, capsys):
    out = tmp_path / "q.csv"
    code, stdout, err = run(capsys, "plan", DILOCO_10B, "--objective", "cost-to-quality", "--only", "tp=1",
                            "--only", "pp=1", "--only", "cp=1", "--only", "inner_steps=100,500", "--top", "4",
                            "--csv", out)  # fmt: skip
    assert code == 0, err
    assert "cheapest plans to data-parallel quality" in stdout
    rows = _read(out)
    values = [float(r["objective_value"]) for r in rows]
    assert values == sorted(values) and all(r["objective"] == "cost-to-quality" for r in rows)
    assert all(float(r["objective_value"]) == float(r["cost_to_quality_usd"]) for r in rows)


def test_no_feasible_plan_still_writes_a_header_and_an_empty_figure(tmp_path, capsys):
    gpt3 = ROOT / "examples" / "gpt3-175b-a100.toml"
    out, png = tmp_path / "none.csv", tmp_path / "none.png"
    code, stdout, _ = run(capsys, "plan", gpt3, "--max-gpus", "1", "--only", "tp=1", "--only", "pp=1",
                          "--only", "cp=1", "--json", "--csv", out, "--plot", png)  # fmt: skip
    assert code == 0
    doc = json.loads(stdout)
    assert doc["plans"] == []
    assert out.read_text(encoding="utf-8").splitlines() == [",".join(PLAN_CSV_FIELDS)]
    assert png.read_bytes()[:4] == b"\x89PNG"
    (ax,) = plan_figure(doc).axes
    assert _texts(ax) == ["no plan with a known time and cost"]
