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

from engine import Session, to_host
from engine.backend import make_backend
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
KERNEL = 3


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
    assert {block.conv_kernel for block in model.blocks if block.mixer == "short_conv"} == {KERNEL}
    assert model.d_ff == 32 and model.qk_norm and model.n_kv_heads == 2  # int(2·40/3) = 26, rounded up to 8s
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
            assert window.nbytes == (KERNEL - 1) * 24 * 8  # the same bytes in every pass
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
    found = first_divergence(diff_scenario(scenario(new_tokens=4), inject=bug))
    assert (found.round, found.name) == (2, "blocks.0.conv.hook_conv")  # round 1 kept the wrong window
    assert FAULTS[bug].cannot_run(scenario(new_tokens=2)) is not None  # no second decode round reads it


def test_the_no_cache_layer1_bug_is_refused_on_layers_of_different_kinds():
    assert "different kinds" in FAULTS["no-cache-layer1"].cannot_run(scenario())


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
    assert spec(folder).d_ff == 40
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
