"""Parts declare what they are; the host reads the declarations and never probes the parts.

A test plugin registered in code (:mod:`shardmeter.testing`) declares a sharding strategy with
its own infeasibility rule, schedules with their own search values and requirements, and a
sync strategy with an option named ``inner_steps`` that is synchronous all the same: ``estimate``
and ``plan`` honour each declaration with no change in the core. Also: the bundled HSDP shard
group rule (PyTorch's ``new_subgroups`` refuses a group that does not divide the world), the
options class's validators as the only value rules, and the whole tier list a part sees.
"""

from __future__ import annotations

import copy
import types
from typing import Any, ClassVar

import attrs
import numpy as np
import pytest
from shared_scenarios import TINY

import shardmeter
from shardmeter.cli.app import main
from shardmeter.explore.search.plan import search
from shardmeter.explore.search.space import compile_space
from shardmeter.load.scenario import load_scenario
from shardmeter.model.convergence import convergence_inputs
from shardmeter.model.evaluate import evaluate_columns
from shardmeter.model.feasibility import REASONS, Reason
from shardmeter.numeric import ops
from shardmeter.parts import PipeInputs, ScheduleNeeds, ShardInputs, unmet_needs
from shardmeter.strategies.schedules import ClassicSchedule
from shardmeter.strategies.sync import GlobalAllReduce
from shardmeter.strategies.zero import ZeroSharding
from shardmeter.testing import make_estimator


@attrs.frozen(kw_only=True)
class QuadOptions:
    """``decl_dp_multiple``: dp must be a multiple of it; ``decl_tilt``: a float in [-1, 1] the
    part reads nowhere (a value that may be negative although its default is not)."""

    decl_dp_multiple: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    decl_tilt: float = attrs.field(
        default=0.25, validator=[attrs.validators.ge(-1.0), attrs.validators.le(1.0)]
    )


@attrs.frozen(kw_only=True)
class QuadZero1(ZeroSharding):
    """ZeRO-1 that runs only when dp is a multiple of ``decl_dp_multiple``."""

    options: type = QuadOptions

    def infeasible(self, inp: ShardInputs, opts: Any) -> Any:
        return ops.mod(inp.dp, opts.decl_dp_multiple) != 0

    def infeasible_message(self, opts: Any) -> str | None:
        return f"decl-zero1 needs dp a multiple of {opts.decl_dp_multiple} (dp x cp is {{dpcp}})"


@attrs.frozen(kw_only=True)
class RailZero1(ZeroSharding):
    """ZeRO-1 whose data-parallel group must stay inside one domain of the second tier (reads
    the whole tier list); ``seen`` keeps every ShardInputs ``state`` was given."""

    seen: ClassVar[list[ShardInputs]] = []

    def infeasible(self, inp: ShardInputs, opts: Any) -> Any:
        return inp.tp * inp.dp * inp.cp > ops.tier(inp.tier_gpus, 1)

    def state(self, inp: ShardInputs, opts: Any):
        RailZero1.seen.append(inp)
        return super().state(inp, opts)


@attrs.frozen(kw_only=True)
class ScaleOptions:
    decl_bubble_scale: float = attrs.field(default=1.0, validator=attrs.validators.ge(0.0))


@attrs.frozen(kw_only=True)
class Scaled1F1B(ClassicSchedule):
    """1F1B with its bubble scaled by ``decl_bubble_scale``, searched at 1 and 0.5; it needs two
    micro-batches per step with pp > 1."""

    options: type = ScaleOptions

    def needs(self, opts: Any) -> ScheduleNeeds:
        return ScheduleNeeds(min_micro_batches=2)

    def search_values(self, opts: Any) -> dict[str, list[Any]]:
        return {**super().search_values(opts), "decl_bubble_scale": [1.0, 0.5]}

    def terms(self, pipe: PipeInputs, opts: Any):
        t = super().terms(pipe, opts)
        return attrs.evolve(t, bubble_s=opts.decl_bubble_scale * t.bubble_s)


@attrs.frozen(kw_only=True)
class Chunked1F1B(ClassicSchedule):
    """Declares it uses virtual stages (searched at 2 and 4) although its terms ignore them: a
    probe of its bubble would say it does not; and it runs as 1F1B with one stage."""

    def needs(self, opts: Any) -> ScheduleNeeds:
        return ScheduleNeeds(virtual_stages="used")

    def search_values(self, opts: Any) -> dict[str, list[Any]]:
        return {"virtual_stages": [2, 4]}

    def one_stage_order(self, opts: Any) -> str:
        return "1f1b"


@attrs.frozen(kw_only=True)
class StepsOptions:
    inner_steps: int = attrs.field(default=7, validator=attrs.validators.ge(1))


@attrs.frozen(kw_only=True)
class NamedSteps(GlobalAllReduce):
    """A global all-reduce every step with an option that happens to be called ``inner_steps``."""

    options: type = StepsOptions


def _plugin() -> types.ModuleType:
    mod = types.ModuleType("decl_plugin")
    mod.shardmeter_sharding_strategies = shardmeter.hookimpl(
        lambda: [QuadZero1(name="decl-zero1", shard_optimizer=True), RailZero1(name="rail-zero1")]
    )
    mod.shardmeter_pipeline_schedules = shardmeter.hookimpl(
        lambda: [Scaled1F1B(name="decl-1f1b"), Chunked1F1B(name="decl-chunks")]
    )
    mod.shardmeter_sync_strategies = shardmeter.hookimpl(lambda: [NamedSteps(name="named-steps")])
    return mod


@pytest.fixture(scope="module")
def est():
    return make_estimator(_plugin())


def _tiny(**par: Any) -> dict[str, Any]:
    """:data:`TINY` with a global batch that dp 4, 6 and 8 split, and ``[parallelism]`` ``par``."""
    sc = copy.deepcopy(TINY)
    sc["training"]["global_batch"] = 96
    sc["parallelism"] = par
    return sc


# ---- a sharding strategy's own infeasibility rule ------------------------------------------------


def test_a_plugin_sharding_rule_makes_estimate_infeasible_with_its_message(est):
    bad = est.estimate(_tiny(sharding="decl-zero1", dp=6))
    assert not bad.feasible
    assert bad.reasons == ["parallelism.sharding: decl-zero1 needs dp a multiple of 4 (dp x cp is 6)"]
    assert est.estimate(_tiny(sharding="decl-zero1", dp=8)).feasible
    # the rule reads the strategy's own option
    assert est.estimate(_tiny(sharding="decl-zero1", dp=6, decl_dp_multiple=3)).feasible


def test_a_plugin_sharding_rule_is_the_planners_pre_check_and_its_verdict(est):
    doc = search(_tiny(sharding="decl-zero1"), estimator=est, top=20, only={"sharding": None})
    assert doc["plans"] and all(p["parallelism"]["dp"] % 4 == 0 for p in doc["plans"])
    assert doc["infeasible"]["parallelism.sharding"] > 0
    # one strategy: the prefixes fix it, so the structural pre-check itself rejects dp = 6
    sc = load_scenario(_tiny(sharding="decl-zero1"), registry=est.registry)
    sp = compile_space(sc, est, only={"sharding": None})
    assert sp.inner_verdict(np.arange(sp.n_prefixes)) is None
    bits, _dup = sp.prefix_verdict(np.arange(sp.n_prefixes))
    dp = np.asarray(sp.layout["dp"])[sp._prefix_codes(np.arange(sp.n_prefixes))[0]].ravel()
    assert np.array_equal((bits & Reason.SHARDING) != 0, dp % 4 != 0)


def test_the_pre_check_matches_evaluate_when_the_sharding_axis_is_inner(est):
    """With several strategies the sharding axis is inner (the candidate ids keep their order):
    each candidate's structural bits still equal those ``evaluate`` sets."""
    sc = load_scenario(TINY, registry=est.registry)
    sp = compile_space(sc, est, only={"sharding": ["none", "decl-zero1"], "schedule": ["1f1b"]})
    ids = np.arange(sp.size, dtype=np.int64)
    inp = dict(sp.base)
    inp.update(sp.columns(ids))
    with np.errstate(all="ignore"):
        out = evaluate_columns(inp, sp.table)
    ev = np.bitwise_or.reduce(out.reasons, axis=-1) & ~(Reason.MEMORY | Reason.PRECISION)
    assert np.array_equal(ev, sp.verdict(ids)) and np.any(ev & Reason.SHARDING)
    doc = search(TINY, estimator=est, top=50, only={"sharding": ["none", "decl-zero1"], "schedule": ["1f1b"]})
    assert all(
        p["parallelism"]["dp"] % 4 == 0 for p in doc["plans"] if p["parallelism"]["sharding"] == "decl-zero1"
    )
    f = (ev & Reason.SHARDING) != 0
    assert doc["infeasible"]["parallelism.sharding"] == int(np.count_nonzero(f))


def test_hsdp_shard_group_must_divide_the_data_parallel_ranks():
    """A shard group of 24 (72-GPU NVLink domains, tp 3) does not split 64 ranks into replicas;
    48 it does. FSDP's sharding over the whole group always divides it."""
    reg = shardmeter.Registry.from_plugin_manager(shardmeter.make_plugin_manager())
    hsdp, fsdp = reg.get("sharding", "hsdp"), reg.get("sharding", "fsdp")

    def shard(dp):
        z = np.zeros(2)
        return ShardInputs(
            params_per_gpu=z,
            params_per_layer=z,
            layers_per_stage=z,
            weight_bytes=z,
            grad_bytes=z,
            optimizer_bytes_per_param=z,
            tp=3.0,
            dp=np.asarray(dp, dtype=float),
            cp=1.0,
            domain_gpus=72.0,
        )

    assert hsdp.infeasible(shard([64, 48]), hsdp.options()).tolist() == [True, False]
    assert fsdp.infeasible(shard([64, 48]), fsdp.options()).tolist() == [False, False]


def test_hsdp_that_does_not_divide_is_an_infeasible_estimate():
    sc = _tiny(sharding="hsdp", dp=6)  # 4 GPUs a node: shard groups of 4 in 6 ranks
    rep = shardmeter.estimate(sc)
    assert not rep.feasible
    assert rep.reasons == [f"parallelism.sharding: {REASONS[Reason.SHARDING][1].format(dpcp=6)}"]
    assert shardmeter.estimate(_tiny(sharding="hsdp", dp=8)).feasible


# ---- schedules: their own search values and requirements ----------------------------------------


def test_a_schedules_search_values_are_what_plan_tries(est):
    sc = load_scenario(TINY, registry=est.registry)
    sp = compile_space(sc, est, only={"schedule": ["decl-1f1b"], "pp": [2]})
    sched = next(a for a in sp.axes if a.name == "schedule")
    assert [ov.get("parallelism.decl_bubble_scale") for ov in sched.overrides] == [1.0, 0.5]
    doc = search(TINY, estimator=est, top=3, only={"schedule": ["decl-1f1b"], "pp": [2]})
    best = doc["plans"][0]
    assert best["parallelism"]["decl_bubble_scale"] == 0.5  # the smaller bubble wins
    # the plan's report is what estimate says of the scenario with that value
    data = copy.deepcopy(TINY)
    data["parallelism"] = best["parallelism"]
    data["training"] = {**data["training"], **best["training"]}
    data["island"][0]["nodes"] = best["islands"][0]["nodes"]
    assert est.estimate(data).step_time_s == pytest.approx(best["report"]["step_time_s"], rel=1e-12)


def test_a_schedule_that_declares_virtual_stages_is_tried_at_its_values(est):
    sc = load_scenario(TINY, registry=est.registry)
    sp = compile_space(sc, est, only={"schedule": ["1f1b", "decl-chunks"]})
    sched = next(a for a in sp.axes if a.name == "schedule")
    tried = [(o["parallelism.schedule"], o["parallelism.virtual_stages"]) for o in sched.overrides]
    assert tried == [("1f1b", 1), ("decl-chunks", 2), ("decl-chunks", 4)]
    # it declares it runs as 1F1B with one stage: its options are copies of 1F1B's at pp = 1
    assert sched.aux["dup_if_pp1"].tolist() == [False, True, True]


def test_a_schedules_declared_requirement_is_an_infeasible_estimate(est):
    sc = _tiny(schedule="decl-1f1b", pp=2, dp=4)
    sc["training"] = {**sc["training"], "global_batch": 4}  # one micro-batch per replica
    rep = est.estimate(sc)
    assert rep.reasons == [
        "parallelism.virtual_stages: the schedule 'decl-1f1b' needs at least 2 micro-batches per step (got 1)"
    ]


def test_unmet_needs_are_the_bundled_schedules_rules():
    pp, m, v = np.array([4.0, 4.0, 1.0, 4.0]), np.array([8.0, 6.0, 6.0, 1.0]), np.array([2.0, 2.0, 2.0, 1.0])
    pipe = PipeInputs(pp=pp, micro_batches=m, virtual_stages=v, stage_s=0.0, forward_s=0.0, weight_grad_s=0.0)
    interleaved = ScheduleNeeds(virtual_stages="used", interleaved_multiple_of_pp=True)
    assert unmet_needs(interleaved, pipe).tolist() == [False, True, True, False]
    assert unmet_needs(ScheduleNeeds(virtual_stages="refused"), pipe).tolist() == [True, True, False, False]
    assert unmet_needs(ScheduleNeeds(min_micro_batches=2), pipe).tolist() == [False, False, False, True]
    assert unmet_needs(ScheduleNeeds(), pipe).tolist() == [False] * 4


# ---- what a convergence model reads of a sync strategy ------------------------------------------


def test_an_option_named_inner_steps_does_not_make_a_strategy_local_steps(est):
    """The sync part declares its hyperparameters: a synchronous one with an option called
    ``inner_steps`` stays synchronous; DiLoCo's are its options, overlap resolved."""
    from shardmeter.inputs.bundles import PartTable

    reg = est.registry
    table = PartTable()
    named = reg.get("sync", "named-steps")
    diloco = reg.get("sync", "diloco")
    table.code("sync", named, named.options(inner_steps=30))
    table.code("sync", diloco, diloco.options(inner_steps=30, fragments=2))
    inp = convergence_inputs(table, np.array([0, 1]), params=np.array([1e9, 1e9]), replicas=np.array([4, 4]))
    assert inp.local_steps.tolist() == [False, True]
    assert inp.inner_steps.tolist() == [1.0, 30.0]
    assert inp.overlap_steps.tolist() == [0.0, 1.0]  # -1 resolves to 1 with fragments


def test_plan_varies_only_the_sync_options_a_strategy_declares(est):
    from shared_scenarios import THREE_ISLANDS

    sc = load_scenario(THREE_ISLANDS, registry=est.registry)
    sp = compile_space(sc, est, only={"strategy": ["named-steps", "diloco"]})
    sync = next(a for a in sp.axes if a.name == "sync")
    named = [o for o in sync.overrides if o["sync.strategy"] == "named-steps"]
    assert named == [{"sync.strategy": "named-steps"}]
    assert {o["sync.inner_steps"] for o in sync.overrides if o["sync.strategy"] == "diloco"} >= {50, 100}


# ---- the options class decides the values -------------------------------------------------------


def test_a_plugin_float_option_may_be_negative(est):
    assert est.estimate(_tiny(sharding="decl-zero1", dp=8, decl_tilt=-0.5)).feasible
    with pytest.raises(
        shardmeter.ScenarioError, match=r"\$\.parallelism: 'decl_tilt' must be >= -1\.0: -1\.5"
    ) as exc:
        est.load(_tiny(sharding="decl-zero1", dp=8, decl_tilt=-1.5))
    assert "\n" not in str(exc.value)


def test_a_bundled_options_bad_value_is_a_one_line_error_naming_the_key(tmp_path, capsys):
    sc = tmp_path / "bad.toml"
    sc.write_text(
        '[model]\npreset = "gpt3-13b"\n[training]\nglobal_batch = 64\n'
        '[[island]]\nname = "a"\ngpu = "h100-sxm"\nnodes = 1\n'
        '[[island]]\nname = "b"\ngpu = "h100-sxm"\nnodes = 1\n'
        '[sync]\nstrategy = "diloco"\ncompression_bits = 0\n'
    )
    assert main(["estimate", str(sc)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.endswith(
        "$.sync.compression_bits: expected an integer from 1 to 32, got 0"
    )


def test_a_declarative_records_options_keep_the_rules_of_their_defaults():
    opts = shardmeter.parts.make_options_class("rec", {"count": 4, "ratio": 0.5, "auto": -1})
    assert opts(count=1, ratio=0.0, auto=-1).count == 1
    for bad in ({"count": 0}, {"ratio": -0.1}, {"auto": -2}):
        with pytest.raises(ValueError, match="expected"):
            opts(**bad)


# ---- the whole tier list ------------------------------------------------------------------------

_THREE_TIERS = {
    "model": TINY["model"],
    "training": TINY["training"],
    "island": [
        {
            "name": "t",
            "gpu": "h100-sxm",
            "nodes": 8,
            "gpus_per_node": 8,
            "tiers": [{"link": "nvlink4", "gpus": 8}, {"link": "ib-ndr", "gpus": 32}, {"link": "ib-ndr"}],
        }
    ],
}


def test_a_sharding_part_sees_every_tier(est):
    RailZero1.seen.clear()
    sc = copy.deepcopy(_THREE_TIERS)
    sc["parallelism"] = {"sharding": "rail-zero1", "tp": 4, "dp": 8}
    assert est.estimate(sc).feasible
    res = est.resolve(est.load(sc))
    topo = est.inputs(res)[0].topology
    seen = RailZero1.seen[-1]
    for k in ("tier_gpus", "tier_bytes_s", "tier_latency_s"):
        assert (
            np.asarray(getattr(seen, k), dtype=float).ravel().tolist()
            == np.asarray(getattr(topo, k), dtype=float).ravel().tolist()
        )
    assert ops.n_tiers(seen.tier_gpus) == 3 and seen.domain_gpus == 8.0
    # its rule reads the second tier: 4 x 16 GPUs leave one 32-GPU domain
    sc["parallelism"]["dp"] = 16
    rep = est.estimate(sc)
    assert not rep.feasible and rep.reasons[0].startswith("parallelism.sharding:")


def test_contributing_lists_every_field_of_every_exchange_record():
    import re
    from pathlib import Path

    from shardmeter import exchange

    text = (Path(__file__).resolve().parents[1] / "CONTRIBUTING.md").read_text(encoding="utf-8")
    table = text.split("### Exchange records", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, set[str]] = {}
    record = ""
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 3 and not cells[0].startswith("-"):
            record = cells[0].strip("`") or record
            listed.setdefault(record, set()).update(re.findall(r"`(\w+)`", cells[1]))
    for name in exchange.__all__:
        cls = getattr(exchange, name)
        if isinstance(cls, type) and attrs.has(cls):
            assert {f.name for f in attrs.fields(cls)} <= listed.get(name, set()), name
