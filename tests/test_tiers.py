"""Islands with any number of network tiers (``tiers = [...]``): the two-tier spelling is the
same island, NVL72-class domains are tiers rather than nodes, and a collective pays each tier
it crosses (the hand calculation across three tiers is in test_formulas.py)."""

from __future__ import annotations

import pathlib

import pytest

import shardmeter
from shardmeter.cli.app import main
from shardmeter.explore.search.plan import search

ROOT = pathlib.Path(__file__).resolve().parents[1]
NVL72 = ROOT / "examples" / "topology" / "nvl72-three-tiers.toml"


def _llama(island: dict, gbs: int = 64, **par) -> dict:
    return {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": gbs, "micro_batch": 1},
        "island": [island],
        "parallelism": {"tp": 2, **par},
    }


def test_two_tiers_spelled_as_tiers_are_the_intra_and_inter_node_island():
    old = {"gpu": "h100-sxm", "nodes": 4, "intra_node": "nvlink4", "inter_node": "ib-ndr"}
    new = {"gpu": "h100-sxm", "nodes": 4, "tiers": [{"link": "nvlink4", "gpus": 8}, {"link": "ib-ndr"}]}
    a = shardmeter.estimate(_llama(old, sharding="fsdp")).to_dict()
    b = shardmeter.estimate(_llama(new, sharding="fsdp")).to_dict()
    assert a == b


def test_a_group_inside_one_nvlink_domain_never_touches_the_network():
    """18 trays of 4 GB200 in one 72-GPU NVLink domain: the network's speed changes nothing.

    (Gradient reduction is not overlapped here: the last bucket's ring is priced, as before the
    tiers existed, at the slowest tier's bandwidth and the outermost latency whatever the group
    spans -- a known approximation kept so predictions did not move with the redesign.)"""

    def run(ib_gb_s):
        isl = {
            "gpu": "gb200",
            "nodes": 18,
            "gpus_per_node": 4,
            "tiers": [
                {"link": "nvlink5", "gpus": 72},
                {"link": {"name": "ib-ndr", "bandwidth_gb_s": ib_gb_s}},
            ],
        }
        return shardmeter.estimate(_llama(isl, gbs=72, sharding="zero1", dp_comm_overlap=False))

    slow, fast = run(1.0), run(400.0)
    assert slow.feasible and slow.to_dict() == fast.to_dict()
    # the same GPUs as 4-GPU nodes on that network do pay for it
    isl = {
        "gpu": "gb200",
        "nodes": 18,
        "gpus_per_node": 4,
        "intra_node": "nvlink5",
        "inter_node": {"name": "ib-ndr", "bandwidth_gb_s": 1.0},
    }
    assert (
        shardmeter.estimate(_llama(isl, gbs=72, sharding="zero1", dp_comm_overlap=False)).step_time_s
        > slow.step_time_s
    )


def test_three_tier_example_estimates_and_the_spine_prices_what_crosses_it():
    base = shardmeter.estimate(NVL72)
    assert base.feasible and base.gpus == 1152
    pp = {}
    for o in (1.0, 2.0, 4.0):
        rep = shardmeter.estimate(NVL72, overrides=[("island[0].tiers[2].oversubscription", o)])
        pp[o] = rep.breakdown_s["pp_comm"]
    # pipeline sends 128 ranks apart cross the spine: their bandwidth term is linear in it
    assert pp[4.0] - pp[2.0] == pytest.approx(2.0 * (pp[2.0] - pp[1.0]), rel=1e-9)
    assert pp[1.0] < pp[2.0] < pp[4.0]
    assert pp[2.0] == pytest.approx(base.breakdown_s["pp_comm"], rel=1e-12)


def test_three_tier_example_plans():
    doc = search(str(NVL72), only={"tp": [4, 8], "cp": [1], "pp": [1, 2, 3]}, top=2)
    assert doc["feasible"] > 0 and len(doc["plans"]) == 2
    best = doc["plans"][0]["report"]
    assert best["feasible"] and best["step_time_s"] <= doc["plans"][1]["report"]["step_time_s"]


@pytest.mark.parametrize(
    ("tiers", "extra", "key", "words"),
    [
        (
            [{"link": "nvlink4", "gpus": 8}, {"link": "ib-ndr"}],
            {"intra_node": "nvlink4"},
            "island[0].intra_node",
            "either tiers or intra_node",
        ),
        (
            [{"link": "nvlink4", "gpus": 8}, {"link": "ib-ndr", "gpus": 8}],
            {},
            "island[0].tiers[1].gpus",
            "more GPUs than the tier inside it",
        ),
        ([{"link": "nvlink4"}, {"link": "ib-ndr"}], {}, "island[0].tiers[0].gpus", "every tier but the last"),
        (
            [{"link": "nvlink4", "gpus": 8}, {"link": "ib-ndr", "oversubscription": 0.5}],
            {},
            "island[0].tiers[1].oversubscription",
            ">= 1",
        ),
        ([], {}, "island[0].tiers", "at least one tier"),
        ([{"link": "nvlink4", "gpus": 8}, {"link": "ib-nrd"}], {}, "island[0].tiers[1].link", "did you mean"),
    ],
)
def test_bad_tiers_are_one_line_errors_naming_the_key(tmp_path, capsys, tiers, extra, key, words):
    import json

    sc = _llama({"gpu": "h100-sxm", "nodes": 2, "tiers": tiers, **extra})
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(sc))
    with pytest.raises(shardmeter.ScenarioError) as exc:
        shardmeter.estimate(sc)
    assert key in str(exc.value) and words in str(exc.value)
    toml = tmp_path / "bad.toml"
    toml.write_text(_to_toml(sc))
    assert main(["estimate", str(toml)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and key in err


def _to_toml(d: dict) -> str:
    """Just enough TOML for these scenarios (tables, an array of tables, inline tables)."""

    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(v)

    out = []
    for table in ("model", "training", "parallelism"):
        out.append(f"[{table}]")
        out += [f"{k} = {val(v)}" for k, v in d[table].items()]
    for isl in d["island"]:
        out.append("[[island]]")
        out += [f"{k} = {val(v)}" for k, v in isl.items()]
    return "\n".join(out) + "\n"


def test_last_tier_gpus_below_the_island_is_an_error():
    isl = {
        "gpu": "h100-sxm",
        "nodes": 4,
        "tiers": [{"link": "nvlink4", "gpus": 8}, {"link": "ib-ndr", "gpus": 16}],
    }
    with pytest.raises(
        shardmeter.ScenarioError, match=r"island\[0\]\.tiers\[1\]\.gpus.*whole island \(32 GPUs\)"
    ):
        shardmeter.estimate(_llama(isl))


def test_with_level_reprices_the_tiers_of_a_tiered_island():
    isl = {"gpu": "h100-sxm", "nodes": 4, "tiers": [{"link": "nvlink4", "gpus": 8}, {"link": "ib-ndr"}]}
    two = {"gpu": "h100-sxm", "nodes": 4, "intra_node": "nvlink4", "inter_node": "ib-ndr"}
    est = shardmeter.Estimator().with_level("inter_node", "ethernet-25g").with_level("intra_node", "pcie5")
    a = est.estimate(_llama(isl, sharding="fsdp")).to_dict()
    b = est.estimate(_llama(two, sharding="fsdp")).to_dict()
    assert a == b and a["step_time_s"] > shardmeter.estimate(_llama(isl, sharding="fsdp")).step_time_s
