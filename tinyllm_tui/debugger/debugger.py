"""A session of debugging, headless: cursor and history, breakpoints, runs, search, edits, fault, verdicts.

The TUI and the CLI drive a `Debugger`; it never imports textual, rich or typer, and it words
nothing: every move returns a typed result (tinyllm_tui.debugger.results) that the views word.
Exactly one thread owns the engine's generator at a time: every move takes `_owner` (a run in a
worker holds it until it stops), and a move made meanwhile returns `Refused(Reason.BUSY)` instead
of touching the generator. After a move its owner has the frame builder (tinyllm_tui.debugger.frames,
made once a view subscribes) build a `Frame` and publish it with one assignment; a replay after an
edit builds the new session aside and publishes it whole, so a reader never meets a half-changed
debugger. Edits and interventions are one undo list (changes.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cached_property, wraps
from pathlib import Path

import numpy as np

from engine import Backend, OpState, Scenario, Session, make_backend
from engine.breakpoints import Breakpoint, BreakpointError
from engine.causes import Cause
from engine.compare.against import Against, Report
from engine.compare.dump import Dump
from engine.compare.expect import Cell, Outcome
from engine.faults import FAULTS
from engine.lazy_weights import LazyWeights
from engine.loading.edits import CellEdit, Edit, EditError, FillEdit, parse_value, with_weights
from engine.session import StaleFrom
from engine.trace import Phase
from tinyllm_tui.debugger.autosave import Unsaved
from tinyllm_tui.debugger.comparisons import Compared, Comparisons
from engine.interventions import InterventionError, routed_expert, target_text
from tinyllm_tui.debugger.changes import Changed, Changes
from tinyllm_tui.debugger.interventions import (Change, Intervened, applied_to, checked, intervened, problem,
                                                save_interventions, unmasked)
from tinyllm_tui.debugger.readings import Glance, Routing, round_glance, round_lens, routing_at
from tinyllm_tui.debugger.tracing import Trace
from tinyllm_tui.debugger.weights import WeightEdits, WeightsBrowser
from tinyllm_tui.debugger import navigation
from tinyllm_tui.debugger.navigation import Progress
from tinyllm_tui.debugger.opened import Opened
from tinyllm_tui.debugger.breakpoint_set import BreakpointSet, matcher, misnamed_in
from tinyllm_tui.debugger.frame import Frame
from tinyllm_tui.debugger.frames import FrameBuilder, View
from tinyllm_tui.debugger.history import HISTORY_BUDGET, History
from tinyllm_tui.debugger.row_labels import MARKS, RowWords
from tinyllm_tui.debugger.results import (BreakpointAdded, CacheShown, Cancelled, DiffReport, Diverged, EditKind,
                                          EndOfTrace, Generated, HitBreakpoint, InjectionChanged, Misnamed, Moved,
                                          Reason, Rebuilt, Refused, Result, Saved)

DIVERGED = "diverged"  # what `g` takes to go to the first divergence from the --against dump


class Run:
    """The session being debugged: replaced whole after an edit, never changed in place. Its session and history
    are made when first read: the CLI's `run` reads neither (it streams a session of its own, `trace()`)."""

    def __init__(self, scenario: Scenario, session: Callable[[], Session], budget: int):
        self.scenario, self._session, self._budget = scenario, session, budget

    @cached_property
    def session(self) -> Session:
        return self._session()

    @cached_property
    def history(self) -> History:
        return History(self.session.steps, budget=self._budget)



def owning(move: Callable[..., Result]) -> Callable[..., Result]:
    """A move that pulls the generator: Refused(BUSY) while another thread owns it."""

    @wraps(move)
    def owned(self: Debugger, *args, **options) -> Result:
        if not self._owner.acquire(blocking=False):
            return Refused(Reason.BUSY)
        try:
            return move(self, *args, **options)
        except InterventionError as error:  # one that fits only later rounds fails where it first cannot apply
            if error.intervention is None:
                raise
            return self._drop_intervention(error)
        finally:
            self._owner.release()

    return owned


class Debugger:
    def __init__(self, scenario: Scenario, backend: Backend | None = None, *, breakpoints: list[str] = (),
                 inject: str | None = None, edits: list[Edit] = (), budget: int = HISTORY_BUDGET,
                 against: tuple[Dump, float | None, float | None] | None = None, quick_start: bool = False):
        """Args:
        scenario: as read from its file; `edits` (from --set) start as unsaved edits on top.
        budget: bytes of operator outputs the history keeps for stepping back.
        against: a dump of the user's own activations and the tolerance (--tolerance, --rtol; None: the
            dtype's default) they must meet; every pass the dump holds is judged cell by cell against it.
        quick_start: with weights read on first use (a checkpoint's LazyWeights), a frame lists only the operators
            of its round computed so far, so that the first shows before the rest of round 0 (and the weights it
            reads) is computed, and a step into a decode round before that round's experts are dequantized;
            `complete_round` (in the generator's owner) lists the rest. Until then `round_pending` is True.
        """
        self.against = None if against is None else Against(against[0], scenario, *against[1:])
        self.backend = backend or make_backend()
        self.comparisons = Comparisons(self.backend, self.against, self._compared)
        self.changes = Changes(scenario.weights, scenario.interventions)  # edits and interventions: one undo list
        self.edits = WeightEdits(scenario, self.changes, edits)
        self.browser = WeightsBrowser(self.edits, lambda: self.view.round_states)  # what the weights browser reads
        self.breaks = BreakpointSet(breakpoints)  # a text that cannot be understood raises BreakpointError
        self.budget = budget
        self.stale: StaleFrom | None = None
        self.previous: History | None = None  # the run before the last edit, to show changed cells
        self.outcomes: tuple[Outcome, ...] | None = None  # None until the expect: tables are checked
        self.divergences: Report | None = None  # None until the run is compared with the --against dump
        self._owner = threading.Lock()
        self._cancel = threading.Event()  # stops a run that owns the generator
        self.inject = inject
        self._run = self._new_run(0, None)
        self._frames: FrameBuilder | None = None  # once a view subscribes (the TUI; a test reading `frame`)
        self._defer = quick_start and isinstance(scenario.weights, LazyWeights)  # a round is listed as computed

    def subscribe(self, words: RowWords = MARKS) -> None:
        """From now on every move publishes a frame, starting with one of where the history stands (in the
        caller's thread: the TUI subscribes where it prepares the Debugger, off the UI thread). `words`: the
        view's words inside row labels (a ring's slots, a batch's rows), in its language."""
        if self._frames is None:
            self._frames = FrameBuilder(self, words)
            self._publish()

    @property
    def frame(self) -> Frame:
        """What the views draw; reading it subscribes."""
        self.subscribe()
        return self._frames.frame

    @property
    def view(self) -> View:
        self.subscribe()
        return self._frames.view

    @property
    def round_pending(self) -> bool:
        """The frame lists only the operators of its round computed so far (a quick start): `complete_round` lists
        the rest."""
        self.subscribe()
        return self._frames.pending

    # -- what views and callers read -------------------------------------------------------------
    @property
    def scenario(self) -> Scenario:
        return self._run.scenario

    @property
    def session(self) -> Session:
        return self._run.session

    @property
    def history(self) -> History:
        return self._run.history

    @property
    def fingerprint(self) -> str:
        """What a cache row computed with the current weights carries."""
        return self._run.scenario.fingerprint

    @property
    def weights(self) -> dict[str, np.ndarray]:
        return self.edits.current

    @property
    def file_scenario(self) -> Scenario:
        """The scenario as its file holds it (edits are relative to it)."""
        return self.edits.file

    @property
    def opened(self) -> Opened:
        """What the views show of the scenario file opened (the file written, after a save as…)."""
        return Opened.of(self.file_scenario)

    @property
    def found_unsaved(self) -> Unsaved | None:
        """Edits an earlier session left unsaved, to offer at start."""
        return self.edits.found

    @property
    def busy(self) -> bool:
        return self._owner.locked()

    @property
    def comparing(self) -> bool:
        return self.comparisons.running

    def cancel(self) -> bool:
        """Ask a run or a comparison in flight to stop at its next step; False if none runs."""
        running = self.busy or self.comparing
        if running:
            self._cancel.set()
            self.comparisons.cancel()
        return running

    # -- the session and its frame -----------------------------------------------------------------
    def _new_run(self, step: int, progress: Progress | None) -> Run:
        """A fresh session with the current weights and fault, replayed to `step` (a cancel stops it earlier).
        Built aside: nothing a reader sees changes until the caller publishes it."""
        scenario = applied_to(with_weights(self.file_scenario, self.weights), self.changes.interventions)
        inject, stale = self.inject, self.stale
        run = Run(scenario, lambda: Session(scenario, self.backend, inject=inject, stale=stale), self.budget)
        self._cancel.clear()
        if step:  # the history is made only when something reads it (`run` never does)
            navigation.replay(run.history, step, self._cancel, progress)
        return run

    def _adopt(self, run: Run) -> None:
        self._run, self.outcomes, self.divergences = run, None, None
        self.breaks.forget()
        self._publish()

    def hits(self, state: OpState) -> tuple[str, ...]:
        """The breakpoints that hit `state`, judged once per step of the current run and breakpoint set."""
        return self.breaks.hits(state)

    @property
    def breakpoints(self) -> tuple[Breakpoint, ...]:
        return self.breaks.all

    def misnamed_breakpoints(self, breakpoints: tuple[Breakpoint, ...] | None = None) -> tuple[Misnamed, ...]:
        """Each name of the breakpoints (all, or those given) that no operator has, with the nearest name: read
        from the session's hook registry (every hook a pass may yield, an expert's too), nothing computed."""
        return misnamed_in(self.breakpoints if breakpoints is None else breakpoints, self.session.hooks)

    def _publish(self, ahead: bool | None = None) -> None:
        """The frame of where the history stands, once a view has subscribed (in the owner's thread). `ahead`: its
        operator list computes the round to its end (by default unless the rounds are listed as computed)."""
        if self._frames is not None:
            self._frames.publish(not self._defer if ahead is None else ahead)

    def _refresh_breaks(self) -> None:
        """The marks in the operator list and the status follow the breakpoints (nothing else changes)."""
        self.breaks.forget()
        if self._frames is not None:
            self._frames.refresh_breaks()

    # -- moving ------------------------------------------------------------------------------------
    @owning
    def complete_round(self, stop: Callable[[], bool] = lambda: False) -> Result:
        """Compute the current round to its end, unless `stop()` turns true first (a key waits), and publish the
        frame listing its operators computed (`round_pending` until all are); the cursor stays."""
        self._publish(ahead=self.history.complete_round(stop))
        return Moved(self.history.cursor)

    @owning
    def step(self) -> Result:
        """To the next operator: in a batch, to its last row's state, every row having been through it (the rows
        are its matrix's batch axis)."""
        moved = navigation.step(self.history)
        self._publish()
        return Moved(self.history.cursor) if moved else self.end_of_trace()

    @owning
    def back(self) -> Result:
        """To the previous operator: in a batch, to its last row's state."""
        moved = navigation.back(self.history)
        self._publish()
        return Moved(self.history.cursor) if moved else Refused(Reason.FIRST_STEP)

    @owning
    def goto_step(self, step: int) -> Result:
        return self._goto(step)

    def _goto(self, step: int) -> Result:
        if not navigation.goto(self.history, step):
            return Refused(Reason.NO_STEP, (step, self.history.last_recorded))
        self._publish()
        return Moved(step)

    @owning
    def run_until(self, stop: Callable[[OpState], bool], progress: Progress | None = None) -> Result:
        """Step forward until `stop(state)`, the end, or a cancel."""
        self._cancel.clear()
        stopped = navigation.run_until(self.history, stop, self._cancel, progress)
        self._publish()
        if stopped is None:
            return self.end_of_trace()
        return Moved(self.history.cursor) if stopped else Cancelled(self.history.cursor)

    def continue_(self, progress: Progress | None = None) -> Result:
        result = self.run_until(lambda state: bool(self.hits(state)), progress)
        if isinstance(result, Moved):
            return HitBreakpoint(result.step, self.hits(self.history.current))
        return result

    def play_step(self) -> Result:
        """One step of play: Moved, or where play must stop (a breakpoint, the end, Refused)."""
        result = self.step()
        hits = self.hits(self.history.current) if isinstance(result, Moved) else ()
        return HitBreakpoint(result.step, hits) if hits else result

    @owning
    def search(self, text: str, backward: bool = False, *, progress: Progress | None = None) -> Result:
        """Go to a step number, or to the next (previous) operator matching `text`, wrapping around."""
        text = text.strip()
        refused = self.check_query(text)
        if refused is not None:
            return refused
        if text.isdigit():
            return self._goto(int(text))
        if text == DIVERGED:
            return self._goto_divergence()
        self._cancel.clear()
        found, wrapped = navigation.search(self.history, matcher(text), backward, self._cancel, progress)
        self._publish()
        if self._cancel.is_set():
            return Cancelled(self.history.cursor)
        if found is None:
            return Refused(Reason.NO_MATCH, (text,))
        return Moved(found, wrapped)

    @staticmethod
    def check_query(text: str) -> Refused | None:
        """What `search` would refuse about `text` itself, said before any run (a prompt stays open)."""
        text = text.strip()
        if not text:
            return Refused(Reason.EMPTY_SEARCH)
        if not text.isdigit():
            try:
                matcher(text)
            except BreakpointError as error:
                return Refused(Reason.BAD_QUERY, (error.cause,))
        return None

    def end_of_trace(self) -> EndOfTrace:
        tokens = self.scenario.vocab.tokens
        return EndOfTrace(tuple(Generated("".join(tokens[t] for t in r.generated),
                                          tuple(tokens[t] for t in r.generated), r.stop)
                                for r in self.session.results))

    @owning
    def move_cache(self, layers: int = 0, heads: int = 0) -> Result:
        """Page the KV cache shown through layers ([ ]) and heads ({ }); a layer picked stays put."""
        state = self.view.state
        if not state.caches:
            return Refused(Reason.NO_CACHE)
        cache = self._frames.move_cache(state, layers, heads)
        return CacheShown(cache.layer, cache.head)

    # -- breakpoints (tinyllm_tui/debugger/breakpoint_set.py; they work while a run is in flight) -----------
    def _breakpoints_changed(self, result: Result) -> Result:
        if not isinstance(result, Refused):
            self._refresh_breaks()
        return result

    def add_breakpoint(self, text: str) -> Result:
        """Added, with the names in it that no operator has (BreakpointAdded.misnamed)."""
        result = self._breakpoints_changed(self.breaks.add(text))
        if isinstance(result, BreakpointAdded):
            added = tuple(b for b in self.breakpoints if b.text == result.text)
            return replace(result, misnamed=self.misnamed_breakpoints(added))
        return result

    def remove_breakpoint(self, text: str) -> Result:
        return self._breakpoints_changed(self.breaks.remove(text))

    def toggle_breakpoint(self, name: str) -> Result:
        return self._breakpoints_changed(self.breaks.toggle(name))

    def toggle_breakpoint_at(self, step: int | None) -> Result:
        """On the operator at `step` of the round shown (the current one where none is listed there): a head's
        operator gets one on that head only, as its hook renders (`blocks.0.attn.hook_pattern h1`)."""
        view = self.view
        state = next((s for s in view.round_states if s.step == step), view.state)
        return self.toggle_breakpoint(state.hook.render())

    def clear_breakpoints(self) -> Result:
        return self._breakpoints_changed(self.breaks.clear())

    # -- the injected fault --------------------------------------------------------------------------
    @owning
    def cycle_injection(self, progress: Progress | None = None) -> Result:
        """Switch to the next deliberate bug (or none) and replay to the same step.

        A bug that cannot run on this model (layer 1's cache in a one-layer model, positions past a
        learned table) is skipped, and the result says why."""
        names = [None, *FAULTS]
        skipped = []
        for name in names[names.index(self.inject) + 1:] + [None]:
            why = name and FAULTS[name].cannot_run(self.scenario)
            if not why:
                break
            skipped.append((name, why))
        self.inject = name
        self._adopt(self._new_run(self.history.cursor, progress))
        return InjectionChanged(self.inject, tuple(skipped))

    # -- weight edits ----------------------------------------------------------------------------------
    def edit_asks_about_the_cache(self) -> bool:
        """An edit made while decoding may keep the stale cache (to see what it breaks) or recompute."""
        return self.frame.phase is Phase.DECODE

    @staticmethod
    def parse_value(text: str) -> float | Refused:
        try:
            return parse_value(text)
        except EditError as error:
            return Refused(Reason.BAD_EDIT, (error.cause,))

    def cell_edit(self, name: str, index: tuple[int, ...], value: float) -> Edit:
        return CellEdit(name, index, value)

    def fill_edit(self, name: str, fill: str, scale: float = 1.0) -> Edit:
        """zeros, identity, scale (s·I) or file (back to the file's values)."""
        return FillEdit(name, fill, scale)

    @owning
    def apply(self, edit: Edit, *, keep_stale: bool = False, progress: Progress | None = None) -> Result:
        """Apply one edit and replay to the same step; autosaved beside the scenario."""
        try:
            weights = self.edits.edited(edit)
        except EditError as error:
            return Refused(Reason.BAD_EDIT, (error.cause,))
        if np.array_equal(weights[edit.name], self.weights[edit.name]):
            return Refused(Reason.UNCHANGED, (edit.name,))
        previous = self.weights
        self.edits.push(weights, edit)
        return self._rebuild(Rebuilt(EditKind.EDITED, edit.name), progress, previous if keep_stale else None)

    @owning
    def restore(self, unsaved: Unsaved, progress: Progress | None = None) -> Result:
        """Apply the edits an earlier session left unsaved."""
        self.edits.restore(unsaved)
        return self._rebuild(Rebuilt(EditKind.RESTORED, count=len(unsaved.edits)), progress)

    def drop_unsaved(self) -> None:
        """Forget the autosaved edits (the user chose to quit without saving them)."""
        self.edits.drop_autosave()

    def close(self) -> None:
        """Stop what runs; weights equal to the file leave no autosave behind."""
        self.cancel()
        if not self.unsaved():
            self.drop_unsaved()

    @owning
    def undo(self, progress: Progress | None = None) -> Result:
        """Take back the last change, an edit or an intervention (one undo list), and replay to the same step."""
        undone = self.changes.undo()
        if undone is None:
            return Refused(Reason.NOTHING_TO_UNDO)
        return self._changed_back(undone, EditKind.UNDONE, Change.UNDONE, progress)

    @owning
    def redo(self, progress: Progress | None = None) -> Result:
        redone = self.changes.redo()
        if redone is None:
            return Refused(Reason.NOTHING_TO_REDO)
        return self._changed_back(redone, EditKind.REDONE, Change.REDONE, progress)

    def _changed_back(self, change: Changed, edit: EditKind, intervention: Change, progress: Progress | None) -> Result:
        """After an undo or a redo: the run replayed, and what changed, worded by the view."""
        if change.edit is not None:
            return self._rebuild(Rebuilt(edit, change.edit.name), progress)
        self._rebuild(None, progress)
        return self._intervened(intervention, change.intervention.text)

    @owning
    def recompute(self, progress: Progress | None = None) -> Result:
        if self.stale is None:
            return Refused(Reason.NOT_STALE)
        return self._rebuild(Rebuilt(EditKind.RECOMPUTED), progress)

    def _rebuild(self, result: Rebuilt, progress: Progress | None, stale_weights: dict | None = None) -> Result:
        """A new session with the current weights, replayed to the same step (the caller owns the generator)."""
        state = self.history.current
        self.stale = None if stale_weights is None else StaleFrom(stale_weights, state.request, state.round)
        changed = self.weights is not self.file_scenario.weights or self.changes.interventions
        previous = self.history if changed else None
        run = self._new_run(state.step, progress)
        self.previous = previous
        self._adopt(run)
        self.edits.autosave()
        return result

    # -- interventions on activations (the list: tinyllm_tui/debugger/interventions.py) -------------------
    def intervention_start(self) -> str:
        """What the intervention prompt starts from: the current operator, all of it (the value is the user's)."""
        state = self.view.state
        return target_text(state.hook.text, state.head) + "[:,:]="

    def intervention_problem(self, text: str) -> Cause | None:
        """What is wrong with `text` as an intervention on this model (None: nothing seen before a run)."""
        return problem(text, self.scenario)

    def _drop_intervention(self, error: InterventionError) -> Result:
        """The run stopped where `error.intervention` could not apply: it goes (a change of its own: undo puts
        it back, and a replay past that round drops it again), and the session is rebuilt to the last step reached."""
        self.changes.drop(error.intervention)
        self._rebuild(None, None)
        return Refused(Reason.BAD_QUERY, (error.cause,))

    @owning
    def intervene(self, text: str, progress: Progress | None = None) -> Result:
        """Add one intervention (`--patch`/`--ablate` text) and replay to the same step; a bad one is refused."""
        try:
            intervention = checked(text, self.scenario, self.session.model.hooks)
        except InterventionError as error:
            return Refused(Reason.BAD_QUERY, (error.cause,))
        self.changes.add(intervention)
        try:
            self._rebuild(None, progress)
            self.history.round_states()  # this round to its end: an operator that refuses it does so now
        except InterventionError as error:  # a row of the wrong width, a request with no such pass, …
            self.changes.discard()
            self._rebuild(None, progress)
            return Refused(Reason.BAD_QUERY, (error.cause,))
        unused = self.session.patcher is not None and intervention in self.session.patcher.unused()
        return replace(self._intervened(Change.ADDED, intervention.text),
                       unreached=routed_expert(intervention) if unused else None,
                       unmasked=unmasked(intervention, self.history.round_states()))

    def _intervened(self, change: Change, text: str = "") -> Intervened:
        return intervened(change, text, self.history.round_states(), self.previous, self.scenario.vocab.tokens)

    def save_interventions(self, path: str | Path | None = None) -> Result:
        """Write the current interventions into the scenario file's `interventions:` (a checkpoint opened
        directly has no file for them: name a YAML that states `checkpoint:`)."""
        if path is None and self.file_scenario.document is None:
            return Refused(Reason.NOTHING_TO_SAVE)
        target = path or self.file_scenario.path
        save_interventions(target, self.changes.interventions)
        return Saved(str(target))

    def unsaved(self) -> int:
        """How many numbers differ from the file."""
        return self.edits.unsaved()

    @owning
    def save(self, path: str | Path | None = None) -> Result:
        """Write the edited weights (atomically); raises OSError with the file untouched."""
        written = self.edits.save(path)
        self._publish()
        return Saved(str(written))

    def earlier(self, state: OpState) -> OpState | None:
        """`state`'s operator in the run before the last edit (None: that run had another there)."""
        earlier = None if self.previous is None else self.previous.state_at(state.step)
        same = earlier is not None and earlier.name == state.name and earlier.values.shape == state.values.shape
        return earlier if same else None

    # -- comparisons (tinyllm_tui/debugger/comparisons.py: each on sessions of its own, safe in a worker) ------
    def _compared(self) -> Compared:
        return Compared(self.scenario, self.inject, self.stale)

    def compare(self, alone: bool = False) -> DiffReport:
        """The run being debugged (fault and stale cache included) against a full recompute, or (`alone`)
        its requests as one batch against each request run alone, with where it first diverges. Raises
        DiffCancelled on `cancel()`."""
        return self.comparisons.compare(alone)

    def compare_against(self) -> Report | None:
        """The run being debugged against the --against dump over every pass; kept (and shown) unless an edit
        has outrun it. Raises DiffCancelled when `cancel()` is called."""
        try:
            scenario, report = self.comparisons.against_dump()
        except InterventionError:  # as for the expect: tables: the move that reaches it says why and drops it
            return None
        if report is not None and scenario is self.scenario:
            self.divergences = report
            self._republish()
        return report

    def check_expectations(self, scenario: Scenario) -> list[Outcome]:
        return self.comparisons.expectations(scenario)

    def checked_tables(self) -> list[Outcome]:
        """`check`: the expect: tables' outcomes; raises ScenarioError for a scenario without tables."""
        return self.comparisons.checked()

    def exact_cache_error(self) -> list:
        """`diff`: a quantized cache's error against the exact cache, round by round (none for an exact cache)."""
        return self.comparisons.exact_cache()

    def compare_llama_cpp(self, file: str | Path, atol: float | None, rtol: float | None) -> Report:
        """`check --against-llama-cpp`: a GGUF file's first request through llama.cpp itself against this run."""
        return self.comparisons.against_llama_cpp(file, atol, rtol)

    def round_verdicts(self) -> dict[tuple[int, int], bool]:
        """(request, round) -> whether your activations agree in every operator of that round."""
        return {} if self.divergences is None else self.divergences.round_verdicts()

    def differing_cache_rows(self, state: OpState, layer: int) -> frozenset[int]:
        """Positions of `layer`'s cache at `state` whose K or V row differs from your dumped cache."""
        if self.against is None or not state.caches:
            return frozenset()
        return self.against.differing_cache_rows(state, min(layer, len(state.caches) - 1))

    def _goto_divergence(self) -> Result:
        """`g diverged`: to the first operator (or cache) where your activations leave the reference."""
        if self.against is None:
            return Refused(Reason.NO_DUMP)
        report = self.divergences or self.compare_against()
        first = report.first_divergence
        if first is None:
            self._publish()
            return Diverged(None)
        self._goto(first.step)
        return Diverged(first.step, first, len(self.scenario.requests))

    def check_outcomes(self) -> bool:
        """Check the expect: tables on sessions of their own (in any thread) and keep the outcomes, unless an edit
        has outrun them (False); the frame shows them at once, or after the run in flight (which publishes when
        it stops)."""
        scenario = self.scenario
        outcomes = self.check_expectations(scenario)
        if scenario is not self.scenario:
            return False
        self.outcomes = tuple(outcomes)
        self._republish()
        return True

    def _republish(self) -> None:
        """A frame with what a comparison found, now; or when the run in flight publishes as it stops. A round
        still to be listed stays so: `complete_round` computes it, in the runner."""
        if self._owner.acquire(blocking=False):
            try:
                self._publish()
            finally:
                self._owner.release()

    def verdicts(self, state: OpState) -> Mapping[tuple[int, int], Cell]:
        """(row, col) of `state`'s matrix -> the printed cell of an expect: table it must agree with."""
        key = (state.request, state.round, state.name, state.head)
        rows = {position: i for i, position in enumerate(state.positions)}
        return {(rows[cell.position], cell.col): cell
                for outcome in self.outcomes or ()
                if outcome.expectation.key == key and outcome.expectation.run == "cached"
                for cell in outcome.cells if cell.position in rows}

    @owning
    def lens(self, k: int = 3):
        """The logit lens of the current round, and its choice's attribution once chosen (readings.round_lens)."""
        return round_lens(self.session.model, self.history.round_states(), self.scenario.vocab, k)

    def glance(self) -> Glance:
        """Heads at a glance of the round the cursor is in, as the last move published it."""
        view = self.view
        return round_glance(view.round_states, view.state, self.scenario.model.n_layers, self.scenario.vocab.tokens)

    def routing(self) -> tuple[list[Routing], int]:
        """The mixture-of-experts routing of the round the cursor is in, as the last move published it, and the
        index of the layer to open at (readings.routing_at)."""
        view = self.view
        return routing_at(view.round_states, view.state)

    # -- the pass for the CLI --
    def trace(self, save: str | Path | None = None) -> Trace:
        """Every operator from the first to the end of the trace, with the breakpoints that hit each:
        `tinyllm-tui run`'s pass, read once (no history, no frames). `save`: where its activations go."""
        return Trace(self.scenario, self.backend, self.inject, self.breakpoints, save)
