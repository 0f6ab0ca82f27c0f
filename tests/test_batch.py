"""Batched decode: left padding, the mask over it, per-request position ids, rows that stop early.

The reference is each request run alone (no padding at all): a batch must not change a number.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from said import refused
from test_caches import LLAMA

from engine import Session
from engine.compare.diff import diff_batch, diff_scenario, first_divergence
from engine.loading import load_checkpoint
from engine.spec import DecodeRule, Request
from engine.trace import Status

PROMPTS = (
    (5, 17, 42),
    (8, 99, 3, 250, 61, 7, 33),
    (120,),
    (44, 2, 9, 180, 77, 64, 13, 5, 290, 31, 8, 100),
)  # lengths 3, 7, 1 and 12
NEW = 8


def batch_scenario(eos: int | None = None, batch: bool = True):
    base = load_checkpoint(LLAMA, ids=[0])
    vocab = dataclasses.replace(base.vocab, eos=eos)
    return dataclasses.replace(base, vocab=vocab, requests=tuple(Request(p, NEW) for p in PROMPTS),
                               decode=DecodeRule(max_new_tokens=NEW, stop_at_eos=eos is not None), batch=batch)


def logits(session: Session) -> dict[tuple[int, int], np.ndarray]:
    """The last row of each round's logits: what the decode rule reads."""
    return {(s.request, s.round): np.asarray(s.values)[-1] for s in session.steps() if s.name == "unembed.hook_out"}


def test_a_padded_batch_gives_each_request_the_ids_and_logits_it_gets_alone():
    batched, alone = Session(batch_scenario()), Session(batch_scenario(batch=False))
    got, expected = logits(batched), logits(alone)
    assert batched.padding == (9, 5, 11, 0)
    assert [r.generated for r in batched.results] == [r.generated for r in alone.results]
    assert all(len(r.generated) == NEW for r in alone.results)
    assert got.keys() == expected.keys() and len(got) == 4 * NEW
    assert max(float(np.max(np.abs(got[key] - expected[key]))) for key in got) <= 1e-12
    assert first_divergence(diff_batch(batch_scenario())) is None  # every operator, not just the logits


def test_the_rows_go_through_each_operator_in_turn_and_carry_their_padding():
    scenario = batch_scenario()
    states = Session(scenario).steps()
    first = [next(states) for _ in range(4)]
    assert [(s.step, s.request, s.name) for s in first] == [(i, i, "hook_embed") for i in range(4)]
    assert all(len(s.context) == 12 for s in first)  # every row is as long as the longest prompt
    row = first[2]  # one token after 11 PADs
    assert row.context[:11] == (scenario.vocab.pad_id,) * 11 and row.context[11] == 120
    assert [t.status for t in row.timeline] == [Status.CURRENT] * 12
    rope = next(s for s in states if s.request == 2 and s.name == "blocks.0.attn.hook_rot_q")
    scores = next(s for s in states if s.request == 2 and s.name == "blocks.0.attn.hook_attn_scores")
    assert np.isneginf(np.asarray(scores.values)[-1, :11]).all()  # the real token reads no PAD
    assert np.isfinite(np.asarray(scores.values)[-1, 11])
    assert rope.step < scores.step


def test_an_eos_mid_batch_stops_that_request_and_leaves_the_others_unchanged():
    plain = Session(batch_scenario())
    plain_logits = logits(plain)
    generated = plain.results[1].generated
    eos = generated[3]  # request 1's fourth new token becomes EOS: it stops in round 3
    assert eos not in generated[:3]
    stopping = Session(batch_scenario(eos=eos))
    stopped_logits = logits(stopping)
    results = stopping.results
    assert results[1].generated == generated[:4] and results[1].stop == "eos"
    alone = Session(batch_scenario(eos=eos, batch=False))
    alone_logits = logits(alone)
    assert [r.generated for r in results] == [r.generated for r in alone.results]
    going_on = [i for i, r in enumerate(results) if eos not in r.generated]
    assert going_on and all(len(results[i].generated) == NEW for i in going_on)
    assert stopped_logits.keys() == alone_logits.keys()
    for key in stopped_logits:
        assert float(np.max(np.abs(stopped_logits[key] - alone_logits[key]))) <= 1e-12
        if key[0] in going_on:
            assert np.array_equal(stopped_logits[key], plain_logits[key])
    assert max(r for q, r in stopped_logits if q == 1) == 3


@pytest.mark.parametrize("bug, expected", [
    # a real token's query reads the PAD keys before it: the first scores of a padded request
    ("padding-unmasked", (0, "prefill", "blocks.0.attn.hook_attn_scores", 0)),
    # q and k are right; their rotation by position is the first thing the positions touch
    ("positions-not-offset", (0, "prefill", "blocks.0.attn.hook_rot_q", None)),
])
def test_each_padding_bug_is_caught_where_it_acts(bug, expected):
    alone = first_divergence(diff_batch(batch_scenario(), inject=bug))
    assert (alone.request, alone.phase, alone.name, alone.head) == expected
    full = first_divergence(diff_scenario(batch_scenario(), inject=bug))  # the batch against its full recompute
    assert (full.request, full.phase, full.name, full.head) == expected
    assert first_divergence(diff_scenario(batch_scenario())) is None


def test_diff_batch_on_the_command_line_checks_each_request_against_itself_alone():
    from typer.testing import CliRunner

    from tinyllm_tui.cli import app

    ids = [arg for prompt in PROMPTS for arg in ("--ids", ",".join(map(str, prompt)))]
    result = CliRunner().invoke(app, ["diff", str(LLAMA), *ids, "--max-new-tokens", "3", "--batch"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == ("✓ the batch equals each request alone: every operator within the "
                                              "dtype's tolerance (1e-12 in float64) + 4·(blocks passed + 1)·ε·"
                                              "max|value| (ε: the dtype's rounding step; token ids exactly)")
    assert any(re.fullmatch(r"✓ request 3 decode 2  unembed.hook_out  max\|Δ\| \S+ \(≤ \d\.?\d?e-\d\d\)", line)
               for line in result.output.splitlines())
    buggy = CliRunner().invoke(app, ["diff", str(LLAMA), *ids, "--max-new-tokens", "3", "--batch",
                                     "--inject", "padding-unmasked"])
    assert buggy.exit_code == 1
    assert buggy.output.splitlines()[-1] == ("✗ first divergence: request 0 prefill round 0 "
                                             "blocks.0.attn.hook_attn_scores head 0 (3×12 at positions 0–2: key "
                                             "columns of one run only are not masked (the reference 3×3)) "
                                             "(injected: padding-unmasked)")


from hypothesis import HealthCheck, given, settings  # noqa: E402
from random_models import scenarios  # noqa: E402


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_a_batch_of_random_requests_equals_each_request_alone_and_its_own_full_recompute(scenario):
    """Sampled rules too: each request draws from its own generator, in a batch or not."""
    assert first_divergence(diff_batch(scenario)) is None
    assert first_divergence(diff_scenario(dataclasses.replace(scenario, batch=True))) is None
    batched, alone = Session(dataclasses.replace(scenario, batch=True)), Session(scenario)
    list(batched.steps()), list(alone.steps())
    assert batched.results == alone.results


def test_each_state_of_a_batch_carries_every_row_as_it_stands():
    plain = Session(batch_scenario())
    eos = [list(plain.steps()), plain.results[1].generated[3]][1]
    states = list(Session(batch_scenario(eos=eos)).steps())
    choice = next(s for s in states if s.request == 2 and s.name == "sample.hook_choice")  # prefill's choice
    rows = choice.batch
    assert [(r.request, r.pad) for r in rows] == [(0, 9), (1, 5), (2, 11), (3, 0)]
    assert [r.moment.selected is not None for r in rows] == [True, True, True, False]  # row 3 chooses next
    assert all(len(r.moment.context) == 12 for r in rows)
    later = next(s for s in states if s.request == 0 and s.round == 5)
    assert later.batch[1].stop == "eos" and later.batch[0].stop is None
    assert len(later.batch[1].moment.context) == 12 + 3  # it stopped after feeding its third new token
    assert all(s.batch is None for s in Session(batch_scenario(batch=False)).steps())


async def test_the_timeline_shows_the_batch_as_rows():
    from tinyllm_tui.tui.app import DebuggerApp
    from tui_helpers import screen_text, settle

    app = DebuggerApp(batch_scenario(), lang="en")
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("n", "left")  # the embedding's last row: every row has been through the first operator
        await settle(pilot)
        lines = screen_text(app).splitlines()
        place = next(i for i, line in enumerate(lines) if "batch of 4" in line)
        assert "request 3 (of 4) · prefill" in lines[place]
        rows = lines[place + 1 : place + 5]
        assert [row.split()[:3] for row in rows] == [["r0", "pad", "9"], ["r1", "pad", "5"], ["r2", "pad", "11"],
                                                     ["▸", "r3", "pad"]]
        assert "▶11:" in rows[2] and rows[3].split()[3] == "0"
        text = screen_text(app)
        assert "hook_embed · requests 0–3 (batch) · prefill" in text  # the matrix's title
        assert "r0 · 0 · " in text and "of 48" in text  # the batch axis: every row's 12 positions stacked
        matrix = app.debugger.frame.matrix
        assert matrix.values.shape == (48, 16) and matrix.rows[12].startswith("r1 · 0 · ")


def test_the_batch_group_is_the_operator_of_every_row_still_going():
    from tinyllm_tui.debugger.batch import batch_group

    plain = Session(batch_scenario())
    eos = [list(plain.steps()), plain.results[1].generated[3]][1]
    states = list(Session(batch_scenario(eos=eos)).steps())
    at = {s.step: s for s in states}.get
    first = next(s for s in states if s.request == 2 and s.name == "blocks.1.attn.hook_z" and s.head == 3)
    group = batch_group(at, first)
    assert [(s.request, s.name, s.head) for s in group] == [(r, first.name, 3) for r in range(4)]
    late = next(s for s in states if s.round == 5 and s.name == "hook_embed")  # request 1 stopped in round 3
    assert [s.request for s in batch_group(at, late)] == [r for r in range(4) if r != 1]
    assert batch_group(at, next(Session(batch_scenario(batch=False)).steps()))[0].request == 0


def test_prompt_and_ids_repeat_one_request_each_and_do_not_mix():
    from typer.testing import CliRunner

    from engine.loading import ScenarioError, open_model
    from tinyllm_tui.cli import app

    texts = open_model(LLAMA, prompt=["The cat", "sat on the mat"], max_new_tokens=2)
    alone = [open_model(LLAMA, prompt=text).requests[0].tokens for text in ("The cat", "sat on the mat")]
    assert [r.tokens for r in texts.requests] == alone and all(r.max_new_tokens == 2 for r in texts.requests)
    assert [r.tokens for r in open_model(LLAMA, ids=[[5, 6], [7]]).requests] == [(5, 6), (7,)]
    with refused(ScenarioError, "give prompts or token ids, not both"):
        open_model(LLAMA, prompt=["a"], ids=[[1]])
    result = CliRunner().invoke(app, ["diff", str(LLAMA), "--prompt", "a", "--ids", "1,2"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "--prompt/--ids: give prompts or token ids, not both" in result.stderr
