"""The logit lens, direct logit attribution, `run --lens` and interventions on the command line and in files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from engine.analysis import attribution, logit_lens, passes
from engine.backend import to_host
from engine.loading import load_scenario_text, open_model
from engine.loading.scenario_file import ScenarioError
from engine.session import Session
from tinyllm_tui import cli
from tinyllm_tui.debugger.errors import bad_input
from tinyllm_tui.debugger.opening import with_interventions
from tinyllm_tui.tui.i18n import cause_words

FIXTURES = Path(__file__).parent / "fixtures"


def invoke(*args):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def traced(request):
    """A session's passes with the logits each produced (gpt2: LayerNorm with a bias, learned positions)."""
    scenario = open_model(FIXTURES / request.param, prompt="The cat sat", max_new_tokens=3)
    session = Session(scenario)
    states = list(session.steps())
    logits = {(s.request, s.round): to_host(s.values) for s in states if s.name == "unembed.hook_out"}
    return session, list(passes(iter(states))), logits


def test_the_lens_at_the_last_layer_is_the_models_own_top_k(traced):
    session, runs, logits = traced
    for run in runs:
        rows = logit_lens(session.model, run, k=5)
        last = rows[-1]
        assert last.hook == f"blocks.{session.model.spec.n_layers - 1}.hook_resid_post"
        own = logits[(run.request, run.round)]
        probs = np.exp(own - own.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        for position in range(own.shape[0]):
            expected = np.argsort(-probs[position])[:5]
            assert list(last.top[position]) == list(expected)
            np.testing.assert_allclose(last.probs[position], probs[position, expected], rtol=0, atol=1e-12)


def test_the_lens_reads_every_layer_in_order(traced):
    session, runs, _ = traced
    hooks = [row.hook for row in logit_lens(session.model, runs[0])]
    layers = session.model.spec.n_layers
    assert hooks == ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_{part}"
                                                   for layer in range(layers) for part in ("mid", "post")]


def test_direct_logit_attribution_sums_to_the_logit_less_the_norm_bias(traced):
    session, runs, logits = traced
    spec = session.model.spec
    for run in runs:
        a = attribution(session.model, run)
        assert a.token == int(run.get("sample.hook_choice")[0, 0])
        assert a.logit == logits[(run.request, run.round)][-1, a.token]
        labels = [label for label, _ in a.terms]
        assert len(labels) == 1 + spec.n_layers * (spec.n_heads + 1) + spec.n_layers * ("blocks.0.attn.bo" in
                                                                                          session.model.weights)
        assert [value for _, value in a.terms] == sorted((value for _, value in a.terms), reverse=True)
        assert abs(sum(value for _, value in a.terms) + a.bias_term - a.logit) <= 1e-9
    if "ln_final.b" in session.model.weights:  # gpt2: the final LayerNorm's bias is a term of its own
        assert a.bias_term != 0.0


@pytest.mark.parametrize("fixture, kinds", [("lfm2", ["conv", "attn", "conv"]),
                                             ("qwen3_5", ["linear_attn", "linear_attn", "attn"])])
def test_direct_logit_attribution_of_a_mixed_stack_counts_each_block_by_what_it_holds(fixture, kinds):
    """A block whose mixer is no attention (LFM2's short conv, Qwen3.5's Gated DeltaNet) adds its output whole:
    the terms still sum to the logit the model computed (it raised KeyError on blocks.0.attn.hook_result)."""
    scenario = open_model(FIXTURES / fixture, ids=[1, 2, 3], max_new_tokens=2)
    states = list(Session(scenario).steps())
    logits = {(s.request, s.round): to_host(s.values) for s in states if s.name == "unembed.hook_out"}
    session = Session(scenario)
    heads = scenario.model.n_heads
    for run in passes(iter(states)):
        a = attribution(session.model, run)
        assert a.logit == logits[(run.request, run.round)][-1, a.token]
        assert abs(sum(value for _, value in a.terms) + a.bias_term - a.logit) <= 1e-9
        expected = ["embed"]
        for layer, kind in enumerate(kinds):
            expected += [f"L{layer}.H{h}" for h in range(heads)] if kind == "attn" else [f"L{layer}.{kind}"]
            expected.append(f"L{layer}.mlp")
        assert sorted(label for label, _ in a.terms) == sorted(expected)


def test_run_lens_on_a_mixed_stack_prints_the_attribution():
    result = invoke("run", FIXTURES / "lfm2", "--ids", "1,2,3", "--lens")
    assert result.exit_code == 0, result.output
    assert "  L0.conv " in result.output and "  L1.H0 " in result.output


def test_an_ablated_head_attributes_nothing():
    scenario = open_model(FIXTURES / "llama", prompt="The cat sat", max_new_tokens=1)
    scenario = with_interventions(scenario, None, ["blocks.1.attn head 2"])
    session = Session(scenario)
    run = next(passes(session.steps()))
    assert dict(attribution(session.model, run).terms)["L1.H2"] == 0.0
    assert dict(attribution(session.model, run).terms)["L1.H1"] != 0.0


# -- the command line ----------------------------------------------------------------------------------
def test_run_lens_prints_the_layer_by_position_table_and_the_attribution():
    result = invoke("run", FIXTURES / "llama", "--prompt", "The cat", "--lens", "--top-k", "2",
                    "--ablate", "blocks.0.attn head 1")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "── request 0 · prefill · logit lens ──"
    assert lines[1].startswith("chose ")
    assert [line.split()[:2] for line in lines[4:9]] == [["0", "pre"], ["0", "mid"], ["0", "post"], ["1", "mid"],
                                                         ["1", "post"]]
    attribution_line = next(line for line in lines if line.startswith("direct logit attribution"))
    logit, terms = map(float, re.search(r"logit (\S+) = terms (\S+) \+", attribution_line).groups())
    assert abs(logit - terms) < 2e-6  # RMSNorm: no bias term
    assert "  L0.H1          +0.000000" in lines


def test_run_lens_json_holds_every_pass_and_position():
    result = invoke("run", FIXTURES / "llama", "--prompt", "The cat", "--max-new-tokens", "2", "--lens", "--json",
                    "--patch", "blocks.0.hook_resid_post[1,:]*=0.5 @prefill")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["interventions"] == ["blocks.0.hook_resid_post[1,:]*=0.5 @prefill"]
    assert [(p["request"], p["pass"]) for p in doc["passes"]] == [(0, "prefill"), (0, "decode.1")]
    prefill = doc["passes"][0]
    assert prefill["positions"] == list(range(len(prefill["lens"][0]["top"])))
    assert len(prefill["lens"][0]["top"][0]) == 5
    terms = sum(t["contribution"] for t in prefill["attribution"]["terms"])
    assert abs(terms - prefill["attribution"]["logit"]) < 1e-9


@pytest.mark.parametrize("option, text, fragment", [
    ("--patch", "blocks.0.hook_resid_post[2,:]=zero", "expected a number"),
    ("--patch", "blocks.7.hook_resid_post=0", "layers 0–1"),
    ("--ablate", "blocks.0.attn head 9", "heads 0–3"),
    ("--ablate", "blocks.0.attn", "expected 'blocks.L.attn head H'"),
    ("--patch", "blocks.0.hook_resid_post[0,40]=1", "columns 0–15"),
    ("--patch", "blocks.0.hook_resid_pots[0,:]=1", "no operator blocks.0.hook_resid_pots runs in this model"),
    ("--patch", "blocks.0.attn.hook_rot_v=1", "no operator blocks.0.attn.hook_rot_v"),
    ("--patch", "blocks.0.[1,:]=0", "expected HOOK[ROWS,COLS]=VALUE"),  # no hook's name: not a traceback
    ("--ablate", "blocks.0. head 1", "expected 'blocks.L.attn head H'"),
])
def test_bad_interventions_are_refused_with_one_line(monkeypatch, option, text, fragment):
    monkeypatch.setattr("tinyllm_tui.tui.app.launch", lambda loading, backend, **kw: loading.load())  # no terminal
    for command in ("run", "diff", "check", "open"):
        result = invoke(command, FIXTURES / "llama", "--prompt", "The cat", option, text)
        assert result.exit_code == 2, (command, result.output)
        assert fragment in result.stderr and "Traceback" not in result.output
        assert len(result.stderr.strip().splitlines()) == 1


def test_diff_with_an_ablation_still_agrees():
    """The cached run and the full recompute take the same interventions, so they still agree."""
    result = invoke("diff", FIXTURES / "llama", "--prompt", "The cat", "--max-new-tokens", "3",
                    "--ablate", "blocks.1.attn head 0", "--patch", "blocks.0.hook_resid_mid[1,:]=0")
    assert result.exit_code == 0, result.output


# -- scenario files ---------------------------------------------------------------------------------------
X01_TEXT = (Path(cli.bundled_x01())).read_text(encoding="utf-8")


def test_a_scenario_states_its_interventions():
    scenario = load_scenario_text(X01_TEXT + "\ninterventions:\n  - blocks.0.attn head 1\n"
                                  "  - blocks.0.hook_resid_post[0,:]=from:1 @request.0\n", "x.yaml")
    assert [i.text for i in scenario.interventions] == ["blocks.0.attn.hook_z head 1=0",
                                                        "blocks.0.hook_resid_post[0,:]=from:1 @request.0"]
    z = next(s for s in Session(scenario).steps() if s.name == "blocks.0.attn.hook_z" and s.head == 1)
    assert np.all(to_host(z.values) == 0) and np.any(to_host(z.original) != 0)


def test_a_bad_intervention_in_a_file_names_its_line_and_path():
    text = X01_TEXT + "\ninterventions:\n  - blocks.0.attn head 0\n  - blocks.0.attn.hook_z head 5=0\n"
    line = text.count("\n", 0, text.index("head 5")) + 1
    with pytest.raises(ScenarioError) as error:
        load_scenario_text(text, "x.yaml")
    said = bad_input(error.value, lambda cause: cause_words(cause, "en"))  # as the CLI says it
    assert said.startswith(f"x.yaml:{line}: interventions[1]:") and "heads 0–1" in said


def test_a_choice_under_interventions_says_what_the_pass_chose_without_them():
    scenario = open_model(FIXTURES / "llama", prompt="The cat", max_new_tokens=1)
    probs = next(to_host(s.values)[0] for s in Session(scenario).steps() if s.name == "sample.hook_probs")
    result = invoke("run", FIXTURES / "llama", "--prompt", "The cat", "--lens", "--ablate", "blocks.1.attn head 0")
    assert result.exit_code == 0, result.output
    line = result.output.splitlines()[1]
    clean = int(np.argmax(probs))
    assert line.endswith(f" · without the interventions: {scenario.vocab.tokens[clean]} (token id {clean}, "
                         f"p {probs[clean]:.6f})"), line


# -- the TUI's readings, headless --------------------------------------------------------------------------
def test_attention_at_a_glance_draws_each_head_of_a_layer_in_its_window():
    from tinyllm_tui.debugger.readings import round_glance
    from tinyllm_tui.presentation.glance import heads_glance_lines

    scenario = open_model(FIXTURES / "llama", prompt="The cat sat", max_new_tokens=1)
    states = [s for s in Session(scenario).steps() if s.round == 0]
    patterns = round_glance(states, states[-1], 2, scenario.vocab.tokens).patterns(1)
    assert len(patterns) == 4 and patterns[0].shape == (5, 5)
    lines = heads_glance_lines(patterns, ["a", "b", "c", "d", "e"], width=32, height=10, selected=1)
    assert lines[0].split() == ["h0", "▸h1", "h2", "h3"]  # 4 heads of 5 columns + 2 fit in 32 beside the gutter
    assert lines[1][:7] == "a █    "  # query a sees only key a, which holds all its weight; the future is blank
    assert [line[0] for line in lines[1:6]] == list("abcde") and lines[6].strip().startswith("abcde")
    assert "heads 0–3 of 4" in lines[7]
    narrow = heads_glance_lines(patterns, list("abcde"), width=16, height=5, first_head=2)
    assert narrow[0].split() == ["h2", "h3"] and all(len(line) <= 16 for line in narrow)
    assert [line[0] for line in narrow[1:3]] == ["d", "e"]  # the last two queries
    assert len(narrow) == 5  # title, 2 query rows (the last two), labels, window line


def test_the_lens_says_its_probabilities_are_the_whole_vocabularys_not_the_decode_rules():
    """A new user's report: X01's lens shows PAD in its top 3 and 爱 at 0.27 where sample.hook_probs says
    0.307383: the lens is the softmax of every logit, before the decode rule's filter. The screen says so."""
    from conftest import X01

    from engine import load_scenario
    from tinyllm_tui.debugger import Debugger
    from tinyllm_tui.tui.widgets.readings import LensScreen

    debugger = Debugger(load_scenario(X01))
    debugger.search("unembed.hook_out")
    logits = to_host(debugger.view.state.values)[-1]
    reading = debugger.lens()
    whole = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert np.allclose(np.sort(whole)[::-1][:3], reading.rows[-1].probs[-1], rtol=0, atol=1e-12)  # what the line says
    lines = LensScreen("", reading, "en").lines(160, 40)
    assert "p: softmax of the whole vocabulary's logits (no decode filter or temperature)" in lines[:2]
    zh = LensScreen("", reading, "zh").lines(160, 40)
    assert "p：整个词表的逻辑值经 softmax 所得（未经解码规则的过滤与温度）" in zh[:2]
    result = invoke("run", X01, "--lens")  # and the command line's lens, under each pass's header
    assert result.output.splitlines()[2] == "p: softmax of the whole vocabulary's logits (no decode filter or temperature)"
