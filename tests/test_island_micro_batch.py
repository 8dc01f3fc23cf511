"""``[[island]] micro_batch``: an island's own sequences per micro-batch (ShardMeter's extension
of the contract). The island runs its share at its own micro-batch, and the others keep
``training.micro_batch``; the report's layout, its reasons and ``plan`` say which key applies."""

from __future__ import annotations

import copy

import pytest

import shardmeter
from shardmeter.cli.app import main
from shardmeter.errors import ScenarioError
from shardmeter.explore.search.plan import search
from shardmeter.load.scenario import load_scenario

MODEL = {"layers": 8, "hidden": 2048, "heads": 16, "vocab": 32000, "seq_len": 2048}
#: An H100 island at micro-batch 2 and an A100 island at training.micro_batch (1), 4 GPUs each.
TWO = {
    "model": MODEL,
    "training": {"global_batch": 32, "micro_batch": 1},
    "island": [
        {"name": "h", "gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4, "micro_batch": 2},
        {"name": "a", "gpu": "a100-sxm-40gb", "nodes": 1, "gpus_per_node": 4},
    ],
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 1.25, "latency_us": 40000}},
    "sync": {"strategy": "diloco", "inner_steps": 100},
}


def _alone(j: int, micro_batch: int, share: int) -> shardmeter.Report:
    """Island ``j`` of :data:`TWO` as a one-island scenario running ``share`` sequences a step."""
    one = copy.deepcopy(TWO)
    one["island"] = [TWO["island"][j] | {"micro_batch": micro_batch}]
    one["training"]["global_batch"] = share
    del one["sync"], one["network"]
    return shardmeter.estimate(one)


def test_two_islands_at_their_own_micro_batches_equal_the_step_by_hand():
    r = shardmeter.estimate(TWO)
    assert r.feasible
    # shares by replicas: 32 x 4 / 8 = 16 sequences each; h: 16 / (2 x dp 4) = 2 micro-batches,
    # a: 16 / (1 x dp 4) = 4
    h, a = r.layout["islands"]
    assert (h["micro_batch"], h["grad_accumulation"], h["batch_per_step"]) == (2, 2, 16)
    assert (a["micro_batch"], a["grad_accumulation"], a["batch_per_step"]) == (1, 4, 16)
    assert "micro_batch" not in r.layout  # it differs between the islands
    # each island's own step is that island alone on its 16 sequences at its micro-batch ...
    t_h = _alone(0, 2, 16).step_time_s
    t_a = _alone(1, 1, 16).step_time_s
    assert r.islands[0]["step_time_s"] == pytest.approx(t_h, rel=1e-12)
    assert r.islands[1]["step_time_s"] == pytest.approx(t_a, rel=1e-12)
    assert t_h != pytest.approx(_alone(0, 1, 16).step_time_s, rel=1e-3)  # the key matters
    # ... and the step is the slower island's (the A100's) plus DiLoCo's exposed sync
    assert t_a > t_h
    assert r.step_time_s == pytest.approx(t_a + r.breakdown_s["island_sync"], rel=1e-12)
    assert r.islands[0]["idle_s"] == pytest.approx(t_a - t_h, rel=1e-12)


def test_one_micro_batch_on_every_island_is_the_common_key():
    both = copy.deepcopy(TWO)
    both["island"][1]["micro_batch"] = 2
    common = copy.deepcopy(TWO)
    common["training"]["micro_batch"] = 2
    del common["island"][0]["micro_batch"]
    r, c = shardmeter.estimate(both), shardmeter.estimate(common)
    assert r.layout["micro_batch"] == 2 and r.step_time_s == c.step_time_s
    assert r.to_dict()["islands"] == c.to_dict()["islands"]


def test_the_island_key_round_trips_and_takes_set():
    sc = load_scenario(TWO)
    assert [i.micro_batch for i in sc.islands] == [2, None]
    assert [sc.micro_batch(j) for j in range(2)] == [2, 1]
    again = load_scenario(sc.to_dict())
    assert again.islands == sc.islands
    assert load_scenario(TWO, overrides=["island[1].micro_batch=4"]).micro_batch(1) == 4


@pytest.mark.parametrize(
    "value, message",
    [
        (0, "expected an integer >= 1, got 0"),
        ("2", "expected an integer, got a string"),
        (1.5, "expected an integer"),
    ],
)
def test_a_bad_island_micro_batch_is_an_error_naming_the_key(value, message):
    bad = copy.deepcopy(TWO)
    bad["island"][1]["micro_batch"] = value
    with pytest.raises(ScenarioError) as err:
        load_scenario(bad)
    text = str(err.value)
    assert "island[1].micro_batch" in text and message in text and "\n" not in text


def test_the_command_line_exits_2_on_a_bad_island_micro_batch(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(
        "[model]\nlayers = 8\nhidden = 2048\nheads = 16\nvocab = 32000\nseq_len = 2048\n"
        "[training]\nglobal_batch = 32\n"
        '[[island]]\ngpu = "h100-sxm"\nnodes = 1\ngpus_per_node = 4\nmicro_batch = 0\n'
    )
    assert main(["estimate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "island[0].micro_batch" in err


def test_a_batch_that_does_not_split_names_the_key_that_sets_the_islands_micro_batch():
    # 32 x 4 / 8 = 16 sequences each: h at 3 x dp 4 = 12 and a at 3 x 4 = 12 do not divide 16
    odd = copy.deepcopy(TWO)
    odd["island"][0]["micro_batch"] = 3
    odd["training"]["micro_batch"] = 3
    r = shardmeter.estimate(odd)
    assert not r.feasible
    assert r.reasons == [
        "island[0].micro_batch: the island's share of global_batch (16) is not a multiple of "
        "micro_batch x dp (12) (island 'h')",
        "training.micro_batch: the island's share of global_batch (16) is not a multiple of "
        "micro_batch x dp (12) (island 'a')",
    ]
    # without any island's own key the reason names training.global_batch, as it always has
    plain = copy.deepcopy(odd)
    del plain["island"][0]["micro_batch"]
    assert [x.split(":")[0] for x in shardmeter.estimate(plain).reasons] == ["training.global_batch"] * 2


def test_the_balanced_split_moves_each_island_in_its_own_micro_batches():
    bal = copy.deepcopy(TWO)
    bal["sync"]["batch_split"] = "balanced"
    bal["training"]["global_batch"] = 48
    r = shardmeter.estimate(bal)
    h, a = (i["batch_per_step"] for i in r.islands)
    assert h + a == 48 and h % (2 * 4) == 0 and a % (1 * 4) == 0
    assert h > 24  # the faster H100 island takes more than half


#: Two 2-node islands of a larger model (the brute-force test's space), where a plan of the
#: front takes micro-batch 1 on one island and 2 on the other.
LARGER = {
    "model": {"layers": 8, "hidden": 4096, "heads": 32, "vocab": 32000, "seq_len": 4096},
    "training": {"global_batch": 48, "micro_batch": 1, "tokens": 1e9},
    "island": [
        {"name": "h", "gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 4},
        {"name": "a", "gpu": "a100-sxm-40gb", "nodes": 2, "gpus_per_node": 4},
    ],
    "network": {"link": {"name": "internet", "bandwidth_gb_s": 200.0, "latency_us": 10}},
    "sync": {"strategy": "diloco", "inner_steps": 20},
}


def _close(a: object, b: object) -> bool:
    """Equal documents, numbers within 1e-12 relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-300)
    return type(a) is type(b) and a == b


def test_close_tells_a_changed_figure():
    assert _close({"a": [1.0, {"b": 2}]}, {"a": [1.0 + 1e-15, {"b": 2}]})
    assert not _close({"a": [1.0]}, {"a": [1.001]})
    assert not _close({"a": 1}, {"a": 1.0})


def test_estimate_of_a_plans_scenario_reproduces_its_per_island_micro_batches():
    only = {"mbs": [1, 2], "tp": [1, 2], "pp": [1, 2], "cp": [1], "sp": [False], "recompute": ["none"]}
    only |= {"schedule": ["1f1b"], "sharding": ["none", "fsdp"], "strategy": ["diloco"]}
    doc = search(LARGER, objective="pareto", only=only)
    mixed = [p for p in doc["plans"] if isinstance(p["training"]["micro_batch"], list)]
    assert mixed  # a point of the front runs its two islands at different micro-batches
    for p in doc["plans"]:
        r = shardmeter.estimate(p["scenario"])
        assert r.step_time_s == pytest.approx(p["predicted_step_s"], rel=1e-9)
        # the same report, up to the last bits of the float sums (the planner's report comes
        # from its batched array path, estimate's from the scalar path; numpy versions differ
        # in summation order)
        assert _close(r.to_dict(), p["report"])
        mbs = p["training"]["micro_batch"]
        kept = [e for e in p["islands"] if not e.get("dropped")]
        got = [i["micro_batch"] for i in r.layout.get("islands", [r.layout] * len(kept))]
        assert got == (mbs if isinstance(mbs, list) else [mbs] * len(kept))
        assert [e["micro_batch"] for e in kept] == got
        # the scenario writes an island's own key only where the islands' differ
        own = [i.get("micro_batch") for i in p["scenario"]["island"]]
        assert own == (mbs if isinstance(mbs, list) else [None] * len(kept))
