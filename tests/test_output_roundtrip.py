"""What ``import``, ``init`` and ``calibrate`` write loads again and keeps its values, whatever
characters the source held (issue 25 item 5): hostile file names (quotes, backslashes, newlines,
control characters, TOML syntax, any script, up to the 255 bytes a name may have), hostile
strings inside a config.json or a log, and very long ones. ``tests/test_import_roundtrip.py``
covers the strings inside torchtitan, Megatron and HF sources; this file covers the file names
they are known by, ``init``, long values, and ``calibrate`` end to end (the overlay it writes is
applied by the loader and a scenario naming it estimates).

Property tests with hypothesis, derandomized (CI sees the same examples every run).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardmeter
from shardmeter.cli.app import main
from shardmeter.importers.cli import import_config
from shardmeter.load.scenario import load_scenario

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = os.path.dirname(__file__)
CAL = os.path.join(HERE, "..", "examples", "calibration")

#: Characters a text file can hold (no NUL, no lone surrogates), weighted towards the ones that
#: break writers: quotes, backslashes, newlines, controls, TOML syntax, separators, wide scripts.
HOSTILE_CHARS = st.one_of(
    st.sampled_from(list("\"'\\\n\r\t\x0b\x0c\x1b\x7f\x85\u2028\u2029[]{}=#.,$`|;&<> ")),
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
)
TEXT = st.text(HOSTILE_CHARS, max_size=60)
#: A file's base name: no '/', not '.' or '..', at most 255 bytes in UTF-8.
FILE_NAME = st.text(HOSTILE_CHARS.filter(lambda c: c != "/"), min_size=1, max_size=80).filter(
    lambda s: s not in (".", "..") and len(s.encode("utf-8")) <= 240
)
#: A long value: a name or a description of tens of kilobytes.
LONG = st.builds(lambda s, n: (s or "x") * n, TEXT, st.integers(100, 2_000))

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

HF = {
    "model_type": "llama",
    "hidden_act": "silu",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 128,
    "intermediate_size": 256,
}
KEPT = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 1000, "ffn_hidden": 256, "ffn": "swiglu"}


def _scenario(text: str) -> dict:
    data = tomllib.loads(text)
    load_scenario(data)
    return data


def _folder(tmp_path, name: str):
    """A fresh folder for one example (hypothesis reuses ``tmp_path``)."""
    d = tmp_path / f"ex{len(os.listdir(tmp_path))}"
    d.mkdir()
    return d / name


@SETTINGS
@given(name=FILE_NAME, key=LONG, value=LONG)
def test_import_hf_of_a_hostile_file_name_and_long_strings_loads_and_keeps_values(tmp_path, name, key, value):
    path = _folder(tmp_path, name)
    path.write_text(json.dumps({**HF, key: value, "architectures": [value]}), encoding="utf-8")
    data = _scenario(import_config("hf", str(path), gpu="h100-sxm", gpus=8))
    assert {k: data["model"][k] for k in KEPT} == KEPT
    assert data["source"]["imported_from"] == f"Hugging Face config {name}"


@SETTINGS
@given(name=FILE_NAME, description=LONG)
def test_import_torchtitan_of_a_hostile_file_name_keeps_a_long_description(tmp_path, name, description):
    from shardmeter.importers.toml_out import toml_value

    path = _folder(tmp_path, name)
    path.write_text(
        f"[job]\ndescription = {toml_value(description)}\n"
        '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n',
        encoding="utf-8",
    )
    data = _scenario(import_config("torchtitan", str(path), gpu="h100-sxm", gpus=8))
    assert data["source"]["title"] == description
    assert (
        data["training"]["micro_batch"] == 1
        and data["training"]["seq_len" if "seq_len" in data["training"] else "global_batch"]
    )


@SETTINGS
@given(name=FILE_NAME, comment=TEXT.filter(lambda t: "\n" not in t and "\r" not in t))
def test_import_megatron_of_a_hostile_file_name_loads(tmp_path, name, comment):
    path = _folder(tmp_path, name)
    path.write_text(
        f"# {comment}\n--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
        "--vocab-size 1000 --micro-batch-size 1 --global-batch-size 8\n",
        encoding="utf-8",
    )
    data = _scenario(import_config("megatron", str(path), gpu="h100-sxm", gpus=8))
    assert (data["model"]["layers"], data["model"]["hidden"], data["training"]["global_batch"]) == (2, 64, 8)


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


#: Any text a JSON string can carry, lone surrogates included (``json.dumps`` writes them as
#: ``\\udXXX`` escapes).
JSON_TEXT = st.text(st.characters(blacklist_characters="\x00"), max_size=40)


@settings(SETTINGS, max_examples=12)
@given(name=FILE_NAME, model_type=JSON_TEXT, act=JSON_TEXT, extra=LONG)
def test_init_of_a_hostile_config_loads_and_keeps_values(tmp_path, name, model_type, act, extra):
    """``init --hf-config``: the file name is in the header, the config's strings in notes; the
    starter loads, with the config's shape. A model type or activation it does not know is one
    line naming the file."""
    path = _folder(tmp_path, name)
    path.write_text(json.dumps({**HF, "model_type": model_type, "hidden_act": act, extra: extra}), "utf-8")
    out = path.parent / "run.toml"
    code, _, err = _cli("init", "--hf-config", str(path), "--gpus", "8", "-o", str(out))
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert not out.exists()
        return
    assert code == 0, err
    data = _scenario(out.read_text(encoding="utf-8"))
    assert {k: data["model"][k] for k in KEPT if k != "ffn"} == {k: v for k, v in KEPT.items() if k != "ffn"}
    assert shardmeter.estimate(data).feasible


@settings(SETTINGS, max_examples=12)
@given(name=FILE_NAME.filter(lambda s: not s.endswith((".toml", ".csv"))), device=TEXT, host=TEXT)
def test_calibrate_of_a_hostile_log_writes_an_overlay_that_loads(tmp_path, name, device, host):
    """A log under a hostile name, its header lines holding hostile device and host names: the
    overlay records the file's name as it is, the loader applies it, and a scenario naming it
    estimates with the fitted link."""
    from shardmeter.registry.manager import get_registry
    from shardmeter.resolve.overlay import apply_overlays

    with open(os.path.join(CAL, "all_reduce_perf_1node.txt"), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    flat = " ".join(f"{device} {host}".split())  # one line: a log line holds no newline
    lines = [ln + f" {flat}" if ln.startswith("#  Rank") else ln for ln in lines]
    log = _folder(tmp_path, name)
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = log.parent / "cal.toml"
    code, _, err = _cli("calibrate", str(log), "--gpu", "h100-sxm", "--out", str(out))
    assert code == 0, err
    doc = tomllib.loads(out.read_text(encoding="utf-8"))
    assert [i["file"] for i in doc["provenance"]["inputs"]] == [name]
    apply_overlays(get_registry(), [str(out)], base=None, scenario_file=None)
    links = [e["name"] for e in doc.get("link", [])]
    assert links, doc
    sc = {
        "catalog": str(out),
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 64},
        "parallelism": {"tp": 8},
        "island": [{"gpu": "h100-sxm", "nodes": 1}],
    }
    assert shardmeter.estimate(sc).step_time_s > 0
