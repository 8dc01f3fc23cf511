"""Every shipped configuration in tests/fixtures/ (byte-for-byte upstream copies, MANIFEST.md in
each stack's folder) through ``import`` and then ``estimate``: the import writes TOML, the TOML
loads, the scenario estimates (infeasible is an answer), or the import ends with one line that
names the file and says what is missing. Which ones are refused, and why, is pinned below; so are
the counts, so that a regression in either direction shows."""

from __future__ import annotations

import collections
import functools
import pathlib
import re
import sys

import pytest

from shardmeter.errors import ShardMeterError
from shardmeter.estimator import Estimator
from shardmeter.importers.cli import import_config
from shardmeter.importers.pyconfig import Module
from shardmeter.importers.torchtitan_registry import registry_functions

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIX = pathlib.Path(__file__).parent / "fixtures"
STACKS = ("torchtitan", "megatron", "megatron-bridge", "nemo2")

#: The fixtures (path, or path::function) an import refuses: a pattern of the name -> the
#: phrases one of which its one line must hold.
REFUSED: dict[str, tuple[str, ...]] = {
    r"/flux/|::flux_": ("FLUX is a diffusion transformer",),
    r"sc21/CONFIG\.sh$": ("needs what the file does not set: NLS (--num-layers: --var NLS=VALUE",),
    r"sc21/(SBATCH|SRUN)\.sh$|sbatch_checkpoint_convert\.sh$": ("no Megatron-LM model arguments",),
    r"pretrain_bert[a-z_]*\.sh$|train_bert_340m": ("model.vocab (the tokenizer's vocabulary",),
    r"pretrain_ict\.sh$": ("ICT biencoder",),
    r"pretrain_t5[a-z_]*\.sh$|train_t5_220m": ("encoder-decoder",),
    r"mamba/train\.sh$": ("hybrid Mamba-attention",),
    r"pretrain_qwen20_72b": (
        "model.vocab (the tokenizer's vocabulary (--tokenizer-type MultimodalTokenizer)",
    ),
    r"transformers_modeling_backend/config_registry\.py::.*moe": ("not a flavour torchtitan ships",),
    # Megatron-Bridge and NeMo 2: hybrid Mamba models, checkpoints or configs with no bundled shape,
    # recipes built by a function outside the files copied
    r"^(megatron-bridge|nemo2)/.*nemotron": (
        "hybrid Mamba-attention",
        "no bundled shape",
        "shape is not bundled",
        "not defined in the files read",
    ),
    r"^megatron-bridge/.*::model_config$": ("not defined in the files read",),
    r"^megatron-bridge/.*(qwen3_next|qwen25_500m|qwen25_1p5b|qwen2_|glm|deepseek_v4|kimi_k2|qwen35|_vl_|olmoe)": (
        "shape is not bundled",
        "no bundled shape",
        "not defined in the files read",
        "it raises NotImplementedError",
    ),
    r"^megatron-bridge/.*(wan_|vanilla_gpt)": ("not defined in the files read", "no bundled shape"),
    r"^megatron-bridge/2026.*gpt3_175b": ("model.vocab (the tokenizer's vocabulary is not in the recipe",),
    r"^nemo2/.*::finetune_recipe": ("default_finetune_recipe(...), which is not defined in the files read",),
}
#: How many configurations of each stack import (and estimate) and how many are refused.
COUNTS = {
    "torchtitan": {"imported": 148, "refused": 16},
    "megatron": {"imported": 31, "refused": 18},
    "megatron-bridge": {"imported": 173, "refused": 120},
    "nemo2": {"imported": 22, "refused": 40},
}
_ESTIMATOR = Estimator()


def _functions(path: pathlib.Path, pattern: str) -> list[str]:
    module = Module.parse(path.read_text(encoding="utf-8"), str(path))
    return [fn for fn in registry_functions(module) if re.search(pattern, fn)]


def _files() -> list[tuple[str, str, pathlib.Path, list[str | None]]]:
    """``(stack, format, file, functions)``: ``[None]`` for a file that is one job."""
    out: list[tuple[str, str, pathlib.Path, list[str | None]]] = []
    tt = FIX / "torchtitan"
    out += [("torchtitan", "torchtitan", p, [None]) for p in sorted(tt.rglob("*.toml"))]
    out += [
        ("torchtitan", "torchtitan", p, list(_functions(p, "")))
        for p in sorted(tt.rglob("config_registry.py"))
    ]
    out += [("megatron", "megatron", p, [None]) for p in sorted((FIX / "megatron").rglob("*.sh"))]
    for stack in ("megatron-bridge", "nemo2"):
        for p in sorted((FIX / stack).rglob("*.py")):
            fns = _functions(p, r"config$|recipe$")
            if fns:
                out.append((stack, "megatron", p, list(fns)))
    return out


FILES = _files()


def _name(path: pathlib.Path, fn: str | None) -> str:
    return path.relative_to(FIX).as_posix() + (f"::{fn}" if fn else "")


def _refusal(name: str) -> tuple[str, ...] | None:
    return next((why for pattern, why in REFUSED.items() if re.search(pattern, name)), None)


@functools.cache  # the count test reads the same results
def _check(fmt: str, path: pathlib.Path, fn: str | None) -> tuple[str, str]:
    """``("imported" | "refused", problem or "")`` of one configuration."""
    name = _name(path, fn)
    expected = _refusal(name)
    try:
        text = import_config(fmt, str(path), gpu="h100-sxm", config=fn)
    except ShardMeterError as exc:
        line = str(exc)
        if "\n" in line or not line.startswith(str(path)):
            return "refused", f"{name}: not one line naming the file: {line!r}"
        if expected is None:
            return "refused", f"{name} was refused: {line}"
        if not any(phrase in line for phrase in expected):
            return "refused", f"{name}: refused for another reason: {line}"
        return "refused", ""
    if expected is not None:
        return "imported", f"{name} imported, but is expected to be refused ({expected[0]})"
    report = _ESTIMATOR.estimate(tomllib.loads(text))
    if not (report.feasible or report.reasons) or report.params <= 0:
        return "imported", f"{name}: the estimate is neither feasible nor infeasible with reasons"
    return "imported", ""


def _id(case) -> str:
    return case[2].relative_to(FIX).as_posix()


@pytest.mark.parametrize("case", FILES, ids=_id)
def test_every_fixture_imports_and_estimates_or_says_what_is_missing(case):
    _, fmt, path, functions = case
    problems = [p for fn in functions for _, p in [_check(fmt, path, fn)] if p]
    assert not problems, "\n".join(problems)


def test_how_many_import_and_how_many_are_refused():
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for stack, fmt, path, functions in FILES:
        for fn in functions:
            counts[stack][_check(fmt, path, fn)[0]] += 1
    assert {s: dict(c) for s, c in counts.items()} == COUNTS


def test_the_fixture_set_is_the_one_the_manifests_list():
    listed = set()
    for manifest in FIX.glob("*/MANIFEST.md"):
        for line in manifest.read_text(encoding="utf-8").splitlines():
            m = re.match(r"\| `([^`]+)` \|", line)
            if m:
                listed.add((manifest.parent.name, m.group(1)))
    on_disk = {
        (stack, p.relative_to(FIX / stack).as_posix())
        for stack in STACKS
        for p in (FIX / stack).rglob("*")
        if p.is_file() and p.name != "MANIFEST.md"
    }
    assert on_disk == {x for x in listed if x[0] in STACKS}
