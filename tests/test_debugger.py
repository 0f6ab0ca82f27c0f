"""The headless Debugger: stepping, runs, search, breakpoints, edits and ownership, without an app."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
from conftest import SCENARIOS, X01

from engine import Session, load_scenario, to_host
from engine.loading.edits import CellEdit, FillEdit, with_weights
from engine.trace import Phase
from tinyllm_tui.debugger import autosave, frame
from tinyllm_tui.debugger.debugger import Debugger
from tinyllm_tui.debugger.interventions import Change, Intervened
from tinyllm_tui.debugger.results import (BreakpointAdded, BreakpointRemoved, BreakpointsCleared, Cancelled,
                                          EditKind, EndOfTrace, Generated, HitBreakpoint, InjectionChanged, Moved,
                                          Reason, Rebuilt, Refused)
from tinyllm_tui.tui.result_words import describe

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
        assert debugger.step() == Moved(expected.step)
        assert debugger.view.state.name == expected.name and debugger.frame.matrix.name == expected.name
    for _ in range(5):
        debugger.back()
    assert debugger.view.state.step == 0 and debugger.frame.step == 0
    assert debugger.back() == Refused(Reason.FIRST_STEP)


def test_a_head_operator_gets_a_breakpoint_on_its_head_and_starts_an_intervention_prompt(reference):
    """b on a head's operator breaks on that head only; the intervention prompt starts from the current operator in
    the spec's words, which parse as an intervention once a value follows."""
    step = next(s.step for s in reference if s.name == PATTERN and s.head == 1)
    debugger = make()
    assert debugger.search(str(step)) == Moved(step)
    assert debugger.toggle_breakpoint_at(step) == BreakpointAdded(f"{PATTERN} h1")
    assert debugger.toggle_breakpoint_at(None) == BreakpointRemoved(f"{PATTERN} h1")  # none highlighted: this one
    assert debugger.intervention_start() == f"{PATTERN} head 1[:,:]="
    assert debugger.intervention_problem(debugger.intervention_start() + "0") is None


def test_continue_stops_at_each_breakpoint_then_at_the_end_with_tokens_as_text(reference):
    debugger = make(breakpoints=[PATTERN])
    hits = []
    for _ in range(6):
        result = debugger.continue_()
        assert result == HitBreakpoint(debugger.frame.step, (PATTERN,)) and debugger.frame.status.hits == (PATTERN,)
        hits.append((debugger.view.state.request, debugger.view.state.round, debugger.view.state.head))
    assert hits == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1)]
    end = debugger.continue_()
    # the seed: 我爱学习 continues with 爱 (id 2), and the cached decode round chooses 爱 again; decoded text
    assert end == EndOfTrace((Generated("爱爱", ("爱", "爱"), "max_new_tokens"), Generated("你", ("你",), "max_new_tokens")))
    assert debugger.view.at_end and debugger.view.total == len(reference)


@pytest.mark.parametrize("text", ["attn.pattern h1", "attn.pattern h1 & round=1", "blocks.0.attn.hook_pattern & head=1"])
def test_a_breakpoint_on_a_short_name_stops_where_the_hook_name_does(reference, text):
    debugger = make(breakpoints=[text])
    stops = []
    while isinstance(debugger.continue_(), HitBreakpoint):
        stops.append(debugger.view.state.step)
    wanted = [s.step for s in reference if s.name == PATTERN and s.head == 1 and ("round" not in text or s.round == 1)]
    assert stops == wanted and wanted


def test_adding_the_same_breakpoint_twice_keeps_one_and_it_can_be_listed_removed_and_cleared():
    debugger = make()
    assert debugger.add_breakpoint("softmax") == BreakpointAdded("softmax")
    assert debugger.add_breakpoint("softmax") == Refused(Reason.ALREADY_SET, ("softmax",))
    debugger.add_breakpoint("round=1")
    assert [b.text for b in debugger.breakpoints] == ["softmax", "round=1"]
    assert debugger.remove_breakpoint("softmax") == BreakpointRemoved("softmax")
    assert [b.text for b in debugger.breakpoints] == ["round=1"]
    debugger.add_breakpoint("nan")
    assert debugger.clear_breakpoints() == BreakpointsCleared(2) and debugger.breakpoints == ()
    refused = debugger.add_breakpoint("abs>x")
    assert refused.reason is Reason.BAD_QUERY and "'x' is not a number" in describe(refused, "en")


def test_search_forward_wraps_around_and_backward_finds_the_previous_match(reference):
    debugger = make()
    debugger.goto_step(30)
    first_after = next(s for s in reference[31:] if s.name == "blocks.0.hook_resid_post")
    assert debugger.search("blocks.*.hook_resid_post") == Moved(first_after.step)
    assert debugger.view.state.step == first_after.step
    last = max(s.step for s in reference if s.name == "blocks.0.hook_resid_post")
    debugger.goto_step(last)
    assert debugger.search("blocks.0.hook_resid_post").wrapped  # past the last: back to the first
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
    assert debugger.search("blocks.9.*") == Refused(Reason.NO_MATCH, ("blocks.9.*",))
    assert debugger.goto_step(9999) == Refused(Reason.NO_STEP, (9999, len(reference) - 1))


def test_search_refuses_what_a_breakpoint_refuses_and_finds_a_hook_name_with_a_head(reference):
    """Defect 13: `g abs>` says what `B abs>` says; `g blocks.0.attn.hook_pattern h1` finds head 1's pattern."""
    debugger = make()
    refused = debugger.search("abs>")
    assert refused.reason is Reason.BAD_QUERY
    assert refused == debugger.add_breakpoint("abs>")
    assert debugger.search(f"{PATTERN} h1") == Moved(next(s.step for s in reference if s.name == PATTERN and s.head == 1))
    assert (debugger.view.state.name, debugger.view.state.head) == (PATTERN, 1)


def test_goto_past_the_end_does_not_move(reference):
    debugger = make()
    debugger.goto_step(7)
    assert debugger.goto_step(9999).reason is Reason.NO_STEP
    assert debugger.view.state.step == 7 and debugger.frame.step == 7


def test_a_run_owns_the_generator_others_are_refused_and_cancel_stops_it():
    """While a run holds the session, a step from another thread is refused instead of sharing the generator."""
    debugger = make()
    inside, release = threading.Event(), threading.Event()

    def stop(state):  # keeps the run busy until the test has tried to step
        inside.set()
        release.wait(5)
        return False

    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("result", debugger.run_until(stop)))
    worker.start()
    inside.wait(5)
    assert debugger.step() == Refused(Reason.BUSY)
    assert debugger.search("softmax") == Refused(Reason.BUSY)
    assert debugger.toggle_breakpoint("softmax") == BreakpointAdded("softmax")  # breakpoints work meanwhile
    assert debugger.cancel()
    release.set()
    worker.join(5)
    assert isinstance(result["result"], Cancelled) and result["result"].step == debugger.frame.step
    assert not debugger.busy and isinstance(debugger.step(), Moved)


def test_an_edit_replays_to_the_same_step_and_keeps_the_values_before_it(reference):
    debugger = make()
    debugger.goto_step(8)  # head-0 pattern of 我爱学习
    before = to_host(debugger.view.state.values)
    debugger.apply(CellEdit("blocks.0.attn.wk", (0, 1), 0.5))
    assert debugger.view.state.step == 8 and debugger.unsaved() == 1
    assert not np.array_equal(to_host(debugger.view.state.values), before)
    assert np.array_equal(to_host(debugger.earlier(debugger.view.state).values), before)
    assert np.array_equal(debugger.frame.matrix.before, before) and debugger.frame.matrix.changed.any()
    assert debugger.frame.status.unsaved == 1
    assert debugger.undo() == Rebuilt(EditKind.UNDONE, "blocks.0.attn.wk") and debugger.unsaved() == 0
    assert np.array_equal(to_host(debugger.view.state.values), before)
    assert debugger.redo() == Rebuilt(EditKind.REDONE, "blocks.0.attn.wk") and debugger.unsaved() == 1


def values_of_a_fresh_session(weights: dict, interventions: tuple, step: int) -> np.ndarray:
    """What a plain Session with these weights and interventions computes at `step`: the independent answer."""
    scenario = dataclasses.replace(with_weights(load_scenario(X01), weights), interventions=interventions)
    return to_host(next(s for s in Session(scenario).steps() if s.step == step).values)


def test_edits_and_interventions_share_one_undo_list_taken_back_last_first():
    """u takes back whichever change came last, an intervention or an edit; ctrl+r brings them again in order;
    a new change after an undo forgets what was undone. Each state replays what a fresh session computes."""
    debugger = make()
    debugger.goto_step(61)  # decode round 1: its choice, after every operator the changes touch
    original = dict(debugger.weights)
    edit = CellEdit("blocks.0.attn.wk", (0, 1), 0.5)
    debugger.apply(edit)
    edited = dict(debugger.weights)
    added = debugger.intervene("blocks.0.attn head 1")
    ablation = debugger.scenario.interventions
    assert added.change is Change.ADDED and len(ablation) == 1 and debugger.unsaved() == 1
    states = {"start": (original, ()), "edited": (edited, ()), "both": (edited, ablation)}
    expected = {name: values_of_a_fresh_session(*state, 60) for name, state in states.items()}  # sample.probs
    assert not np.array_equal(expected["edited"], expected["both"])

    def shows(name: str) -> bool:
        weights, interventions = states[name]
        return (debugger.scenario.interventions == interventions and debugger.unsaved() == (weights is edited)
                and np.array_equal(to_host(debugger.history.state_at(60).values), expected[name])
                and debugger.history.cursor == 61)

    assert shows("both")
    undone = debugger.undo()  # the intervention came last: it goes, the edit stays
    assert isinstance(undone, Intervened) and (undone.change, undone.text) == (Change.UNDONE, ablation[0].text)
    assert shows("edited")
    assert debugger.undo() == Rebuilt(EditKind.UNDONE, "blocks.0.attn.wk") and shows("start")
    assert debugger.undo() == Refused(Reason.NOTHING_TO_UNDO)
    assert debugger.redo() == Rebuilt(EditKind.REDONE, "blocks.0.attn.wk") and shows("edited")
    redone = debugger.redo()
    assert isinstance(redone, Intervened) and (redone.change, redone.text) == (Change.REDONE, ablation[0].text)
    assert shows("both") and debugger.redo() == Refused(Reason.NOTHING_TO_REDO)
    assert debugger.edits.changes.edits == [edit]  # what the autosave keeps: the edits, not the interventions
    debugger.undo()
    debugger.undo()
    debugger.intervene("blocks.0.attn head 1")  # a new change after two undos: the edit cannot be redone
    assert debugger.redo() == Refused(Reason.NOTHING_TO_REDO) and debugger.unsaved() == 0
    assert debugger.scenario.interventions == ablation


def feature_word(axis: str, index: int | None) -> str:
    return f"{axis} {index}"


def test_the_weights_frame_marks_only_an_edited_parameter_and_scales_by_its_largest_finite_value(monkeypatch):
    """A parameter never edited is not compared with the file (changed is None: nothing to mark); an edited one
    marks exactly its changed cell. The heat scale is the largest finite |value|, measured a row at a time here."""
    monkeypatch.setattr(frame, "SCALE_CHUNK", 1)
    debugger = make()
    untouched = debugger.browser.frame("blocks.0.attn.wq", feature_word)
    assert untouched.changed is None and untouched.before is None
    assert untouched.scale == np.abs(debugger.weights["blocks.0.attn.wq"]).max()
    debugger.apply(CellEdit("blocks.0.attn.wk", (0, 1), 3.25))
    debugger.apply(CellEdit("blocks.0.attn.wk", (1, 0), -7.5))
    edited = debugger.browser.frame("blocks.0.attn.wk", feature_word)
    assert list(zip(*np.nonzero(edited.changed))) == [(0, 1), (1, 0)]
    assert edited.scale == 7.5 and edited.scale_before == np.abs(load_scenario(X01).weights["blocks.0.attn.wk"]).max()
    assert debugger.browser.frame("blocks.0.attn.wq", feature_word).changed is None
    assert frame.finite_scale(np.array([[1.0, -np.inf], [np.nan, -2.5], [0.5, np.inf]])) == 2.5
    now, then = np.array([[1.0, np.nan, np.nan, 2.0]]), np.array([[1.0, np.nan, 3.0, np.inf]])
    assert frame.changed_cells(now, then).tolist() == [[False, False, True, True]]  # NaN in both is no change


def test_keeping_a_stale_cache_shows_in_the_diff_and_recompute_heals_it():
    debugger = make()
    debugger.goto_step(39)  # decode round 1
    assert debugger.edit_asks_about_the_cache()
    debugger.apply(CellEdit("blocks.0.attn.wk", (0, 1), 0.5), keep_stale=True)
    assert debugger.stale is not None
    assert any(not d.agrees for d in debugger.compare().diffs)
    assert debugger.recompute() == Rebuilt(EditKind.RECOMPUTED) and debugger.stale is None
    assert all(d.agrees for d in debugger.compare().diffs)


def test_cycling_the_injected_fault_replays_to_the_same_step():
    debugger = make()
    debugger.goto_step(39)  # the head-0 pattern of decode round 1
    assert debugger.cycle_injection() == InjectionChanged("chunk-mask") and debugger.inject == "chunk-mask"
    assert debugger.frame.status.inject == "chunk-mask"
    assert debugger.view.state.step == 39
    assert to_host(debugger.view.state.values)[0].tolist() == [1.0, 0.0, 0.0, 0.0]


def test_verdicts_come_from_the_expect_tables():
    debugger = make()
    assert debugger.outcomes is None and debugger.check_outcomes()
    assert len(debugger.outcomes) == len(debugger.scenario.expect) and all(o.passed for o in debugger.outcomes)
    debugger.goto_step(8)
    verdicts = debugger.verdicts(debugger.view.state)
    assert len(verdicts) == 9 and verdicts[(1, 0)].printed == 0.971309
    judged = debugger.frame.matrix.verdicts  # the frame judges them once, for the widgets
    assert judged.count == 9 and judged.judged[1, 0] and judged.agrees[judged.judged].all()


def test_outcomes_an_edit_outran_while_they_were_checked_are_not_kept():
    debugger = make()
    check = debugger.comparisons.expectations

    def edited_meanwhile(scenario):  # the TUI checks in a thread: an edit may land before the check is done
        outcomes = check(scenario)
        debugger.apply(CellEdit("blocks.0.attn.wk", (0, 1), 0.5))
        return outcomes

    debugger.comparisons.expectations = edited_meanwhile
    assert not debugger.check_outcomes() and debugger.outcomes is None


def test_a_small_memory_budget_replays_to_go_back(reference):
    debugger = make(budget=512)  # a few of X01's small matrices
    debugger.goto_step(40)
    debugger.goto_step(2)  # dropped from memory: replayed from round 0's start, so the stream is back before 40
    assert debugger.history.last_recorded < 40
    assert np.array_equal(to_host(debugger.view.state.values), to_host(reference[2].values))


def test_a_diff_in_another_thread_is_cancelled_by_cancel():
    from tui_helpers import long_scenario

    from tinyllm_tui.debugger import DiffCancelled

    debugger = Debugger(long_scenario(new=2000))
    outcome = {}

    def diff():
        try:
            outcome["diffs"] = debugger.compare().diffs
        except DiffCancelled:
            outcome["cancelled"] = True

    worker = threading.Thread(target=diff)
    worker.start()
    while not debugger.comparing and worker.is_alive():
        pass
    assert debugger.cancel()
    worker.join(10)
    assert outcome == {"cancelled": True} and not worker.is_alive()


def test_undoing_every_edit_by_resetting_leaves_no_autosave(tmp_path, monkeypatch):
    """Defect 4: `0` then `R` in the weights browser puts the file's numbers back: nothing is left to offer."""
    monkeypatch.setenv("TINYLLM_AUTOSAVE_DIR", str(tmp_path))
    debugger = make()
    debugger.apply(FillEdit("blocks.0.attn.wq", "zeros"))
    assert autosave.find(debugger.file_scenario.path, debugger.edits.fingerprint, debugger.weights) is not None
    debugger.apply(FillEdit("blocks.0.attn.wq", "file"))
    assert debugger.unsaved() == 0
    assert not list(tmp_path.iterdir())


def test_a_clean_close_leaves_no_autosave(tmp_path, monkeypatch):
    """Defect 4: an autosave left while the weights equal the file is removed on a clean quit."""
    monkeypatch.setenv("TINYLLM_AUTOSAVE_DIR", str(tmp_path))
    debugger = make()
    autosave.keep(debugger.file_scenario.path, debugger.edits.fingerprint, [CellEdit("blocks.0.attn.wk", (0, 0), 1.0)])
    debugger.close()
    assert not list(tmp_path.iterdir())


def test_clearing_the_breakpoints_clears_the_hit_from_the_status():
    """Defect 10: the status's `⚑ breakpoint` comes from the breakpoints set now."""
    debugger = make(breakpoints=[PATTERN])
    debugger.continue_()
    assert debugger.frame.status.hits == (PATTERN,) and debugger.frame.operators[
        [line.step for line in debugger.frame.operators].index(debugger.frame.step)].breakpoint
    debugger.clear_breakpoints()
    assert debugger.frame.status.hits == () and not any(line.breakpoint for line in debugger.frame.operators)


def test_breakpoints_are_judged_once_per_step(reference):
    """A continue judges each step's breakpoints once; publishing the frame where it stops reuses them."""
    debugger = make()
    calls = []
    debugger.add_breakpoint("softmax")
    original = debugger.breakpoints[0]
    counting = type(original)(original.text, (lambda s: calls.append(s.step) or s.kind == "softmax",))
    debugger.breaks.all = (counting,)
    debugger.breaks.forget()
    debugger.continue_()
    assert len(calls) == len(set(calls))


def test_the_kv_cache_frame_is_the_head_shown_and_pages_through_layers_and_heads(reference):
    debugger = make()
    debugger.goto_step(39)  # decode round 1: the cache holds 4 rows
    cache = debugger.frame.cache
    state = reference[39]
    d_head = debugger.scenario.model.d_head
    assert (cache.layer, cache.head, cache.length) == (0, 0, 4)
    assert np.array_equal(cache.views[0].values, to_host(state.caches[0].k)[:, :d_head])
    debugger.move_cache(heads=1)
    assert debugger.frame.cache.head == 1
    assert np.array_equal(debugger.frame.cache.views[1].values, to_host(state.caches[0].v)[:, d_head : 2 * d_head])


def test_the_kv_cache_shown_follows_the_head_of_the_operator_until_a_head_is_picked(reference):
    """At `attn.z h1` the panel shows head 1, the V columns the explanation names (cache_v[head 1])."""
    debugger = make()
    z1 = next(s for s in reference if s.name == "blocks.0.attn.hook_z" and s.head == 1)
    debugger.goto_step(z1.step)
    cache = debugger.frame.cache
    assert cache.head == 1
    assert np.array_equal(cache.views[1].values, to_host(z1.caches[0].v)[:, 2:4])  # X01: d_head 2
    debugger.goto_step(z1.step - 3)  # attn.z h0
    assert debugger.frame.cache.head == 0
    debugger.move_cache(heads=1)  # picked: it stays put
    debugger.goto_step(z1.step)
    debugger.goto_step(z1.step - 3)
    assert debugger.frame.cache.head == 1


@pytest.mark.parametrize(("inject", "kv_head"), [(None, lambda h: h // 2), ("gqa-modulo", lambda h: h % 2)])
def test_under_grouped_query_attention_the_kv_cache_shown_is_the_one_the_query_head_reads(inject, kv_head):
    """gqa_toy: 4 query heads share 2 kv heads, query head h reads kv head h // 2 (h % 2 with the bug injected)."""
    scenario = load_scenario(SCENARIOS / "gqa_toy.yaml")
    debugger = Debugger(scenario, inject=inject)
    heads = [s for s in Session(scenario).steps() if s.head is not None and s.round == 0]
    assert {s.head for s in heads} == {0, 1, 2, 3}
    for state in heads:
        debugger.goto_step(state.step)
        assert (debugger.frame.cache.layer, debugger.frame.cache.head) == (state.layer, kv_head(state.head)), state.name


def test_the_last_position_of_the_logits_is_summarised_with_its_top_tokens(reference):
    """Defect 11: the summary names the last position; the top-k view orders columns by it."""
    debugger = make()
    step = next(s.step for s in reference if s.name == "unembed.hook_out")
    debugger.goto_step(step)
    matrix = debugger.frame.matrix
    logits = to_host(reference[step].values)[-1]
    probabilities = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    tokens = debugger.scenario.vocab.tokens
    assert matrix.summary.label == matrix.rows[len(matrix.rows) - 1]
    assert [name for name, _ in matrix.summary.top] == [tokens[i] for i in np.argsort(-probabilities, kind="stable")[:5]]
    assert list(matrix.order) == list(np.argsort(-logits, kind="stable"))


def test_the_bert_embedding_sum_is_listed_with_the_input():
    """Defect 8: `embed.hook_sum` (layer 0 for the engine) belongs to the input group, not layer 0."""
    from pathlib import Path

    from engine.loading.checkpoint import load_checkpoint
    from tinyllm_tui.debugger.frame import Group

    scenario = load_checkpoint(Path(__file__).parent / "fixtures" / "bert", prompt="the cat")
    groups = [(line.short, line.group) for line in Debugger(scenario).frame.operators]
    kinds = [group for _, group in groups]
    first_layer = kinds.index(Group.LAYER)
    assert dict(groups)["embed.sum"] is Group.INPUT
    assert kinds[:first_layer] == [Group.INPUT] * first_layer and Group.INPUT not in kinds[first_layer:]


def test_the_cache_frame_counts_the_rows_a_prefill_chunk_appended():
    """chunked.yaml: chunk 1 appends positions 3-4 onto chunk 0's three rows: 5 rows, 2 new (not 5)."""
    from conftest import ROOT

    debugger = Debugger(load_scenario(ROOT / "scenarios" / "chunked.yaml"))
    while not (debugger.frame.timeline.chunk == 1 and debugger.frame.cache and debugger.frame.cache.length == 5):
        assert isinstance(debugger.step(), Moved)
    assert debugger.frame.cache.appended == 2 and debugger.frame.cache.views[0].new_from == 3


def test_a_replay_after_an_edit_is_built_aside_and_published_whole():
    """While an edit replays in a worker, readers see the old session, history and frame, never a mix;
    once it is done they see the new ones together."""
    from tui_helpers import long_scenario

    debugger = Debugger(long_scenario(prompt=8, new=60))
    debugger.goto_step(450)
    old = (debugger.session, debugger.history, debugger.frame, debugger.scenario)
    inside, release = threading.Event(), threading.Event()

    def progress(step):  # the replay reports at step 200 and 400: hold it there
        inside.set()
        release.wait(5)

    worker = threading.Thread(target=lambda: debugger.apply(CellEdit("blocks.0.attn.wk", (0, 0), 3.0),
                                                            progress=progress))
    worker.start()
    assert inside.wait(5)
    assert (debugger.session, debugger.history, debugger.frame, debugger.scenario) == old  # mid-replay: the old run
    release.set()
    worker.join(10)
    new = (debugger.session, debugger.history, debugger.frame, debugger.scenario)
    assert all(a is not b for a, b in zip(new, old)) and debugger.frame.step == 450
    assert debugger.frame.status.unsaved == 1 and debugger.scenario.fingerprint == debugger.fingerprint


def test_a_quick_start_reads_no_later_layer_before_the_first_frame():
    """A checkpoint's weights are read on first use: the first frame (step 0) is built without computing the
    rest of round 0, so no tensor of layer 1 is read; `complete_round` then lists the whole round, in order."""
    from conftest import ROOT
    from engine.loading.checkpoint import load_checkpoint

    scenario = load_checkpoint(ROOT / "tests" / "fixtures" / "llama", ids=[1, 2, 3])
    cache = scenario.weights.cache
    reads, read = [], cache.read
    cache.read = lambda name: reads.append(name) or read(name)
    debugger = Debugger(scenario, quick_start=True)
    assert debugger.round_pending and debugger.frame.step == 0
    assert not [name for name in reads if name.startswith("blocks.1.")]
    assert len(debugger.frame.operators) < 5

    assert debugger.complete_round() == Moved(0)
    assert not debugger.round_pending and debugger.frame.step == 0
    assert any(name.startswith("blocks.1.") for name in reads)
    everything = Debugger(scenario)  # the eager first frame: the same list
    assert debugger.frame.operators == everything.frame.operators
    assert [line.step for line in debugger.frame.operators] == [s.step for s in everything.view.round_states]
    assert everything.view.round_states[-1].kind.name == "CHOICE"  # the round's end: its token chosen


def test_after_a_quick_start_a_step_into_a_decode_round_computes_its_first_operator_only():
    """A checkpoint's decode round may route to experts no earlier round used (each dequantized on first use): the
    step into it computes one operator, not the round; `complete_round` lists the rest, stopping when asked to
    (a key waits) and going on later, and the list then is the eager debugger's."""
    from conftest import ROOT
    from engine.loading.checkpoint import load_checkpoint

    scenario = load_checkpoint(ROOT / "tests" / "fixtures" / "qwen3_moe", ids=[1, 2, 3], max_new_tokens=2)
    debugger = Debugger(scenario, quick_start=True)
    debugger.complete_round()
    while debugger.view.state.round == 0:
        debugger.step()
    history, entered = debugger.history, debugger.view.state
    assert (entered.round, entered.phase) == (1, Phase.DECODE) and debugger.round_pending
    assert history.last_recorded <= entered.step + 1  # the step peeks one operator ahead, no more
    assert [line.step for line in debugger.frame.operators] == list(range(entered.step, history.last_recorded + 1))

    asked = iter([False, False, True])
    debugger.complete_round(stop=lambda: next(asked))  # two operators more, then a key waits
    assert debugger.round_pending and history.last_recorded == entered.step + 3 and debugger.frame.step == entered.step
    debugger.complete_round()
    eager = Debugger(scenario)
    eager.goto_step(entered.step)
    assert not debugger.round_pending and debugger.frame.operators == eager.frame.operators
    assert eager.view.round_states[-1].kind.name == "CHOICE" and len(eager.frame.operators) > 20


def test_300_steps_forward_and_200_back_land_where_counted_and_the_status_names_the_operator():
    """Headless (it was 300 Pilot key presses, 21 s): each move publishes the frame of the step it reached."""
    from engine.breakpoints import short_name
    from tui_helpers import long_scenario

    debugger = Debugger(long_scenario(prompt=16, new=8))
    assert all(debugger.step().step == step for step in range(1, 301))
    assert all(debugger.back().step == step for step in range(299, 99, -1))
    state = debugger.view.state
    assert (state.step, debugger.frame.step, debugger.frame.status.operator) == (100, 100, short_name(state))


def test_what_was_opened_is_told_in_plain_facts(tmp_path):
    """The app's title and sub-title, and what the main screen lays out, without reading the engine's scenario."""
    debugger = make()
    assert debugger.opened.title == "X01 · 我爱学习 / 你爱" and debugger.opened.name == "x01.yaml"
    assert (debugger.opened.cached, debugger.opened.batch, debugger.opened.chat) == (True, False, False)
    assert debugger.opened.n_layers == 1 and debugger.opened.weights_file is None  # its weights are in the file
    debugger.save(tmp_path / "copy.yaml")  # from now on the file the edits are relative to
    assert debugger.opened.path == str(tmp_path / "copy.yaml") and debugger.opened.name == "copy.yaml"
    encoder = Debugger(load_scenario(SCENARIOS / "encoder004.yaml")).opened
    assert not encoder.cached and encoder.n_layers == 1 and encoder.title == "encoder004 · 今天 天气 真 好 + PAD"


def test_heads_at_a_glance_read_the_round_the_cursor_is_in():
    """What the glance window needs, without the engine's states or vocabulary: X01 has one layer of two heads,
    and request 0's prefill reads 我 爱 学习."""
    debugger = make()
    debugger.goto_step(7)  # layer 0's attention, in request 0's prefill
    glance = debugger.glance()
    assert (glance.layer, glance.layers, glance.keys) == (0, 1, ("我", "爱", "学习"))
    patterns = glance.patterns(0)
    assert len(patterns) == 2 and all(p.shape == (3, 3) for p in patterns)
    assert np.allclose([p.sum(axis=1) for p in patterns], 1, rtol=0, atol=1e-12)  # each query's weights sum to 1
    debugger.goto_step(glance.step(0, 1))
    assert (debugger.view.state.name, debugger.view.state.head) == ("blocks.0.attn.hook_pattern", 1)
    assert np.array_equal(to_host(debugger.view.state.values), patterns[1])
    assert glance.step(0, 2) is None and glance.patterns(1) == []  # no head 2, no layer 1


def test_a_dense_model_has_no_routing():
    assert make().routing() == ([], 0)


def test_the_weights_browser_reads_who_reads_a_parameter_and_how_it_is_stored():
    debugger = make()
    debugger.goto_step(8)  # in request 0's prefill
    assert debugger.browser.readers("blocks.0.attn.wk") == ["blocks.0.attn.hook_k"]  # the key projection
    assert debugger.browser.readers("no.such.parameter") == []
    assert debugger.browser.kind("blocks.0.attn.wk") is None and debugger.browser.block("embed", (0, 0)) is None


def test_the_weights_browser_lists_shapes_and_reads_a_cell():
    """X01: six tokens of width 4; W_K maps the width 4 to two heads of width 2."""
    debugger = make()
    shapes = debugger.browser.shapes()
    assert shapes["embed"] == (6, 4) and shapes["blocks.0.attn.wk"] == (4, 4) and list(shapes) == list(debugger.weights)
    debugger.apply(CellEdit("blocks.0.attn.wk", (0, 1), 0.5))
    assert debugger.browser.value("blocks.0.attn.wk", (0, 1)) == 0.5


def test_moving_headless_builds_no_frame(monkeypatch):
    """Only a view subscribes to frames: the moves of a Debugger no view watches (a script's, the CLI's) answer from
    the history, and no frame is ever built for them."""
    from tinyllm_tui.debugger import frames

    def no_frame(*_):
        raise AssertionError("a frame was built for a headless move")

    monkeypatch.setattr(frames.FrameBuilder, "__init__", no_frame)
    debugger = Debugger(load_scenario(X01), breakpoints=["softmax"])
    assert debugger.step() == Moved(1) and debugger.back() == Moved(0)
    assert debugger.continue_() == HitBreakpoint(8, ("softmax",))
    assert debugger.play_step() == Moved(9)
    assert debugger.search("attn.z") == Moved(12)  # head 1's, after head 0's at 9
    assert debugger.goto_step(3) == Moved(3) and debugger.search("12") == Moved(12)


def test_a_field_breakpoint_compares_values_as_a_state_holds_them():
    """`head=01` is head 1, as `layer=0 & head=1` is (compared as text, it never hit)."""
    from engine.breakpoints import parse_breakpoint

    states = list(Session(load_scenario(X01)).steps())
    hits = {text: [s.step for s in states if parse_breakpoint(text).hits(s)] for text in ("head=01", "head=1")}
    assert hits["head=01"] == hits["head=1"] == [s.step for s in states if s.head == 1] != []
