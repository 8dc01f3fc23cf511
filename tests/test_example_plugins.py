"""The three example plugin distributions under ``examples/plugins/``, whose parts carry behaviour:

* ``shardmeter-acme``: ``acme-zero2``, a subclass of the bundled ZeRO sharding whose option
  ``acme_bucket_mb`` sets the last (always exposed) gradient bucket;
* ``shardmeter-zero-bubble``: the ``zb-h1`` pipeline schedule (Qi et al. 2024), option
  ``zb_w_fill``;
* ``shardmeter-zeropp``: the ``zeropp`` sharding strategy (ZeRO++, Wang et al. 2023) with its
  own ``state()`` and ``traffic()``, options ``zeropp_weight_bits``, ``zeropp_gradient_bits``,
  ``zeropp_hpz``.

Most checks run in process: each module is loaded from its file and registered on a fresh plugin
manager beside the bundled parts (:func:`shardmeter.testing.make_estimator`). The last few install
the three distributions with pip into one temporary virtual environment
(:func:`plugin_venv.make_venv`, as ``test_third_party_plugin.py`` does) and run the CLI there.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
import types

import attrs
import numpy as np
import pytest
from plugin_venv import make_venv, needs_pip, norm

from shardmeter.errors import ScenarioError
from shardmeter.parts import PipeInputs, ShardInputs
from shardmeter.strategies.schedules import p2p_transfers
from shardmeter.strategies.zero import ZeroSharding, shard_group_size
from shardmeter.testing import make_estimator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "examples" / "plugins"
DISTS = {
    "shardmeter-acme": "shardmeter_acme",
    "shardmeter-zero-bubble": "shardmeter_zero_bubble",
    "shardmeter-zeropp": "shardmeter_zeropp",
}
ACME_SCENARIO = PLUGINS / "shardmeter-acme" / "acme-scenario.toml"
EXAMPLE = ROOT / "examples" / "gpt3-175b-a100.toml"
REL = 1e-12

#: Llama 3 8B on 2 nodes x 8 H100, TP 2 x PP 4 x DP 2, 32 micro-batches a step.
PP4 = {
    "model": {"preset": "llama3-8b"},
    "training": {"global_batch": 64, "micro_batch": 1, "precision": "bf16", "recompute": "selective"},
    "island": [
        {
            "name": "pod",
            "gpu": "h100-sxm",
            "nodes": 2,
            "gpus_per_node": 8,
            "intra_node": "nvlink4",
            "inter_node": "ib-ndr",
            "nics_per_node": 8,
        }
    ],
    "parallelism": {"tp": 2, "pp": 4, "schedule": "1f1b"},
}

#: Llama 3 8B under ZeRO-3 on 8 nodes x 8 A100-80GB with four 100 Gb/s RoCE NICs a node: the
#: parameter gathers and gradient reduction are far from hidden (a low-bandwidth cluster, the
#: setting ZeRO++ targets).
ZPP = {
    "model": {"preset": "llama3-8b"},
    "training": {"global_batch": 256, "micro_batch": 1, "precision": "bf16", "recompute": "selective"},
    "island": [
        {
            "name": "pod",
            "gpu": "a100-sxm-80gb",
            "nodes": 8,
            "gpus_per_node": 8,
            "intra_node": "nvlink3",
            "inter_node": "roce-100g",
            "nics_per_node": 4,
        }
    ],
    "parallelism": {"sharding": "zero3"},
}


def _load(dist: str) -> types.ModuleType:
    """The plugin module of ``examples/plugins/<dist>``, imported from its file."""
    name = DISTS[dist]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PLUGINS / dist / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # the options classes' annotations are resolved in their module
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def acme():
    return _load("shardmeter-acme")


@pytest.fixture(scope="module")
def zb():
    return _load("shardmeter-zero-bubble")


@pytest.fixture(scope="module")
def zpp():
    return _load("shardmeter-zeropp")


@pytest.fixture(scope="module")
def est(acme, zb, zpp):
    return make_estimator(acme, zb, zpp)


def _with(sc: dict, **par) -> dict:
    """A copy of scenario ``sc`` with ``[parallelism]`` keys set."""
    out = json.loads(json.dumps(sc))
    out["parallelism"].update(par)
    return out


def _acme(**par) -> dict:
    """examples/plugins/shardmeter-acme/acme-scenario.toml without its ``acme_bucket_mb``, with ``par``."""
    sc = tomllib.loads(ACME_SCENARIO.read_text())
    del sc["parallelism"]["acme_bucket_mb"]
    return _with(sc, **par)


def _spy(part, method: str):
    """A copy of ``part`` whose ``method`` also records the inputs the core passes it, and that list."""
    seen: list = []
    orig = getattr(type(part), method)

    def spying(self, inp, opts):
        seen.append(inp)
        return orig(self, inp, opts)

    cls = attrs.make_class(f"Spy{type(part).__name__}", {}, bases=(type(part),), frozen=True, kw_only=True)
    setattr(cls, method, spying)
    return cls(**attrs.asdict(part, recurse=False)), seen


def _same(a, b) -> None:
    """Two reports predict the same step, breakdown and memory (to 1e-12)."""
    assert a.feasible and b.feasible
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=REL)
    assert a.memory_per_gpu_gb == pytest.approx(b.memory_per_gpu_gb, rel=REL)
    assert set(a.breakdown_s) == set(b.breakdown_s)
    for k, v in a.breakdown_s.items():
        assert v == pytest.approx(b.breakdown_s[k], rel=REL, abs=1e-15), k


# -- shardmeter-acme: acme-zero2 ------------------------------------------------------------------


def test_acme_zero2_is_zero2_with_a_bucket_option(est, acme):
    part = est.registry.get("sharding", "acme-zero2")
    assert isinstance(part, ZeroSharding) and type(part) is acme.AcmeZero2
    assert (part.shard_optimizer, part.shard_gradients, part.shard_parameters) == (True, True, False)
    assert part.options is acme.AcmeZero2Options and part.option_defaults() == {"acme_bucket_mb": 25.0}
    assert part.bucket_bytes(acme.AcmeZero2Options(acme_bucket_mb=3)) == 3e6


def test_acme_default_bucket_predicts_what_zero2_does(est):
    _same(est.estimate(_acme()), est.estimate(_acme(sharding="zero2")))
    _same(est.estimate(_acme()), est.estimate(_acme(acme_bucket_mb=25)))


def test_acme_bucket_is_the_exposed_last_bucket(est):
    """On 4 nodes the reduction hides under the last backward pass except its last bucket, a ring
    all-reduce over the 16 data-parallel ranks paced by one ACME Link NIC per GPU:
    ``2 (n-1)/n B / bw + 2 (n-1) latency``. A bucket bigger than the whole reduction exposes all
    of it, as with ``dp_comm_overlap = false``."""
    link = est.registry.get("interconnect", "acme-link")
    bw, lat = link.bandwidth_gb_s * 1e9 * link.efficiency, link.latency_us * 1e-6
    n = 16.0  # 32 GPUs / tp 2
    reports = {mb: est.estimate(_acme(acme_bucket_mb=mb)) for mb in (1, 25, 50, 400, 10000)}
    assert all(r.feasible for r in reports.values())
    for mb in (1, 25, 50):
        want = 2.0 * (n - 1.0) / n * mb * 1e6 / bw + 2.0 * (n - 1.0) * lat
        assert reports[mb].breakdown_s["dp_comm"] == pytest.approx(want, rel=1e-9), mb
    steps = [reports[mb].step_time_s for mb in sorted(reports)]
    dp = [reports[mb].breakdown_s["dp_comm"] for mb in sorted(reports)]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert dp == sorted(dp) and len(set(dp)) == len(dp)
    blocking = est.estimate(_acme(acme_bucket_mb=1, dp_comm_overlap=False))
    assert reports[10000].breakdown_s["dp_comm"] == pytest.approx(blocking.breakdown_s["dp_comm"], rel=REL)
    _same(blocking, est.estimate(_acme(acme_bucket_mb=10000, dp_comm_overlap=False)))


# -- shardmeter-zero-bubble: zb-h1 ----------------------------------------------------------------


def _pipe(**kw) -> PipeInputs:
    f = {k: np.asarray(v, dtype=float) for k, v in kw.items()}
    return PipeInputs(**f)


def test_zb_h1_terms_on_the_papers_equal_pass_times(est, zb):
    """T_F = T_B = T_W = 1: ZB-H1's bubble is a third of 1F1B's (Qi et al. 2024, Sec. 2.1); the
    memory in flight and the transfers are 1F1B's; at fill 0 every term is 1F1B's."""
    part = est.registry.get("schedule", "zb-h1")
    classic = est.registry.get("schedule", "1f1b")
    pipe = _pipe(
        pp=[[4.0], [8.0], [1.0]],
        micro_batches=[[8.0], [3.0], [5.0]],
        virtual_stages=[[1.0]] * 3,
        stage_s=[[3.0]] * 3,
        forward_s=[[1.0]] * 3,
        weight_grad_s=[[1.0]] * 3,
    )
    t = part.terms(pipe, zb.ZbH1Options())
    ref = classic.terms(pipe, classic.options())
    np.testing.assert_allclose(t.bubble_s, np.asarray(ref.bubble_s) / 3.0, rtol=REL)
    np.testing.assert_array_equal(t.bubble_s, [[3.0], [7.0], [0.0]])
    np.testing.assert_array_equal(t.in_flight, [[4.0], [3.0], [1.0]])
    np.testing.assert_array_equal(t.p2p_transfers, p2p_transfers(pipe))
    assert not np.any(t.infeasible)
    t0 = part.terms(pipe, zb.ZbH1Options(zb_w_fill=0.0))
    for field in ("bubble_s", "in_flight", "p2p_transfers"):
        np.testing.assert_array_equal(getattr(t0, field), getattr(ref, field))
    # W passes longer than half the stage cannot make the bubble negative
    big_w = _pipe(
        pp=4.0, micro_batches=8.0, virtual_stages=1.0, stage_s=3.0, forward_s=0.5, weight_grad_s=2.0
    )
    assert float(part.terms(big_w, zb.ZbH1Options()).bubble_s) == 0.0


def test_zb_h1_bubble_is_the_papers_on_the_models_own_times(est, zb):
    """pp = 4: a spy subclass records the PipeInputs the core hands the schedule, so the
    expectation uses the model's own ``stage_s`` and ``T_W``:
    ``bubble_zb / bubble_1f1b = (stage_s - 2 T_W) / stage_s``, and the step shrinks by exactly
    ``(p-1) 2 T_W`` (nothing else changes)."""
    spy, seen = _spy(attrs.evolve(est.registry.get("schedule", "zb-h1"), name="zb-h1-spy"), "terms")
    spied = est.with_part("schedule", spy)
    classic = est.estimate(_with(PP4, schedule="1f1b"))
    zero = spied.estimate(_with(PP4, schedule="zb-h1-spy"))
    assert classic.feasible and zero.feasible
    pipe = seen[-1]
    one = lambda x: float(np.asarray(x).ravel()[0])  # noqa: E731 - a (1, 1) row of one plan
    assert one(pipe.pp) == 4.0 and one(pipe.virtual_stages) == 1.0
    stage, t_w = one(pipe.stage_s), one(pipe.weight_grad_s)
    assert 0.0 < 2.0 * t_w < stage and t_w <= one(pipe.forward_s)  # unclamped; W = the dense GEMMs of F
    b_1f1b, b_zb = classic.breakdown_s["pp_bubble"], zero.breakdown_s["pp_bubble"]
    assert b_1f1b == pytest.approx(3.0 * stage, rel=REL)  # the spy saw the stage 1F1B was given
    assert b_zb / b_1f1b == pytest.approx((stage - 2.0 * t_w) / stage, rel=REL)
    assert b_zb == pytest.approx(b_1f1b - 2.0 * 3.0 * t_w, rel=REL)
    assert classic.step_time_s - zero.step_time_s == pytest.approx(2.0 * 3.0 * t_w, rel=1e-9)
    assert zero.memory_per_gpu_gb == pytest.approx(classic.memory_per_gpu_gb, rel=REL)
    assert {k: v for k, v in zero.breakdown_s.items() if k != "pp_bubble"} == pytest.approx(
        {k: v for k, v in classic.breakdown_s.items() if k != "pp_bubble"}, rel=REL
    )


def test_zb_h1_fill_zero_is_1f1b_and_fill_interpolates(est):
    classic = est.estimate(_with(PP4, schedule="1f1b"))
    fills = {f: est.estimate(_with(PP4, schedule="zb-h1", zb_w_fill=f)) for f in (0.0, 0.5, 1.0)}
    _same(fills[0.0], classic)
    b = {f: r.breakdown_s["pp_bubble"] for f, r in fills.items()}
    assert b[1.0] < b[0.5] < b[0.0]
    assert b[0.5] == pytest.approx((b[0.0] + b[1.0]) / 2.0, rel=1e-12)
    _same(est.estimate(_with(PP4, schedule="zb-h1")), fills[1.0])  # the default is the paper's


def test_zb_h1_fill_outside_zero_one_is_a_scenario_error(est):
    with pytest.raises(ScenarioError, match="zb_w_fill"):
        est.estimate(_with(PP4, schedule="zb-h1", zb_w_fill=1.5))


# -- shardmeter-zeropp: zeropp --------------------------------------------------------------------

#: One GPU's view: 1e9 parameters in 10 layers, bf16, TP 2 x DP 16, 8 GPUs per node (a node holds
#: 4 data-parallel ranks).
SHARD = ShardInputs(
    params_per_gpu=np.asarray(1e9),
    params_per_layer=np.asarray(9e7),
    layers_per_stage=np.asarray(10.0),
    weight_bytes=np.asarray(2.0),
    grad_bytes=np.asarray(2.0),
    optimizer_bytes_per_param=np.asarray(12.0),
    tp=np.asarray(2.0),
    dp=np.asarray(16.0),
    cp=np.asarray(1.0),
    domain_gpus=np.asarray(8.0),
)


def _events(evs) -> list[tuple]:
    return [
        (
            e.collective,
            float(e.bytes),
            float(e.group_size),
            float(e.group_stride),
            e.flat,
            e.per,
            float(e.exposed_fraction),
        )
        for e in evs
    ]


def test_zeropp_state_and_events(est, zpp):
    part = est.registry.get("sharding", "zeropp")
    assert type(part) is zpp.ZeroPlusPlus and part.option_defaults() == {
        "zeropp_weight_bits": 8,
        "zeropp_gradient_bits": 4,
        "zeropp_hpz": True,
    }
    L = float(SHARD.layers_per_stage)  # one call per layer, each a layer's share
    first = 1.0 / L  # the forward's first gather, the backward's last reduction
    on = part.traffic(SHARD, zpp.ZeroPPOptions())
    assert _events(on) == [
        ("all_gather", 1e9 / L, 16.0, 2.0, True, "micro_batch", first),  # qwZ: INT8 over the 16 ranks
        ("all_gather", 2e9 / L, 4.0, 2.0, False, "micro_batch", 0.0),  # hpZ: FP16 over the node's 4
        ("reduce_scatter", 0.5e9 / L, 16.0, 2.0, False, "micro_batch", first),  # qgZ: INT4, hierarchical
    ]
    assert [float(e.count) for e in on] == [L, L, L]
    st = part.state(SHARD, zpp.ZeroPPOptions())
    bucket = 5e8 * 2.0  # DeepSpeed ZeRO-3's FP16 reduce bucket (reduce_bucket_size elements)
    assert float(st.extra) == 1e9 * 2.0 / 4.0 + bucket  # + hpZ's secondary FP16 copy over the node
    # two 9e7-parameter layers are under stage3_max_live_parameters: both stay gathered
    assert float(st.weights) == 1e9 * 2.0 / 16.0 + 2.0 * 9e7 * 2.0
    off = zpp.ZeroPPOptions(zeropp_weight_bits=16, zeropp_gradient_bits=16, zeropp_hpz=False)
    assert float(part.state(SHARD, off).extra) == bucket
    # all three off: ZeRO-3's events (its 2 L gathers are one event, its one exposed gather of
    # 2 L is the forward's first of L here) and state
    zero3 = est.registry.get("sharding", "zero3")
    ref = zero3.traffic(SHARD, zero3.options())
    got = part.traffic(SHARD, off)
    assert _events(got)[2] == _events(ref)[1] and float(ref[0].count) == 2.0 * L
    for e in got[:2]:
        assert (e.collective, float(e.bytes), e.flat) == ("all_gather", float(ref[0].bytes), ref[0].flat)
    exposed = sum(float(e.count * e.exposed_fraction) for e in got[:2])
    assert exposed == pytest.approx(float(ref[0].count * ref[0].exposed_fraction), rel=1e-12)
    st_off, st_ref = part.state(SHARD, off), zero3.state(SHARD, zero3.options())
    for f in ("weights", "gradients", "optimizer", "param_shards", "optimizer_shards"):
        assert float(getattr(st_off, f)) == float(getattr(st_ref, f)), f


def test_zeropp_all_off_predicts_what_zero3_does(est):
    off = dict(zeropp_weight_bits=16, zeropp_gradient_bits=16, zeropp_hpz=False)
    _same(est.estimate(_with(ZPP, sharding="zeropp", **off)), est.estimate(ZPP))


def test_zeropp_bits_change_the_prediction(est):
    zero3 = est.estimate(ZPP)
    dp = {}
    for w in (4, 8, 16):
        for g in (2, 4, 8):
            r = est.estimate(_with(ZPP, sharding="zeropp", zeropp_weight_bits=w, zeropp_gradient_bits=g))
            assert r.feasible and not r.notes
            dp[w, g] = r.breakdown_s["dp_comm"]
            assert r.step_time_s < zero3.step_time_s
    assert dp[4, 4] < dp[8, 4] < dp[16, 4]
    assert dp[8, 2] < dp[8, 4] < dp[8, 8]
    for hpz in (True, False):
        ws = [
            est.estimate(_with(ZPP, sharding="zeropp", zeropp_weight_bits=w, zeropp_hpz=hpz)).step_time_s
            for w in (4, 8, 16)
        ]
        assert ws[0] < ws[1] < ws[2], hpz


def test_zeropp_hpz_trades_memory_for_cross_node_gathers(est):
    """hpZ lowers the exposed communication (the backward gather stays in the node) and costs the
    secondary FP16 copy, the GPU's parameters over the node's 8 ranks (as the core passed them to
    the part: a spy records its ShardInputs)."""
    spy, seen = _spy(attrs.evolve(est.registry.get("sharding", "zeropp"), name="zeropp-spy"), "state")
    on = est.with_part("sharding", spy).estimate(_with(ZPP, sharding="zeropp-spy"))
    off = est.estimate(_with(ZPP, sharding="zeropp", zeropp_hpz=False))
    assert on.breakdown_s["dp_comm"] < off.breakdown_s["dp_comm"] and on.step_time_s < off.step_time_s
    inp = seen[-1]
    assert float(np.asarray(shard_group_size(inp, True)).ravel()[0]) == 8.0
    params = float(np.asarray(inp.params_per_gpu).ravel()[0])
    extra_gb = params * 2.0 / 8.0 / 1e9
    assert on.memory_per_gpu_gb - off.memory_per_gpu_gb == pytest.approx(extra_gb, rel=1e-9)


# -- installed with pip --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    return make_venv(tmp_path_factory.mktemp("example-plugins"), [PLUGINS / d for d in DISTS])


def _estimate(venv, path, *sets: str) -> dict:
    args = [a for s in sets for a in ("--set", s)]
    res = venv.run("estimate", str(path), *args, "--json")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    out = json.loads(res.stdout)
    assert out["feasible"] is True and not out["notes"], (out["reasons"], out["notes"])
    return out


@needs_pip
def test_installed_plugins_list_their_parts_with_their_distributions(venv):
    res = venv.run("plugins", "--json", strict=True)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    parts = {(p["kind"], p["name"]): p for p in json.loads(res.stdout)["parts"]}
    for kind, name, plugin, dist in [
        ("sharding", "acme-zero2", "acme", "shardmeter-acme"),
        ("hardware", "acme-x1", "acme", "shardmeter-acme"),
        ("schedule", "zb-h1", "zero-bubble", "shardmeter-zero-bubble"),
        ("sharding", "zeropp", "zeropp", "shardmeter-zeropp"),
    ]:
        part = parts[(kind, name)]
        assert part["plugin"] == plugin
        got, version = part["distribution"].split()
        assert (norm(got), version) == (dist, "0.1.0")


@needs_pip
def test_installed_acme_bucket_changes_the_step(venv):
    runs = [_estimate(venv, ACME_SCENARIO, f"parallelism.acme_bucket_mb={mb}") for mb in (1, 25, 10000)]
    steps = [r["step_time_s"] for r in runs]
    dp = [r["breakdown_s"]["dp_comm"] for r in runs]
    assert steps[0] < steps[1] < steps[2] and dp[0] < dp[1] < dp[2]


@needs_pip
def test_installed_zb_h1_shrinks_the_bubble_and_is_1f1b_at_fill_zero(venv):
    v1 = "parallelism.virtual_stages=1"
    classic = _estimate(venv, EXAMPLE, 'parallelism.schedule="1f1b"', v1)
    zero = _estimate(venv, EXAMPLE, 'parallelism.schedule="zb-h1"', v1)
    fill0 = _estimate(venv, EXAMPLE, 'parallelism.schedule="zb-h1"', v1, "parallelism.zb_w_fill=0")
    assert fill0["step_time_s"] == pytest.approx(classic["step_time_s"], rel=REL)
    assert fill0["breakdown_s"] == pytest.approx(classic["breakdown_s"], rel=REL)
    assert zero["breakdown_s"]["pp_bubble"] < classic["breakdown_s"]["pp_bubble"]
    assert zero["step_time_s"] < classic["step_time_s"]
    assert zero["memory_per_gpu_gb"] == pytest.approx(classic["memory_per_gpu_gb"], rel=REL)


@needs_pip
def test_installed_zeropp_options_change_the_step(venv):
    zero3 = _estimate(venv, EXAMPLE, 'parallelism.sharding="zero3"')
    zpp = 'parallelism.sharding="zeropp"'
    off = _estimate(
        venv,
        EXAMPLE,
        zpp,
        "parallelism.zeropp_weight_bits=16",
        "parallelism.zeropp_gradient_bits=16",
        "parallelism.zeropp_hpz=false",
    )
    assert off["step_time_s"] == pytest.approx(zero3["step_time_s"], rel=REL)
    default = _estimate(venv, EXAMPLE, zpp)
    w4 = _estimate(venv, EXAMPLE, zpp, "parallelism.zeropp_weight_bits=4")
    no_hpz = _estimate(venv, EXAMPLE, zpp, "parallelism.zeropp_hpz=false")
    assert w4["step_time_s"] < default["step_time_s"] < zero3["step_time_s"]
    assert default["breakdown_s"]["dp_comm"] < no_hpz["breakdown_s"]["dp_comm"]
    assert default["memory_per_gpu_gb"] > no_hpz["memory_per_gpu_gb"]
