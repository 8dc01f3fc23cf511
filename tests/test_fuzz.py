"""Fuzzing the command line with mutated scenarios (seeded, so every run is the same).

Valid scenarios are mutated (values replaced by values of other types or absurd
sizes, keys deleted, renamed or added, tables duplicated or moved, the TOML text
cut or garbled) and run through ``shardmeter estimate --json`` in this process.
Every case must end with exit 0 and a finite JSON report, or exit 2 and one
short line that names the key (``$.`` path) -- never a traceback. ``--set``,
``sweep`` and ``plan`` get the same treatment, ``validate`` runs over a folder of mutants,
and a few mutants go through the real console entry point.

``SHARDMETER_FUZZ_CASES=5000`` runs more cases; ``SHARDMETER_FUZZ_SEED`` picks
another seed.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import pathlib
import random
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from hostile.support import (
    BASES,
    check_json_report,
    check_outcome,
    run_cli,
    to_toml,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
CASES = int(os.environ.get("SHARDMETER_FUZZ_CASES", "1000"))
SEED = int(os.environ.get("SHARDMETER_FUZZ_SEED", "20261130"))


def _seeds() -> list[tuple[str, dict]]:
    """The bundled base scenarios and the repository's examples (those that parse)."""
    out = [(k, v) for k, v in BASES.items()]
    for p in sorted((ROOT / "examples").rglob("*.toml")):
        try:
            out.append((p.relative_to(ROOT).as_posix(), tomllib.loads(p.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue
    return out


SEEDS = _seeds()

PART_NAMES = [
    "h100-sxm",
    "a100-sxm-80gb",
    "mi300x",
    "tpu-v5p",
    "l4",
    "nvlink4",
    "ib-ndr",
    "internet",
    "ethernet-10g",
    "pcie4",
    "zero3",
    "hsdp",
    "interleaved",
    "gpipe",
    "diloco",
    "allreduce",
    "owned",
    "cloud-on-demand",
    "gpt3-13b",
    "bf16",
    "fp8",
    "selective",
    "full",
    "swiglu",
]
VALUES = [
    0,
    1,
    2,
    3,
    7,
    8,
    64,
    -1,
    -8,
    2**31,
    2**40,
    2**40 + 1,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    0.0,
    -0.0,
    0.5,
    1.5,
    2.0,
    1e-9,
    1e-10,
    1e18,
    1e19,
    1e308,
    5e-324,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    False,
    "",
    " ",
    "x",
    "ünïcødé ☃",
    "\t\n",
    "a" * 600,
    "${HOME}",
    "../../etc/passwd",
    "__import__('os')",
    "1",
    "1.0",
    "true",
    "nan",
    [],
    [1],
    ["a"],
    [{}],
    [[[]]],
    {},
    {"name": "h100-sxm"},
    {"x": 1},
    {"name": 5},
    datetime.date(2026, 11, 30),
    datetime.datetime(2026, 11, 30, 12, 0, 0),
    datetime.time(12, 0),
    *PART_NAMES,
]
KEY_NAMES = [
    "tp",
    "pp",
    "dp",
    "layers",
    "name",
    "gpu",
    "nodes",
    "preset",
    "inner_steps",
    "strategy",
    "link",
    "layer",
    "nods",
    "gpus_per_nod",
    "x",
    "",
    "Model",
    "island",
    "sync",
    "__class__",
    "ünï",
]


def _paths(obj, prefix=()):
    """Every (container, key) inside ``obj``."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((obj, k, (*prefix, k)))
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append((obj, i, (*prefix, i)))
            out.extend(_paths(v, (*prefix, i)))
    return out


def _tables(obj):
    out = [obj] if isinstance(obj, dict) else []
    for cont, key, _ in _paths(obj):
        if isinstance(cont[key], dict):
            out.append(cont[key])
    return out


def mutate(rng: random.Random, d: dict) -> tuple[dict, list[str]]:
    d = copy.deepcopy(d)
    log = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        paths = _paths(d)
        op = rng.choice(
            [
                "replace",
                "replace",
                "replace",
                "part",
                "delete",
                "add",
                "rename",
                "dup",
                "move",
                "scale",
                "swap",
            ]
        )
        if not paths:
            op = "add"
        if op in ("replace", "part", "scale"):
            cont, key, p = rng.choice(paths)
            old = cont[key]
            if op == "part":
                new = rng.choice(PART_NAMES)
            elif op == "scale" and isinstance(old, (int, float)) and not isinstance(old, bool):
                new = rng.choice(
                    [
                        lambda x: -x,
                        lambda x: x * 1000,
                        lambda x: x + 1,
                        lambda x: x - 1,
                        lambda x: x / 2,
                        lambda x: x * 2**30,
                        lambda x: 0,
                    ]
                )(old)
            else:
                new = rng.choice(VALUES)
            cont[key] = copy.deepcopy(new)
            log.append(f"{op} {p}: {old!r:.40} -> {new!r:.40}")
        elif op == "delete":
            cont, key, p = rng.choice(paths)
            del cont[key]
            log.append(f"delete {p}")
        elif op == "add":
            table = rng.choice(_tables(d))
            k, v = rng.choice(KEY_NAMES), rng.choice(VALUES)
            table[k] = copy.deepcopy(v)
            log.append(f"add {k}={v!r:.40}")
        elif op == "rename":
            cont, key, p = rng.choice(paths)
            if isinstance(cont, dict) and isinstance(key, str) and key:
                i = rng.randrange(len(key))
                new_key = key[:i] + key[i + 1 :] if rng.random() < 0.5 else key + rng.choice("s_x")
                cont[new_key] = cont.pop(key)
                log.append(f"rename {p} -> {new_key}")
        elif op == "dup":
            if isinstance(d.get("island"), list) and d["island"] and rng.random() < 0.6:
                d["island"].append(copy.deepcopy(rng.choice(d["island"])))
                log.append("duplicate an island")
            else:
                src = rng.choice(list(d))
                dst = rng.choice(
                    [k for k in ("model", "training", "parallelism", "sync", "network") if k != src]
                )
                d[dst] = copy.deepcopy(d[src])
                log.append(f"copy [{src}] over [{dst}]")
        elif op == "move":
            cont, key, p = rng.choice(paths)
            table = rng.choice(_tables(d))
            if table is not cont.get(key) if isinstance(cont, dict) else True:
                table[str(key)] = copy.deepcopy(cont[key])
                log.append(f"move {p} into a table")
        elif op == "swap":
            (c1, k1, p1), (c2, k2, p2) = rng.choice(paths), rng.choice(paths)
            try:
                c1[k1], c2[k2] = copy.deepcopy(c2[k2]), copy.deepcopy(c1[k1])
            except (KeyError, IndexError):
                continue
            log.append(f"swap {p1} <-> {p2}")
    return d, log


def garble(rng: random.Random, text: str) -> tuple[str, str]:
    """A text-level mutation of a TOML document."""
    lines = text.splitlines(keepends=True)
    op = rng.choice(["cut", "dup-line", "del-line", "char", "header"])
    if op == "cut":
        n = rng.randrange(len(text) + 1)
        return text[:n], f"cut at {n}"
    i = rng.randrange(len(lines)) if lines else 0
    if op == "dup-line" and lines:
        return "".join(lines[: i + 1] + lines[i:]), f"duplicate line {i}"
    if op == "del-line" and lines:
        return "".join(lines[:i] + lines[i + 1 :]), f"delete line {i}"
    if op == "header":
        return (
            text + f"\n[{rng.choice(['model', 'training', 'island', 'sync', 'x'])}]\nlayers = 2\n",
            "extra header",
        )
    n = rng.randrange(len(text) + 1)
    c = rng.choice(["=", "[", "]", "{", '"', "'", "\\", "\x00", "\x7f", "\u2603", "#", "\n", ","])
    return text[:n] + c + text[n:], f"insert {c!r} at {n}"


def _toml_or_none(d):
    try:
        return to_toml(d)
    except (ValueError, TypeError):
        return None


def _cases():
    rng = random.Random(SEED)
    out = []
    while len(out) < CASES:
        name, seed = rng.choice(SEEDS)
        d, log = mutate(rng, seed)
        text = _toml_or_none(d)
        if text is None:
            continue
        garbled = rng.random() < 0.15
        if garbled:
            text, how = garble(rng, text)
            log.append(how)
        out.append((f"{len(out)}:{name}", text, garbled, log))
    return out


@pytest.fixture(scope="module")
def cases():
    return _cases()


def test_fuzz_estimate(cases, tmp_path, capsys):
    outcomes = {0: 0, 2: 0}
    for i, (name, text, garbled, log) in enumerate(cases):
        path = tmp_path / f"m{i}.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        code, out, err = run_cli(capsys, "estimate", path, "--json")
        where = f"case {name} {log}\n{text[:1500]}"
        check_outcome(code, out, err, where=where)
        if code == 2 and not garbled:  # a well-formed TOML file: the error names the key
            assert "$." in err, f"no key named: {err.strip()} ({where})"
        outcomes[code] += 1
    # the fuzz exercises both outcomes in earnest
    assert outcomes[0] >= len(cases) // 20 and outcomes[2] >= len(cases) // 3, outcomes


def test_fuzz_validate_over_a_folder_of_mutants(cases, tmp_path, capsys):
    folder = tmp_path / "mutants"
    folder.mkdir()
    for i, (_name, text, _, _) in enumerate(cases[:200]):
        if i % 3 == 0:
            text += "\n[measured]\ntokens_per_s_per_gpu = 1000.0\nmfu = 0.4\n"
        (folder / f"m{i}.toml").write_text(text, encoding="utf-8", errors="surrogatepass")
    code, out, err = run_cli(capsys, "validate", folder, "--json")
    assert code == 0 and "Traceback" not in err, err
    doc = check_json_report(out, "validate")
    assert doc["n_files"] == 200
    for f in doc["failures"]:
        assert "\n" not in f["error"] and f["error"], f


SET_KEYS = [
    "model.layers",
    "model.hidden",
    "model.preset",
    "training.global_batch",
    "training.tokens",
    "training.precision",
    "island[0].nodes",
    "island[0].gpu",
    "island[0].gpu.memory_gb",
    "island[0].inter_node",
    "island[1].nodes",
    "parallelism.tp",
    "parallelism.pp",
    "parallelism.sharding",
    "parallelism.schedule",
    "sync.strategy",
    "sync.inner_steps",
    "network.link",
    "network.link.bandwidth_gb_s",
    "measured.mfu",
    "source.note",
    "nope.x",
    "island[7].gpu",
    "model",
    "island",
    "island[0]",
    "a.b.c",
    "model.layers[0]",
    "island[0][1]",
]
SET_VALUES = [
    "1",
    "0",
    "-1",
    "2.5",
    "1e400",
    "nan",
    "inf",
    "true",
    '"x"',
    "x",
    "",
    "[]",
    "[1, 2]",
    "{}",
    "{name='h100-sxm', memory_gb=96.0}",
    "{a={b=1}}",
    "h100-sxm",
    "zero3",
    "diloco",
    "'''",
    '"',
    "1979-05-27",
    "0x1F",
    "1_000",
    "9" * 30,
    "{",
    "]",
    "=",
    "\u2603",
]


def test_fuzz_set_overrides(tmp_path, capsys):
    rng = random.Random(SEED + 1)
    bases = {}
    for name, d in BASES.items():
        p = tmp_path / f"{name}.toml"
        p.write_text(to_toml(d))
        bases[name] = p
    for _i in range(max(50, CASES // 2)):
        path = rng.choice(list(bases.values()))
        sets = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            sets += ["--set", f"{rng.choice(SET_KEYS)}={rng.choice(SET_VALUES)}"]
        code, out, err = run_cli(capsys, "estimate", path, "--json", *sets)
        check_outcome(code, out, err, where=f"{path.name} {sets}")


@pytest.mark.skipif(os.environ.get("SHARDMETER_FUZZ_EXPLORE", "1") == "0", reason="disabled")
def test_fuzz_sweep(tmp_path, capsys):
    from shardmeter.cli import app as cli

    cli._register_optional_commands()
    if "sweep" not in cli.COMMANDS:
        pytest.skip("sweep is not installed")
    rng = random.Random(SEED + 2)
    keys = [
        "parallelism.tp",
        "parallelism.pp",
        "island[0].nodes",
        "training.micro_batch",
        "model.layers",
        "parallelism.sharding",
        "training.precision",
        "island[0].gpu",
        "sync.inner_steps",
        "no.such",
    ]
    vals = [
        "1,2",
        "1,2,4",
        "0,1",
        "a,b",
        "1..8x2",
        "1..8+3",
        "8..1x2",
        "1..4x1",
        "1..4x0",
        "-1,1",
        "1.5,2",
        "h100-sxm,a100-sxm-80gb",
        "zero1,zero3",
        "bf16,fp8",
        "nan,1",
        "",
        ",",
        "1,,2",
    ]
    path = tmp_path / "base.toml"
    path.write_text(to_toml(BASES["single"]))
    for _i in range(40):
        args = []
        for _ in range(rng.choice([1, 1, 2])):
            args += ["--vary", f"{rng.choice(keys)}={rng.choice(vals)}"]
        code, out, err = run_cli(capsys, "sweep", path, "--json", *args)
        check_outcome(code, out, err, where=f"sweep {args}")
        if code == 0:
            for row in json.loads(out)["rows"]:
                check_json_report(json.dumps(row["report"]), f"sweep {args}")


def test_fuzz_plan_on_mutants(cases, tmp_path, capsys):
    from shardmeter.cli import app as cli

    cli._register_optional_commands()
    if "plan" not in cli.COMMANDS:
        pytest.skip("plan is not installed")
    picked = [c for c in cases if not c[2]][:30]
    for i, (name, text, _, log) in enumerate(picked):
        path = tmp_path / f"p{i}.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        code, out, err = run_cli(capsys, "plan", path, "--json", "--max-gpus", "16", "--top", "3")
        check_outcome(code, out, err, where=f"plan {name} {log}")
        if code == 0:
            for plan in json.loads(out)["plans"]:
                check_json_report(json.dumps(plan["report"]), f"plan {name}")


def test_mutants_through_the_real_entry_point(cases, tmp_path):
    """A few mutants run as separate processes: no traceback at the process level either."""
    env = {k: v for k, v in os.environ.items() if k != "SHARDMETER_DEBUG"}
    picked = [c for c in cases if not c[2]][:3] + [c for c in cases if c[2]][:2]
    for i, (name, text, _, log) in enumerate(picked):
        path = tmp_path / f"p{i}.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        res = subprocess.run(
            [sys.executable, "-m", "shardmeter", "estimate", str(path), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        check_outcome(res.returncode, res.stdout, res.stderr, where=f"{name} {log}")
