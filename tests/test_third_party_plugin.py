"""Third-party plugins, for real: distributions installed with pip into a
temporary virtual environment and found through the ``shardmeter`` entry point.

One virtual environment (``plugin_venv.make_venv``: ``--system-site-packages``, so the installed
ShardMeter and its dependencies are visible without a network) holds four
distributions, installed with one ``pip install --no-deps``:

* ``shardmeter-acme`` (``examples/plugins/shardmeter-acme``): a GPU, a link,
  a sharding strategy and a cost source;
* ``shardmeter-broken``: a module that raises ImportError when imported;
* ``shardmeter-dup``: re-registers the bundled GPU ``a100-sxm-80gb``;
* ``shardmeter-acme-fork``: registers a second entry point called ``acme``.

Each test switches the ones it is not about off with
``SHARDMETER_DISABLE_PLUGINS`` (entry-point or distribution names).
"""

from __future__ import annotations

import json
import pathlib
import re
import textwrap

import pytest
from plugin_venv import Venv, make_venv, needs_pip
from plugin_venv import norm as _norm

ROOT = pathlib.Path(__file__).resolve().parents[1]
ACME_SRC = ROOT / "examples" / "plugins" / "shardmeter-acme"
EXAMPLE = ROOT / "examples" / "gpt3-175b-a100.toml"
OTHERS = ("broken", "dup", "shardmeter-acme-fork")

pytestmark = needs_pip


def _write_dist(
    folder: pathlib.Path, dist: str, version: str, module: str, ep: str, code: str
) -> pathlib.Path:
    pkg = folder / dist
    pkg.mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "{version}"

        [project.entry-points.shardmeter]
        {ep} = "{module}"

        [tool.setuptools]
        py-modules = ["{module}"]
        """)
    )
    (pkg / f"{module}.py").write_text(textwrap.dedent(code))
    return pkg


BROKEN = """\
raise ImportError("libacme_driver.so: cannot open shared object file")
"""

DUP = """\
import shardmeter

@shardmeter.hookimpl
def shardmeter_hardware_profiles():
    yield shardmeter.HardwareProfile(
        name="a100-sxm-80gb", memory_gb=80.0, memory_bandwidth_gb_s=2039.0, peak_tflops={"bf16": 312.0})
"""

FORK = """\
import shardmeter

@shardmeter.hookimpl
def shardmeter_interconnect_models():
    yield shardmeter.Interconnect(name="fork-link", bandwidth_gb_s=10.0, latency_us=5.0)
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Venv:
    tmp = tmp_path_factory.mktemp("plugins")
    src = tmp / "src"
    broken = _write_dist(src, "shardmeter-broken", "0.3.0", "shardmeter_broken", "broken", BROKEN)
    dup = _write_dist(src, "shardmeter-dup", "0.2.0", "shardmeter_dup", "dup", DUP)
    fork = _write_dist(src, "shardmeter-acme-fork", "0.1.0", "shardmeter_acme_fork", "acme", FORK)
    return make_venv(tmp, [ACME_SRC, broken, dup, fork], disable=OTHERS)


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# -- the vendor plugin ----------------------------------------------------------------------------


def test_plugins_lists_the_vendor_parts_with_their_distribution(venv):
    res = venv.run("plugins", "--json")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    parts = {(p["kind"], p["name"]): p for p in json.loads(res.stdout)["parts"]}
    for kind, name in [
        ("hardware", "acme-x1"),
        ("interconnect", "acme-link"),
        ("sharding", "acme-zero2"),
        ("cost", "acme-cloud"),
    ]:
        part = parts[(kind, name)]
        assert part["plugin"] == "acme"
        dist, version = part["distribution"].split()
        assert (_norm(dist), version) == ("shardmeter-acme", "0.1.0")
    bundled = parts[("hardware", "a100-sxm-80gb")]
    assert bundled["plugin"] == "hardware" and _norm(bundled["distribution"].split()[0]) == "shardmeter"


def test_plugins_table_names_the_vendor_distribution(venv):
    res = venv.run("plugins")
    assert res.returncode == 0, res.stderr
    row = next(ln for ln in res.stdout.splitlines() if "acme-x1" in ln)
    assert "acme" in row and re.search(r"shardmeter[-_]acme\s+0\.1\.0", row)


def test_a_scenario_uses_the_vendor_gpu_link_strategy_and_price(venv):
    res = venv.run("estimate", str(ACME_SRC / "acme-scenario.toml"), "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["feasible"] is True, report["reasons"]
    assert report["islands"][0]["gpu"] == "acme-x1"
    assert report["memory_capacity_gb"] == pytest.approx(96.0)
    assert report["cost_usd"] and report["cost_usd"] > 0
    assert not any("acme_bucket_mb" in n for n in report["notes"])


def test_vendor_parts_work_through_set_and_python_m(venv):
    res = venv.run(
        "estimate",
        str(EXAMPLE),
        "--set",
        "island[0].gpu=acme-x1",
        "--set",
        "island[0].inter_node=acme-link",
        "--set",
        'parallelism.sharding="acme-zero2"',
        "--json",
        module=True,
    )
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["feasible"] and report["islands"][0]["gpu"] == "acme-x1"


def test_vendor_strategy_option_is_a_note_under_another_strategy(venv):
    res = venv.run("estimate", str(EXAMPLE), "--set", "parallelism.acme_bucket_mb=50", "--json")
    assert res.returncode == 0, res.stderr
    notes = json.loads(res.stdout)["notes"]
    assert any("acme_bucket_mb" in n and "acme-zero2" in n for n in notes), notes


def test_without_the_plugin_its_parts_are_unknown_names(venv):
    res = venv.run("estimate", str(ACME_SRC / "acme-scenario.toml"), disable=(*OTHERS, "acme"))
    assert res.returncode == 2
    line = _one_line(res.stderr)  # the strategy's option is the first key nobody reads
    assert "acme-scenario.toml" in line and "parallelism.acme_bucket_mb" in line and "unknown key" in line
    res = venv.run("estimate", str(EXAMPLE), "--set", "island[0].gpu=acme-x1", disable=(*OTHERS, "acme"))
    assert res.returncode == 2
    line = _one_line(res.stderr)
    assert "gpt3-175b-a100.toml" in line and "island[0].gpu" in line and "'acme-x1'" in line


# -- a broken plugin -------------------------------------------------------------------------------

BROKEN_LINE = re.compile(
    r"Error loading ShardMeter plugin 'broken' from shardmeter[-_]broken 0\.3\.0: "
    r"ImportError: libacme_driver\.so: cannot open shared object file"
)


def test_a_broken_plugin_is_named_in_one_warning_and_the_rest_works(venv):
    res = venv.run("plugins", "--json", disable=("dup", "shardmeter-acme-fork"))
    assert res.returncode == 0, res.stderr
    assert BROKEN_LINE.search(_one_line(res.stderr))
    names = {p["name"] for p in json.loads(res.stdout)["parts"]}
    assert {"acme-x1", "a100-sxm-80gb", "zero1"} <= names

    est = venv.run("estimate", str(EXAMPLE), "--json", disable=("dup", "shardmeter-acme-fork"))
    assert est.returncode == 0, est.stderr
    assert BROKEN_LINE.search(_one_line(est.stderr))
    assert json.loads(est.stdout)["feasible"] is True


def test_strict_plugins_make_a_broken_plugin_fatal(venv):
    res = venv.run("plugins", disable=("dup", "shardmeter-acme-fork"), strict=True)
    assert res.returncode == 2
    assert BROKEN_LINE.search(_one_line(res.stderr))
    assert res.stdout == ""


def test_disabling_the_broken_plugin_silences_it(venv):
    # by entry-point name, or by distribution name (compared the PEP 503 way)
    for disable in (
        ("broken", "dup", "shardmeter-acme-fork"),
        ("shardmeter-broken", "dup", "shardmeter_acme_fork"),
    ):
        res = venv.run("plugins", "--json", disable=disable, strict=True)
        assert res.returncode == 0, res.stderr
        assert res.stderr == ""


# -- duplicate names -------------------------------------------------------------------------------


def test_a_duplicate_part_name_is_an_error_naming_both_providers(venv):
    for args in (("plugins",), ("estimate", str(EXAMPLE))):
        res = venv.run(*args, disable=("broken", "shardmeter-acme-fork"))
        assert res.returncode == 2
        line = _one_line(res.stderr)
        assert "a100-sxm-80gb" in line
        assert re.search(r"plugin 'dup' from shardmeter[-_]dup 0\.2\.0", line), line
        assert re.search(r"plugin 'hardware' from shardmeter 0\.1", line), line


def test_two_distributions_with_one_entry_point_name_is_an_error_naming_both(venv):
    res = venv.run("plugins", disable=("broken", "dup"))
    assert res.returncode == 2
    line = _one_line(res.stderr)
    assert "'acme'" in line
    assert re.search(r"shardmeter[-_]acme 0\.1\.0", line) and re.search(
        r"shardmeter[-_]acme[-_]fork 0\.1\.0", line
    )
