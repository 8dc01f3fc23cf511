"""Invariants of the model over randomly generated *valid* scenarios (hypothesis).

Scenarios are built as plain dicts (the raw tables of a scenario file) from
the parts a fresh registry holds, loaded with :func:`shardmeter.load_scenario`
and evaluated in batches: every hypothesis example draws a list of scenarios,
their input columns are stacked and :func:`shardmeter.model.evaluate.evaluate` runs
once per batch (and once per perturbed copy of it), so a few thousand
scenarios run in seconds.

Properties:

* every report number is finite and non-negative, or explicitly null (and
  null only where SCENARIO.md allows it);
* the breakdown adds up to the step time (relative 1e-9);
* more bandwidth or less latency at any level (scale-up, scale-out, WAN), more
  FLOP/s, more HBM bandwidth never slow a step; more memory never turns a
  feasible plan infeasible;
* a bigger island doing the same per-GPU work never lowers total throughput
  unless the breakdown shows the communication that grew;
* results are deterministic, and the batch path agrees with the one-scenario
  path (``Estimator.estimate``) to 1e-9 relative;
* every ``[training]`` / ``[parallelism]`` key written resolves as written (a profile
  fills only what is unset);
* a sweep's row is the estimate of its grid point, and a plan's best the estimate of
  that plan's scenario;
* heterogeneous pipelines (``[[stage_group]]``, estimated one at a time): finite
  reports whose breakdown adds up, deterministic, never slower with better GPUs or
  links, never infeasible with more memory.

The generator draws the knobs added since it was written too: profiles and their
versions, optimizers, activation offload, recompute granularity (``recompute_layers``,
``recompute_modules``), fp8 recipes and backends, ``tiers``, per-island layouts and MoE
(``ep``, ``expert_tp``). Scenarios whose islands have different tier counts are batched
apart (the tier arrays' last axis).

``SHARDMETER_PROPERTY_SCALE=10`` multiplies the number of examples for a deeper
local run; ``SHARDMETER_PROPERTY_RANDOM=1`` draws new examples instead of the
derandomised CI set.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import shardmeter
from shardmeter.estimator import Estimator
from shardmeter.inputs.bundles import COLUMNS, PartTable
from shardmeter.load.scenario import load_scenario, model_presets
from shardmeter.model.evaluate import BREAKDOWN_TERMS, evaluate_columns
from shardmeter.model.feasibility import Reason
from shardmeter.model.outputs import Outputs
from shardmeter.records import PRECISIONS
from shardmeter.report.build import build_report

_SCALE = max(1, int(os.environ.get("SHARDMETER_PROPERTY_SCALE", "1") or 1))
_RANDOM = os.environ.get("SHARDMETER_PROPERTY_RANDOM", "") not in ("", "0")


def _settings(n: int):
    return settings(
        max_examples=n * _SCALE,
        deadline=None,
        derandomize=not _RANDOM,
        database=None,
        print_blob=True,
        # Shrinking a list of 50 scenarios takes minutes; every assertion message names the one
        # failing scenario instead.
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


# A fresh registry of the installed plugins (not the process-wide cached one).
REG = shardmeter.Registry.from_plugin_manager(shardmeter.make_plugin_manager())
EST = Estimator(REG)
GPUS = REG.names("hardware")
LINKS = {
    kind: [n for n in REG.names("interconnect") if REG.get("interconnect", n).kind == kind]
    for kind in ("scale-up", "network", "wan")
}
SHARDINGS = REG.names("sharding")
SCHEDULES = REG.names("schedule")
PRICES = [n for n in REG.names("cost") if n != "egress"]
PRESET_TABLES = model_presets()
PRESETS = sorted(PRESET_TABLES)

REL = 1e-9
# Report fields that are numbers; the ones that may be null and when.
TIME_FIELDS = (
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "model_tflops_per_gpu",
    "hardware_tflops_per_gpu",
    "mfu",
    "hfu",
    "compute_utilization",
)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# ---------------------------------------------------------------------------------------------
# generators


@st.composite
def model_tables(draw) -> dict:
    if draw(st.integers(0, 11)) == 0:
        m = {"preset": draw(st.sampled_from(PRESETS))}
        if draw(st.booleans()):
            m["layers"] = draw(st.integers(1, 8))  # a preset's shapes, shallow enough to fit somewhere
            dense = PRESET_TABLES[m["preset"]].get("dense_layers", 0)
            if dense:  # leading dense layers (DeepSeek-V3's 3) must stay fewer than the layers
                m["dense_layers"] = min(dense, m["layers"] - 1)
        return m
    heads = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 32, 64]))
    head_dim = draw(st.sampled_from([16, 32, 64, 128]))
    m = {
        "layers": draw(st.integers(1, 48)),
        "hidden": heads * head_dim,
        "heads": heads,
        "vocab": draw(st.integers(256, 131072)),
        "seq_len": draw(st.sampled_from([64, 128, 256, 512, 1024, 2048, 4096, 8192])),
        "ffn": draw(st.sampled_from(["gelu", "swiglu"])),
    }
    if draw(st.booleans()):
        m["kv_heads"] = draw(st.sampled_from(_divisors(heads)))
    if draw(st.booleans()):
        m["ffn_hidden"] = draw(st.integers(1, 16)) * m["hidden"] // 4 or 1
    if draw(st.integers(0, 4)) == 0:
        m["head_dim"] = draw(st.sampled_from([32, 64, 128]))
    if draw(st.booleans()):
        m["tied_embeddings"] = draw(st.booleans())
    if draw(st.integers(0, 4)) == 0:
        experts = draw(st.sampled_from([2, 4, 8, 16]))
        m["experts"] = experts
        m["experts_per_token"] = draw(st.integers(1, min(4, experts)))
    return m


@st.composite
def scenario_dicts(draw) -> dict:
    """A well-formed scenario (often feasible, sometimes not: infeasible is a valid outcome)."""
    model = draw(model_tables())
    full = {**model_presets()[model["preset"]], **model} if "preset" in model else model
    heads, layers = full["heads"], full["layers"]
    experts = full.get("experts", 1)
    mbs = draw(st.sampled_from([1, 1, 2, 4]))
    training = {"micro_batch": mbs}
    if draw(st.booleans()):
        training["precision"] = draw(st.sampled_from(PRECISIONS))
    if draw(st.booleans()):
        training["recompute"] = draw(st.sampled_from(["none", "selective", "op", "full"]))
    if draw(st.integers(0, 3)) == 0:
        training["attention"] = draw(st.sampled_from(["flash", "flash2", "materialized"]))
    if draw(st.booleans()):
        training["tokens"] = draw(st.floats(1e6, 1e13))
    training.update(draw(training_knobs(training.get("precision"), layers)))
    training.update(draw(recompute_knobs(training.get("recompute"), layers, experts)))

    par: dict = {}
    tp = draw(
        st.sampled_from([d for d in _divisors(heads) if d <= 8] if draw(st.integers(0, 9)) else [1, 2, 4, 8])
    )
    pp = draw(st.sampled_from([p for p in (1, 2, 4, 8) if p <= layers] or [1]))
    cp = draw(st.sampled_from([1, 1, 1, 2, 4]))
    ep = draw(st.sampled_from(_divisors(experts))) if experts > 1 else 1
    for k, v, default in (("tp", tp, 1), ("pp", pp, 1), ("cp", cp, 1), ("ep", ep, 1)):
        if v != default or draw(st.booleans()):
            par[k] = v
    if (
        experts > 1 and draw(st.integers(0, 2)) == 0
    ):  # MoE parallel folding (expert_tp x ep over tp x cp x dp)
        par["expert_tp"] = draw(st.sampled_from(sorted({1, 2, tp})))
    if draw(st.booleans()):
        par["sequence_parallel"] = draw(st.booleans())
    if draw(st.booleans()):
        par["sharding"] = draw(st.sampled_from(SHARDINGS))
    if draw(st.booleans()):
        par["schedule"] = draw(st.sampled_from(SCHEDULES))
        if par["schedule"] == "interleaved":
            par["virtual_stages"] = draw(st.integers(1, 4))
    if draw(st.integers(0, 3)) == 0:
        par["tp_comm_overlap"] = draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:
        par["dp_comm_overlap"] = draw(st.booleans())

    n_isl = draw(st.sampled_from([1, 1, 1, 2, 2, 3]))
    # heterogeneous islands: each a different GPU with its own [island.parallelism] layout
    hetero = n_isl > 1 and draw(st.booleans())
    islands, dps, used = [], [], []
    for i in range(n_isl):
        gpu_name = draw(st.sampled_from([g for g in GPUS if g not in used]))
        if hetero:
            used.append(gpu_name)
        prof = REG.get("hardware", gpu_name)
        isl: dict = {"gpu": gpu_name, "nodes": draw(st.sampled_from([1, 1, 2, 3, 4, 8, 16, 32, 64]))}
        if draw(st.integers(0, 5)) == 0:
            isl["gpu"] = {"name": gpu_name, "memory_gb": draw(st.floats(8.0, 512.0))}
        if n_isl > 1 or draw(st.booleans()):
            isl["name"] = f"dc-{i}"
        if draw(st.integers(0, 3)) == 0:
            isl["gpus_per_node"] = draw(st.sampled_from([1, 2, 4, 8, 16]))
        if draw(st.integers(0, 3)) == 0:
            isl["intra_node"] = draw(st.sampled_from(LINKS["scale-up"]))
        if draw(st.integers(0, 3)) == 0:
            isl["inter_node"] = draw(st.sampled_from(LINKS["network"]))
        if draw(st.integers(0, 4)) == 0:
            isl["nics_per_node"] = draw(st.integers(1, 8))
        if draw(st.integers(0, 3)) == 0:
            isl["price"] = draw(st.sampled_from(PRICES))
        gpn = isl.get("gpus_per_node", prof.gpus_per_node)
        if draw(st.integers(0, 5)) == 0:  # [[island]] tiers in place of intra_node / inter_node
            isl.pop("intra_node", None)
            isl.pop("inter_node", None)
            isl["tiers"] = draw(tier_lists(gpn))
        ipar, (tp_i, pp_i, cp_i) = draw(island_layouts(heads, layers, cp)) if hetero else ({}, (tp, pp, cp))
        dp = max(1, isl["nodes"] * gpn // (tp_i * pp_i * cp_i))
        if draw(st.integers(0, 5)) == 0:  # an explicit dp smaller than what fills the island
            dp = draw(st.integers(1, dp))
            ipar["dp"] = dp
        if ipar:
            isl["parallelism"] = ipar
        dps.append(dp)
        islands.append(isl)
    if draw(st.integers(0, 9)) == 0:
        gbs = draw(st.integers(1, 4096))  # arbitrary: often not a multiple of micro_batch x dp
    else:
        gbs = draw(st.integers(1, 16)) * mbs * sum(dps)
    training["global_batch"] = gbs

    d = {"model": model, "training": training, "island": islands}
    if par:
        d["parallelism"] = par
    if n_isl > 1:
        strategy = draw(st.sampled_from(["allreduce", "diloco"]))
        sync: dict = {"strategy": strategy}
        if strategy == "diloco":
            if draw(st.booleans()):
                sync["inner_steps"] = draw(st.integers(1, 1000))
            if draw(st.booleans()):
                sync["compression_bits"] = draw(st.sampled_from([1, 4, 8, 16, 32]))
            if draw(st.booleans()):
                sync["fragments"] = draw(st.integers(1, 16))
            if draw(st.booleans()):
                sync["overlap_steps"] = draw(st.integers(0, 8))
        if draw(st.integers(0, 5)) == 0:
            sync["convergence"] = "diloco-fits"
        d["sync"] = sync
        if draw(st.booleans()):
            d["network"] = {
                "link": {
                    "name": "internet",
                    "bandwidth_gb_s": draw(st.floats(0.01, 100.0)),
                    "latency_us": draw(st.just(0.0) | st.floats(1.0, 2e5)),
                }
            }
    d.update(draw(reliability_tables()))
    if draw(st.integers(0, 7)) == 0:
        d = _with_framework(d, draw(st.sampled_from(FRAMEWORKS)), draw(st.sampled_from(FRAMEWORK_VERSIONS)))
    return d


FRAMEWORKS = REG.names("framework")
#: ``training.framework_version`` values drawn (None: the newest state the profile knows).
FRAMEWORK_VERSIONS = (None, None, "2024-06", "2024-12", "2025-06", "2025-12")
OPTIMIZERS = ("adam", "adamw", "sgd", "sgd-momentum", "adafactor", "adam8bit", "muon")
FP8_RECIPES = ("tensorwise", "rowwise", "delayed", "blockwise", "mxfp8")


@st.composite
def training_knobs(draw, precision: str | None, layers: int) -> dict:
    """The ``[training]`` keys added since the generator was written, each drawn rarely (one
    draw decides which): optimizer, fused loss, compile, activation offload, fp8 recipe,
    backend and fp8 parameters (with ``precision = "fp8"``)."""
    out: dict = {}
    which = draw(st.integers(0, 63))
    if which & 1:
        out["optimizer"] = draw(st.sampled_from(OPTIMIZERS))
    if which & 2:
        out["fused_loss"] = bool(which & 32)
    if which & 4 and which & 8:
        out["compile"] = bool(which & 16)
    if which & 8 and not which & 4:
        out["offload_layers"] = draw(st.integers(0, max(0, min(layers, 8) - 1)))
    if precision == "fp8":
        if which & 16:
            out["fp8_recipe"] = draw(st.sampled_from(FP8_RECIPES))
        if which & 32:
            out["fp8_backend"] = draw(st.sampled_from(["transformer-engine", "torchao"]))
        if which & 4 and not which & 1:
            out["fp8_params"] = bool(which & 2)
    return out


RECOMPUTE_MODULES = ("core_attn", "mlp", "moe", "shared_experts", "moe_act", "layernorm", "mla_up_proj")


@st.composite
def recompute_knobs(draw, recompute: str | None, layers: int, experts: int) -> dict:
    """The keys that qualify ``recompute``, each in about half or a third of the scenarios with its
    mode: ``recompute_layers`` (0 .. layers, with ``"full"``) and ``recompute_modules`` (a
    non-empty subset of Megatron-Core's, with ``"selective"``; the MoE ones only on an MoE
    model)."""
    if recompute == "full" and draw(st.booleans()):
        return {"recompute_layers": draw(st.integers(0, layers))}
    if recompute == "selective" and draw(st.integers(0, 2)) == 0:
        pool = [
            m
            for m in RECOMPUTE_MODULES
            if experts > 1 or m not in ("moe", "shared_experts", "moe_act", "layernorm")
        ]
        mask = draw(st.integers(1, 2 ** len(pool) - 1))
        return {"recompute_modules": [m for i, m in enumerate(pool) if mask >> i & 1]}
    return {}


@st.composite
def tier_lists(draw, gpn: int) -> list:
    """``tiers`` of two or three levels, innermost first: a scale-up domain of half a node to
    four nodes, sometimes a network leaf of 2-8 of those, and the last tier over the whole
    island, sometimes oversubscribed."""
    inner = draw(st.sampled_from(sorted({max(1, gpn // 2), gpn, 2 * gpn, 4 * gpn})))
    tiers: list = [{"link": draw(st.sampled_from(LINKS["scale-up"])), "gpus": inner}]
    if draw(st.booleans()):
        tiers.append(
            {
                "link": draw(st.sampled_from(LINKS["network"])),
                "gpus": inner * draw(st.sampled_from([2, 4, 8])),
            }
        )
    last: dict = {"link": draw(st.sampled_from(LINKS["network"]))}
    if draw(st.booleans()):
        last["oversubscription"] = draw(st.sampled_from([1.0, 1.5, 2.0, 4.0]))
    return [*tiers, last]


@st.composite
def reliability_tables(draw) -> dict:
    """``[reliability]`` and ``[variability]``, each in about one scenario of six."""
    out: dict = {}
    which = draw(st.integers(0, 35))
    if which % 6 == 0:
        rel: dict = {"model": draw(st.sampled_from(REG.names("failures")))}
        if which % 12 == 0:
            rel["checkpoint_interval_s"] = draw(st.sampled_from([0.0, 60.0, 3600.0]))
            rel["async_checkpoint"] = which % 24 == 0
        out["reliability"] = rel
    if which // 6 == 0:
        var: dict = {"gpu_step_cv": draw(st.sampled_from([0.0, 0.02, 0.2]))}
        if which % 2:
            var["link_cv"] = draw(st.sampled_from([0.0, 0.1, 0.5]))
            var["quantile"] = draw(st.sampled_from([0.5, 0.9, 0.99]))
        out["variability"] = var
    return out


def _with_framework(d: dict, name: str, version: str | None) -> dict:
    """``d`` with ``training.framework`` (and a version) where the profile's defaults load over
    its keys, else ``d`` as it was (a profile default that conflicts with a drawn key is a
    one-line error, tested elsewhere: not a scenario for these properties)."""
    import copy

    out = copy.deepcopy(d)
    out["training"]["framework"] = name
    if version is not None:
        out["training"]["framework_version"] = version
    try:
        load_scenario(copy.deepcopy(out), registry=REG)
    except shardmeter.ShardMeterError:
        return d
    return out


@st.composite
def island_layouts(draw, heads: int, layers: int, cp: int):
    """One island's own ``[island.parallelism]`` (merged over the top-level one, whose ``cp`` is
    ``cp``): its ``tp``, ``pp`` and sometimes ``cp``, sequence parallelism and sharding; with
    the island's ``(tp, pp, cp)``. (Few draws: generating examples is most of this module's time.)"""
    tp = draw(st.sampled_from([d for d in _divisors(heads) if d <= 8]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4, 8) if p <= layers] or [1]))
    ipar: dict = {"tp": tp, "pp": pp}
    extra = draw(st.integers(0, 11))  # one draw decides which of cp, sp and sharding the island sets
    if extra % 4 == 0:
        cp = ipar["cp"] = draw(st.sampled_from([1, 2, 4]))
    if extra % 3 == 0:
        ipar["sequence_parallel"] = extra % 2 == 0
    if extra % 3 == 1:
        ipar["sharding"] = draw(st.sampled_from(SHARDINGS))
    return ipar, (tp, pp, cp)


def batches(lo: int, hi: int):
    return st.lists(scenario_dicts(), min_size=lo, max_size=hi)


# ---------------------------------------------------------------------------------------------
# helpers


class Batch:
    """Scenarios loaded and stacked into one input batch per island count."""

    def __init__(self, dicts: list[dict]):
        self.dicts = dicts
        self.scenarios = [load_scenario(d, registry=REG) for d in dicts]
        self.table = PartTable()  # one table: a strategy has one code in every row
        self.resolved = [EST.resolve(sc) for sc in self.scenarios]
        cols = [EST.inputs(r, self.table)[0].columns() for r in self.resolved]
        # one batch per (islands, network tiers): the tier arrays' last axis is the most tiers
        # of the scenario's islands, and rows stack only where it is the same
        self.groups: dict[tuple[int, int], list[int]] = {}
        for i, sc in enumerate(self.scenarios):
            tiers = np.shape(cols[i]["topology.tier_bytes_s"])[-1]
            self.groups.setdefault((len(sc.islands), tiers), []).append(i)
        self.inputs: dict[tuple[int, int], dict[str, np.ndarray]] = {}
        for n, idx in self.groups.items():
            self.inputs[n] = {
                k: np.concatenate([np.asarray(cols[i][k], dtype=float) for i in idx], axis=0) for k in COLUMNS
            }

    def evaluate(self, change=None) -> dict[tuple[int, int], Outputs]:
        out = {}
        for n, inp in self.inputs.items():
            inp = {k: v.copy() for k, v in inp.items()}
            if change is not None:
                change(inp)
            out[n] = evaluate_columns(inp, self.table)
        return out

    def where(self, n: tuple[int, int], row: int) -> dict:
        return self.dicts[self.groups[n][row]]


def _walk_numbers(obj, path="$"):
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return
    if isinstance(obj, (int, float)):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk_numbers(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _walk_numbers(v, f"{path}[{i}]")


#: Report numbers that carry a sign by definition (every other one is >= 0).
SIGNED = {"$.confidence.bias_pct"}


def check_report(rep, sc_dict) -> None:
    d = rep.to_dict()
    for path, x in _walk_numbers(d):
        assert math.isfinite(x) and (x >= 0 or path in SIGNED), f"{path} = {x!r} in {sc_dict}"
    if rep.feasible:
        for f in (*TIME_FIELDS, "memory_per_gpu_gb", "bottleneck", "regime"):
            assert d[f] is not None, f"feasible report has null {f}: {sc_dict}"
        if sc_dict["training"].get("tokens"):
            assert d["wall_clock_s"] is not None, sc_dict
        else:
            assert d["wall_clock_s"] is None and d["cost_usd"] is None
        total = sum(d["breakdown_s"].values())
        assert total == pytest.approx(d["step_time_s"], rel=REL), (
            d["breakdown_s"],
            d["step_time_s"],
            sc_dict,
        )
        assert set(d["breakdown_s"]) <= set(BREAKDOWN_TERMS)
        assert d["bottleneck"] in d["breakdown_s"]
        assert 0.0 <= d["compute_utilization"] <= 1.0 + REL
        for isl in d["islands"]:
            assert isl["tokens_per_s"] is not None and isl["step_time_s"] is not None
            assert isl["step_time_s"] <= d["step_time_s"] * (1 + REL)
            if isl["cost_usd"] is None:
                assert d["cost_usd"] is None
            if "breakdown_s" in isl:  # each island's view of the global step adds up to it too
                assert sum(isl["breakdown_s"].values()) == pytest.approx(d["step_time_s"], rel=REL), (
                    isl,
                    sc_dict,
                )
            for f in ("idle_fraction", "compute_utilization"):
                if f in isl:
                    assert 0.0 <= isl[f] <= 1.0 + REL, (f, isl, sc_dict)
    else:
        assert rep.reasons, f"infeasible without a reason: {sc_dict}"
        for f in (*TIME_FIELDS, "wall_clock_s", "cost_usd"):
            assert d[f] is None, f"infeasible report invents {f}: {sc_dict}"
        for r in rep.reasons:  # each reason names a key
            key = re.sub(r"^island\[\d+\]\.", "", r.split(":")[0])
            assert key.split(".")[0] in ("parallelism", "training", "model", "gpu"), r


def _close(a, b, rel=REL) -> bool:
    if a is None or b is None or isinstance(a, (bool, str)):
        return a == b
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rel) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b, strict=True))
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


# ---------------------------------------------------------------------------------------------
# properties


@_settings(36)
@given(batches(40, 60))
def test_reports_are_finite_and_breakdowns_add_up(dicts):
    """Every number of every report (batch path) is finite and >= 0 or null, and the
    breakdown adds up to the step time; the raw model arrays agree."""
    b = Batch(dicts)
    out = b.evaluate()
    for n, o in out.items():
        feas = o.feasible
        step = o.step_time_s
        terms = o.breakdown.terms()
        parts = sum(terms[k] for k in BREAKDOWN_TERMS)
        assert np.all(np.isfinite(step[feas])) and np.all(step[feas] > 0)
        for k in BREAKDOWN_TERMS:
            assert np.all(terms[k][feas] >= 0), k
        np.testing.assert_allclose(parts[feas], step[feas], rtol=REL)
        for row, i in enumerate(b.groups[n]):
            rep = build_report(b.resolved[i], o, row=row)
            check_report(rep, dicts[i])


@_settings(21)
@given(batches(8, 12))
def test_batch_path_agrees_with_single_scenario_path_and_is_deterministic(dicts):
    b = Batch(dicts)
    out = b.evaluate()
    again = b.evaluate()
    for n in out:
        cols, cols_again = out[n].columns(), again[n].columns()
        assert cols.keys() == cols_again.keys()
        for k, v in cols.items():
            np.testing.assert_array_equal(v, cols_again[k])
        for row, i in enumerate(b.groups[n]):
            batched = build_report(b.resolved[i], out[n], row=row).to_dict()
            single = EST.estimate(dicts[i]).to_dict()
            assert _close(batched, single), (dicts[i], batched, single)
            assert EST.estimate(dicts[i]).to_dict() == single  # deterministic


# (input key, factor): each makes the hardware strictly better.
IMPROVEMENTS = [
    ("bw0", 2.0),
    ("bw0", 1.01),
    ("bw1", 2.0),
    ("bw1", 1.01),
    ("wan_bw", 4.0),
    ("wan_bw", 1.01),
    ("lat0", 0.5),
    ("lat1", 0.5),
    ("bw2", 2.0),
    ("lat2", 0.5),
    ("wan_lat", 0.25),
    ("lat0", 0.0),
    ("lat1", 0.0),
    ("wan_lat", 0.0),
    ("peak", 2.0),
    ("peak", 1.01),
    ("peak16", 2.0),
    (("peak", "peak16"), 1.5),
    (("peak", "peak16"), 100.0),
    ("hbm", 2.0),
    ("hbm", 1.01),
    ("hbm", 100.0),
    ("gemm_eff", 1.05),
    ("hbm_eff", 1.05),
    (("bw0", "bw1", "bw2", "wan_bw", "peak", "peak16", "hbm"), 3.0),
]


#: The short names above -> (input column, tier index or None).
NAMES = {
    "bw0": ("topology.tier_bytes_s", 0),
    "bw1": ("topology.tier_bytes_s", 1),
    "bw2": ("topology.tier_bytes_s", 2),
    "lat0": ("topology.tier_latency_s", 0),
    "lat1": ("topology.tier_latency_s", 1),
    "lat2": ("topology.tier_latency_s", 2),
    "wan_bw": ("network.wan_bytes_s", None),
    "wan_lat": ("network.wan_latency_s", None),
    "peak": ("hardware.peak_flops", None),
    "peak16": ("hardware.peak16_flops", None),
    "hbm": ("hardware.hbm_bytes_s", None),
    "gemm_eff": ("hardware.gemm_efficiency", None),
    "hbm_eff": ("hardware.hbm_efficiency", None),
    "mem": ("hardware.memory_bytes", None),
}


def _improve(keys, factor, island=None):
    keys = (keys,) if isinstance(keys, str) else keys

    def change(inp):
        for k in keys:
            col, tier = NAMES[k]
            arr = np.array(inp[col], dtype=float)
            where = (slice(None),) if island is None else (slice(None), island)
            if island is not None and island >= arr.shape[1]:
                continue
            if tier is not None and tier >= arr.shape[-1]:  # a third tier only where an island has one
                continue
            if tier is not None:
                where = (*where, *([slice(None)] * (2 - len(where))), tier)
            arr[where] = arr[where] * factor
            if k.endswith("_eff"):
                arr = np.minimum(arr, 1.0)
            inp[col] = arr

    return change


@_settings(30)
@given(batches(50, 70), st.sampled_from([None, None, 0, 1, 2]))
def test_better_hardware_never_slows_a_step(dicts, island):
    """More bandwidth / less latency at any level, more FLOP/s or HBM bandwidth: never slower.

    ``island`` improves one island only (None: all of them)."""
    b = Batch(dicts)
    base = b.evaluate()
    for keys, factor in IMPROVEMENTS:
        new = b.evaluate(_improve(keys, factor, island))
        for n in base:
            f0, f1 = base[n].feasible, new[n].feasible
            assert np.all(f1[f0]), (
                f"{keys} x{factor} made a plan infeasible: {b.where(n, int(np.argmin(f1 | ~f0)))}"
            )
            s0, s1 = base[n].step_time_s, new[n].step_time_s
            worse = f0 & (s1 > s0 * (1 + REL))
            if np.any(worse):
                r = int(np.argmax(worse))
                bd0 = {k: float(v[r]) for k, v in base[n].breakdown.terms().items()}
                bd1 = {k: float(v[r]) for k, v in new[n].breakdown.terms().items()}
                pytest.fail(
                    f"{keys} x{factor} on island {island} slowed the step {s0[r]!r} -> {s1[r]!r}\n"
                    f"before {bd0}\nafter  {bd1}\nscenario {b.where(n, r)}"
                )


#: The scenario the generator found (issue 25 round 3): with 6 layers a stage offloaded, 100x the
#: GPU's FLOP/s made the step slower (22.962977 -> 22.963004 s): the data-parallel traffic hid
#: under the compute only, not under the offload stalls beside it, so what compute no longer hid
#: was charged twice, once as dp_comm and once as offload.
OFFLOAD_SLOWER = {
    "model": {
        "layers": 11,
        "hidden": 768,
        "heads": 12,
        "vocab": 324,
        "seq_len": 256,
        "ffn": "gelu",
        "ffn_hidden": 1728,
        "head_dim": 128,
    },
    "training": {
        "micro_batch": 1,
        "optimizer": "adam",
        "fused_loss": True,
        "offload_layers": 6,
        "global_batch": 120,
    },
    "island": [
        {"gpu": "rtx-3090", "nodes": 16, "name": "dc-0", "inter_node": "ethernet-10g", "price": "owned"}
    ],
    "parallelism": {"tp": 1, "pp": 4, "cp": 4, "ep": 1, "sequence_parallel": False, "sharding": "zero3"},
}


#: The second the generator found: 2x the 16-bit FLOP/s shortens attention, so the ring of context
#: parallelism no longer hides under it (cp_comm 0.031 -> 0.043 s) and the offload stall, timed
#: against the GEMMs and attention alone, grew beside it (0.0136 -> 0.0186 s): the copies, on their
#: own stream, run on while the compute stream waits on the ring, so the wait hides them too.
OFFLOAD_CP_SLOWER = {
    "model": {"layers": 48, "hidden": 768, "heads": 6, "vocab": 256, "seq_len": 512, "ffn": "swiglu"},
    "training": {
        "micro_batch": 4,
        "precision": "fp8",
        "recompute": "none",
        "attention": "flash2",
        "optimizer": "adam8bit",
        "offload_layers": 6,
        "fp8_recipe": "rowwise",
        "fp8_backend": "torchao",
        "global_batch": 1280,
    },
    "island": [
        {"gpu": "h100-nvl", "nodes": 32, "name": "dc-0"},
        {"gpu": {"name": "l40s", "memory_gb": 8.0}, "nodes": 4, "name": "dc-1"},
        {"gpu": "h200-sxm", "nodes": 32, "name": "dc-2", "gpus_per_node": 1, "inter_node": "ib-edr"},
    ],
    "parallelism": {"pp": 4, "cp": 4, "ep": 1, "sharding": "zero1"},
    "sync": {"strategy": "allreduce"},
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 68.45, "latency_us": 83191.4}},
}


@pytest.mark.parametrize(
    ("scenario", "keys", "factor"),
    [(OFFLOAD_SLOWER, ("peak", "peak16"), 100.0), (OFFLOAD_CP_SLOWER, "peak16", 2.0)],
    ids=["dp-traffic", "cp-ring"],
)
def test_offload_keeps_faster_compute_from_slowing_a_step(scenario, keys, factor):
    b = Batch([copy.deepcopy(scenario)])
    (key,) = b.groups
    s0 = b.evaluate()[key].step_time_s
    s1 = b.evaluate(_improve(keys, factor))[key].step_time_s
    assert float(s1[0]) <= float(s0[0]) * (1 + REL), (float(s0[0]), float(s1[0]))


@_settings(25)
@given(batches(40, 60), st.sampled_from([1.5, 2.0, 100.0]))
def test_more_memory_never_makes_a_feasible_plan_infeasible(dicts, factor):
    b = Batch(dicts)
    base = b.evaluate()
    new = b.evaluate(_improve("mem", factor))
    for n in base:
        f0, f1 = base[n].feasible, new[n].feasible
        assert np.all(f1[f0])
        np.testing.assert_allclose(new[n].step_time_s[f0], base[n].step_time_s[f0], rtol=REL)
        assert np.all(new[n].reasons & ~np.int64(32) == base[n].reasons & ~np.int64(32))


COMM_TERMS = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "pp_bubble", "dp_comm", "island_sync", "idle")
WORK_TERMS = ("compute", "memory_ops", "optimizer")


@_settings(25)
@given(batches(30, 50), st.sampled_from([2, 3, 4]), st.integers(0, 2))
def test_bigger_island_with_same_per_gpu_work_never_lowers_throughput_unexplained(dicts, grow, which):
    """Island ``which`` gets ``grow`` x the nodes and data-parallel replicas; the global
    batch grows so every GPU runs the same micro-batches. The other islands' steps do
    not change; total throughput may only drop when the breakdown shows the
    communication (or bubble, idle, sync) that grew; the per-GPU work terms never grow."""
    b = Batch(dicts)
    base = b.evaluate()

    def change(inp):
        j = min(which, inp["layout.dp"].shape[1] - 1)
        dp_total = inp["layout.dp"].sum(axis=1, keepdims=True)
        inp["topology.nodes"] = inp["topology.nodes"].copy()
        inp["topology.nodes"][:, j] *= grow
        inp["layout.dp"] = inp["layout.dp"].copy()
        inp["layout.dp"][:, j] *= grow
        gbs = inp["training.global_batch"]  # exact: gbs = m x mbs x dp_total
        inp["training.global_batch"] = gbs * inp["layout.dp"].sum(axis=1, keepdims=True) // dp_total

    new = b.evaluate(change)
    for n in base:
        f0, f1 = base[n].feasible, new[n].feasible
        # the one reason growing may add: HSDP's shard groups (a node's data-parallel ranks)
        # no longer dividing the grown data-parallel group (Reason.SHARDING)
        why = np.bitwise_or.reduce(new[n].reasons, axis=-1)
        shard = why == int(Reason.SHARDING)
        ok = f1 | ~f0 | shard
        assert np.all(ok), f"growing an island made a plan infeasible: {b.where(n, int(np.argmin(ok)))}"
        j = min(which, n[0] - 1)
        others = [i for i in range(n[0]) if i != j]
        np.testing.assert_allclose(
            new[n].island.step_s[:, others][f0],
            base[n].island.step_s[:, others][f0],
            rtol=REL,
            err_msg="growing one island changed another island's step",
        )
        for r in np.nonzero(f0 & f1)[0]:
            bd0 = {k: float(v[r]) for k, v in base[n].breakdown.terms().items()}
            bd1 = {k: float(v[r]) for k, v in new[n].breakdown.terms().items()}
            s0, s1 = base[n].step_time_s[r], new[n].step_time_s[r]
            t0, t1 = base[n].tokens_per_s[r], new[n].tokens_per_s[r]
            why = f"{bd0} -> {bd1}; {json.dumps(b.where(n, r))}"
            if n[0] == 1:  # the breakdown is the island's own: compare its terms one by one
                # One pipeline stage: the per-GPU work terms are the same. With several, the
                # breakdown is the pacing stage's, and more communication on one stage can move
                # the pace to another (the one with the output layer, say) whose work is larger
                # and whose own communication may be smaller: the breakdowns of two different
                # stages, not comparable term by term (the step is still checked below).
                work_grew = sum(max(0.0, bd1[k] - bd0[k] * (1 + REL) - 1e-15) for k in WORK_TERMS)
                one_stage = float(np.asarray(b.inputs[n]["layout.pp"])[r, 0]) == 1
                assert not one_stage or work_grew == 0.0, f"work grew: {why}"
                if t1 < t0 * (1 - REL):
                    grew = sum(bd1[k] for k in COMM_TERMS) - sum(bd0[k] for k in COMM_TERMS)
                    assert grew >= (s1 - s0) * (1 - 1e-6) > 0, f"throughput {t0} -> {t1} unexplained: {why}"
            elif t1 < t0 * (1 - REL):  # several islands: the breakdown is GPU-weighted; comm must cover it
                assert s1 - s0 <= sum(bd1[k] for k in COMM_TERMS) * (1 + 1e-6), (
                    f"throughput {t0} -> {t1} unexplained: {why}"
                )


# ---------------------------------------------------------------------------------------------
# heterogeneous pipelines ([[stage_group]]): estimated by their own function, one at a time


@st.composite
def stage_group_dicts(draw) -> dict:
    """A ``[[stage_group]]`` scenario (docs/scenario.md, "Heterogeneous pipelines"): one to
    three islands of different GPUs, one to three groups in order, each on one of them with its
    own ``tp``, stages and uneven layers summing to the model's; ``dp`` replicas of the whole
    pipeline, a sharding, sometimes recompute or offload, and the link joining the islands."""
    heads = draw(st.sampled_from([4, 8, 16]))
    n_groups = draw(st.integers(1, 3))
    stages = [draw(st.integers(1, 3)) for _ in range(n_groups)]
    counts = [draw(st.integers(1, 6)) for _ in range(sum(stages))]
    model = {
        "layers": sum(counts),
        "hidden": heads * draw(st.sampled_from([64, 128])),
        "heads": heads,
        "vocab": draw(st.sampled_from([1024, 32000, 128256])),
        "seq_len": draw(st.sampled_from([512, 2048, 4096])),
        "ffn": draw(st.sampled_from(["gelu", "swiglu"])),
    }
    if draw(st.integers(0, 3)) == 0:
        model["experts"], model["experts_per_token"] = 8, 2
    n_isl = draw(st.integers(1, 3))
    gpus = draw(st.lists(st.sampled_from(GPUS), min_size=n_isl, max_size=n_isl, unique=True))
    dp = draw(st.sampled_from([1, 1, 2]))
    mbs = draw(st.sampled_from([1, 2]))
    groups, at, need = [], 0, [0] * n_isl
    for k, s in enumerate(stages):
        gpn = REG.get("hardware", gpus[k % n_isl]).gpus_per_node
        tp = draw(st.sampled_from([d for d in _divisors(heads) if d <= gpn]))
        groups.append(
            {
                "name": f"g{k}",
                "island": f"site-{k % n_isl}",
                "stages": s,
                "tp": tp,
                "layers": counts[at : at + s],
            }
        )
        need[k % n_isl] += tp * s * dp
        at += s
    islands = [  # each island just holds its groups' GPUs (whole nodes)
        {"name": f"site-{i}", "gpu": g, "nodes": max(1, -(-need[i] // REG.get("hardware", g).gpus_per_node))}
        for i, g in enumerate(gpus)
    ]
    training: dict = {"global_batch": draw(st.integers(1, 8)) * mbs * dp, "micro_batch": mbs}
    which = draw(st.integers(0, 15))
    if which & 1:
        training["recompute"] = draw(st.sampled_from(["selective", "full"]))
    if which & 2:
        training["precision"] = draw(st.sampled_from(["bf16", "fp8"]))
    if which & 4 and max(counts) > 1:
        training["offload_layers"] = 1
    if which & 8:
        training["tokens"] = 1e10
    d = {
        "model": model,
        "training": training,
        "island": islands,
        "parallelism": {"dp": dp, "sharding": draw(st.sampled_from(["none", "zero1", "zero3"]))},
        "stage_group": groups,
    }
    if n_isl > 1:
        d["network"] = {
            "link": {"bandwidth_gb_s": draw(st.sampled_from([1.0, 12.5, 100.0])), "latency_us": 1000.0}
        }
    return d


def _pipeline(est: Estimator, d: dict):
    from shardmeter.hetero import estimate_pipeline

    return estimate_pipeline(est, copy.deepcopy(d))


def _better_estimator(what: str, factor: float) -> Estimator:
    """An estimator whose every GPU (``peak``: every precision's FLOP/s, ``hbm``, ``host``: the
    host link, ``mem``: memory) or every interconnect (``bw``, ``lat``) is ``factor`` x."""
    recs: list = []
    if what in ("peak", "hbm", "host", "mem"):
        for g in GPUS:
            r = REG.get("hardware", g)
            ch = {
                "peak": {"peak_tflops": {k: v * factor for k, v in r.peak_tflops.items()}},
                "hbm": {"memory_bandwidth_gb_s": r.memory_bandwidth_gb_s * factor},
                "host": {"host_link_gb_s": r.host_link_gb_s * factor},
                "mem": {"memory_gb": r.memory_gb * factor},
            }[what]
            recs.append(("hardware", attrs.evolve(r, **ch)))
    else:
        for n in REG.names("interconnect"):
            r = REG.get("interconnect", n)
            ch = (
                {"bandwidth_gb_s": r.bandwidth_gb_s * factor}
                if what == "bw"
                else {"latency_us": r.latency_us * factor}
            )
            recs.append(("interconnect", attrs.evolve(r, **ch)))
    return Estimator(REG.override_many(recs, plugin="better"))


#: (figure, factor): each makes the hardware strictly better; ``wan_*`` the scenario's own link.
PIPELINE_IMPROVEMENTS = [
    ("peak", 2.0),
    ("peak", 100.0),
    ("hbm", 2.0),
    ("host", 4.0),
    ("bw", 2.0),
    ("lat", 0.5),
    ("lat", 0.0),
    ("wan_bw", 4.0),
    ("wan_lat", 0.0),
]


def _better_dict(d: dict, what: str, factor: float) -> dict:
    out = copy.deepcopy(d)
    link = out.get("network", {}).get("link")
    if link is not None:
        key = "bandwidth_gb_s" if what == "wan_bw" else "latency_us"
        link[key] = link[key] * factor
    return out


def check_pipeline_report(rep, d) -> None:
    """The report's numbers finite and >= 0 (memory always), the breakdown adding up to the
    step, each stage's time at most the step, and none invented where infeasible."""
    doc = rep.to_dict()
    for path, x in _walk_numbers(doc):
        assert math.isfinite(x) and x >= 0, f"{path} = {x!r} in {d}"
    assert doc["memory_per_gpu_gb"] >= 0 and doc["memory_reserved_gb"] >= doc["memory_per_gpu_gb"] * (1 - REL)
    if rep.feasible:
        for f in (*TIME_FIELDS, "bottleneck", "regime"):
            assert doc[f] is not None, f"feasible pipeline has null {f}: {d}"
        assert sum(doc["breakdown_s"].values()) == pytest.approx(doc["step_time_s"], rel=REL), (doc, d)
        assert doc["bottleneck"] in doc["breakdown_s"]
        assert 0.0 <= doc["compute_utilization"] <= 1.0 + REL
        for g in doc["groups"]:
            assert len(g["stage_time_s"]) == g["stages"] == len(g["layers"])
            assert max(g["stage_time_s"]) <= doc["step_time_s"] * (1 + REL)
        assert (doc["wall_clock_s"] is not None) == bool(d["training"].get("tokens")), d
    else:
        assert rep.reasons, d
        for f in (*TIME_FIELDS, "wall_clock_s", "cost_usd"):
            assert doc[f] is None, f"infeasible pipeline invents {f}: {d}"


@_settings(4)
@given(st.lists(stage_group_dicts(), min_size=5, max_size=5))
def test_stage_group_reports_are_finite_add_up_and_repeat(dicts):
    for d in dicts:
        rep = _pipeline(EST, d)
        check_pipeline_report(rep, d)
        assert _pipeline(EST, d).to_dict() == rep.to_dict()  # deterministic


def _pipeline_monotone(dicts, improvements) -> None:
    base = [_pipeline(EST, d) for d in dicts]
    for what, factor in improvements:
        est = EST if what.startswith("wan") else _better_estimator(what, factor)
        for d, r0 in zip(dicts, base, strict=True):
            r1 = _pipeline(est, _better_dict(d, what, factor) if what.startswith("wan") else d)
            if not r0.feasible:
                continue
            assert r1.feasible, f"{what} x{factor} made a pipeline infeasible: {r1.reasons} {d}"
            assert r1.step_time_s <= r0.step_time_s * (1 + REL), (
                f"{what} x{factor} slowed the pipeline {r0.step_time_s!r} -> {r1.step_time_s!r}\n"
                f"before {r0.breakdown_s}\nafter  {r1.breakdown_s}\nscenario {d}"
            )


@_settings(2)
@given(st.lists(stage_group_dicts(), min_size=4, max_size=4))
def test_better_hardware_never_slows_a_stage_group_pipeline(dicts):
    """Every GPU figure (FLOP/s, HBM and host-link bandwidth) and every link figure (the
    catalog's and the scenario's own link between the islands): never slower, never infeasible."""
    _pipeline_monotone(dicts, PIPELINE_IMPROVEMENTS)


@_settings(20)
@given(st.lists(stage_group_dicts(), min_size=8, max_size=8))
def test_better_hardware_never_slows_a_stage_group_pipeline_deep(dicts):
    _pipeline_monotone(dicts, PIPELINE_IMPROVEMENTS)


@_settings(4)
@given(st.lists(stage_group_dicts(), min_size=5, max_size=5), st.sampled_from([1.5, 4.0]))
def test_more_memory_never_makes_a_stage_group_pipeline_infeasible(dicts, factor):
    est = _better_estimator("mem", factor)
    for d in dicts:
        r0, r1 = _pipeline(EST, d), _pipeline(est, d)
        assert r1.feasible or not r0.feasible, (r1.reasons, d)
        if r0.feasible:
            assert r1.step_time_s == pytest.approx(r0.step_time_s, rel=REL), d


# ---------------------------------------------------------------------------------------------
# sweep and plan against estimate

#: (key, values) a sweep varies: each grid point is an ordinary scenario of the same keys.
SWEEP_AXES = (
    ("training.micro_batch", (1, 2)),
    ("parallelism.tp", (1, 2)),
    ("island[0].nodes", (1, 2)),
    ("training.offload_layers", (0, 1)),
    ("parallelism.sharding", ("zero1", "fsdp")),
)


def _one_island(d: dict) -> dict:
    """``d`` on its first island alone, of at most 4 nodes, with its own layout's keys moved to
    the top (what a small plan or sweep can search in a second); None where that does not load."""
    out = copy.deepcopy(d)
    isl = out["island"][0]
    isl["nodes"] = min(isl["nodes"], 4)
    ipar = isl.pop("parallelism", {})
    ipar.pop("dp", None)
    out["island"] = [isl]
    out["parallelism"] = {**out.get("parallelism", {}), **ipar}
    out["parallelism"].pop("dp", None)
    for k in ("sync", "network"):
        out.pop(k, None)
    try:
        load_scenario(copy.deepcopy(out), registry=REG)
    except shardmeter.ShardMeterError:
        return {}
    return out


@_settings(6)
@given(scenario_dicts(), st.sampled_from(SWEEP_AXES))
def test_a_sweep_row_is_the_estimate_of_its_point(d, axis):
    from shardmeter.load.scenario import apply_override

    d = _one_island(d)
    if not d:
        return
    key, values = axis
    try:
        res = shardmeter.sweep(d, {key: list(values)}, estimator=EST)
    except shardmeter.ShardMeterError:  # a grid point the loader refuses: so does estimate
        bad = 0
        for v in values:
            try:
                EST.estimate(apply_override(copy.deepcopy(d), key, v))
            except shardmeter.ShardMeterError:
                bad += 1
        assert bad, f"sweep refused {key} = {values}, estimate took every point: {d}"
        return
    assert [r.vary[key] for r in res.rows] == list(values)
    for r in res.rows:
        single = EST.estimate(apply_override(copy.deepcopy(d), key, r.vary[key])).to_dict()
        assert _close(r.report.to_dict(), single), (key, r.vary[key], d)


def _plan_point(d: dict, best) -> dict:
    """``d`` with the plan's layout written: every parallelism and training knob it chose and its
    island's nodes."""
    from shardmeter.load.scenario import apply_override

    out = copy.deepcopy(d)
    for k, v in best.parallelism.items():
        out = apply_override(out, f"parallelism.{k}", v)
    for k, v in best.training.items():
        out = apply_override(out, f"training.{k}", v)
    for i, isl in enumerate(best.islands):
        out = apply_override(out, f"island[{i}].nodes", isl["nodes"])
    return out


def _same_report(planned: dict, estimated: dict, why) -> None:
    """Every figure of the plan's report is the estimate's; its notes are among the estimate's
    (the plan writes each candidate's every value, so a profile's "set training.x" notes are
    not repeated there, but it never notes what the scenario does not hold)."""
    assert set(planned.get("notes", ())) <= set(estimated.get("notes", ())), why
    strip = ("notes",)
    assert _close(
        {k: v for k, v in planned.items() if k not in strip},
        {k: v for k, v in estimated.items() if k not in strip},
    ), why


@_settings(5)
@given(scenario_dicts())
def test_a_plans_best_is_the_estimate_of_that_plan(d):
    d = _one_island(d)
    if not d:
        return
    res = shardmeter.plan(d, top=1, estimator=EST)
    if res.best is None:
        return
    rep = EST.estimate(_plan_point(d, res.best))
    assert rep.feasible, (rep.reasons, res.best, d)
    _same_report(res.best.report.to_dict(), rep.to_dict(), (res.best, d))


@_settings(8)
@given(scenario_dicts())
def test_a_plans_best_is_the_estimate_of_that_plan_deep(d):
    """Multi-island scenarios too: their plans carry the whole scenario chosen."""
    if len(d["island"]) == 1:
        d = _one_island(d)
        if not d:
            return
    res = shardmeter.plan(d, top=1, estimator=EST)
    if res.best is None:
        return
    point = res.best.fields.get("scenario") or _plan_point(d, res.best)
    rep = EST.estimate(copy.deepcopy(point))
    assert rep.feasible, (rep.reasons, res.best, d)
    _same_report(res.best.report.to_dict(), rep.to_dict(), (res.best, d))


@_settings(30)
@given(scenario_dicts())
def test_explicit_keys_win_over_a_profile(d):
    """Every ``[training]`` and ``[parallelism]`` key a scenario writes resolves to the written
    value, with a profile (``training.framework``) or without: a profile fills only what is
    left unset (SCENARIO.md, "Software stacks")."""
    sc = load_scenario(copy.deepcopy(d), registry=REG)
    for table in ("training", "parallelism"):
        rec = getattr(sc, table)
        for key, value in d.get(table, {}).items():
            if key in ("framework", "framework_version"):
                continue
            got = getattr(rec, key) if hasattr(rec, key) else rec.options.get(key)
            if isinstance(got, tuple):
                got = list(got)
            assert got == value or _close(got, value), (
                f"{table}.{key} = {value!r} written, {got!r} resolved: {d}"
            )
