"""The headless Debugger: stepping, runs, search, breakpoints, edits and ownership, without an app."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import X01

from engine import Session, load_scenario, to_host
from engine.breakpoints import BreakpointError
from engine.loading.edits import CellEdit
from tinyllm_tui.debugger.debugger import Busy, Debugger, SearchError

PATTERN = "blocks.0.attn.hook_pattern"


@pytest.fixture(scope="module")
def reference():
    """Every operator of X01 computed by a plain Session: what the debugger must walk through."""
    return list(Session(load_scenario(X01)).steps())


def make(**kwargs) -> Debugger:
    return Debugger(load_scenario(X01), **kwargs)


def test_step_and_back_walk_the_session_in_order(reference):
    debugger = make()
    for expected in reference[1:6]:
        assert debugger.step() == ""
        assert debugger.view.state.name == expected.name and debugger.view.state.step == expected.step
    for _ in range(5):
        debugger.back()
    assert debugger.view.state.step == 0
    assert debugger.back() == "already at the first step"


def test_continue_stops_at_each_breakpoint_then_at_the_end_with_tokens_as_text(reference):
    debugger = make(breakpoints=[PATTERN])
    hits = []
    for _ in range(6):
        assert debugger.continue_().startswith("⚑ breakpoint")
        hits.append((debugger.view.state.request, debugger.view.state.round, debugger.view.state.head))
    assert hits == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1)]
    end = debugger.continue_()
    # the seed: 我爱学习 continues with 爱 (id 2), and the cached decode round chooses 爱 again
    assert end.startswith("end of trace") and "request 0 generated 爱 爱" in end and "[2" not in end
    assert debugger.view.at_end and debugger.view.total == len(reference)


@pytest.mark.parametrize("text", ["attn.pattern h1", "attn.pattern h1 & round=1", "blocks.0.attn.hook_pattern & head=1"])
def test_a_breakpoint_on_a_short_name_stops_where_the_hook_name_does(reference, text):
    debugger = make(breakpoints=[text])
    stops = []
    while debugger.continue_().startswith("⚑ breakpoint"):
        stops.append(debugger.view.state.step)
    wanted = [s.step for s in reference if s.name == PATTERN and s.head == 1 and ("round" not in text or s.round == 1)]
    assert stops == wanted and wanted


def test_adding_the_same_breakpoint_twice_keeps_one_and_it_can_be_listed_removed_and_cleared():
    debugger = make()
    debugger.add_breakpoint("softmax")
    assert "already set" in debugger.add_breakpoint("softmax")
    debugger.add_breakpoint("round=1")
    assert [b.text for b in debugger.breakpoints] == ["softmax", "round=1"]
    assert debugger.remove_breakpoint("softmax") == "removed breakpoint softmax"
    assert [b.text for b in debugger.breakpoints] == ["round=1"]
    debugger.add_breakpoint("nan")
    assert debugger.clear_breakpoints() == "removed 2 breakpoints" and debugger.breakpoints == ()
    with pytest.raises(BreakpointError):
        debugger.add_breakpoint("abs>x")


def test_search_forward_wraps_around_and_backward_finds_the_previous_match(reference):
    debugger = make()
    debugger.goto_step(30)
    assert debugger.search("blocks.*.hook_resid_post") == "went to blocks.*.hook_resid_post"
    first_after = next(s for s in reference[31:] if s.name == "blocks.0.hook_resid_post")
    assert debugger.view.state.step == first_after.step
    last = max(s.step for s in reference if s.name == "blocks.0.hook_resid_post")
    debugger.goto_step(last)
    assert "wrapped around" in debugger.search("blocks.0.hook_resid_post")  # past the last: back to the first
    assert debugger.view.state.step == next(s.step for s in reference if s.name == "blocks.0.hook_resid_post")
    debugger.goto_step(30)
    debugger.search("softmax", backward=True)  # the previous softmax before step 30
    assert debugger.view.state.step == max(s.step for s in reference[:30] if s.kind == "softmax")


def test_search_takes_conditions_that_breakpoints_take_and_says_when_nothing_matches(reference):
    debugger = make()
    debugger.search("round=1")  # `B` accepts it, so `g` must too
    assert debugger.view.state.round == 1 and debugger.view.state.step == next(s.step for s in reference if s.round == 1)
    debugger.search("attn.pattern h1")  # the short names the operator list shows
    assert (debugger.view.state.name, debugger.view.state.head) == (PATTERN, 1)
    debugger.search("ln_final.normalized")
    assert debugger.view.state.name == "ln_final.hook_normalized"
    debugger.search("attn.q")
    assert debugger.view.state.name == "blocks.0.attn.hook_q"
    debugger.search("unembed")  # the first parts of a short name (`unembed.out`) find it too
    assert debugger.view.state.name == "unembed.hook_out"
    here = debugger.view.state.step
    debugger.search("attn.scores", backward=True)
    assert debugger.view.state.step == max(s.step for s in reference[:here] if s.kind == "scores")
    with pytest.raises(SearchError, match="no operator matches 'blocks.9.*'"):
        debugger.search("blocks.9.*")
    with pytest.raises(SearchError, match=f"no step 9999: the trace has steps 0–{len(reference) - 1}"):
        debugger.goto_step(9999)


def test_goto_past_the_end_does_not_move(reference):
    debugger = make()
    debugger.goto_step(7)
    with pytest.raises(SearchError):
        debugger.goto_step(9999)
    assert debugger.view.state.step == 7


def test_a_run_owns_the_generator_others_are_refused_and_cancel_stops_it():
    """While a run holds the session, a step from another thread is refused instead of sharing the generator."""
    debugger = make()
    inside, release = threading.Event(), threading.Event()

    def stop(state):  # keeps the run busy until the test has tried to step
        inside.set()
        release.wait(5)
        return False

    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("message", debugger.run_until(stop)))
    worker.start()
    inside.wait(5)
    with pytest.raises(Busy):
        debugger.step()
    with pytest.raises(Busy):
        debugger.search("softmax")
    assert debugger.toggle_breakpoint("softmax") == "breakpoint on softmax"  # breakpoints work meanwhile
    assert debugger.cancel()
    release.set()
    worker.join(5)
    assert result["message"].startswith("cancelled at step")
    assert not debugger.busy and debugger.step() in ("", debugger.end_message())


def test_an_edit_replays_to_the_same_step_and_keeps_the_values_before_it(reference):
    debugger = make()
    debugger.goto_step(8)  # head-0 pattern of 我爱学习
    before = to_host(debugger.view.state.values)
    debugger.apply(CellEdit("blocks.0.attn.wk", (0, 1), 0.5))
    assert debugger.view.state.step == 8 and debugger.unsaved() == 1
    assert not np.array_equal(to_host(debugger.view.state.values), before)
    assert np.array_equal(debugger.before(debugger.view.state), before)
    assert debugger.undo() == "undid the last edit" and debugger.unsaved() == 0
    assert np.array_equal(to_host(debugger.view.state.values), before)
    assert debugger.redo() == "redid the edit" and debugger.unsaved() == 1


def test_keeping_a_stale_cache_shows_in_the_diff_and_recompute_heals_it():
    debugger = make()
    debugger.goto_step(39)  # decode round 1
    assert debugger.edit_asks_about_the_cache()
    debugger.apply(CellEdit("blocks.0.attn.wk", (0, 1), 0.5), keep_stale=True)
    assert debugger.stale is not None
    assert any(not d.agrees for d in debugger.diff())
    assert debugger.recompute().startswith("recomputed") and debugger.stale is None
    assert all(d.agrees for d in debugger.diff())


def test_cycling_the_injected_fault_replays_to_the_same_step():
    debugger = make()
    debugger.goto_step(39)  # the head-0 pattern of decode round 1
    assert debugger.cycle_injection().startswith("now:") and debugger.inject == "chunk-mask"
    assert debugger.view.state.step == 39
    assert to_host(debugger.view.state.values)[0].tolist() == [1.0, 0.0, 0.0, 0.0]


def test_verdicts_come_from_the_expect_tables():
    debugger = make()
    scenario = debugger.scenario
    assert debugger.accept_outcomes(scenario, debugger.check_expectations(scenario))
    debugger.goto_step(8)
    verdicts = debugger.verdicts(debugger.view.state)
    assert len(verdicts) == 9 and verdicts[(1, 0)].printed == 0.971309


def test_a_small_memory_budget_replays_to_go_back(reference):
    debugger = make(budget=512)  # a few of X01's small matrices
    debugger.goto_step(40)
    debugger.goto_step(2)  # dropped from memory: replayed
    assert debugger.history.replays >= 1
    assert np.array_equal(to_host(debugger.view.state.values), to_host(reference[2].values))


def test_a_diff_in_another_thread_is_cancelled_by_cancel():
    from tui_helpers import long_scenario

    from tinyllm_tui.debugger.debugger import Cancelled

    debugger = Debugger(long_scenario(new=2000))
    outcome = {}

    def diff():
        try:
            outcome["diffs"] = debugger.diff()
        except Cancelled:
            outcome["cancelled"] = True

    worker = threading.Thread(target=diff)
    worker.start()
    while not debugger._comparing and worker.is_alive():
        pass
    assert debugger.cancel()
    worker.join(10)
    assert outcome == {"cancelled": True} and not worker.is_alive()
