"""gpt-oss on a tiny random checkpoint (tools/make_moe_fixtures.py gpt_oss): one sliding and one full layer,
attention sinks, YaRN RoPE, a router and experts with biases and the clamped SwiGLU, against transformers' true
float64 forward (every pass's router logits, chosen experts, layers and logits; greedy ids), cached equal to the
full recompute; the sink as the last column of the scores and the pattern; each of its pieces needed."""

from __future__ import annotations

import functools
import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from said import refused

from engine import Session, make_backend, to_host
from engine.compare.diff import diff_scenario
from engine.loading import ScenarioError
from engine.loading.checkpoint import load_checkpoint

FOLDER = Path(__file__).parent / "fixtures" / "gpt_oss"


@functools.cache
def fixture(folder: Path = FOLDER):
    """The reference, scenario and every state of a gpt-oss fixture, made once."""
    ref = dict(np.load(folder / "reference.npz"))
    scenario = load_checkpoint(folder, ids=[int(t) for t in ref["ids"]], max_new_tokens=len(ref["greedy_ids"]))
    session = Session(scenario, make_backend("numpy", "float64"))
    return ref, scenario, session, list(session.steps())


def run(scenario) -> list:
    return list(Session(scenario, make_backend("numpy", "float64")).steps())


def values(states, name: str, round_: int, head: int | None = None) -> np.ndarray:
    return next(to_host(s.values) for s in states if s.name == name and s.round == round_
                and (head is None or s.head == head))


def rounds(states) -> list[int]:
    return sorted({s.round for s in states})


def reference(ref: dict, round_: int) -> dict[str, np.ndarray]:
    """transformers' router logits, chosen experts, layers and logits of a pass (a decode step's one row)."""
    if round_ == 0:
        return {key: ref[key] for key in ("router_logits", "topk", "layers", "logits")}
    return {key: ref[f"step_{key}"][round_] for key in ("router_logits", "topk", "layers", "logits")}


def assert_matches_transformers(ref: dict, states, generated) -> None:
    """Every pass's router logits (≤ 1e-9), chosen experts (identical), layers and logits, and the greedy ids."""
    for round_ in rounds(states):
        rows, theirs = (slice(None) if round_ == 0 else -1), reference(ref, round_)
        for i, layer in enumerate(ref["moe_layers"]):
            ours = values(states, f"blocks.{layer}.mlp.hook_router_logits", round_)[rows]
            assert np.abs(ours - theirs["router_logits"][i]).max() <= 1e-9
            assert np.array_equal(values(states, f"blocks.{layer}.mlp.hook_topk", round_)[rows], theirs["topk"][i])
        for layer, expected in enumerate(theirs["layers"]):
            assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", round_)[rows] - expected).max() <= 1e-9
        assert np.abs(values(states, "unembed.hook_out", round_)[rows] - theirs["logits"]).max() <= 1e-9
    assert list(generated) == ref["greedy_ids"].tolist()


def test_the_fixture_slides_on_layer_0_reaches_the_clamp_and_no_reference_sits_on_a_near_tie():
    ref, scenario, _, states = fixture()
    model = scenario.model
    assert [(b.window, b.ffn) for b in model.blocks] == [(4, "moe"), (None, "moe")]
    assert model.attn_sinks and model.moe.bias and model.moe.clamp == (1.702, 1.5)
    assert ref["float32_ops"] == 0 and ref["ops"] > 1000  # the counter saw the passes, none in float32
    for probs in (ref["probs"], ref["step_probs"]):
        ordered = -np.sort(-probs, axis=-1)
        assert (ordered[..., 1] - ordered[..., 2]).min() >= 1e-3
    gates = np.concatenate([to_host(s.values).ravel() for s in states if s.op.hook.name == "hook_pre"])
    ups = np.concatenate([to_host(s.values).ravel() for s in states if s.op.hook.name == "hook_pre_linear"])
    assert (gates > 1.5).any() and (np.abs(ups) > 1.5).any()  # the clamp changes something


def test_every_pass_routes_and_computes_as_transformers_and_greedy_ids_agree():
    ref, _, session, states = fixture()
    assert rounds(states) == list(range(len(ref["step_logits"])))
    assert_matches_transformers(ref, states, session.results[0].generated)


def test_cached_decode_equals_the_full_recompute():
    _, scenario, _, states = fixture()
    diffs = diff_scenario(scenario, make_backend("numpy", "float64"))
    assert {d.round for d in diffs} == set(rounds(states))
    assert any(d.name.endswith("hook_pattern") for d in diffs if d.round > 0)
    assert max(d.max_abs for d in diffs) <= 1e-12


# -- the sink ---------------------------------------------------------------------------------------------------
def test_the_sink_is_the_last_column_of_the_scores_and_pattern_taking_probability_but_mixing_no_value():
    _, scenario, session, states = fixture()
    sinks = np.asarray(session.model.weights["blocks.1.attn.sinks"], dtype=np.float64)
    for head in range(scenario.model.n_heads):
        scores = next(s for s in states if s.name == "blocks.1.attn.hook_attn_scores" and s.round == 2 and s.head == head)
        pattern = next(s for s in states if s.name == "blocks.1.attn.hook_pattern" and s.round == 2 and s.head == head)
        assert scores.output.cols[-1] == pattern.output.cols[-1] == "sink"
        assert pattern.output.cols[0].startswith("k0 · ") and len(pattern.output.cols) == scores.values.shape[1]
        assert np.all(to_host(scores.values)[:, -1] == sinks[head])
        p = to_host(pattern.values)
        keys = to_host(scores.values)[:, :-1]
        expected = np.exp(keys) / (np.exp(keys).sum(axis=1, keepdims=True) + np.exp(sinks[head]))  # sink in the sum
        assert np.abs(p[:, :-1] - expected).max() <= 1e-12 and np.abs(p.sum(axis=1) - 1).max() <= 1e-12
        assert (p[:, -1] > 1e-3).all()  # what the sink takes, the values do not get
        z = next(s for s in states if s.name == "blocks.1.attn.hook_z" and s.round == 2 and s.head == head)
        v = to_host(z.op.inputs[1].values)  # the head's V rows from the cache: one per key, none for the sink
        assert v.shape[0] == p.shape[1] - 1 and np.abs(to_host(z.values) - p[:, :-1] @ v).max() <= 1e-12


@pytest.mark.parametrize("lang, sink", [("en", "sink"), ("zh", "汇聚")])
def test_the_matrix_view_labels_the_sink_column_in_its_own_language(lang, sink):
    """The engine names the column by a code (engine.labels.WORDS); the view subscribes with its word for it."""
    from tinyllm_tui.debugger.debugger import Debugger
    from tinyllm_tui.presentation.cache_layout import row_words

    _, scenario, _, states = fixture()
    debugger = Debugger(scenario)
    debugger.subscribe(row_words(lang))
    debugger.goto_step(next(s for s in states if s.name == "blocks.1.attn.hook_pattern" and s.round == 2).step)
    cols = debugger.frame.matrix.cols
    assert cols[-1] == sink and cols[0].startswith("k0 · ")


def test_the_sliding_layer_masks_keys_beyond_its_window_and_its_sink_still_takes_the_rest():
    _, _, _, states = fixture()
    pattern = values(states, "blocks.0.attn.hook_pattern", 0, 0)
    t = pattern.shape[0]
    keys = pattern[:, :-1]
    assert all((keys[i, :max(0, i - 3)] == 0).all() and (keys[i, max(0, i - 3):i + 1] > 0).all() for i in range(t))
    assert np.abs(pattern.sum(axis=1) - 1).max() <= 1e-12


@pytest.mark.parametrize("change", ["no sinks", "no clamp", "no YaRN factor", "no YaRN ramp", "no expert bias"])
def test_each_gpt_oss_piece_is_needed_to_match_transformers(change):
    ref, scenario, _, _ = fixture()
    model = scenario.model
    changed = {"no sinks": lambda: replace(model, attn_sinks=False),
               "no clamp": lambda: replace(model, moe=replace(model.moe, clamp=None)),
               "no YaRN factor": lambda: replace(model, rope_scale=1.0),
               "no YaRN ramp": lambda: replace(model, layers=tuple(replace(b, rope_divisors=None) for b in model.blocks)),
               "no expert bias": lambda: replace(model, moe=replace(model.moe, bias=False))}[change]()
    weights = {name: scenario.weights[name] for name in scenario.weights}
    states = run(replace(scenario, model=changed, weights=weights))
    assert np.abs(values(states, "unembed.hook_out", 0) - ref["logits"]).max() > 1e-6


def test_the_sparse_layers_and_sinks_compute_the_same_on_array_api_strict(backend):
    _, scenario, _, states = fixture()
    theirs = list(Session(scenario, backend).steps())
    assert [s.name for s in theirs] == [s.name for s in states]
    assert all(np.allclose(to_host(a.values), to_host(b.values), rtol=0, atol=1e-12) for a, b in zip(theirs, states))


# -- the config ---------------------------------------------------------------------------------------------------
def yarn_divisors(params: dict, d_head: int, truncate: bool) -> np.ndarray:
    """YaRN's frequency divisors from the paper's ramp (written here, not the loader's)."""
    base, factor, old = params["rope_theta"], params["factor"], params["original_max_position_embeddings"]
    corr = [d_head * math.log(old / (r * 2 * math.pi)) / (2 * math.log(base)) for r in (params["beta_fast"],
                                                                                       params["beta_slow"])]
    low, high = (math.floor(corr[0]), math.ceil(corr[1])) if truncate else corr
    low, high = max(low, 0), min(high, d_head - 1)
    keep = 1 - np.clip((np.arange(d_head // 2) - low) / (high - low), 0, 1)  # 1: extrapolated (unscaled)
    return 1 / (keep + (1 - keep) / factor)


def edited_config(tmp_path: Path, **changes) -> Path:
    folder = tmp_path / "gpt_oss"
    shutil.copytree(FOLDER, folder)
    config = json.loads((FOLDER / "config.json").read_text())
    for key, value in changes.items():
        target, leaf = config, key
        if "." in key:
            table, leaf = key.split(".")
            target = config[table]
        target[leaf] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("truncate", [False, True])
def test_yarns_ramp_and_attention_factor_are_read_as_the_paper_gives_them(tmp_path, truncate):
    scenario = load_checkpoint(edited_config(tmp_path, **{"rope_parameters.truncate": truncate}), ids=[1, 2])
    params = json.loads((FOLDER / "config.json").read_text())["rope_parameters"]
    ours = np.array(scenario.model.blocks[1].rope_divisors)
    assert np.abs(ours - yarn_divisors(params, 8, truncate)).max() <= 1e-12
    assert scenario.model.rope_scale == pytest.approx(0.1 * math.log(32) + 1, abs=1e-15)


@pytest.mark.parametrize("given, expected", [(None, 0.1 * math.log(32) + 1), (1.25, 1.25)])
def test_yarns_attention_factor_when_null_is_computed_from_factor_as_transformers_does(tmp_path, given, expected):
    folder = edited_config(tmp_path, **{"rope_parameters.attention_factor": given})
    assert load_checkpoint(folder, ids=[1, 2]).model.rope_scale == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("key, value", [("rope_parameters.truncate", "no"), ("rope_parameters.beta_fast", -1),
                                        ("swiglu_limit", 0), ("swiglu_alpha", "x"), ("num_local_experts", 0.5)])
def test_a_bad_gpt_oss_setting_is_refused_naming_its_key(tmp_path, key, value):
    with refused(ScenarioError, key.replace(".", r"\.")):
        load_checkpoint(edited_config(tmp_path, **{key: value}), ids=[1, 2])
