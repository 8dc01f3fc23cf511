"""First contact with the command line: bare ``shardmeter``, every command's help, shell
completion, a scenario on standard input, ``estimate --plot`` and ``shardmeter init``."""

from __future__ import annotations

import argparse
import io
import sys

import pytest
from cli_helpers import one_line_error, run

import shardmeter
from shardmeter.cli import app as cli
from shardmeter.importers.starter import STARTER_BATCH_TOKENS, starter_batch
from shardmeter.load import files as scenario_files

SCENARIO = b"""[model]
preset = "llama3-8b"
[training]
global_batch = 64
[[island]]
gpu = "h100-sxm"
nodes = 1
[parallelism]
sharding = "fsdp"
"""


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    cli._register_optional_commands()
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _helps() -> dict[str, str]:
    cli._register_optional_commands()
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {c.dest: c.help for c in action._choices_actions}


def test_bare_shardmeter_lists_every_command_with_its_help_and_exits_0(capsys):
    code, out, err = run(capsys)
    assert code == 0 and not err
    assert out.startswith("usage: shardmeter")
    for name, text in _helps().items():
        assert name in out, name
        assert text.split()[0] in out, (name, text)
    for name in ("init", "import", "estimate", "plan", "completion"):
        assert f"    {name}" in out, name


def test_the_main_help_names_the_debug_variable_and_the_completion_command(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert "SHARDMETER_DEBUG" in out and "shardmeter completion bash" in out


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_every_command_has_a_one_line_help_a_description_and_an_example(command, capsys):
    sub = _subparsers()[command]
    help_text = _helps()[command]
    assert help_text and "\n" not in help_text and len(help_text) <= 90, help_text
    assert sub.description and len(sub.description) > 40, command
    assert sub.epilog and any(ln.strip().startswith("shardmeter ") for ln in sub.epilog.splitlines())
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and out.startswith(f"usage: shardmeter {command}")
    assert sub.description.split()[0] in out


def test_the_commands_of_this_release_are_registered():
    assert {
        "init",
        "import",
        "estimate",
        "sweep",
        "plan",
        "sensitivity",
        "validate",
        "plugins",
        "completion",
    } <= set(_subparsers())


def test_a_missing_command_module_or_parent_package_is_skipped(monkeypatch):
    monkeypatch.setattr(
        cli,
        "OPTIONAL_COMMANDS",
        (("ghost", "shardmeter_no_such_package.sub.cli:add"), ("gone", "shardmeter.no_such_module:add")),
    )
    monkeypatch.setattr(cli, "COMMANDS", {})
    cli._register_optional_commands()
    assert cli.COMMANDS == {}


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_completion_prints_a_script_that_knows_the_sub_commands(shell, capsys):
    code, out, err = run(capsys, "completion", shell)
    assert code == 0 and not err
    for name in ("estimate", "import", "init", "plan"):
        assert name in out, (shell, name)
    if shell == "bash":
        assert "complete -o" in out and "_shtab_shardmeter" in out and "--set" in out


def test_completion_of_an_unknown_shell_is_a_one_line_error(capsys):
    code, _, err = run(capsys, "completion", "fish")
    assert code == 2 and "invalid choice: 'fish'" in one_line_error(err)


# -- standard input ---------------------------------------------------------------------------------


@pytest.fixture
def stdin(monkeypatch):
    def feed(data: bytes) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))

    return feed


def test_estimate_dash_reads_the_scenario_from_standard_input(stdin, tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_bytes(SCENARIO)
    stdin(SCENARIO)
    code, out, _ = run(capsys, "estimate", "-", "--json", "--set", "parallelism.tp=2")
    from_file = shardmeter.estimate(str(path), overrides=["parallelism.tp=2"]).to_dict()
    import json

    got = json.loads(out)
    assert code == 0 and got["feasible"] and from_file["feasible"], (got["reasons"], from_file["reasons"])
    assert got["step_time_s"] == pytest.approx(from_file["step_time_s"], rel=1e-12)
    # the --set reached the scenario read from stdin: tp 2 halves the layout's replicas on 8 GPUs
    assert got["layout"]["tp"] == 2 and got["step_time_s"] != shardmeter.estimate(str(path)).step_time_s


def test_standard_input_errors_name_stdin(stdin, capsys):
    stdin(SCENARIO.replace(b"global_batch = 64", b"global_batch = 6.5"))
    code, _, err = run(capsys, "estimate", "-")
    assert code == 2 and one_line_error(err).startswith("shardmeter: error: <stdin>: $.training.global_batch")
    stdin(b"[model\n")
    code, _, err = run(capsys, "estimate", "-")
    assert code == 2 and "<stdin>: not valid TOML" in one_line_error(err)


def test_standard_input_has_the_size_limit_of_a_file(stdin, capsys, monkeypatch):
    monkeypatch.setattr(scenario_files, "MAX_SCENARIO_BYTES", 100)
    stdin(SCENARIO)
    code, _, err = run(capsys, "estimate", "-")
    assert code == 2 and "<stdin>: is more than 100 bytes" in one_line_error(err)


def test_a_terminal_on_standard_input_is_refused_not_waited_on(monkeypatch, capsys):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdin", Tty())
    code, _, err = run(capsys, "estimate", "-")
    assert code == 2 and "<stdin>: is a terminal" in one_line_error(err)


def test_relative_paths_in_a_scenario_on_stdin_resolve_against_the_current_folder(
    stdin, tmp_path, monkeypatch, capsys
):
    import json

    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    stdin(SCENARIO.replace(b'preset = "llama3-8b"', b'hf_config = "config.json"'))
    code, out, err = run(capsys, "estimate", "-", "--json")
    assert code == 0, err
    assert json.loads(out)["params"] == pytest.approx(8.03e9, rel=0.01)


def test_sweep_reads_standard_input_once_for_every_row(stdin, capsys):
    import json

    stdin(SCENARIO)
    code, out, err = run(capsys, "sweep", "-", "--vary", "island[0].nodes=1,2", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["report"]["gpus"] for r in rows] == [8, 16]


# -- estimate --plot --------------------------------------------------------------------------------


def test_plot_without_matplotlib_is_a_one_line_error_naming_the_extra(tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "matplotlib" else real(n, *a))
    path = tmp_path / "s.toml"
    path.write_bytes(SCENARIO)
    code, out, err = run(capsys, "estimate", path, "--plot", tmp_path / "o.png")
    assert code == 2 and not out
    assert "shardmeter[plot]" in one_line_error(err) and not (tmp_path / "o.png").exists()


def test_plot_refuses_to_overwrite_the_scenario(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_bytes(SCENARIO)
    code, _, err = run(capsys, "estimate", path, "--plot", path)
    assert code == 2 and "--plot" in one_line_error(err) and path.read_bytes() == SCENARIO


def test_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "s.toml"
    path.write_bytes(SCENARIO)
    code, out, err = run(capsys, "estimate", path, "--plot", tmp_path / "o.png")
    assert code == 0, err
    assert (tmp_path / "o.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "wrote" in out


# -- init -------------------------------------------------------------------------------------------


def test_the_starter_batch_is_about_four_million_tokens():
    assert STARTER_BATCH_TOKENS == 4 * 1024 * 1024
    assert starter_batch(8192) == 512 and starter_batch(4096) == 1024 and starter_batch(2048) == 2048
    assert starter_batch(10**7) == 1


@pytest.mark.parametrize(
    ("argv", "gpus"),
    [
        (["--preset", "llama3-8b"], 8),
        (["--preset", "llama3-405b", "--gpu", "h100-sxm", "--gpus", "1024"], 1024),
        (["--preset", "gpt3-175b", "--gpu", "a100-sxm-80gb", "--gpus", "512"], 512),
        (["--preset", "llama2-7b", "--gpu", "rtx-4090", "--gpus", "8"], 8),
    ],
)
def test_init_writes_a_starter_that_estimates_feasible(argv, gpus, tmp_path, capsys):
    out_file = tmp_path / "run.toml"
    code, out, err = run(capsys, "init", *argv, "-o", out_file)
    assert code == 0 and not out, err
    text = out_file.read_text(encoding="utf-8")
    assert text.startswith("# Starter scenario written by `shardmeter init`")
    assert "# tensor parallel" in text and "# sequences per step" in text
    report = shardmeter.estimate(str(out_file))
    assert report.feasible, report.reasons
    assert report.gpus == gpus and report.memory_per_gpu_gb <= report.memory_capacity_gb


def test_init_on_stdout_pipes_into_estimate(stdin, capsys):
    code, out, _ = run(capsys, "init", "--preset", "llama2-7b", "--gpus", "2")
    assert code == 0 and "gpus_per_node = 2" in out and "nodes = 1" in out
    stdin(out.encode())
    code, out, err = run(capsys, "estimate", "-")
    assert code == 0 and "INFEASIBLE" not in out, err


def test_init_from_a_hugging_face_config(tmp_path, capsys):
    import json

    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 16,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 8192,
        "vocab_size": 128256,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    code, out, err = run(capsys, "init", "--hf-config", tmp_path / "config.json", "--gpus", "8")
    assert code == 0, err
    assert "layers = 16" in out and "global_batch = 1024" in out
    assert shardmeter.estimate(shardmeter.load.files.tomllib.loads(out)).feasible


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpus", "12"], "--gpus 12 is not a whole number of 8-GPU h100-sxm nodes; give a multiple of 8"),
        (["--gpu", "rtx-4090", "--gpus", "1"], "--gpus 1: no layout of this model fits rtx-4090 x 1"),
        (["--gpu", "h100-sxn"], "--gpu: unknown hardware 'h100-sxn'"),
        (["--preset", "llama9"], "--preset: unknown model preset 'llama9'"),
    ],
)
def test_init_errors_name_the_option(argv, message, capsys):
    code, out, err = run(capsys, "init", *argv)
    assert code == 2 and not out
    assert one_line_error(err).startswith(f"shardmeter: error: {message}")


def test_init_never_writes_over_a_folder(tmp_path, capsys):
    code, _, err = run(capsys, "init", "-o", tmp_path)
    assert code == 2 and "-o" in one_line_error(err)


def test_init_number_options_name_what_they_count(capsys):
    code, _, err = run(capsys, "init", "--global-batch", "x")
    assert code == 2 and err.strip() == (
        "shardmeter: error: argument --global-batch: expected a whole number of sequences, got 'x'"
    )
    code, _, err = run(capsys, "init", "--gpus", "0")
    assert (
        code == 2
        and err.strip() == "shardmeter: error: argument --gpus: expected a number of GPUs >= 1, got 0"
    )


def test_each_summary_is_its_commands_own_help_line():
    # `shardmeter --help` shows SUMMARIES for the commands it does not build
    assert {k: v for k, v in _helps().items() if k in cli.SUMMARIES} == cli.SUMMARIES
    assert set(cli.SUMMARIES) <= set(_helps())


def test_the_main_help_built_lazily_is_the_full_parsers_help():
    cli._register_optional_commands()
    assert cli.build_parser("").format_help() == cli.build_parser().format_help()


def test_import_and_help_load_neither_numpy_nor_a_commands_module():
    import subprocess

    code = (
        "import sys, shardmeter, runpy\n"
        "assert 'numpy' not in sys.modules, 'import shardmeter'\n"
        "sys.argv = ['shardmeter', '--help']\n"
        "try:\n"
        "    runpy.run_module('shardmeter', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in sys.modules if m == 'numpy' or m.startswith(('shardmeter.explore', "
        "'shardmeter.model', 'shardmeter.importers', 'shardmeter.calibrate', 'shardmeter.validate'))]\n"
        "assert heavy == [], heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: shardmeter" in done.stdout
