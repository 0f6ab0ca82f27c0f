"""Qwen3.5's Gated DeltaNet and gated attention on a tiny random checkpoint (tools/make_qwen35_fixtures.py):
against transformers' true float64 forward (every layer, logits, greedy ids, the recurrent and conv states after
every pass), the chunked prefill beside the recurrent decode (cached equal to the full recompute), the state's
size constant in the sequence length."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from said import refused

from engine import Session, make_backend, to_host
from engine.compare.diff import diff_scenario
from engine.layers import gated_deltanet
from engine.loading.checkpoint import load_checkpoint
from tinyllm_tui.presentation.against_words import report_lines

FOLDER = Path(__file__).parent / "fixtures" / "qwen3_5"
REF = dict(np.load(FOLDER / "reference.npz"))
IDS = [int(t) for t in REF["ids"]]
LINEAR = [int(layer) for layer in REF["linear_layers"]]
CHUNK = int(REF["chunk"])  # the reference's chunk size, shorter than the prompt


def scenario(chunk: int = CHUNK, prefill_chunk: int | None = None, folder: Path = FOLDER):
    found = load_checkpoint(folder, ids=IDS, max_new_tokens=len(REF["greedy_ids"]))
    model = dataclasses.replace(found.model, deltanet=dataclasses.replace(found.model.deltanet, chunk=chunk))
    return dataclasses.replace(found, model=model, decode=dataclasses.replace(found.decode, prefill_chunk=prefill_chunk))


SCENARIO = scenario()
STATES = list(Session(SCENARIO, make_backend("numpy", "float64")).steps())


def outputs(states, name: str) -> list[np.ndarray]:
    """`name`'s values, one per round."""
    return [to_host(s.values) for s in states if s.name == name]


def test_the_fixture_mixes_deltanet_and_gated_attention_and_its_reference_is_float64():
    model = SCENARIO.model
    assert [b.mixer for b in model.blocks] == ["gated_deltanet", "gated_deltanet", "attention"]
    assert model.attn_gate and model.rope_dims == 4 and model.norm.weight_offset
    assert (model.deltanet.k_heads, model.deltanet.v_heads, model.deltanet.kernel) == (2, 4, 3)
    assert len(IDS) > 2 * CHUNK and model.deltanet.kernel < len(IDS)
    assert REF["float32_ops"] == 0 and REF["ops"] > 1000


def test_prefill_logits_and_every_layer_match_transformers():
    assert np.abs(outputs(STATES, "unembed.hook_out")[0] - REF["logits"]).max() <= 1e-9
    for layer in range(SCENARIO.model.n_layers):
        ours = outputs(STATES, f"blocks.{layer}.hook_resid_post")[0]
        assert np.abs(ours - REF["layers"][layer]).max() <= 1e-9, layer


def test_every_pass_logits_layers_and_greedy_ids_match_transformers():
    logits = outputs(STATES, "unembed.hook_out")
    assert len(logits) == len(REF["step_logits"])
    for round_, row in enumerate(logits):
        assert np.abs(row[-1] - REF["step_logits"][round_]).max() <= 1e-9, round_
        for layer in range(SCENARIO.model.n_layers):
            ours = outputs(STATES, f"blocks.{layer}.hook_resid_post")[round_][-1]
            assert np.abs(ours - REF["step_layers"][round_, layer]).max() <= 1e-9, (round_, layer)
    chosen = [int(to_host(s.values)[0, 0]) for s in STATES if s.kind == "choice"]
    assert chosen == REF["greedy_ids"].tolist()


def test_every_linear_attention_state_after_every_pass_matches_transformers():
    """transformers' conv cache keeps K columns, (channels, K); ours the K−1 inputs the next pass reads."""
    ends = [s for s, after in zip(STATES, STATES[1:] + [None]) if after is None or after.round != s.round]
    assert len(ends) == len(REF["step_recurrent"])
    for round_, state in enumerate(ends):
        for i, layer in enumerate(LINEAR):
            kept = state.caches[layer]
            assert np.abs(to_host(kept.recurrent) - REF["step_recurrent"][round_, i]).max() <= 1e-9
            theirs = REF["step_conv"][round_, i][:, 1:].T
            assert np.abs(to_host(kept.window.rows) - theirs).max() <= 1e-9


@pytest.mark.parametrize("prefill_chunk", [None, 3, 7])
def test_the_cached_recurrent_decode_equals_the_chunked_full_recompute(prefill_chunk):
    diffs = diff_scenario(scenario(prefill_chunk=prefill_chunk), make_backend("numpy", "float64"))
    names = {d.name for d in diffs}
    assert {"blocks.0.linear_attn.hook_delta", "blocks.0.linear_attn.hook_state", "blocks.2.attn.hook_gate"} <= names
    assert max(d.max_abs for d in diffs) <= 1e-12


def test_a_decode_step_runs_the_recurrent_form_and_a_prefill_the_chunked_one(monkeypatch):
    calls = []
    for name in ("recurrent_rule", "chunked_rule"):
        original = getattr(gated_deltanet, name)
        monkeypatch.setattr(gated_deltanet, name, lambda *a, _f=original, _n=name, **k: calls.append(
            (_n, a[2].shape[0])) or _f(*a, **k))
    list(Session(SCENARIO, make_backend("numpy", "float64")).steps())
    per_layer = calls[::len(LINEAR)]
    assert per_layer[0] == ("chunked_rule", len(IDS))
    assert set(per_layer[1:]) == {("recurrent_rule", 1)}


def test_the_state_does_not_grow_with_the_sequence_but_the_kv_cache_does():
    ends = [s for s, after in zip(STATES, STATES[1:] + [None]) if after is None or after.round != s.round]
    linear = {end.caches[layer].nbytes for end in ends for layer in LINEAR}
    net = SCENARIO.model.deltanet
    assert linear == {8 * (net.v_heads * net.d_k * net.d_v + (net.kernel - 1) * net.conv_dim)}
    attention = [end.caches[2].nbytes for end in ends]
    assert attention == sorted(set(attention)) and len(set(attention)) == len(ends)
    assert [end.caches[0].length for end in ends] == list(range(len(IDS), len(IDS) + len(ends)))


def test_the_state_panel_names_a_recurrent_layer_by_its_value_heads_and_a_fresh_state_by_no_token():
    """A linear-attention layer holds no K/V: its title says state and value head; before its first token the
    memory line says no token has changed it (not "after token -1")."""
    from tinyllm_tui.debugger.debugger import Debugger
    from tinyllm_tui.tui.i18n import cause_words
    from tinyllm_tui.tui.widgets.cache import layout_line

    debugger = Debugger(SCENARIO)
    shown = debugger.frame.cache  # the first operator: layer 0's state is fresh
    assert cause_words(shown.heading, "en") == "state · layer 0 of 0–2 · value head 0 of 0–3"
    assert cause_words(shown.heading, "zh") == "状态 · 第 0 层（0–2）· 第 0 个值头（0–3）"
    assert layout_line(shown, "en").startswith("recurrent state: no token yet · conv window: last 2 inputs (K=3)")
    debugger.goto_step(next(s for s in STATES if s.name == "blocks.0.linear_attn.hook_state" and s.round == 0).step)
    assert layout_line(debugger.frame.cache, "en").startswith(f"recurrent state after token {len(IDS) - 1} ·")
    assert "尚无Token" in layout_line(shown, "zh")


# -- injected bugs, each found by the diff where it acts ------------------------------------------------------
@pytest.mark.parametrize("bug, where", [
    ("conv-not-shifted", (1, "blocks.0.linear_attn.hook_conv")),  # decode round 1 left the window; round 2 reads it
    ("conv-shifted-twice", (1, "blocks.0.linear_attn.hook_conv")),
    ("state-not-decayed", (0, "blocks.0.linear_attn.hook_delta")),  # the first decode round's δ reads Sᵀk undecayed
    ("chunk-state-dropped", (None, "blocks.0.linear_attn.hook_delta")),  # the prefill's second chunk
])
def test_each_recurrent_state_bug_is_found_by_the_diff_at_the_operator_where_it_acts(bug, where):
    diffs = diff_scenario(SCENARIO, make_backend("numpy", "float64"), inject=bug)
    first = next(d for d in diffs if not d.agrees and not d.state)  # the operators
    kept = next((d for d in diffs if not d.agrees and d.state), None)  # each layer's state at a round's end
    assert kept is None or (kept.request, kept.round) <= (first.request, first.round)  # kept wrong before it is read
    decode_round, name = where
    assert first.name == name
    if decode_round is None:
        assert first.phase == "prefill"
    else:
        assert (first.phase, first.round) == ("decode", decode_round + 1)
    before = [d for d in diffs if d.step < first.step and not d.state]
    assert all(d.agrees for d in before)


def test_a_recurrent_state_bug_is_refused_where_it_cannot_show():
    from engine.faults import FAULTS

    short = dataclasses.replace(SCENARIO, requests=tuple(dataclasses.replace(r, max_new_tokens=2)
                                                         for r in SCENARIO.requests))
    assert FAULTS["conv-not-shifted"].unseen(short) == ("fault.conv_rounds", {})  # no second round reads the window
    assert FAULTS["state-not-decayed"].unseen(short) is None
    assert FAULTS["chunk-state-dropped"].unseen(scenario(chunk=64)) == ("fault.delta_chunk", {"chunk": 64})
    qwen3 = load_checkpoint(FOLDER.parent / "qwen3", ids=[1, 2])
    assert FAULTS["state-not-decayed"].unseen(qwen3) == ("fault.no_deltanet", {})


# -- check --against an independent NumPy Qwen3.5 (tests/numpy_qwen35.py) -------------------------------------
def dump_of(tmp_path: Path, faults: tuple[str, ...] = ()) -> Path:
    from numpy_qwen35 import NumpyQwen35
    from tinyllm_tui import Recorder

    rec = Recorder()
    NumpyQwen35(FOLDER, faults).generate(IDS, len(REF["greedy_ids"]), rec)
    path = tmp_path / "dump.safetensors"
    rec.save(path)
    return path


def test_a_clean_dump_of_the_recurrent_numpy_decoder_agrees_with_every_state_after_every_pass(tmp_path):
    """Its prefill runs token by token and its conv cache keeps transformers' K columns: both are accepted."""
    from engine.compare.against import compare_generation

    report = compare_generation(SCENARIO, dump_of(tmp_path))
    assert report.first_divergence is None, report_lines(report, "en")[1]
    states = [op for op in report.ops if op.key.name.endswith(("recurrent_state", "conv_state"))]
    assert {op.key.pass_ for op in states} == {"prefill", "decode.1", "decode.2", "decode.3", "decode.4"}
    assert len(states) == 2 * len(LINEAR) * len(REF["greedy_ids"]) and max(op.max_abs for op in report.ops) < 1e-12


def test_check_against_finds_the_conv_window_left_unshifted_in_decode_round_2_at_that_state(tmp_path):
    from typer.testing import CliRunner

    from engine.compare.against import Against, compare_generation
    from engine.compare.dump import load_dump
    from tinyllm_tui.cli import app

    path = dump_of(tmp_path, ("conv-not-shifted",))
    first = compare_generation(SCENARIO, path).first_divergence
    assert (first.key.pass_, first.key.name) == ("decode.2", "blocks.0.linear_attn.conv_state")
    newest = len(IDS) + 1  # round 2 fed position 21, which the window kept unshifted never took in
    assert first.cell[0] == 0 and first.place.facts["position"].startswith(f"{newest - 1} · ")  # theirs: position 19
    states = list(Session(SCENARIO, make_backend("numpy", "float64")).steps())
    end_of_2 = [s for s in states if s.round == 2][-1]
    assert Against(load_dump(path), SCENARIO).differing_cache_rows(end_of_2, 0) == {newest - 1, newest}
    ids = ",".join(map(str, IDS))
    result = CliRunner().invoke(app, ["check", str(FOLDER), "--ids", ids, "--max-new-tokens", "5", "--against", str(path)])
    assert result.exit_code == 1
    assert "first divergence: decode.2 · blocks.0.linear_attn.conv_state" in result.output


# -- interventions, the logit lens and breakpoints on the new operators -----------------------------------------
@pytest.mark.parametrize("spec, numpy_side", [
    ("blocks.0.linear_attn head 1", {"zero_read": (0, 1)}),  # the head's read zeroed in every pass
    ("blocks.1.linear_attn.hook_state head 2 @prefill", {"zero_state": (1, 2)}),  # what decode starts from
])
def test_ablating_a_linear_attention_head_or_its_state_matches_the_numpy_decoder(spec, numpy_side):
    from numpy_qwen35 import NumpyQwen35

    from engine.interventions import parse_any
    from tinyllm_tui import Recorder

    rec = Recorder()
    NumpyQwen35(FOLDER, **numpy_side).generate(IDS, len(REF["greedy_ids"]), rec)
    ablated = dataclasses.replace(SCENARIO, interventions=(parse_any(spec),))
    logits = outputs(list(Session(ablated, make_backend("numpy", "float64")).steps()), "unembed.hook_out")
    passes = ["prefill"] + [f"decode.{r}" for r in range(1, len(logits))]
    theirs = [rec.arrays[f"{p}.unembed.hook_out"] for p in passes]
    assert all(np.abs(ours - mine).max() <= 1e-9 for ours, mine in zip(logits, theirs))
    clean = outputs(STATES, "unembed.hook_out")
    assert np.abs(logits[1][-1] - clean[1][-1]).max() > 1e-3  # the ablation changed the next pass


def test_the_lens_and_breakpoints_reach_the_linear_attention_operators():
    from engine.breakpoints import parse_breakpoint

    hits = [s for s in STATES if parse_breakpoint("blocks.*.linear_attn.hook_decay & round=2").hits(s)]
    assert [(s.layer, s.round) for s in hits] == [(0, 2), (1, 2)]
    assert all((to_host(s.values) <= 0).all() for s in hits)
    model = Session(SCENARIO, make_backend("numpy", "float64")).model
    resid = outputs(STATES, f"blocks.{SCENARIO.model.n_layers - 1}.hook_resid_post")[0]
    assert np.abs(to_host(model.lens(model.backend.asarray(resid))) - REF["logits"]).max() <= 1e-9


def test_every_new_operator_is_explained_in_english_and_chinese():
    from engine.layers import explanation

    model = Session(SCENARIO, make_backend("numpy", "float64")).model
    new = {site.hook.name for site in model.hooks.sites if site.hook.module in ("linear_attn", "attn")}
    assert {"hook_conv", "hook_beta", "hook_decay", "hook_delta", "hook_state", "hook_gate", "hook_gated"} <= new
    for name in new - {"hook_scale", "hook_normalized", "hook_rot_q", "hook_rot_k"}:  # the stack's own texts
        texts = explanation(name)
        assert texts is not None and len(texts["en"]) == len(texts["zh"]) == 4, name


# -- GGUF qwen35 as llama.cpp's converter writes it ------------------------------------------------------------
GGUF_FOLDER = FOLDER.parent / "gguf-qwen3_5"


def gguf_run(kind: str):
    ref = dict(np.load(GGUF_FOLDER / f"reference-{kind}.npz"))
    found = load_checkpoint(GGUF_FOLDER / f"qwen35-{kind}.gguf", ids=IDS, max_new_tokens=len(ref["greedy_ids"]))
    model = dataclasses.replace(found.model, deltanet=dataclasses.replace(found.model.deltanet, chunk=CHUNK))
    found = dataclasses.replace(found, model=model)
    return ref, found, list(Session(found, make_backend("numpy", "float64")).steps())


@pytest.mark.parametrize("kind", ["f32", "q8_0"])
def test_the_gguf_files_match_transformers_on_their_dequantized_weights_every_pass_and_state(kind):
    from engine.loading.gguf_model import GGUFModel

    ref, found, states = gguf_run(kind)
    assert [b.mixer for b in found.model.blocks] == [b.mixer for b in SCENARIO.model.blocks]
    kinds = {info.kind.name for info in GGUFModel(GGUF_FOLDER / f"qwen35-{kind}.gguf").tensors.values()}
    assert ("Q8_0" in kinds) == (kind == "q8_0") and ref["float32_ops"] == 0
    logits = outputs(states, "unembed.hook_out")
    assert np.abs(logits[0] - ref["logits"]).max() <= 1e-9
    for round_, row in enumerate(logits):
        assert np.abs(row[-1] - ref["step_logits"][round_]).max() <= 1e-9
        for layer in range(found.model.n_layers):
            ours = outputs(states, f"blocks.{layer}.hook_resid_post")[round_][-1]
            assert np.abs(ours - ref["step_layers"][round_, layer]).max() <= 1e-9
    assert [int(to_host(s.values)[0, 0]) for s in states if s.kind == "choice"] == ref["greedy_ids"].tolist()
    ends = [s for s, after in zip(states, states[1:] + [None]) if after is None or after.round != s.round]
    for round_, state in enumerate(ends):
        for i, layer in enumerate(LINEAR):
            assert np.abs(to_host(state.caches[layer].recurrent) - ref["step_recurrent"][round_, i]).max() <= 1e-9
            assert np.abs(to_host(state.caches[layer].window.rows) - ref["step_conv"][round_, i][:, 1:].T).max() <= 1e-9
    assert max(d.max_abs for d in diff_scenario(found, make_backend("numpy", "float64"))) <= 1e-12


def test_the_f32_gguf_computes_what_the_folder_does_but_for_the_converters_float32_rounding():
    """Independent of the GGUF reference: a value head out of place would move the logits by O(1)."""
    _, _, states = gguf_run("f32")
    assert 1e-9 < np.abs(outputs(states, "unembed.hook_out")[0] - REF["logits"]).max() < 1e-4


def test_a_gguf_with_multi_token_prediction_layers_is_refused_naming_the_key(tmp_path):
    import gguf_bytes as gb

    from engine.loading import ScenarioError

    parsed = gb.parse((GGUF_FOLDER / "qwen35-f32.gguf").read_bytes())
    parsed.set("qwen35.nextn_predict_layers", gb.UINT32, 1)
    path = tmp_path / "mtp.gguf"
    path.write_bytes(gb.serialize(parsed))
    with refused(ScenarioError, "qwen35.nextn_predict_layers: multi-token prediction"):
        load_checkpoint(path, ids=IDS)


def test_the_memory_estimate_of_a_mixed_stack_counts_each_layer_once():
    """It counted every block of a `layers` stack once per layer (the 0.8B file read as 45.5 GiB, not 2.8)."""
    import math

    from engine.loading.budget import tensor_count, weight_bytes
    from engine.parameters import parameter_shapes

    shapes = parameter_shapes(SCENARIO.model, len(SCENARIO.vocab))
    assert weight_bytes(SCENARIO.model, len(SCENARIO.vocab), "float32") == 4 * sum(map(math.prod, shapes.values()))
    assert tensor_count(SCENARIO.model, len(SCENARIO.vocab)) == len(shapes)
