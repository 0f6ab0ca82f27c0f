"""The mixture-of-experts FFN kind on tiny random Qwen3-MoE and Qwen2-MoE checkpoints (tools/make_moe_fixtures.py):
against transformers' true float64 forward (router logits, chosen experts, every layer, logits, greedy ids, every
pass), cached equal to the full recompute; on Qwen3-MoE an expert ablated and a route forced against an independent
NumPy Qwen3-MoE written here, the operator list showing only the experts a pass ran, breakpoints on routing and the
routing view."""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from said import refused
from typer.testing import CliRunner

from engine import Session, make_backend, to_host
from engine.breakpoints import BreakpointError, parse_breakpoint
from engine.compare.diff import diff_scenario
from engine.interventions import parse_ablation, parse_intervention
from engine.layers.moe_ffn import route
from engine.loading import ScenarioError
from engine.loading.checkpoint import load_checkpoint
from tinyllm_tui.cli import app
from tinyllm_tui.presentation.against_words import report_document, report_lines

FIXTURES = Path(__file__).parent / "fixtures"
ARCHS = ("qwen3_moe", "qwen2_moe")
FOLDER = FIXTURES / "qwen3_moe"
REF = dict(np.load(FOLDER / "reference.npz"))
IDS = [int(t) for t in REF["ids"]]
MOE_LAYERS = [int(layer) for layer in REF["moe_layers"]]
TOP_K = REF["topk"].shape[-1]


def open_fixture(folder: Path = FOLDER, interventions=(), **moe_changes):
    ref = np.load(folder / "reference.npz")
    scenario = load_checkpoint(folder, ids=[int(t) for t in ref["ids"]], max_new_tokens=len(ref["greedy_ids"]))
    if moe_changes:
        scenario = replace(scenario, model=replace(scenario.model, moe=replace(scenario.model.moe, **moe_changes)))
    scenario = replace(scenario, interventions=tuple(interventions))
    session = Session(scenario, make_backend("numpy", "float64"))
    return scenario, session, list(session.steps())


SCENARIO, SESSION, STATES = open_fixture()


@functools.cache
def fixture(arch: str):
    """The reference, scenario, session and states of a fixture, made once."""
    if arch == "qwen3_moe":
        return REF, SCENARIO, SESSION, STATES
    return dict(np.load(FIXTURES / arch / "reference.npz")), *open_fixture(FIXTURES / arch)


def values(states, name: str, round_: int) -> np.ndarray:
    return next(to_host(s.values) for s in states if s.name == name and s.round == round_)


def rounds(states) -> list[int]:
    return sorted({s.round for s in states})


# -- against transformers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("arch, kinds", [("qwen3_moe", ["moe", "moe", "dense", "moe"]),
                                         ("qwen2_moe", ["dense", "moe", "moe"])])
def test_the_fixtures_mix_sparse_and_dense_layers_and_no_reference_sits_on_a_near_tie(arch, kinds):
    ref, scenario, _, _ = fixture(arch)
    assert [block.ffn for block in scenario.model.blocks] == kinds
    assert ref["float32_ops"] == 0 and ref["ops"] > 1000  # the dispatch counter saw the passes, none in float32
    for probs in (ref["probs"], ref["step_probs"]):
        ordered = -np.sort(-probs, axis=-1)
        assert (ordered[..., TOP_K - 1] - ordered[..., TOP_K]).min() >= 1e-3


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_router_logits_chosen_experts_every_layer_and_logits_match_transformers(arch):
    ref, _, _, states = fixture(arch)
    for i, layer in enumerate(ref["moe_layers"]):
        ours = values(states, f"blocks.{layer}.mlp.hook_router_logits", 0)
        assert np.abs(ours - ref["router_logits"][i]).max() <= 1e-9
        assert np.array_equal(values(states, f"blocks.{layer}.mlp.hook_topk", 0), ref["topk"][i])
    for layer, theirs in enumerate(ref["layers"]):
        assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", 0) - theirs).max() <= 1e-9
    assert np.abs(values(states, "unembed.hook_out", 0) - ref["logits"]).max() <= 1e-9


@pytest.mark.parametrize("arch", ARCHS)
def test_every_cached_decode_pass_routes_and_computes_as_transformers_and_greedy_ids_agree(arch):
    ref, _, session, states = fixture(arch)
    assert rounds(states) == list(range(len(ref["step_logits"])))
    for round_ in rounds(states):
        for i, layer in enumerate(ref["moe_layers"]):
            ours = values(states, f"blocks.{layer}.mlp.hook_router_logits", round_)[-1]
            assert np.abs(ours - ref["step_router_logits"][round_, i]).max() <= 1e-9
            chosen = values(states, f"blocks.{layer}.mlp.hook_topk", round_)[-1]
            assert np.array_equal(chosen, ref["step_topk"][round_, i])
        for layer, theirs in enumerate(ref["step_layers"][round_]):
            assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", round_)[-1] - theirs).max() <= 1e-9
        assert np.abs(values(states, "unembed.hook_out", round_)[-1] - ref["step_logits"][round_]).max() <= 1e-9
    assert list(session.results[0].generated) == ref["greedy_ids"].tolist()


@pytest.mark.parametrize("change", [{"d_shared": 0}, {"norm_topk": True}])
def test_qwen2_moes_shared_expert_and_unnormalised_weights_each_change_what_it_computes(change):
    """Without its shared expert, or with its chosen scores normalised, the logits leave transformers'."""
    ref = fixture("qwen2_moe")[0]
    _, _, states = open_fixture(FIXTURES / "qwen2_moe", **change)
    assert np.abs(values(states, "unembed.hook_out", 0) - ref["logits"]).max() > 1e-6


def test_the_shared_expert_runs_on_every_token_under_its_sigmoid_gate():
    _, _, _, states = fixture("qwen2_moe")
    gate = values(states, "blocks.1.mlp.hook_shared_gate", 0)
    shared = next(s for s in states if s.name == "blocks.1.mlp.shared.hook_out" and s.round == 0)
    assert gate.shape == (len(shared.positions), 1) and ((0 < gate) & (gate < 1)).all()
    assert shared.positions == tuple(range(len(fixture("qwen2_moe")[0]["ids"])))


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_decode_equals_the_full_recompute(arch):
    _, scenario, _, states = fixture(arch)
    diffs = diff_scenario(scenario, make_backend("numpy", "float64"))
    assert {d.round for d in diffs} == set(rounds(states))
    assert any(".mlp.experts." in d.name for d in diffs if d.round > 0)  # the experts' rows are compared too
    assert max(d.max_abs for d in diffs) <= 1e-12


def test_the_diff_command_finds_cached_and_full_the_same():
    result = CliRunner().invoke(app, ["diff", str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", "3"])
    assert result.exit_code == 0, result.output
    assert "cached equals full recompute: every operator within 1e-12" in result.output
    assert "✓ request 0 decode 2  blocks.3.mlp.hook_topk  max|Δ| 0.000e+00" in result.output


def test_the_fused_expert_tensors_of_transformers_5_read_as_the_per_expert_ones(tmp_path):
    """mlp.experts.gate_up_proj (E × 2f × d, gate rows first) and down_proj (E × d × f) give the same model."""
    tensors = load_file(FOLDER / "model.safetensors")
    for layer in MOE_LAYERS:
        base = f"model.layers.{layer}.mlp.experts"
        per = [[tensors.pop(f"{base}.{e}.{name}.weight") for name in ("gate_proj", "up_proj", "down_proj")]
               for e in range(SCENARIO.model.moe.n_experts)]
        tensors[f"{base}.gate_up_proj"] = np.stack([np.concatenate([gate, up]) for gate, up, _ in per])
        tensors[f"{base}.down_proj"] = np.stack([down for _, _, down in per])
    for name in ("config.json", "tokenizer.json", "reference.npz"):
        shutil.copy(FOLDER / name, tmp_path / name)
    save_file(tensors, tmp_path / "model.safetensors")
    _, _, fused = open_fixture(tmp_path)
    assert all(np.array_equal(to_host(a.values), to_host(b.values)) for a, b in zip(STATES, fused, strict=True))


# -- which experts run ----------------------------------------------------------------------------------------
def test_the_operator_list_shows_only_the_experts_a_pass_ran_and_each_runs_only_its_tokens():
    for round_ in rounds(STATES):
        for layer in MOE_LAYERS:
            chosen = values(STATES, f"blocks.{layer}.mlp.hook_topk", round_).astype(int)
            ran = {s.op.hook.module for s in STATES if s.round == round_ and s.layer == layer
                   and s.op.hook.module.startswith("mlp.experts.")}
            assert ran == {f"mlp.experts.{e}" for e in np.unique(chosen)}
            first = 0 if round_ == 0 else len(IDS) + round_ - 1  # the position of the pass's first row
            for expert in np.unique(chosen):
                name = f"blocks.{layer}.mlp.experts.{expert}.hook_out"
                state = next(s for s in STATES if s.round == round_ and s.name == name)
                rows = np.flatnonzero((chosen == expert).any(axis=1))
                assert state.positions == tuple(first + int(r) for r in rows)


# -- an independent NumPy Qwen3-MoE --------------------------------------------------------------------------
def numpy_qwen3_moe(tokens: list[int], ablated: dict[int, set[int]] | None = None, norm_topk: bool | None = None,
                    forced: dict[int, dict[int, list[int]]] | None = None):
    """Every position's logits, each sparse layer's chosen experts and router softmax, from the Hugging Face
    tensors and the Qwen3-MoE equations (not the engine's code): RMSNorm, per-head q/k RMSNorm, half-split
    RoPE, grouped-query causal attention, then a dense SwiGLU or the router: softmax, the top k (an ablated
    expert never; `forced`: layer -> position -> experts instead), their scores (over their sum with
    norm_topk_prob) weighting the chosen experts' SwiGLUs."""
    cfg = json.loads((FOLDER / "config.json").read_text())
    w = {k: v.astype(np.float64) for k, v in load_file(FOLDER / "model.safetensors").items()}
    heads, kv, dh, eps, k = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                             cfg["rms_norm_eps"], cfg["num_experts_per_tok"])
    norm_topk = cfg["norm_topk_prob"] if norm_topk is None else norm_topk
    x, t = w["model.embed_tokens.weight"][tokens], len(tokens)
    pos = np.arange(t)
    angle = pos[:, None] * cfg["rope_parameters"]["rope_theta"] ** (-np.arange(0, dh, 2) / dh)[None, :]
    cos, sin = (f(np.concatenate([angle, angle], 1))[:, None, :] for f in (np.cos, np.sin))

    def rms(v, g):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * g

    def rope(v):
        return v * cos + np.concatenate([-v[..., dh // 2:], v[..., :dh // 2]], -1) * sin

    def swiglu(v, p):
        gate = v @ w[p + "gate_proj.weight"].T
        return (gate / (1 + np.exp(-gate)) * (v @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T

    routes, scores = {}, {}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rope(rms((h @ w[p + "self_attn.q_proj.weight"].T).reshape(t, heads, dh), w[p + "self_attn.q_norm.weight"]))
        kk = rope(rms((h @ w[p + "self_attn.k_proj.weight"].T).reshape(t, kv, dh), w[p + "self_attn.k_norm.weight"]))
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(t, kv, dh)
        z = []
        for head in range(heads):
            s = np.where(pos[None, :] <= pos[:, None], q[:, head] @ kk[:, head * kv // heads].T / np.sqrt(dh), -np.inf)
            e = np.exp(s - s.max(-1, keepdims=True))
            z.append(e / e.sum(-1, keepdims=True) @ v[:, head * kv // heads])
        x = x + np.concatenate(z, 1) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        if p + "mlp.gate.weight" not in w:
            x = x + swiglu(h, p + "mlp.")
            continue
        logits = h @ w[p + "mlp.gate.weight"].T
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        allowed = probs.copy()
        allowed[:, sorted((ablated or {}).get(layer, ()))] = -1.0  # below every probability
        chosen = np.argsort(-allowed, axis=1, kind="stable")[:, :k]
        for position, experts in (forced or {}).get(layer, {}).items():
            chosen[position] = experts
        weights = np.take_along_axis(probs, chosen, axis=1)
        weights = weights / weights.sum(1, keepdims=True) if norm_topk else weights
        out = np.zeros_like(x)
        for row in range(t):
            for rank in range(k):
                out[row] += weights[row, rank] * swiglu(h[row:row + 1], f"{p}mlp.experts.{chosen[row, rank]}.")[0]
        x = x + out
        routes[layer], scores[layer] = chosen, probs
    return rms(x, w["model.norm.weight"]) @ w["model.embed_tokens.weight"].T, routes, scores


def sequence(session) -> list[int]:
    return IDS + list(session.results[0].generated)[:-1]


def assert_engine_is_numpy(states, session, **numpy_options):
    expected, routes, scores = numpy_qwen3_moe(sequence(session), **numpy_options)
    for round_ in rounds(states):
        ours = values(states, "unembed.hook_out", round_)
        rows = slice(0, len(IDS)) if round_ == 0 else slice(len(IDS) + round_ - 1, len(IDS) + round_)
        assert np.abs(ours - expected[rows]).max() <= 1e-12
        for layer in MOE_LAYERS:
            assert np.array_equal(values(states, f"blocks.{layer}.mlp.hook_topk", round_), routes[layer][rows])
    return routes, scores


def test_the_numpy_qwen3_moe_is_the_reference_too():
    expected, routes, _ = numpy_qwen3_moe(IDS)
    assert np.abs(expected - REF["logits"]).max() <= 1e-9
    assert all(np.array_equal(routes[layer], REF["topk"][i]) for i, layer in enumerate(MOE_LAYERS))


def test_ablating_an_expert_matches_the_numpy_moe_and_the_next_best_takes_its_place():
    ablation = parse_ablation("blocks.1.mlp expert 3")
    assert ablation.text == "blocks.1.mlp.hook_router_scores[:,3]=-inf"
    assert (REF["topk"][MOE_LAYERS.index(1)] == 3).any()  # the fixture routes some tokens to expert 3
    _, session, states = open_fixture(interventions=[ablation])
    routes, scores = assert_engine_is_numpy(states, session, ablated={1: {3}})
    assert not (routes[1] == 3).any()
    best = np.argsort(-scores[1], axis=1, kind="stable")  # layer 1's router reads nothing the ablation changed
    kept = ~(best[:, :TOP_K] == 3).any(axis=1)
    assert np.array_equal(routes[1][kept], best[kept, :TOP_K])  # tokens that never chose 3 keep their route
    assert np.array_equal(routes[1][~kept], best[~kept][best[~kept] != 3].reshape(-1, 7)[:, :TOP_K])
    assert (~kept).any() and not any(s.name.startswith("blocks.1.mlp.experts.3.") for s in states)


def test_a_forced_route_runs_the_experts_named_for_that_token_weighted_by_their_scores():
    forced = parse_intervention("blocks.1.mlp.hook_topk[4,:]=[2, 7]")
    assert not {2, 7} & set(REF["topk"][MOE_LAYERS.index(1)][4].tolist())  # neither is the token's own choice
    _, session, states = open_fixture(interventions=[forced])
    routes, _ = assert_engine_is_numpy(states, session, forced={1: {4: [2, 7]}})
    assert routes[1][4].tolist() == [2, 7]
    assert 4 in next(s for s in states if s.name == "blocks.1.mlp.experts.2.hook_out" and s.round == 0).positions


@pytest.mark.parametrize("text, message", [
    ("blocks.1.mlp.hook_topk[4,:]=[2.5, 7]", "a route is set to expert numbers 0–7"),
    ("blocks.1.mlp.hook_topk[4,:]=[2, 8]", "a route is set to expert numbers 0–7"),
    ("blocks.1.mlp.hook_topk[4,:]*=2", "a route is set to expert numbers 0–7"),
    ("blocks.2.mlp expert 1", "layer 2's FFN has no experts (the sparse layers are 0, 1, 3)"),
    ("blocks.1.mlp expert 8", "has columns 0–7"),
])
def test_an_intervention_on_the_routing_that_cannot_apply_is_refused_in_one_line(text, message):
    result = CliRunner().invoke(app, ["run", str(FOLDER), "--ids", "1,2", "--ablate" if "expert" in text else "--patch",
                                      text])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_without_norm_topk_prob_the_chosen_scores_are_the_weights():
    _, session, states = open_fixture(norm_topk=False)
    assert_engine_is_numpy(states, session, norm_topk=False)
    assert not any(s.name.endswith("hook_topk_scores") for s in states)


# -- breakpoints on routing -------------------------------------------------------------------------------
def reference_margins(layer: int) -> list[np.ndarray]:
    """Each pass's per-token gap between the k-th and (k+1)-th router score, from transformers' scores."""
    i = MOE_LAYERS.index(layer)
    passes = [REF["probs"][i]] + [REF["step_probs"][r, i][None, :] for r in range(1, len(REF["step_probs"]))]
    ordered = [-np.sort(-p, axis=-1) for p in passes]
    return [o[:, TOP_K - 1] - o[:, TOP_K] for o in ordered]


def test_a_route_margin_breakpoint_joined_with_a_layer_stops_where_the_reference_nearly_ties():
    margins = reference_margins(3)
    lowest = sorted(m.min() for m in margins)  # halfway between two passes' least margins, not on one: the engine's
    threshold = float(lowest[1] + lowest[2]) / 2  # own margin there differs from transformers' by round-off (2.6e-16)
    breakpoint = parse_breakpoint(f"layer=3 & route_margin<{threshold!r}")
    hits = [(s.round, s.name) for s in STATES if breakpoint.hits(s)]
    expected = [(r, "blocks.3.mlp.hook_topk") for r, m in enumerate(margins) if (m < threshold).any()]
    assert hits == expected and 0 < len(hits) < len(margins)


def test_an_expert_breakpoint_stops_at_each_top_k_that_routes_a_token_to_it():
    breakpoint = parse_breakpoint("expert=5")
    hits = {(s.round, s.layer) for s in STATES if breakpoint.hits(s)}
    topk = [REF["topk"]] + [REF["step_topk"][r][:, None, :] for r in range(1, len(REF["step_topk"]))]
    expected = {(r, layer) for r, chosen in enumerate(topk) for i, layer in enumerate(MOE_LAYERS)
                if (chosen[i] == 5).any()}
    assert hits == expected and hits


def test_route_reads_the_margins_of_a_top_k_operator():
    state = next(s for s in STATES if s.name == "blocks.3.mlp.hook_topk" and s.round == 0)
    assert np.abs(route(state.op).margins - reference_margins(3)[0]).max() <= 1e-9
    assert route(STATES[0].op) is None


@pytest.mark.parametrize("text", ["expert=x", "route_margin<abc"])
def test_a_routing_breakpoint_that_is_not_a_number_is_refused_in_one_line(text):
    with refused(BreakpointError, "not"):
        parse_breakpoint(text)


# -- the config ------------------------------------------------------------------------------------------------
def moe_config(tmp_path: Path, **changes) -> Path:
    config = json.loads((FOLDER / "config.json").read_text()) | changes
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name in ("model.safetensors", "tokenizer.json"):
        shutil.copy(FOLDER / name, tmp_path / name)
    return tmp_path


def test_decoder_sparse_step_and_mlp_only_layers_choose_the_sparse_layers_as_transformers_does(tmp_path):
    from engine.loading.hf import Tensors, read_spec

    folder = moe_config(tmp_path, decoder_sparse_step=2, mlp_only_layers=[])
    assert read_spec(folder, Tensors(folder).held())[1].moe.layers == (1, 3)  # (i + 1) % 2 == 0
    folder = moe_config(tmp_path, num_experts=8, mlp_only_layers=[0, 3])
    assert read_spec(folder, Tensors(folder).held())[1].moe.layers == (1, 2)


@pytest.mark.parametrize("changes, key", [({"num_experts_per_tok": 9}, "num_experts_per_tok"),
                                          ({"norm_topk_prob": "yes"}, "norm_topk_prob"),
                                          ({"mlp_only_layers": "2"}, "mlp_only_layers"),
                                          ({"moe_intermediate_size": 0}, "moe_intermediate_size"),
                                          ({"num_local_experts": 2**30}, "num_local_experts")])
def test_a_bad_moe_setting_is_refused_naming_its_key(tmp_path, changes, key):
    with refused(ScenarioError, key):
        load_checkpoint(moe_config(tmp_path, **changes), ids=IDS)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_operator_of_the_sparse_layers_is_explained_in_english_and_chinese(arch):
    from tinyllm_tui.debugger.frame import hook_key
    from tinyllm_tui.tui.explanations import texts_of

    ref, _, _, states = fixture(arch)
    sparse = [s for s in states if s.layer in ref["moe_layers"] and s.round == 0
              and (s.op.hook.module.startswith("mlp") or s.op.hook.name == "hook_mlp_out")]
    for key in {hook_key(s) for s in sparse}:
        texts = texts_of(key)
        assert texts is not None and len(texts["en"]) == len(texts["zh"]) == 4, key  # why, how, pitfall, check
    by_name = {s.name: hook_key(s) for s in sparse}
    assert texts_of(by_name["blocks.1.hook_mlp_out"])["en"][0].startswith("The sparse FFN's output")
    outs = [key for name, key in by_name.items() if name.endswith(".hook_out") and ".mlp." in name]
    assert outs and all(texts_of(key)["en"][0].startswith("What one expert") for key in outs)


def test_the_sparse_layers_compute_the_same_on_array_api_strict(backend):
    session = Session(SCENARIO, backend)
    states = list(session.steps())
    assert [s.name for s in states] == [s.name for s in STATES]
    assert all(np.allclose(to_host(a.values), to_host(b.values), rtol=0, atol=1e-12) for a, b in zip(states, STATES))


# -- the routing view --------------------------------------------------------------------------------------------
def test_the_round_routing_holds_each_sparse_layers_choices_weights_margins_and_counts():
    from tinyllm_tui.debugger.readings import round_routing

    routings = round_routing([s for s in STATES if s.round == 0])
    assert [r.layer for r in routings] == MOE_LAYERS
    for i, routing in enumerate(routings):
        assert np.array_equal(routing.chosen, REF["topk"][i])
        assert np.abs(routing.weights.sum(axis=1) - 1).max() <= 1e-12  # norm_topk_prob
        assert np.abs(routing.margins - reference_margins(routing.layer)[0]).max() <= 1e-9
        assert routing.counts.tolist() == np.bincount(REF["topk"][i].ravel(), minlength=8).tolist()
        assert routing.positions == tuple(range(len(IDS))) and routing.labels[0].startswith("0 · ")


def test_the_routing_lines_are_a_window_that_fits_and_mark_the_chosen_cells_and_near_ties():
    from tinyllm_tui.debugger.readings import Routing
    from tinyllm_tui.presentation.routing import routing_lines

    chosen = np.array([[7, 2], [0, 1], [3, 4]])
    routing = Routing(5, (10, 11, 12), ("10 · 我爱学习很多很多", "11 · b", "12 · c"), chosen,
                      np.array([[0.75, 0.25], [0.5, 0.5], [0.9, 0.1]]), np.array([0.1, 2e-4, 0.3]), 64)
    lines = routing_lines(routing, width=52, height=5, first_row=1)
    assert lines[0] == "layer 5 · positions 11–12 (2 of 3) · e0–e4 of 64"  # which part of the tokens shows
    assert lines[1].split() == ["e0", "e1", "e2", "e3", "e4", "margin"]
    assert lines[2].split() == ["11", "·", "b", "0.500", "0.500", "·", "·", "·", "2.0e-04⚠"]  # a near tie is marked
    assert lines[3].split() == ["12", "·", "c", "·", "·", "·", "0.900", "0.100", "3.0e-01"]
    assert lines[4].split() == ["tokens", "1", "1", "1", "1", "1"]  # every token of the pass, shown or not
    assert len(lines) == 5 and all(len(line) <= 52 for line in lines)
    top = routing_lines(routing, width=52, height=5, first_expert=62)  # clamped: the last five experts
    assert top[1].split()[:5] == ["e59", "e60", "e61", "e62", "e63"] and top[2].startswith("10 · 我爱…  ")  # 12 cells: CJK takes two
    assert top[-1].split() == ["tokens", "0", "0", "0", "0", "0"]
    assert routing_lines(routing, width=52, height=9)[0] == "layer 5 · positions 10–12 · e0–e4 of 64"  # all of them
    one = replace(routing, positions=(3,), labels=("3 · a",), chosen=chosen[:1], weights=routing.weights[:1],
                  margins=routing.margins[:1])
    assert routing_lines(one, width=52, height=5)[0] == "layer 5 · position 3 · e0–e4 of 64"  # a decode round's one


async def test_e_opens_the_routing_of_the_current_layer_and_brackets_change_the_layer():
    from tui_helpers import matrix_cells, screen_text, settle

    from tinyllm_tui.tui.app import DebuggerApp
    from tinyllm_tui.tui.widgets.readings import RoutingScreen

    app = DebuggerApp(SCENARIO, lang="en", breakpoints=["layer=1 & expert=3"])
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("c")
        await settle(pilot)
        assert app.debugger.view.state.name == "blocks.1.mlp.hook_topk"
        chosen = to_host(app.debugger.view.state.values)
        cells = [row[1:] for row in matrix_cells(app)]  # the experts' ids, whole: '4', not '4.000000'
        assert cells and all(cell.strip("✓✗• ").isdigit() for row in cells for cell in row)
        assert [int(cell.strip("✓✗• ")) for cell in cells[0]] == chosen[0, :len(cells[0])].astype(int).tolist()
        await pilot.press("E")
        assert isinstance(app.screen, RoutingScreen)
        assert "⚠ marks a margin < 1e-3" in screen_text(app)  # a legend, not a warning
        assert "layer 1 · positions 0–" in screen_text(app)
        await pilot.press("right_square_bracket")
        assert "layer 3 · positions 0–" in screen_text(app)
        await pilot.press("escape")
        assert not isinstance(app.screen, RoutingScreen)



# -- routing flips against a dump -----------------------------------------------------------------------------------
def test_check_against_names_the_first_token_routed_otherwise_before_the_numeric_divergence(tmp_path):
    """A dump of a run with expert 6 of layer 1 ablated: the first flip is the first prompt token whose reference
    choice (transformers') holds expert 6, the dump's choice there what the NumPy MoE chooses without it."""
    from engine.compare.against import compare_generation

    dump = tmp_path / "ablated.npz"
    ids = ",".join(map(str, IDS))
    saved = CliRunner().invoke(app, ["run", str(FOLDER), "--ids", ids, "--max-new-tokens", "2", "--ablate",
                                     "blocks.1.mlp expert 6", "--save-activations", str(dump)])
    assert saved.exit_code == 0, saved.output
    report = compare_generation(replace(SCENARIO, requests=(replace(SCENARIO.requests[0], max_new_tokens=2),)), dump)
    reference = REF["topk"][MOE_LAYERS.index(1)]
    token = int(np.flatnonzero((reference == 6).any(axis=1))[0])
    ablated = numpy_qwen3_moe(IDS, ablated={1: {6}})[1][1]
    flip = report.flip
    assert (flip.key.pass_, flip.layer, flip.token.split(" · ")[0]) == ("prefill", 1, str(token))
    assert list(flip.ours) == reference[token].tolist() and list(flip.theirs) == ablated[token].tolist()
    assert flip.margin == pytest.approx(reference_margins(1)[0][token], abs=1e-9)
    lines = report_lines(report, "en")
    assert lines[1].startswith(f"first routing flip: prefill · layer 1 · token {token} · ")
    assert lines[2].startswith("first divergence: ") and not any("experts" in line for line in lines if "bridge" in line)
    assert report_document(report)["first_route_flip"]["dump"] == ablated[token].tolist()


def test_a_dump_that_routes_as_the_reference_reports_no_flip(tmp_path):
    from engine.compare.against import compare_generation

    dump = tmp_path / "same.npz"
    CliRunner().invoke(app, ["run", str(FOLDER), "--ids", ",".join(map(str, IDS)), "--max-new-tokens", "2",
                             "--save-activations", str(dump)])
    report = compare_generation(replace(SCENARIO, requests=(replace(SCENARIO.requests[0], max_new_tokens=2),)), dump)
    assert report.flip is None and report.first_divergence is None


def test_the_routing_opens_at_the_cursors_layer_or_the_next_sparse_one():
    from tinyllm_tui.debugger import Debugger

    debugger = Debugger(SCENARIO)
    routings, index = debugger.routing()  # at the first operator, before any layer: the first sparse one
    assert [r.layer for r in routings] == MOE_LAYERS and index == 0
    debugger.add_breakpoint("layer=1 & expert=3")
    debugger.continue_()
    routings, index = debugger.routing()
    assert debugger.view.state.layer == 1 and routings[index].layer == 1
    debugger.run_until(lambda state: state.layer == 2)  # a dense layer: the next sparse one, 3
    routings, index = debugger.routing()
    assert debugger.view.state.layer == 2 and routings[index].layer == 3
