"""The step debugger: a Textual app over a History of a session's operators."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header, OptionList, Static, TabbedContent, TabPane

from engine import Backend, OpState, Scenario, Session, make_backend
from engine.breakpoints import Breakpoint, BreakpointError, parse_breakpoint
from engine.check import check_scenario
from engine.diff import OpDiff, diff_runs
from engine.edits import CellEdit, WeightHistory, apply_edit, with_weights
from engine.history import History, round_summaries
from engine.session import INJECTIONS, StaleFrom

from .editing import WeightEditing
from .explanations import default_language
from .widgets.dialogs import HelpScreen, PromptScreen
from .widgets.diffview import DiffScreen
from .widgets.matrix import MatrixView
from .widgets.operators import OperatorList, short_name
from .widgets.panels import CachePanel, ExpectPanel, ExplanationPanel, InputsPanel
from .widgets.timeline import Timeline



class DebuggerApp(WeightEditing, App):
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "tinyllm-tui"
    ENABLE_COMMAND_PALETTE = False
    play_interval = 0.3  # seconds between steps while playing
    BINDINGS = [
        Binding("n,right,f10", "step", "Step"),
        Binding("left", "back", "Back"),
        Binding("c,f5", "continue", "Continue"),
        Binding("b,f9", "toggle_breakpoint", "Break"),
        Binding("B", "add_breakpoint", "Break on…", show=False),
        Binding("space", "play", "Play"),
        Binding("g", "goto", "Go to"),
        Binding("d", "diff", "Diff"),
        Binding("I", "cycle_injection", "Inject bug", show=False),
        Binding("i", "panel('inputs')", "Inputs", show=False),
        Binding("k", "panel('cache')", "KV cache", show=False),
        Binding("x", "panel('explain')", "Explain", show=False),
        Binding("a", "panel('expect')", "Expectations", show=False),
        Binding("w", "weights", "Weights"),
        Binding("u", "undo", "Undo edit", show=False),
        Binding("ctrl+r", "redo", "Redo edit", show=False),
        Binding("v", "before_after", "Before/after edit", show=False),
        Binding("r", "recompute", "Recompute stale cache", show=False),
        Binding("ctrl+s", "save", "Save weights", show=False),
        Binding("S", "save_as", "Save as…", show=False),
        Binding("h", "heat", "Heat", show=False),
        Binding("less_than_sign", "columns(-1)", "Columns ←", show=False),
        Binding("greater_than_sign", "columns(1)", "Columns →", show=False),
        Binding("question_mark,f1", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, scenario: Scenario, backend: Backend | None = None, *, lang: str | None = None,
                 breakpoints: list[str] = (), inject: str | None = None, edits: list[CellEdit] = ()):
        """Args:
        scenario: as read from its file; `edits` (from --set) start as unsaved edits on top.
        """
        super().__init__()
        self.file_scenario = self.scenario = scenario
        self.weight_history = WeightHistory(scenario.weights)
        for edit in edits:
            self.weight_history.push(apply_edit(self.weight_history.current, edit))
        self.scenario = with_weights(scenario, self.weight_history.current)
        self.backend = backend or make_backend()
        self.lang = lang or default_language()
        self.breakpoints: list[Breakpoint] = [parse_breakpoint(text) for text in breakpoints]
        self.title, self.sub_title = scenario.title, Path(scenario.path).name
        self.busy = False
        self.player = None
        self.outcomes = []  # expect: results, filled in by a worker
        self.stale: StaleFrom | None = None
        self.previous: History | None = None  # the run before the last edit, to mark changed cells
        self.show_before = False
        self._start_session(inject)

    def _start_session(self, inject: str | None) -> None:
        self.inject = inject
        self.session = Session(self.scenario, self.backend, inject=inject, stale=self.stale)
        self.history = History(self.session.steps)

    def _start_checks(self) -> None:
        self.outcomes = []
        if self.scenario.expect:
            self._check_expectations(self.scenario)

    @work(thread=True, exclusive=True, group="expect")
    def _check_expectations(self, scenario: Scenario) -> None:
        """Off the UI thread: the first screen need not wait for a second (and a full) run."""
        outcomes = check_scenario(scenario, self.backend)
        self.call_from_thread(self._expectations_ready, scenario, outcomes)

    def _expectations_ready(self, scenario: Scenario, outcomes) -> None:
        if scenario is self.scenario:  # not outrun by a later edit
            self.outcomes = outcomes
            self.show_matrix()
            self.show_panel()

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="")
        yield Static(id="status")
        yield Timeline(id="timeline")
        with Horizontal(id="body"):
            yield OperatorList(id="operators")
            with Vertical(id="right"):
                yield MatrixView(id="matrix")
                with TabbedContent(initial="explain", id="panels"):
                    with TabPane("Explain", id="explain"):
                        yield ExplanationPanel()
                    with TabPane("KV cache", id="cache"):
                        yield CachePanel()
                    with TabPane("Inputs", id="inputs"):
                        yield InputsPanel()
                    with TabPane("Expect", id="expect"):
                        yield ExpectPanel()
        yield Footer()

    def on_mount(self) -> None:
        self._start_checks()
        self.show_current("start · n/→ step · c continue · ? help")

    # -- display ---------------------------------------------------------------------
    def show_current(self, message: str = "") -> None:
        state = self.history.current
        round_states = self.history.round_states()
        breaks = {s.step for s in round_states if self.hit(s)}
        self.query_one(OperatorList).show(round_states, state.step, breaks)
        rounds = round_summaries(self.history.finished_rounds(), state.request)
        self.query_one(Timeline).show(state, self.scenario, rounds)
        self.show_matrix()
        self.show_panel()
        self.set_status(message)

    def show_matrix(self) -> None:
        state = self.history.current
        self.query_one(MatrixView).show(state.output, title=self._title(state), kind=state.kind,
                                        before=self._before(state), show_before=self.show_before,
                                        verdicts=self._verdicts(state))

    def show_panel(self) -> None:
        """Only the visible lower panel is rendered; the others catch up when shown."""
        state = self.history.current
        active = self.query_one(TabbedContent).active
        if active == "explain":
            self.query_one(ExplanationPanel).show(state, self.lang)
        elif active == "cache":
            self.query_one(CachePanel).show(state, self.scenario.model.d_head)
        elif active == "inputs":
            self.query_one(InputsPanel).show(state)
        else:
            self.query_one(ExpectPanel).show(self.outcomes)

    def _verdicts(self, state: OpState) -> dict[tuple[int, int], bool]:
        """(row, col) of the current matrix -> whether the text's printed number agrees."""
        key = (state.request, state.round, state.name, state.head)
        rows = {position: i for i, position in enumerate(state.positions)}
        return {(rows[cell.position], cell.col): cell.agrees
                for outcome in self.outcomes
                if outcome.expectation.key == key and outcome.expectation.run == "cached"
                for cell in outcome.cells if cell.position in rows}

    def on_tabbed_content_tab_activated(self) -> None:
        self.show_panel()

    def set_status(self, message: str = "") -> None:
        """Step, then warnings (they must survive a narrow terminal), then the rest."""
        state = self.history.current
        last = self.history.total - 1 if self.history.total is not None else "?"
        status = Text(f"step {state.step}/{last}")
        if self.inject:
            status.append(f" · ⚠ injected bug: {self.inject}", style="bold yellow")
        if self.stale is not None:
            status.append(" · ⚠ stale cache (r: recompute)", style="bold yellow")
        unsaved = self._unsaved()
        if unsaved:
            status.append(f" · {unsaved} unsaved edit{'s' if unsaved != 1 else ''}", style="bold")
        count = len(self.breakpoints)
        parts = [f"{count} breakpoint{'' if count == 1 else 's'}"]
        if self.player is not None:
            parts.append("▶ playing")
        if message:
            parts.append(message)
        status.append(" · " + " · ".join(parts))
        self.query_one("#status", Static).update(status, layout=False)  # always one line

    def _title(self, state: OpState) -> str:
        head = "" if state.head is None else f" · head {state.head}"
        where = state.phase if state.phase == "prefill" else f"decode {state.round}"
        return f"{state.name}{head} · req {state.request} {where}"

    def hit(self, state: OpState) -> list[str]:
        return [b.text for b in self.breakpoints if b.hits(state)]

    # -- stepping ----------------------------------------------------------------------
    def action_step(self) -> None:
        if self._refuse_while_busy():
            return
        if self.history.forward():
            self.show_current()
        else:
            self.show_current(self._end_message())

    def action_back(self) -> None:
        if self._refuse_while_busy():
            return
        self.show_current("" if self.history.back() else "already at the first step")

    def action_continue(self) -> None:
        self._in_background("running…", self._run_to_breakpoint)

    def _in_background(self, message: str, worker) -> None:
        """Start a thread worker with the UI marked busy; the worker's report clears `busy`."""
        if self._refuse_while_busy():
            return
        self.busy = True
        self.set_status(message)
        worker()

    @work(thread=True, exclusive=True)
    def _run_to_breakpoint(self) -> None:
        hits: list[str] = []
        while not hits and self.history.forward():
            hits = self.hit(self.history.current)
            if self.history.cursor % 500 == 0:
                self.call_from_thread(self.set_status, f"running… step {self.history.cursor}")
        self.call_from_thread(self._stopped, hits)

    def _stopped(self, hits: list[str]) -> None:
        self.busy = False
        self.show_current(f"⚑ breakpoint: {', '.join(hits)}" if hits else self._end_message())

    def _end_message(self) -> str:
        results = [f"request {i} generated {list(r.generated)} ({r.stop})" for i, r in enumerate(self.session.results)]
        return "end of trace · " + "; ".join(results)

    def _refuse_while_busy(self) -> bool:
        if self.busy:
            self.set_status("busy: still running to the next breakpoint")
        return self.busy

    def action_play(self) -> None:
        if self.player is not None:
            self.player.stop()
            self.player = None
            self.set_status("paused")
            return
        self.player = self.set_interval(self.play_interval, self._play_tick)
        self.set_status()

    def _play_tick(self) -> None:
        if self.busy:
            return
        moved = self.history.forward()
        hits = self.hit(self.history.current) if moved else []
        if moved and not hits:
            self.show_current()
            return
        self.player.stop()
        self.player = None
        self.show_current(f"⚑ breakpoint: {', '.join(hits)}" if hits else self._end_message())

    # -- breakpoints -------------------------------------------------------------------
    def action_toggle_breakpoint(self) -> None:
        step = self.query_one(OperatorList).highlighted_step
        state = self.history.current
        name = next((s.name for s in self.history.round_states() if s.step == step), state.name)
        exact = [b for b in self.breakpoints if b.text == name]
        if exact:
            self.breakpoints.remove(exact[0])
            message = f"removed breakpoint {name}"
        else:
            self.breakpoints.append(parse_breakpoint(name))
            message = f"breakpoint on {name}"
        self.show_current(message)

    def action_add_breakpoint(self) -> None:
        self.push_screen(PromptScreen("Break on (glob, kind, field=value, nan, inf, abs>N; & combines):",
                                      self._accept_breakpoint))

    def _accept_breakpoint(self, text: str) -> str | None:
        try:
            self.breakpoints.append(parse_breakpoint(text))
        except BreakpointError as error:
            return str(error)
        self.show_current(f"breakpoint on {text}")
        return None

    # -- go to -------------------------------------------------------------------------
    def action_goto(self) -> None:
        if not self._refuse_while_busy():
            self.push_screen(PromptScreen("Go to step number or operator name (glob):", self._accept_goto))

    def _accept_goto(self, text: str) -> str | None:
        if not text:
            return "type a step number or an operator name"
        if text.isdigit():
            if not self.history.goto(int(text)):
                self.show_current()
                return f"no step {text}: the trace ends at step {self.history.cursor}"
            self.show_current(f"went to step {text}")
            return None
        return self._goto_name(text)

    def _goto_name(self, pattern: str) -> str | None:
        start = self.history.cursor
        while self.history.forward():
            if fnmatch.fnmatchcase(self.history.current.name, pattern) or short_name(self.history.current) == pattern:
                self.show_current(f"went to {pattern}")
                return None
        self.history.goto(start)
        self.show_current()
        return f"no operator after step {start} matches {pattern!r}"

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None and not self.busy:
            self.history.goto(int(event.option.id))
            self.show_current()

    # -- panels ------------------------------------------------------------------------
    def action_panel(self, pane: str) -> None:
        self.query_one(TabbedContent).active = pane

    def action_heat(self) -> None:
        matrix = self.query_one(MatrixView)
        matrix.heat = not matrix.heat
        matrix.refresh_table()
        self.set_status(f"heat colouring {'on' if matrix.heat else 'off'}")

    def action_columns(self, direction: int) -> None:
        if not self.query_one(MatrixView).shift_columns(direction):
            self.set_status("no more columns that way")

    # -- full vs cached ---------------------------------------------------------------
    def action_diff(self) -> None:
        self._in_background("computing the full recompute to compare…", self._compute_diff)

    @work(thread=True, exclusive=True)
    def _compute_diff(self) -> None:
        cached = Session(self.scenario, self.backend, inject=self.inject)
        full = Session(self.scenario, self.backend, mode="full")
        diffs = diff_runs(cached.steps(), full.steps())
        self.call_from_thread(self._show_diff, diffs)

    def _show_diff(self, diffs: list[OpDiff]) -> None:
        self.busy = False
        self.set_status()
        self.push_screen(DiffScreen(diffs, self.inject), self._after_diff)

    def _after_diff(self, step: int | None) -> None:
        if step is not None:
            self.history.goto(step)
            self.show_current(f"went to step {step} from the diff")

    def action_cycle_injection(self) -> None:
        """Switch to the next deliberate bug (or none) and replay to the same step."""
        if self._refuse_while_busy():
            return
        names = [None, *INJECTIONS]
        step = self.history.cursor
        self._start_session(names[(names.index(self.inject) + 1) % len(names)])
        self.history.goto(step)
        self.show_current(f"now: {INJECTIONS[self.inject]}" if self.inject else "no injected bug")

    def on_key(self, event: events.Key) -> None:
        """A printable key that nothing is bound to gets an answer instead of silence."""
        if event.is_printable and event.key not in self.active_bindings and self.screen is self.screen_stack[0]:
            self.set_status(f"no action on {event.character!r}: press ? for the keys")

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.BINDINGS))


def launch(scenario: Scenario, backend: Backend, *, lang: str | None, breakpoints: list[str],
           inject: str | None = None, edits: list[CellEdit] = ()) -> None:
    DebuggerApp(scenario, backend, lang=lang, breakpoints=breakpoints, inject=inject, edits=edits).run()
