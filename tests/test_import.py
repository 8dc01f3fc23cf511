"""``shardmeter import``: torchtitan job files, Megatron-LM arguments and Hugging Face configs
as scenarios (fixtures: the frameworks' own published configurations, tests/fixtures/)."""

from __future__ import annotations

import json
import pathlib
import re
import sys

import pytest
from cli_helpers import one_line_error, run

import shardmeter
from shardmeter.importers.cli import import_config
from shardmeter.importers.megatron import padded_vocab, parse_args_text
from shardmeter.importers.torchtitan import ffn_hidden, llama3_model, stage_layers

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIX = pathlib.Path(__file__).parent / "fixtures"
TT = (
    FIX / "torchtitan" / "2026-02-23_238fa99_last_toml" / "torchtitan" / "models" / "llama3" / "train_configs"
)
TT_8B = TT / "llama3_8b.toml"
TT_405B = TT / "llama3_405b.toml"
TT_DEBUG = TT / "debug_model.toml"
MG = FIX / "megatron" / "2026-08-22_d98e8a6" / "examples"
MG_GPT3 = MG / "gpt3" / "train_gpt3_175b_distributed.sh"
MG_LLAMA = MG / "llama" / "train_llama3_8b_h100_fp8.sh"


def _tables(text: str) -> dict:
    return tomllib.loads(text)


# -- torchtitan -------------------------------------------------------------------------------------


def test_torchtitan_feedforward_widths_are_the_published_llama3_ones():
    # intermediate_size of Meta's Llama 3 8B / 70B / 405B config.json
    assert ffn_hidden(4096, 1024, 1.3) == 14336
    assert ffn_hidden(8192, 4096, 1.3) == 28672
    assert ffn_hidden(16384, 4096, 1.2) == 53248
    assert llama3_model("debugmodel")["ffn_hidden"] == 768  # 2/3 x 1024 = 682 -> a multiple of 256
    assert llama3_model("8B_flex") == llama3_model("8B") and llama3_model("9B") is None


def test_torchtitan_pipeline_split_matches_its_generator():
    # generate_llm_fqn_per_model_part(4, 32): 34 effective layers, 9+9+8+8, embedding and output count 1
    assert stage_layers(4, 32, 1, 1) == [8, 9, 8, 7]
    assert sum(stage_layers(16, 126, 1, 1)) == 126


def test_the_torchtitan_8b_job_imports_to_a_scenario_that_estimates_once_gpus_are_given():
    text = import_config("torchtitan", str(TT_8B), gpu="h100-sxm", gpus=64)
    data = _tables(text)
    assert (
        data["model"]["layers"] == 32 and data["model"]["kv_heads"] == 8 and data["model"]["seq_len"] == 8192
    )
    assert data["parallelism"]["sharding"] == "fsdp" and "dp" not in data["parallelism"]
    assert data["training"]["framework"] == "torchtitan"
    assert data["training"]["global_batch"] == 64 and data["training"]["micro_batch"] == 1
    assert data["training"]["tokens"] == 1000 * 64 * 8192
    assert data["island"] == [{"gpu": "h100-sxm", "nodes": 8, "gpus_per_node": 8}]
    report = shardmeter.estimate(data)
    assert report.feasible, report.reasons
    assert report.params == pytest.approx(8.03e9, rel=0.01)
    assert report.gpus == 64


def test_the_torchtitan_import_comments_every_setting_it_does_not_map():
    text = import_config("torchtitan", str(TT_8B))
    for line in (
        'recompute = "op" # selective_ac_option = "op"',
        "compile = false # [compile] enable = false: eager PyTorch",
        "# not mapped: [optimizer] lr = 0.0003",
        "# not mapped: [training] max_norm = 1.0",
        "# not modelled [checkpoint]: enable = false",
        '# not modelled [metrics]: log_freq = 10, enable_tensorboard = true, save_tb_folder = "tb"',
        "give --gpu NAME --gpus N",
    ):
        assert line in re.sub(r"(\S) {2,}#", r"\1 #", text), line


def test_without_gpu_the_island_is_a_placeholder_that_estimate_rejects_naming_it(tmp_path, capsys):
    out = tmp_path / "run.toml"
    assert run(capsys, "import", "torchtitan", TT_8B, "-o", out)[0] == 0
    code, _, err = run(capsys, "estimate", out)
    assert code == 2 and "$.island[0].gpu: unknown hardware 'GPU-NAME'" in one_line_error(err)


def test_the_torchtitan_405b_job_maps_tp_fp8_and_full_recompute():
    text = import_config("torchtitan", str(TT_405B), gpu="h100-sxm", gpus=512)
    data = _tables(text)
    assert data["parallelism"]["tp"] == 8 and data["parallelism"]["sequence_parallel"] is True
    assert data["training"]["precision"] == "fp8" and data["training"]["recompute"] == "full"
    assert data["training"]["global_batch"] == 2 * 64 and data["training"]["micro_batch"] == 2
    assert data["parallelism"]["async_tp"] is True and data["training"]["compile"] is True
    assert data["training"]["fp8_params"] is True
    assert shardmeter.estimate(data).params == pytest.approx(405.9e9, rel=0.01)


def test_the_torchtitan_debug_model_ignores_the_schedule_without_pp():
    text = import_config("torchtitan", str(TT_DEBUG), gpu="a100-sxm-80gb", gpus=8)
    data = _tables(text)
    assert data["model"]["vocab"] == 2048 and data["model"]["hidden"] == 256
    assert "schedule" not in data["parallelism"]
    assert '# ignored: pipeline_parallel_schedule = "Interleaved1F1B"' in text
    # selective_ac_option = "2": every second block of the stage's layers fully recomputed
    assert data["training"]["recompute"] == "full"
    assert data["training"]["recompute_layers"] == data["model"]["layers"] // 2
    assert shardmeter.estimate(data).feasible


def test_torchtitan_hsdp_pipeline_and_interleaving(tmp_path):
    cfg = tmp_path / "job.toml"
    cfg.write_text(
        '[model]\nname = "llama3"\nflavor = "70B"\n[training]\nlocal_batch_size = 8\nglobal_batch_size = 256\n'
        "seq_len = 8192\n[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = -1\n"
        'tensor_parallel_degree = 8\npipeline_parallel_degree = 4\npipeline_parallel_schedule = "Interleaved1F1B"\n'
        "pipeline_parallel_microbatch_size = 2\n",
        encoding="utf-8",
    )
    data = _tables(import_config("torchtitan", str(cfg), gpu="h100-sxm", gpus=256))
    p = data["parallelism"]
    assert (p["sharding"], p["tp"], p["pp"], p["schedule"], p["virtual_stages"]) == (
        "hsdp",
        8,
        4,
        "interleaved",
        2,
    )
    assert data["training"]["micro_batch"] == 2 and data["training"]["global_batch"] == 256


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        (12, "--gpus 12: not a multiple of replicate x tp x pp x cp = 8"),
        (None, None),
    ],
)
def test_torchtitan_world_size_errors_name_gpus(gpus, message, capsys):
    argv = ["import", "torchtitan", TT_405B, "--gpu", "h100-sxm"] + (["--gpus", str(gpus)] if gpus else [])
    code, out, err = run(capsys, *argv)
    if message is None:
        assert code == 0 and "nodes = 1" in out
    else:
        assert code == 2 and message in one_line_error(err)


# -- Megatron-LM ------------------------------------------------------------------------------------


def test_megatron_argument_lines_are_parsed_as_its_scripts_write_them():
    found, bad = parse_args_text(
        "ARGS=(\n    --num-layers 96 \\\n    --attention-backend auto # comment\n)\n"
        '    "--fp8-format hybrid"\n--data-path $DATA_PATH\ntorchrun ${A[@]} pretrain_gpt.py \\\n'
    )
    assert [(f, v) for f, v, _ in found] == [
        ("num-layers", ["96"]),
        ("attention-backend", ["auto"]),
        ("fp8-format", ["hybrid"]),
        ("data-path", ["$DATA_PATH"]),
    ]
    assert bad == []


def test_megatron_pads_the_vocabulary_as_vocab_utils_does():
    assert padded_vocab(50257, 128, 8) == 51200 and padded_vocab(50257, 128, 1) == 50304
    assert padded_vocab(128256, 128, 1) == 128256


def test_the_megatron_gpt3_175b_example_imports_and_estimates():
    text = import_config("megatron", str(MG_GPT3), gpu="a100-sxm-80gb", gpus=1024)
    data = _tables(text)
    m, t, p = data["model"], data["training"], data["parallelism"]
    assert (m["layers"], m["hidden"], m["heads"], m["seq_len"], m["vocab"]) == (96, 12288, 96, 2048, 51200)
    assert m["ffn_hidden"] == 4 * 12288 and m["tied_embeddings"] is True and m["ffn"] == "gelu"
    assert (t["global_batch"], t["micro_batch"], t["precision"]) == (1536, 1, "fp16")
    assert (p["tp"], p["pp"], p["sharding"]) == (8, 16, "none")
    assert "# not mapped: --data-path ${5} (set outside the file)\n" in text
    assert "# not mapped: --lr 6.0e-5" in text
    report = shardmeter.estimate(data)
    assert report.feasible, report.reasons
    assert report.params == pytest.approx(175e9, rel=0.01)


def test_the_megatron_llama3_8b_example_maps_gqa_fp8_and_the_distributed_optimizer():
    text = import_config("megatron", str(MG_LLAMA), gpu="h100-sxm", gpus=8)
    data = _tables(text)
    m, t, p = data["model"], data["training"], data["parallelism"]
    assert (m["kv_heads"], m["ffn_hidden"], m["vocab"], m["tied_embeddings"], m["dropout"]) == (
        8,
        14336,
        128256,
        False,
        False,
    )
    assert (t["precision"], t["global_batch"], p["sharding"], p["sequence_parallel"]) == (
        "fp8",
        128,
        "zero1",
        True,
    )
    assert (t["fp8_recipe"], t["fp8_params"]) == ("delayed", True)
    assert t["tokens"] == 1953125000 * 8192
    assert shardmeter.estimate(data).params == pytest.approx(8.03e9, rel=0.01)


def test_megatron_defaults_and_the_scripts_own_variables(tmp_path):
    args = tmp_path / "args.sh"
    args.write_text(
        'LAYERS=${LAYERS:-24}\nTP=2\nGBS=$((8 * TP))\nARGS="--hidden-size 2048 --num-attention-heads 16"\n'
        "--num-layers $LAYERS \\\n$ARGS --swiglu \\\n--vocab-size 32000 \\\n"
        "--seq-length 4096 --micro-batch-size 2 --global-batch-size ${GBS} \\\n--tensor-model-parallel-size ${TP} --bf16\n"
        "--recompute-granularity full --recompute-method block --recompute-num-layers 4\n",
        encoding="utf-8",
    )
    data = _tables(import_config("megatron", str(args), gpu="h100-sxm", gpus=16))
    assert data["model"]["layers"] == 24 and data["model"]["hidden"] == 2048  # ${LAYERS:-24}, "$ARGS"
    assert data["model"]["ffn_hidden"] == int((4 * 2048 * 2 / 3) / 64) * 64 == 5440
    assert data["training"]["global_batch"] == 16 and data["parallelism"]["tp"] == 2  # $((8 * TP))
    assert data["training"]["recompute"] == "full" and data["training"]["recompute_layers"] == 4
    # --var gives a variable set outside the file (the environment ${LAYERS:-24} reads)
    data = _tables(import_config("megatron", str(args), gpu="h100-sxm", gpus=16, variables={"LAYERS": "32"}))
    assert data["model"]["layers"] == 32


def test_a_variable_set_outside_the_script_is_one_line_naming_it_and_how_to_give_it(tmp_path, capsys):
    args = tmp_path / "args.sh"
    args.write_text(
        "--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 4096 --vocab-size 32000\n"
        "--tensor-model-parallel-size ${TP} --pipeline-model-parallel-size $PP --data-path $DATA\n",
        encoding="utf-8",
    )
    code, out, err = run(capsys, "import", "megatron", args, "--gpu", "h100-sxm")
    line = one_line_error(err)
    assert code == 2 and not out
    assert "TP (--tensor-model-parallel-size: --var TP=VALUE or --set parallelism.tp=VALUE)" in line
    assert "PP (--pipeline-model-parallel-size: --var PP=VALUE" in line and "DATA" not in line
    code, out, _ = run(capsys, "import", "megatron", args, "--var", "TP=2", "--var", "PP=4", "--gpus", "64")
    data = _tables(out)
    assert code == 0 and (data["parallelism"]["tp"], data["parallelism"]["pp"]) == (2, 4)
    assert "# not mapped: --data-path ${DATA} (set outside the file)" in out
    code, out, _ = run(capsys, "import", "megatron", args, "--set", "parallelism.tp=8", "--var", "PP=1")
    assert code == 0 and _tables(out)["parallelism"]["tp"] == 8


def test_megatron_deepseek_v3_example_is_671b_with_its_moe_and_mla_flags():
    path = MG / "megatron_fsdp" / "sbatch_mfsdp_deepseek_v3.sh"
    data = _tables(import_config("megatron", str(path), gpu="h100-sxm", gpus=1024))
    m = data["model"]
    assert (m["experts"], m["experts_per_token"], m["moe_ffn_hidden"], m["shared_experts"]) == (
        256,
        8,
        2048,
        1,
    )
    assert m["dense_layers"] == 3  # --moe-layer-freq [0]*3+[1]*58
    assert (m["head_dim"], m["v_head_dim"], m["q_lora_rank"], m["kv_lora_rank"]) == (192, 128, 1536, 512)
    assert m["vocab"] == 129280 and data["parallelism"]["sharding"] == "zero3"  # --use-megatron-fsdp
    # DeepSeek-V3: 671 B parameters without its multi-token prediction module (arXiv 2412.19437)
    assert shardmeter.estimate(data).params == pytest.approx(671e9, rel=0.005)
    text = import_config("megatron", str(path), gpu="h100-sxm", gpus=1024)
    assert "# planned: model.mtp_layers = 1" in text


@pytest.mark.parametrize(
    ("freq", "dense"), [("1", 0), ("2", 12), ("([0]*3+[1]*21)", 3), ("([1]*3+[0]*1)*6", 6)]
)
def test_megatron_moe_layer_freq_gives_the_dense_layers(freq, dense):
    from shardmeter.importers.megatron_model import layer_pattern

    assert layer_pattern(freq, 24, "f").count(0) == dense


@pytest.mark.parametrize("freq", ["[0]*3+[1]*5", "__import__('os')", "[2]*24", "[0]*10**9"])
def test_megatron_moe_layer_freq_that_is_not_a_pattern_is_one_line(freq):
    from shardmeter.importers.files import ConfigError
    from shardmeter.importers.megatron_model import layer_pattern

    with pytest.raises(ConfigError, match="--moe-layer-freq"):
        layer_pattern(freq, 24, "f")


# -- Hugging Face -----------------------------------------------------------------------------------

#: meta-llama/Meta-Llama-3-8B config.json (the fields the mapping reads).
LLAMA3_8B_HF = {
    "model_type": "llama",
    "hidden_act": "silu",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}


def test_a_hugging_face_config_imports_with_a_layout_that_fits(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA3_8B_HF), encoding="utf-8")
    text = import_config("hf", str(cfg), gpu="h100-sxm", gpus=16)
    data = _tables(text)
    assert data["model"]["ffn_hidden"] == 14336 and data["training"]["global_batch"] == 512
    report = shardmeter.estimate(data)
    assert report.feasible and report.params == pytest.approx(8.03e9, rel=0.01)
    assert "max_position_embeddings" in text


# -- the command ------------------------------------------------------------------------------------


def test_import_refuses_to_overwrite_its_input(tmp_path, capsys):
    cfg = tmp_path / "job.toml"
    cfg.write_bytes(TT_8B.read_bytes())
    code, _, err = run(capsys, "import", "torchtitan", cfg, "-o", cfg)
    assert code == 2 and "refusing to overwrite an input" in one_line_error(err)
    assert cfg.read_bytes() == TT_8B.read_bytes()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["torchtitan", "missing.toml"], "missing.toml: no such file"),
        (["megatron", str(TT_8B)], "no Megatron-LM model arguments (--num-layers, --hidden-size ...)"),
        (["hf", str(TT_8B)], "not valid JSON"),
        (["torchtitan", str(TT_8B), "--gpu", "h100-sxn"], "--gpu: unknown hardware 'h100-sxn'"),
        (["caffe", str(TT_8B)], "invalid choice: 'caffe'"),
    ],
)
def test_import_errors_are_one_line(argv, message, capsys):
    code, out, err = run(capsys, "import", *argv)
    assert code == 2 and not out and message in one_line_error(err)


# -- numbers and hostile inputs: one line naming the file and the field -----------------------------

_MG = "--num-layers {n} --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000\n"
_TT = '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ntensor_parallel_degree = {n}\n'
_PY = (
    "def job():\n    return Trainer.Config(model_spec=model_registry('8B'),\n"
    "        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=8192, max_context_length=8192,"
    " steps={n}))\n"
)


@pytest.mark.parametrize(
    ("fmt", "name", "template", "value", "message"),
    [
        ("megatron", "args.sh", _MG, "\u0663\u0662", "--num-layers: expected an integer in ASCII digits"),
        ("megatron", "args.sh", _MG, "\u00b2", "--num-layers: expected an integer in ASCII digits"),
        ("megatron", "args.sh", _MG, "1e400", "--num-layers: inf is not a finite number"),
        ("megatron", "args.sh", _MG, "9" * 30, "--num-layers: 999999999999999999999999... is too large"),
        (
            "torchtitan",
            "job.toml",
            _TT,
            '"\u0663"',
            "parallelism.tensor_parallel_degree: expected an integer",
        ),
        ("torchtitan", "job.toml", _TT, "inf", "parallelism.tensor_parallel_degree: inf is not a finite"),
        ("torchtitan", "job.toml", _TT, "1e300", "parallelism.tensor_parallel_degree: 1e+300 is beyond"),
        ("torchtitan", "config_registry.py", _PY, "1e999", "training.steps: inf is not a finite number"),
        ("torchtitan", "config_registry.py", _PY, "10**40", "training.steps: 1.00000e+40 is beyond 1e+18"),
    ],
)
def test_a_number_that_is_not_one_is_a_one_line_error_naming_the_file_and_field(
    tmp_path, capsys, fmt, name, template, value, message
):
    path = tmp_path / name
    path.write_text(template.format(n=value), encoding="utf-8")
    extra = ["--config", "job"] if name.endswith(".py") else []
    code, out, err = run(capsys, "import", fmt, path, "--gpu", "h100-sxm", *extra)
    line = one_line_error(err)
    assert code == 2 and not out and str(path) in line and message in line, line


def test_a_registry_is_read_not_run(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "llama3").mkdir()
    path = tmp_path / "llama3" / "config_registry.py"
    path.write_text(
        f"import os\nos.system('touch {marker}')\n\ndef job():\n    open({str(marker)!r}, 'w')\n"
        "    return Trainer.Config(model_spec=model_registry('debugmodel'))\n",
        encoding="utf-8",
    )
    text = import_config("torchtitan", str(path), gpu="h100-sxm", config="job")
    assert not marker.exists() and "layers = 6" in text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("def job(:\n", "not valid Python (line 1"),
        ("def job():\n    return job()\n", "calls nested more than"),
        ("def job():\n    x = [1]\n    for i in range(10**9): x = x + x\n", "not a Trainer.Config"),
        ("def job():\n    return 5\n", "job() returns 5, not a Trainer.Config"),
    ],
)
def test_a_registry_that_cannot_be_read_is_one_line(tmp_path, capsys, body, message):
    path = tmp_path / "config_registry.py"
    path.write_text(body, encoding="utf-8")
    code, _, err = run(capsys, "import", "torchtitan", path, "--config", "job")
    assert code == 2 and message in one_line_error(err)


def test_torchtitan_registry_needs_config_and_names_the_functions(capsys):
    reg = FIX / "torchtitan" / "2026-08-21_b5bcd76_config_registry" / "torchtitan" / "models" / "llama3"
    code, _, err = run(capsys, "import", "torchtitan", reg / "config_registry.py")
    assert code == 2 and "--config NAME: which function to import (llama3_debugmodel," in one_line_error(err)
    code, _, err = run(capsys, "import", "torchtitan", reg / "config_registry.py", "--config", "llama3_8bb")
    assert code == 2 and "no such function (did you mean llama3_8b" in one_line_error(err)


# -- Megatron-Bridge and NeMo 2 recipes -------------------------------------------------------------

BRIDGE = FIX / "megatron-bridge" / "2026-08-22_067f987" / "src" / "megatron" / "bridge"
NEMO = FIX / "nemo2" / "2025-09-20_8cfedd7" / "nemo" / "collections" / "llm" / "recipes"


def test_a_megatron_bridge_performance_recipe_follows_its_tree():
    # llama3_8b_pretrain_8gpu_h100_fp8cs_config() builds on llama3_8b_pretrain_config() of
    # perf_recipes/llama/common.py, which re-exports recipes/llama/h100/llama3.py's, on _pretrain_common()
    path = BRIDGE / "perf_recipes" / "llama" / "h100" / "llama3.py"
    text = import_config(
        "megatron", str(path), gpu="h100-sxm", config="llama3_8b_pretrain_8gpu_h100_fp8cs_config"
    )
    data = _tables(text)
    assert data["model"] == {"preset": "llama3-8b", "seq_len": 8192}
    t = data["training"]
    assert (t["global_batch"], t["micro_batch"], t["precision"], t["fp8_recipe"]) == (
        128,
        1,
        "fp8",
        "tensorwise",
    )
    assert (t["recompute"], t["recompute_layers"]) == ("full", 5)
    assert data["island"][0]["nodes"] == 1 and "the recipe's name: 8 H100 GPUs" in text
    assert shardmeter.estimate(data).params == pytest.approx(8.03e9, rel=0.01)


def test_a_nemo2_recipe_reads_its_trainer_strategy_and_data():
    text = import_config("megatron", str(NEMO / "llama3_8b.py"), gpu="h100-sxm", config="pretrain_recipe")
    data = _tables(text)
    assert data["model"]["preset"] == "llama3-8b" and data["model"]["seq_len"] == 8192
    assert (data["parallelism"]["cp"], data["parallelism"]["sharding"]) == (2, "zero1")
    assert (data["training"]["global_batch"], data["training"]["precision"]) == (512, "bf16")
    assert "# not mapped: ckpt_async_save = true" in text


def test_a_recipe_function_is_named_with_config(capsys):
    code, _, err = run(capsys, "import", "megatron", NEMO / "llama3_8b.py")
    assert code == 2 and "--config NAME: which recipe function to import (pretrain_recipe" in one_line_error(
        err
    )


@pytest.mark.parametrize(
    ("folder", "version"),
    [
        ("2024-12-26_9dec370/train_configs", "2025-02"),
        ("2025-03-31_3e75bae/torchtitan/models/llama/train_configs", "2025-06-04"),
        ("2025-06-13_820504e/torchtitan/models/llama3/train_configs", "2025-08-19"),
        ("2026-02-23_238fa99_last_toml/torchtitan/models/llama3/train_configs", "2026-02-23"),
    ],
)
def test_a_torchtitan_job_file_imports_with_the_version_its_layout_belongs_to(folder, version):
    """``shardmeter import`` writes the torchtitan version it read (the newest whose job-file
    layout the file has), so the profile fills what the file leaves out as that torchtitan did."""
    path = FIX / "torchtitan" / folder / "llama3_8b.toml"
    text = import_config("torchtitan", str(path), gpu="h100-sxm", gpus=8)
    sc = shardmeter.load_scenario(tomllib.loads(text))
    assert sc.training.framework_version == version
    assert any(n.startswith("framework torchtitan as of") for n in sc.notes)
