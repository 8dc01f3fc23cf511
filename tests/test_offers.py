"""``[[offer]]`` (candidate islands to rent) and per-island uplinks: parsing and errors, the
cross-island exchange paced by the slowest uplink, offer prices, and
:func:`shardmeter.load.offers.offer_islands` for the planner (docs/multi-island.md, "Where to rent")."""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys

import attrs
import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import shardmeter
from shardmeter import Estimator
from shardmeter.errors import ScenarioError
from shardmeter.load.offers import OFFERS_NOTE, node_options, offer_islands
from shardmeter.load.scenario import load_scenario
from shardmeter.report.pricing import egress_usd_per_gb

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "multi-island" / "three-regions-offers.toml"
THREE_ISLANDS = ROOT / "examples" / "multi-island" / "three-islands.toml"


def _tables(path: pathlib.Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


@pytest.fixture(scope="module")
def offers() -> dict:
    return _tables(EXAMPLE)


@pytest.fixture(scope="module")
def islands() -> dict:
    return _tables(THREE_ISLANDS)


def _error(tables: dict) -> str:
    with pytest.raises(ScenarioError) as exc:
        load_scenario(copy.deepcopy(tables))
    return str(exc.value)


# -- parsing -------------------------------------------------------------------------------------


def test_offers_load_as_islands_at_max_nodes_after_the_fixed_ones(offers):
    d = copy.deepcopy(offers)
    d["island"] = [{"name": "home", "gpu": "h100-sxm", "nodes": 2}]
    sc = load_scenario(d)
    assert [i.name for i in sc.islands] == ["home", "us-east", "eu-north", "ap-south"]
    assert [i.nodes for i in sc.islands] == [2, 8, 4, 8]
    assert [o.name for o in sc.offers] == ["us-east", "eu-north", "ap-south"]
    assert sc.islands[3].price == {
        "source": "offer ap-south",
        "usd_per_gpu_hour": 1.39,
        "egress_usd_per_gb": 0.09,
        "date": "2026-03",
    }
    assert sc.islands[3].uplink == {"bandwidth_gb_s": 0.25, "latency_us": 60000}
    assert OFFERS_NOTE in sc.notes


def test_a_scenario_with_offers_round_trips_through_its_tables(offers):
    sc = load_scenario(copy.deepcopy(offers))
    tables = sc.to_dict()
    assert "island" not in tables and len(tables["offer"]) == 3
    again = load_scenario(tables)
    assert again.islands == sc.islands and again.offers == sc.offers


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["offer"][1].pop("max_nodes"), "$.offer[1].max_nodes: required key is missing"),
        (
            lambda d: d["offer"][1].update(max_nodes=0),
            "$.offer[1].max_nodes: expected an integer >= 1, got 0",
        ),
        (lambda d: d["offer"][0].pop("gpu"), "$.offer[0].gpu: required key is missing"),
        (lambda d: d["offer"][0].pop("name"), "$.offer[0].name: required key is missing"),
        (lambda d: d["offer"][0].update(name=" "), "$.offer[0].name: expected a non-empty string"),
        (
            lambda d: d["offer"][2].update(price_usd_per_gpu_hour=-1.0),
            "$.offer[2].price_usd_per_gpu_hour: expected a finite number >= 0, got -1.0",
        ),
        (
            lambda d: d["offer"][2].update(egress_usd_per_gb="cheap"),
            "$.offer[2].egress_usd_per_gb: expected a number",
        ),
        (lambda d: d["offer"][0].update(nodes=4), "$.offer[0].nodes"),
        (lambda d: d.update(offer={"name": "x"}), "$.offer: expected an array of tables [[offer]]"),
        (lambda d: d["offer"][1].update(name="us-east"), "island name 'us-east' is used twice"),
        (lambda d: d.pop("offer"), "at least one [[island]] (or [[offer]]) is required"),
    ],
)
def test_bad_offers_are_one_line_errors_naming_the_key(offers, edit, message):
    d = copy.deepcopy(offers)
    edit(d)
    msg = _error(d)
    assert message in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("offer[0].uplink", '"no-such-link"', "$.offer[0].uplink"),
        (
            "offer[1].uplink.bandwidth_gb_s",
            "-1",
            "$.offer[1].uplink.bandwidth_gb_s: expected a finite number > 0",
        ),
        ("offer[2].gpu", '"h100-sxx"', "$.offer[2].gpu"),
    ],
)
def test_bad_offer_parts_name_the_offer_key_and_exit_2(key, value, message):
    p = subprocess.run(
        [sys.executable, "-m", "shardmeter", "estimate", str(EXAMPLE), "--set", f"{key}={value}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr


def test_an_uplink_on_a_single_island_is_noted_as_unused():
    sc = load_scenario(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"global_batch": 64},
            "island": [{"gpu": "h100-sxm", "nodes": 1, "uplink": "internet"}],
        }
    )
    assert any("uplink applies only with two islands" in n for n in sc.notes)


# -- per-island uplinks --------------------------------------------------------------------------


def _report(tables: dict, est: Estimator | None = None) -> dict:
    r = (est or Estimator()).estimate(copy.deepcopy(tables))
    return json.loads(r.to_json())


def _with_uplinks(tables: dict, uplinks: list) -> dict:
    d = copy.deepcopy(tables)
    for isl, link in zip(d["island"], uplinks, strict=False):  # the first len(uplinks) islands
        isl["uplink"] = link
    return d


@pytest.mark.parametrize("strategy", ["diloco", "allreduce"])
def test_uplinks_equal_to_the_network_link_change_nothing(islands, strategy):
    d = copy.deepcopy(islands)
    d["sync"]["strategy"] = strategy
    link = d["network"]["link"]
    assert _report(_with_uplinks(d, [link] * 3)) == _report(d)
    # an uplink table without a name overrides the default "internet" link, as [network] link does
    bare = {k: v for k, v in link.items() if k != "name"}
    assert _report(_with_uplinks(d, [bare] * 3)) == _report(d)


@pytest.mark.parametrize("strategy", ["diloco", "allreduce"])
def test_the_slowest_uplink_paces_the_exchange(islands, strategy):
    d = copy.deepcopy(islands)
    d["sync"]["strategy"] = strategy
    slow = {"name": "internet", "bandwidth_gb_s": 0.05, "latency_us": 60000}
    fast = {"name": "internet", "bandwidth_gb_s": 5.0, "latency_us": 60000}
    mixed = _report(_with_uplinks(d, [fast, fast, slow]))
    everyone_slow = copy.deepcopy(d)
    everyone_slow["network"]["link"] = slow
    assert mixed["levels"]["wan"] == _report(everyone_slow)["levels"]["wan"]
    assert mixed["step_time_s"] == _report(everyone_slow)["step_time_s"]
    assert mixed["levels"]["wan"]["round_s"] > _report(d)["levels"]["wan"]["round_s"]


def test_the_diloco_round_by_hand_on_the_offers_example(offers):
    """Streaming DiLoCo over I = 3 islands, F = 4 fragments at 4 bits: a round sends
    ``2 (I-1)/I x params x 4/8`` bytes through the slowest uplink (0.25 GB/s) and pays
    ``F x 2 (I-1)`` ring steps of the largest latency (60 ms)."""
    r = _report(offers)
    payload = r["params"] * 4 / 8
    frac = 2 * (3 - 1) / 3
    expected = frac * payload / 0.25e9 + 4 * 2 * (3 - 1) * 0.060
    assert r["levels"]["wan"]["round_s"] == pytest.approx(expected, rel=1e-12)
    assert r["levels"]["wan"]["bytes_per_island"] == pytest.approx(frac * payload / 100, rel=1e-12)


def test_with_level_network_reprices_every_uplink(offers):
    link = "internet"
    d = copy.deepcopy(offers)
    for o in d["offer"]:
        o.pop("uplink")
    assert _report(offers, Estimator().with_level("network", link)) == _report(d)


# -- prices --------------------------------------------------------------------------------------


def test_offer_prices_give_rate_times_gpu_hours_plus_egress(offers):
    r = _report(offers)
    sc = load_scenario(copy.deepcopy(offers))
    steps = sc.training.tokens / (sc.training.global_batch * sc.model.seq_len)
    egress_gb = r["levels"]["wan"]["bytes_per_island"] * steps / 1e9
    hours = r["wall_clock_s"] / 3600
    by_hand = {
        "us-east": 64 * hours * 2.69 + egress_gb * 0.02,
        "eu-north": 32 * hours * 2.49 + egress_gb * 0.02,
        "ap-south": 64 * hours * 1.39 + egress_gb * 0.09,
    }
    for isl in r["islands"]:
        assert isl["cost_source"] == f"offer {isl['name']}"
        assert isl["egress_gb"] == pytest.approx(egress_gb, rel=1e-12)
        assert isl["cost_usd"] == pytest.approx(by_hand[isl["name"]], rel=1e-12)
    assert r["cost_usd"] == pytest.approx(sum(by_hand.values()), rel=1e-12)
    rows = r["cost_breakdown_usd"]["islands"]
    assert [(x["price_source"], x["price_date"]) for x in rows] == [
        ("offer us-east", "2026-03"),
        ("offer eu-north", "2026-Q1"),
        ("offer ap-south", "2026-03"),
    ]


def test_a_price_table_without_a_name_is_the_islands_own_cost_source(islands):
    d = copy.deepcopy(islands)
    d["island"][0]["price"] = {"usd_per_gpu_hour": 1.5, "egress_usd_per_gb": 0.01}
    res = Estimator().resolve(load_scenario(d))
    cost = res.islands[0].cost
    assert (cost.name, cost.usd_per_gpu_hour, cost.egress_usd_per_gb) == ("us-east price", 1.5, 0.01)
    d["island"][0]["price"] = {"usd_per_gpu_hour": -1}
    assert "$.island[0].price.usd_per_gpu_hour" in _error_at_resolve(d)


def _error_at_resolve(d: dict) -> str:
    with pytest.raises(ScenarioError) as exc:
        shardmeter.estimate(d)
    return str(exc.value)


def test_an_island_without_a_cost_source_pays_its_own_uplinks_egress(islands):
    d = _with_uplinks(
        islands, [{"name": "internet", "bandwidth_gb_s": 1.0, "latency_us": 1000, "egress_usd_per_gb": 0.05}]
    )
    res = Estimator().resolve(load_scenario(d))
    own, other = (attrs.evolve(isl, cost=None) for isl in res.islands[:2])
    assert egress_usd_per_gb(own, res.network) == 0.05
    assert egress_usd_per_gb(other, res.network) == res.network.egress_usd_per_gb


# -- the planner's view --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_nodes", "options"),
    [
        (1, [0, 1]),
        (2, [0, 1, 2]),
        (8, [0, 1, 2, 4, 8]),
        (12, [0, 1, 2, 4, 8, 12]),
        (33, [0, 1, 2, 4, 8, 16, 32, 33]),
    ],
)
def test_node_options_are_zero_powers_of_two_and_max_nodes(max_nodes, options):
    assert node_options(max_nodes) == options


def test_offer_islands_gives_plain_islands_and_their_node_options(offers):
    d = copy.deepcopy(offers)
    d["island"] = [{"name": "home", "gpu": "h100-sxm", "nodes": 3}]
    sc = load_scenario(d)
    plain, options = offer_islands(sc)
    assert options == [[3], [0, 1, 2, 4, 8], [0, 1, 2, 4], [0, 1, 2, 4, 8]]
    assert plain.offers == () and OFFERS_NOTE not in plain.notes
    assert plain.islands == sc.islands
    tables = plain.to_dict()
    assert "offer" not in tables and [i["name"] for i in tables["island"]] == [
        "home",
        *[o["name"] for o in d["offer"]],
    ]
    # the plain scenario, written out and loaded again, estimates exactly as the offers did
    a, b = _report(tables), _report(d)
    assert a["notes"] == [n for n in b["notes"] if n != OFFERS_NOTE]
    a.pop("notes"), b.pop("notes")
    assert a == b


def test_offer_islands_leaves_a_scenario_without_offers_as_it_is(islands):
    sc = load_scenario(copy.deepcopy(islands))
    plain, options = offer_islands(sc)
    assert plain is sc and options == [[4], [2], [8]]


def test_the_offers_example_gives_the_numbers_docs_quote(offers):
    """docs/multi-island.md, "Where to rent": every offer in full, 160 GPUs, 19.8 h, $6,812."""
    r = _report(offers)
    assert r["gpus"] == 160
    assert round(r["wall_clock_s"] / 3600, 1) == 19.8
    assert round(r["cost_usd"]) == 6812
