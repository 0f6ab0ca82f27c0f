"""DeepSeek-V3 on a tiny random checkpoint (tools/make_deepseek_fixtures.py), as a Hugging Face folder and as the
GGUF llama.cpp's converter writes of it (`deepseek2`, f32: the same numbers): its latent attention (MLA, naive and
absorbed forms, the latent cache) and its routing (sigmoid scores, the selection bias, group-limited top-k, the
scaled weights, the shared expert, the dense first layer), against transformers' true float64 forward; cached
equal to the full recompute; the absorbed form equal to the naive one; the MLA bugs found by the diff where they act."""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from said import refused
from typer.testing import CliRunner

from engine import Session, make_backend, to_host
from engine.compare.diff import diff_scenario
from engine.loading import ScenarioError
from engine.loading.checkpoint import load_checkpoint
from tinyllm_tui.cli import app

FOLDER = Path(__file__).parent / "fixtures" / "deepseek_v3"
GGUF = Path(__file__).parent / "fixtures" / "gguf-deepseek2" / "model.gguf"
SOURCES = {"hf": FOLDER, "gguf": GGUF}
REF = dict(np.load(FOLDER / "reference.npz"))
IDS = [int(t) for t in REF["ids"]]
MOE_LAYERS = [int(layer) for layer in REF["moe_layers"]]
F64 = make_backend("numpy", "float64")


def scenario(absorbed: bool = False, source: str = "hf", **moe_changes):
    found = load_checkpoint(SOURCES[source], ids=IDS, max_new_tokens=len(REF["greedy_ids"]))
    model = replace(found.model, mla=replace(found.model.mla, absorbed=absorbed))
    return replace(found, model=replace(model, moe=replace(model.moe, **moe_changes)) if moe_changes else model)


@functools.cache
def run(absorbed: bool = False, source: str = "hf"):
    session = Session(scenario(absorbed, source), F64)
    return session, list(session.steps())


def values(states, name: str, round_: int) -> np.ndarray:
    return next(to_host(s.values) for s in states if s.name == name and s.round == round_)


def rounds(states) -> list[int]:
    return sorted({s.round for s in states})


# -- against transformers ----------------------------------------------------------------------------------
def test_the_fixture_has_a_dense_first_layer_latent_attention_everywhere_and_no_near_tie():
    spec = scenario().model
    assert [(b.mixer, b.ffn) for b in spec.blocks] == [("mla", "dense"), ("mla", "moe"), ("mla", "moe")]
    assert spec.mla.q_lora_rank == 12 and spec.moe.groups == 2 and spec.moe.routed_scale == 2.5
    assert REF["float32_ops"] == 0 and REF["ops"] > 1000
    for name, k in (("selection", 2), ("groups", 1)):
        for ref in (REF[name], REF[f"step_{name}"]):
            ordered = -np.sort(-ref, axis=-1)
            assert (ordered[..., k - 1] - ordered[..., k]).min() >= 1e-3


FORMS = pytest.mark.parametrize("absorbed, source", [(False, "hf"), (True, "hf"), (False, "gguf"), (True, "gguf")],
                                ids=["naive", "absorbed", "gguf-naive", "gguf-absorbed"])


@FORMS
def test_prefill_router_chosen_experts_every_layer_and_logits_match_transformers(absorbed, source):
    _, states = run(absorbed, source)
    for i, layer in enumerate(MOE_LAYERS):
        ours = values(states, f"blocks.{layer}.mlp.hook_router_logits", 0)
        assert np.abs(ours - REF["router_logits"][i]).max() <= 1e-9
        selection = values(states, f"blocks.{layer}.mlp.hook_selection_scores", 0)
        assert np.array_equal(np.isinf(selection), np.isinf(REF["selection"][i]))  # the same groups kept
        kept = np.isfinite(selection)
        assert np.abs(selection[kept] - REF["selection"][i][kept]).max() <= 1e-9
        assert np.array_equal(values(states, f"blocks.{layer}.mlp.hook_topk", 0), REF["topk"][i])
    for layer, theirs in enumerate(REF["layers"]):
        assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", 0) - theirs).max() <= 1e-9
    assert np.abs(values(states, "unembed.hook_out", 0) - REF["logits"]).max() <= 1e-9


@FORMS
def test_every_cached_decode_pass_routes_and_computes_as_transformers_and_greedy_ids_agree(absorbed, source):
    session, states = run(absorbed, source)
    assert rounds(states) == list(range(len(REF["step_logits"])))
    for round_ in rounds(states):
        for i, layer in enumerate(MOE_LAYERS):
            ours = values(states, f"blocks.{layer}.mlp.hook_router_logits", round_)[-1]
            assert np.abs(ours - REF["step_router_logits"][round_, i]).max() <= 1e-9
            assert np.array_equal(values(states, f"blocks.{layer}.mlp.hook_topk", round_)[-1], REF["step_topk"][round_, i])
        for layer, theirs in enumerate(REF["step_layers"][round_]):
            assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", round_)[-1] - theirs).max() <= 1e-9
        assert np.abs(values(states, "unembed.hook_out", round_)[-1] - REF["step_logits"][round_]).max() <= 1e-9
    assert list(session.results[0].generated) == REF["greedy_ids"].tolist()


@pytest.mark.parametrize("source", SOURCES)
def test_the_cache_holds_transformers_latent_rows_and_rotated_rope_keys_and_their_real_bytes(source):
    _, states = run(False, source)
    last = states[-1].caches
    for layer, cache in enumerate(last):
        items = cache.dump_items()
        assert set(items) == {"cache_latent", "cache_rope_key"}
        assert np.abs(to_host(items["cache_latent"]) - REF["latent"][layer]).max() <= 1e-9
        assert np.abs(to_host(items["cache_rope_key"]) - REF["rope_key"][layer]).max() <= 1e-9
        rows = len(REF["ids"]) + len(REF["greedy_ids"]) - 1
        assert cache.length == rows and cache.nbytes == rows * (10 + 4) * 8  # not 2 · heads · d_head per token


def test_the_views_expand_the_latent_into_the_naive_forms_per_head_keys_and_values():
    _, states = run()
    last_round = max(rounds(states))
    state = next(s for s in reversed(states) if s.name == "blocks.1.attn.hook_k")
    views = {view.name: view for view in state.caches[1].views()}
    assert list(views) == ["latent", "rope key", "K", "V"]
    assert (views["K"].head_width, views["V"].head_width) == (6 + 4, 5)
    assert np.array_equal(to_host(views["K"].values), values(states, "blocks.1.attn.hook_k", last_round))
    assert np.array_equal(to_host(views["V"].values), values(states, "blocks.1.attn.hook_v", last_round))
    rope = to_host(views["K"].values).reshape(-1, 4, 10)[:, :, 6:]  # every head's rope part is the one shared key
    assert all(np.array_equal(rope[:, h], to_host(views["rope key"].values)) for h in range(4))


def test_an_empty_latent_cache_shows_its_views_empty():
    """Before the first token (the cache panel on step 0) the per-head views expand zero rows."""
    session, _ = run()
    views = session.model.empty_caches()[0].views()
    assert [(view.name, tuple(view.values.shape)) for view in views] == [
        ("latent", (0, 10)), ("rope key", (0, 4)), ("K", (0, 40)), ("V", (0, 20))]


def test_the_cache_panel_titles_the_latent_views_in_the_language_asked_and_k_v_as_notation():
    from tinyllm_tui.debugger.debugger import Debugger
    from tinyllm_tui.tui.i18n import words

    titles = Debugger(scenario()).frame.cache.titles
    assert [words(title, "en") for title in titles] == ["latent", "rope key", "K", "V"]
    assert [words(title, "zh") for title in titles] == ["潜向量", "rope键", "K", "V"]


@FORMS
def test_cached_decode_equals_the_full_recompute(absorbed, source):
    diffs = diff_scenario(scenario(absorbed, source), F64)
    assert {d.round for d in diffs} == set(range(len(REF["greedy_ids"])))
    assert any(d.name == "blocks.2.attn.hook_latent" for d in diffs if d.round > 0)
    assert max(d.max_abs for d in diffs) <= 1e-12


@pytest.mark.parametrize("source", SOURCES)
def test_the_absorbed_form_equals_the_naive_form_on_every_operator_they_share(source):
    _, naive = run(False, source)
    _, absorbed = run(True, source)
    theirs = {(s.name, s.round, s.head): to_host(s.values) for s in absorbed}
    shared = [(s, theirs[(s.name, s.round, s.head)]) for s in naive if (s.name, s.round, s.head) in theirs]
    names = {s.name for s, _ in shared}
    assert {"blocks.0.attn.hook_attn_scores", "blocks.0.attn.hook_pattern", "blocks.0.attn.hook_z",
            "blocks.2.attn.hook_result", "unembed.hook_out"} <= names
    def gap(ours: np.ndarray, other: np.ndarray) -> float:  # −∞ where both mask a key
        both = np.isinf(ours) & (ours == other)
        return float(np.abs(np.where(both, 0.0, ours) - np.where(both, 0.0, other)).max())

    worst = max(gap(to_host(s.values), other) for s, other in shared)
    assert worst <= 1e-12
    assert {s.name for s in absorbed} - names >= {"blocks.0.attn.hook_q_absorbed", "blocks.0.attn.hook_z_latent"}


def test_the_absorbed_query_is_q_nope_times_w_uk_transposed_per_head():
    """An independent check of the absorption: q̃_h · latentᵀ equals q_nope_h · (latent · W_UK_h)ᵀ."""
    session, states = run(True)
    q = values(states, "blocks.0.attn.hook_q", 0).reshape(len(IDS), 4, 10)
    latent = values(states, "blocks.0.attn.hook_latent", 0)
    kv_b = np.asarray(session.scenario.weights["blocks.0.attn.wkv_b"]).reshape(10, 4, 11)
    q_abs = values(states, "blocks.0.attn.hook_q_absorbed", 0).reshape(len(IDS), 4, 10)
    for h in range(4):
        assert np.abs(q_abs[:, h] @ latent.T - q[:, h, :6] @ (latent @ kv_b[:, h, :6]).T).max() <= 1e-12


def test_the_absorbed_forms_registry_lists_exactly_the_hooks_it_yields():
    session, states = run(True)
    yielded = {(s.name, s.head) for s in states if not s.name.startswith("sample.")}
    listed = {(site.hook.text, head) for site in session.model.hooks if not site.routed
              for head in (range(site.heads) if site.heads else [None])}
    routed = {(site.hook.text, head) for site in session.model.hooks if site.routed for head in [None]}
    assert listed | (yielded & routed) == yielded


@pytest.mark.parametrize("absorbed", [False, True], ids=["naive", "absorbed"])
def test_every_operator_of_latent_attention_and_its_routing_is_explained_in_both_languages(absorbed):
    from tinyllm_tui.debugger.frame import hook_key
    from tinyllm_tui.tui.explanations import texts_of

    _, states = run(absorbed)
    for state in states:
        if state.layer is not None:
            texts = texts_of(hook_key(state))
            assert texts and len(texts["en"]) == len(texts["zh"]) == 4, state.name
    keys = {hook_key(s) for s in states if s.name.endswith(("attn.hook_k", "attn.hook_v"))}
    assert keys == (set() if absorbed else {"hook_k(latent)", "hook_v(latent)"})


# -- DeepSeek-V3 routing -----------------------------------------------------------------------------------
def test_the_weights_are_the_unbiased_scores_of_the_chosen_experts_normalised_and_scaled():
    _, states = run()
    for round_ in rounds(states):
        for layer in MOE_LAYERS:
            scores = values(states, f"blocks.{layer}.mlp.hook_router_scores", round_)
            chosen = values(states, f"blocks.{layer}.mlp.hook_topk", round_).astype(int)
            picked = np.take_along_axis(scores, chosen, axis=1)
            expected = 2.5 * picked / picked.sum(axis=1, keepdims=True)
            assert np.abs(values(states, f"blocks.{layer}.mlp.hook_topk_weights", round_) - expected).max() <= 1e-15


def test_the_selection_bias_chooses_and_group_limits_hold():
    _, states = run()
    for layer in MOE_LAYERS:
        chosen = values(states, f"blocks.{layer}.mlp.hook_topk", 0).astype(int)
        assert (chosen // 4 == chosen[:, :1] // 4).all()  # topk_group 1: both experts from one group of four
    found = scenario()
    weights = {name: np.asarray(found.weights[name]) for name in found.weights}
    weights |= {f"blocks.{layer}.mlp.score_bias": np.zeros(8) for layer in MOE_LAYERS}
    other = list(Session(replace(found, weights=weights), F64).steps())
    assert any(not np.array_equal(values(other, f"blocks.{layer}.mlp.hook_topk", 0), REF["topk"][i])
               for i, layer in enumerate(MOE_LAYERS))


@pytest.mark.parametrize("change", [{"routed_scale": 1.0}, {"d_shared": 0}, {"groups": 1}, {"sigmoid": False}])
def test_each_routing_setting_changes_what_it_computes(change):
    states = list(Session(scenario(**change), F64).steps())
    assert np.abs(values(states, "unembed.hook_out", 0) - REF["logits"]).max() > 1e-6


# -- injected bugs -------------------------------------------------------------------------------------------
def first_differing(absorbed: bool, bug: str):
    diffs = diff_scenario(scenario(absorbed), F64, inject=bug)
    return next(d for d in diffs if not d.agrees)


def test_a_rope_key_cached_before_rope_is_found_at_the_first_operator_that_reads_the_cache():
    naive = first_differing(False, "rope-key-unrotated")
    assert (naive.name, naive.round) == ("blocks.0.attn.hook_k", 0)  # the rope columns of the expanded keys
    absorbed = first_differing(True, "rope-key-unrotated")
    assert (absorbed.name, absorbed.round, absorbed.head) == ("blocks.0.attn.hook_attn_scores", 0, 0)


def test_a_k_cache_bug_latent_attention_has_no_place_for_is_refused_not_shown_as_agreeing():
    result = CliRunner().invoke(app, ["diff", str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", "2",
                                      "--inject", "transposed-k"])
    assert result.exit_code == 2 and "not per-head K" in result.output + (result.stderr or "")


def test_w_uk_untransposed_in_the_absorbed_form_is_found_at_the_absorbed_query():
    found = first_differing(True, "absorbed-uk-untransposed")
    assert (found.name, found.round) == ("blocks.0.attn.hook_q_absorbed", 0)
    result = CliRunner().invoke(app, ["diff", str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", "2",
                                      "--inject", "absorbed-uk-untransposed"])
    assert result.exit_code == 2 and "naive form" in result.output + (result.stderr or "")


# -- the loader and the CLI ------------------------------------------------------------------------------------
def copy_with(tmp_path: Path, **config_changes) -> Path:
    folder = tmp_path / "deepseek"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | config_changes))
    return folder


@pytest.mark.parametrize("change, key", [({"rope_interleave": False}, "rope_interleave"),
                                         ({"scoring_func": "softmax"}, "scoring_func"),
                                         ({"n_group": 3}, "n_group"), ({"topk_group": 3}, "topk_group"),
                                         ({"first_k_dense_replace": 9}, "first_k_dense_replace")])
def test_an_unsupported_setting_is_refused_by_its_key(tmp_path, change, key):
    with refused(ScenarioError, key):
        load_checkpoint(copy_with(tmp_path, **change), ids=IDS)


def test_the_mla_option_picks_the_form_and_the_diff_finds_both_equal():
    args = ["diff", str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", "2"]
    for form in ("naive", "absorbed"):
        result = CliRunner().invoke(app, [*args, "--mla", form])
        assert result.exit_code == 0, result.output
        assert "cached equals full recompute: every operator within 1e-12" in result.output
        assert ("blocks.0.attn.hook_q_absorbed" in result.output) == (form == "absorbed")
    bad = CliRunner().invoke(app, [*args, "--mla", "fused"])
    assert bad.exit_code == 2 and bad.stderr.endswith(
        "Invalid value for --mla: unknown form 'fused' (expected naive or absorbed)\n")
    zh = CliRunner().invoke(app, [str(FOLDER), "--lang", "zh", "--mla", "fused"])  # the debugger's language
    assert zh.exit_code == 2 and zh.stderr.endswith("--mla 的值无效：未知的形式 'fused'（应为 naive 或 absorbed）\n")


def test_check_against_a_dump_of_transformers_latent_cache_finds_a_planted_row(tmp_path):
    """The dump holds transformers' own latent rows and rope keys after decode 2 (its DynamicCache), one latent cell
    of layer 1's newest row planted: that pass, layer, state and row are named, the rest agrees."""
    from safetensors.numpy import save_file

    dump = {f"decode.2.blocks.{layer}.attn.{name}": REF[ref][layer][None, :22].copy()
            for layer in range(3) for name, ref in (("cache_latent", "latent"), ("cache_rope_key", "rope_key"))}
    dump["decode.2.blocks.1.attn.cache_latent"][0, 21, 3] += 1e-3
    save_file(dump, tmp_path / "mine.safetensors")
    result = CliRunner().invoke(app, ["check", str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", "3",
                                      "--against", str(tmp_path / "mine.safetensors")])
    assert result.exit_code == 1
    assert "first divergence: decode.2 · blocks.1.attn.cache_latent · [21, 3]" in result.output
    assert "✗ decode.2  blocks.1.attn.cache_latent" in result.output
    assert "✓ decode.2  blocks.2.attn.cache_latent" in result.output and "✓ decode.2  blocks.1.attn.cache_rope_key" in result.output


def test_the_saved_activations_of_a_latent_model_check_against_itself(tmp_path):
    """q, the rope parts, v and z have heads of different widths: they are dumped stacked, and read back."""
    args = [str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", "2"]
    saved = CliRunner().invoke(app, ["run", *args, "--save-activations", str(tmp_path / "ref.safetensors")])
    assert saved.exit_code == 0, saved.output
    checked = CliRunner().invoke(app, ["check", *args, "--against", str(tmp_path / "ref.safetensors")])
    assert checked.exit_code == 0 and "✓ decode.1  blocks.2.attn.hook_rot_q" in checked.output


def test_the_gguf_holds_kv_b_split_and_experts_merged_as_llama_cpps_converter_writes_them():
    """Its parameters are read from attn_k_b / attn_v_b and the merged ffn_*_exps: the same numbers as the folder's."""
    from engine.loading.gguf_model import GGUFModel

    tensors = GGUFModel(GGUF).tensors
    assert {"blk.1.attn_k_b.weight", "blk.1.attn_v_b.weight", "blk.1.ffn_gate_exps.weight", "blk.1.exp_probs_b.bias",
            "blk.1.ffn_up_shexp.weight"} <= set(tensors) and "blk.1.attn_kv_b.weight" not in tensors
    hf, gguf = scenario().weights, scenario(source="gguf").weights
    for name in ("blocks.1.attn.wkv_b", "blocks.1.attn.wq_b", "blocks.1.attn.wkv_a", "blocks.2.mlp.experts.5.w_down",
                 "blocks.2.mlp.score_bias", "blocks.1.mlp.shared.w_up"):
        assert np.array_equal(np.asarray(hf[name]), np.asarray(gguf[name])), name


def edited_gguf(tmp_path: Path, key: str, kind: int | None, value=None) -> Path:
    """The fixture with metadata `key` set (kind None: removed)."""
    import gguf_bytes as gb

    parsed = gb.parse(GGUF.read_bytes())
    if kind is None:
        parsed.fields = [field for field in parsed.fields if field[0] != key]
    else:
        parsed.set(key, kind, value)
    path = tmp_path / "edited.gguf"
    path.write_bytes(gb.serialize(parsed))
    return path


@pytest.mark.parametrize("key, kind, value", [("deepseek2.expert_gating_func", None, None),
                                              ("deepseek2.expert_gating_func", 4, 1),
                                              ("deepseek2.rope.scaling.type", 8, "linear"),
                                              ("deepseek2.expert_group_count", 4, 3),
                                              ("deepseek2.attention.key_length_mla", 4, 4)])
def test_an_unsupported_gguf_setting_is_refused_by_its_key(tmp_path, key, kind, value):
    with refused(ScenarioError, key.replace(".", r"\.")):
        load_checkpoint(edited_gguf(tmp_path, key, kind, value), ids=IDS)


def test_yarns_attention_factor_scales_the_rotated_q_and_k_when_mscale_differs_from_mscale_all_dim(tmp_path):
    """transformers: cos and sin times mscale(factor, mscale) / mscale(factor, mscale_all_dim), mscale(s, m) =
    0.1·m·ln s + 1; the fixture's are equal (factor 1), a config with mscale 1 turns q and k by the ratio."""
    config = json.loads((FOLDER / "config.json").read_text())
    params = config["rope_parameters"] | {"mscale": 1.0}
    changed = load_checkpoint(copy_with(tmp_path, rope_parameters=params), ids=IDS, max_new_tokens=1)
    factor = (0.1 * 1.0 * np.log(4.0) + 1) / (0.1 * 0.7 * np.log(4.0) + 1)
    assert scenario().model.rope_scale == 1.0 and abs(changed.model.rope_scale - factor) <= 1e-15
    ours = list(Session(changed, F64).steps())
    for name in ("blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k"):
        assert np.abs(values(ours, name, 0) - factor * values(run()[1], name, 0)).max() <= 1e-14


def test_a_patched_latent_is_what_the_cache_keeps_and_cached_still_equals_full():
    from engine.interventions import parse_intervention

    patched = replace(scenario(), interventions=(parse_intervention("blocks.0.attn.hook_latent[3,:]=0"),))
    states = list(Session(patched, F64).steps())
    latent = to_host(states[-1].caches[0].dump_items()["cache_latent"])
    assert not latent[3].any() and latent[2].any() and np.abs(latent[3] - REF["latent"][0][3]).max() > 1e-3
    assert max(d.max_abs for d in diff_scenario(patched, F64)) <= 1e-12


def test_the_route_margin_is_read_from_the_selection_scores_top_k_chose_by():
    from engine.layers.moe_ffn import route

    _, states = run()
    for i, layer in enumerate(MOE_LAYERS):
        topk = next(s for s in states if s.name == f"blocks.{layer}.mlp.hook_topk" and s.round == 0)
        ordered = -np.sort(-REF["selection"][i], axis=-1)
        assert np.abs(route(topk.op).margins - (ordered[:, 1] - ordered[:, 2])).max() <= 1e-9


def test_without_q_lora_rank_one_q_projection_reads_the_normed_input_and_both_forms_agree():
    """DeepSeek-V2-Lite's query (q_lora_rank null: `q_proj`); checked against its own definition, no reference."""
    found = scenario()
    rng = np.random.default_rng(0)
    weights = {name: np.asarray(found.weights[name]) for name in found.weights if ".attn.wq_" not in name
               and ".attn.q_a_norm" not in name}
    weights |= {f"blocks.{layer}.attn.wq": rng.normal(0, 0.3, (24, 40)) for layer in range(3)}
    for absorbed in (False, True):
        model = replace(found.model, mla=replace(found.model.mla, q_lora_rank=None, absorbed=absorbed))
        lite = replace(found, model=model, weights=weights)
        states = list(Session(lite, F64).steps())
        q, normed = (values(states, f"blocks.1.{name}", 0) for name in ("attn.hook_q", "ln1.hook_out"))
        assert np.abs(q - normed @ weights["blocks.1.attn.wq"]).max() <= 1e-14
        assert not any(s.name.endswith((".attn.hook_q_a", ".attn.hook_q_a_normed")) for s in states)
        assert max(d.max_abs for d in diff_scenario(lite, F64)) <= 1e-12
        logits = values(states, "unembed.hook_out", 0)
        if absorbed:
            assert np.abs(logits - naive_logits).max() <= 1e-12
        naive_logits = logits
