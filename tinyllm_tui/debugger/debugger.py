"""A session of debugging, headless: cursor and history, breakpoints, runs, search, edits, fault, verdicts.

The TUI and the CLI drive a `Debugger`; it never imports textual, rich or typer.
Exactly one thread owns the engine's generator at a time: every method that pulls
the stream takes `_owner` (a run in a worker holds it until it stops), and a call
made meanwhile raises `Busy` with a message instead of touching the generator.
Views read `view`, an immutable snapshot taken after every move.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import Backend, OpState, Scenario, Session, load_scenario, make_backend, to_host
from engine.breakpoints import Breakpoint, BreakpointError, name_matches, parse_breakpoint
from engine.compare.check import check_scenario
from engine.compare.against import Against, Report, Tolerance, disagreement
from engine.compare.dump import Dump
from engine.compare.diff import OpDiff, diff_sessions
from engine.compare.diff import alone as alone_session
from tinyllm_tui.debugger import autosave
from tinyllm_tui.debugger.autosave import Unsaved
from engine.lazy_weights import changed_names
from engine.loading.edits import Edit, WeightHistory, apply_edit, save, with_weights
from engine.compare.expect import Cell, Outcome
from tinyllm_tui.debugger.batch import batch_group
from tinyllm_tui.debugger.history import DEFAULT_BUDGET, History, RoundSummary
from engine.faults import FAULTS
from engine.session import INJECTIONS, StaleFrom
from tinyllm_tui.presentation.summaries import request_results

PROGRESS_EVERY = 200  # steps between progress reports of a long run
BUSY = "busy: a run is in flight (Esc or ctrl+c cancels it)"


class Busy(RuntimeError):
    """Another thread owns the session's generator (a run is in flight)."""


DIVERGED = "diverged"  # what `g` takes to go to the first divergence from the --against dump


class SearchError(ValueError):
    """A go-to or search text that names nothing."""


class Cancelled(RuntimeError):
    """A comparison was cancelled before it finished."""


@dataclass(frozen=True)
class View:
    """What the views show after a move: the current operator and its surroundings."""

    state: OpState
    round_states: tuple[OpState, ...]  # every operator of the current round
    rounds: tuple[RoundSummary, ...]  # the current request's finished rounds (A.9)
    breaks: frozenset[int]  # steps of `round_states` where a breakpoint hits
    total: int | None  # number of steps, once the trace has been run to its end
    at_end: bool
    batch: tuple[OpState, ...] = ()  # the operator for every row of a batch (debugger.batch), in row order


Progress = Callable[[int], None]


def matcher(text: str) -> Callable[[OpState], bool]:
    """What `g`/`G` look for: anything a breakpoint accepts (glob, kind, field=value, …), or a short
    name as the operator list shows it (`attn.q`, `attn.pattern h1`, `attn.*`) or its first parts
    (`unembed` finds `unembed.out`, `attn.pattern` head 0's pattern)."""
    try:
        return parse_breakpoint(text).hits  # its name globs are name_matches already
    except BreakpointError:  # a bare word such as `unembed`, which a breakpoint refuses as a likely typo
        return lambda state: name_matches(state, text)


class DumpCells(Mapping):
    """The cells of a dumped activation as expectations: each must agree within `tolerance`."""

    def __init__(self, values: np.ndarray, tolerance: Tolerance):
        self._values, self._tolerance = values, tolerance
        self.label = f"your activations: {{}} cells within {tolerance.describe()} (✓ ✗)"

    def __getitem__(self, cell: tuple[int, int]) -> Cell:
        i, j = cell
        value = float(self._values[i, j])
        bound = self._tolerance.atol + self._tolerance.rtol * (abs(value) if math.isfinite(value) else 0.0)
        return Cell(i, j, "", "", value, math.nan, bound)

    def __iter__(self):
        return iter(np.ndindex(*self._values.shape))

    def __len__(self) -> int:
        return self._values.size

    def __contains__(self, cell: object) -> bool:
        i, j = cell
        return 0 <= i < self._values.shape[0] and 0 <= j < self._values.shape[1]

    def agreeing(self, shown: np.ndarray) -> int:
        """How many cells `shown` agrees with (counted at once: a dump has every cell of a big matrix)."""
        return int(np.sum(~disagreement(np.asarray(shown, dtype=np.float64), self._values, self._tolerance)[1]))


class Debugger:
    def __init__(self, scenario: Scenario, backend: Backend | None = None, *, breakpoints: list[str] = (),
                 inject: str | None = None, edits: list[Edit] = (), budget: int = DEFAULT_BUDGET,
                 against: tuple[Dump, float | None, float | None] | None = None):
        """Args:
        scenario: as read from its file; `edits` (from --set) start as unsaved edits on top.
        budget: bytes of operator outputs the history keeps for stepping back.
        against: a dump of the user's own activations and the tolerance (--tolerance, --rtol; None: the
            dtype's default) they must meet; every pass the dump holds is judged cell by cell against it.
        """
        self.against = None if against is None else Against(against[0], scenario, *against[1:])
        self.file_scenario = scenario
        self.file_fingerprint = scenario.fingerprint
        self.backend = backend or make_backend()
        self.weight_history = WeightHistory(scenario.weights)
        for edit in edits:
            self.weight_history.push(apply_edit(self.weight_history.current, edit), edit)
        self.found_unsaved = autosave.find(scenario.path, self.file_fingerprint, scenario.weights)
        self.breakpoints: tuple[Breakpoint, ...] = ()  # replaced, never mutated: a run reads it meanwhile
        for text in breakpoints:
            self.add_breakpoint(text)
        self.budget = budget
        self.stale: StaleFrom | None = None
        self.previous: History | None = None  # the run before the last edit, to show changed cells
        self._owner = threading.Lock()
        self._cancel = threading.Event()  # stops a run that owns the generator
        self._cancel_comparisons = threading.Event()  # stops a diff, which runs sessions of its own
        self._comparing = 0
        self._unsaved: tuple[tuple[int, int] | None, int] = (None, 0)
        self.inject = inject
        self._restart()

    # -- ownership -------------------------------------------------------------------------
    @contextmanager
    def _owned(self) -> Iterator[None]:
        if not self._owner.acquire(blocking=False):
            raise Busy(BUSY)
        try:
            yield
        finally:
            self._owner.release()

    @property
    def busy(self) -> bool:
        return self._owner.locked()

    def cancel(self) -> bool:
        """Ask a run or a comparison in flight to stop at its next step; False if none runs."""
        running = self.busy or self._comparing > 0
        if running:
            self._cancel.set()
            self._cancel_comparisons.set()
        return running

    def _cancellable(self, states: Iterator[OpState]) -> Iterator[OpState]:
        for state in states:
            time.sleep(0)  # as in run_until: keys stay quick
            if self._cancel_comparisons.is_set():
                raise Cancelled("cancelled")
            yield state

    @contextmanager
    def _comparison(self) -> Iterator[None]:
        if self._comparing == 0:
            self._cancel_comparisons.clear()
        self._comparing += 1
        try:
            yield
        finally:
            self._comparing -= 1

    # -- session -----------------------------------------------------------------------------
    @property
    def weights(self) -> dict[str, np.ndarray]:
        return self.weight_history.current

    def _restart(self, step: int = 0, progress: Progress | None = None) -> None:
        """A fresh session with the current weights and fault, replayed to `step` (a cancel stops it earlier)."""
        self.scenario = with_weights(self.file_scenario, self.weights)
        self.fingerprint = self.scenario.fingerprint  # what a cache row computed with these weights carries
        self.outcomes: tuple[Outcome, ...] | None = None  # None until the expect: tables are checked
        self.divergences: Report | None = None  # None until the run is compared with the --against dump
        self.session = Session(self.scenario, self.backend, inject=self.inject, stale=self.stale)
        self.history = History(self.session.steps, budget=self.budget)
        self._cancel.clear()
        while self.history.cursor < step and not self._cancel.is_set() and self.history.forward():
            time.sleep(0)  # as in run_until: keys stay quick
            if progress is not None and self.history.cursor % PROGRESS_EVERY == 0:
                progress(self.history.cursor)
        self._snapshot()

    def _snapshot(self) -> None:
        history = self.history
        state = history.current
        round_states = tuple(history.round_states())
        breaks = frozenset(s.step for s in round_states if self.hits(s))
        rounds = tuple(history.finished_rounds(state.request))
        batch = batch_group(history.state_at, state)
        self.view = View(state, round_states, rounds, breaks, history.total, history.at_end, batch)

    def hits(self, state: OpState) -> list[str]:
        return [b.text for b in self.breakpoints if b.hits(state)]

    # -- moving ------------------------------------------------------------------------------
    def step(self) -> str:
        with self._owned():
            moved = self.history.forward()
            self._snapshot()
        return "" if moved else self.end_message()

    def back(self) -> str:
        with self._owned():
            moved = self.history.back()
            self._snapshot()
        return "" if moved else "already at the first step"

    def goto_step(self, step: int) -> str:
        with self._owned():
            start = self.history.cursor
            if not self.history.goto(step):
                self.history.goto(start)
                raise SearchError(f"no step {step}: the trace has steps 0–{self.history.last_recorded}")
            self._snapshot()
        return f"went to step {step}"

    def run_until(self, stop: Callable[[OpState], bool], progress: Progress | None = None) -> str:
        """Step forward until `stop(state)`, the end, or a cancel; returns what happened."""
        with self._owned():
            self._cancel.clear()
            history, stopped = self.history, ""
            while not stopped and history.forward():
                time.sleep(0)  # hand the interpreter to the UI thread now and then: keys stay quick
                if stop(history.current):
                    stopped = "hit"
                elif self._cancel.is_set():
                    stopped = "cancelled"
                elif progress is not None and history.cursor % PROGRESS_EVERY == 0:
                    progress(history.cursor)
            self._snapshot()
        if stopped == "cancelled":
            return f"cancelled at step {self.view.state.step}"
        return stopped or self.end_message()

    def continue_(self, progress: Progress | None = None) -> str:
        hit: list[str] = []  # the breakpoints that stopped the run (they may be removed meanwhile)

        def stop(state: OpState) -> bool:
            hit[:] = self.hits(state)
            return bool(hit)

        result = self.run_until(stop, progress)
        return f"⚑ breakpoint: {', '.join(hit)}" if result == "hit" else result

    def play_step(self) -> str | None:
        """One step of play; a message when play must stop (a breakpoint or the end)."""
        message = self.step()
        if message:
            return message
        hits = self.hits(self.view.state)
        return f"⚑ breakpoint: {', '.join(hits)}" if hits else None

    def search(self, text: str, backward: bool = False, *, progress: Progress | None = None) -> str:
        """Go to a step number, or to the next (previous) operator matching `text`, wrapping around."""
        text = text.strip()
        if not text:
            raise SearchError("type a step number or an operator name, kind or condition")
        if text.isdigit():
            return self.goto_step(int(text))
        if text == DIVERGED:
            return self.goto_divergence()
        wanted = matcher(text)
        with self._owned():
            self._cancel.clear()
            start = self.history.cursor
            after, before = (start + 1, None), (0, start)
            found = self._scan(*(before if backward else after), wanted, backward, progress)
            wrapped = found is None and not self._cancel.is_set()
            if wrapped:
                found = self._scan(*(after if backward else before), wanted, backward, progress)
            self.history.goto(start if found is None else found)
            self._snapshot()
        if self._cancel.is_set():
            return "search cancelled"
        if found is None:
            raise SearchError(f"no operator matches {text!r}")
        return f"went to {text}" + (" (wrapped around)" if wrapped else "")

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

    def end_message(self) -> str:
        return "end of trace · " + request_results(self.session.results, self.scenario.vocab)

    # -- breakpoints ---------------------------------------------------------------------------
    def add_breakpoint(self, text: str) -> str:
        """Raises BreakpointError for a text that cannot be understood."""
        breakpoint = parse_breakpoint(text.strip())
        if any(b.text == breakpoint.text for b in self.breakpoints):
            return f"breakpoint {breakpoint.text} is already set"
        self.breakpoints = (*self.breakpoints, breakpoint)
        self._refresh_breaks()
        return f"breakpoint on {breakpoint.text}"

    def remove_breakpoint(self, text: str) -> str:
        kept = tuple(b for b in self.breakpoints if b.text != text)
        if len(kept) == len(self.breakpoints):
            return f"no breakpoint {text}"
        self.breakpoints = kept
        self._refresh_breaks()
        return f"removed breakpoint {text}"

    def toggle_breakpoint(self, name: str) -> str:
        if any(b.text == name for b in self.breakpoints):
            return self.remove_breakpoint(name)
        return self.add_breakpoint(name)

    def clear_breakpoints(self) -> str:
        count, self.breakpoints = len(self.breakpoints), ()
        self._refresh_breaks()
        return f"removed {count} breakpoint{'' if count == 1 else 's'}"

    def _refresh_breaks(self) -> None:
        """The marks in the operator list follow the breakpoints (the view is otherwise unchanged)."""
        view = getattr(self, "view", None)
        if view is not None:
            breaks = frozenset(s.step for s in view.round_states if self.hits(s))
            self.view = View(view.state, view.round_states, view.rounds, breaks, view.total, view.at_end, view.batch)

    # -- the injected fault ----------------------------------------------------------------------
    def cycle_injection(self, progress: Progress | None = None) -> str:
        """Switch to the next deliberate bug (or none) and replay to the same step.

        A bug that cannot run on this model (layer 1's cache in a one-layer model, positions past a
        learned table) is skipped."""
        names = [None, *(name for name, fault in FAULTS.items() if not fault.cannot_run(self.scenario))]
        with self._owned():
            self.inject = names[(names.index(self.inject) + 1) % len(names)]
            self._restart(self.history.cursor, progress)
        return f"now: {INJECTIONS[self.inject]}" if self.inject else "no injected bug"

    # -- weight edits ------------------------------------------------------------------------------
    def edit_asks_about_the_cache(self) -> bool:
        """An edit made while decoding may keep the stale cache (to see what it breaks) or recompute."""
        return self.view.state.phase == "decode"

    def apply(self, edit: Edit, *, keep_stale: bool = False, progress: Progress | None = None) -> str:
        """Apply one edit (raises EditError) and replay to the same step; autosaved beside the scenario."""
        with self._owned():
            weights = apply_edit(self.weights, edit, self.file_scenario.weights)
            if np.array_equal(weights[edit.name], self.weights[edit.name]):
                return f"{edit.name} unchanged"
            previous = self.weights
            self.weight_history.push(weights, edit)
            return self._rebuild(f"edited {edit.name}", progress, previous if keep_stale else None)

    def restore(self, unsaved: Unsaved, progress: Progress | None = None) -> str:
        """Apply the edits an earlier session left unsaved."""
        with self._owned():
            for edit in unsaved.edits:
                self.weight_history.push(apply_edit(self.weights, edit, self.file_scenario.weights), edit)
            count = len(unsaved.edits)
            return self._rebuild(f"restored {count} unsaved edit{'s' if count != 1 else ''}", progress)

    def drop_unsaved(self) -> None:
        """Forget the autosaved edits (the user chose to quit without saving them)."""
        autosave.drop(self.file_scenario.path)

    def undo(self, progress: Progress | None = None) -> str:
        with self._owned():
            return self._rebuild("undid the last edit", progress) if self.weight_history.undo() else "nothing to undo"

    def redo(self, progress: Progress | None = None) -> str:
        with self._owned():
            return self._rebuild("redid the edit", progress) if self.weight_history.redo() else "nothing to redo"

    def recompute(self, progress: Progress | None = None) -> str:
        with self._owned():
            if self.stale is None:
                return "the cache is not stale"
            return self._rebuild("recomputed the cache with the current weights", progress)

    def _rebuild(self, message: str, progress: Progress | None, stale_weights: dict | None = None) -> str:
        """A new session with the current weights, replayed to the same step (the caller owns the generator)."""
        state = self.history.current
        self.stale = None if stale_weights is None else StaleFrom(stale_weights, state.request, state.round)
        self.previous = self.history if self.weights is not self.file_scenario.weights else None
        self._restart(state.step, progress)
        autosave.keep(self.file_scenario.path, self.file_fingerprint, self.weight_history.edits)
        return message

    def unsaved(self) -> int:
        """How many numbers differ from the file; counted once per pair of weight sets (the status
        line asks after every step, and a GPT-2-sized model has 124 M numbers)."""
        saved = self.file_scenario.weights
        key = (id(self.weights), id(saved))
        if self._unsaved[0] != key:
            count = sum(int(np.sum(self.weights[name] != saved[name])) for name in changed_names(self.weights, saved))
            self._unsaved = (key, count)
        return self._unsaved[1]

    def save(self, path: str | Path | None = None) -> str:
        """Write the edited weights (atomically); raises OSError with the file untouched."""
        written = save(self.file_scenario, self.weights, path)
        autosave.drop(self.file_scenario.path)
        self.file_scenario = load_scenario(written)
        self.file_fingerprint = self.file_scenario.fingerprint
        self.weight_history = WeightHistory(self.file_scenario.weights)  # edits are relative to the file now
        return f"saved to {written}"

    def before(self, state: OpState) -> np.ndarray | None:
        """`state`'s values before the last edit, when that run had the same operator there."""
        if self.previous is None or self.previous.state_at(state.step) is None:
            return None
        earlier = self.previous.state_at(state.step)
        same = earlier.name == state.name and earlier.values.shape == state.values.shape
        return to_host(earlier.values) if same else None

    def readers(self, name: str) -> list[str]:
        """The operators of the current round that read parameter `name`."""
        return list(dict.fromkeys(s.name for s in self.view.round_states
                                  if any(o.name.removesuffix(".T") == name for o in s.inputs)))

    # -- comparisons (each on sessions of its own: safe in a worker) ---------------------------------
    def diff(self, alone: bool = False) -> list[OpDiff]:
        """The run being debugged (fault and stale cache included) against a full recompute, or (`alone`)
        its requests as one batch against each request run alone.

        Raises Cancelled when `cancel()` is called meanwhile."""
        scenario = dataclasses.replace(self.scenario, batch=True) if alone else self.scenario
        cached = Session(scenario, self.backend, inject=self.inject, stale=self.stale)
        reference = alone_session(scenario, self.backend) if alone else Session(scenario, self.backend, mode="full")
        with self._comparison():
            return diff_sessions(cached, reference, self._cancellable)

    def compare_against(self) -> Report | None:
        """The run being debugged (fault and stale cache included) against the --against dump over every
        pass; kept unless an edit has outrun it. Raises Cancelled when `cancel()` is called meanwhile."""
        if self.against is None:
            return None
        scenario = self.scenario
        session = Session(scenario, self.backend, inject=self.inject, stale=self.stale)
        with self._comparison():
            report = self.against.meet(self._cancellable(session.steps()))
        if scenario is self.scenario:
            self.divergences = report
        return report

    def round_verdicts(self) -> dict[tuple[int, int], bool]:
        """(request, round) -> whether your activations agree in every operator of that round."""
        return {} if self.divergences is None else self.divergences.round_verdicts()

    def differing_cache_rows(self, state: OpState, layer: int) -> frozenset[int]:
        """Positions of `layer`'s cache at `state` whose K or V row differs from your dumped cache."""
        if self.against is None or not state.caches:
            return frozenset()
        return self.against.differing_cache_rows(state, min(layer, len(state.caches) - 1))

    def goto_divergence(self) -> str:
        """`g diverged`: to the first operator (or cache) where your activations leave the reference."""
        if self.against is None:
            raise SearchError("no activations to compare: open with --against DUMP")
        report = self.divergences or self.compare_against()
        first = report.first_divergence
        if first is None:
            return "your activations agree everywhere"
        self.goto_step(first.step)
        return f"first divergence: {first.cell_text(len(self.scenario.requests))}"

    def check_expectations(self, scenario: Scenario) -> list[Outcome]:
        return check_scenario(scenario, self.backend) if scenario.expect else []

    def accept_outcomes(self, scenario: Scenario, outcomes: list[Outcome]) -> bool:
        """Keep the outcomes unless an edit has outrun them."""
        if scenario is not self.scenario:
            return False
        self.outcomes = tuple(outcomes)
        return True

    def verdicts(self, state: OpState) -> Mapping[tuple[int, int], Cell]:
        """(row, col) of `state`'s matrix -> the cell it must agree with: a dump's, or an expect: table's."""
        if self.against is not None:
            key = self.against.passes.key(state)
            aligned = self.against.aligned(key, state.head, tuple(state.values.shape))
            if aligned is not None:
                return DumpCells(aligned, self.against.tolerance(key))
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
