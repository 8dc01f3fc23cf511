"""One number check at every point a number enters (issue 25 item 2): the scenario loader's rules
(finite, within float range, an integer where one is meant, ASCII digits) hold for the Python
API's arguments, every numeric command-line flag, ``--vary`` ranges, ``import --set`` and every
number of each importer's and calibration's sources. A hostile number (NaN, infinities,
``1e400``, full-width or Arabic-Indic digits, ``-0``, integers beyond float range) is one line
naming where it came from (the argument, the flag, the source file), never a traceback, and
never a scenario or an overlay that does not load.
"""

from __future__ import annotations

import math
import pathlib
import random
import re
import sys

import pytest
from cli_helpers import run

import shardmeter
from shardmeter.errors import ShardMeterError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = pathlib.Path(__file__).parent
FIX = HERE / "fixtures"
CAL = HERE.parent / "examples" / "calibration"

SCENARIO = {
    "model": {"layers": 8, "hidden": 2048, "heads": 16, "vocab": 32000, "seq_len": 2048},
    "training": {"global_batch": 64, "tokens": 2e9},
    "island": [
        {
            "name": "c",
            "gpu": "a100-sxm-40gb",
            "nodes": 2,
            "gpus_per_node": 4,
            "inter_node": "ib-hdr",
            "price": "cloud-on-demand",
        }
    ],
}

#: Numbers no argument means, as Python values.
HOSTILE = [
    float("nan"),
    float("inf"),
    -float("inf"),
    10**400,
    2**70,
    "\uff11\uff12",  # full-width 12: int() takes it
    "12",  # text, not a number
    2.5,
]
#: The same as command-line text.
HOSTILE_TEXT = ["\uff11\uff12", "\u0663\u0662", "\u00b2", "nan", "inf", "1e400", "9" * 30, "2.5"]


def _one_line(exc: BaseException) -> str:
    s = str(exc)
    assert "\n" not in s, s
    return s


# -- the Python API ---------------------------------------------------------------------------


API = {
    "max_gpus": lambda v: shardmeter.plan(SCENARIO, max_gpus=v, top=1),
    "budget_usd": lambda v: shardmeter.plan(SCENARIO, budget_usd=v, top=1),
    "deadline_days": lambda v: shardmeter.plan(SCENARIO, deadline_days=v, top=1),
    "top": lambda v: shardmeter.plan(SCENARIO, top=v),
    "step": lambda v: shardmeter.sensitivity(SCENARIO, step=v),
    "workers": lambda v: shardmeter.sweep(SCENARIO, {"training.micro_batch": [1]}, workers=v),
}
#: What each argument accepts of HOSTILE: a float with a fraction is a budget, not a count.
ACCEPTS = {"budget_usd": (2.5,), "deadline_days": (2.5,)}


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("arg", list(API))
def test_an_api_argument_that_is_not_its_number_is_one_line_naming_it(arg, value):
    if value in ACCEPTS.get(arg, ()) and not isinstance(value, str):
        API[arg](value)
        return
    with pytest.raises(ShardMeterError) as exc:
        API[arg](value)
    line = _one_line(exc.value)
    assert line.startswith((arg, f"--{arg.replace('_', '-')}")), line


def test_numpy_numbers_are_numbers():
    np = pytest.importorskip("numpy")
    res = shardmeter.plan(SCENARIO, max_gpus=np.int64(8), budget_usd=np.float64(1e9), top=1)
    assert res.plans


# -- command-line flags -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def toml(tmp_path_factory):
    from shardmeter.importers.toml_out import toml_value

    path = tmp_path_factory.mktemp("n") / "run.toml"
    lines = []
    for table in ("model", "training"):
        lines.append(f"[{table}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in SCENARIO[table].items()]
    lines.append("[[island]]")
    lines += [f"{k} = {toml_value(v)}" for k, v in SCENARIO["island"][0].items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


FLAGS = {
    "--top": ["plan", "{f}", "--top", "{v}"],
    "--max-gpus": ["plan", "{f}", "--max-gpus", "{v}"],
    "--chunk": ["plan", "{f}", "--chunk", "{v}"],
    "--budget-usd": ["plan", "{f}", "--budget-usd", "{v}"],
    "--deadline-days": ["plan", "{f}", "--deadline-days", "{v}"],
    "--workers": ["sweep", "{f}", "--vary", "training.micro_batch=1", "--workers", "{v}"],
    "--dask-timeout": ["sweep", "{f}", "--vary", "training.micro_batch=1", "--dask-timeout", "{v}"],
    "--step": ["sensitivity", "{f}", "--step", "{v}"],
    "--gpus": ["init", "--gpus", "{v}"],
    "--global-batch": ["init", "--global-batch", "{v}"],
    "--nics-per-node": ["calibrate", str(CAL / "all_reduce_perf_2nodes.txt"), "--nics-per-node", "{v}"],
}
#: Flags a fraction or a large figure is right for.
FLAG_ACCEPTS = {"--budget-usd": ("2.5",), "--deadline-days": ("2.5",), "--dask-timeout": ("2.5",)}


@pytest.mark.parametrize("value", HOSTILE_TEXT)
@pytest.mark.parametrize("flag", list(FLAGS))
def test_a_numeric_flag_takes_ascii_digits_and_finite_numbers_only(capsys, toml, tmp_path, flag, value):
    if value in FLAG_ACCEPTS.get(flag, ()):
        return
    argv = [a.format(f=toml, v=value) for a in FLAGS[flag]]
    if argv[0] == "calibrate":
        argv += ["--gpu", "h100-sxm", "--out", str(tmp_path / "o.toml")]
    code, out, err = run(capsys, *argv)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and not out and "Traceback" not in err, (code, out[-300:], err[-300:])
    assert f"argument {flag}" in lines[-1], lines


@pytest.mark.parametrize(
    ("vary", "message"),
    [
        ("training.micro_batch=1..\uff11\uff16x2", "expected an integer"),
        ("training.micro_batch=1..1e400x2", "inf is not a finite number"),
        ("training.micro_batch=1..99999999999999999999999+1", "too large"),
    ],
)
def test_a_vary_range_has_the_same_number_rules(capsys, toml, vary, message):
    code, _out, err = run(capsys, "sweep", toml, "--vary", vary)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in err, err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "{a = 1}"])
def test_import_set_of_a_value_no_scenario_holds_is_one_line(capsys, value):
    src = FIX / "hf" / "llama-3-8b.json"
    code, out, err = run(capsys, "import", "hf", src, "--set", f"model.vocab={value}")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and not out and len(lines) == 1 and "--set model.vocab" in lines[0], err


# -- every number of each importer's source and of calibration's inputs ------------------------

#: Numbers as each source format writes them.
SOURCE_HOSTILE = {
    "json": ["NaN", "Infinity", "-Infinity", "1e400", "-0", "1e30", "9" * 30, '"\uff11\uff12"', "2.5"],
    "toml": ["nan", "inf", "-inf", "1e400", "-0", "1e30", "123456789012345678", '"\uff11\uff12"', "2.5"],
    "sh": ["nan", "inf", "1e400", "\uff11\uff12", "\u0663", "-0", "9" * 30, "0x10", "2.5", "-1"],
    "py": ["float('nan')", "1e400", "10**40", "-0", "'\uff11\uff12'", "2.5"],
    "log": ["nan", "inf", "1e400", "\uff11\uff12", "\u0663", "-0", "9" * 30, "-1"],
}
TT = FIX / "torchtitan"
SOURCES = {
    "hf": ("hf", FIX / "hf" / "llama-3-8b.json", None, "json"),
    "hf-moe": ("hf", FIX / "hf" / "mixtral-8x7b-v0.1.json", None, "json"),
    "torchtitan": (
        "torchtitan",
        TT
        / "2026-02-23_238fa99_last_toml"
        / "torchtitan"
        / "models"
        / "llama3"
        / "train_configs"
        / "llama3_8b.toml",
        None,
        "toml",
    ),
    "megatron": (
        "megatron",
        FIX / "megatron" / "2026-08-22_d98e8a6" / "examples" / "gpt3" / "train_gpt3_175b_distributed.sh",
        None,
        "sh",
    ),
    "torchtitan-registry": (
        "torchtitan",
        TT / "2026-08-21_b5bcd76_config_registry" / "torchtitan" / "models" / "llama3" / "config_registry.py",
        "llama3_8b",
        "py",
    ),
    "nemo-recipe": (
        "megatron",
        FIX / "nemo2" / "2025-09-20_8cfedd7" / "nemo" / "collections" / "llm" / "recipes" / "llama3_8b.py",
        "pretrain_recipe",
        "py",
    ),
}
#: A number in the text (not part of a name, a version or a variable).
_NUMBER = re.compile(r"(?<![\w.$-])(\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?)(?![\w.])")
#: Numbers replaced per source (seeded; every hostile value at each).
PER_SOURCE = 12


def _numbers(text: str, seed: str) -> list[re.Match]:
    def in_comment(m: re.Match) -> bool:
        start = text.rfind("\n", 0, m.start()) + 1
        return "#" in text[start : m.start()]

    found = [m for m in _NUMBER.finditer(text) if not in_comment(m)]
    return random.Random(seed).sample(found, min(PER_SOURCE, len(found)))


def _mutants(name: str, fmt: str, text: str):
    for m in _numbers(text, name):
        for h in SOURCE_HOSTILE[fmt]:
            yield f"{m.group(0)}->{h}", text[: m.start()] + h + text[m.end() :]


@pytest.mark.parametrize("source", list(SOURCES))
def test_every_number_of_an_importer_source_is_checked(tmp_path, source):
    """Each of the source's numbers replaced by each hostile one: the import is one line naming
    the file, or a scenario that loads with finite numbers (a setting it does not map)."""
    from shardmeter.importers.cli import import_config

    kind, src, config, fmt = SOURCES[source]
    text = src.read_text(encoding="utf-8")
    # a Python source's imports resolve beside it: the mutant lives in the same folder
    folder = src.parent if fmt == "py" else tmp_path
    path = folder / f"zz_mutant_{src.name}"
    problems = []
    try:
        for what, body in _mutants(source, fmt, text):
            path.write_text(body, encoding="utf-8")
            try:
                out = import_config(kind, str(path), config=config)
            except ShardMeterError as exc:
                if str(path) not in str(exc) or "\n" in str(exc):
                    problems.append(f"{what}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 (a traceback, collected)
                problems.append(f"{what}: {type(exc).__name__}: {exc}")
                continue
            data = tomllib.loads(out)
            shardmeter.load_scenario(data)
            assert _finite(data), what
    finally:
        path.unlink(missing_ok=True)
    assert problems == []


def _finite(obj) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return True


CAL_SOURCES = {
    "nccl-log": (CAL / "all_reduce_perf_2nodes.txt", {"gpu": "h100-sxm"}, "log"),
    "gemm-csv": (CAL / "gemm_h100.csv", {"gpu": "h100-sxm"}, "log"),
    "measured-step": (CAL / "measured-step.toml", {}, "toml"),
}


@pytest.mark.parametrize("source", list(CAL_SOURCES))
def test_every_number_of_a_calibration_input_is_checked(tmp_path, source):
    """Each (sampled) number of a log, CSV or measured step replaced by each hostile one: one
    line naming the file, or an overlay with finite numbers that loads."""
    from shardmeter.calibrate.cli import run_calibrate
    from shardmeter.registry.manager import get_registry
    from shardmeter.resolve.overlay import apply_overlays

    src, kwargs, fmt = CAL_SOURCES[source]
    text = src.read_text(encoding="utf-8")
    path = tmp_path / src.name
    out = tmp_path / "cal.toml"
    problems = []
    for what, body in _mutants(source, fmt, text):
        path.write_text(body, encoding="utf-8")
        out.unlink(missing_ok=True)
        try:
            run_calibrate([str(path)], out=str(out), **kwargs)
        except ShardMeterError as exc:
            if path.name not in str(exc) or "\n" in str(exc):
                problems.append(f"{what}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 (a traceback, collected)
            problems.append(f"{what}: {type(exc).__name__}: {exc}")
            continue
        assert _finite(tomllib.loads(out.read_text(encoding="utf-8"))), what
        apply_overlays(get_registry(), [str(out)], base=None, scenario_file=None)
    assert problems == []
