"""Numbers that explain themselves: the report's ``layout``, ``memory_breakdown_gb``,
``cost_breakdown_usd`` and ``assumptions``, checked against figures computed by hand from the
scenario, and the estimate table's blocks and one-format-per-column numbers."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

import shardmeter
from shardmeter.model import overheads
from shardmeter.tables import fmt_count, fmt_num, fmt_times, render_table

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPT3 = ROOT / "examples" / "gpt3-175b-a100.toml"
TWO_DC = ROOT / "examples" / "multi-island" / "two-datacenters-allreduce.toml"
THREE = ROOT / "examples" / "multi-island" / "three-islands.toml"
ZERO3 = ROOT / "shardmeter/validation_data/published/narayanan2021/narayanan2021-t2-zero3-gpt174.6b-n384.toml"

#: shardmeter/hardware_catalog/prices.toml, read 2026-06: cloud-on-demand a100-sxm-80gb and
#: h100-sxm per GPU-hour, AWS internet egress per GB; "owned" h100-sxm = $30,000 over 4 years
#: of 8766 h + 700 W x 0.8 utilisation x PUE 1.3 x $0.10/kWh.
A100_RATE, H100_RATE, EGRESS_PER_GB = 2.00, 2.69, 0.09
OWNED_H100_RATE = 30000.0 / (4 * 8766.0) + 0.700 * 0.8 * 1.3 * 0.10


@pytest.fixture(scope="module")
def gpt3():
    return shardmeter.estimate(GPT3), shardmeter.load_scenario(GPT3)


@pytest.fixture(scope="module")
def two_dc():
    return shardmeter.estimate(TWO_DC), shardmeter.load_scenario(TWO_DC)


# ---- layout -------------------------------------------------------------------------------------


def test_gpt3_layout_is_the_megatron_arithmetic(gpt3):
    r, sc = gpt3
    lay, par, tr, m = r.layout, sc.parallelism, sc.training, sc.model
    gpus = sc.islands[0].nodes * sc.islands[0].gpus_per_node
    dp = gpus // (par.tp * par.pp)
    assert (lay["tp"], lay["pp"], lay["cp"], lay["ep"]) == (8, 8, 1, 1)
    assert lay["dp"] == lay["dp_total"] == dp == 16
    assert lay["grad_accumulation"] == tr.global_batch // (dp * tr.micro_batch) == 96
    assert lay["virtual_stages"] == 3 and lay["micro_batch"] == 1
    assert lay["layers_per_stage"] == m.layers // par.pp == 12
    assert lay["layers_per_virtual_stage"] == m.layers // (par.pp * par.virtual_stages) == 4
    assert "first_stage_layers" not in lay  # 96 layers split evenly
    # Narayanan et al. 2021, Eq. 2 without the small terms: 12 l h^2 per model, the first stage's
    # share of it plus its vocab x h embedding slice
    h = m.hidden
    assert lay["params_per_gpu"] == pytest.approx(
        12 * h * h * m.layers / (par.tp * par.pp) + m.vocab * h / par.tp, rel=1e-3
    )
    assert lay["params_per_gpu_sharded"] == lay["params_per_gpu"]  # ZeRO-1 keeps whole weights
    assert lay["params"] == r.params and lay["sharding"] == "zero1" and "islands" not in lay


def test_identical_islands_share_one_layout_and_count_replicas_over_both(two_dc):
    r, sc = two_dc
    lay = r.layout
    dp_island = sc.islands[0].nodes * 8 // (8 * 4)
    assert lay["dp"] == dp_island == 16 and lay["dp_total"] == 2 * dp_island
    assert lay["grad_accumulation"] == sc.training.global_batch // (2 * dp_island * 1) == 32
    assert lay["layers_per_stage"] == 80 // 4 and lay["layers_per_virtual_stage"] == 80 // (4 * 5)
    assert "islands" not in lay


def test_islands_with_their_own_layout_are_listed_one_by_one():
    r = shardmeter.estimate(THREE)
    lay = r.layout
    assert [i["name"] for i in lay["islands"]] == ["us-east", "eu-north", "ap-south"]
    assert [(i["tp"], i["dp"]) for i in lay["islands"]] == [(1, 32), (1, 16), (2, 32)]
    assert "tp" not in lay and lay["pp"] == 1 and lay["dp_total"] == 80
    for i in lay["islands"]:  # 480 sequences over 80 replicas: 6 micro-batches of 1 each
        assert i["grad_accumulation"] == 480 // 80 == 6
        assert i["batch_per_step"] == 6 * i["dp"]
        assert i["params_per_gpu_sharded"] == pytest.approx(i["params_per_gpu"] / i["dp"], rel=1e-12)  # FSDP


def test_an_uneven_pipeline_reports_its_first_and_last_stage():
    d = {
        "model": {"preset": "llama3-8b"},
        "training": {"global_batch": 64},
        "island": [{"gpu": "h100-sxm", "nodes": 3}],
        "parallelism": {"pp": 3, "sharding": "zero1"},
    }
    r = shardmeter.estimate(d)
    # 32 layers over 3 stages: 11, 11, 10; the model times ceil(32 / 3) = 11, the largest
    lay = r.layout
    assert (lay["layers_per_stage"], lay["first_stage_layers"], lay["last_stage_layers"]) == (11, 11, 10)
    assert _row(str(r), "layers per stage") == "11 (first 11, last 10)"
    assert r.assumptions == []


def test_an_interleaved_uneven_split_is_timed_at_its_largest_stage():
    d = {
        "model": {"layers": 36, "hidden": 128, "heads": 8, "vocab": 256, "seq_len": 256, "ffn": "swiglu"},
        "training": {"global_batch": 64},
        "island": [{"gpu": "h100-sxm", "nodes": 4}],
        "parallelism": {"tp": 4, "pp": 8, "schedule": "interleaved", "virtual_stages": 4},
    }
    r = shardmeter.estimate(d)
    lay = r.layout
    # 36 layers in 32 chunks: chunks 0-3 hold 2, the rest 1; stage 0 holds chunks 0, 8, 16, 24
    assert (lay["first_stage_layers"], lay["last_stage_layers"]) == (2 + 1 + 1 + 1, 1 + 1 + 1 + 1)
    # the model times the largest stage as it is: 5 layers (no upper bound to note)
    assert lay["layers_per_stage"] == 2 + 1 + 1 + 1
    assert r.assumptions == []


# ---- memory -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [GPT3, TWO_DC, THREE, ZERO3])
def test_memory_parts_add_up_to_the_memory_per_gpu(path):
    r = shardmeter.estimate(path)
    mb = r.memory_breakdown_gb
    assert list(mb) == ["weights", "gradients", "optimizer", "activations", "transient", "other"]
    assert all(v > 0 for k, v in mb.items() if k != "transient") and mb["transient"] >= 0
    assert sum(mb.values()) == pytest.approx(r.memory_per_gpu_gb, rel=1e-12)


def test_gpt3_memory_is_zero1_state_plus_activations_plus_the_reservation(gpt3):
    r, _ = gpt3
    mb, p = r.memory_breakdown_gb, r.layout["params_per_gpu"]
    # Rajbhandari et al. 2020 (ZeRO), Sec. 5: bf16 weights and gradients 2 + 2 bytes, the
    # optimizer's K = 12 bytes per parameter divided over the dp = 16 replicas
    assert mb["weights"] == pytest.approx(2 * p / 1e9, rel=1e-12)
    assert mb["gradients"] == pytest.approx(2 * p / 1e9, rel=1e-12)
    assert mb["optimizer"] == pytest.approx(12 * p / 16 / 1e9, rel=1e-12)
    # zero1 keeps no extra buffer: the CUDA context, tp / pp / dp communicators' NCCL buffers and
    # two 8.125 MiB + 1 MiB cuBLAS workspaces (A100, sm80)
    lay = r.layout
    assert (lay["tp"], lay["pp"], lay["dp"]) == (8, 8, 16)
    nccl = 3 * 32 * (512 * 1024 + 4915200 + 4 * 2**20)
    assert mb["other"] * 1e9 == pytest.approx(0.5e9 + nccl + 2 * (8519680 + 2**20), rel=1e-9)
    assert r.memory_outside_allocator_gb * 1e9 == pytest.approx(0.5e9 + nccl, rel=1e-9)
    assert overheads.nccl_communicator_bytes() == pytest.approx(308.28e6, rel=1e-4)


def test_the_busiest_island_gives_the_memory_breakdown():
    r = shardmeter.estimate(THREE)
    busiest = max(r.islands, key=lambda i: i["memory_per_gpu_gb"])
    assert busiest["name"] == "eu-north"  # 16 GPUs share the FSDP state: the largest slice each
    assert sum(r.memory_breakdown_gb.values()) == pytest.approx(busiest["memory_per_gpu_gb"], rel=1e-12)


def test_an_infeasible_plan_still_explains_its_memory():
    d = {
        "model": {"preset": "llama3-70b"},
        "training": {"global_batch": 64},
        "island": [{"gpu": "h100-sxm", "nodes": 1}],
    }
    r = shardmeter.estimate(d)
    assert not r.feasible and r.cost_breakdown_usd == {}
    assert r.memory_per_gpu_gb > r.memory_capacity_gb
    assert sum(r.memory_breakdown_gb.values()) == pytest.approx(r.memory_per_gpu_gb, rel=1e-12)
    assert "memory by part (GB): weights " in str(r)


# ---- cost ---------------------------------------------------------------------------------------


def test_gpt3_cost_is_rate_times_gpu_hours(gpt3):
    r, sc = gpt3
    cb = r.cost_breakdown_usd
    wall = sc.training.tokens / r.tokens_per_s
    hours = 1024 * wall / 3600
    assert cb["gpu_hours"] == pytest.approx(hours, rel=1e-12)
    assert cb["rate_usd_per_gpu_hour"] == A100_RATE
    assert cb["compute_usd"] == pytest.approx(A100_RATE * hours, rel=1e-12)
    assert cb["egress_usd"] == 0.0 and cb["egress_gb"] == 0.0
    assert cb["total_usd"] == pytest.approx(r.cost_usd, rel=1e-12)
    assert (cb["price_source"], cb["price_date"]) == ("cloud-on-demand", "2026-06")


def test_two_datacenters_cost_is_mostly_egress(two_dc):
    r, sc = two_dc
    cb = r.cost_breakdown_usd
    west, east = cb["islands"]
    hours = 512 * r.wall_clock_s / 3600
    steps = sc.training.tokens / (sc.training.global_batch * sc.model.seq_len)
    # the global ring all-reduce over 2 islands sends 2 (n - 1) / n = 1 bf16 gradient per step
    sent_gb = 2 * r.params * steps / 1e9
    assert r.levels["wan"]["bytes_per_island"] == pytest.approx(2 * r.params, rel=1e-12)
    assert west["rate_usd_per_gpu_hour"] == H100_RATE and west["price_source"] == "cloud-on-demand"
    assert east["rate_usd_per_gpu_hour"] == pytest.approx(OWNED_H100_RATE, rel=1e-12)
    assert east["price_source"] == "owned" and east["egress_usd_per_gb"] == 0.0
    assert west["compute_usd"] == pytest.approx(H100_RATE * hours, rel=1e-12)
    assert west["egress_gb"] == east["egress_gb"] == pytest.approx(sent_gb, rel=1e-12)
    assert west["egress_usd"] == pytest.approx(EGRESS_PER_GB * sent_gb, rel=1e-12) and east["egress_usd"] == 0
    assert cb["compute_usd"] == pytest.approx((H100_RATE + OWNED_H100_RATE) * hours, rel=1e-12)
    assert cb["total_usd"] == pytest.approx(cb["compute_usd"] + cb["egress_usd"], rel=1e-12)
    assert cb["total_usd"] == pytest.approx(r.cost_usd, rel=1e-12)
    assert cb["egress_usd"] / cb["total_usd"] > 0.8  # what the old one-number cost did not say
    assert cb["rate_usd_per_gpu_hour"] is None and cb["price_source"] is None  # the islands differ
    for isl, c in zip(r.islands, cb["islands"], strict=True):
        assert c["compute_usd"] == isl["gpu_cost_usd"] and c["egress_usd"] == isl["egress_cost_usd"]


def test_without_a_token_budget_there_is_no_cost_split():
    d = shardmeter.load_scenario(GPT3).to_dict()
    del d["training"]["tokens"]
    r = shardmeter.estimate(d)
    assert r.cost_usd is None and r.cost_breakdown_usd == {}
    assert re.search(r"^cost +-$", str(r), re.M)


def test_the_json_carries_the_new_fields_strictly(two_dc):
    doc = json.loads(two_dc[0].to_json())
    assert {"layout", "memory_breakdown_gb", "cost_breakdown_usd", "assumptions"} <= set(doc)
    assert doc["cost_breakdown_usd"]["islands"][0]["price_date"] == "2026-06"


# ---- the table ----------------------------------------------------------------------------------


def _row(text: str, label: str) -> str:
    m = re.search(rf"^{re.escape(label)}  +(.*)$", text, re.M)
    assert m, (label, text)
    return m.group(1)


def test_the_cost_line_shows_rate_hours_source_and_date(gpt3):
    r, _ = gpt3
    cb = r.cost_breakdown_usd
    assert f"{cb['gpu_hours'] / 1e3:.1f}" == "529.5" and f"{cb['total_usd'] / 1e6:.2f}" == "1.06"
    expected = "$1.06 M = 1.06 M (2.00 $/GPU-h x 529.5 k GPU-h, cloud-on-demand, 2026-06)"
    assert _row(str(r), "cost") == expected


def test_the_cost_line_between_islands_names_the_egress(two_dc):
    r, _ = two_dc
    text = str(r)
    assert _row(text, "cost") == (
        "$7.26 M = 1.34 M GPU time (rate x GPU-hours per island below) + egress 5.92 M "
        "(131.6 PB sent between islands)"
    )
    west = _row(text, "dc-west")
    assert re.search(
        r"\b2\.69 +371,380 +\$999,012 +\$5,920,426 +\$6,919,438 +cloud-on-demand, 2026-06$", west
    )
    assert re.search(r"\b0\.93 +371,380 +\$344,781 +\$0 +\$344,781 +owned, 2026-06$", _row(text, "dc-east"))


def test_the_table_shows_the_layout_and_memory_blocks(gpt3):
    text = str(gpt3[0])
    assert _row(text, "parallelism") == "tp 8 x pp 8 x cp 1 x dp 16 = 1,024 GPUs (sequence parallel)"
    assert _row(text, "micro-batches") == (
        "96 per step per pipeline (micro_batch 1 x 96 x dp 16 = 1,536 sequences per step)"
    )
    assert _row(text, "layers per stage") == "12 (4 per virtual stage)"
    mb = gpt3[0].memory_breakdown_gb
    assert re.match(
        rf"{mb['activations']:.1f} +{mb['activations'] / gpt3[0].memory_per_gpu_gb:.1%}$",
        _row(text, "activations"),
    )
    assert _row(text, "= per GPU") == f"{gpt3[0].memory_per_gpu_gb:.1f}  100.0%"


def test_compute_utilization_is_shown_only_between_islands(gpt3, two_dc):
    assert "compute utilization" not in str(gpt3[0])  # 100 % by definition on one island
    assert _row(str(two_dc[0]), "compute utilization") == f"{two_dc[0].compute_utilization:.1%}"


def test_one_number_format_per_column(two_dc):
    text = str(two_dc[0])
    assert "e+" not in text  # 10,000 to 999,999 with separators, never 6.28e+04
    assert _row(text, "tokens/s (total)") == f"{two_dc[0].tokens_per_s:,.0f}"
    block = text.split("\nbreakdown", 1)[1].split("\n\n", 1)[0].splitlines()
    assert block[0].split() == ["time", "(s)", "share"]
    cells = [ln.split()[-2] for ln in block[2:]]
    assert cells and all(re.fullmatch(r"\d+\.\d{3}", c) for c in cells), cells
    tokens = [ln.split()[3] for ln in text.split("\nisland ", 1)[1].splitlines()[2:4]]
    assert tokens == [f"{i['tokens_per_s']:,.0f}" for i in two_dc[0].islands]


def test_number_formatters():
    assert fmt_num(62_800.4) == "62,800" and fmt_num(1_243_695.0) == "1,243,695"
    assert fmt_num(760.44) == "760.4" and fmt_num(338.0) == "338.0" and fmt_num(9.5) == "9.500"
    assert fmt_count(1024.0) == "1,024" and fmt_count(None) == "-"
    assert fmt_times([3.3894, 0.16757, 0.00134, None]) == ("s", ["3.389", "0.168", "0.001", "-"])
    assert fmt_times([0.09951, 0.0]) == ("ms", ["99.51", "0.00"])
    assert fmt_times([2e-6]) == ("us", ["2.0"])


# ---- render_table -------------------------------------------------------------------------------


def test_render_table_is_plain_ascii_off_a_terminal_and_never_truncates():
    long = "x" * 400
    text = render_table(("name", "value"), [("island[0] [bold]", "1,024"), (long, "-")], terminal=False)
    lines = text.splitlines()
    assert lines[0] == "name" + " " * 398 + "value"
    assert set(lines[1]) == {"-", " "}
    assert lines[2] == "island[0] [bold]" + " " * 386 + "1,024"  # markup stays text; numbers right
    assert lines[3] == long + "      -"
    assert text.isascii() and "\x1b" not in text


def test_render_table_draws_a_line_on_a_terminal_and_keeps_the_title():
    text = render_table(("a", "b"), [("x", "1")], title="T", terminal=True)
    assert text.splitlines()[0] == "T" and "─" in text and "\x1b" not in text


def test_a_text_column_is_left_aligned_and_a_number_column_right_aligned():
    text = render_table(("k", "n"), [("a", "5"), ("bbb", "12.5 s")], terminal=False)
    assert text.splitlines()[2:] == ["a         5", "bbb  12.5 s"]


# ---- assumptions --------------------------------------------------------------------------------


def test_diloco_defaults_and_convergence_are_stated():
    r = shardmeter.estimate(THREE, overrides=["sync.strategy=diloco"])
    assert not any("assumed" in a for a in r.assumptions)  # the file sets both
    assert any(a.startswith("convergence not priced: diloco with 100 local steps") for a in r.assumptions)
    d = shardmeter.load_scenario(THREE).to_dict()
    d["sync"] = {"strategy": "diloco"}
    r = shardmeter.estimate(d)
    assert r.assumptions[0] == (
        "sync.inner_steps = 500 and sync.compression_bits = 16 assumed "
        "(diloco's default; the scenario does not set them)"
    )
    assert f"note: {r.assumptions[0]}" in str(r)


def test_allreduce_between_islands_prices_no_convergence_change(two_dc):
    assert two_dc[0].assumptions == []


def test_communication_hidden_under_most_of_compute_is_noted(gpt3):
    # the micro-batch 2 run: communication-bound, its gathers hide under 98 % of the compute (the
    # micro-batch 4 run hides 79 % since each matrix hides only the next one's gather)
    r = shardmeter.estimate(str(ZERO3).replace("n384", "n768"))
    hidden, compute = sum(r.overlapped_s.values()), r.breakdown_s["compute"]
    assert hidden > 0.8 * compute
    (note,) = [a for a in r.assumptions if "hidden" in a]
    assert note.startswith(f"{hidden:.3f} s of communication per step is hidden under other work")
    assert f"up to {r.step_time_s + hidden:.3f} s" in note
    assert not any("hidden" in a for a in gpt3[0].assumptions)  # 0.13 s under 16 s of compute


# ---- prices -------------------------------------------------------------------------------------


def test_every_bundled_price_is_dated_and_each_rent_is_named_in_its_source():
    from shardmeter.plugins.costs import shardmeter_cost_sources

    sources = {c.name: c for c in shardmeter_cost_sources()}
    assert set(sources) == {"cloud-on-demand", "owned", "egress"}
    for c in sources.values():
        assert re.fullmatch(r"\d{4}-\d{2}", c.date) and len(c.source) > 100, c.name
    cloud = sources["cloud-on-demand"]
    for gpu, price in cloud.gpu_prices.items():
        assert f"{gpu} {price:.2f}" in cloud.source, gpu


def test_the_even_split_formula_matches_counting_chunk_by_chunk():
    from shardmeter.report.layout import even_stage_layers as _stage_layers

    for layers in range(1, 50):
        for pp in range(1, 9):
            for v in range(1, 5):
                if pp * v > layers:
                    continue
                n = pp * v
                chunks = [layers // n + (k < layers % n) for k in range(n)]
                want = [sum(chunks[s::pp]) for s in range(pp)]
                assert [_stage_layers(layers, pp, v, s) for s in range(pp)] == want, (layers, pp, v)
