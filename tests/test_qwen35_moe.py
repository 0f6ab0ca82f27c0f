"""Qwen3.5 MoE (`qwen3_5_moe_text`, llama.cpp's `qwen35moe`) on a tiny random checkpoint
(tools/make_qwen35moe_fixtures.py): Qwen3.5's Gated DeltaNet and gated attention layers, each followed by the sparse
FFN with its shared expert. From the Hugging Face folder and from the converter's f32 and Q8_0 GGUFs, against
transformers' true float64 forward (of the dequantized weights for a GGUF): logits, every layer, the router logits
and chosen experts, the recurrent and conv states after every pass, greedy ids; cached equal to the full recompute;
the routing view and the experts a pass ran."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from said import refused

from engine import Session, make_backend, to_host
from engine.compare.diff import diff_scenario
from engine.loading import ScenarioError
from engine.loading.checkpoint import load_checkpoint

FIXTURES = Path(__file__).parent / "fixtures"
FOLDER, GGUF_FOLDER = FIXTURES / "qwen3_5_moe", FIXTURES / "gguf-qwen3_5_moe"
SOURCES = {"hf": (FOLDER, FOLDER / "reference.npz"),
           **{kind: (GGUF_FOLDER / f"qwen35moe-{kind}.gguf", GGUF_FOLDER / f"reference-{kind}.npz")
              for kind in ("f32", "q8_0")}}
REF = dict(np.load(FOLDER / "reference.npz"))
IDS = [int(t) for t in REF["ids"]]
LINEAR = [int(layer) for layer in REF["linear_layers"]]
TOP_K = REF["topk"].shape[-1]


def scenario(source: str = "hf", prefill_chunk: int | None = None, **moe_changes):
    """The checkpoint with the reference's chunk size (shorter than the prompt); `moe_changes` on its MoeSpec."""
    path, ref = SOURCES[source][0], np.load(SOURCES[source][1])
    found = load_checkpoint(path, ids=IDS, max_new_tokens=len(ref["greedy_ids"]))
    model = found.model
    model = dataclasses.replace(model, deltanet=dataclasses.replace(model.deltanet, chunk=int(ref["chunk"])),
                                moe=dataclasses.replace(model.moe, **moe_changes))
    return dataclasses.replace(found, model=model,
                               decode=dataclasses.replace(found.decode, prefill_chunk=prefill_chunk))


@functools.cache
def run(source: str):
    """The reference and the states of one source's run, made once."""
    ref = dict(np.load(SOURCES[source][1]))
    return ref, scenario(source), list(Session(scenario(source), make_backend("numpy", "float64")).steps())


def values(states, name: str, round_: int) -> np.ndarray:
    return next(to_host(s.values) for s in states if s.name == name and s.round == round_)


def round_ends(states) -> list:
    return [s for s, after in zip(states, states[1:] + [None]) if after is None or after.round != s.round]


@pytest.mark.parametrize("source", SOURCES)
def test_the_fixture_mixes_deltanet_and_attention_every_ffn_sparse_with_a_gated_shared_expert(source):
    ref, found, _ = run(source)
    model = found.model
    assert [b.mixer for b in model.blocks] == ["gated_deltanet", "gated_deltanet", "attention"]
    assert [b.ffn for b in model.blocks] == ["moe"] * 3
    moe = model.moe
    assert (moe.n_experts, moe.top_k, moe.d_expert, moe.d_shared) == (4, 2, 32, 32)
    assert moe.norm_topk and moe.shared_gate and not moe.sigmoid
    assert model.attn_gate and model.rope_dims == 4 and model.norm.weight_offset
    assert len(IDS) > 2 * int(ref["chunk"]) and ref["float32_ops"] == 0 and ref["ops"] > 1000
    for probs in (ref["probs"], ref["step_probs"], ref["router_logits"], ref["step_router_logits"]):
        ordered = -np.sort(-probs, axis=-1)  # the reference itself never sits on a near tie
        assert (ordered[..., TOP_K - 1] - ordered[..., TOP_K]).min() >= 1e-3


@pytest.mark.parametrize("source", SOURCES)
def test_prefill_router_logits_chosen_experts_every_layer_and_logits_match_transformers(source):
    ref, found, states = run(source)
    for layer in range(found.model.n_layers):
        assert np.abs(values(states, f"blocks.{layer}.mlp.hook_router_logits", 0) - ref["router_logits"][layer]).max() \
            <= 1e-9
        assert np.array_equal(values(states, f"blocks.{layer}.mlp.hook_topk", 0), ref["topk"][layer])
        assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", 0) - ref["layers"][layer]).max() <= 1e-9
    assert np.abs(values(states, "unembed.hook_out", 0) - ref["logits"]).max() <= 1e-9


@pytest.mark.parametrize("source", SOURCES)
def test_every_pass_routes_computes_and_keeps_its_states_as_transformers_and_greedy_ids_agree(source):
    """transformers' conv cache keeps K columns, (channels, K); ours the K−1 inputs the next pass reads."""
    ref, found, states = run(source)
    ends = round_ends(states)
    assert len(ends) == len(ref["step_logits"])
    for round_, end in enumerate(ends):
        for layer in range(found.model.n_layers):
            ours = values(states, f"blocks.{layer}.mlp.hook_router_logits", round_)[-1]
            assert np.abs(ours - ref["step_router_logits"][round_, layer]).max() <= 1e-9
            assert np.array_equal(values(states, f"blocks.{layer}.mlp.hook_topk", round_)[-1],
                                  ref["step_topk"][round_, layer])
            ours = values(states, f"blocks.{layer}.hook_resid_post", round_)[-1]
            assert np.abs(ours - ref["step_layers"][round_, layer]).max() <= 1e-9
        assert np.abs(values(states, "unembed.hook_out", round_)[-1] - ref["step_logits"][round_]).max() <= 1e-9
        for i, layer in enumerate(LINEAR):
            kept = end.caches[layer]
            assert np.abs(to_host(kept.recurrent) - ref["step_recurrent"][round_, i]).max() <= 1e-9
            assert np.abs(to_host(kept.window.rows) - ref["step_conv"][round_, i][:, 1:].T).max() <= 1e-9
    assert [int(to_host(s.values)[0, 0]) for s in states if s.kind == "choice"] == ref["greedy_ids"].tolist()


@pytest.mark.parametrize("source, prefill_chunk", [("hf", None), ("hf", 3), ("f32", None), ("q8_0", None)])
def test_the_cached_decode_equals_the_full_recompute(source, prefill_chunk):
    diffs = diff_scenario(scenario(source, prefill_chunk), make_backend("numpy", "float64"))
    names = {d.name for d in diffs if d.round > 0}
    assert {"blocks.0.linear_attn.hook_state", "blocks.0.mlp.hook_topk", "blocks.2.mlp.shared.hook_out",
            "blocks.1.mlp.hook_shared_gate", "blocks.2.attn.hook_gate"} <= names
    assert any(".mlp.experts." in name for name in names)  # the experts' rows are compared too
    assert max(d.max_abs for d in diffs) <= 1e-12


@pytest.mark.parametrize("change", [{"d_shared": 0}, {"shared_gate": False}, {"norm_topk": False}])
def test_the_shared_expert_its_gate_and_the_renormalised_weights_each_change_what_it_computes(change):
    """Without its shared expert, with the shared expert ungated, or with the chosen scores unnormalised, the logits
    leave transformers'."""
    states = list(Session(scenario(**change), make_backend("numpy", "float64")).steps())
    assert np.abs(values(states, "unembed.hook_out", 0) - REF["logits"]).max() > 1e-6


def test_the_operator_list_holds_the_experts_a_pass_ran_on_their_tokens_and_the_shared_expert_on_every_token():
    _, found, states = run("hf")
    for round_ in range(len(REF["step_logits"])):
        first = 0 if round_ == 0 else len(IDS) + round_ - 1
        for layer in range(found.model.n_layers):
            chosen = values(states, f"blocks.{layer}.mlp.hook_topk", round_).astype(int)
            ran = {s.op.hook.module for s in states if s.round == round_ and s.layer == layer
                   and s.op.hook.module.startswith("mlp.experts.")}
            assert ran == {f"mlp.experts.{e}" for e in np.unique(chosen)}
            for expert in np.unique(chosen):
                state = next(s for s in states if s.round == round_ and s.name == f"blocks.{layer}.mlp.experts.{expert}"
                             ".hook_out")
                assert state.positions == tuple(first + int(r) for r in np.flatnonzero((chosen == expert).any(axis=1)))
            shared = next(s for s in states if s.round == round_ and s.name == f"blocks.{layer}.mlp.shared.hook_out")
            assert shared.positions == tuple(range(first, first + len(chosen)))
            gate = values(states, f"blocks.{layer}.mlp.hook_shared_gate", round_)
            assert gate.shape == (len(chosen), 1) and ((0 < gate) & (gate < 1)).all()


def test_the_routing_of_decode_round_2_holds_each_layers_choice_weights_margin_and_count():
    from tinyllm_tui.debugger.readings import round_routing
    from tinyllm_tui.presentation.routing import routing_lines

    _, _, states = run("hf")
    routings = round_routing([s for s in states if s.round == 2])
    assert [r.layer for r in routings] == [0, 1, 2]
    for routing in routings:
        assert np.array_equal(routing.chosen[0], REF["step_topk"][2, routing.layer])
        assert np.abs(routing.weights.sum(axis=1) - 1).max() <= 1e-12
        probs = -np.sort(-REF["step_probs"][2, routing.layer])
        assert np.abs(routing.margins[0] - (probs[TOP_K - 1] - probs[TOP_K])).max() <= 1e-9
        assert routing.counts.tolist() == np.bincount(REF["step_topk"][2, routing.layer], minlength=4).tolist()
        assert routing.positions == (len(IDS) + 1,)
    lines = routing_lines(routings[1], width=60, height=6)
    assert lines[0] == f"layer 1 · position {len(IDS) + 1} · e0–e3 of 4"
    assert lines[-1].split()[1:] == [str(c) for c in routings[1].counts]


def test_the_f32_gguf_computes_what_the_folder_does_but_for_the_converters_float32_rounding():
    """Independent of the GGUF reference: an expert, a shared tensor or a value head out of place would move the
    logits by O(1)."""
    _, _, states = run("f32")
    assert 1e-9 < np.abs(values(states, "unembed.hook_out", 0) - REF["logits"]).max() < 1e-4


def test_the_ggufs_hold_merged_experts_and_the_shared_expert_as_llama_cpps_converter_writes_them():
    from engine.loading.gguf_model import GGUFModel

    for kind, expected in (("f32", "F32"), ("q8_0", "Q8_0")):
        tensors = GGUFModel(SOURCES[kind][0]).tensors
        assert {tensors[f"blk.1.ffn_{name}.weight"].kind.name for name in ("gate_exps", "up_exps", "down_exps",
                                                                           "gate_shexp")} == {expected}
        assert tensors["blk.1.ffn_gate_exps.weight"].shape == (4, 32, 32)
        assert tensors["blk.1.ffn_gate_inp_shexp.weight"].shape == (1, 32)


def test_every_operator_of_its_layers_is_explained_in_english_and_chinese():
    from engine.layers import explanation

    _, found, _ = run("hf")
    model = Session(found, make_backend("numpy", "float64")).model
    names = {site.hook.name for site in model.hooks.sites if site.hook.module.startswith(("mlp", "linear_attn"))}
    assert {"hook_router_logits", "hook_topk", "hook_shared_gate", "hook_state"} <= names
    for name in names - {"hook_pre", "hook_pre_linear", "hook_post", "hook_out"}:  # an expert's: the stack's texts
        texts = explanation(name)
        assert texts is not None and len(texts["en"]) == len(texts["zh"]) == 4, name


@pytest.mark.parametrize("changes, key", [
    ({"num_experts_per_tok": 5}, "num_experts_per_tok"),
    ({"shared_expert_intermediate_size": None}, "shared_expert_intermediate_size"),
    ({"moe_intermediate_size": 0}, "moe_intermediate_size"),
])
def test_a_bad_moe_setting_is_refused_naming_its_key(tmp_path, changes, key):
    folder = tmp_path / "model"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "config.json").read_text()) | changes
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    with refused(ScenarioError, f"config.json: {key}: "):
        load_checkpoint(folder, ids=IDS)
