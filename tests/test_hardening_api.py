"""Hardening of the Python API, the loader's checks, the plugin records and the report's numbers
(the reliability issue's defect classes; each test fails on the code before the fix):

1. overrides on an already-loaded :class:`~shardmeter.Scenario` are applied (they were ignored);
2. a several-hundred-digit integer anywhere in a scenario is a one-line error naming its key
   (``[measured]`` raised an OverflowError traceback, other keys printed all the digits);
3. a plugin record's bandwidth, peak or memory below a physical floor (a denormal ``5e-324``)
   or above a ceiling is rejected, naming the field;
4. impossible models and DiLoCo options (``kv_heads > heads``, ``compression_bits = 64``) are
   errors naming the key, not feasible plans;
5. numbers reach the user honestly: strict JSON (no ``Infinity``), no 300-digit or ``inf``
   cells in the tables, a non-finite step time is an infeasible plan.
"""

from __future__ import annotations

import copy
import json
import math
import pathlib
import re
import sys

import attrs
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from hostile.support import BASE, BASE_MULTI, check_error, check_json_report, run_cli, to_toml

import shardmeter
from shardmeter import Estimator, ScenarioError
from shardmeter.load.scenario import load_scenario
from shardmeter.parts import SyncPart, SyncTerms
from shardmeter.records import CostSource, HardwareProfile, Interconnect
from shardmeter.report.build import Report
from shardmeter.strategies.sync import DiLoCoOptions, GlobalAllReduce
from shardmeter.tables import fmt_gb, fmt_num, fmt_pct, fmt_time, fmt_usd

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpt3-175b-a100.toml"
GOLDEN_FILES = sorted(json.loads((ROOT / "tests" / "golden" / "predictions.json").read_text())["files"])

#: A run of this many digits in a table cell or an error line is a number printed in full.
LONG_DIGITS = re.compile(r"\d[\d,]{20,}")
#: ``inf`` or ``nan`` as a word (not the ``inf`` of "infeasible").
NON_FINITE = re.compile(r"(?<![a-z])(inf|nan)(?![a-z])", re.IGNORECASE)


def _numbers(report) -> dict:
    d = report.to_dict()
    return {k: d[k] for k in ("feasible", "step_time_s", "tokens_per_s", "memory_per_gpu_gb", "cost_usd")}


def _write(tmp_path, data: dict, name: str = "case.toml") -> pathlib.Path:
    p = tmp_path / name
    p.write_text(to_toml(data), encoding="utf-8")
    return p


def _with(base: dict, table: str, key: str, value) -> dict:
    d = copy.deepcopy(base)
    d.setdefault(table, {})[key] = value
    return d


# ---------------------------------------------------------------------------------------------
# 1. overrides on a loaded scenario


@pytest.mark.parametrize(
    "base, override",
    [
        (BASE, "training.global_batch=128"),
        (BASE, "island[0].nodes=4"),
        (BASE_MULTI, "sync.inner_steps=20"),
        (BASE_MULTI, "network.link.bandwidth_gb_s=0.1"),
    ],
)
def test_overrides_apply_to_a_loaded_scenario_as_to_its_dict(base, override):
    plain = _numbers(shardmeter.estimate(base))
    from_dict = _numbers(shardmeter.estimate(base, overrides=[override]))
    assert from_dict != plain  # the override moves the numbers
    sc = load_scenario(base)
    assert _numbers(shardmeter.estimate(sc, overrides=[override])) == from_dict
    assert _numbers(Estimator().estimate(sc, [override])) == from_dict
    assert _numbers(Estimator().estimate(sc, override)) == from_dict  # one "KEY=VALUE" string
    assert _numbers(Estimator().estimate(sc)) == plain  # the loaded scenario itself is unchanged


def test_overrides_apply_to_a_loaded_file_and_keep_its_name():
    sc = shardmeter.load_scenario(EXAMPLE)
    want = _numbers(shardmeter.estimate(EXAMPLE, overrides=["training.global_batch=3072"]))
    assert want != _numbers(shardmeter.estimate(sc))
    assert _numbers(shardmeter.estimate(sc, overrides=[("training.global_batch", 3072)])) == want
    again = Estimator().load(sc, ["training.global_batch=3072"])
    assert again.file == sc.file and again.training.global_batch == 3072
    assert load_scenario(sc, overrides=["training.global_batch=3072"]).training.global_batch == 3072


def test_a_preset_override_on_a_loaded_scenario_changes_the_model_as_on_the_dict():
    override = "model.preset=gpt3-175b"
    want = shardmeter.estimate(BASE_MULTI, overrides=[override])
    got = shardmeter.estimate(load_scenario(BASE_MULTI), overrides=[override])
    assert got.params == want.params != shardmeter.estimate(BASE_MULTI).params
    assert _numbers(got) == _numbers(want)


def test_a_bad_override_key_on_a_loaded_scenario_is_a_scenario_error_naming_it():
    sc = shardmeter.load_scenario(EXAMPLE)
    with pytest.raises(ScenarioError) as exc:
        shardmeter.estimate(sc, overrides=["training.global_bacth=64"])
    assert exc.value.path == "training.global_bacth"
    assert str(exc.value).startswith(f"{EXAMPLE}: $.training.global_bacth: unknown key")
    with pytest.raises(ScenarioError, match=r"\$\.parallelism\.tp: expected an integer"):
        Estimator().estimate(load_scenario(BASE), ["parallelism.tp=two"])


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_every_bundled_file_loads_back_from_its_tables_to_the_same_numbers(name):
    sc = shardmeter.load_scenario(ROOT / name)
    noop = [("training.global_batch", sc.training.global_batch)]
    again = Estimator().load(sc, noop)
    assert again.to_dict() == sc.to_dict() and again.notes == sc.notes
    if sc.stage_groups:  # one pipeline across islands: estimated by the pipeline's own function
        from shardmeter.hetero import estimate_pipeline

        est = Estimator()
        assert estimate_pipeline(est, again).to_dict() == estimate_pipeline(est, sc).to_dict()
        return
    assert shardmeter.estimate(again).to_dict() == shardmeter.estimate(sc).to_dict()


# ---------------------------------------------------------------------------------------------
# 2. several-hundred-digit integers

HUGE = 10**400


def test_a_huge_integer_in_measured_is_one_line_naming_the_key(capsys, tmp_path):
    d = _with(BASE, "measured", "tokens_per_s_per_gpu", HUGE)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(d)
    assert exc.value.path == "measured.tokens_per_s_per_gpu"
    assert "absurdly large" in str(exc.value) and len(str(exc.value)) < 200
    path = _write(tmp_path, d)
    code, out, err = run_cli(capsys, "estimate", path)
    check_error(code, out, err, str(path), "$.measured.tokens_per_s_per_gpu", "absurdly large")


def test_validate_reports_a_huge_measured_integer_per_file_and_goes_on(capsys, tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    _write(folder, _with(BASE, "measured", "tokens_per_s_per_gpu", HUGE), "a-huge.toml")
    _write(folder, _with(BASE, "measured", "tokens_per_s_per_gpu", 1000.0), "b-fine.toml")
    code, out, err = run_cli(capsys, "validate", folder, "--json")
    assert code == 0 and "Traceback" not in err, err
    doc = check_json_report(out, "validate")
    failed = {pathlib.Path(f["file"]).name: f["error"] for f in doc["failures"]}
    assert "$.measured.tokens_per_s_per_gpu" in failed["a-huge.toml"]
    assert [pathlib.Path(c["file"]).name for c in doc["cases"]] == ["b-fine.toml"]


@pytest.mark.parametrize(
    "table, key",
    [
        ("training", "tokens"),
        ("model", "layers"),
        ("model", "capacity_factor"),
        ("parallelism", "tp"),
        ("measured", "step_time_s"),
    ],
)
@pytest.mark.parametrize("value", [HUGE, -HUGE, 10**19], ids=["401-digits", "minus-401-digits", "1e19"])
def test_an_absurd_integer_anywhere_is_absurdly_large_in_a_short_line(capsys, tmp_path, table, key, value):
    path = _write(tmp_path, _with(BASE, table, key, value))
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    assert exc.value.path == f"{table}.{key}", str(exc.value)
    assert "absurdly large" in exc.value.message and not LONG_DIGITS.search(str(exc.value))
    code, out, err = run_cli(capsys, "estimate", path, "--json")
    check_error(code, out, err, f"$.{table}.{key}", "absurdly large")


def test_a_huge_integer_in_a_set_override_or_an_inline_part_names_the_key():
    with pytest.raises(ScenarioError, match=r"\$\.island\[0\]\.gpu\.memory_gb: a 401-digit integer"):
        shardmeter.estimate(BASE, overrides=[("island[0].gpu", {"name": "h100-sxm", "memory_gb": HUGE})])
    with pytest.raises(ScenarioError, match=r"\$\.sync\.inner_steps: .*absurdly large"):
        shardmeter.estimate(BASE_MULTI, overrides=[f"sync.inner_steps={HUGE}"])


def test_a_huge_integer_in_a_plugin_record_is_a_value_error_naming_the_field():
    with pytest.raises(ValueError, match="memory_gb: a 401-digit integer is absurdly large"):
        HardwareProfile(name="x", memory_gb=HUGE, memory_bandwidth_gb_s=1, peak_tflops={"bf16": 1})
    with pytest.raises(ValueError, match=r"peak_tflops\.bf16: a 401-digit integer"):
        HardwareProfile(name="x", memory_gb=1, memory_bandwidth_gb_s=1, peak_tflops={"bf16": HUGE})


# ---------------------------------------------------------------------------------------------
# 3. plugin records: physical floors and ceilings

GPU = dict(name="x", memory_gb=80.0, memory_bandwidth_gb_s=3000.0, peak_tflops={"bf16": 900.0})
LINK = dict(name="x", bandwidth_gb_s=50.0, latency_us=5.0)


@pytest.mark.parametrize(
    "cls, base, field, value, where",
    [
        (HardwareProfile, GPU, "memory_gb", 5e-324, "memory_gb"),
        (HardwareProfile, GPU, "memory_bandwidth_gb_s", 5e-324, "memory_bandwidth_gb_s"),
        (HardwareProfile, GPU, "memory_bandwidth_gb_s", 1e-12, "memory_bandwidth_gb_s"),
        (HardwareProfile, GPU, "peak_tflops", {"bf16": 5e-324}, "peak_tflops.bf16"),
        (HardwareProfile, GPU, "matmul_efficiency", 5e-324, "matmul_efficiency"),
        (HardwareProfile, GPU, "memory_gb", 1e300, "memory_gb"),
        (HardwareProfile, GPU, "peak_tflops", {"bf16": 1e300}, "peak_tflops.bf16"),
        (Interconnect, LINK, "bandwidth_gb_s", 5e-324, "bandwidth_gb_s"),
        (Interconnect, LINK, "bandwidth_gb_s", 1e-10, "bandwidth_gb_s"),
        (Interconnect, LINK, "efficiency", 5e-324, "efficiency"),
        (Interconnect, LINK, "latency_us", 1e300, "latency_us"),
        (CostSource, {"name": "x"}, "lifetime_years", 5e-324, "lifetime_years"),
        (CostSource, {"name": "x"}, "gpu_prices", {"h100-sxm": 1e300}, "gpu_prices.h100-sxm"),
    ],
)
def test_a_record_figure_outside_the_physical_range_is_rejected_naming_the_field(
    cls, base, field, value, where
):
    with pytest.raises(ValueError, match=rf"^{re.escape(where)}: .*absurdly (small|large)"):
        cls(**{**base, field: value})


def test_a_record_figure_at_the_physical_floor_and_a_zero_where_allowed_are_accepted():
    HardwareProfile(
        **{**GPU, "memory_bandwidth_gb_s": 1e-9, "peak_tflops": {"bf16": 1e-9}, "memory_gb": 1e-9}
    )
    Interconnect(**{**LINK, "bandwidth_gb_s": 1e-9, "latency_us": 0.0, "egress_usd_per_gb": 0.0})
    CostSource(name="x", usd_per_gpu_hour=0.0, usd_per_kwh=1e-12)


def test_the_bundled_catalogs_still_load_and_every_record_passes_its_validators():
    reg = shardmeter.get_registry()
    for kind in ("hardware", "interconnect", "cost"):
        names = list(reg.names(kind))
        assert names, kind
        for name in names:
            rec = reg.get(kind, name)
            attrs.validate(rec)
            type(rec)(**attrs.asdict(rec, recurse=False))  # the converters and validators again


def test_a_denormal_link_can_no_longer_reach_the_model():
    with pytest.raises(ValueError, match="bandwidth_gb_s"):
        Estimator().with_part(
            "interconnect", Interconnect(name="slow", bandwidth_gb_s=5e-324, latency_us=1.0)
        )


# ---------------------------------------------------------------------------------------------
# 4. impossible models and DiLoCo options

BAD = [
    (BASE, "model", "kv_heads", 16, "$.model.kv_heads", "at most heads (8)"),
    (BASE, "model", "kv_heads", 3, "$.model.kv_heads", "multiple of kv_heads"),
    (BASE, "model", "kv_heads", 6, "$.model.kv_heads", "multiple of kv_heads"),
    (BASE_MULTI, "sync", "compression_bits", 0, "$.sync.compression_bits", ""),
    (BASE_MULTI, "sync", "compression_bits", 33, "$.sync.compression_bits", "from 1 to 32"),
    (BASE_MULTI, "sync", "compression_bits", 64, "$.sync.compression_bits", "from 1 to 32"),
    (BASE_MULTI, "sync", "fragments", 0, "$.sync.fragments", ">= 1"),
    (BASE_MULTI, "sync", "inner_steps", 0, "$.sync.inner_steps", ">= 1"),
    (BASE_MULTI, "sync", "overlap_steps", -2, "$.sync.overlap_steps", ">= -1"),
]


@pytest.mark.parametrize("base, table, key, value, path, words", BAD, ids=[f"{b[2]}={b[3]}" for b in BAD])
def test_an_impossible_model_or_sync_option_is_one_line_naming_the_key(
    capsys, tmp_path, base, table, key, value, path, words
):
    d = _with(base, table, key, value)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(d)  # found when loading (validate), not only when estimating
    assert str(exc.value).startswith(f"{path}: ") and words in str(exc.value)
    file = _write(tmp_path, d)
    code, out, err = run_cli(capsys, "estimate", file, "--json")
    check_error(code, out, err, str(file), path, words)
    code, out, err = run_cli(
        capsys, "estimate", _write(tmp_path, base, "base.toml"), "--set", f"{table}.{key}={value}"
    )
    check_error(code, out, err, path, words)


def test_more_experts_per_token_than_experts_is_an_error_naming_the_key():
    moe = copy.deepcopy(BASE)
    moe["model"].update(experts=4, experts_per_token=8)
    with pytest.raises(
        ScenarioError, match=r"^\$\.model\.experts_per_token: expected at most experts \(4\), got 8"
    ):
        shardmeter.estimate(moe)
    moe["model"]["experts_per_token"] = 4
    shardmeter.estimate(moe)  # as many as there are: accepted


@pytest.mark.parametrize(
    "table, key, value",
    [
        ("model", "kv_heads", 8),
        ("model", "kv_heads", 1),
        ("sync", "compression_bits", 1),
        ("sync", "compression_bits", 32),
        ("sync", "overlap_steps", -1),  # the documented default ("automatic") written out
        ("sync", "overlap_steps", 0),
    ],
)
def test_the_limits_themselves_are_accepted(table, key, value):
    base = BASE if table == "model" else BASE_MULTI
    report = shardmeter.estimate(_with(base, table, key, value))
    assert report.feasible, report.reasons


def test_diloco_options_validate_themselves():
    DiLoCoOptions(inner_steps=1, compression_bits=32, fragments=1, overlap_steps=-1)
    for kw, name in (
        ({"compression_bits": 64}, "compression_bits"),
        ({"compression_bits": 0}, "compression_bits"),
        ({"fragments": 0}, "fragments"),
        ({"inner_steps": 0}, "inner_steps"),
        ({"overlap_steps": -3}, "overlap_steps"),
    ):
        with pytest.raises(ValueError, match=f"^{name}: expected an integer"):
            DiLoCoOptions(**kw)


# ---------------------------------------------------------------------------------------------
# 5. numbers as the user sees them

#: Two islands whose WAN is as slow as a scenario may make it: a step of 1e19 s, a cost of 1e31 $.
SLOW_WAN = {
    "model": {"preset": "gpt3-175b", "layers": 8},
    "training": {"global_batch": 64, "tokens": 1e18},
    "island": [
        {"name": "a", "gpu": "h100-sxm", "nodes": 8, "price": "cloud-on-demand"},
        {"name": "b", "gpu": "h100-sxm", "nodes": 8, "price": "cloud-on-demand"},
    ],
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 1e-9, "efficiency": 1e-9, "latency_us": 1e18}},
    "parallelism": {"tp": 8, "pp": 8},
}


def test_absurd_but_finite_numbers_print_in_scientific_notation(capsys, tmp_path):
    path = _write(tmp_path, SLOW_WAN)
    code, out, err = run_cli(capsys, "estimate", path)
    assert code == 0 and err == "", err
    assert not LONG_DIGITS.search(out), out
    assert not NON_FINITE.search(out), out
    assert re.search(r"step time\s+\d\.\d+e\+\d+ d", out), out
    assert re.search(r"cost\s+\$\d\.\d+e\+\d+", out), out
    code, out, err = run_cli(capsys, "estimate", path, "--json")
    assert code == 0
    doc = check_json_report(out, "slow WAN")
    assert doc["feasible"] and doc["step_time_s"] > 1e15


def test_an_absurd_memory_in_an_infeasible_plan_prints_in_scientific_notation(capsys, tmp_path):
    d = copy.deepcopy(BASE)
    d["model"].update(layers=10**12, hidden=10**9, heads=1, kv_heads=1)
    code, out, err = run_cli(capsys, "estimate", _write(tmp_path, d))
    assert code == 0 and "INFEASIBLE" in out, err
    assert not LONG_DIGITS.search(out), out
    assert re.search(r"needs \d\.\d+e\+\d+ GB per GPU", out), out


@pytest.mark.parametrize("fmt", [fmt_time, fmt_num, fmt_usd, fmt_pct, fmt_gb])
def test_formatters_never_print_inf_nan_or_hundreds_of_digits(fmt):
    for x in (math.inf, -math.inf, math.nan, None):
        assert fmt(x) == "-"
    for x in (1e300, -1e300, 1.7e308, 1e-300):
        s = fmt(x)
        assert len(s) <= 16 and "inf" not in s and not LONG_DIGITS.search(s), (x, s)


def test_formatters_keep_ordinary_numbers_as_they_were():
    assert fmt_time(0.0123) == "12.30 ms" and fmt_time(3.5) == "3.500 s" and fmt_time(86400 * 3) == "3.0 d"
    assert fmt_num(1234.5678) == "1,235" and fmt_num(12345678.0) == "12,345,678"
    assert fmt_usd(1234567.4) == "$1,234,567" and fmt_pct(0.4567) == "45.7%" and fmt_gb(79.96) == "80.0"
    assert fmt_time(1e300) == f"{1e300 / 86400:.3g} d" and fmt_num(1e300) == "1.000e+300"


def _report(**kw) -> Report:
    base = shardmeter.estimate(BASE)
    return attrs.evolve(base, **kw)


def test_report_to_json_is_strict_json_with_null_for_non_finite_numbers():
    r = _report(step_time_s=math.inf, cost_usd=math.nan, breakdown_s={"compute": math.inf, "dp_comm": 1.0})
    r.islands[0]["tokens_per_s"] = -math.inf
    text = r.to_json()
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in Report.to_json()"))
    assert doc["step_time_s"] is None and doc["cost_usd"] is None
    assert doc["breakdown_s"] == {"compute": None, "dp_comm": 1.0}
    assert doc["islands"][0]["tokens_per_s"] is None
    assert json.loads(r.to_json(indent=None)) == doc  # keyword arguments still reach json.dumps


def test_the_text_of_a_report_with_non_finite_numbers_has_no_inf():
    r = _report(step_time_s=math.inf, tokens_per_s=math.nan, mfu=math.inf, cost_usd=math.inf)
    text = str(r)
    assert not NON_FINITE.search(text), text


def test_cli_dump_json_is_strict_for_numpy_numbers_too():
    import numpy as np

    from shardmeter.render.json import dump_json

    text = dump_json({"a": np.float32("inf"), "b": np.array([1.0, np.nan]), "c": math.nan, "d": np.int64(3)})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "a": None,
        "b": [1.0, None],
        "c": None,
        "d": 3,
    }


@attrs.frozen(kw_only=True)
class _OverflowingSync(SyncPart):
    """A third-party sync strategy whose figures overflow: every exchange takes forever."""

    def exchange(self, wan, opts):
        t = GlobalAllReduce(name="allreduce").exchange(wan, opts)
        return SyncTerms(
            exposed_s=t.exposed_s * 0.0 + math.inf,
            wan_s=t.wan_s * 0.0 + math.inf,
            round_s=t.round_s * 0.0 + math.inf,
            egress_bytes=t.egress_bytes,
        )


def test_a_non_finite_step_time_is_an_infeasible_plan_not_a_feasible_infinity():
    est = Estimator().with_part("sync", _OverflowingSync(name="forever"))
    d = copy.deepcopy(BASE_MULTI)
    d["sync"] = {"strategy": "forever"}
    r = est.estimate(d)
    assert not r.feasible and r.step_time_s is None
    assert any(x.startswith("step_time_s: ") for x in r.reasons), r.reasons
    doc = check_json_report(r.to_json(), "forever")  # strict, and infeasible invents no numbers
    assert doc["feasible"] is False
    assert not NON_FINITE.search(str(r)), str(r)


def test_a_fifo_or_an_oversized_file_as_the_scenario_is_refused_without_reading(tmp_path, capsys):
    """A FIFO named *.toml used to block open() forever; a huge file was read whole."""
    import os

    from shardmeter.cli.app import main
    from shardmeter.load.files import MAX_SCENARIO_BYTES

    fifo = tmp_path / "scenario.toml"
    os.mkfifo(fifo)
    assert main(["estimate", str(fifo)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a regular file" in err and str(fifo) in err
    big = tmp_path / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(MAX_SCENARIO_BYTES + 1)  # sparse: nothing is written
    assert main(["estimate", str(big)]) == 2
    assert "at most" in capsys.readouterr().err
