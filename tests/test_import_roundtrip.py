"""What ``shardmeter import`` copies out of a configuration (descriptions, dataset names, paths,
flag values, unknown settings, a config.json's strings) is written so that the scenario loads,
whatever the text holds: control characters, quotes, backslashes, TOML syntax, lone surrogates
(a JSON ``"\\ud800"``), line and paragraph separators. Property tests with hypothesis."""

from __future__ import annotations

import json
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardmeter.importers.cli import import_config
from shardmeter.importers.toml_out import toml_value
from shardmeter.load.scenario import load_scenario

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Any text a UTF-8 file can hold (no NUL: the one reader refuses it; no surrogates).
FILE_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
#: Any text a JSON string can carry, lone surrogates included.
JSON_TEXT = st.text(st.characters(blacklist_characters="\x00"), max_size=40)
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI never fails on a draw it has not seen
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _loads(text: str) -> None:
    load_scenario(tomllib.loads(text))


@SETTINGS
@given(description=FILE_TEXT, dataset=FILE_TEXT, key=FILE_TEXT, value=FILE_TEXT)
def test_torchtitan_strings_round_trip(tmp_path, description, dataset, key, value):
    job = tmp_path / "job.toml"
    job.write_text(
        f"[job]\ndescription = {toml_value(description)}\n"
        f'[model]\nname = "llama3"\nflavor = "8B"\nhf_assets_path = {toml_value(value)}\n'
        f"[training]\nlocal_batch_size = 1\nseq_len = 8192\ndataset = {toml_value(dataset)}\n"
        f"{toml_value(key)} = {toml_value(value)}\n[metrics]\nsave_tb_folder = {toml_value(value)}\n",
        encoding="utf-8",
    )
    text = import_config("torchtitan", str(job), gpu="h100-sxm", gpus=8)
    _loads(text)
    data = tomllib.loads(text)
    assert data["source"]["title"] == description
    assert data["source"]["dataset"] == dataset


@SETTINGS
@given(
    path=FILE_TEXT.filter(lambda t: "'" not in t),
    comment=FILE_TEXT.filter(lambda t: "\n" not in t),  # a newline would end the comment: not a comment
)
def test_megatron_flag_values_and_comments_round_trip(tmp_path, path, comment):
    script = tmp_path / "train.sh"
    script.write_text(
        f"# {comment}\nDATA='{path}'\nARGS=(\n  --num-layers 2 --hidden-size 64 --num-attention-heads 4\n"
        f"  --seq-length 128 --vocab-size 1000 --micro-batch-size 1\n  --data-path \"$DATA\" --split '{path}'\n)\n",
        encoding="utf-8",
    )
    _loads(import_config("megatron", str(script), gpu="h100-sxm", gpus=8))


@SETTINGS
@given(model_type=JSON_TEXT, act=JSON_TEXT, extra=JSON_TEXT)
def test_hf_config_strings_round_trip(tmp_path, model_type, act, extra):
    cfg = {
        "model_type": model_type, "hidden_act": act, "num_hidden_layers": 2, "hidden_size": 64,
        "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 128,
        "intermediate_size": 256, extra: extra,
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")  # ASCII: lone surrogates as \\udXXX escapes
    _loads(import_config("hf", str(path)))
