"""Every shipped configuration in tests/fixtures/ (byte-for-byte upstream copies, MANIFEST.md in
each stack's folder) through ``import`` and then ``estimate``: the import writes TOML, the TOML
loads, the scenario estimates (infeasible is an answer), or the import ends with one line that
names the file and says what is missing. Which files are refused, and why, is pinned below."""

from __future__ import annotations

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

#: The fixtures (file, or file::function) an import refuses, with the reason its line gives.
REFUSED = {
    r"/flux/": "FLUX is a diffusion transformer",
    r"flux_": "FLUX is a diffusion transformer",
    r"sc21/CONFIG\.sh$": "needs what the file does not set: NLS (--num-layers: --var NLS=VALUE",
    r"sc21/(SBATCH|SRUN)\.sh$": "no Megatron-LM model arguments",
    r"sbatch_checkpoint_convert\.sh$": "no Megatron-LM model arguments",
    r"pretrain_bert[a-z_]*\.sh$|train_bert_340m": "model.vocab (the tokenizer's vocabulary",
    r"pretrain_ict\.sh$": "ICT biencoder",
    r"pretrain_t5[a-z_]*\.sh$|train_t5_220m": "encoder-decoder",
    r"mamba/train\.sh$": "hybrid Mamba-attention",
    r"pretrain_qwen20_72b": "model.vocab (the tokenizer's vocabulary (--tokenizer-type MultimodalTokenizer)",
    r"transformers_modeling_backend/config_registry\.py::.*moe": "not a flavour torchtitan ships",
}


def _cases() -> list[tuple[str, pathlib.Path, str | None]]:
    cases: list[tuple[str, pathlib.Path, str | None]] = []
    for path in sorted((FIX / "torchtitan").rglob("*.toml")):
        cases.append(("torchtitan", path, None))
    for path in sorted((FIX / "torchtitan").rglob("config_registry.py")):
        module = Module.parse(path.read_text(encoding="utf-8"), str(path))
        cases.extend(("torchtitan", path, fn) for fn in registry_functions(module))
    for path in sorted((FIX / "megatron").rglob("*.sh")):
        cases.append(("megatron", path, None))
    return cases


CASES = _cases()
_ESTIMATOR = Estimator()


def _id(case) -> str:
    _, path, fn = case
    rel = path.relative_to(FIX).as_posix()
    return rel + (f"::{fn}" if fn else "")


def _refusal(name: str) -> str | None:
    return next((why for pattern, why in REFUSED.items() if re.search(pattern, name)), None)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_every_fixture_imports_and_estimates_or_says_what_is_missing(case):
    kind, path, fn = case
    name = _id(case)
    expected = _refusal(name)
    try:
        text = import_config(kind, str(path), gpu="h100-sxm", config=fn)
    except ShardMeterError as exc:
        line = str(exc)
        assert "\n" not in line and line.startswith(str(path)), line
        assert expected is not None, f"{name} was refused: {line}"
        assert expected in line, line
        return
    assert expected is None, f"{name} imported, but is expected to be refused ({expected})"
    report = _ESTIMATOR.estimate(tomllib.loads(text))
    assert report.feasible or report.reasons
    assert report.params > 0 and report.gpus >= 1


def test_the_fixture_set_is_the_one_the_manifests_list():
    listed = set()
    for manifest in FIX.glob("*/MANIFEST.md"):
        for line in manifest.read_text(encoding="utf-8").splitlines():
            m = re.match(r"\| `([^`]+)` \|", line)
            if m:
                listed.add((manifest.parent.name, m.group(1)))
    on_disk = {
        (p.relative_to(FIX).parts[0], p.relative_to(FIX / p.relative_to(FIX).parts[0]).as_posix())
        for stack in ("torchtitan", "megatron")
        for p in (FIX / stack).rglob("*")
        if p.is_file() and p.name != "MANIFEST.md"
    }
    assert on_disk == {x for x in listed if x[0] in ("torchtitan", "megatron")}
    assert len(CASES) > 150
