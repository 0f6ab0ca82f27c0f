"""Encoders and textbook checks: the 004 encoder, expectations, the padding mask, dropout."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
from conftest import SCENARIOS, X01
from said import refused
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from engine import ScenarioError, Session, load_scenario, load_scenario_text, to_host
from engine.compare.check import check_scenario
from engine.compare.diff import diff_scenario
from engine.parameters import parameter_shapes
from engine.scenario import Scenario
from engine.spec import DecodeRule, ModelSpec, NormSpec, Request, Vocab
from tinyllm_tui.cli import app
from x01_expectations import DATA, with_expectations

ENCODER = SCENARIOS / "encoder004.yaml"


def outcome(outcomes, op, note_start):
    return next(o for o in outcomes if o.expectation.op == op and o.expectation.note.startswith(note_start))


def test_x01_check_reports_every_printed_cell_in_agreement():
    result = CliRunner().invoke(app, ["check", str(X01)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "summary: 45/45 tables agree fully; 332/332 printed cells agree"


def test_x01_expect_section_is_the_seed_data():
    text = X01.read_text(encoding="utf-8")
    assert with_expectations(text, json.loads(DATA.read_text(encoding="utf-8"))) == text


def test_encoder004_cells_checked_by_hand():
    """Pinned cells, each recomputed here with NumPy from the text's printed inputs."""
    scenario = load_scenario(ENCODER)
    outcomes = check_scenario(scenario)
    x = np.array(scenario.requests[0].vectors)
    w = scenario.weights["blocks.0.attn.wq"]
    q = outcome(outcomes, "blocks.0.attn.hook_q", "Q =")
    cells = {(c.position, c.col): c for c in q.cells}
    # Q row 0 (今天): the text expands Q[0][0] = 0.12×0.12 + … = 3.0638, and the whole row agrees.
    assert all(cells[0, j].agrees for j in range(8)) and abs(x[0] @ w[:, 0] - 3.0638) < 5e-5
    # Q[2][3] (真, feature 3): printed 2.7632, but x[2]·w[:,3] = 3.8090: the text's value does not follow.
    assert not cells[2, 3].agrees and cells[2, 3].printed == 2.7632
    assert abs(cells[2, 3].computed - x[2] @ w[:, 3]) < 1e-12 and abs(cells[2, 3].computed - 3.8090) < 5e-5
    # masked_scores: every PAD key column is −∞ in the text and here.
    masked = outcome(outcomes, "blocks.0.attn.hook_attn_scores", "masked_scores")
    assert all(c.agrees for c in masked.cells if c.col >= 4) and sum(c.col >= 4 for c in masked.cells) == 32
    # head-0 scores of 今天→天气: q0·q1/√2 with the 2-wide head slice, printed 14.2200.
    q_rows = x @ w
    by_hand = q_rows[0, :2] @ q_rows[1, :2] / np.sqrt(2)
    small = {(c.position, c.col): c for c in outcome(outcomes, "blocks.0.attn.hook_attn_scores", "head1_scores, 4×4").cells}
    assert abs(small[0, 1].computed - by_hand) < 1e-12 and small[0, 1].agrees


def test_check_exits_1_and_lists_disagreeing_cells_with_labels():
    result = CliRunner().invoke(app, ["check", str(ENCODER)])
    assert result.exit_code == 1
    assert "✗ request 0 prefill blocks.0.attn.hook_q: 16/64 cells agree" in result.output
    assert "    row 2 · 真  col f3: printed 2.7632, computed 3.809000" in result.output
    doc = json.loads(CliRunner().invoke(app, ["check", str(ENCODER), "--json"]).output)
    assert doc[0]["op"] == "blocks.0.attn.hook_q" and (doc[0]["agreeing"], doc[0]["cells"]) == (16, 64)
    cell = next(d for d in doc[0]["disagreeing"] if (d["row"], d["col"]) == ("2 · 真", "f3"))
    assert cell["printed"] == 2.7632 and abs(cell["computed"] - 3.8090) < 5e-5


def test_a_bad_expectation_is_reported_where_it_is(tmp_path):
    text = X01.read_text(encoding="utf-8").replace("    rows: [0, 1, 2]\n    note: \"查表后的初始表示 X\"",
                                                   "    rows: [0, 1]\n    note: \"查表后的初始表示 X\"", 1)
    with refused(ScenarioError, r"expect\[0\]\.rows: names 2 rows but the table has 3"):
        load_scenario_text(text)


# -- the padding mask, by properties -------------------------------------------------------
def random_encoder(seed: int, real: int, pad: int, d: int, heads: int) -> Scenario:
    model = ModelSpec(d_model=d * heads, n_layers=2, n_heads=heads, d_head=d, d_ff=5,
                      norm=NormSpec("layernorm", "post", 1e-5, True), final_norm=False, ffn="gelu",
                      bias=True, causal=False, lm_head=False)
    vocab = Vocab(("PAD", "a", "b", "c", "d"), pad=0)
    rng = np.random.default_rng(seed)
    weights = {n: rng.normal(0, 1 / np.sqrt(s[0]), s) for n, s in parameter_shapes(model, len(vocab)).items()}
    tokens = tuple(int(t) for t in rng.integers(1, 5, real)) + (0,) * pad
    return Scenario("<encoder>", "encoder", vocab, model, weights, (Request(tokens, 1),), DecodeRule())


def encoder_output(scenario: Scenario) -> np.ndarray:
    return to_host(list(Session(scenario).steps())[-1].values)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), real=st.integers(1, 4), pad=st.integers(1, 3), d=st.integers(2, 3),
       heads=st.integers(2, 3))
def test_a_pad_embedding_changes_no_real_output(seed, real, pad, d, heads):
    scenario = random_encoder(seed, real, pad, d, heads)
    weights = dict(scenario.weights)
    weights["embed"] = weights["embed"].copy()
    weights["embed"][0] += np.arange(1.0, weights["embed"].shape[1] + 1)  # PAD's row, not a uniform shift
    changed = encoder_output(dataclasses.replace(scenario, weights=weights))
    original = encoder_output(scenario)
    assert np.allclose(changed[:real], original[:real], atol=1e-12)
    assert not np.allclose(changed[real:], original[real:])  # PAD rows are still computed, and do change


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), real=st.integers(2, 4), pad=st.integers(0, 2), data=st.data())
def test_swapping_two_real_tokens_permutes_the_outputs(seed, real, pad, data):
    scenario = random_encoder(seed, real, pad, 2, 2)
    i, j = data.draw(st.lists(st.integers(0, real - 1), min_size=2, max_size=2, unique=True))
    tokens = list(scenario.requests[0].tokens)
    tokens[i], tokens[j] = tokens[j], tokens[i]
    swapped = dataclasses.replace(scenario, requests=(Request(tuple(tokens), 1),))
    expected = encoder_output(scenario)
    expected[[i, j]] = expected[[j, i]]
    assert np.allclose(encoder_output(swapped), expected, atol=1e-12)


def test_dropout_in_training_mode_is_its_own_seeded_operator():
    model = dataclasses.replace(random_encoder(3, 3, 1, 2, 2).model, dropout=0.5, dropout_seed=4, training=True)
    scenario = dataclasses.replace(random_encoder(3, 3, 1, 2, 2), model=model)
    states = list(Session(scenario).steps())
    dropped = [s for s in states if s.name.endswith("mlp.hook_dropout")]
    assert len(dropped) == 2 and dropped[0].kind == "dropout"
    before = to_host(dropped[0].inputs[0].values)
    after = to_host(dropped[0].values)
    kept = after != 0
    assert np.allclose(after[kept], before[kept] / 0.5) and 0 < kept.mean() < 1
    again = [s for s in Session(scenario).steps() if s.name.endswith("mlp.hook_dropout")]
    assert np.array_equal(to_host(again[0].values), after)  # the same seed, the same mask
    assert all(d.max_abs <= 1e-12 for d in diff_scenario(scenario))
    off = dataclasses.replace(scenario, model=dataclasses.replace(model, training=False))
    assert not any(s.kind == "dropout" for s in Session(off).steps())
