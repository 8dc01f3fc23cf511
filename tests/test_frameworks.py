"""Software-stack profiles (``training.framework``, docs/frameworks.md): each bundled profile sets
its documented defaults and says so in the notes, a written key always wins, a bad name is a
one-line error, a third-party profile plugs in, and megatron-deepspeed's pipeline engine
(``deepspeed-1f1b``) sends what DeepSpeed's PipelineEngine sends."""

from __future__ import annotations

import json

import attrs
import pytest
from cli_helpers import one_line_error, run

import shardmeter
from shardmeter.load.scenario import load_scenario
from shardmeter.registry import manager as plugins_core
from shardmeter.testing import fresh_registry, make_estimator


def _sc(framework: str, gpu: str = "h100-sxm", **training) -> dict:
    return {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 64, "framework": framework, **training},
        "island": [{"gpu": gpu, "nodes": 1}],
    }


def _set(notes, framework: str) -> dict[str, str]:
    """``{key: value as written}`` of the profile's notes."""
    out = {}
    for n in notes:
        if n.startswith(f"framework {framework} set "):
            key, _, rest = n[len(f"framework {framework} set ") :].partition(" = ")
            out[key] = rest.split(" (", 1)[0]
    return out


#: Every bundled profile's documented defaults (docs/frameworks.md), as the notes write them.
DOCUMENTED = {
    "megatron-lm": {
        "training.attention": '"materialized"',
        "parallelism.sequence_parallel": "false",
        "parallelism.sharding": '"none"',
        "parallelism.dp_comm_overlap": "false",
        "parallelism.tp_comm_overlap": "false",
        "training.compile": "true",
    },
    "megatron-core": {
        "training.attention": '"flash"',
        "training.compile": "true",
        "training.fp8_recipe": '"delayed"',
        "parallelism.sequence_parallel": "true",
        "parallelism.sharding": '"zero1"',
        "parallelism.dp_comm_overlap": "true",
    },
    "megatron-deepspeed": {
        "training.attention": '"materialized"',
        "parallelism.schedule": '"deepspeed-1f1b"',
        "parallelism.sharding": '"zero1"',
        "parallelism.sequence_parallel": "false",
        "parallelism.dp_comm_overlap": "false",
    },
    "deepspeed": {
        "parallelism.sharding": '"none"',
        "parallelism.dp_comm_overlap": "false",
        "training.compile": "false",
    },
    "torchtitan": {  # its newest state (test_framework_states.py has the others)
        "parallelism.sharding": '"fsdp"',
        "parallelism.sequence_parallel": "true",
        "training.attention": '"flash2"',  # FlexAttention, approximated as FlashAttention-2
        "training.compile": "false",
        "training.fp8_recipe": '"rowwise"',
        "training.recompute": '"op"',
    },
    "fms-fsdp": {
        "parallelism.sharding": '"hsdp"',
        "training.recompute": '"none"',
        "training.compile": "true",
        "training.attention": '"flash2"',
    },
    "llm-foundry": {
        "parallelism.sharding": '"fsdp"',
        "training.recompute": '"none"',
        "training.attention": '"flash2"',
    },
}


@pytest.mark.parametrize("framework", sorted(DOCUMENTED))
def test_each_bundled_profile_sets_its_documented_defaults_and_notes_each(framework):
    sc = load_scenario(_sc(framework))
    assert _set(sc.notes, framework) == DOCUMENTED[framework]
    tables = {"training": attrs.asdict(sc.training), "parallelism": attrs.asdict(sc.parallelism)}
    for key, written in DOCUMENTED[framework].items():
        table, field = key.split(".")
        assert json.dumps(tables[table][field]) == written, key
    assert sc.training.framework == framework
    assert list(shardmeter.estimate(_sc(framework)).notes) == list(sc.notes)  # the report carries them


def test_profiles_are_listed_by_plugins(capsys):
    code, out, _ = run(capsys, "plugins", "--json")
    assert code == 0
    frameworks = {p["name"] for p in json.loads(out)["parts"] if p["kind"] == "framework"}
    assert frameworks == set(DOCUMENTED)


def test_megatron_core_attention_follows_the_gpu_generation():
    """Transformer Engine disables its fused and flash attention below sm80: a V100 island runs
    unfused (materialized) attention."""
    assert load_scenario(_sc("megatron-core", gpu="a100-sxm-80gb")).training.attention == "flash"
    assert load_scenario(_sc("megatron-core", gpu="v100-sxm2-32gb")).training.attention == "materialized"


def test_torchtitan_recomputes_every_second_block_of_the_largest_stage():
    """torchtitan before 114151ad (2026-03-23): selective_ac_option = "2"."""
    sc = _sc("torchtitan", framework_version="2025-08-30", micro_batch=1)
    sc["parallelism"] = {"pp": 3}  # 32 layers: stages of 11, 11, 10
    assert load_scenario(sc).training.recompute_layers == 5
    sc = _sc("torchtitan", framework_version="2025-08-30")
    assert (load_scenario(sc).training.recompute, load_scenario(sc).training.recompute_layers) == ("full", 16)
    # another recompute written: no layer count (it means something only with "full")
    sc = _sc("torchtitan", framework_version="2025-08-30", recompute="selective")
    assert load_scenario(sc).training.recompute_layers is None


def test_llm_foundry_sets_delayed_scaling_only_for_fp8():
    assert load_scenario(_sc("llm-foundry", precision="fp8")).training.fp8_recipe == "delayed"
    sc = load_scenario(_sc("llm-foundry"))
    assert "training.fp8_recipe" not in _set(sc.notes, "llm-foundry")


def test_keys_written_in_the_scenario_win_over_the_profile():
    sc = _sc("megatron-core", attention="flash2")
    sc["parallelism"] = {"sharding": "none", "sequence_parallel": False}
    loaded = load_scenario(sc)
    assert loaded.training.attention == "flash2"
    assert loaded.parallelism.sharding == "none"
    assert loaded.parallelism.sequence_parallel is False
    assert loaded.parallelism.dp_comm_overlap is True  # not written: the profile's
    written = _set(loaded.notes, "megatron-core")
    assert not {"training.attention", "parallelism.sharding", "parallelism.sequence_parallel"} & set(written)
    # --set is written too
    over = load_scenario(_sc("megatron-core"), overrides=["parallelism.sharding=zero2"])
    assert over.parallelism.sharding == "zero2"


def test_an_islands_own_parallelism_wins_over_the_profile():
    sc = _sc("megatron-core")
    sc["island"] = [
        {"name": "a", "gpu": "h100-sxm", "nodes": 1, "parallelism": {"sharding": "zero3"}},
        {"name": "b", "gpu": "h100-sxm", "nodes": 1},
    ]
    loaded = load_scenario(sc)
    assert loaded.islands[0].parallelism.sharding == "zero3"
    assert loaded.islands[0].parallelism.sequence_parallel is True  # the rest of the profile still applies
    assert loaded.parallelism.sharding == "zero1"  # island b takes the top-level table


def test_without_a_framework_nothing_is_set():
    sc = _sc("megatron-core")
    del sc["training"]["framework"]
    loaded = load_scenario(sc)
    assert not [n for n in loaded.notes if n.startswith("framework ")]
    assert loaded.training.framework is None
    assert loaded.parallelism.sharding == "none"


def test_an_unknown_framework_is_a_one_line_error_naming_the_key(capsys, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        '[model]\npreset = "llama3-8b"\n[training]\nglobal_batch = 64\nframework = "torchtitn"\n'
        '[[island]]\ngpu = "h100-sxm"\nnodes = 1\n'
    )
    code, _, err = run(capsys, "estimate", path)
    assert code == 2
    line = one_line_error(err)
    assert "training.framework" in line and "'torchtitan'" in line
    code, _, err = run(capsys, "estimate", path, "--set", "training.framework=3")
    assert code == 2 and "training.framework" in one_line_error(err)


@attrs.frozen(kw_only=True)
class _Acme(shardmeter.FrameworkPart):
    """A third-party stack: ZeRO-2 always, fused attention only on GPUs with an fp8 peak."""

    def defaults(self, tables, gpus):
        hopper = all("fp8" in g.peak_tflops for g in gpus)
        return {
            "parallelism.sharding": ("zero2", "acme-train config.py: zero_stage = 2"),
            "training.attention": ("flash" if hopper else "flash2", "acme-train picks its kernel per GPU"),
        }


class _AcmePlugin:
    __name__ = "acme-stack"

    @shardmeter.hookimpl
    def shardmeter_frameworks(self):
        yield _Acme(name="acme-train", source="acme-train config.py")


def test_a_third_party_profile_is_usable_and_listed(capsys, monkeypatch):
    est = make_estimator(_AcmePlugin())
    rep = est.estimate(_sc("acme-train", gpu="a100-sxm-80gb"))
    assert _set(rep.notes, "acme-train") == {
        "parallelism.sharding": '"zero2"',
        "training.attention": '"flash2"',
    }
    assert est.estimate(_sc("acme-train")).to_dict()["layout"]  # h100: fused attention, and it runs
    monkeypatch.setattr(plugins_core, "_DEFAULT", fresh_registry(_AcmePlugin()))
    code, out, _ = run(capsys, "plugins", "--json")
    assert code == 0
    rows = [p for p in json.loads(out)["parts"] if p["kind"] == "framework" and p["name"] == "acme-train"]
    assert rows == [
        {
            "kind": "framework",
            "name": "acme-train",
            "plugin": "acme-stack",
            "distribution": "registered in code",
        }
    ]


def test_a_duplicate_framework_name_names_both_providers():
    class Other:
        __name__ = "other-stack"

        @shardmeter.hookimpl
        def shardmeter_frameworks(self):
            yield _Acme(name="torchtitan")

    with pytest.raises(shardmeter.PluginError, match=r"duplicate framework name 'torchtitan'.*other-stack"):
        fresh_registry(Other())


def test_a_failing_profile_is_a_one_line_error_naming_it():
    @attrs.frozen(kw_only=True)
    class Broken(shardmeter.FrameworkPart):
        def defaults(self, tables, gpus):
            raise KeyError("layers")

    class Plugin:
        __name__ = "broken-stack"

        @shardmeter.hookimpl
        def shardmeter_frameworks(self):
            yield Broken(name="broken")

    with pytest.raises(shardmeter.ScenarioError, match="framework 'broken' failed: KeyError") as exc:
        load_scenario(_sc("broken"), registry=fresh_registry(Plugin()))
    assert exc.value.path == "training.framework"


def test_a_failing_behaviour_hook_of_a_profile_is_named_too():
    @attrs.frozen(kw_only=True)
    class Broken(shardmeter.FrameworkPart):
        def defaults(self, tables, gpus):
            return {}

        def op_saves_attention(self, attention, gpu):
            raise ZeroDivisionError("no kernel")

    class Plugin:
        __name__ = "broken-stack"

        @shardmeter.hookimpl
        def shardmeter_frameworks(self):
            yield Broken(name="broken")

    reg = fresh_registry(Plugin())
    est = shardmeter.Estimator(registry=reg)
    with pytest.raises(shardmeter.ScenarioError, match="framework 'broken' failed: ZeroDivisionError") as exc:
        est.estimate(est.load(_sc("broken")))
    assert exc.value.path == "training.framework"


# ---- megatron-deepspeed's pipeline engine --------------------------------------------------------

#: One 8-GPU node on a link of 100 GB/s achieved and no latency, so a send's time is bytes / 1e11.
_LINK = {"name": "nvlink4", "bandwidth_gb_s": 100.0, "efficiency": 1.0, "latency_us": 0.0}


def _pipe(schedule: str, tp: int = 2, pp: int = 4, v: int = 1, **par) -> dict:
    return {
        "model": {"preset": "llama3-8b", "seq_len": 4096},
        "training": {"global_batch": 8, "micro_batch": 1, "recompute": "full"},
        "island": [{"gpu": "h100-sxm", "nodes": 1, "intra_node": _LINK}],
        "parallelism": {"tp": tp, "pp": pp, "dp": 1, "schedule": schedule, "virtual_stages": v, **par},
    }


#: One micro-batch's activation at a stage boundary: s x b x h 16-bit elements.
_ACT = 4096 * 1 * 4096 * 2.0


def test_deepspeed_pipeline_sends_full_activations_one_blocking_message_at_a_time():
    """First principles, partitioning off (DeepSpeed before e2fdd254e for the gradients, or
    pipe_partitioned = grad_partitioned = false): m = 8 micro-batches, p = 4 stages; a middle
    stage sends and receives every activation and every gradient as a separate blocking
    instruction, 4 m messages, plus the 2 (p - 1) hops of the fill and drain, each one the whole
    s b h activation (33.6 MB) from every TP rank at 100 GB/s: 38 x 0.336 ms = 12.75 ms, all
    exposed. Megatron's 1F1B pairs the directions and sends 1/t per TP rank:
    2 (m + p - 1) = 22 messages of 16.8 MB = 3.69 ms."""
    ds = shardmeter.estimate(
        _pipe("deepspeed-1f1b", pipe_partitioned=False, grad_partitioned=False)
    ).to_dict()
    assert ds["feasible"]
    assert ds["breakdown_s"]["pp_comm"] == pytest.approx(38 * _ACT / 1e11, rel=1e-9)
    assert "pp_comm" not in ds["overlapped_s"]
    mg = shardmeter.estimate(_pipe("1f1b")).to_dict()
    assert mg["breakdown_s"]["pp_comm"] == pytest.approx(22 * _ACT / 2 / 1e11, rel=1e-9)
    # the bubble is 1F1B's: (p - 1) micro-batch slots on either engine
    assert ds["breakdown_s"]["pp_bubble"] == pytest.approx(mg["breakdown_s"]["pp_bubble"], rel=1e-9)


def test_deepspeed_pipeline_partitions_over_tp_ranks_by_default():
    """DeepSpeed's default_pipeline has pipe_partitioned = grad_partitioned = true: with tp > 1
    each TP rank sends 1/t of the activation and of the gradient (38 messages of 16.8 MB); with
    only the activations partitioned, half the messages are whole."""
    ds = shardmeter.estimate(_pipe("deepspeed-1f1b")).to_dict()
    assert ds["breakdown_s"]["pp_comm"] == pytest.approx(38 * _ACT / 2 / 1e11, rel=1e-9)
    old = shardmeter.estimate(_pipe("deepspeed-1f1b", grad_partitioned=False)).to_dict()
    assert old["breakdown_s"]["pp_comm"] == pytest.approx(38 * 0.75 * _ACT / 1e11, rel=1e-9)
    two = shardmeter.estimate(_pipe("deepspeed-1f1b", pp=2)).to_dict()  # no middle stage: 2 m + 2
    assert two["breakdown_s"]["pp_comm"] == pytest.approx(18 * _ACT / 2 / 1e11, rel=1e-9)


def test_deepspeed_pipeline_cannot_interleave():
    rep = shardmeter.estimate(_pipe("deepspeed-1f1b", v=2)).to_dict()
    assert not rep["feasible"]
    assert any(
        r.startswith("parallelism.virtual_stages:") and "no interleaved schedule" in r for r in rep["reasons"]
    )
    assert shardmeter.estimate(_pipe("interleaved", v=2)).to_dict()["feasible"]


def test_megatron_deepspeed_runs_its_pipeline_engine():
    sc = _pipe("1f1b")
    del sc["parallelism"]["schedule"]
    sc["training"]["framework"] = "megatron-deepspeed"
    loaded = load_scenario(sc)
    assert loaded.parallelism.schedule == "deepspeed-1f1b"
    rep = shardmeter.estimate(sc).to_dict()
    assert rep["breakdown_s"]["pp_comm"] == pytest.approx(38 * _ACT / 2 / 1e11, rel=1e-9)


def test_plan_does_not_switch_to_a_stacks_own_engine():
    """``plan`` tries deepspeed-1f1b only where the scenario uses it (searched = False)."""
    from shardmeter.explore.search.axes import _schedule_options

    est = shardmeter.Estimator()
    names = {
        o["parallelism.schedule"] for o in _schedule_options(est.registry, {}, load_scenario(_pipe("1f1b")))
    }
    assert "deepspeed-1f1b" not in names and {"1f1b", "interleaved", "gpipe"} <= names
    own = load_scenario(_pipe("deepspeed-1f1b"))
    assert "deepspeed-1f1b" in {o["parallelism.schedule"] for o in _schedule_options(est.registry, {}, own)}
