"""Time travel: stepping back inside the kept window, and resuming from a round start when stepping back past it."""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pytest
from conftest import SCENARIOS, X01, round_summaries
from hypothesis import given, settings
from hypothesis import strategies as st
from tui_helpers import long_scenario

from engine import Session, load_scenario, to_host
from engine.loading.edits import apply_edit, parse_set, with_weights
from engine.faults import INJECTIONS
from tinyllm_tui.debugger.history import RESUME_SHARE, History
from engine.session import StaleFrom

SCENARIO_FILES = sorted(path.name for path in SCENARIOS.glob("*.yaml"))
SAMPLED = "sampled"  # a random model drawing 12 tokens: a resumed round must draw what a fresh run draws


@cache
def scenario(name: str):
    if name == SAMPLED:
        base = long_scenario(prompt=5, new=12, d_model=8, layers=1)
        return dataclasses.replace(base, decode=dataclasses.replace(base.decode, rule="sample"))
    return load_scenario(SCENARIOS / name)


@cache
def stale_x01():
    """X01 with Wk edited after the prefill and the prefill's cache kept (as tests/test_edits.py does)."""
    base = load_scenario(X01)
    edited = with_weights(base, apply_edit(base.weights, parse_set("blocks.0.attn.wk[0,1]=0.5", base.weights)))
    return edited, StaleFrom(base.weights, request=0, round=1)


def session(name: str, **options) -> Session:
    if name == "stale":
        edited, stale = stale_x01()
        return Session(edited, stale=stale)
    return Session(scenario(name), **options)


@cache
def reference(name: str, mode: str = "cached", inject: str | None = None) -> list:
    """A run from scratch, never resumed."""
    return list(session(name, mode=mode, inject=inject).steps())


def counting(name: str, computed: list, resumed: list | None = None, **options):
    """A History start that records the step of every state the resumed streams compute (and, in `resumed`, the
    step each restart resumes from: 0 from the beginning)."""
    def start(resume=None, on_round=None):
        if resumed is not None:
            resumed.append(resume.step if resume else 0)
        for state in session(name, **options).steps(resume, on_round):
            computed.append(state.step)
            yield state
    return start


def assert_same(state, expected) -> None:
    assert (state.step, state.name, state.request, state.round, state.chunk, state.head, state.past, state.stop) == (
        expected.step, expected.name, expected.request, expected.round, expected.chunk, expected.head,
        expected.past, expected.stop)
    assert state.context == expected.context and state.moment.selected == expected.moment.selected
    assert np.array_equal(to_host(state.values), to_host(expected.values), equal_nan=True)
    assert [c.length for c in state.caches] == [c.length for c in expected.caches]


def test_bounded_history_replays_to_go_back_past_its_window():
    scenario = load_scenario(X01)
    reference = list(Session(scenario).steps())
    starts = []

    def start(resume=None, on_round=None):
        starts.append(resume)
        return Session(scenario).steps(resume, on_round)

    history = History(start, limit=5)
    assert history.goto(40) and history.current.name == reference[40].name
    assert len(starts) == 1
    assert history.goto(37) and len(starts) == 1  # still in memory
    assert history.goto(32) and len(starts) == 2  # dropped: round 1 of request 0 starts at 31, resumed there
    assert starts[1].step == 31
    assert history.goto(3) and len(starts) == 3
    assert (starts[2].step if starts[2] else 0) == 0  # round 0 starts the session
    assert (to_host(history.current.values) == to_host(reference[3].values)).all()
    assert not history.goto(999) and history.cursor == len(reference) - 1 and history.total == len(reference)
    assert history.at_end and not history.forward()


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from([*SCENARIO_FILES, SAMPLED]), mode=st.sampled_from(["cached", "full"]),
       limit=st.sampled_from([1, 2, 7, 1_000_000]), budget=st.sampled_from([0, 300, 5_000, 2**30]),
       targets=st.lists(st.integers(0, 200), min_size=1, max_size=12))
def test_any_step_reached_any_way_is_the_from_scratch_state(name, mode, limit, budget, targets):
    expected = reference(name, mode)
    history = History(session(name, mode=mode).steps, limit=limit, budget=budget)
    for step in targets:
        state = history.state_at(step)
        if step >= len(expected):
            assert state is None
        else:
            assert_same(state, expected[step])
        assert history.round_starts.nbytes <= budget * RESUME_SHARE
    history.goto(len(expected) - 1)
    for request in {s.request for s in expected}:  # every round once, in order, however the stream was resumed
        assert history.finished_rounds(request) == round_summaries(expected, request)


def round_of(states, step):
    key = (states[step].request, states[step].round)
    return [s.step for s in states if (s.request, s.round) == key]


def test_stepping_back_past_the_budget_recomputes_from_the_wanted_steps_round_only():
    name = "decoder2.yaml"
    expected, computed = reference(name), []
    history = History(counting(name, computed), limit=4)
    assert not history.goto(10_000) and history.cursor == len(expected) - 1
    target = round_of(expected, len(expected) - 1)[0] - 5  # a few steps before the last round: dropped
    rounds = round_of(expected, target)
    distance = history.cursor - target
    computed.clear()
    assert history.goto(target) and rounds[0] > 0
    assert computed == list(range(rounds[0], target + 1))  # resumed at the round's start
    assert len(computed) <= len(rounds) + distance
    assert_same(history.current, expected[target])
    computed.clear()  # and forward again: from the last round's start, not on from the target
    last = len(expected) - 1
    assert history.goto(last) and round_of(expected, last)[0] > target + 1
    assert computed == list(range(round_of(expected, last)[0], last + 1))
    assert_same(history.current, expected[last])


@pytest.mark.parametrize("inject", [*INJECTIONS, None])
def test_resumed_runs_with_an_injected_bug_or_a_stale_cache_are_the_from_scratch_runs(inject):
    name = "stale" if inject is None else "x01.yaml"
    expected, computed, resumed = reference(name, inject=inject), [], []
    history = History(counting(name, computed, resumed, inject=inject), limit=2)
    history.goto(len(expected) - 1)
    del resumed[:]  # the first start
    for step in reversed(range(len(expected))):  # most steps back are past the window
        assert history.goto(step)
        assert_same(history.current, expected[step])
    assert set(resumed) == {0, 31, 62}  # X01: request 0's prefill, its decode round, request 1
    assert len(computed) < len(expected) ** 2 / 4  # not from the start each time


def test_round_starts_are_thinned_to_their_share_and_keep_the_start():
    scenario = long_scenario(prompt=8, new=120, d_model=16, layers=2)
    budget = 200_000
    expected = list(Session(scenario).steps())
    resumed = []

    def start(resume=None, on_round=None):
        resumed.append(resume.step if resume else 0)
        return Session(scenario).steps(resume, on_round)

    history = History(start, budget=budget)
    while history.forward():
        assert history.round_starts.nbytes <= budget * RESUME_SHARE and history.kept_bytes <= budget
    starts, stride = history.round_starts.steps, history.round_starts.stride
    everyone = [s.step for s in expected if s.step == 0 or (s.round, s.request) != (expected[s.step - 1].round,
                                                                                     expected[s.step - 1].request)]
    assert stride >= 4 and starts == everyone[::stride]  # every stride-th round start, the first among them
    middle = everyone[len(everyone) // 2] + 3
    assert history.goto(middle) and resumed[-1] == max(s for s in starts if s <= middle)
    assert_same(history.current, expected[middle])


def test_kept_round_starts_cost_the_newest_cache_and_give_back_every_cache_bit_for_bit():
    scenario = long_scenario(prompt=8, new=40, d_model=16, layers=2)
    starts = []
    for _ in Session(scenario).steps(on_round=starts.append):
        pass
    history = History(Session(scenario).steps)
    history.goto(10**6)
    kept = history.round_starts
    newest_cache = sum(c.k.nbytes + c.v.nbytes for c in starts[-1].caches)
    assert kept.steps == [s.step for s in starts] and kept.nbytes == newest_cache  # one cache, not 41
    for start in starts:
        again = kept.latest(start.step)
        assert (again.step, again.round, again.fed, again.generated) == (start.step, start.round, start.fed,
                                                                         start.generated)
        for mine, theirs in zip(again.caches, start.caches, strict=True):
            assert mine.k.tobytes() == theirs.k.tobytes() and mine.v.tobytes() == theirs.v.tobytes()


def test_round_summaries_are_the_a9_table():
    states = list(Session(load_scenario(X01)).steps())
    rounds = round_summaries(states, 0)
    assert [(r.phase, r.fed, r.cache_length, r.chosen) for r in rounds] == [
        ("prefill", ("我", "爱", "学习"), 3, "爱"), ("decode", ("爱",), 4, "爱")]


def test_kept_states_are_charged_their_outputs_and_every_cache_entry_they_hold_once():
    scenario = long_scenario(prompt=8, new=40, d_model=16, layers=2)
    budget = 200_000  # some fifteen decode rounds' states and caches
    resumed = []

    def start(resume=None, on_round=None):
        resumed.append(resume.step if resume else 0)
        return Session(scenario).steps(resume, on_round)

    history = History(start, budget=budget)
    while history.forward():
        pass
    kept = list(history._states)  # the states in memory, oldest first
    assert kept[0].step > 0  # the budget made it drop some
    entries = {id(c): c for state in kept for c in state.caches}  # each cache entry counted once
    held = sum(int(s.values.nbytes) for s in kept) + sum(c.k.nbytes + c.v.nbytes for c in entries.values())
    assert history.kept_bytes - history.round_starts.nbytes == held <= budget
