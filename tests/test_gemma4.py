"""Gemma 4 text (`gemma4_text`) on a tiny random checkpoint (tools/make_gemma4_fixtures.py): sliding and full layers
with their own head widths, kv heads and RoPE (proportional on the full ones), keys as values, v norms, per-layer
input embeddings, layer scalars and two KV-shared layers, against transformers' true float64 forward (every layer,
logits, greedy ids, every pass); cached equal to the full recompute; the KV-shared layers' state (no rows, no
bytes, where it reads) through time travel and the dump; the two Gemma 4 bugs caught by diff where they act."""

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
from engine.export import ActivationDump
from engine.interventions import parse_intervention
from engine.layers.shared_kv import SharedFacts, SharedKV
from engine.layout import Passes
from engine.loading import ScenarioError
from engine.loading.checkpoint import load_checkpoint
from tinyllm_tui.cli import app
from tinyllm_tui.debugger.debugger import Debugger
from tinyllm_tui.debugger.frame import hook_key
from tinyllm_tui.tui.explanations import texts_of

FOLDER = Path(__file__).parent / "fixtures" / "gemma4"
REF = dict(np.load(FOLDER / "reference.npz"))
IDS = [int(t) for t in REF["ids"]]
NEW = len(REF["greedy_ids"])
FLOAT64 = make_backend("numpy", "float64")
PROMPT_TEXT = "The cat sat on the mat, 我爱 café"  # tools/make_fixtures.py's PROMPT


@functools.cache
def fixture():
    scenario = load_checkpoint(FOLDER, ids=IDS, max_new_tokens=NEW)
    session = Session(scenario, FLOAT64)
    return scenario, session, list(session.steps())


def values(states, name: str, round_: int) -> np.ndarray:
    return next(to_host(s.values) for s in states if s.name == name and s.round == round_)


def logits_of(scenario) -> np.ndarray:
    """The prefill's logits as decoding reads them (soft-capped where the model caps them)."""
    states = [s for s in Session(scenario, FLOAT64).steps() if s.round == 0 and s.name.startswith("unembed.")]
    return to_host(states[-1].values)


def test_the_fixture_has_both_layer_types_own_head_widths_and_kv_shared_layers_reading_their_type():
    spec = fixture()[0].model
    blocks = spec.blocks
    assert [b.window for b in blocks] == [4, None, 4, None] and len(IDS) > 4
    assert [b.kv_source for b in blocks] == [None, None, 0, 1]
    assert [b.d_head for b in blocks] == [None, 16, None, 16] and spec.d_head == 8
    assert [b.kv_heads for b in blocks] == [None, 1, None, 1] and spec.n_kv_heads == 2
    assert [b.k_eq_v for b in blocks] == [False, True, False, False]  # a shared layer has no projections to share
    assert [b.d_ff for b in blocks] == [None, None, 128, 128] and spec.d_ff == 64
    # proportional RoPE on a 16-wide head: a quarter of the 8 frequencies turn, the others stand (÷inf)
    assert blocks[1].rope_divisors == (1.0, 1.0) + (float("inf"),) * 6 and blocks[0].rope_divisors is None
    assert (blocks[0].rope_theta, blocks[1].rope_theta) == (1e4, 1e6)


def test_prefill_every_layer_and_the_logits_match_transformers():
    _, _, states = fixture()
    for layer, theirs in enumerate(REF["layers"]):
        assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", 0) - theirs).max() <= 1e-9
    assert np.abs(values(states, "unembed.hook_softcap", 0) - REF["logits"]).max() <= 1e-9


def test_every_cached_decode_pass_matches_transformers_and_the_greedy_ids_agree():
    _, session, states = fixture()
    assert sorted({s.round for s in states}) == list(range(NEW))
    for round_ in range(NEW):
        for layer, theirs in enumerate(REF["step_layers"][round_]):
            assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", round_)[-1] - theirs).max() <= 1e-9
        assert np.abs(values(states, "unembed.hook_softcap", round_)[-1] - REF["step_logits"][round_]).max() <= 1e-9
    assert list(session.results[0].generated) == REF["greedy_ids"].tolist()


def test_cached_decode_equals_the_full_recompute():
    diffs = diff_scenario(fixture()[0], FLOAT64)
    assert {d.round for d in diffs} == set(range(NEW))
    assert any(d.name == "blocks.3.attn.hook_attn_scores" for d in diffs if d.round > 0)  # a shared layer's reads
    assert max(d.max_abs for d in diffs) <= 1e-12


@pytest.mark.parametrize("change", [
    {"per_layer_input": 0}, {"layer_scalar": False}, {"v_norm": False}, {"final_softcap": None}])
def test_each_gemma4_piece_changes_what_it_computes(change):
    """Without any one of them the logits leave transformers': each is exercised by the fixture."""
    scenario = fixture()[0]
    assert np.abs(logits_of(scenario) - REF["logits"]).max() <= 1e-9
    changed = replace(scenario, model=replace(scenario.model, **change))
    assert np.abs(logits_of(changed) - REF["logits"]).max() > 1e-6


def test_the_full_layers_proportional_rope_is_what_transformers_computes():
    """Every frequency turning on the full layers (default RoPE over the whole head) leaves transformers' logits."""
    scenario = fixture()[0]
    blocks = tuple(replace(b, rope_divisors=None) if b.window is None else b for b in scenario.model.blocks)
    changed = replace(scenario, model=replace(scenario.model, layers=blocks))
    assert np.abs(logits_of(changed) - REF["logits"]).max() > 1e-6


def test_keys_are_the_values_on_full_layers_and_each_value_head_is_rms_normalized():
    _, _, states = fixture()
    assert np.array_equal(values(states, "blocks.1.attn.hook_v", 0), values(states, "blocks.1.attn.hook_k", 0))
    normed = values(states, "blocks.0.attn.v_norm.hook_normalized", 0).reshape(len(IDS), 2, 8)
    assert np.allclose(np.sqrt((normed**2).mean(-1)), 1.0, atol=1e-3)
    assert np.abs(values(states, "blocks.0.attn.hook_v", 0) - values(states, "blocks.0.attn.hook_k", 0)).max() > 0.1


def test_a_kv_shared_layer_computes_only_its_queries_and_reads_its_sources_keys():
    _, _, states = fixture()
    names = {s.name for s in states if s.layer == 2}
    assert {"blocks.2.attn.hook_q", "blocks.2.attn.hook_rot_q"} <= names
    assert not names & {"blocks.2.attn.hook_k", "blocks.2.attn.hook_v", "blocks.2.attn.hook_rot_k"}
    scores = next(s for s in states if s.name == "blocks.2.attn.hook_attn_scores" and s.round == 2 and s.head == 0)
    assert [operand.name for operand in scores.op.inputs][1] == "blocks.0.attn.cache_k[kv head 0]"
    keys = scores.op.inputs[1].values
    source = next(s for s in states if s.name == "blocks.0.attn.hook_rot_k" and s.round == 2)
    np.testing.assert_array_equal(to_host(keys)[-1], to_host(source.values)[-1, :8])  # the source's new key row


def test_a_kv_shared_layers_state_holds_nothing_and_says_where_it_reads_through_time_travel_and_the_dump():
    scenario, _, states = fixture()
    last = states[-1]
    shared = last.caches[3]
    assert isinstance(shared, SharedKV) and (shared.length, shared.nbytes, shared.views()) == (0, 0, ())
    assert shared.facts == SharedFacts(1) and last.caches[1].nbytes > 0
    debugger = Debugger(scenario)
    middle = next(s for s in states if s.round == 2 and s.name == "blocks.2.attn.hook_q")
    debugger.goto_step(last.step)
    debugger.goto_step(middle.step)  # back in time, into decode round 2, before layer 2 read this round
    debugger.move_cache(layers=2 - debugger.frame.cache.layer)
    cache = debugger.frame.cache
    assert (cache.layer, cache.views, cache.line.code, cache.line.facts, cache.length) == (2, (), "cache.shared",
                                                                                           {"source": 0}, 0)
    debugger.move_cache(layers=-2)  # its source, time-travelled as ever
    head = debugger.frame.cache.head
    np.testing.assert_array_equal(debugger.frame.cache.views[0].values,
                                  to_host(middle.caches[0].views()[0].values)[:, head * 8:(head + 1) * 8])
    dump = ActivationDump(Passes(scenario))
    for state in states:
        dump.see(state)
    arrays = dump.arrays()
    assert "decode.2.blocks.0.attn.cache_k" in arrays and "decode.2.blocks.1.attn.cache_k" in arrays
    assert not any(key.startswith(("decode.2.blocks.2.attn.cache", "decode.2.blocks.3.attn.cache")) for key in arrays)


def test_the_shared_kv_own_cache_bug_is_found_at_the_shared_layers_scores_in_the_first_cached_round():
    diffs = diff_scenario(fixture()[0], FLOAT64, inject="shared-kv-own-cache")
    first = min((d for d in diffs if not d.agrees), key=lambda d: d.step)
    assert (first.name, first.round, first.layer) == ("blocks.2.attn.hook_attn_scores", 1, 2)
    assert (first.mismatch.facts["shape"], first.mismatch.facts["positions"]) == ("1×1", str(len(IDS)))  # its one new
    # key, not the source's window
    assert all(d.agrees for d in diffs if d.round == 0)


def test_the_per_layer_previous_bug_is_found_at_the_per_layer_embedding_in_the_first_cached_round():
    diffs = diff_scenario(fixture()[0], FLOAT64, inject="per-layer-previous")
    first = min((d for d in diffs if not d.agrees), key=lambda d: d.step)
    assert (first.name, first.round) == ("hook_per_layer_embed", 1)
    assert all(d.agrees for d in diffs if d.round == 0)


def test_the_per_layer_inputs_are_the_packed_table_row_and_the_normalized_projection():
    """An independent NumPy reading of transformers' get_per_layer_inputs / project_per_layer_inputs."""
    scenario, _, states = fixture()
    w, p, n, d = scenario.weights, 8, 4, 32
    embedded = w["embed"][IDS] * np.sqrt(d)
    identity = w["per_layer_embed"][IDS] * np.sqrt(p)
    context = (embedded @ w["per_layer_proj"] / np.sqrt(d)).reshape(len(IDS), n, p)
    context = context / np.sqrt((context**2).mean(-1, keepdims=True) + 1e-6) * w["ln_per_layer.w"]
    expected = (context.reshape(len(IDS), -1) + identity) / np.sqrt(2)
    np.testing.assert_allclose(values(states, "hook_per_layer_inputs", 0), expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(values(states, "blocks.3.hook_per_layer_input", 0),
                                  values(states, "hook_per_layer_inputs", 0)[:, 3 * p:])


def test_an_intervention_on_a_per_layer_input_changes_the_logits_and_a_breakpoint_stops_there():
    scenario = fixture()[0]
    patched = replace(scenario, interventions=(parse_intervention("blocks.1.hook_per_layer_input[:, :]=0"),))
    states = list(Session(patched, FLOAT64).steps())
    assert not values(states, "blocks.1.hook_per_layer_gated", 0).any()
    assert np.abs(values(states, "unembed.hook_softcap", 0) - REF["logits"]).max() > 1e-6
    debugger = Debugger(scenario)
    debugger.add_breakpoint("blocks.2.hook_per_layer_input")
    debugger.continue_()
    assert debugger.view.state.name == "blocks.2.hook_per_layer_input"


def test_every_gemma4_operator_has_an_explanation_en_and_zh():
    _, _, states = fixture()
    new = ("per_layer", "resid_post_mlp", "resid_post_ple")
    shown = [s for s in states if any(part in s.name for part in new)]
    assert {s.name.rsplit(".", 1)[-1] for s in shown} >= {
        "hook_per_layer_embed", "hook_per_layer_proj", "hook_per_layer_inputs", "hook_per_layer_input",
        "hook_per_layer_gate", "hook_per_layer_gated", "hook_per_layer_projected", "hook_per_layer_out",
        "hook_resid_post_mlp", "hook_resid_post_ple"}
    for state in shown:
        if state.name.rsplit(".", 1)[-1].startswith("hook_per_layer") or "resid_post_" in state.name:
            texts = texts_of(hook_key(state))
            assert texts and len(texts["en"]) == len(texts["zh"]) == 4, state.name


def test_the_logit_lens_reads_each_blocks_output_after_its_layer_scalar():
    scenario, session, states = fixture()
    resid = values(states, "blocks.3.hook_resid_post", 0)
    lens = to_host(session.model.lens(FLOAT64.asarray(resid)))
    np.testing.assert_allclose(lens, REF["logits"], rtol=0, atol=1e-9)


def config_with(tmp_path: Path, **changes) -> Path:
    folder = tmp_path / "gemma4"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if "." in key:
            outer, inner, leaf = key.split(".")
            config[outer][inner][leaf] = value
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("changes, key", [
    ({"enable_moe_block": True}, "enable_moe_block"),
    ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    ({"rope_parameters.full_attention.rope_type": "yarn"}, "rope_parameters.full_attention.rope_type"),
    ({"num_kv_shared_layers": 4}, "num_kv_shared_layers"),
    ({"layer_types": ["sliding_attention", "chunked_attention", "sliding_attention", "full_attention"]},
     "layer_types[1]"),
    ({"hidden_activation": "silu"}, "hidden_activation"),
])
def test_what_gemma4_cannot_run_is_refused_naming_the_key(tmp_path, changes, key):
    with refused(ScenarioError, key.replace("[", r"\[").replace("]", r"\]")):
        load_checkpoint(config_with(tmp_path, **changes), ids=IDS[:3], max_new_tokens=1)


def test_the_diff_command_finds_the_shared_kv_bug_in_one_run():
    result = CliRunner().invoke(app, ["diff", str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", "2",
                                      "--inject", "shared-kv-own-cache"])
    assert "blocks.2.attn.hook_attn_scores" in result.output and "Traceback" not in result.output


# -- the GGUF files llama.cpp's converter wrote (bf16 and q8_0), against the reference of what each holds ----------
GGUF = FOLDER.parent / "gguf-gemma4"
KINDS = ("bf16", "q8_0")


@functools.cache
def gguf_fixture(kind: str):
    ref = dict(np.load(GGUF / f"gemma4-{kind}.npz"))
    scenario = load_checkpoint(GGUF / f"gemma4-{kind}.gguf", ids=IDS, max_new_tokens=NEW)
    session = Session(scenario, FLOAT64)
    return ref, scenario, session, list(session.steps())


@pytest.mark.parametrize("kind", KINDS)
def test_a_converted_gguf_reads_as_the_checkpoint_it_was_converted_from(kind):
    _, scenario, _, _ = gguf_fixture(kind)
    assert scenario.model.blocks == fixture()[0].model.blocks  # layer types, widths, sources, RoPE: from its metadata
    for path in (GGUF / f"gemma4-{kind}.gguf", FOLDER):  # its own tokenizer (tokenizer.ggml.model gemma4), <bos> first
        assert load_checkpoint(path, prompt=PROMPT_TEXT, max_new_tokens=1).requests[0].tokens == tuple(IDS)


@pytest.mark.parametrize("kind", KINDS)
def test_every_pass_of_a_gguf_matches_transformers_on_its_dequantized_weights(kind):
    ref, _, session, states = gguf_fixture(kind)
    assert np.abs(ref["logits"] - REF["logits"]).max() > 1e-4  # the quantization shows: a reference of its own
    for round_ in range(NEW):
        for layer, theirs in enumerate(ref["step_layers"][round_]):
            assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", round_)[-1] - theirs).max() <= 1e-9
        assert np.abs(values(states, "unembed.hook_softcap", round_)[-1] - ref["step_logits"][round_]).max() <= 1e-9
    for layer, theirs in enumerate(ref["layers"]):
        assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", 0) - theirs).max() <= 1e-9
    assert list(session.results[0].generated) == ref["greedy_ids"].tolist()


@pytest.mark.parametrize("kind", KINDS)
def test_a_gguf_runs_cached_equal_to_the_full_recompute(kind):
    assert max(d.max_abs for d in diff_scenario(gguf_fixture(kind)[1], FLOAT64)) <= 1e-12


@pytest.mark.parametrize("key, kind, value, message", [
    ("gemma4.rope.dimension_count_swa", 4, 4, "partial RoPE on the sliding layers is not supported"),
    ("gemma4.attention.head_count_kv", 9, "short", "expected 4 values, one per layer"),
    ("gemma4.attention.shared_kv_layers", 4, 4, "would share the K/V of no earlier layer"),
])
def test_what_a_gemma4_gguf_cannot_be_run_as_is_refused_naming_the_key(tmp_path, key, kind, value, message):
    from gguf_bytes import Array, parse, serialize

    file = parse((GGUF / "gemma4-q8_0.gguf").read_bytes())
    file.set(key, kind, Array(4, [2, 1]) if value == "short" else value)
    path = tmp_path / "changed.gguf"
    path.write_bytes(serialize(file))
    with refused(ScenarioError, message) as caught:
        load_checkpoint(path, ids=IDS[:3], max_new_tokens=1)
    assert key in str(caught.value)


async def test_the_cache_view_of_a_kv_shared_layer_says_which_layer_it_reads_and_shows_no_rows():
    """A view-only matter: the title words the state's facts, and no window is left showing another layer's K/V."""
    from tinyllm_tui.tui.app import DebuggerApp
    from tinyllm_tui.tui.widgets.cache import CacheView, layout_line
    from tinyllm_tui.tui.widgets.matrix import MatrixWindow
    from tinyllm_tui.tui.widgets.wrapped import Wrapped
    from tui_helpers import settle

    scenario, _, states = fixture()
    app = DebuggerApp(scenario, lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)  # the first screen's own work done: nothing redraws the view after ours
        app.debugger.goto_step(states[-1].step)
        app.debugger.move_cache(layers=3 - app.debugger.frame.cache.layer)
        view = app.main.query(CacheView).first()
        view.show(app.debugger.frame.cache)
        await pilot.pause()
        title = view.query_one(".cache-title", Wrapped)
        text = title._text.plain
        assert "KV-shared: reads layer 1's cache, holds no K/V of its own (0 B)" in text
        assert layout_line(app.debugger.frame.cache, "zh") == "KV共享：读取第1层的缓存，自身不存K/V（0 B）"
        assert not [w for w in view.query(MatrixWindow) if w.display]
