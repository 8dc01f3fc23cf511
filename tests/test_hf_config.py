"""``[model] hf_config``: Hugging Face config.json files (tests/fixtures/hf, sources in SOURCES.md)
mapped to ``[model]`` keys, their parameter counts against the published figures, the new MoE
and MLA shape keys against first-principles counts, and the one-line errors."""

from __future__ import annotations

import json
import pathlib

import pytest

import shardmeter
from shardmeter.errors import ScenarioError
from shardmeter.load.hf_config import model_table_from_hf
from shardmeter.load.scenario import load_scenario
from shardmeter.model import formulas as F

HF = pathlib.Path(__file__).parent / "fixtures" / "hf"


def _scenario(tmp_path, model: str, name: str = "s.toml") -> pathlib.Path:
    p = tmp_path / name
    p.write_text(
        f'[model]\n{model}\n[training]\nglobal_batch = 64\n[[island]]\ngpu = "h100-sxm"\nnodes = 128\n',
        encoding="utf-8",
    )
    return p


def _copy(tmp_path, fixture: str) -> str:
    (tmp_path / "config.json").write_text(
        (HF / f"{fixture}.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    return 'hf_config = "config.json"'


def _active(m) -> float:
    """Activated parameters of a loaded ModelSpec (formulas.active_params)."""
    q, kv = m.heads * m.d_head, m.n_kv_heads * m.d_head
    shape = dict(
        moe_ffn=m.d_moe_ffn,
        shared_experts=m.shared_experts,
        dense_layers=m.dense_layers,
        v_dim=m.n_kv_heads * m.d_v_head,
        o_dim=m.heads * m.d_v_head,
        q_rank=m.q_lora_rank or 0,
        kv_rank=m.kv_lora_rank or 0,
    )
    args = (m.layers, m.hidden, q, kv, m.d_ffn, m.ffn == "swiglu", m.vocab, m.tied_embeddings)
    return F.active_params(*args, m.experts, m.experts_per_token, **shape)


# Published totals (and activated parameters), with their sources. Every total within 0.5 %; the
# activated figures are published to two significant figures ("37B", "3.3B"), so within 3 %.
PUBLISHED = {
    # Llama 3 8B: 8.03 B, the safetensors count on meta-llama/Meta-Llama-3-8B's model page.
    "llama-3-8b": (8.03e9, None),
    # Llama 3.1 8B: 8.03 B, the safetensors count on meta-llama/Llama-3.1-8B's model page.
    "llama-3.1-8b": (8.03e9, None),
    # Mixtral 8x7B: 46.7 B total, 12.9 B active (Jiang et al. 2024, arXiv 2401.04088, Sec. 1-2).
    "mixtral-8x7b-v0.1": (46.7e9, 12.9e9),
    # DeepSeek-V3: 671 B total, 37 B activated (arXiv 2412.19437, abstract; MTP module excluded).
    "deepseek-v3": (671e9, 37e9),
    # Qwen2.5-7B: 7.61 B (the Qwen/Qwen2.5-7B model card, "Number of Parameters").
    "qwen2.5-7b": (7.61e9, None),
    # Gemma 2 9B: 8,324 M non-embedding + 917 M embedding (arXiv 2408.00118, Table 1).
    "gemma-2-9b": (9.241e9, None),
    # Qwen3-30B-A3B: 30.5 B total, 3.3 B activated (the Qwen/Qwen3-30B-A3B model card).
    "qwen3-30b-a3b": (30.5e9, 3.3e9),
    # Llama 3.1 70B: 70.6 B (meta-llama/Llama-3.1-70B model page, safetensors).
    "llama-3.1-70b": (70.6e9, None),
    # Mistral 7B v0.1: 7.24 B (mistralai/Mistral-7B-v0.1 model page, safetensors).
    "mistral-7b-v0.1": (7.24e9, None),
    # Mistral 7B v0.3: 7.25 B (mistralai/Mistral-7B-v0.3 model page, safetensors).
    "mistral-7b-v0.3": (7.25e9, None),
}


def test_every_bundled_config_has_a_published_figure():
    assert {p.stem for p in HF.glob("*.json")} == set(PUBLISHED)


@pytest.mark.parametrize("fixture", sorted(PUBLISHED))
def test_hf_config_scenario_gives_the_published_parameter_count(tmp_path, fixture):
    total, active = PUBLISHED[fixture]
    path = _scenario(tmp_path, _copy(tmp_path, fixture) + "\nseq_len = 4096")
    rep = shardmeter.estimate(str(path))
    assert rep.params == pytest.approx(total, rel=0.005)
    if active is not None:
        assert _active(load_scenario(str(path)).model) == pytest.approx(active, rel=0.03)


def test_llama3_8b_config_maps_to_the_llama3_8b_preset():
    table, _ = model_table_from_hf(json.loads((HF / "llama-3-8b.json").read_text()))
    preset = shardmeter.load_scenario(
        {
            "model": {"preset": "llama3-8b"},
            "training": {"global_batch": 8},
            "island": [{"gpu": "h100-sxm", "nodes": 1}],
        }
    ).model
    for k, v in table.items():
        assert getattr(preset, k) == v, k


def test_deepseek_v3_config_maps_moe_and_mla_fields():
    table, notes = model_table_from_hf(json.loads((HF / "deepseek-v3.json").read_text()))
    assert {
        k: table[k]
        for k in ("experts", "experts_per_token", "moe_ffn_hidden", "shared_experts", "dense_layers")
    } == {
        "experts": 256,
        "experts_per_token": 8,
        "moe_ffn_hidden": 2048,
        "shared_experts": 1,
        "dense_layers": 3,
    }
    assert (table["head_dim"], table["v_head_dim"], table["q_lora_rank"], table["kv_lora_rank"]) == (
        192,
        128,
        1536,
        512,
    )
    assert "kv_heads" not in table and table["tied_embeddings"] is False
    assert any("multi-head latent attention approximated" in n for n in notes)
    assert any("multi-token prediction" in n for n in notes)


def test_gemma2_geglu_tied_and_sliding_window_are_noted():
    table, notes = model_table_from_hf(json.loads((HF / "gemma-2-9b.json").read_text()))
    assert table["ffn"] == "swiglu" and table["head_dim"] == 256 and table["tied_embeddings"] is True
    assert any("GeGLU" in n for n in notes) and any("sliding-window attention (4096" in n for n in notes)


def test_qwen_moe_shared_expert_and_sparse_step():
    cfg = {
        "model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
        "vocab_size": 151936, "max_position_embeddings": 8192, "intermediate_size": 5632, "num_experts": 60,
        "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
        "decoder_sparse_step": 2, "mlp_only_layers": [1],
    }  # fmt: skip
    table, notes = model_table_from_hf(cfg)
    # sparse where (i + 1) % 2 == 0 and i not in [1]: layers 3, 5, ..., 23 -> 11 sparse, 13 dense
    assert (table["shared_experts"], table["moe_ffn_hidden"], table["dense_layers"]) == (4, 1408, 13)
    assert any("not all leading" in n for n in notes)


def test_keys_in_the_scenario_win_and_notes_reach_the_report(tmp_path):
    path = _scenario(tmp_path, _copy(tmp_path, "llama-3.1-8b") + "\nseq_len = 8192\nlayers = 16")
    sc = load_scenario(str(path))
    assert (sc.model.seq_len, sc.model.layers, sc.model.hidden) == (8192, 16, 4096)
    rep = shardmeter.estimate(str(path))
    assert any("max_position_embeddings (131072)" in n for n in rep.notes)


def test_without_seq_len_the_supported_context_is_used_and_noted(tmp_path):
    sc = load_scenario(str(_scenario(tmp_path, _copy(tmp_path, "llama-3.1-8b"))))
    assert sc.model.seq_len == 131072
    assert any("not necessarily its training length" in n for n in sc.notes)


def test_relative_to_the_scenario_file_and_to_the_current_directory_for_a_dict(tmp_path, monkeypatch):
    sub = tmp_path / "configs"
    sub.mkdir()
    _copy(sub, "mistral-7b-v0.3")
    path = _scenario(sub, 'hf_config = "config.json"')
    monkeypatch.chdir(tmp_path)
    assert load_scenario(str(path)).model.vocab == 32768
    monkeypatch.chdir(sub)
    sc = {
        "model": {"hf_config": "config.json"},
        "training": {"global_batch": 8},
        "island": [{"gpu": "h100-sxm", "nodes": 1}],
    }
    assert load_scenario(sc).model.vocab == 32768


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "$.model.hf_config: no such file '"),
        ("{not json", "is not JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"hidden_size": 8}', "required field 'num_hidden_layers' is missing"),
        (
            '{"num_hidden_layers": 2, "hidden_size": "4096", "num_attention_heads": 2}',
            "field 'hidden_size': expected an integer >= 1, got '4096'",
        ),
        (
            '{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "vocab_size": 10,'
            ' "max_position_embeddings": 64, "intermediate_size": 128, "tie_word_embeddings": "no"}',
            "field 'tie_word_embeddings': expected true or false, got 'no'",
        ),
    ],
    ids=["missing", "not-json", "not-object", "missing-field", "wrong-type", "wrong-bool"],
)
def test_bad_config_is_a_one_line_error_naming_the_key_and_field(tmp_path, text, message):
    if text is not None:
        (tmp_path / "config.json").write_text(text, encoding="utf-8")
    path = _scenario(tmp_path, 'hf_config = "config.json"')
    with pytest.raises(ScenarioError) as exc:
        load_scenario(str(path))
    msg = str(exc.value)
    assert "\n" not in msg and "$.model.hf_config" in msg and message in msg and str(path) in msg
    assert "config.json" in msg or text is not None


def test_preset_and_hf_config_together_is_an_error(tmp_path):
    path = _scenario(tmp_path, _copy(tmp_path, "llama-3-8b") + '\npreset = "llama3-8b"')
    with pytest.raises(
        ScenarioError, match=r"\$\.model\.hf_config: give either model\.preset or model\.hf_config, not both"
    ):
        load_scenario(str(path))


# -- the MoE and MLA shape keys, against counts from first principles --------------------------------


def _moe_model(**kw):
    return dict(layers=4, hidden=64, heads=4, vocab=100, seq_len=32, ffn="swiglu", ffn_hidden=256, experts=8,
                experts_per_token=2, **kw)  # fmt: skip


def test_moe_shape_keys_count_parameters_and_flops_from_first_principles():
    h, V, L = 64, 100, 4
    att = 4 * h * h  # Q, K, V, O: h x h each (MHA)
    norms = 4 * h
    moe_layer = (
        att + 3 * h * 32 * (8 + 1) + h * 8 + norms
    )  # 8 routed + 1 shared expert, 32 wide; router h x 8
    dense_layer = att + 3 * h * 256 + norms  # one 256-wide SwiGLU MLP
    expected = (L - 1) * moe_layer + 1 * dense_layer + 2 * V * h + 2 * h
    shape = dict(moe_ffn=32, shared_experts=1, dense_layers=1)
    assert F.model_params(L, h, h, h, 256, True, V, False, 8, **shape) == expected
    # forward FLOPs per token: 2 per weight met (2 routed + 1 shared expert), attention 4 s h
    fwd = (L - 1) * (2 * att + 2 * 3 * h * 32 * 3 + 2 * h * 8) + 2 * (att + 3 * h * 256) + L * 4 * 32 * h
    assert F.model_flops_per_token(L, h, h, h, 256, True, V, 32, 2, 8, **shape) == 3 * (fwd + 2 * h * V)
    unused = (L - 1) * 3 * h * 32 * 6  # 6 of the 8 routed experts idle per MoE layer
    assert F.active_params(L, h, h, h, 256, True, V, False, 8, 2, **shape) == expected - unused


def test_mla_attention_parameters_are_the_low_rank_projections():
    # DeepSeek-V3 layer (arXiv 2412.19437): q 7168->1536->128x192, kv 7168->512->128x(192+128), o 128x128->7168
    got = F.attention_params(
        7168, 128 * 192, 128 * 192, v_dim=128 * 128, o_dim=128 * 128, q_rank=1536, kv_rank=512
    )
    assert got == 7168 * 1536 + 1536 * 24576 + 7168 * 512 + 512 * (24576 + 16384) + 16384 * 7168


def test_default_shape_keys_change_nothing():
    base = {
        "model": _moe_model(),
        "training": {"global_batch": 16},
        "island": [{"gpu": "h100-sxm", "nodes": 1}],
    }
    same = {**base, "model": _moe_model(moe_ffn_hidden=256, shared_experts=0, dense_layers=0)}
    assert shardmeter.estimate(base).to_dict() == shardmeter.estimate(same).to_dict()


def test_shape_keys_move_the_model_consistently():
    def est(**kw):
        return shardmeter.estimate(
            {
                "model": _moe_model(**kw),
                "training": {"global_batch": 16},
                "island": [{"gpu": "h100-sxm", "nodes": 1}],
            }
        )

    base, shared = est(), est(shared_experts=2)
    assert shared.params - base.params == 4 * 2 * 3 * 64 * 256  # two more 256-wide experts per layer
    assert (
        shared.model_flops_per_token > base.model_flops_per_token
        and shared.memory_per_gpu_gb > base.memory_per_gpu_gb
    )
    assert shared.step_time_s > base.step_time_s


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            {"experts": 1, "experts_per_token": 1, "shared_experts": 1},
            "$.model.shared_experts: applies to MoE models only",
        ),
        ({"dense_layers": 4}, "$.model.dense_layers: expected fewer than layers (4), got 4"),
        (
            {"experts": 1, "experts_per_token": 1, "moe_ffn_hidden": 64},
            "$.model.moe_ffn_hidden: applies to MoE models only",
        ),
    ],
)
def test_bad_shape_keys_are_errors_naming_the_key(model, message):
    sc = {
        "model": {**_moe_model(), **model},
        "training": {"global_batch": 16},
        "island": [{"gpu": "h100-sxm", "nodes": 1}],
    }
    with pytest.raises(ScenarioError) as exc:
        load_scenario(sc)
    assert message in str(exc.value)


# -- Llama 4, towers and attention kinds ----------------------------------------------------------

#: The text_config of meta-llama/Llama-4-Scout-17B-16E's config.json (the fields that shape it).
SCOUT_TEXT = {
    "model_type": "llama4_text", "hidden_act": "silu", "num_hidden_layers": 48, "hidden_size": 5120,
    "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "vocab_size": 202048, "max_position_embeddings": 10485760,
    "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
    "attention_chunk_size": 8192, "use_qk_norm": True, "tie_word_embeddings": False,
}  # fmt: skip


def _llama4(**text) -> dict:
    return {
        "model_type": "llama4",
        "text_config": {**SCOUT_TEXT, **text},
        "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408, "num_hidden_layers": 34},
    }


def test_llama4_scout_has_a_shared_expert_on_every_layer():
    table, notes = model_table_from_hf(_llama4())
    assert (table["experts"], table["experts_per_token"], table["shared_experts"]) == (16, 1, 1)
    assert (table["moe_ffn_hidden"], table["ffn_hidden"]) == (8192, 16384) and "dense_layers" not in table
    assert table["tied_embeddings"] is False and table["kv_heads"] == 8
    assert any("vision tower (vision_config)" in n for n in notes)
    assert any("chunked local attention (8192-token chunks" in n for n in notes)


def test_llama4_maverick_interleaves_moe_layers():
    # Maverick: 128 experts on every second layer (interleave_moe_layer_step 2: layers 1, 3, ..., 47)
    table, notes = model_table_from_hf(_llama4(num_local_experts=128, interleave_moe_layer_step=2))
    assert (table["experts"], table["dense_layers"]) == (128, 24)
    assert any("interleaved" in n for n in notes)
    moe_layers = _llama4(num_local_experts=128, moe_layers=[3, 7, 11])
    assert model_table_from_hf(moe_layers)[0]["dense_layers"] == 45


def test_llama4_parameter_count_from_first_principles():
    # Scout: per layer attention 2 x 5120 x (5120 + 1024) and 16 routed + 1 shared SwiGLU experts of
    # 8192 (3 x 5120 x 8192 each) with a 5120 x 16 router; untied 202048 x 5120 embedding and output;
    # norms as the formulas count them (4 h per layer, 2 h at the end)
    table, _ = model_table_from_hf(_llama4())
    table["seq_len"] = 8192
    sc = {"model": table, "training": {"global_batch": 512}, "island": [{"gpu": "h100-sxm", "nodes": 64}]}
    rep = shardmeter.estimate(sc)
    h = 5120
    layer = 2 * h * (h + 1024) + 17 * 3 * h * 8192 + h * 16 + 4 * h
    assert rep.params == 48 * layer + 2 * 202048 * h + 2 * h
    # Meta's model card gives 109 B in all, with the vision encoder this text model leaves out
    assert rep.params == pytest.approx(109e9, rel=0.015) and rep.params < 109e9


@pytest.mark.parametrize(
    ("cfg", "note"),
    [
        ({"model_type": "minimax"}, "minimax's lightning (linear) attention"),
        ({"model_type": "qwen3_next"}, "Gated DeltaNet linear attention"),
        (
            {"layer_types": ["sliding_attention", "full_attention"] * 2},
            "sliding-window attention on 2 of 4 layers",
        ),
        ({"sliding_window": 1024}, "sliding-window attention (1024 tokens)"),
        ({"audio_config": {"num_hidden_layers": 2}}, "the audio tower (audio_config)"),
    ],
)
def test_what_is_not_modelled_is_noted(cfg, note):
    base = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
            "max_position_embeddings": 4096, "intermediate_size": 128}  # fmt: skip
    _, notes = model_table_from_hf({**base, **cfg})
    assert any(note in n for n in notes), notes


def test_a_sliding_window_that_is_switched_off_is_not_noted():
    cfg = json.loads((HF / "qwen2.5-7b.json").read_text())
    _, notes = model_table_from_hf({**cfg, "sliding_window": 4096, "use_sliding_window": False})
    assert not any("sliding" in n for n in notes)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_hidden_layers", 1e400, "field 'num_hidden_layers': inf is not a finite number"),
        ("num_hidden_layers", 10**30, "beyond 1e+18"),
        ("num_hidden_layers", 2**41, "above 1.09951e+12"),
        ("hidden_size", 64.5, "expected an integer, got 64.5"),
        ("mlp_only_layers", [1, "x"], "field 'mlp_only_layers': expected a list of layer indices"),
    ],
)
def test_numbers_out_of_range_are_one_line_errors_naming_the_field(field, value, message):
    cfg = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
           "max_position_embeddings": 64, "intermediate_size": 128, "num_experts": 4,
           "num_experts_per_tok": 2, field: value}  # fmt: skip
    with pytest.raises(ScenarioError) as exc:
        model_table_from_hf(cfg)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_hostile_300_byte_config_is_read_without_building_per_layer_lists(tmp_path, capsys):
    import time

    from cli_helpers import run

    cfg = {"model_type": "deepseek_v3", "num_hidden_layers": 10**12, "hidden_size": 64,
           "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 64,
           "intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2,
           "first_k_dense_replace": 10**11, "moe_layer_freq": 3}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    assert len(path.read_bytes()) < 300
    start = time.perf_counter()
    table, _ = model_table_from_hf(cfg)
    code, out, _ = run(capsys, "import", "hf", path)
    assert time.perf_counter() - start < 1.0
    # layers i >= 1e11 with i % 3 == 0 are MoE: (1e12 - 1 - 100000000002) // 3 + 1 of them
    assert table["dense_layers"] == 10**12 - ((10**12 - 1 - 100000000002) // 3 + 1)
    assert code == 0 and "layers = 1000000000000" in out
