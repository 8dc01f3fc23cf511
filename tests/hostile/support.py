"""Helpers shared by the hostile-input and fuzz tests: a small TOML writer, valid
base scenarios, an in-process CLI runner and the checks every outcome must pass.

Every run of the CLI must end in one of two ways:

* exit 0 and, with ``--json``, exactly one JSON document on stdout whose numbers
  are all finite (strict JSON: no NaN/Infinity), with no number invented for an
  infeasible plan; or
* exit 2, nothing on stdout, and one short line on stderr,
  ``shardmeter: error: FILE: $.key.path: what is wrong``.

Never a traceback, never another exit code.
"""

from __future__ import annotations

import json
import math
import re

from shardmeter.cli.app import main

#: The longest error line we accept (a long value is shortened in the message).
MAX_ERROR_CHARS = 400

# A small, feasible single-island scenario.
BASE = {
    "model": {
        "layers": 4,
        "hidden": 512,
        "heads": 8,
        "vocab": 32000,
        "seq_len": 1024,
        "ffn": "swiglu",
        "kv_heads": 4,
    },
    "training": {
        "global_batch": 64,
        "micro_batch": 2,
        "precision": "bf16",
        "recompute": "selective",
        "tokens": 1.0e9,
    },
    "island": [
        {
            "name": "dc",
            "gpu": "h100-sxm",
            "nodes": 2,
            "gpus_per_node": 8,
            "intra_node": "nvlink4",
            "inter_node": "ib-ndr",
            "nics_per_node": 8,
            "price": "cloud-on-demand",
        }
    ],
    "parallelism": {
        "tp": 2,
        "pp": 2,
        "sequence_parallel": True,
        "sharding": "zero1",
        "schedule": "interleaved",
        "virtual_stages": 2,
    },
}

# Two islands with DiLoCo, an inline GPU override and a WAN link table.
BASE_MULTI = {
    "model": {"preset": "gpt3-13b", "layers": 8},
    "training": {"global_batch": 256, "micro_batch": 1, "tokens": 1.0e10},
    "island": [
        {"name": "east", "gpu": {"name": "a100-sxm-80gb", "memory_gb": 96.0}, "nodes": 4},
        {"name": "west", "gpu": "h100-sxm", "nodes": 4, "price": "owned"},
    ],
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 1.25, "latency_us": 40000.0}},
    "parallelism": {"tp": 8, "sharding": "zero1"},
    "sync": {"strategy": "diloco", "inner_steps": 100, "compression_bits": 4, "fragments": 2},
}

# A plan that cannot run (out of memory): exit 0, feasible = false, reasons given.
BASE_INFEASIBLE = {
    "model": {"preset": "gpt3-175b"},
    "training": {"global_batch": 8, "micro_batch": 1},
    "island": [{"gpu": "l4", "nodes": 1}],
}

BASES = {"single": BASE, "multi": BASE_MULTI, "infeasible": BASE_INFEASIBLE}


# ---------------------------------------------------------------------------------------------
# TOML writer (tests only: enough for every value a scenario can hold, NaN and inf included)

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k) -> str:
    k = str(k)
    return k if _BARE.match(k) else _string(k)


def _string(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)  # a TOML basic string, except DEL and lone surrogates
    out = out.replace("\x7f", "\\u007f")
    return "".join(c if not 0xD800 <= ord(c) <= 0xDFFF else "\\uFFFD" for c in out)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan" if math.copysign(1.0, v) > 0 else "-nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    if v is None:  # TOML has no null: the fuzz uses None for "delete this key"
        raise ValueError("None has no TOML form")
    raise TypeError(type(v))


def to_toml(d: dict) -> str:
    """``d`` as a TOML document: one ``key = value`` line per top-level key (tables inline)."""
    return "".join(f"{_key(k)} = {toml_value(v)}\n" for k, v in d.items())


# ---------------------------------------------------------------------------------------------
# running the CLI in-process


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """``shardmeter ARGV`` in this process: (exit code, stdout, stderr)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own exits (usage errors, --help)
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def _no_constants(name):
    raise AssertionError(f"non-finite number {name} in JSON output")


def check_json_report(out: str, where: str = "") -> dict:
    """Exactly one strict JSON document whose numbers are finite; a report keeps SCENARIO.md's rules."""
    doc = json.loads(out, parse_constant=_no_constants)
    _walk_finite(doc, "$", where)
    if isinstance(doc, dict) and "feasible" in doc and "step_time_s" in doc:
        check_report_dict(doc, where)
    return doc


def _walk_finite(obj, path, where):
    if isinstance(obj, float):
        assert math.isfinite(obj), f"{path} = {obj!r} ({where})"
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _walk_finite(v, f"{path}.{k}", where)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _walk_finite(v, f"{path}[{i}]", where)


CORE = (
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "model_tflops_per_gpu",
    "hardware_tflops_per_gpu",
    "mfu",
    "hfu",
    "compute_utilization",
    "memory_per_gpu_gb",
    "bottleneck",
)


def check_report_dict(d: dict, where: str = "") -> None:
    if d["feasible"]:
        for f in CORE:
            assert d[f] is not None, f"feasible report with null {f} ({where})"
        for f in CORE[:-1]:
            assert d[f] >= 0, f"{f} = {d[f]} < 0 ({where})"
        assert d["step_time_s"] > 0
        total = sum(d["breakdown_s"].values())
        assert math.isclose(total, d["step_time_s"], rel_tol=1e-9), (
            d["breakdown_s"],
            d["step_time_s"],
            where,
        )
    else:
        assert d["reasons"], f"infeasible without reasons ({where})"
        for f in (*CORE[:-2], "wall_clock_s", "cost_usd"):
            assert d[f] is None, f"infeasible report invents {f} = {d[f]} ({where})"


def check_error(code: int, out: str, err: str, *expect: str, where: str = "") -> str:
    """Exit 2, empty stdout, one short line on stderr containing every ``expect``."""
    assert "Traceback" not in err, f"traceback ({where}):\n{err}"
    assert code == 2, f"exit {code} ({where}); stderr: {err[:500]}"
    assert out == "", f"stdout on error ({where}): {out[:200]}"
    lines = err.splitlines()
    assert len(lines) == 1, f"{len(lines)} lines on stderr ({where}):\n{err[:1000]}"
    line = lines[0]
    assert line.startswith("shardmeter: error: "), line
    assert len(line) <= MAX_ERROR_CHARS, f"{len(line)} characters ({where}): {line[:300]}..."
    for e in expect:
        assert e in line, f"{e!r} not in {line!r} ({where})"
    return line


def check_outcome(code: int, out: str, err: str, where: str = "", json_out: bool = True):
    """Either a clean report (exit 0) or a clean one-line error naming a key (exit 2)."""
    assert "Traceback" not in err, f"traceback ({where}):\n{err}"
    if code == 0:
        if json_out:
            return check_json_report(out, where)
        return out
    line = check_error(code, out, err, where=where)
    return line
