"""Today's configs fit where they ran (issue 22, item 5): every configuration in tests/fixtures/
that its stack ships for named hardware, imported with the GPU count and type its own file or
docs name, is a feasible plan.

Each entry names where the hardware comes from:

* torchtitan's llama3 job files open with "# NOTE: this toml config is a preset for 64 A100 GPUs."
  (8B, 70B) and "... for 128 H100 GPUs." (405B), at every date copied (9dec370, 3e75bae, 820504e,
  238fa99); issue 22 names them on 8, 64 and 512 H100 too. ``qwen3_32b.toml`` (238fa99): "a
  preset for 8 H100 GPUs (with 96GiB memory)"; ``llama4_17bx16e.toml`` (820504e, 238fa99): "a
  preset for 64 H100 GPUs".
* Megatron-Bridge's flat performance recipes (067f987, ``perf_recipes/*/h100/``) name theirs in the
  function: ``llama3_8b_pretrain_8gpu_h100_bf16_config`` and so on.
* Megatron-LM's ``examples/llama/train_llama3_8b_h100_fp8.sh`` and
  ``examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh`` (d98e8a6): H100 in the name,
  ``GPUS_PER_NODE=8``, ``NUM_NODES=1``.
* NeMo 2's recipes (6b0f088, 8cfedd7) set ``trainer(num_nodes=..., num_gpus_per_node=8)``
  (llama3_8b 1 node, llama3_70b 4, llama31_405b 72 at 6b0f088 and 64 at 8cfedd7, mixtral_8x7b
  8); their performance pages are H100 runs.

What the model still calls infeasible is listed in :data:`KNOWN` with the mechanism at fault;
those cases are strict xfails, so one that becomes feasible fails until it is taken off the
list."""

from __future__ import annotations

import pathlib
import re

import pytest

from shardmeter.estimator import Estimator
from shardmeter.importers.cli import import_config
from shardmeter.importers.pyconfig import Module
from shardmeter.importers.torchtitan_registry import registry_functions

FIX = pathlib.Path(__file__).parent / "fixtures"
GIB = 2**30 / 1e9

TT_DATES = (
    "2024-12-26_9dec370/train_configs",
    "2025-03-31_3e75bae/torchtitan/models/llama/train_configs",
    "2025-06-13_820504e/torchtitan/models/llama3/train_configs",
    "2026-02-23_238fa99_last_toml/torchtitan/models/llama3/train_configs",
)
#: (model, GPU, GPUs, who names it)
TT_LLAMA3 = (
    ("llama3_8b", "a100-sxm-80gb", 64, "file NOTE"),
    ("llama3_70b", "a100-sxm-80gb", 64, "file NOTE"),
    ("llama3_405b", "h100-sxm", 128, "file NOTE"),
    ("llama3_8b", "h100-sxm", 8, "issue 22"),
    ("llama3_70b", "h100-sxm", 64, "issue 22"),
    ("llama3_405b", "h100-sxm", 512, "issue 22"),
)
NEMO2 = {  # recipe -> trainer(num_nodes) at each snapshot
    "2025-01-25_6b0f088": {"llama3_8b": 1, "llama3_70b": 4, "llama31_405b": 72, "mixtral_8x7b": 8},
    "2025-09-20_8cfedd7": {"llama3_8b": 1, "llama3_70b": 4, "llama31_405b": 64, "mixtral_8x7b": 8},
}


def _corpus() -> list[tuple[str, str, pathlib.Path, str | None, str, int, list[str]]]:
    """``(id, format, file, function, gpu, gpus, estimate overrides)``."""
    out: list[tuple[str, str, pathlib.Path, str | None, str, int, list[str]]] = []
    for d in TT_DATES:
        for model, gpu, n, _ in TT_LLAMA3:
            out.append(
                (
                    f"torchtitan/{d.split('/')[0]}/{model}@{n}x{gpu}",
                    "torchtitan",
                    FIX / "torchtitan" / d / f"{model}.toml",
                    None,
                    gpu,
                    n,
                    [],
                )
            )
    last = FIX / "torchtitan" / "2026-02-23_238fa99_last_toml" / "torchtitan" / "models"
    h100_96 = f'island[0].gpu={{name="h100-sxm", memory_gb={96 * GIB:.4f}}}'
    out.append(
        (
            "torchtitan/238fa99/qwen3_32b@8xh100-96GiB",
            "torchtitan",
            last / "qwen3/train_configs/qwen3_32b.toml",
            None,
            "h100-sxm",
            8,
            [h100_96],
        )
    )
    for d, sub in (("2025-06-13_820504e", "experiments"), ("2026-02-23_238fa99_last_toml", "models")):
        path = FIX / "torchtitan" / d / "torchtitan" / sub / "llama4/train_configs/llama4_17bx16e.toml"
        out.append((f"torchtitan/{d}/llama4_17bx16e@64xh100", "torchtitan", path, None, "h100-sxm", 64, []))
    for p in sorted((FIX / "megatron-bridge").rglob("perf_recipes/*/h100/*.py")):
        for fn in registry_functions(Module.parse(p.read_text(encoding="utf-8"), str(p))):
            m = re.search(r"_(\d+)gpu_h100_", fn)
            if m:
                out.append(
                    (f"megatron-bridge/{p.stem}::{fn}", "megatron", p, fn, "h100-sxm", int(m.group(1)), [])
                )
    mlm = FIX / "megatron" / "2026-08-22_d98e8a6" / "examples"
    for rel in ("llama/train_llama3_8b_h100_fp8.sh", "megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh"):
        out.append((f"megatron/{rel}@8xh100", "megatron", mlm / rel, None, "h100-sxm", 8, []))
    for d, recipes in NEMO2.items():
        for name, nodes in recipes.items():
            path = FIX / "nemo2" / d / "nemo/collections/llm/recipes" / f"{name}.py"
            out.append(
                (
                    f"nemo2/{d}/{name}::pretrain_recipe@{nodes * 8}xh100",
                    "megatron",
                    path,
                    "pretrain_recipe",
                    "h100-sxm",
                    nodes * 8,
                    [],
                )
            )
    return out


#: Corpus entries the model still gets wrong, by id pattern -> the mechanism at fault.
KNOWN: dict[str, str] = {}
#: Shipped configs the stack itself refuses to run as written, by id pattern -> the words of the
#: model's reason, which quote the stack's own check. NeMo 2's ``llama31_405b`` at 6b0f088 pairs
#: trainer(num_nodes=72) with tp 8 x pp 9 x cp 4 (dp 2) and global batch 512: 256 micro-batches,
#: not a multiple of pp = 9, which Megatron-Core's interleaved schedule raises on
#: (``megatron/core/pipeline_parallel/schedules.py``: "number of microbatches ... is not divisible by
#: pipeline-model-parallel-size" before 4295be1a, 2024-11-01; after it, with
#: ``microbatch_group_size_per_vp_stage`` defaulting to pp, "The remainder of M ... should be 0, or
#: larger than or equal to the pipeline-parallel size"); 8cfedd7 ships pp 8 on 64 nodes instead.
UPSTREAM_REFUSES: dict[str, str] = {
    r"nemo2/2025-01-25_6b0f088/llama31_405b": "to be a multiple of pp (9)",
    # Megatron-Bridge's DeepSeek-V3 "64gpu" perf recipes keep the 1024-GPU layout (tp 2, pp 8,
    # ep 64, expert_tensor_parallel_size 1): an expert grid of 1 x 64 x 8 = 512 ranks, which
    # Megatron-Core's initialize_model_parallel refuses on 64 (megatron/core/parallel_state.py
    # @d98e8a64: "world_size (64) is not divisible by expert_tensor_model_pipeline_parallel size (512)")
    r"deepseek_v3_pretrain_64gpu": "expert_tensor_model_pipeline_parallel size",
}
#: Shipped configs the import refuses (tests/test_import_fixtures.py pins each refusal and its one
#: line): not plans, so not in the corpus.
REFUSED = r"glm5|kimi_k2|nemotronh|nemotron_3|qwen3_next|qwen3_vl|qwen35_vl|/wan::"
CORPUS = [c for c in _corpus() if not re.search(REFUSED, c[0])]
_EST = Estimator()


def _known(case_id: str) -> str | None:
    return next((why for pattern, why in KNOWN.items() if re.search(pattern, case_id)), None)


def _params():
    for case in CORPUS:
        why = _known(case[0])
        marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
        yield pytest.param(case, id=case[0], marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_shipped_config_is_feasible_where_it_ran(case, tmp_path):
    case_id, fmt, path, fn, gpu, gpus, overrides = case
    text = import_config(fmt, str(path), gpu=gpu, gpus=gpus, config=fn)
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(text, encoding="utf-8")
    report = _EST.estimate(str(scenario), overrides=overrides)
    assert report.gpus <= gpus, case_id
    refused = next((w for pat, w in UPSTREAM_REFUSES.items() if re.search(pat, case_id)), None)
    if refused is not None:  # the stack raises on it: so must the model, for the same reason
        assert not report.feasible and any(refused in r for r in report.reasons), report.reasons
        return
    assert report.feasible, f"{case_id}: {report.reasons}"
    # what the caching allocator reserves fits, and is never below the allocated peak
    assert report.memory_per_gpu_gb <= report.memory_reserved_gb <= report.memory_capacity_gb


def test_the_corpus_covers_every_stack_and_the_issue_s_torchtitan_layouts():
    ids = [c[0] for c in CORPUS]
    assert {i.split("/")[0] for i in ids} == {"torchtitan", "megatron-bridge", "megatron", "nemo2"}
    for model, n in (("llama3_8b", 8), ("llama3_70b", 64), ("llama3_405b", 512)):
        assert sum(f"/{model}@{n}xh100-sxm" in i for i in ids) == len(TT_DATES)
    assert len(CORPUS) >= 60
    # every KNOWN pattern still matches something (a stale entry is removed, not kept)
    for pattern in KNOWN:
        assert any(re.search(pattern, i) for i in ids), pattern
