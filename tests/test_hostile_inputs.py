"""Broken scenario files and command lines: every case ends with exit 0 and a finite
report, or exit 2 and one short line naming the file and the key (``$.`` path);
never a traceback.

* ``tests/hostile/*.toml``: a corpus of broken files, each starting with
  ``# expect: A | B`` (substrings the error line must contain; ``ok`` for files
  that must be accepted). ``shardmeter validate`` on that folder lists each
  broken one as a failed case.
* generated here: files that are not TOML (empty, binary, UTF-16, Latin-1, NUL
  bytes, deeply nested, huge), paths that are not files, wrong types and absurd
  values for every kind of field, hostile ``--set`` strings, hostile ``sweep`` and
  ``plan`` command lines, and a few runs through the real console entry point.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from hostile.support import (
    BASE,
    BASE_MULTI,
    check_error,
    check_json_report,
    run_cli,
    to_toml,
)

import shardmeter
from shardmeter.load.scenario import load_scenario

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = sorted((HERE / "hostile").glob("*.toml"))


def _expectations(path: pathlib.Path) -> list[str]:
    first = path.read_bytes().decode("utf-8-sig").splitlines()[0]
    assert first.startswith("# expect:"), f"{path.name} must start with '# expect: ...'"
    return [e.strip() for e in first[len("# expect:") :].split("|")]


# ---------------------------------------------------------------------------------------------
# the corpus


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_file(path, capsys):
    expect = _expectations(path)
    code, out, err = run_cli(capsys, "estimate", path, "--json")
    if expect == ["ok"]:
        assert code == 0 and err == "", err
        check_json_report(out, path.name)
        code, out, err = run_cli(capsys, "estimate", path)  # the table too
        assert code == 0 and "Traceback" not in err
    else:
        check_error(code, out, err, path.name, *expect, where=path.name)


def test_validate_lists_every_broken_file_of_a_folder_as_failed(capsys, tmp_path):
    folder = tmp_path / "cases"
    folder.mkdir()
    broken = []
    for p in CORPUS:
        data = p.read_bytes()
        if _expectations(p) == ["ok"]:
            data += b"\n[measured]\ntokens_per_s_per_gpu = 1000.0\n"
        else:
            broken.append(p.name)
        (folder / p.name).write_bytes(data)
    (folder / "binary.toml").write_bytes(bytes(range(256)) * 4)
    (folder / "utf16.toml").write_bytes(to_toml(BASE).encode("utf-16"))
    broken += ["binary.toml", "utf16.toml"]
    code, out, err = run_cli(capsys, "validate", folder, "--json")
    assert code == 0 and "Traceback" not in err, err
    doc = check_json_report(out, "validate")
    failed = {os.path.basename(f["file"]): f["error"] for f in doc["failures"]}
    for name in broken:
        assert name in failed, f"{name} not listed as failed"
        assert "\n" not in failed[name]
    ok_cases = [c for c in doc["cases"] if os.path.basename(c["file"]).startswith("ok-")]
    assert ok_cases or any(n.startswith("ok-") for n in failed)  # the infeasible one fails, listed
    code, out, err = run_cli(capsys, "validate", folder)  # the table
    assert code == 0 and "Traceback" not in err and "FAILED" in out


def test_validate_of_a_missing_path_is_one_line_exit_2(capsys, tmp_path):
    code, out, err = run_cli(capsys, "validate", tmp_path / "nowhere", "--json")
    check_error(code, out, err, "nowhere")


# ---------------------------------------------------------------------------------------------
# files that are not scenario files


def _write(tmp_path, name, data: bytes | str):
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return p


FILES = {
    "empty": (b"", ["$.model", "missing"]),
    "whitespace": (b"  \n\t\n\n", ["$.model", "missing"]),
    "comments-only": (b"# a scenario\n# nothing else\n", ["$.model", "missing"]),
    "binary": (bytes(range(256)) * 16, ["UTF-8"]),
    "random-bytes": (bytes((i * 7919 + 13) % 256 for i in range(5000)), []),
    "nul-bytes": (to_toml(BASE).encode() + b"\x00\x00", ["NUL"]),
    "utf16-le-bom": (to_toml(BASE).encode("utf-16"), ["UTF-16"]),
    "utf16-be-bom": (b"\xfe\xff" + to_toml(BASE).encode("utf-16-be"), ["UTF-16"]),
    "utf16-no-bom": (to_toml(BASE).encode("utf-16-le"), []),
    "utf32": (to_toml(BASE).encode("utf-32"), []),
    "latin1": ('[model]\npreset = "gpt3-13b"\n# caf\u00e9\n'.encode("latin-1"), ["UTF-8"]),
    "json": (json.dumps(BASE).encode(), ["not valid TOML"]),
    "yaml": (b"model:\n  preset: gpt3-13b\n", ["not valid TOML"]),
    "python": (b"import os\nos.system('echo pwned')\n", ["not valid TOML"]),
    "html": (b"<html><body>404</body></html>", ["not valid TOML"]),
    "deep-arrays": (b"a = " + b"[" * 5000 + b"]" * 5000, ["nested"]),
    "deep-tables": (b"a = " + b"{b=" * 3000 + b"1" + b"}" * 3000, ["nested"]),
    "deep-dotted": (b"[model]\n" + b".".join([b"k"] * 200) + b" = 1\n", ["$.model.k"]),
    "huge-comment": (b"#" + b"x" * 5_000_000 + b"\n", ["$.model"]),
    "many-keys": (b"[source]\n" + b"".join(b"k%d = %d\n" % (i, i) for i in range(50000)), ["$.model"]),
    "long-line-string": (('[model]\npreset = "' + "x" * 100000 + '"\n').encode(), ["$.model.preset"]),
    "control-chars": (b'[model]\npreset = "gpt\x01"\n', ["not valid TOML"]),
    "crlf-ok": (to_toml(BASE).replace("\n", "\r\n").encode(), None),  # None: must succeed
    "bom-ok": (b"\xef\xbb\xbf" + to_toml(BASE).encode(), None),
    "datetime-for-count": (
        to_toml(BASE).replace("nodes = 2", "nodes = 1979-05-27T07:32:00Z").encode(),
        ["$.island[0].nodes"],
    ),
}


@pytest.mark.parametrize("case", sorted(FILES))
def test_files_that_are_not_scenarios(case, tmp_path, capsys):
    data, expect = FILES[case]
    path = _write(tmp_path, f"{case}.toml", data)
    code, out, err = run_cli(capsys, "estimate", path, "--json")
    if expect is None:
        assert code == 0, err
        check_json_report(out, case)
    else:
        check_error(code, out, err, path.name, *expect, where=case)


def test_paths_that_are_not_files(tmp_path, capsys):
    (tmp_path / "folder.toml").mkdir()
    (tmp_path / "dangling.toml").symlink_to(tmp_path / "nowhere.toml")
    (tmp_path / "loop-a.toml").symlink_to(tmp_path / "loop-b.toml")
    (tmp_path / "loop-b.toml").symlink_to(tmp_path / "loop-a.toml")
    for name, expect in [
        ("missing.toml", "no such file"),
        ("folder.toml", "directory"),
        ("dangling.toml", "no such file"),
        ("loop-a.toml", ""),
        ("", ""),
    ]:
        path = tmp_path / name if name else ""
        code, out, err = run_cli(capsys, "estimate", path, "--json")
        check_error(code, out, err, expect, where=name or "empty path")


def test_odd_file_names_are_quoted_on_one_line(tmp_path, capsys):
    for name in [
        "with space.toml",
        "caf\u00e9 \u2603.toml",
        "new\nline.toml",
        "-dash.toml",
        "x" * 200 + ".toml",
    ]:
        path = tmp_path / name
        path.write_text("not = toml = at all")
        code, out, err = run_cli(capsys, "estimate", "--json", "--", path)
        check_error(code, out, err, "not valid TOML", where=repr(name))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path, capsys):
    path = _write(tmp_path, "secret.toml", to_toml(BASE))
    path.chmod(0)
    code, out, err = run_cli(capsys, "estimate", path)
    check_error(code, out, err, "secret.toml", "cannot read")


# ---------------------------------------------------------------------------------------------
# wrong types and absurd values, written into a file


def _set(d, path, value):
    d = copy.deepcopy(d)
    cur = d
    parts = path.replace("]", "").replace("[", ".").split(".")
    for p in parts[:-1]:
        cur = cur[int(p)] if isinstance(cur, list) else cur.setdefault(p, {})
    last = parts[-1]
    if value is DELETE:
        del cur[last]
    elif isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value
    return d


DELETE = object()

# (base, key path, value, substring of the error line); None: must be accepted.
VALUES = [
    # integers (counts)
    ("single", "model.layers", True, "expected an integer"),
    ("single", "model.layers", 2.0, "expected an integer"),
    ("single", "model.layers", "4", "expected an integer"),
    ("single", "model.layers", [4], "expected an integer"),
    ("single", "model.layers", {"n": 4}, "expected an integer"),
    ("single", "model.layers", 0, ">= 1"),
    ("single", "model.layers", -1, ">= 1"),
    ("single", "model.layers", 2**63 - 1, "absurdly large"),
    ("single", "model.layers", float("nan"), "expected an integer"),
    ("single", "model.layers", float("inf"), "expected an integer"),
    ("single", "training.global_batch", 0, ">= 1"),
    ("single", "training.micro_batch", -2, ">= 1"),
    ("single", "island[0].nodes", 0, ">= 1"),
    ("single", "island[0].nodes", False, "expected an integer"),
    ("single", "island[0].gpus_per_node", 0, ">= 1"),
    ("single", "island[0].nics_per_node", 1.5, "expected an integer"),
    ("single", "parallelism.tp", 0, ">= 1"),
    ("single", "parallelism.pp", -8, ">= 1"),
    ("single", "parallelism.dp", 2**50, "absurdly large"),
    ("single", "parallelism.virtual_stages", 0, ">= 1"),
    # real numbers
    ("single", "training.tokens", float("nan"), "finite"),
    ("single", "training.tokens", float("-inf"), "finite"),
    ("single", "training.tokens", -1.0, "> 0"),
    ("single", "training.tokens", 0.0, "> 0"),
    ("single", "training.tokens", 1e300, "absurdly large"),
    ("single", "training.tokens", True, "expected a number"),
    ("single", "training.tokens", "1e9", "expected a number"),
    ("single", "island[0].gpu", {"name": "h100-sxm", "memory_gb": 0.0}, "> 0"),
    ("single", "island[0].gpu", {"name": "h100-sxm", "memory_gb": 5e-324}, "absurdly small"),
    ("single", "island[0].gpu", {"name": "h100-sxm", "memory_bandwidth_gb_s": float("inf")}, "finite"),
    ("single", "island[0].gpu", {"name": "h100-sxm", "peak_tflops": {"bf16": -1.0}}, "bf16"),
    ("single", "island[0].gpu", {"name": "h100-sxm", "peak_tflops": {"bf16": "fast"}}, "bf16"),
    ("single", "island[0].gpu", {"name": "h100-sxm", "peak_tflops": {}}, "peak_tflops"),
    ("single", "island[0].gpu", {"name": "h100-sxm", "matmul_efficiency": 1.5}, "matmul_efficiency"),
    ("single", "island[0].gpu", {"name": "h100-sxm", "sm_count": -1}, "sm_count"),
    ("single", "island[0].gpu", {"memory_gb": 80.0}, "$.island[0].gpu"),
    ("single", "island[0].gpu", {"name": 7}, "$.island[0].gpu.name"),
    ("single", "island[0].gpu", {"name": "h100-sxm", "name_": 1}, "$.island[0].gpu.name_"),
    ("single", "island[0].gpu", 42, "$.island[0].gpu"),
    ("single", "island[0].gpu", "", "$.island[0].gpu"),
    ("single", "island[0].gpu", [], "$.island[0].gpu"),
    ("single", "island[0].inter_node", {"name": "ib-ndr", "bandwidth_gb_s": -50.0}, "bandwidth_gb_s"),
    ("single", "island[0].inter_node", {"name": "ib-ndr", "latency_us": -1.0}, "latency_us"),
    ("single", "island[0].inter_node", {"name": "ib-ndr", "kind": "wormhole"}, "$.island[0].inter_node.kind"),
    ("single", "island[0].intra_node", {"name": "nvlink4", "efficiency": 0.0}, "efficiency"),
    ("single", "island[0].price", {"name": "owned", "purchase_usd": {"h100-sxm": -30000.0}}, "purchase_usd"),
    (
        "single",
        "island[0].price",
        {"name": "cloud-on-demand", "gpu_prices": {"h100-sxm": -2.0}},
        "gpu_prices",
    ),
    ("single", "island[0].price", {"name": "owned", "lifetime_years": 0.0}, "lifetime_years"),
    # strings and choices
    ("single", "training.precision", "bf17", "training.precision"),
    ("single", "training.precision", 16, "expected a string"),
    ("single", "training.recompute", True, "training.recompute"),
    ("single", "model.ffn", "relu", "model.ffn"),
    ("single", "parallelism.sharding", "", "parallelism.sharding"),
    ("single", "parallelism.schedule", 5, "parallelism.schedule"),
    ("single", "parallelism.sequence_parallel", "yes", "true or false"),
    ("single", "parallelism.sequence_parallel", 1, "true or false"),
    ("single", "island[0].name", 5, "expected a string"),
    # tables and keys
    ("single", "model", "gpt3", "$.model"),
    ("single", "training", [], "$.training"),
    ("single", "parallelism", 8, "$.parallelism"),
    ("single", "island", {"gpu": "h100-sxm", "nodes": 1}, "$.island"),
    ("single", "island[0]", "h100-sxm", "$.island[0]"),
    ("single", "island[0].parallelism", "tp=2", "$.island[0].parallelism"),
    ("single", "island[0].parallelism", {"tp": 0}, "$.island[0].parallelism.tp"),
    ("single", "island[0].parallelism", {"tq": 2}, "$.island[0].parallelism.tq"),
    ("single", "measured", {"mfu": "high"}, "$.measured.mfu"),
    ("single", "measured", {"mfu": 0.0}, "$.measured.mfu"),
    ("single", "measured", [1], "$.measured"),
    ("single", "source", "paper", "$.source"),
    ("single", "network", {"link": 5}, "$.network.link"),
    ("single", "network", {"link": "no-such-link"}, "$.network.link"),
    ("single", "network", {"wire": "internet"}, "$.network.wire"),
    ("single", "sync", {"strategy": "gossip"}, "$.sync.strategy"),
    ("single", "sync", [], "$.sync"),
    ("single", "extra", {"a": 1}, "$.extra"),
    ("single", "island[0].nodes", DELETE, "$.island[0].nodes"),
    ("single", "island[0].gpu", DELETE, "$.island[0].gpu"),
    ("single", "model.heads", DELETE, "$.model.heads"),
    ("single", "training", DELETE, "$.training"),
    # multi-island: sync options and the WAN link
    ("multi", "sync.inner_steps", 0, ">= 1"),
    ("multi", "sync.inner_steps", 2.5, "$.sync.inner_steps"),
    ("multi", "sync.inner_steps", "500", "$.sync.inner_steps"),
    ("multi", "sync.inner_steps", 2**62, "absurdly large"),
    ("multi", "sync.compression_bits", -4, "$.sync.compression_bits"),
    ("multi", "sync.fragments", True, "$.sync.fragments"),
    ("multi", "sync.overlap_steps", -2, "$.sync.overlap_steps"),
    ("multi", "sync.innr_steps", 5, "$.sync.innr_steps"),
    ("multi", "sync.strategy", "allreduce", None),  # diloco keys then only noted as ignored
    ("multi", "network.link", {"name": "internet", "bandwidth_gb_s": float("nan")}, "bandwidth_gb_s"),
    ("multi", "network.link", {"name": "internet", "bandwidth_gb_s": 0.0}, "bandwidth_gb_s"),
    ("multi", "network.link", {"name": "internet", "latency_us": 1e30}, "latency_us"),
    ("multi", "network.link", {"bandwidth_gb_s": 1.0}, None),  # a table without a name: the internet link
    ("multi", "island[1].name", "east", "used twice"),
    # accepted: odd but well-formed
    ("single", "island[0].gpu", {"name": "h100-sxm", "memory_gb": 1e6}, None),
    ("single", "island[0].inter_node", {"name": "ib-ndr", "latency_us": 0.0}, None),
    ("single", "training.tokens", 1e18, None),
    ("single", "island[0].nodes", 2**40, None),
    ("single", "model.layers", 2**40, None),
    ("single", "parallelism.tp", 3, None),  # infeasible: tp does not divide heads
    ("single", "source", {"note": "x" * 10000, "nested": {"a": [1, 2, {"b": []}]}}, None),
]


@pytest.mark.parametrize(
    "case",
    range(len(VALUES)),
    ids=[f"{b}:{p}={v!r}"[:60] if v is not DELETE else f"{b}:del {p}" for b, p, v, _ in VALUES],
)
def test_wrong_types_and_absurd_values(case, tmp_path, capsys):
    base, key, value, expect = VALUES[case]
    d = {"single": BASE, "multi": BASE_MULTI}[base]
    data = _set(d, key, value)
    path = tmp_path / "case.toml"
    path.write_text(to_toml(data), encoding="utf-8")
    code, out, err = run_cli(capsys, "estimate", path, "--json")
    if expect is None:
        assert code == 0, err
        check_json_report(out, f"{key}={value!r}")
    else:
        check_error(code, out, err, "case.toml", expect, where=f"{key}={value!r}")


# ---------------------------------------------------------------------------------------------
# hostile --set strings


SETS = [
    ("parallelism.tp", "KEY=VALUE"),
    ("=1", "bad key path"),
    ("model.=1", "model."),
    (".model=1", "bad key path"),
    ("model..layers=1", "bad key path"),
    ("model layers=1", "bad key path"),
    ("island[-1].nodes=2", "bad key path"),
    ("island[99999999999999999999999].nodes=2", "out of range"),
    ("island[0][0].nodes=2", "island[0][0]"),
    ("island.nodes=2", "not a table"),
    ("model.layers[0]=2", "model.layers[0]"),
    ("model.layers.x=2", "not a table"),
    ("island=[]", "$.island"),
    ("island=5", "$.island"),
    ("model.layers=", "$.model.layers"),
    ("model.layers=true", "$.model.layers"),
    ("model.layers=1e3", "$.model.layers"),
    ("model.layers=0x10", None),  # TOML hex integer 16: accepted
    ("model.layers=99999999999999999999999999", "absurdly large"),
    ("model.layers=nan", "$.model.layers"),
    ('model.layers="4"', "$.model.layers"),
    ("model.layers={a=1}", "$.model.layers"),
    ("model.layers=[1,2", "$.model.layers"),  # not TOML: a bare string
    ("training.tokens=-inf", "$.training.tokens"),
    ("training.tokens=1e309", "$.training.tokens"),
    ("island[0].gpu=h100", "unknown hardware"),
    ("island[0].gpu.memory_gb=-1", "$.island[0].gpu.memory_gb"),
    ("island[0].gpu.warp_drive=1", "$.island[0].gpu.warp_drive"),
    ("network.link.bandwidth_gb_s=0", "$.network.link.bandwidth_gb_s"),  # unused (one island), still checked
    ("network.link.bandwidth_gb_s=2.5", None),
    ("network.link=5", "$.network.link"),
    ("sync.strategy=diloco", None),
    ("sync.inner_steps=0", None),  # read by diloco, not the chosen allreduce: noted as ignored
    ("sync.strategy=diloco", None),
    ("source.x=" + "[" * 2000 + "]" * 2000, "nested"),
    ("source.x={a={b={c={d=1}}}}", None),
    ("a." * 100 + "b=1", "$.a"),
    ("model.layers=" + "9" * 5000, "$.model.layers"),
    ("island[0].gpu=" + "x" * 5000, "unknown hardware"),
    ("\u2603=1", "bad key path"),
    ("model.\x00=1", "bad key path"),
]


@pytest.mark.parametrize("case", range(len(SETS)), ids=[s[:40] for s, _ in SETS])
def test_hostile_set_overrides(case, tmp_path, capsys):
    text, expect = SETS[case]
    path = tmp_path / "base.toml"
    path.write_text(to_toml(BASE))
    code, out, err = run_cli(capsys, "estimate", path, "--json", "--set", text)
    if expect is None:
        assert code == 0, err
        check_json_report(out, text)
    else:
        check_error(code, out, err, expect, where=text[:80])


def test_python_api_rejects_what_toml_cannot_express():
    """Dicts given to load_scenario may hold what TOML cannot: non-string keys, None,
    sets, cycles. Each is a ScenarioError naming the key, never a crash."""
    cyclic: dict = {}
    cyclic["self"] = cyclic
    for key, value in [(5, 1), ("source", cyclic), ("model", None)]:
        d = copy.deepcopy(BASE)
        d[key] = value
        with pytest.raises(shardmeter.ScenarioError):
            load_scenario(d)
    for path, value in [
        ("model.layers", {1, 2}),
        ("model.layers", None),
        ("parallelism.5", 1),
        ("island[0].gpu", object()),
        ("training.tokens", 1j),
    ]:
        d = copy.deepcopy(BASE)
        cur = d
        parts = path.replace("[0]", ".0").split(".")
        for p in parts[:-1]:
            cur = cur[int(p)] if p.isdigit() else cur[p]
        cur[int(parts[-1]) if parts[-1].isdigit() else parts[-1]] = value
        with pytest.raises(shardmeter.ScenarioError) as info:
            shardmeter.estimate(d)
        assert "$." in str(info.value)


# ---------------------------------------------------------------------------------------------
# sweep and plan


def _explore_available() -> bool:
    from shardmeter.cli import app as cli

    cli._register_optional_commands()
    return "sweep" in cli.COMMANDS and "plan" in cli.COMMANDS


needs_explore = pytest.mark.skipif(not _explore_available(), reason="sweep/plan not installed")

SWEEPS = [
    (["--vary", "parallelism.tp=1,2,4"], None),
    (["--vary", "no.such.key=1,2"], "$.no"),
    (["--vary", "parallelism.tp"], "KEY="),
    (["--vary", "parallelism.tp="], "parallelism.tp"),
    (["--vary", "parallelism.tp=a,b"], "parallelism.tp"),
    (["--vary", "island[0].nodes=1..16x0"], "island[0].nodes"),
    (["--vary", "island[0].nodes=1..16x1"], "island[0].nodes"),
    (["--vary", "island[0].nodes=16..1x2"], "island[0].nodes"),
    (["--vary", "island[0].nodes=1..1e400x2"], "island[0].nodes"),
    (["--vary", "island[0].nodes=nan..4x2"], "island[0].nodes"),
    (["--vary", "island[0].nodes=1..1000000000+1"], "island[0].nodes"),
    (["--vary", "island[0].nodes=0,1"], "island[0].nodes"),
    (["--vary", "island[9].nodes=1,2"], "island[9]"),
    (["--vary", "parallelism.tp=1,2", "--vary", "parallelism.tp=4"], "parallelism.tp"),
]


@needs_explore
@pytest.mark.parametrize("case", range(len(SWEEPS)), ids=[" ".join(a)[:50] for a, _ in SWEEPS])
def test_hostile_sweep_command_lines(case, tmp_path, capsys):
    args, expect = SWEEPS[case]
    path = tmp_path / "base.toml"
    path.write_text(to_toml(BASE))
    code, out, err = run_cli(capsys, "sweep", path, "--json", *args)
    if expect is None:
        assert code == 0, err
        doc = check_json_report(out, "sweep")
        for row in doc["rows"]:
            check_json_report(json.dumps(row["report"]), "sweep row")
    else:
        check_error(code, out, err, expect, where=" ".join(args))


@needs_explore
def test_sweep_csv_to_a_folder_or_a_missing_folder(tmp_path, capsys):
    path = tmp_path / "base.toml"
    path.write_text(to_toml(BASE))
    for target in [tmp_path, tmp_path / "no" / "such" / "dir" / "out.csv"]:
        code, out, err = run_cli(capsys, "sweep", path, "--vary", "parallelism.tp=1,2", "--csv", target)
        check_error(code, out, err, where=str(target))


PLANS = [
    ([], None),
    (["--top", "0"], "--top"),
    (["--top", "-3"], "--top"),
    (["--top", "many"], "--top"),
    (["--max-gpus", "0"], "--max-gpus"),
    (["--max-gpus", "-8"], "--max-gpus"),
    (["--budget-usd", "nan"], "--budget-usd"),
    (["--budget-usd", "-1"], "--budget-usd"),
    (["--deadline-days", "inf"], "--deadline-days"),
    (["--deadline-days", "0"], "--deadline-days"),
    (["--objective", "speed"], "--objective"),
    (["--only", "tp=3,5"], "--only tp=3"),  # a value the space cannot use is an error naming it
    (["--only", "warp=1"], "warp"),
    (["--only", "tp=x"], "tp"),
    (["--chunk", "0"], "--chunk"),
]


@needs_explore
@pytest.mark.parametrize("case", range(len(PLANS)), ids=[" ".join(a)[:40] or "plain" for a, _ in PLANS])
def test_hostile_plan_command_lines(case, tmp_path, capsys):
    args, expect = PLANS[case]
    path = tmp_path / "base.toml"
    path.write_text(to_toml(_set(BASE, "island[0].nodes", 1)))
    code, out, err = run_cli(capsys, "plan", path, "--json", "--max-gpus", "8", *args)
    if expect is None:
        assert code == 0, err
        doc = check_json_report(out, "plan")
        for plan in doc["plans"]:
            check_json_report(json.dumps(plan["report"]), "plan")
    else:
        check_error(code, out, err, expect, where=" ".join(args))


# ---------------------------------------------------------------------------------------------
# the real process


@pytest.mark.parametrize("name", ["unknown-key.toml", "deeply-nested.toml", "huge-tokens.toml", "binary"])
def test_no_traceback_at_the_process_level(name, tmp_path):
    path = (
        HERE / "hostile" / name if name.endswith(".toml") else _write(tmp_path, "b.toml", bytes(range(256)))
    )
    env = {k: v for k, v in os.environ.items() if k != "SHARDMETER_DEBUG"}
    res = subprocess.run(
        [sys.executable, "-m", "shardmeter", "estimate", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    check_error(res.returncode, res.stdout, res.stderr, where=name)


# ---------------------------------------------------------------------------------------------
# interrupted runs lose nothing: output files are written atomically


def _debris(folder: pathlib.Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("exc", [RuntimeError("disk full"), KeyboardInterrupt()])
@pytest.mark.parametrize("existed", [True, False])
def test_atomic_write_interrupted_in_the_block_keeps_the_old_file(exc, existed, tmp_path):
    from shardmeter.io import atomic_write

    target = tmp_path / "out.csv"
    if existed:
        target.write_text("old,complete\n1,2\n")
    with pytest.raises(type(exc)), atomic_write(target) as fh:
        fh.write("new,half")
        raise exc
    if existed:
        assert target.read_text() == "old,complete\n1,2\n"
    else:
        assert not target.exists()
    assert _debris(tmp_path) == []


def test_atomic_write_replaces_whole_files_text_and_binary(tmp_path):
    from shardmeter.io import atomic_write

    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with atomic_write(target, "wb") as fh:
        fh.write(b"\x00new\xff")
    assert target.read_bytes() == b"\x00new\xff"
    with atomic_write(tmp_path / "t.csv") as fh:
        fh.write("a\r\nb\n")  # newline="" : written as given
    assert (tmp_path / "t.csv").read_bytes() == b"a\r\nb\n"
    assert _debris(tmp_path) == []


_WRITER = """
import signal, sys, time
# Python installs its KeyboardInterrupt handler only where SIGINT is not ignored at start-up, and a
# child of a background job (CI runs each suite as one) can inherit SIG_IGN: restore the default
signal.signal(signal.SIGINT, signal.default_int_handler)
from shardmeter.io import atomic_write
with atomic_write(sys.argv[1]) as fh:
    for i in range(100000):
        fh.write("row %d,%s\\n" % (i, "x" * 100))
        if i == 1000:
            fh.flush()
            print("writing", flush=True)
            time.sleep(60)
"""


@pytest.mark.skipif(os.name != "posix", reason="signals")
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM", "SIGINT"])
@pytest.mark.parametrize("existed", [True, False])
def test_a_process_killed_mid_write_leaves_the_old_file_or_nothing(sig, existed, tmp_path):
    import signal

    target = tmp_path / "out.csv"
    if existed:
        target.write_text("old,complete\n")
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        proc.send_signal(getattr(signal, sig))
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    if existed:
        assert target.read_text() == "old,complete\n"
    else:
        assert not target.exists()
    # SIGKILL cannot be cleaned up after: at most the hidden temporary sibling remains
    debris = _debris(tmp_path)
    assert all(d.startswith(".out.csv.") for d in debris)
    if sig == "SIGINT":
        assert debris == []  # KeyboardInterrupt runs the clean-up


_SWEEP_DRIVER = """
import sys, time
import shardmeter.explore.search.sweep as sw
from shardmeter.cli.app import main

original = sw.run_sweep

def run_slowly(*args, **kw):
    kw["chunk_rows"] = 1
    save = kw["on_progress"]

    def on_progress(rows):
        save(rows)
        print("saved", len(rows), flush=True)
        time.sleep(0.3 if len(rows) < 3 else 60)

    kw["on_progress"] = on_progress
    return original(*args, **kw)

sw.run_sweep = run_slowly
sys.exit(main(sys.argv[1:]))
"""


@needs_explore
@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_a_sweep_killed_mid_run_leaves_a_whole_csv_that_resume_completes(tmp_path, capsys):
    """``sweep --csv`` saves the rows done after every chunk, atomically: a SIGKILL leaves
    a complete CSV of whole rows, and ``--resume`` computes only the rest."""
    import csv
    import signal

    path = tmp_path / "base.toml"
    path.write_text(to_toml(BASE))
    out = tmp_path / "sweep.csv"
    argv = [
        "sweep",
        str(path),
        "--vary",
        "training.micro_batch=1,2,4,8",
        "--vary",
        "parallelism.tp=1,2",
        "--csv",
        str(out),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", _SWEEP_DRIVER, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(3):
            line = proc.stdout.readline()
            assert line.startswith("saved"), line + proc.stderr.read()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()
    with open(out, newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    assert header[:3] == ["training.micro_batch", "parallelism.tp", "feasible"]
    done = [r for r in body if r[2] in ("true", "false")]
    assert len(done) >= 3 and all(len(r) == len(header) for r in body)
    kept = {tuple(r[:2]): r for r in done}
    code, stdout, err = run_cli(capsys, *argv, "--resume", "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert len(doc["rows"]) == 8
    assert sum(1 for r in doc["rows"] if r.get("resumed")) == len(done)
    with open(out, newline="") as fh:
        final = list(csv.reader(fh))
    assert len(final) == 9
    for r in final[1:]:
        if tuple(r[:2]) in kept:
            assert r == kept[tuple(r[:2])]  # resumed rows are kept as they were
