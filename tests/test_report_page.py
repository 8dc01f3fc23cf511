"""``shardmeter report FILE --html OUT.html``: one self-contained page whose figures are the
report's, whose charts hold the report's bars, whose scenario texts are escaped, and whose output
never replaces an input or a special file; rendered in headless Chromium (required under CI)."""

from __future__ import annotations

import math
import os
import pathlib
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from cli_helpers import one_line_error, run

from shardmeter import estimate
from shardmeter.cli.app import COMMANDS
from shardmeter.render.page import HEADLINE, fmt
from shardmeter.validate.run import validate_paths

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPT3 = str(ROOT / "examples" / "gpt3-175b-1536-a100.toml")
THREE = str(ROOT / "examples" / "multi-island" / "three-islands.toml")
PUBLISHED = ROOT / "shardmeter" / "validation_data" / "published"
VALIDATION = [str(PUBLISHED / "narayanan2021"), str(PUBLISHED / "intellect-1")]


@pytest.fixture(autouse=True)
def _report_command(monkeypatch):
    """The command, whether or not cli.py registers it yet (its own registration is kept)."""
    monkeypatch.setitem(
        COMMANDS, "report", COMMANDS.get("report", "shardmeter.cli.report_page:add_report_parser")
    )


class Page(HTMLParser):
    """Every element of the page: ``(tag, attrs)`` in order, with the text of each cell."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.cells: list[tuple[dict[str, str], str]] = []
        self._cell: dict[str, str] | None = None
        self._text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if tag == "td":
            self._cell, self._text = a, []

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append((self._cell, "".join(self._text)))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._text.append(data)

    def find(self, tag: str, **want: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and all(a.get(k) == v for k, v in want.items())]


def _write(capsys, tmp_path, *args) -> tuple[pathlib.Path, str]:
    out = tmp_path / "out" / "page.html"
    out.parent.mkdir(exist_ok=True)
    code, stdout, err = run(capsys, "report", *args, "--html", out)
    assert code == 0, err
    assert stdout.strip() == f"wrote {out}"
    return out, out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def gpt3_report():
    return estimate(GPT3)


@pytest.fixture
def gpt3_page(capsys, tmp_path):
    return _write(capsys, tmp_path, GPT3, *(a for p in VALIDATION for a in ("--validation", p)))


def _value(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    return repr(float(v)) if isinstance(v, (int, float)) else str(v)


def test_the_page_is_one_file_with_no_script_nor_external_reference(gpt3_page):
    out, text = gpt3_page
    assert sorted(os.listdir(out.parent)) == ["page.html"]
    page = Page(text)
    tags = {t for t, _ in page.elements}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}, tags
    for tag, attrs in page.elements:
        for key in ("src", "href", "xlink:href"):
            v = attrs.get(key, "")
            assert "http" not in v and "//" not in v, (tag, key, v)
        # the only URL in an attribute is the SVG namespace, an identifier never fetched
        for key, v in attrs.items():
            if key != "xmlns":
                assert "http" not in v and not v.startswith("//"), (tag, key, v)
                assert "url(" not in v or v.startswith("url(#"), (tag, key, v)
    assert [a["xmlns"] for a in page.find("svg")] == ["http://www.w3.org/2000/svg"] * 3
    style = text[text.index("<style>") : text.index("</style>")]
    assert "@import" not in style and "url(" not in style and "@font-face" not in style


def test_headline_figures_are_the_reports(gpt3_page, gpt3_report):
    d = gpt3_report.to_dict()
    page = Page(gpt3_page[1])
    rows = page.find("tr")
    keyed = [a["data-key"] for a in rows if "data-key" in a]
    assert keyed[: len(HEADLINE)] == [k for k, _, _ in HEADLINE]
    cells = iter(page.cells)
    for key, _, kind in HEADLINE:
        attrs, shown = next(cells)
        assert attrs["data-value"] == _value(d[key]), key
        assert shown == fmt(d[key], kind), key
        if isinstance(d[key], float):
            assert float(attrs["data-value"]) == d[key]


def test_layout_table_is_the_reports_layout(gpt3_page, gpt3_report):
    lay = gpt3_report.to_dict().get("layout") or {}
    page = Page(gpt3_page[1])
    assert page.find("table", **{"class": "layout"})
    text = gpt3_page[1]
    start = text.index('<table class="layout">')
    sub = Page(text[start : text.index("</table>", start)])
    values = {a["data-value"] for a, _ in sub.cells if "data-value" in a}
    for key in ("tp", "pp", "dp", "virtual_stages"):
        expected = lay.get(key, {"tp": 8, "pp": 16, "dp": 12, "virtual_stages": 2}[key])
        assert _value(expected) in values, key
    assert "<td>a100-sxm-80gb</td>" in text[start:]


def test_breakdown_chart_holds_the_reports_bars(gpt3_page, gpt3_report):
    page = Page(gpt3_page[1])
    charts = [a["data-chart"] for a in page.find("svg") if "data-chart" in a]
    assert charts == ["breakdown", "memory", "scatter"]
    exposed = {
        a["data-term"]: float(a["data-s"])
        for a in page.find("rect", **{"class": "seg", "data-row": "exposed"})
    }
    assert exposed == {k: v for k, v in gpt3_report.breakdown_s.items() if v > 0}
    hidden = {
        a["data-term"]: float(a["data-s"])
        for a in page.find("rect", **{"class": "seg", "data-row": "hidden"})
    }
    assert hidden == gpt3_report.overlapped_s
    # bar widths are proportional to the seconds
    segs = page.find("rect", **{"class": "seg", "data-row": "exposed"})
    widths = [float(a["width"]) / float(a["data-s"]) for a in segs]
    assert max(widths) == pytest.approx(min(widths), rel=0.02)


def test_memory_chart_holds_the_reports_split_and_the_capacity(gpt3_page, gpt3_report):
    page = Page(gpt3_page[1])
    parts = {
        a["data-part"]: float(a["data-gb"]) for a in page.find("rect", **{"class": "seg"}) if "data-part" in a
    }
    split = gpt3_report.to_dict().get("memory_breakdown_gb")
    assert parts == (split or {"total": gpt3_report.memory_per_gpu_gb})
    assert sum(parts.values()) == pytest.approx(gpt3_report.memory_per_gpu_gb, rel=1e-9)
    (cap,) = page.find("line", **{"class": "capacity"})
    assert float(cap["data-gb"]) == gpt3_report.memory_capacity_gb == 80.0


def test_validation_scatter_and_tables_are_validates(gpt3_page):
    val = validate_paths(VALIDATION)
    text = gpt3_page[1]
    page = Page(text)
    points = page.find("circle", **{"class": "point"})
    assert len(points) == len(val["cases"]) > 10
    assert sorted((float(p["data-measured"]), float(p["data-predicted"])) for p in points) == sorted(
        (c["measured"], c["predicted"]) for c in val["cases"]
    )
    assert page.find("line", **{"class": "identity"}) and page.find("polygon", **{"class": "band"})
    start = text.index('<table class="cases">')
    cases = Page(text[start : text.index("</table>", start)]).cells
    assert len(cases) == 6 * len(val["cases"])
    for i, c in enumerate(val["cases"]):
        row = cases[6 * i : 6 * i + 6]
        assert row[0][1] == os.path.basename(c["file"]) and row[2][1] == c["field"]
        assert [float(a["data-value"]) for a, _ in row[3:]] == [c["measured"], c["predicted"], c["error"]]
        assert row[5][1] == f"{c['error']:+.1%}"
    start = text.index('<table class="groups">')
    groups = Page(text[start : text.index("</table>", start)]).cells
    assert [(g[1], float(m[0]["data-value"])) for g, _, m in zip(*[iter(groups)] * 3, strict=True)] == list(
        val["mape_by_group"].items()
    )
    assert float(page.find("p", **{"class": "overall"})[0]["data-value"]) == val["overall_mape"]


def test_several_islands_get_their_own_bars_and_rows(capsys, tmp_path):
    rep = estimate(THREE)
    _, text = _write(capsys, tmp_path, THREE)
    page = Page(text)
    assert [a["data-island"] for a in page.find("tr") if "data-island" in a] == [
        i["name"] for i in rep.islands
    ]
    bars = {a["data-bar"] for a in page.find("rect", **{"class": "seg"}) if "data-bar" in a}
    assert bars == {f"island {i['name']}" for i in rep.islands}
    assert len(page.find("line", **{"class": "capacity"})) == 3
    assert {a["data-term"] for a in page.find("rect", **{"data-row": "island"})} >= {"compute", "idle"}
    assert not page.find("svg", **{"data-chart": "scatter"})


def test_scenario_texts_are_escaped(capsys, tmp_path):
    evil = "<img src=x onerror=alert(1)>&"
    src = tmp_path / "a<b>.toml"
    shutil.copy(GPT3, src)
    _, text = _write(capsys, tmp_path, src, "--set", f"island[0].name={evil}")
    page = Page(text)
    assert not page.find("img") and "<img" not in text and "<b>" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;&amp;" in text
    assert "a&lt;b&gt;.toml" in text


def test_an_infeasible_plan_is_a_page_with_its_reasons(capsys, tmp_path, gpt3_report):
    _, text = _write(capsys, tmp_path, GPT3, "--set", "parallelism.tp=1")
    bad = estimate(GPT3, overrides=["parallelism.tp=1"])
    page = Page(text)
    assert page.find("ul", **{"class": "reasons"}) and bad.reasons[0].split(":")[0] in text
    assert not page.find("rect", **{"data-row": "exposed"}) and "infeasible: no step time" in text
    assert float(page.find("line", **{"class": "capacity"})[0]["data-gb"]) == 80.0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((GPT3,), "--html"),
        ((GPT3, "--html", GPT3), "--html"),
        ((GPT3, "--set", "parallelism.nope=1", "--html", "{tmp}/x.html"), "parallelism.nope"),
        ((GPT3, "--validation", "{tmp}/missing", "--html", "{tmp}/x.html"), "--validation"),
        ((GPT3, "--html", "{tmp}"), "--html"),
        ((GPT3, "--html", "/dev/null"), "--html /dev/null: is a character device"),
        ((GPT3, "--validation", "{tmp}/m.toml", "--html", "{tmp}/m.toml"), "--html"),
        ((str(ROOT / "nope.toml"), "--html", "{tmp}/x.html"), "nope.toml"),
    ],
    ids=[
        "no-html",
        "html-is-scenario",
        "bad-set",
        "missing-validation",
        "html-is-dir",
        "dev-null",
        "html-is-validation",
        "no-file",
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, args, needle):
    (tmp_path / "m.toml").write_bytes(pathlib.Path(GPT3).read_bytes() + b"\n[measured]\nmfu = 0.5\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    scenario = pathlib.Path(GPT3).read_bytes()
    code, _, err = run(capsys, "report", *(a.format(tmp=tmp_path) for a in args))
    assert code == 2
    assert needle in one_line_error(err)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert pathlib.Path(GPT3).read_bytes() == scenario


def test_an_existing_page_is_replaced(capsys, tmp_path):
    out = tmp_path / "out" / "page.html"
    out.parent.mkdir()
    out.write_text("old", encoding="utf-8")
    _write(capsys, tmp_path, GPT3)
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_help_has_an_example(capsys):
    code, out, _ = run(capsys, "report", "--help")
    assert code == 0 and "--validation" in out and "  shardmeter report examples/" in out


# -- in a browser -------------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI") or os.environ.get("SHARDMETER_REQUIRE_BROWSER"):
        pytest.fail("no chromium or chromium-browser on PATH under CI: install Debian's `chromium` package")
    pytest.skip("no chromium or chromium-browser on PATH (neither CI nor SHARDMETER_REQUIRE_BROWSER is set)")


def _browse(tmp_path, page: pathlib.Path, *flags: str) -> subprocess.CompletedProcess:
    cmd = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        *flags,
        page.as_uri(),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-1500:]
    return p


def test_chromium_builds_the_charts_into_its_dom(gpt3_page, tmp_path):
    out, text = gpt3_page
    dom = _browse(tmp_path, out, "--dump-dom").stdout
    page = Page(dom)
    assert [a["data-chart"] for a in page.find("svg") if "data-chart" in a] == [
        "breakdown",
        "memory",
        "scatter",
    ]
    source = Page(text)
    for tag, cls in (("rect", "seg"), ("circle", "point"), ("line", "capacity"), ("polygon", "band")):
        assert len(page.find(tag, **{"class": cls})) == len(source.find(tag, **{"class": cls})) > 0, (
            tag,
            cls,
        )
    assert "ShardMeter report: gpt3-175b-1536-a100.toml" in dom


def test_chromium_screenshot_is_not_blank(gpt3_page, tmp_path):
    import matplotlib.image

    out, _ = gpt3_page
    shot = tmp_path / "shot.png"
    _browse(tmp_path, out, f"--screenshot={shot}", "--window-size=1200,1600")
    img = matplotlib.image.imread(str(shot))
    assert img.shape[:2] == (1600, 1200)
    rgb = img[..., :3]
    ink = (rgb < 0.85).any(axis=-1).mean()
    colours = len({tuple(px) for px in (rgb[::7, ::7] * 255).astype(int).reshape(-1, 3)})
    assert ink > 0.02 and colours > 20, (ink, colours)
    # the breakdown's compute bar (green) is painted
    green = ((abs(rgb[..., 0] - 0x4C / 255) < 0.05) & (abs(rgb[..., 1] - 0x9F / 255) < 0.05)).sum()
    assert green > 2000, green


def test_a_failed_validation_case_is_on_the_page_and_on_stderr(capsys, tmp_path):
    """The page is written (exit 0) with the failed case listed, and stderr names it in one line."""
    bad = tmp_path / "runs" / "bad.toml"
    bad.parent.mkdir()
    bad.write_text("[model]\nlayers = 1\n[measured]\nmfu = 0.5\n", encoding="utf-8")
    good = PUBLISHED / "narayanan2021"
    out = tmp_path / "page.html"
    code, stdout, err = run(capsys, "report", GPT3, "--validation", good, "--validation", bad, "--html", out)
    assert code == 0 and stdout.strip() == f"wrote {out}"
    (line,) = err.strip().splitlines()
    assert line.startswith("warning: 1 --validation case(s) failed, listed on the page: ")
    assert str(bad) in line
    assert "bad.toml" in out.read_text(encoding="utf-8")
