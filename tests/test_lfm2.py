"""LFM2 (short-conv and attention layers) on a tiny random checkpoint against transformers' true float64 forward
(tools/make_lfm2_fixtures.py): every layer, every state after every pass, the greedy ids; the cached rounds
against the full recompute (whole, chunked, batched); the two conv-window bugs caught where they act; the
config's refusals."""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from numpy_lfm2 import generation_dump

from engine import Session, to_host
from engine.backend import make_backend
from engine.compare.against import compare_generation
from engine.compare.diff import diff_batch, diff_scenario, first_divergence
from engine.faults import FAULTS
from engine.layers.causal_conv import DUMP_ITEM
from engine.loading.checkpoint import load_checkpoint
from engine.loading.document import ScenarioError
from engine.loading.hf import Tensors, read_spec

FIXTURES = Path(__file__).parent / "fixtures"
FOLDER = FIXTURES / "lfm2"
REF = dict(np.load(FOLDER / "reference.npz"))
IDS = [int(t) for t in REF["ids"]]
KERNEL, WIDTH = 3, 32  # the conv's taps, the hidden width
PASSES = ("prefill", "decode.1", "decode.2", "decode.3", "decode.4")


def scenario(folder: Path = FOLDER, ids=None, new_tokens: int = len(REF["greedy_ids"])):
    return load_checkpoint(folder, ids=ids or IDS, max_new_tokens=new_tokens)


@functools.cache
def run():
    session = Session(scenario(), make_backend("numpy", "float64"))
    return session, list(session.steps())


def values(states, name: str, round_: int) -> np.ndarray:
    return next(to_host(s.values) for s in states if s.name == name and s.round == round_)


def states_after(states, round_: int) -> tuple:
    """Every layer's state once the pass of `round_` is done."""
    return [s for s in states if s.round == round_][-1].caches


def test_the_fixture_mixes_conv_and_attention_layers_and_its_reference_is_float64_throughout():
    model = scenario().model
    assert [block.mixer for block in model.blocks] == ["short_conv", "attention", "short_conv"]
    assert {block.option("kernel") for block in model.blocks if block.mixer == "short_conv"} == {KERNEL}
    assert model.d_model == WIDTH and model.d_ff == 32 and model.qk_norm and model.n_kv_heads == 2  # int(2·48/3)
    assert REF["float32_ops"] == 0 and REF["ops"] > 1000
    assert len(IDS) > KERNEL  # the window is shorter than the prompt: it evicts


def test_prefill_every_layer_and_the_logits_match_transformers():
    _, states = run()
    for layer, theirs in enumerate(REF["layers"]):
        assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", 0) - theirs).max() <= 1e-9
    assert np.abs(values(states, "unembed.hook_out", 0) - REF["logits"]).max() <= 1e-9


def test_every_pass_its_layers_its_conv_windows_and_kv_caches_match_transformers_and_greedy_agrees():
    session, states = run()
    for round_ in range(len(REF["step_logits"])):
        for layer, theirs in enumerate(REF["step_layers"][round_]):
            assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", round_)[-1] - theirs).max() <= 1e-9
        assert np.abs(values(states, "unembed.hook_out", round_)[-1] - REF["step_logits"][round_]).max() <= 1e-9
        held = states_after(states, round_)
        for i, layer in enumerate(REF["conv_layers"]):
            theirs = REF["step_conv_states"][round_, i]  # transformers keeps K inputs; the next step reads K−1
            assert theirs.shape[0] == KERNEL
            window = held[layer]
            assert window.nbytes == (KERNEL - 1) * WIDTH * 8  # the same bytes in every pass
            assert np.abs(to_host(window.dump_items()[DUMP_ITEM]) - theirs[1:]).max() <= 1e-9
            assert window.differing({DUMP_ITEM: theirs}, lambda _, a, b: np.abs(a - b) > 1e-9) == frozenset()
        for i, layer in enumerate(REF["attention_layers"]):
            items = held[layer].dump_items()
            assert np.abs(to_host(items["cache_k"]) - REF[f"step_keys_{round_}"][i]).max() <= 1e-9
            assert np.abs(to_host(items["cache_v"]) - REF[f"step_values_{round_}"][i]).max() <= 1e-9
    assert list(session.results[0].generated) == REF["greedy_ids"].tolist()


def test_a_changed_row_of_transformers_conv_cache_is_marked_at_its_position():
    _, states = run()
    window = states_after(states, 2)[0]
    theirs = REF["step_conv_states"][2, 0].copy()
    theirs[-1, 5] += 1e-3  # the newest input: the position fed in round 2
    newest = len(IDS) + 1
    assert window.differing({DUMP_ITEM: theirs}, lambda _, a, b: np.abs(a - b) > 1e-9) == {newest}
    assert window.row_positions == (newest - 1, newest)


@pytest.mark.parametrize("chunk", [None, 7])
def test_the_cached_rounds_equal_the_full_recompute(chunk):
    checkpoint = scenario()
    checkpoint = replace(checkpoint, decode=replace(checkpoint.decode, prefill_chunk=chunk))
    diffs = diff_scenario(checkpoint)
    assert any(d.name == "blocks.2.conv.hook_conv" and d.round == 4 for d in diffs)
    assert max(d.max_abs for d in diffs) <= 1e-12


def test_a_batch_reads_a_rows_padding_as_zeros_in_the_conv_window():
    batch = replace(load_checkpoint(FOLDER, ids=[IDS, IDS[:9]], max_new_tokens=3), batch=True)
    diffs = diff_batch(batch)
    assert diffs and all(d.agrees for d in diffs)


@pytest.mark.parametrize("bug", ["conv-not-shifted", "conv-shifted-twice"])
def test_a_conv_window_bug_is_found_at_the_conv_that_reads_the_window_in_round_2(bug):
    diffs = diff_scenario(scenario(new_tokens=4), inject=bug)
    found = first_divergence([d for d in diffs if not d.state])  # the operators
    assert (found.round, found.name) == (2, "blocks.0.conv.hook_conv")  # round 1 kept the wrong window
    kept = first_divergence(diffs)  # the diff compares each layer's state at a round's end: the window itself
    assert (kept.round, kept.layer, kept.state) == (1, 0, True) and kept.name.startswith("blocks.0.conv.")
    assert FAULTS[bug].cannot_run(scenario(new_tokens=2)) is not None  # no second decode round reads it


def test_the_no_cache_layer1_bug_is_refused_on_layers_of_different_kinds():
    assert FAULTS["no-cache-layer1"].cannot_run(scenario()).code == "fault.mixed_layers"


# -- the config ---------------------------------------------------------------------------------------
def folder_with(tmp_path: Path, **changes) -> Path:
    folder = tmp_path / "lfm2"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "config.json").read_text()) | changes
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return folder


def spec(folder: Path):
    return read_spec(folder, Tensors(folder).held())[1]


def test_full_attn_idxs_stands_in_for_layer_types_and_the_ffn_width_follows_lfm2s_rule(tmp_path):
    folder = folder_with(tmp_path, layer_types=None, full_attn_idxs=[1])
    assert [b.mixer for b in spec(folder).blocks] == ["short_conv", "attention", "short_conv"]
    folder = folder_with(tmp_path / "b", block_auto_adjust_ff_dim=False)
    assert spec(folder).d_ff == 48
    folder = folder_with(tmp_path / "c", intermediate_size=None, block_ff_dim=6656, block_multiple_of=256)
    assert spec(folder).d_ff == 4608  # LFM2-350M's: int(2·6656/3) = 4437, rounded up to 256s


@pytest.mark.parametrize("changes, key", [({"conv_bias": True}, "conv_bias"),
                                          ({"layer_types": ["conv", "mamba", "conv"]}, "layer_types[1]"),
                                          ({"layer_types": ["conv"]}, "layer_types"),
                                          ({"conv_L_cache": 0}, "conv_L_cache")])
def test_what_is_not_supported_is_refused_naming_the_key(tmp_path, changes, key):
    with pytest.raises(ScenarioError) as refused:
        spec(folder_with(tmp_path, **changes))
    assert refused.value.path == key


def test_a_llama_config_with_conv_layer_types_is_refused(tmp_path):
    folder = folder_with(tmp_path, model_type="qwen3", use_sliding_window=True, sliding_window=4)
    with pytest.raises(ScenarioError) as refused:
        spec(folder)
    assert refused.value.path == "layer_types[0]"


# -- check --against: transformers through record_hf, and a porter's NumPy LFM2 with a planted bug -----------
def test_transformers_generation_through_record_hf_agrees_with_every_pass_and_its_k_column_conv_cache():
    from safetensors.numpy import load_file

    from safetensors import safe_open

    dump = FOLDER / "hf_generation.safetensors"
    assert load_file(dump)["decode.2.blocks.0.conv.conv_state"].shape == (WIDTH, KERNEL)  # [channels, K]
    with safe_open(dump, "np") as opened:
        ids = json.loads(opened.metadata()["ids"])
    assert len(ids) > KERNEL
    report = compare_generation(scenario(ids=ids), dump, atol=1e-9, rtol=0)
    assert report.first_divergence is None
    states = {(op.key.pass_, op.key.name) for op in report.ops if op.key.name.endswith("conv_state")}
    assert states == {(p, f"blocks.{layer}.conv.conv_state") for p in PASSES for layer in (0, 2)}


def test_the_numpy_lfm2_agrees_and_its_conv_state_not_shifted_in_round_2_is_found_there(tmp_path):
    clean = tmp_path / "clean.safetensors"
    generation_dump(FOLDER, IDS, len(PASSES)).save(clean)
    report = compare_generation(scenario(), clean, atol=1e-9, rtol=0)
    assert report.first_divergence is None and len(report.ops) == len(PASSES) * 7  # 3 layers, 3 states, logits
    planted = tmp_path / "planted.safetensors"
    generation_dump(FOLDER, IDS, len(PASSES), plant=(2, 2)).save(planted)
    found = compare_generation(scenario(), planted, atol=1e-9, rtol=0).first_divergence
    assert (found.key.pass_, found.key.name) == ("decode.2", "blocks.2.conv.conv_state")
    assert found.place.facts["position"].startswith(f"{len(IDS)} · ")  # the row before round 2's (21): it was not shifted


# -- the state panel ----------------------------------------------------------------------------------------
def test_the_cache_view_shows_the_conv_window_rows_by_position_and_token_and_its_constant_bytes():
    from tinyllm_tui.debugger.debugger import Debugger
    from tinyllm_tui.tui.i18n import words

    debugger, (_, states) = Debugger(scenario()), run()
    tokens = scenario().vocab.tokens
    conv = next(s for s in states if s.round == 2 and s.name == "blocks.0.conv.hook_conv")
    debugger.goto_step(conv.step)
    shown = debugger.frame.cache
    assert shown.layer == 0 and [view.name for view in shown.views] == ["conv window"]
    assert [words(title, lang) for title in shown.titles for lang in ("en", "zh")] == ["conv window", "卷积窗口"]
    newest = len(IDS) + 1  # round 2 feeds position 21
    label = lambda p: f"{p} · {tokens[conv.moment.context[p]]}"  # noqa: E731
    assert list(shown.views[0].rows) == [f" {label(newest - 1)}", f"+{label(newest)}"]  # + : this round's input
    bx = next(s for s in states if s.round == 2 and s.name == "blocks.0.conv.hook_bx")
    np.testing.assert_array_equal(shown.views[0].values[-1], to_host(bx.values)[0])
    assert (shown.length, shown.appended, shown.line.facts["kernel"], shown.line.facts["size"]) == (2, 1, KERNEL,
                                                                                                 2 * WIDTH * 8)
    first = next(s for s in states if s.name == "blocks.0.conv.hook_conv")
    debugger.goto_step(first.step)  # time travel back to the prefill: the same bytes, other rows
    assert debugger.frame.cache.line.facts["size"] == shown.line.facts["size"]
    assert list(debugger.frame.cache.views[0].rows)[0] == f"+{label(len(IDS) - 2)}"


def test_an_empty_conv_window_row_is_labelled_empty_and_the_memory_line_gives_its_bytes():
    from tinyllm_tui.debugger.debugger import Debugger
    from tinyllm_tui.presentation.cache_layout import row_words
    from tinyllm_tui.tui.widgets.cache import layout_line

    debugger = Debugger(load_checkpoint(FOLDER, ids=IDS[:1], max_new_tokens=1))
    debugger.subscribe(row_words("en"))  # as the TUI does, in its words
    debugger.goto_step(next(s for s in run()[1] if s.name == "blocks.0.conv.hook_conv").step)
    shown = debugger.frame.cache
    assert list(shown.views[0].rows)[0] == " empty"  # one token fed: the older row holds none yet
    assert layout_line(shown, "en") == "the last 2 inputs of a 3-tap conv · 512 B, the same at any length"
    assert "512 B" in layout_line(shown, "zh")  # 2 rows of 32 float64


# -- the GGUF file llama.cpp's converter wrote ---------------------------------------------------------------
GGUF = FIXTURES / "gguf-lfm2" / "lfm2.gguf"  # float32 tensors: the folder's weights, which the reference ran


@functools.cache
def gguf_run():
    session = Session(load_checkpoint(GGUF, ids=IDS, max_new_tokens=len(PASSES)), make_backend("numpy", "float64"))
    return session, list(session.steps())


def test_the_gguf_file_reads_as_the_folder_does_and_matches_transformers_over_every_pass_and_state():
    session, states = gguf_run()
    assert session.scenario.model.blocks == scenario().model.blocks
    for round_ in range(len(PASSES)):
        for layer, theirs in enumerate(REF["step_layers"][round_]):
            assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", round_)[-1] - theirs).max() <= 1e-9
        assert np.abs(values(states, "unembed.hook_out", round_)[-1] - REF["step_logits"][round_]).max() <= 1e-9
        held = states_after(states, round_)
        for i, layer in enumerate(REF["conv_layers"]):
            assert np.abs(to_host(held[layer].rows) - REF["step_conv_states"][round_, i, 1:]).max() <= 1e-9
        assert np.abs(to_host(held[1].k) - REF[f"step_keys_{round_}"][0]).max() <= 1e-9
    assert list(session.results[0].generated) == REF["greedy_ids"].tolist()
    assert max(d.max_abs for d in diff_scenario(session.scenario)) <= 1e-12


def gguf_with(tmp_path: Path, edit) -> Path:
    import gguf_bytes

    parsed = gguf_bytes.parse(GGUF.read_bytes())
    edit(parsed, gguf_bytes)
    path = tmp_path / "edited.gguf"
    path.write_bytes(gguf_bytes.serialize(parsed))
    return path


def _kv_counts(counts):
    return lambda parsed, gb: parsed.set("lfm2.attention.head_count_kv", gb.ARRAY, gb.Array(gb.INT32, counts))


def _conv_bias(parsed, gb):
    parsed.tensors[2].name = "blk.0.shortconv.conv.bias"  # the conv's kernel, renamed: a bias llama.cpp may write


@pytest.mark.parametrize("edit, key", [(_kv_counts([0, 2, 1]), "lfm2.attention.head_count_kv"),
                                       (_kv_counts([0, 2]), "lfm2.attention.head_count_kv"),
                                       (lambda parsed, gb: parsed.drop("lfm2.shortconv.l_cache"), "lfm2.shortconv.l_cache"),
                                       (_conv_bias, "blk.0.shortconv.conv.bias")])
def test_what_a_gguf_file_holds_that_is_not_supported_is_refused_by_name(tmp_path, edit, key):
    with pytest.raises(ScenarioError) as refused:
        load_checkpoint(gguf_with(tmp_path, edit), ids=IDS[:2])
    assert refused.value.path == key


# -- the kind's operators: explained, intervened on, stopped at -------------------------------------------
def test_every_short_conv_operator_is_explained_in_english_and_chinese():
    from tinyllm_tui.debugger.frame import hook_key
    from tinyllm_tui.tui.explanations import texts_of

    conv = [s for s in run()[1] if s.round == 0 and ".conv." in s.name]
    assert [s.name.rsplit(".", 1)[-1] for s in conv if s.layer == 0] == [
        "hook_in", "hook_b", "hook_c", "hook_x", "hook_bx", "hook_conv", "hook_y"]
    for state in conv:
        texts = texts_of(hook_key(state))
        assert len(texts["en"]) == len(texts["zh"]) == 4 and texts["en"] != texts["zh"], state.name


def test_the_convs_explanation_is_its_own_where_another_kind_files_a_hook_conv(monkeypatch):
    from types import SimpleNamespace

    from engine import layers
    from tinyllm_tui.debugger.frame import hook_key
    from tinyllm_tui.tui.explanations import texts_of

    other = {"en": ("another conv",) * 4, "zh": ("另一个卷积",) * 4}
    monkeypatch.setitem(layers.ROLES, "mixer", {"other": SimpleNamespace(EXPLANATIONS={"hook_conv": other}),
                                                **layers.MIXERS})  # found first
    conv = next(s for s in run()[1] if s.name == "blocks.0.conv.hook_conv")
    assert hook_key(conv) == "conv.hook_conv" and "B·x" in texts_of(hook_key(conv))["en"][1]


def test_an_intervention_on_b_x_reaches_the_conv_window_and_everything_after_it():
    from engine.interventions import parse_intervention

    changed = replace(scenario(new_tokens=2), interventions=(parse_intervention("blocks.0.conv.hook_bx[19,:]=0"),))
    states = list(Session(changed).steps())
    window = states_after(states, 0)[0]
    assert window.row_positions == (18, 19)
    assert not to_host(window.rows)[1].any() and to_host(window.rows)[0].any()  # position 19's input zeroed
    ours = values(states, "blocks.0.conv.hook_conv", 0)
    _, clean = run()
    assert np.array_equal(ours[:19], values(clean, "blocks.0.conv.hook_conv", 0)[:19])  # causal: earlier rows stay
    assert not np.allclose(values(states, "unembed.hook_out", 1), values(clean, "unembed.hook_out", 1))


def test_a_breakpoint_on_the_conv_stops_at_every_layers_conv():
    from engine.breakpoints import parse_breakpoint

    point = parse_breakpoint("conv.conv")
    hits = [(s.round, s.layer) for s in run()[1] if point.hits(s)]
    assert hits == [(round_, layer) for round_ in range(len(PASSES)) for layer in (0, 2)]


def test_the_q8_0_file_matches_transformers_run_on_its_dequantized_weights():
    ref = dict(np.load(FIXTURES / "gguf-lfm2" / "reference.q8_0.npz"))
    checkpoint = load_checkpoint(FIXTURES / "gguf-lfm2" / "lfm2.q8_0.gguf", ids=IDS, max_new_tokens=len(PASSES))
    kinds = {checkpoint.weights.quantisation.kind(name) for name in ("blocks.0.conv.w_in", "blocks.1.attn.wq")}
    assert kinds == {"Q8_0"} and checkpoint.weights.quantisation.kind("blocks.0.conv.w_conv") == "F32"
    session = Session(checkpoint, make_backend("numpy", "float64"))
    states = list(session.steps())
    assert np.abs(ref["logits"] - REF["logits"]).max() > 1e-4  # quantized: another reference than the folder's
    for round_ in range(len(PASSES)):
        for layer, theirs in enumerate(ref["step_layers"][round_]):
            assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", round_)[-1] - theirs).max() <= 1e-9
        held = states_after(states, round_)
        for i, layer in enumerate(ref["conv_layers"]):
            assert np.abs(to_host(held[layer].rows) - ref["step_conv_states"][round_, i, 1:]).max() <= 1e-9
    assert list(session.results[0].generated) == ref["greedy_ids"].tolist()
    assert max(d.max_abs for d in diff_scenario(checkpoint)) <= 1e-12
