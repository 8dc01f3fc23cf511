"""The convergence part kind and the bundled DiLoCo model (docs/convergence.md).

Published values are typed here from the papers, independently of the module's constants:
Charles et al. 2025 (arXiv 2503.09799) Tables 7 and 10, Douillard et al. 2023 (arXiv 2311.08105)
H sweep, Hoffmann et al. 2022 (arXiv 2203.15556) Eq. 10.
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import subprocess
import sys

import attrs
import numpy as np

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
import pytest

import shardmeter
from shardmeter.errors import ScenarioError
from shardmeter.inputs.bundles import PartTable
from shardmeter.model.convergence import tokens_factor
from shardmeter.parts import ConvergenceInputs, ConvergencePart, ConvergenceTerms
from shardmeter.registry.manager import get_registry
from shardmeter.strategies.convergence import DiLoCoFits, factor_from_loss_ratio, loss_ratio
from shardmeter.testing import check_records, make_estimator

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "convergence.md").read_text(encoding="utf-8")

MODELS = {  # the Streaming DiLoCo paper's 1B (24 layers) and 10B (48 layers) shapes
    "1b": {"layers": 24, "hidden": 2048, "heads": 16, "vocab": 32000, "seq_len": 2048, "ffn_hidden": 8192},
    "10b": {"layers": 48, "hidden": 4096, "heads": 32, "vocab": 32000, "seq_len": 2048, "ffn_hidden": 16384},
}
H_GRID = (1, 10, 30, 50, 100, 200, 300, 500, 700, 1000, 1500, 2000)


def scenario(model="1b", inner_steps=100, convergence="diloco-fits", tokens=20e9, **sync):
    """Two 16-GPU H100 islands over a 1 Gbit/s (0.125 GB/s) link, synchronising with DiLoCo."""
    conv = {"convergence": convergence} if convergence is not None else {}
    return {
        "model": MODELS[model],
        "training": {"global_batch": 512, "micro_batch": 1, "recompute": "selective", "tokens": tokens},
        "island": [
            {"name": "site-a", "gpu": "h100-sxm", "nodes": 2},
            {"name": "site-b", "gpu": "h100-sxm", "nodes": 2},
        ],
        "network": {"link": {"name": "internet", "bandwidth_gb_s": 0.125, "latency_us": 60000}},
        "parallelism": {"sharding": "fsdp"},
        "sync": {"strategy": "diloco", "inner_steps": inner_steps, **conv, **sync},
    }


def _chinchilla(n, d):  # Hoffmann et al. 2022, Eq. 10: E + A / N^0.34 + B / D^0.28
    return 1.69 + 406.4 / n**0.34 + 410.7 / d**0.28


# --- the bundled model against its published sources -----------------------------------------


@pytest.mark.parametrize("n", [35e6, 150e6, 1e9, 2.4e9, 10e9])
@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_loss_ratio_at_the_fits_cadence_is_table_10_over_table_7(n, m):
    want = (19.226 * n**-0.0985 * m**0.0116) / (18.129 * n**-0.0953)
    assert loss_ratio(params=n, replicas=m, inner_steps=30) == pytest.approx(want, rel=1e-12)


def test_table_10_reproduces_the_papers_10b_comparisons_to_half_a_percent():
    # Charles et al.: 10B, M = 2 reaches 2.086 against DP's 2.090; M = 4 is 0.29 % above DP
    assert loss_ratio(params=10e9, replicas=2, inner_steps=30) == pytest.approx(2.086 / 2.090, abs=0.005)
    assert loss_ratio(params=10e9, replicas=4, inner_steps=30) - 1 == pytest.approx(0.0029, abs=0.002)


def test_one_inner_step_is_data_parallel():
    for n in (35e6, 1e9, 10e9):
        r = loss_ratio(params=n, replicas=8, inner_steps=1)
        assert r == 1.0 and factor_from_loss_ratio(params=n, ratio=r) == 1.0


def test_h_sweep_reproduces_douillard_2023():
    # 150M, 8 replicas: H = 1000 costs +2.9 % perplexity over H = 50 (perplexity 15.02 at H = 500)
    r = loss_ratio(params=150e6, replicas=8, inner_steps=np.array([50.0, 1000.0]))
    assert r[1] / r[0] == pytest.approx(1 + math.log(1.029) / math.log(15.02), rel=1e-12)


def test_larger_models_tolerate_larger_h():
    h = np.array([100.0, 1000.0])
    small, large = (loss_ratio(params=n, replicas=2, inner_steps=h) for n in (150e6, 10e9))
    assert large[1] / large[0] < small[1] / small[0]


@pytest.mark.parametrize("n", [35e6, 1e9, 10e9])
@pytest.mark.parametrize("ratio", [1.001, 1.01, 1.03])
def test_tokens_factor_inverts_the_chinchilla_data_term(n, ratio):
    f = float(factor_from_loss_ratio(params=n, ratio=ratio))
    # DP on 20N / f tokens reaches the DiLoCo loss r x L(N, 20N), so DiLoCo needs f x the tokens
    assert _chinchilla(n, 20 * n / f) == pytest.approx(ratio * _chinchilla(n, 20 * n), rel=1e-12)
    assert f > 1


def test_the_factor_never_credits_beating_data_parallel():
    assert factor_from_loss_ratio(params=10e9, ratio=0.99) == 1.0


def test_factor_grows_with_h_past_30_and_with_replicas():
    f = factor_from_loss_ratio(
        params=1e9, ratio=loss_ratio(params=1e9, replicas=4, inner_steps=np.array(H_GRID[2:]))
    )
    assert np.all(np.diff(f) > 0)
    r = loss_ratio(params=1e9, replicas=np.array([2, 4, 8]), inner_steps=100)
    assert np.all(np.diff(r) > 0)


def _inputs(**kw):
    base = {
        "params": 1e9,
        "replicas": 2.0,
        "local_steps": True,
        "inner_steps": 100.0,
        "compression_bits": 16.0,
        "fragments": 1.0,
        "overlap_steps": 0.0,
    }
    return ConvergenceInputs(**{k: np.asarray(v) for k, v in (base | kw).items()})


def test_compression_fragments_and_overlap_are_free_inside_the_range():
    model = DiLoCoFits(name="t")
    base = model.terms(_inputs(), None)
    for kw in (
        {"compression_bits": 4.0},
        {"compression_bits": 32.0},
        {"fragments": 8.0, "overlap_steps": 4.0},
    ):
        t = model.terms(_inputs(**kw), None)
        assert t.tokens_factor == base.tokens_factor and bool(t.in_range)
    for kw in ({"compression_bits": 2.0}, {"overlap_steps": 5.0}, {"inner_steps": 2000.0}, {"params": 20e9}):
        t = model.terms(_inputs(**kw), None)
        assert not bool(t.in_range), kw
    assert not bool(model.terms(_inputs(replicas=16.0), None).in_range)


def test_a_synchronous_plan_is_factor_one_and_in_range_at_any_size():
    t = DiLoCoFits(name="t").terms(_inputs(local_steps=False, params=400e9, replicas=30.0), None)
    assert t.tokens_factor == 1.0 and bool(t.in_range)


# --- the planner's vectorised entry point ----------------------------------------------------


def test_tokens_factor_over_a_batch_of_codes_matches_each_report():
    reg = get_registry()
    model = reg.get("convergence", "diloco-fits")
    diloco = reg.get("sync", "diloco")
    table = PartTable()
    codes = [table.code("sync", reg.get("sync", "allreduce"), reg.get("sync", "allreduce").options())]
    for h in (30, 300, 3000):
        codes.append(table.code("sync", diloco, diloco.options(inner_steps=h)))
    params = 1.339e9
    factor, in_range = tokens_factor(model, table, np.array(codes), params=params, replicas=2)
    assert factor.shape == (4,) and factor[0] == 1.0 and in_range.tolist() == [True, True, True, False]
    for code, h in zip(codes[1:], (30, 300, 3000), strict=True):
        want = factor_from_loss_ratio(
            params=params, ratio=loss_ratio(params=params, replicas=2, inner_steps=h)
        )
        assert factor[code] == pytest.approx(float(want), rel=1e-12)
    one_island, _ = tokens_factor(model, table, np.array(codes), params=params, replicas=1)
    assert np.all(one_island == 1.0)  # one island: the sync strategy is unused


# --- the report ------------------------------------------------------------------------------


def _sweep(model: str, convergence: str | None):
    return [shardmeter.estimate(scenario(model, h, convergence, tokens=20e9)) for h in H_GRID]


@pytest.mark.parametrize("model", ["1b", "10b"])
def test_best_inner_steps_over_1_gbit_is_interior_with_the_model_and_the_largest_without(model):
    raw = _sweep(model, None)
    priced = _sweep(model, "diloco-fits")
    assert all(r.feasible for r in raw + priced)
    assert int(np.argmin([r.wall_clock_s for r in raw])) == len(H_GRID) - 1
    assert all(r.quality == {} for r in raw)
    for key in ("wall_clock_to_quality_s", "cost_to_quality_usd"):
        best = int(np.argmin([r.quality[key] for r in priced]))
        assert 0 < best < len(H_GRID) - 1, (key, H_GRID[best])
    for r, q in zip(raw, priced, strict=True):  # raw figures unchanged by the model
        assert (q.wall_clock_s, q.cost_usd, q.tokens_per_s) == (r.wall_clock_s, r.cost_usd, r.tokens_per_s)


def test_quality_object_scales_the_raw_figures_by_the_factor():
    r = shardmeter.estimate(scenario("1b", 500))
    q = r.quality
    f = float(
        factor_from_loss_ratio(
            params=r.params, ratio=loss_ratio(params=r.params, replicas=2, inner_steps=500)
        )
    )
    assert q["model"] == "diloco-fits" and q["tokens_factor"] == pytest.approx(f, rel=1e-12)
    assert q["tokens_to_quality"] == pytest.approx(20e9 * f)
    assert q["wall_clock_to_quality_s"] == pytest.approx(r.wall_clock_s * f)
    assert q["cost_to_quality_usd"] == pytest.approx(r.cost_usd * f)
    assert q["effective_tokens_per_s"] == pytest.approx(r.tokens_per_s / f)
    assert q["in_validity_range"] is True and q["outside"] == []
    assert q["validity"]["inner_steps"] == [1.0, 1000.0]
    assert q["inputs"]["inner_steps"] == 500.0 and q["inputs"]["replicas"] == 2.0
    assert not any(a.startswith("convergence not priced") for a in r.assumptions)
    assert any(n.startswith(f"quality (diloco-fits): {f:.3f}x the tokens") for n in r.notes)
    assert json.loads(r.to_json())["quality"]["tokens_factor"] == pytest.approx(f)


def test_a_plan_outside_the_range_gets_a_note_naming_the_inputs():
    r = shardmeter.estimate(scenario("1b", 2000, compression_bits=2))
    assert r.quality["in_validity_range"] is False
    assert r.quality["outside"] == ["inner_steps 2000 > 1000", "compression_bits 2 < 4"]
    assert (
        "quality: the plan lies outside the validity range of convergence model 'diloco-fits' "
        "(inner_steps 2000 > 1000, compression_bits 2 < 4); the tokens factor is extrapolated"
    ) in r.notes


def test_without_a_model_the_report_is_unchanged():
    base = shardmeter.estimate(scenario("1b", 500, convergence=None)).to_dict()
    off = shardmeter.estimate(scenario("1b", 500, convergence="none")).to_dict()
    assert base == off and base["quality"] == {}
    on = shardmeter.estimate(scenario("1b", 500)).to_dict()
    skip = {"quality", "notes", "assumptions"}
    assert {k: v for k, v in on.items() if k not in skip} == {k: v for k, v in base.items() if k not in skip}


def test_allreduce_with_the_model_is_the_data_parallel_baseline():
    q = shardmeter.estimate(
        scenario("1b", convergence="diloco-fits")
        | {"sync": {"strategy": "allreduce", "convergence": "diloco-fits"}}
    ).quality
    assert q["tokens_factor"] == 1.0 and q["in_validity_range"] is True


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("diloco-fit", "$.sync.convergence: unknown convergence 'diloco-fit' (did you mean 'diloco-fits'?)"),
        (3, "$.sync.convergence: expected a string, got an integer (3)"),
    ],
)
def test_a_bad_convergence_name_is_a_one_line_error_naming_the_key(value, message):
    with pytest.raises(ScenarioError) as exc:
        shardmeter.estimate(scenario("1b", convergence=value))
    assert str(exc.value) == message


# --- the part kind from plugins --------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Doubling(ConvergencePart):
    def terms(self, inp, opts):
        return ConvergenceTerms(tokens_factor=np.where(inp.local_steps, 2.0, 1.0), in_range=True)


class _Plugin:
    @shardmeter.hookimpl
    def shardmeter_convergence_models(self):
        yield Doubling(name="acme-double", source="test")


def test_a_plugin_contributes_a_convergence_model_usable_by_name():
    found = check_records(_Plugin())
    assert [p.name for p in found["convergence"]] == ["acme-double"]
    est = make_estimator(_Plugin())
    r = est.estimate(scenario("1b", 500, convergence="acme-double"))
    assert r.quality["tokens_factor"] == 2.0
    assert r.quality["wall_clock_to_quality_s"] == pytest.approx(2 * r.wall_clock_s)


def test_the_hook_rejects_what_is_not_a_convergence_part():
    class Bad:
        @shardmeter.hookimpl
        def shardmeter_convergence_models(self):
            yield shardmeter.CostSource(name="x", usd_per_gpu_hour=1.0)

    with pytest.raises(AssertionError, match="expected ConvergencePart"):
        check_records(Bad())


def test_shardmeter_plugins_lists_the_bundled_model():
    out = subprocess.run(
        [sys.executable, "-m", "shardmeter", "plugins", "--json"], capture_output=True, text=True, check=True
    )
    rows = json.loads(out.stdout)["parts"]
    assert {"kind": "convergence", "name": "diloco-fits"}.items() <= next(
        r for r in rows if r["kind"] == "convergence"
    ).items()


# --- the curve in docs/convergence.md is what the model computes ------------------------------


def _doc_table(model: str) -> list[list[float]]:
    block = DOC.split(f"<!-- curve {model} -->", 1)[1].split("\n\n", 1)[0]
    rows = [ln for ln in block.splitlines() if re.match(r"\|\s*\d", ln)]
    return [[float(c.replace(",", "").strip(" *")) for c in ln.strip("|").split("|")[:6]] for ln in rows]


def test_the_documented_scenario_is_the_tests():
    toml = DOC.split("Save as `diloco-1b.toml`:", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    assert tomllib.loads(toml) == scenario("1b", 100, convergence=None)


@pytest.mark.parametrize(("model", "tokens"), [("1b", 20e9), ("10b", 200e9)])
def test_the_documented_curve_is_the_models(model, tokens):
    rows = _doc_table(model)
    assert [int(r[0]) for r in rows] == list(H_GRID)
    for h, days, factor, q_days, usd, q_usd in rows:
        r = shardmeter.estimate(scenario(model, int(h), tokens=tokens))
        assert r.wall_clock_s / 86400 == pytest.approx(days, abs=6e-4)
        assert r.quality["tokens_factor"] == pytest.approx(factor, abs=6e-4)
        assert r.quality["wall_clock_to_quality_s"] / 86400 == pytest.approx(q_days, abs=6e-4)
        assert r.cost_usd == pytest.approx(usd, abs=0.6)
        assert r.quality["cost_to_quality_usd"] == pytest.approx(q_usd, abs=0.6)
    block = DOC.split(f"<!-- curve {model} -->", 1)[1].split("\n\n", 1)[0]
    cells = [ln.strip("|").split("|") for ln in block.splitlines() if re.match(r"\|\s*\d", ln)]
    for col in (3, 5):  # the bold cell of each quality-adjusted column is its minimum
        marked = [int(float(c[0])) for c in cells if "**" in c[col]]
        assert marked == [int(rows[int(np.argmin([r[col] for r in rows]))][0])]
