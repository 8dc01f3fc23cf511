"""The bundled profiles' dated states (docs/frameworks.md, "Versions"): each change, quoted from
its commit, checked the day before and on the day it landed; releases and read-at states change
nothing; the oldest state bounds the dates; docs/frameworks.md lists every state; and the
bundled validation runs can carry ``framework_version``."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import attrs
import pytest

import shardmeter
from shardmeter.load.scenario import load_scenario
from shardmeter.parts import call_framework
from shardmeter.plugins.frameworks import megatron, others, torchtitan
from shardmeter.registry.catalog import read_toml_text
from shardmeter.registry.manager import get_registry
from shardmeter.validate.run import bundled_validation_dir

REG = get_registry()
DOC = (Path(__file__).resolve().parents[1] / "docs" / "frameworks.md").read_text()


def _day_before(state) -> str:
    return (datetime.date.fromisoformat(state.since) - datetime.timedelta(days=1)).isoformat()


def _sc(framework: str, version: str | None, gpu: str = "h100-sxm", nodes: int = 1, **tables) -> dict:
    training = {"global_batch": 64, "framework": framework, **tables.pop("training", {})}
    if version is not None:
        training["framework_version"] = version
    return {
        "model": {"preset": "llama3-8b"},
        "training": training,
        "parallelism": tables.pop("parallelism", {}),
        "island": [{"gpu": gpu, "nodes": nodes}],
    }


def _load(*args, **kwargs):
    return load_scenario(_sc(*args, **kwargs))


def _inputs(*args, **kwargs):
    est = shardmeter.Estimator()
    inp, _ = est.inputs(est.load(_sc(*args, **kwargs)))
    return inp.training


def _before_after(change, read):
    """``read(version)`` the day before ``change`` and on its day."""
    return read(_day_before(change)), read(change.since)


# ---- torchtitan: pipeline micro-batches ------------------------------------------------------


def _micro(version, schedule="1f1b"):
    """llama3-8b, pp = 4, dp = 8 (4 nodes of 8), global batch 64: a local batch of 8."""
    sc = _sc("torchtitan", version, parallelism={"pp": 4, "dp": 8, "schedule": schedule}, nodes=4)
    return load_scenario(sc).training.micro_batch


def test_torchtitan_pipeline_micro_batches_by_era():
    """The brief's example: micro_batch 2 at 2024-12 (pp micro-batches), 1 at 2025-06 (one
    sequence each); 2025-02 splits into pp x stages per rank (4 with 1F1B, 8 interleaved); from
    73aed7f6 the whole local batch is one micro-batch."""
    assert _micro("2024-12") == 2
    assert (_micro("2025-02"), _micro("2025-02", "interleaved")) == (2, 1)
    assert (_micro("2025-06"), _micro("2025-06", "interleaved")) == (1, 1)
    assert _micro(None) == 8
    sc = _sc("torchtitan", "2024-12", parallelism={"pp": 4, "dp": 8}, nodes=4)
    note = next(n for n in load_scenario(sc).notes if "micro_batch" in n)
    assert "n_microbatches = pipeline_parallel_degree = 4" in note and "64 / 8" in note


def test_pp_degree_is_the_oldest_state():
    """aafe0e87 (2024-05-21), parallelize_llama.py: ``microbatches =
    (job_config.experimental.pipeline_parallel_microbatches or parallel_dims.pp)``."""
    assert _micro(torchtitan.PP_DEGREE.since) == 2
    with pytest.raises(shardmeter.ScenarioError, match="before the oldest state"):
        _micro(_day_before(torchtitan.PP_DEGREE))


def test_pp_total_stages():
    """90567fc9 (2025-01-07), pipelining_utils.py: ``- n_microbatches =
    job_config.experimental.pipeline_parallel_degree`` / ``+ n_microbatches = num_total_stages``
    (``pp x len(stages)``: 8 with the interleaved default of 2 stages per rank)."""
    assert _before_after(torchtitan.PP_TOTAL_STAGES, lambda v: _micro(v, "interleaved")) == (2, 1)
    assert _before_after(torchtitan.PP_TOTAL_STAGES, _micro) == (2, 2)  # 1F1B: one stage per rank


def test_pp_microbatch_size():
    """5e2033c7 (2025-04-07): ``"--parallelism.pipeline_parallel_microbatch_size"``,
    ``default=1``; pipeline.py ``n_microbatches = batch_size // microbatch_size``."""
    assert _before_after(torchtitan.PP_MICROBATCH_SIZE, _micro) == (2, 1)


def test_one_pp_microbatch():
    """73aed7f6 (2026-08-20), "fold batch dim (#4121)": ``- pipeline_parallel_microbatch_size:
    int = 1`` / ``+ num_pp_microbatches: int = 1``: the local batch of 8 in one micro-batch."""
    assert _before_after(torchtitan.ONE_PP_MICROBATCH, _micro) == (1, 8)


def test_no_pipeline_no_micro_batch_default_and_a_written_one_wins():
    assert _load("torchtitan", None, nodes=4).training.micro_batch == 1  # pp = 1: the scenario's
    sc = _sc("torchtitan", "2024-12", parallelism={"pp": 4, "dp": 8}, nodes=4, training={"micro_batch": 4})
    assert load_scenario(sc).training.micro_batch == 4


def test_split_points_optional():
    """cec7fb6f (2024-10-10), pipelining_utils.py ``generate_split_points``: ``elif
    issubclass(schedule_class, PipelineScheduleMulti):`` ... ``num_stages_per_rank = 2``."""

    def v(version):
        sc = _sc("torchtitan", version, parallelism={"pp": 4, "schedule": "interleaved"}, nodes=4)
        loaded = load_scenario(sc)
        by_stack = any("framework torchtitan set parallelism.virtual_stages" in n for n in loaded.notes)
        return loaded.parallelism.virtual_stages, by_stack

    # before it the split points had to be given: no stack default, so the scenario's own
    # default for an interleaved schedule (2 chunks, docs/scenario.md) applies, not torchtitan's
    assert _before_after(torchtitan.SPLIT_OPTIONAL, v) == ((2, False), (2, True))
    written = _sc("torchtitan", None, parallelism={"pp": 4, "schedule": "interleaved", "virtual_stages": 4})
    assert load_scenario(written).parallelism.virtual_stages == 4


# ---- torchtitan: recompute, fp8, loss ------------------------------------------------------


def test_op_sac_becomes_the_default():
    """114151ad (2026-03-23): ``- selective_ac_option: str = "2"`` ("per-op SAC is now the only
    selective mode"): before it every second block fully recomputed (16 of llama3-8b's 32)."""

    def ac(version):
        t = _load("torchtitan", version).training
        return t.recompute, t.recompute_layers

    assert _before_after(torchtitan.OP_SAC_DEFAULT, ac) == (("full", 16), ("op", None))


def test_rowwise_becomes_the_fp8_default():
    """6348d93d (2026-04-27), components/quantization/float8.py: ``+ recipe_name:
    Literal["rowwise", "rowwise_with_gw_hp"] = "rowwise"`` (tensorwise removed)."""

    def recipe(version):
        return _load("torchtitan", version, training={"precision": "fp8"}).training.fp8_recipe

    assert _before_after(torchtitan.ROWWISE_DEFAULT, recipe) == ("tensorwise", "rowwise")


def test_the_loss_is_compiled_from_bbb1b616():
    """bbb1b616 (2025-04-02), components/loss.py: ``- # TODO: compiling loss function causes CUDA
    errors, turning off for now``, ``+ if job_config.training.compile:`` ... ``+ loss_fn =
    torch.compile(loss_fn)``."""

    def compiled(version):
        return _inputs("torchtitan", version, training={"compile": True}).compiled_loss.item()

    assert _before_after(torchtitan.LOSS_COMPILED, compiled) == (0.0, 1.0)
    assert _inputs("torchtitan", None, training={"compile": False}).compiled_loss.item() == 0.0


# ---- torchtitan: attention and the op-SAC save list -----------------------------------------


def _attention(version, gpu):
    return _load("torchtitan", version, gpu=gpu).training.attention


def _saves(version, gpu):
    t = {"attention": "flash", "recompute": "op"}
    return _inputs("torchtitan", version, gpu=gpu, training=t).op_saves_attention.item()


def test_cudnn_first_on_blackwell():
    """3b85aa31 (2025-05-14), models/attention.py: ``+ if has_cuda_capability(10, 0):`` ``+
    self.backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION] + base_backends``:
    cuDNN attention on B200, whose op the save list leaves out."""
    change = torchtitan.CUDNN_ON_BLACKWELL
    assert _before_after(change, lambda v: _attention(v, "b200")) == ("flash2", "flash")
    assert _before_after(change, lambda v: _attention(v, "h100-sxm")) == ("flash2", "flash2")
    assert _before_after(change, lambda v: _saves(v, "b200")) == (1.0, 0.0)


def test_cudnn_first_on_every_gpu():
    """6a3a9da9 (2025-10-09): ``- if has_cuda_capability(10, 0):`` ``- cls.backends.insert(0,
    SDPBackend.CUDNN_ATTENTION)`` / ``+ self.sdpa_backends = [SDPBackend.CUDNN_ATTENTION,
    SDPBackend.FLASH_ATTENTION, ...``: H100 and A100 run cuDNN attention too (not MI300X)."""
    change = torchtitan.CUDNN_EVERYWHERE
    for gpu in ("h100-sxm", "a100-sxm-80gb"):
        assert _before_after(change, lambda v, g=gpu: _attention(v, g)) == ("flash2", "flash")
    assert _before_after(change, lambda v: _attention(v, "mi300x")) == ("flash2", "flash2")
    assert _before_after(change, lambda v: _saves(v, "h100-sxm")) == (1.0, 0.0)


def test_the_save_list_names_cudnn_attention():
    """b39377f9 (2025-12-01), "add all SDPA backends to op_sac_save_list (#2095)": ``+
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,``."""
    for gpu in ("b200", "h100-sxm"):
        assert _before_after(torchtitan.SAC_SAVES_CUDNN, lambda v, g=gpu: _saves(v, g)) == (0.0, 1.0)


def test_flex_attention_becomes_the_default_approximated_as_flash2():
    """16954571 (2026-06-09), models/llama3/__init__.py: ``- attn_backend: str = "sdpa"`` / ``+
    attn_backend: str = "flex"`` ("Making FlexAttention the default"): no scenario value of its
    own, so FlashAttention-2's, and the note says how it is approximated."""
    change = torchtitan.FLEX_DEFAULT
    assert _before_after(change, lambda v: _attention(v, "h100-sxm")) == ("flash", "flash2")
    assert _before_after(change, lambda v: _attention(v, "b200")) == ("flash", "flash2")
    note = next(n for n in _load("torchtitan", None).notes if "training.attention" in n)
    assert 'FlexAttention (Triton), approximated as "flash2"' in note and "90% of FA2" in note


# ---- megatron -------------------------------------------------------------------------------


def test_megatron_lm_oldest_state_and_pipeline_scatter_gather():
    """22c0e300 (2020-04-16): ``group.add_argument('--DDP-impl', default='local',`` is the oldest
    state. edca71da (2023-03-23): ``- tensor_send_next = core.tensor_parallel.
    split_tensor_into_1d_equal_chunks(tensor_send_next)``: no key changes (no schedule sends the
    whole tensor), its note says so."""
    with pytest.raises(shardmeter.ScenarioError, match="before the oldest state"):
        _load("megatron-lm", "2020-04-15")
    before, after = (_load("megatron-lm", v) for v in ("2023-03-22", "2023-03-23"))
    unpinned = attrs.evolve(before.training, framework_version=after.training.framework_version)
    assert (unpinned, before.parallelism) == (after.training, after.parallelism)
    assert "1/t: not expressed" in after.notes[0] and "edca71da" in after.notes[0]
    assert "release v2.0" in _load("megatron-lm", "2021-02").notes[0]


def test_megatron_lm_fuses_its_elementwise_kernels_from_51a2e6b0():
    """51a2e6b0 (2020-09-11), "Various speed optimizations": ``def bias_dropout_add_fused_train``
    (``torch.jit.script``) and ``def bias_gelu``; before it (5281919, the README tables' commit)
    ``output = self.output_dropout(output)`` ran ``torch.nn.Dropout``, the residual add and
    ``F.gelu`` as kernels of their own: ``training.compile`` false before, true from it; a
    written value wins, and the eager state prices more elementwise time."""
    read = lambda v: _load("megatron-lm", v).training.compile  # noqa: E731
    assert _before_after(megatron.FUSED_ELEMENTWISE, read) == (False, True)
    written = _sc("megatron-lm", "2020-09-03", training={"compile": True})
    assert load_scenario(written).training.compile is True
    mem = {
        v: shardmeter.estimate(_sc("megatron-lm", v, parallelism={"tp": 8})).to_dict()["breakdown_s"][
            "memory_ops"
        ]
        for v in ("2020-09-03", "2020-09-11")
    }
    assert mem["2020-09-03"] > 1.2 * mem["2020-09-11"]


def test_megatron_core_tp_comm_overlap_from_bridge_rule():
    """Megatron-Bridge bf75c658 (2025-11-06), "dataclass cfgs - perf (#971)": ``+ cfg.comm_overlap
    = CommOverlapConfig(tp_comm_overlap=bool(cfg.model.tensor_model_parallel_size > 1))``."""

    def overlap(version, **par):
        return _load("megatron-core", version, parallelism=par).parallelism.tp_comm_overlap

    assert _before_after(megatron.TP_OVERLAP_WITH_TP, lambda v: overlap(v, tp=4)) == (False, True)
    assert overlap(None, tp=1) is False
    assert overlap(None, tp=4, sequence_parallel=False) is False  # Bridge's guard
    assert overlap(None, tp=4, tp_comm_overlap=False) is False  # written wins


def test_megatron_core_oldest_state_and_releases():
    """e801b2bb (2023-09-07): ``+ group.add_argument('--overlap-grad-reduce',
    action='store_true',``; the fp8 recipe stays delayed at every state."""
    with pytest.raises(shardmeter.ScenarioError, match="before the oldest state"):
        _load("megatron-core", "2023-09-06")
    sc = _load("megatron-core", "core_v0.12.0", training={"precision": "fp8"})
    assert sc.notes[0].startswith("framework megatron-core as of 2025-05-06 (d580efc6; release core_v0.12.0")
    assert (sc.parallelism.dp_comm_overlap, sc.training.fp8_recipe) == (True, "delayed")
    assert _load("megatron-core", None, training={"precision": "fp8"}).training.fp8_recipe == "delayed"


def test_megatron_deepspeed_gradients_partitioned():
    """DeepSpeed 65c2f974 (2020-09-09): ``self.is_grad_partitioned = False``; e2fdd254
    (2021-09-29): ``- self.is_grad_partitioned = False`` / ``+ self.is_grad_partitioned =
    self.is_model_parallel``."""

    def option(version, **par):
        sc = _load("megatron-deepspeed", version, parallelism={"pp": 2, **par})
        return sc.parallelism.options.get("grad_partitioned")

    assert _before_after(megatron.GRADIENTS_PARTITIONED, option) == (False, None)  # None: its default, true
    assert option("2021-09", schedule="1f1b") is None  # not DeepSpeed's engine: not set
    with pytest.raises(shardmeter.ScenarioError, match="before the oldest state"):
        option("2020-09-08")


# ---- the others -----------------------------------------------------------------------------


def test_fms_fsdp_compiles_from_1d0396b6():
    """1d0396b6 (2024-04-11), "update default configs": ``- use_torch_compile: bool = False`` /
    ``+ use_torch_compile: bool = True``."""
    assert _before_after(others.FMS_COMPILE, lambda v: _load("fms-fsdp", v).training.compile) == (False, True)
    with pytest.raises(shardmeter.ScenarioError, match="before the oldest state"):
        _load("fms-fsdp", "2024-02-05")


@pytest.mark.parametrize(
    ("framework", "first"),
    [("deepspeed", "2020-05-19"), ("llm-foundry", "2024-01-06"), ("fms-fsdp", "2024-02-06")],
)
def test_the_oldest_state_bounds_the_dates(framework, first):
    assert _load(framework, first).notes[0].startswith(f"framework {framework} as of {first}")
    with pytest.raises(shardmeter.ScenarioError, match=f"knows its states from {first}"):
        _load(framework, _day_before(REG.get("framework", framework).versions[0]))
    assert _load("llm-foundry", "2024-01").notes[0].startswith("framework llm-foundry as of 2024-01-06")


# ---- every profile, every state ---------------------------------------------------------------

PROFILES = REG.names("framework")
GPUS = [REG.get("hardware", g) for g in ("h100-sxm", "b200", "v100-sxm2-32gb", "mi300x")]


def _defaults(name, state, gpu):
    part = REG.get("framework", name)
    tables = _sc(name, None, parallelism={"pp": 4, "tp": 2, "schedule": "interleaved"}, nodes=4)
    tables["model"] = {"layers": 32}
    return call_framework(part, "defaults", tables, [gpu], version=state)


@pytest.mark.parametrize("name", PROFILES)
def test_a_release_or_a_read_at_state_changes_nothing(name):
    part = REG.get("framework", name)
    for prev, state in zip(part.versions, part.versions[1:], strict=False):
        if state.release or "no default changed" in state.change:
            for gpu in GPUS:
                got = {k: v[0] for k, v in _defaults(name, state, gpu).items()}
                assert got == {k: v[0] for k, v in _defaults(name, prev, gpu).items()}, state


@pytest.mark.parametrize("name", PROFILES)
def test_every_state_is_in_the_docs_table(name):
    """docs/frameworks.md's section of each profile lists each state: its date and commit, or
    the release name."""
    section = DOC.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
    for state in REG.get("framework", name).versions:
        if state.release:
            assert f"`{state.release}`" in section, state
        else:
            assert state.since in section and f"`{state.commit[:8]}`" in section, state


@pytest.mark.parametrize("name", PROFILES)
def test_every_bundled_profile_names_a_read_commit_and_quotes_each_change(name):
    versions = REG.get("framework", name).versions
    assert versions, f"{name} has no dated states"
    quoted = ['"' in s.change for s in versions if not s.release and "no default changed" not in s.change]
    assert quoted and all(quoted), name
    assert any("read at" in s.change or "the commit of the published" in s.change for s in versions)


# ---- validation runs can carry framework_version -----------------------------------------------

TORCHAO = os.path.join(bundled_validation_dir(), "torchao-float8")


@pytest.mark.parametrize(
    "stem", ["torchao-float8-llama3-8b-b200-bf16-n8", "torchao-float8-llama3-8b-h100-bf16-n8"]
)
def test_a_validation_run_can_carry_framework_version(stem):
    """The torchao runs' note names torchtitan 0da8901 (2025-03-10): written as the version,
    the run loads and estimates at that state (the loss not yet compiled, SDPA's flash backend on
    B200, whose op the save list names)."""
    path = os.path.join(TORCHAO, stem + ".toml")
    with open(path, encoding="utf-8") as fh:
        doc = read_toml_text(fh.read(), file=path)
    doc["training"]["framework_version"] = "2025-03-10"
    rep = shardmeter.estimate(doc)
    assert rep.notes[0].startswith("framework torchtitan as of 2025-01-07 (90567fc9")
    est = shardmeter.Estimator()
    tr = est.inputs(est.load(doc))[0].training
    assert (tr.compiled_loss.item(), tr.op_saves_attention.item()) == (0.0, 1.0)
    assert rep.to_dict()["memory_per_gpu_gb"] > 0
