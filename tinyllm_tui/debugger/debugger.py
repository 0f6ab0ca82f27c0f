"""A session of debugging, headless: cursor and history, breakpoints, runs, search, edits, fault, verdicts.

The TUI and the CLI drive a `Debugger`; it never imports textual, rich or typer, and it words
nothing: every move returns a typed result (tinyllm_tui.debugger.results) that the views word.
Exactly one thread owns the engine's generator at a time: every move takes `_owner` (a run in a
worker holds it until it stops), and a move made meanwhile returns `Refused(Reason.BUSY)` instead
of touching the generator. After a move its owner builds a `Frame` (tinyllm_tui.debugger.frame)
and publishes it with one assignment; a replay after an edit builds the new session aside and
publishes it whole, so a reader never meets a half-changed debugger.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import wraps
from pathlib import Path

import numpy as np

from engine import Backend, OpState, Scenario, Session, load_scenario, make_backend, to_host
from engine.breakpoints import Breakpoint, BreakpointError, parse_breakpoint
from engine.compare.against import Against, Report, disagreement
from engine.compare.check import check_scenario
from engine.compare.diff import TOLERANCE, OpDiff, diff_sessions, first_divergence
from engine.compare.diff import alone as alone_session
from engine.compare.dump import Dump
from engine.compare.expect import Cell, Outcome
from engine.faults import FAULTS
from engine.lazy_weights import LazyWeights, changed_names
from engine.loading.edits import CellEdit, Edit, EditError, FillEdit, WeightHistory, apply_edit, parse_value, save, \
    with_weights
from engine.session import StaleFrom
from engine.trace import OpKind, Phase
from tinyllm_tui.debugger import autosave
from tinyllm_tui.debugger.autosave import Unsaved
from engine.interventions import InterventionError, check_intervention, parse_any
from tinyllm_tui.debugger.interventions import Change, InterventionHistory, Intervened, save_interventions
from tinyllm_tui.debugger.readings import choice_before_after
from tinyllm_tui.debugger.batch import batch_group, same_operator, stacked
from tinyllm_tui.debugger.frame import (Frame, Labels, MatrixFrame, StatusFacts, VerdictSource, Verdicts, cache_frame,
                                        follow_layer, hook_key, lazy_labels, matrix_frame, operands, operator_lines,
                                        timeline_frame, with_breakpoints)
from tinyllm_tui.debugger.history import DEFAULT_BUDGET, History, RoundSummary
from tinyllm_tui.debugger.results import (BreakpointAdded, BreakpointRemoved, BreakpointsCleared, CacheShown,
                                          Cancelled, DiffReport, Diverged, EditKind, EndOfTrace, Generated,
                                          HitBreakpoint, InjectionChanged, Moved, Reason, Rebuilt, Refused, Result,
                                          Saved)

PROGRESS_EVERY = 200  # steps between progress reports of a long run
DIVERGED = "diverged"  # what `g` takes to go to the first divergence from the --against dump


class Busy(RuntimeError):
    """Another thread owns the session's generator (a run is in flight)."""


class DiffCancelled(RuntimeError):
    """A comparison was cancelled before it finished."""


@dataclass(frozen=True)
class View:
    """The current operator and its surroundings, for callers that want engine states (the CLI, tests)."""

    state: OpState
    round_states: tuple[OpState, ...]  # every operator of the current round
    rounds: tuple[RoundSummary, ...]  # the current request's finished rounds (A.9)
    breaks: frozenset[int]  # steps of `round_states` where a breakpoint hits
    total: int | None  # number of steps, once the trace has been run to its end
    at_end: bool


@dataclass(frozen=True)
class Run:
    """The session being debugged: replaced whole after an edit, never changed in place."""

    scenario: Scenario
    session: Session
    history: History


Progress = Callable[[int], None]


def matcher(text: str) -> Callable[[OpState], bool]:
    """What `g`/`G` look for: what a breakpoint accepts (glob, short name or its first parts, kind,
    field=value, …). Raises BreakpointError for what a breakpoint refuses too (`abs>`)."""
    return parse_breakpoint(text).hits


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
                 inject: str | None = None, edits: list[Edit] = (), budget: int = DEFAULT_BUDGET,
                 against: tuple[Dump, float | None, float | None] | None = None, quick_start: bool = False):
        """Args:
        scenario: as read from its file; `edits` (from --set) start as unsaved edits on top.
        budget: bytes of operator outputs the history keeps for stepping back.
        against: a dump of the user's own activations and the tolerance (--tolerance, --rtol; None: the
            dtype's default) they must meet; every pass the dump holds is judged cell by cell against it.
        quick_start: with weights read on first use (a checkpoint's LazyWeights), the first frame lists only the
            operators computed so far, so that it shows before the rest of round 0 (and the weights it reads) is
            computed; `complete_round` (in the generator's owner) lists
            the rest. Until then `round_pending` is True.
        """
        self.against = None if against is None else Against(against[0], scenario, *against[1:])
        self.file_scenario = scenario
        self.file_fingerprint = scenario.fingerprint
        self.backend = backend or make_backend()
        self.weight_history = WeightHistory(scenario.weights)
        for edit in edits:
            self.weight_history.push(apply_edit(self.weight_history.current, edit), edit)
        self.found_unsaved = autosave.find(scenario.path, self.file_fingerprint, scenario.weights)
        # replaced, never mutated: a run reads it meanwhile; a text that cannot be understood raises BreakpointError
        parsed = (parse_breakpoint(text.strip()) for text in breakpoints)
        self.breakpoints: tuple[Breakpoint, ...] = tuple({b.text: b for b in parsed}.values())
        self._hits: dict[int, tuple[str, ...]] = {}  # step -> breakpoints hitting it: judged once per step
        self.budget = budget
        self.stale: StaleFrom | None = None
        self.previous: History | None = None  # the run before the last edit, to show changed cells
        self.outcomes: tuple[Outcome, ...] | None = None  # None until the expect: tables are checked
        self.divergences: Report | None = None  # None until the run is compared with the --against dump
        self.cache_layer, self.cache_head, self.cache_pinned = 0, 0, False  # the KV cache shown
        self._owner = threading.Lock()
        self._publishing = threading.Lock()  # a frame is replaced whole, by one thread at a time
        self._cancel = threading.Event()  # stops a run that owns the generator
        self._cancel_comparisons = threading.Event()  # stops a diff, which runs sessions of its own
        self._comparing = 0
        self._counting = threading.Lock()  # guards _comparing
        self._unsaved: tuple[tuple[int, int] | None, int] = (None, 0)
        self.inject = inject
        self.interventions = InterventionHistory(scenario.interventions)
        self._run = self._new_run(0, None)
        self._publish(ahead=not (quick_start and isinstance(scenario.weights, LazyWeights)))

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
        return self.weight_history.current

    @property
    def busy(self) -> bool:
        return self._owner.locked()

    @property
    def comparing(self) -> bool:
        return self._comparing > 0

    def cancel(self) -> bool:
        """Ask a run or a comparison in flight to stop at its next step; False if none runs."""
        running = self.busy or self.comparing
        if running:
            self._cancel.set()
            self._cancel_comparisons.set()
        return running

    # -- the session and its frame -----------------------------------------------------------------
    def _new_run(self, step: int, progress: Progress | None) -> Run:
        """A fresh session with the current weights and fault, replayed to `step` (a cancel stops it earlier).
        Built aside: nothing a reader sees changes until the caller publishes it."""
        scenario = self.interventions.applied_to(with_weights(self.file_scenario, self.weights))
        session = Session(scenario, self.backend, inject=self.inject, stale=self.stale)
        history = History(session.steps, budget=self.budget)
        self._cancel.clear()
        while history.cursor < step and not self._cancel.is_set() and history.forward():
            time.sleep(0)  # as in run_until: keys stay quick
            if progress is not None and history.cursor % PROGRESS_EVERY == 0:
                progress(history.cursor)
        return Run(scenario, session, history)

    def _adopt(self, run: Run) -> None:
        self._run, self.outcomes, self.divergences = run, None, None
        self._hits = {}
        self._publish()

    def hits(self, state: OpState) -> tuple[str, ...]:
        """The breakpoints that hit `state`, judged once per step of the current run and breakpoint set."""
        found = self._hits.get(state.step)
        if found is None:
            if len(self._hits) > 4096:
                self._hits = {}
            found = self._hits[state.step] = tuple(b.text for b in self.breakpoints if b.hits(state))
        return found

    def _publish(self, ahead: bool = True) -> None:
        """Build the view and the frame of where the history stands (in the owner's thread) and publish them.
        `ahead` False: the operator list holds the round's operators computed so far, nothing more."""
        history = self.history
        state = history.current
        round_states = tuple(history.round_states(ahead))
        breaks = frozenset(s.step for s in round_states if self.hits(s))
        view = View(state, round_states, tuple(history.finished_rounds(state.request)), breaks, history.total,
                    history.at_end)
        if not self.cache_pinned:
            self.cache_layer = follow_layer(state) if follow_layer(state) is not None else self.cache_layer
        scenario = self.scenario
        operators = operator_lines(round_states, breaks)
        if getattr(self, "frame", None) is not None and self.frame.operators == operators:
            operators = self.frame.operators  # the same round: the list keeps its lines
        frame = Frame(
            step=state.step, phase=Phase(state.phase), request=state.request, round=state.round,
            matrix=self._matrix(state, batch_group(history.state_at, state)),
            cache=self._cache(state, self.cache_layer, self.cache_head),
            operators=operators,
            timeline=timeline_frame(state, len(scenario.requests), bool(scenario.decode.prefill_chunk), view.rounds,
                                    self.round_verdicts()),
            status=StatusFacts(state.step, None if history.total is None else history.total - 1,
                               next(line.short for line in operator_lines((state,), breaks)), self.inject,
                               self.stale is not None, self.unsaved(), len(self.breakpoints), self.hits(state),
                               tuple(i.text for i in self.interventions.current)),
            hook=hook_key(state), inputs=operands(state), outcomes=self.outcomes, at_end=view.at_end)
        with self._publishing:
            self.view, self.frame, self.round_pending = view, frame, not ahead

    def _cache(self, state: OpState, layer: int, head: int):
        """The KV-cache slice shown, with the rows that differ from a --against dump."""
        differing = self.differing_cache_rows(state, layer)
        return cache_frame(state, self.fingerprint, self.scenario.model.d_head, layer, head, differing)

    def _matrix(self, state: OpState, batch: tuple[OpState, ...]) -> MatrixFrame:
        """The operator's matrix; in a batch (no edit or verdicts to show) every row's, stacked: the batch axis."""
        values = to_host(state.values)
        earlier = self._earlier(state)
        before = None if earlier is None else to_host(earlier.values)
        vocab = self.scenario.vocab
        verdicts = self._verdicts(state, values, before)
        rows, cols = lazy_labels(state.output.row_axis), lazy_labels(state.output.col_axis)
        stacks = len(batch) > 1 and before is None and verdicts is None and len({s.values.shape[1] for s in batch}) == 1
        if stacks:
            values, rows, cols = stacked(batch)
        tokens = tuple(vocab.label(int(x)) for x in values.ravel()) if state.kind == OpKind.CHOICE else ()
        matrix = matrix_frame(state.name, values, rows, cols, kind=state.kind, head=state.head, before=before,
                              verdicts=verdicts, tokens=tokens, names=vocab.tokens.__getitem__)
        if earlier is not None:  # its values under its own labels: an edit may have changed the tokens fed
            return replace(matrix, rows_before=lazy_labels(earlier.output.row_axis),
                           cols_before=lazy_labels(earlier.output.col_axis))
        return replace(matrix, batch_rows=tuple(s.request for s in batch)) if stacks else matrix

    def _verdicts(self, state: OpState, values: np.ndarray, before: np.ndarray | None) -> Verdicts | None:
        """Cell by cell: the user's dump (every cell), or the printed cells of an expect: table."""
        if self.against is not None:
            key = self.against.passes.key(state)
            wanted = self.against.aligned(key, state.head, tuple(state.values.shape))
            if wanted is not None:
                tolerance = self.against.tolerance(key)

                def agree(shown: np.ndarray) -> np.ndarray:
                    return ~disagreement(np.asarray(shown, dtype=np.float64), wanted, tolerance)[1]

                return Verdicts(VerdictSource.DUMP, np.ones(values.shape, bool), agree(values),
                                None if before is None else agree(before), tolerance.describe(), wanted)
        cells = self.verdicts(state)
        if not cells:
            return None
        judged, agrees = np.zeros(values.shape, bool), np.zeros(values.shape, bool)
        agrees_before = None if before is None else np.zeros(values.shape, bool)
        for (i, j), cell in cells.items():
            judged[i, j] = True
            agrees[i, j] = replace(cell, computed=float(values[i, j])).agrees
            if before is not None:
                agrees_before[i, j] = replace(cell, computed=float(before[i, j])).agrees
        return Verdicts(VerdictSource.EXPECT, judged, agrees, agrees_before,
                        f"{next(iter(cells.values())).tolerance:g}")

    def _refresh_breaks(self) -> None:
        """The marks in the operator list and the status follow the breakpoints (nothing else changes)."""
        self._hits = {}
        with self._publishing:
            view = self.view
            breaks = frozenset(s.step for s in view.round_states if self.hits(s))
            self.view = replace(view, breaks=breaks)
            self.frame = with_breakpoints(self.frame, breaks, self.hits(view.state), len(self.breakpoints))

    # -- moving ------------------------------------------------------------------------------------
    @owning
    def complete_round(self) -> Result:
        """Compute the current round to its end and publish the frame listing all its operators (after a
        quick start); the cursor stays."""
        self._publish()
        return Moved(self.frame.step)

    @owning
    def step(self) -> Result:
        """To the next operator: in a batch, to its last row's state, every row having been through it (the rows
        are its matrix's batch axis)."""
        history, start = self.history, self.history.current
        moved = history.forward()
        while moved and same_operator(history.current, start):
            moved = history.forward()
        while moved and same_operator(history.state_at(history.cursor + 1), history.current):
            moved = history.forward()
        self._publish()
        return Moved(self.frame.step) if moved else self.end_of_trace()

    @owning
    def back(self) -> Result:
        """To the previous operator: in a batch, to its last row's state."""
        history = self.history
        history.goto(batch_group(history.state_at, history.current)[0].step)
        moved = history.back()
        self._publish()
        return Moved(self.frame.step) if moved else Refused(Reason.FIRST_STEP)

    @owning
    def goto_step(self, step: int) -> Result:
        return self._goto(step)

    def _goto(self, step: int) -> Result:
        start = self.history.cursor
        if not self.history.goto(step):
            self.history.goto(start)
            return Refused(Reason.NO_STEP, (step, self.history.last_recorded))
        self._publish()
        return Moved(step)

    @owning
    def run_until(self, stop: Callable[[OpState], bool], progress: Progress | None = None) -> Result:
        """Step forward until `stop(state)`, the end, or a cancel."""
        self._cancel.clear()
        history, stopped = self.history, None
        while stopped is None and history.forward():
            time.sleep(0)  # hand the interpreter to the UI thread now and then: keys stay quick
            if stop(history.current):
                stopped = Moved(history.cursor)
            elif self._cancel.is_set():
                stopped = Cancelled(history.cursor)
            elif progress is not None and history.cursor % PROGRESS_EVERY == 0:
                progress(history.cursor)
        self._publish()
        return stopped or self.end_of_trace()

    def continue_(self, progress: Progress | None = None) -> Result:
        result = self.run_until(lambda state: bool(self.hits(state)), progress)
        if isinstance(result, Moved):
            return HitBreakpoint(result.step, self.frame.status.hits)
        return result

    def play_step(self) -> Result:
        """One step of play: Moved, or where play must stop (a breakpoint, the end, Refused)."""
        result = self.step()
        if isinstance(result, Moved) and self.frame.status.hits:
            return HitBreakpoint(result.step, self.frame.status.hits)
        return result

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
        wanted = matcher(text)
        self._cancel.clear()
        start = self.history.cursor
        after, before = (start + 1, None), (0, start)
        found = self._scan(*(before if backward else after), wanted, backward, progress)
        wrapped = found is None and not self._cancel.is_set()
        if wrapped:
            found = self._scan(*(after if backward else before), wanted, backward, progress)
        self.history.goto(start if found is None else found)
        self._publish()
        if self._cancel.is_set():
            return Cancelled(self.frame.step)
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
                return Refused(Reason.BAD_QUERY, (str(error),))
        return None

    def _scan(self, first: int, end: int | None, wanted, last: bool, progress: Progress | None) -> int | None:
        """The first (or last) step in [first, end) whose state is `wanted`."""
        found = None
        for state in self.history.states_from(first):
            time.sleep(0)  # as in run_until: keys stay quick
            if (end is not None and state.step >= end) or self._cancel.is_set():
                break
            if wanted(state):
                found = state.step
                if not last:
                    break
            if progress is not None and state.step % PROGRESS_EVERY == 0:
                progress(state.step)
        return found

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
        self.cache_pinned = self.cache_pinned or bool(layers)
        self.cache_layer = (min(self.cache_layer, len(state.caches) - 1) + layers) % len(state.caches)
        heads_shown = self._cache(state, self.cache_layer, 0).heads
        self.cache_head = (min(self.cache_head, heads_shown - 1) + heads) % heads_shown
        cache = self._cache(state, self.cache_layer, self.cache_head)
        with self._publishing:
            self.frame = replace(self.frame, cache=cache)
        return CacheShown(cache.layer, cache.head)

    # -- breakpoints (they work while a run is in flight: it reads the tuple it started with) -------------
    def add_breakpoint(self, text: str) -> Result:
        try:
            breakpoint = parse_breakpoint(text.strip())
        except BreakpointError as error:
            return Refused(Reason.BAD_QUERY, (str(error),))
        if any(b.text == breakpoint.text for b in self.breakpoints):
            return Refused(Reason.ALREADY_SET, (breakpoint.text,))
        self.breakpoints = (*self.breakpoints, breakpoint)
        self._refresh_breaks()
        return BreakpointAdded(breakpoint.text)

    def remove_breakpoint(self, text: str) -> Result:
        kept = tuple(b for b in self.breakpoints if b.text != text)
        if len(kept) == len(self.breakpoints):
            return Refused(Reason.NO_BREAKPOINT, (text,))
        self.breakpoints = kept
        self._refresh_breaks()
        return BreakpointRemoved(text)

    def toggle_breakpoint(self, name: str) -> Result:
        if any(b.text == name for b in self.breakpoints):
            return self.remove_breakpoint(name)
        return self.add_breakpoint(name)

    def clear_breakpoints(self) -> Result:
        count, self.breakpoints = len(self.breakpoints), ()
        self._refresh_breaks()
        return BreakpointsCleared(count)

    # -- the injected fault --------------------------------------------------------------------------
    @owning
    def cycle_injection(self, progress: Progress | None = None) -> Result:
        """Switch to the next deliberate bug (or none) and replay to the same step.

        A bug that cannot run on this model (layer 1's cache in a one-layer model, positions past a
        learned table) is skipped."""
        names = [None, *(name for name, fault in FAULTS.items() if not fault.cannot_run(self.scenario))]
        self.inject = names[(names.index(self.inject) + 1) % len(names)]
        self._adopt(self._new_run(self.history.cursor, progress))
        return InjectionChanged(self.inject)

    # -- weight edits ----------------------------------------------------------------------------------
    def edit_asks_about_the_cache(self) -> bool:
        """An edit made while decoding may keep the stale cache (to see what it breaks) or recompute."""
        return self.frame.phase is Phase.DECODE

    @staticmethod
    def parse_value(text: str) -> float | Refused:
        try:
            return parse_value(text)
        except EditError as error:
            return Refused(Reason.BAD_EDIT, (str(error),))

    def cell_edit(self, name: str, index: tuple[int, ...], value: float) -> Edit:
        return CellEdit(name, index, value)

    def fill_edit(self, name: str, fill: str, scale: float = 1.0) -> Edit:
        """zeros, identity, scale (s·I) or file (back to the file's values)."""
        return FillEdit(name, fill, scale)

    @owning
    def apply(self, edit: Edit, *, keep_stale: bool = False, progress: Progress | None = None) -> Result:
        """Apply one edit and replay to the same step; autosaved beside the scenario."""
        try:
            weights = apply_edit(self.weights, edit, self.file_scenario.weights)
        except EditError as error:
            return Refused(Reason.BAD_EDIT, (str(error),))
        if np.array_equal(weights[edit.name], self.weights[edit.name]):
            return Refused(Reason.UNCHANGED, (edit.name,))
        previous = self.weights
        self.weight_history.push(weights, edit)
        return self._rebuild(Rebuilt(EditKind.EDITED, edit.name), progress, previous if keep_stale else None)

    @owning
    def restore(self, unsaved: Unsaved, progress: Progress | None = None) -> Result:
        """Apply the edits an earlier session left unsaved."""
        for edit in unsaved.edits:
            self.weight_history.push(apply_edit(self.weights, edit, self.file_scenario.weights), edit)
        return self._rebuild(Rebuilt(EditKind.RESTORED, count=len(unsaved.edits)), progress)

    def drop_unsaved(self) -> None:
        """Forget the autosaved edits (the user chose to quit without saving them)."""
        autosave.drop(self.file_scenario.path)

    def close(self) -> None:
        """Stop what runs; weights equal to the file leave no autosave behind."""
        self.cancel()
        if not self.unsaved():
            self.drop_unsaved()

    @owning
    def undo(self, progress: Progress | None = None) -> Result:
        if not self.weight_history.undo():
            return Refused(Reason.NOTHING_TO_UNDO)
        return self._rebuild(Rebuilt(EditKind.UNDONE), progress)

    @owning
    def redo(self, progress: Progress | None = None) -> Result:
        if not self.weight_history.redo():
            return Refused(Reason.NOTHING_TO_REDO)
        return self._rebuild(Rebuilt(EditKind.REDONE), progress)

    @owning
    def recompute(self, progress: Progress | None = None) -> Result:
        if self.stale is None:
            return Refused(Reason.NOT_STALE)
        return self._rebuild(Rebuilt(EditKind.RECOMPUTED), progress)

    def _rebuild(self, result: Rebuilt, progress: Progress | None, stale_weights: dict | None = None) -> Result:
        """A new session with the current weights, replayed to the same step (the caller owns the generator)."""
        state = self.history.current
        self.stale = None if stale_weights is None else StaleFrom(stale_weights, state.request, state.round)
        changed = self.weights is not self.file_scenario.weights or self.interventions.current
        previous = self.history if changed else None
        run = self._new_run(state.step, progress)
        self.previous = previous
        self._adopt(run)
        if self.unsaved():
            autosave.keep(self.file_scenario.path, self.file_fingerprint, self.weight_history.edits)
        else:  # back to the file's numbers (undo all, or R after 0): nothing to offer next time
            autosave.drop(self.file_scenario.path)
        return result

    # -- interventions on activations (the list: tinyllm_tui/debugger/interventions.py) -------------------
    def intervention_problem(self, text: str) -> str | None:
        """What is wrong with `text` as an intervention on this model (None: nothing seen before a run)."""
        try:
            check_intervention(parse_any(text), self.scenario.model, len(self.scenario.requests),
                               len(self.scenario.vocab))
        except InterventionError as error:
            return str(error)
        return None

    def _drop_intervention(self, error: InterventionError) -> Result:
        """The run stopped where `error.intervention` could not apply: it goes (a change of its own: undo puts
        it back, and a replay past that round drops it again), and the session is rebuilt to the last step reached."""
        self.interventions.remove(self.interventions.current.index(error.intervention))
        self._rebuild(None, None)
        return Refused(Reason.BAD_QUERY, (str(error),))

    @owning
    def intervene(self, text: str, progress: Progress | None = None) -> Result:
        """Add one intervention (`--patch`/`--ablate` text) and replay to the same step; a bad one is refused."""
        try:
            operators = {(s.name, s.head) for s in self.history.round_states()}
            intervention = self.interventions.add(text, self.scenario, operators)
        except InterventionError as error:
            return Refused(Reason.BAD_QUERY, (str(error),))
        try:
            self._rebuild(None, progress)
            self.history.round_states()  # this round to its end: an operator that refuses it does so now
        except InterventionError as error:  # a row of the wrong width, a request with no such pass, …
            self.interventions.discard()
            self._rebuild(None, progress)
            return Refused(Reason.BAD_QUERY, (str(error),))
        return self._intervened(Change.ADDED, intervention.text)

    @owning
    def undo_intervention(self, progress: Progress | None = None) -> Result:
        if not self.interventions.undo():
            return Refused(Reason.NOTHING_TO_UNDO)
        self._rebuild(None, progress)
        return self._intervened(Change.UNDONE)

    @owning
    def redo_intervention(self, progress: Progress | None = None) -> Result:
        if not self.interventions.redo():
            return Refused(Reason.NOTHING_TO_REDO)
        self._rebuild(None, progress)
        return self._intervened(Change.REDONE)

    def _intervened(self, change: Change, text: str = "") -> Intervened:
        """With the round's choice before → after, once the round has chosen: its token's text and probability."""
        change_ = choice_before_after(self.history.round_states(), self.previous)
        tokens = self.scenario.vocab.tokens
        choice = None if change_ is None else tuple((tokens[token], p) for token, p in change_)
        return Intervened(change, text, choice)

    def save_interventions(self, path: str | Path | None = None) -> Result:
        """Write the current interventions into the scenario file's `interventions:` (a checkpoint opened
        directly has no file for them: name a YAML that states `checkpoint:`)."""
        if path is None and self.file_scenario.document is None:
            return Refused(Reason.NOTHING_TO_SAVE)
        target = path or self.file_scenario.path
        save_interventions(target, self.interventions.current)
        return Saved(str(target))

    def unsaved(self) -> int:
        """How many numbers differ from the file; counted once per pair of weight sets (a GPT-2-sized
        model has 124 M numbers)."""
        saved = self.file_scenario.weights
        key = (id(self.weights), id(saved))
        if self._unsaved[0] != key:
            count = sum(int(np.sum(self.weights[name] != saved[name])) for name in changed_names(self.weights, saved))
            self._unsaved = (key, count)
        return self._unsaved[1]

    @owning
    def save(self, path: str | Path | None = None) -> Result:
        """Write the edited weights (atomically); raises OSError with the file untouched."""
        written = save(self.file_scenario, self.weights, path)
        autosave.drop(self.file_scenario.path)
        self.file_scenario = load_scenario(written)
        self.file_fingerprint = self.file_scenario.fingerprint
        self.weight_history = WeightHistory(self.file_scenario.weights)  # edits are relative to the file now
        self._publish()
        return Saved(str(written))

    def before(self, state: OpState) -> np.ndarray | None:
        """`state`'s values before the last edit, when that run had the same operator there."""
        earlier = self._earlier(state)
        return None if earlier is None else to_host(earlier.values)

    def _earlier(self, state: OpState) -> OpState | None:
        """`state`'s operator in the run before the last edit (None: that run had another there)."""
        earlier = None if self.previous is None else self.previous.state_at(state.step)
        same = earlier is not None and earlier.name == state.name and earlier.values.shape == state.values.shape
        return earlier if same else None

    def readers(self, name: str) -> list[str]:
        """The operators of the current round that read parameter `name`."""
        return list(dict.fromkeys(s.name for s in self.view.round_states
                                  if any(o.name.removesuffix(".T") == name for o in s.inputs)))

    def weight_frame(self, name: str) -> MatrixFrame:
        """Parameter `name` as the weights browser shows it: rows are input features, columns output
        features (the vocabulary where it is an axis); cells that differ from the file are marked. A
        parameter never edited is not compared with the file (a 0.5B embedding is 136M cells)."""
        array = np.atleast_2d(self.weights[name])
        edited = name in changed_names(self.weights, self.file_scenario.weights)
        original = np.atleast_2d(self.file_scenario.weights[name]) if edited else None
        label = self.scenario.vocab.label

        def axis(index: int, prefix: str) -> Labels:
            if {"embed": 0, "unembed": 1}.get(name) == index:
                return Labels(array.shape[index], label)
            return Labels(array.shape[index], lambda i: f"{prefix} {i}")

        rows = axis(0, "in") if self.weights[name].ndim == 2 else Labels(1, lambda i: "value")
        cols = axis(1, "out") if self.weights[name].ndim == 2 else Labels(array.shape[1], str)
        return matrix_frame(name, array, rows, cols, before=original)

    # -- comparisons (each on sessions of its own: safe in a worker) -------------------------------------
    def _cancellable(self, states: Iterator[OpState]) -> Iterator[OpState]:
        for state in states:
            time.sleep(0)  # as in run_until: keys stay quick
            if self._cancel_comparisons.is_set():
                raise DiffCancelled("cancelled")
            yield state

    @contextmanager
    def _comparison(self) -> Iterator[None]:
        """A comparison in flight, counted (under a lock: several may run) so that `cancel()` reaches it."""
        with self._counting:
            if self._comparing == 0:
                self._cancel_comparisons.clear()
            self._comparing += 1
        try:
            yield
        finally:
            with self._counting:
                self._comparing -= 1

    def diff(self, alone: bool = False) -> list[OpDiff]:
        """The run being debugged (fault and stale cache included) against a full recompute, or (`alone`)
        its requests as one batch against each request run alone.

        Raises DiffCancelled when `cancel()` is called meanwhile."""
        scenario = replace(self.scenario, batch=True) if alone else self.scenario
        cached = Session(scenario, self.backend, inject=self.inject, stale=self.stale)
        reference = alone_session(scenario, self.backend) if alone else Session(scenario, self.backend, mode="full")
        with self._comparison():
            return diff_sessions(cached, reference, self._cancellable)

    def compare(self) -> DiffReport:
        """`diff()` with where it first diverges (raises DiffCancelled as diff does)."""
        inject = self.inject
        diffs = self.diff()
        first = first_divergence(diffs)
        return DiffReport(tuple(diffs), None if first is None else diffs.index(first), inject,
                          diffs[0].tolerance if diffs else TOLERANCE)

    def compare_against(self) -> Report | None:
        """The run being debugged (fault and stale cache included) against the --against dump over every
        pass; kept (and shown) unless an edit has outrun it. Raises DiffCancelled when `cancel()` is called."""
        if self.against is None:
            return None
        scenario = self.scenario
        session = Session(scenario, self.backend, inject=self.inject, stale=self.stale)
        try:
            with self._comparison():
                report = self.against.meet(self._cancellable(session.steps()))
        except InterventionError:  # as for the expect: tables
            return None
        if scenario is self.scenario:
            self.divergences = report
            self._republish()
        return report

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
            return Diverged(None, "")
        self._goto(first.step)
        return Diverged(first.step, first.place_text(len(self.scenario.requests)), first.values_text())

    def check_expectations(self, scenario: Scenario) -> list[Outcome]:
        try:
            return check_scenario(scenario, self.backend) if scenario.expect else []
        except InterventionError:  # one that cannot run to the end: the move that reaches it says why and drops it
            return []

    def accept_outcomes(self, scenario: Scenario, outcomes: list[Outcome]) -> bool:
        """Keep the outcomes unless an edit has outran them; the frame shows them at once, or after the
        run in flight (which publishes when it stops)."""
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
                self._publish(ahead=not self.round_pending)
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

    # -- passes for the CLI --
    def trace(self) -> Iterator[tuple[OpState, tuple[str, ...]]]:
        """Every operator from the cursor to the end of the trace, with the breakpoints that hit each (`hits`:
        where a continue stops): `tinyllm-tui run`'s pass. The cursor stays where it is; the generator is
        owned, as by a continue, until the trace ends or the caller stops reading."""
        if not self._owner.acquire(blocking=False):
            raise Busy("a run is in flight")
        try:
            for state in self.history.states_from(self.history.cursor):
                yield state, tuple(self.hits(state))
        finally:
            self._owner.release()
