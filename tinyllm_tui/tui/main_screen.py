"""The debugger's main screen: timeline, operator list, matrix window, KV cache and panels.

It turns keys into calls on the headless `Debugger` and hands what the debugger
holds down to its widgets. Long runs (continue, search) happen in a thread worker
that owns the engine's generator until it stops; meanwhile keys that need the
generator are refused with a message, and Esc / ctrl+c cancel the run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingsMap
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, ProgressBar, TabbedContent, TabPane

from engine import to_host
from engine.breakpoints import BreakpointError, short_name
from tinyllm_tui.presentation.summaries import op_title

from tinyllm_tui.debugger.debugger import BUSY, Busy, Cancelled, Debugger, SearchError
from tinyllm_tui.tui.i18n import tr
from tinyllm_tui.tui.widgets.cache import CacheView
from tinyllm_tui.tui.widgets.dialogs import BreakpointsScreen, HelpScreen, PromptScreen
from tinyllm_tui.tui.widgets.diffview import DiffScreen
from tinyllm_tui.tui.widgets.linelist import LineList
from tinyllm_tui.tui.widgets.matrix import MatrixData, MatrixWindow, batch_matrix, lazy_labels
from tinyllm_tui.tui.widgets.operators import OperatorList
from tinyllm_tui.tui.widgets.panels import ExpectPanel, ExplanationPanel, InputsPanel
from tinyllm_tui.tui.widgets.statusbar import StatusBar, StatusData
from tinyllm_tui.tui.widgets.timeline import Timeline, TimelineData

PLAY_SPEEDS = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)  # steps per second
DEFAULT_SPEED = 3
WIDE = 120  # from this many columns the KV cache sits beside the matrix: the card's three views at once


def translated_bindings(bindings: BindingsMap, lang: str) -> BindingsMap:
    """The same bindings in the same order, their descriptions (the footer's words) in `lang`."""
    translated = bindings.copy()
    for key, listed in translated.key_to_bindings.items():
        translated.key_to_bindings[key] = [dataclasses.replace(b, description=tr(b.description, lang)) for b in listed]
    return translated


class DebuggerScreen(Screen):
    BINDINGS = [
        Binding("n,right,f10", "step", "Step"),
        Binding("left", "back", "Back"),
        Binding("c,f5", "continue", "Continue"),
        Binding("b,f9", "toggle_breakpoint", "Break"),
        Binding("B", "add_breakpoint", "Break on…", show=False),
        Binding("L", "breakpoints", "Breakpoint list", show=False),
        Binding("space", "play", "Play"),
        Binding("plus,equals_sign", "speed(1)", "Faster", show=False),
        Binding("minus", "speed(-1)", "Slower", show=False),
        Binding("g", "search(False)", "Go to"),
        Binding("G", "search(True)", "Search back", show=False),
        Binding("d", "diff", "Diff"),
        Binding("I", "cycle_injection", "Inject bug", show=False),
        Binding("x", "panel('explain')", "Explanation", show=False),
        Binding("k", "panel('cache')", "KV cache", show=False),
        Binding("i", "panel('inputs')", "Inputs", show=False),
        Binding("a", "panel('expect')", "Expectations", show=False),
        Binding("w", "weights", "Weights"),
        Binding("u", "undo", "Undo edit", show=False),
        Binding("ctrl+r", "redo", "Redo edit", show=False),
        Binding("v", "before_after", "Before/after edit", show=False),
        Binding("r", "recompute", "Recompute stale cache", show=False),
        Binding("ctrl+s", "app.save", "Save weights", show=False),
        Binding("S", "app.save_as", "Save as…", show=False),
        Binding("h", "heat", "Heat", show=False),
        Binding("less_than_sign,shift+left", "columns(-1)", "Columns ←", show=False),
        Binding("greater_than_sign,shift+right", "columns(1)", "Columns →", show=False),
        Binding("pageup,shift+up", "rows(-1)", "Rows ↑", show=False, priority=True),
        Binding("pagedown,shift+down", "rows(1)", "Rows ↓", show=False, priority=True),
        Binding("escape", "cancel", "Cancel run", show=False),
        Binding("question_mark,f1", "help", "Help"),
        Binding("q", "app.quit", "Quit"),
    ]

    @dataclass
    class RunDone(Message):
        message: str

    @dataclass
    class RunProgress(Message):
        step: int

    def __init__(self, debugger: Debugger, lang: str):
        super().__init__()
        self.debugger, self.lang = debugger, lang
        self._bindings = translated_bindings(self._bindings, lang)  # the footer speaks the chosen language
        self.speed = DEFAULT_SPEED
        self.player = None
        self.show_before = False
        self.message = ""
        self.refusal = ""  # why the last key pressed during a run was refused
        self.wide = False

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield ProgressBar(id="progress", show_eta=False)  # only while a run is in flight
        yield Timeline(id="timeline", classes="-batch" if self.debugger.scenario.batch else None)
        with Horizontal(id="body"):
            yield OperatorList(id="operators")
            with Vertical(id="right"):
                with Horizontal(id="top"):
                    yield MatrixWindow(id="matrix")
                    yield CacheView(self.debugger.scenario.model.d_head, id="side-cache")
                with TabbedContent(initial="explain", id="panels"):
                    with TabPane(tr("Explain", self.lang), id="explain"):
                        yield ExplanationPanel()
                    with TabPane(tr("KV cache", self.lang), id="cache"):
                        yield CacheView(self.debugger.scenario.model.d_head, id="tab-cache")
                    with TabPane(tr("Inputs", self.lang), id="inputs"):
                        yield InputsPanel()
                    with TabPane(tr("Expect", self.lang), id="expect"):
                        yield ExpectPanel()
        yield Footer()

    def on_mount(self) -> None:
        for widget in (self.query_one(Timeline), self.query_one(StatusBar), self.query_one(ExplanationPanel),
                       self.query_one(OperatorList)):
            widget.lang = self.lang
        self.query_one(OperatorList).focus()
        self.show("start · n/→ step · c continue · ? help")

    def on_unmount(self) -> None:
        """However the app ends, no run or comparison thread outlives it."""
        self.debugger.cancel()

    def on_screen_resume(self) -> None:
        self.show(self.message)
        self.check_expectations()

    def check_expectations(self) -> None:
        """The expect: tables and the --against dump, checked off the UI thread once per set of weights."""
        scenario = self.debugger.scenario
        if self.debugger.against is not None and self.debugger.divergences is None:
            self._compare_against()
        if self.debugger.outcomes is not None:
            return
        if scenario.expect:
            self._check(scenario)
        else:
            self.debugger.accept_outcomes(scenario, [])

    @work(thread=True, exclusive=True, group="expect")
    def _check(self, scenario) -> None:
        outcomes = self.debugger.check_expectations(scenario)
        self.app.call_from_thread(self._checked, scenario, outcomes)

    @work(thread=True, exclusive=True, group="against")
    def _compare_against(self) -> None:
        try:
            self.debugger.compare_against()
        except Cancelled:
            return
        self.app.call_from_thread(lambda: self.is_current and self.show(self.message))

    def _checked(self, scenario, outcomes) -> None:
        if self.debugger.accept_outcomes(scenario, outcomes) and self.is_current:
            self.show(self.message)

    # -- showing what the debugger holds --------------------------------------------------------------
    def show(self, message: str = "") -> None:
        """Hand the debugger's current view to every widget."""
        debugger, view = self.debugger, self.debugger.view
        state = view.state
        self.query_one(OperatorList).show_view(view)
        self.query_one(Timeline).show(TimelineData(state, len(debugger.scenario.requests),
                                                   bool(debugger.scenario.decode.prefill_chunk), view.rounds,
                                                   debugger.round_verdicts()))
        token_label = debugger.scenario.vocab.label if state.kind == "choice" else None
        before, verdicts = debugger.before(state), debugger.verdicts(state)
        widths = {g.values.shape[1] for g in view.batch}
        if len(view.batch) > 1 and len(widths) == 1 and before is None and not verdicts:  # the batch axis
            self.query_one(MatrixWindow).data = batch_matrix(state, view.batch, token_label)
        else:
            self.query_one(MatrixWindow).data = MatrixData(
                op_title(state), to_host(state.values), lazy_labels(state.output.row_axis),
                lazy_labels(state.output.col_axis), kind=state.kind, before=before, show_before=self.show_before,
                verdicts=verdicts, token_label=token_label)
        self._show_panels()
        self.set_status(message)

    def _show_panels(self) -> None:
        """The lower panel that is visible (the others catch up when shown) and the side cache."""
        state = self.debugger.view.state
        active = self.query_one(TabbedContent).active
        if self.wide:
            self._show_cache("#side-cache")
        if active == "explain":
            self.query_one(ExplanationPanel).state = state
        elif active == "cache":
            self._show_cache("#tab-cache")
        elif active == "inputs":
            self.query_one(InputsPanel).state = state
        else:
            self.query_one(ExpectPanel).outcomes = self.debugger.outcomes

    def _show_cache(self, selector: str) -> None:
        self.query_one(selector, CacheView).show(self.debugger.view.state, self.debugger.fingerprint,
                                                 self.debugger.differing_cache_rows)

    def on_tabbed_content_tab_activated(self) -> None:
        self._show_panels()

    def on_resize(self, event) -> None:
        self.query_one("#side-cache").display = self.wide = event.size.width >= WIDE
        self._show_panels()

    def set_status(self, message: str = "") -> None:
        self.message = message
        debugger, view = self.debugger, self.debugger.view
        total = view.total
        self.query_one(StatusBar).show(StatusData(
            step=view.state.step, last=None if total is None else total - 1, operator=short_name(view.state),
            inject=debugger.inject,
            stale=debugger.stale is not None, unsaved=debugger.unsaved(), breakpoints=len(debugger.breakpoints),
            playing=PLAY_SPEEDS[self.speed] if self.player is not None else None, message=message))

    def _guarded(self, move) -> None:
        """Call a move of the debugger and show where it went; refused with a message while a run owns it."""
        try:
            message = move()
        except Busy as busy:
            self._refuse(str(busy))
            return
        self.show(message)

    # -- stepping ------------------------------------------------------------------------------------------
    def action_step(self) -> None:
        self._guarded(self.debugger.step)

    def action_back(self) -> None:
        self._guarded(self.debugger.back)

    def action_continue(self) -> None:
        if self._refused():
            return
        self.set_status("running… (Esc cancels)")
        self._run(self.debugger.continue_)

    @work(thread=True, exclusive=True, group="run")
    def _run(self, run, *args) -> None:
        """In a thread: the run owns the generator until it returns; results come back as messages."""
        try:
            message = run(*args, progress=lambda step: self.post_message(self.RunProgress(step)))
        except (SearchError, Busy) as error:
            message = str(error)
        self.post_message(self.RunDone(message))

    def on_debugger_screen_run_progress(self, event: RunProgress) -> None:
        if self.debugger.busy:  # a key refused meanwhile stays said
            self.set_status(" · ".join(filter(None, [f"running… step {event.step} (Esc cancels)", self.refusal])))
            bar = self.query_one(ProgressBar)
            bar.display = True
            bar.update(total=self.debugger.view.total, progress=event.step)  # total unknown at first: a pulse

    def on_debugger_screen_run_done(self, event: RunDone) -> None:
        self.refusal = ""
        self.query_one(ProgressBar).display = False
        self.show(event.message)
        self.check_expectations()  # a rebuild (edit, undo, fault) needs them checked again

    def in_background(self, message: str, run, *args) -> None:
        """Run a debugger call that replays or computes ahead in the run worker; it reports when done."""
        if not self._refused():
            self.set_status(f"{message} (Esc cancels)")
            self._run(run, *args)

    def _refused(self) -> bool:
        if self.debugger.busy:
            self._refuse(BUSY)
        return self.debugger.busy

    def _refuse(self, message: str) -> None:
        self.refusal = message
        self.set_status(message)

    def action_cancel(self) -> None:
        self.set_status("cancelling…" if self.debugger.cancel() else "nothing is running")

    def action_play(self) -> None:
        if self.player is not None:
            self._stop_playing("paused")
            return
        if self._refused():
            return
        self._schedule_play()
        self.set_status()

    def _schedule_play(self) -> None:
        if self.player is not None:
            self.player.stop()
        self.player = self.set_interval(1 / PLAY_SPEEDS[self.speed], self._play_tick)

    def _stop_playing(self, message: str) -> None:
        self.player.stop()
        self.player = None
        self.show(message)

    def _play_tick(self) -> None:
        try:
            stop = self.debugger.play_step()
        except Busy:
            return
        if stop:
            self._stop_playing(stop)
        else:
            self.show()

    def action_speed(self, direction: int) -> None:
        self.speed = max(0, min(self.speed + direction, len(PLAY_SPEEDS) - 1))
        if self.player is not None:
            self._schedule_play()
        self.set_status(f"play speed {PLAY_SPEEDS[self.speed]:g} steps/s")

    # -- breakpoints -------------------------------------------------------------------------------------
    def action_toggle_breakpoint(self) -> None:
        """On the operator highlighted in the list (works while a run is in flight)."""
        step = self.query_one(OperatorList).highlighted_key
        state = next((s for s in self.debugger.view.round_states if s.step == step), self.debugger.view.state)
        message = self.debugger.toggle_breakpoint(state.name)
        self.query_one(OperatorList).show_view(self.debugger.view)
        self.set_status(message)

    def action_add_breakpoint(self) -> None:
        self.app.push_screen(PromptScreen(tr("Break on (glob, kind, field=value, nan, inf, abs>N; & combines):",
                                             self.lang),
                                          self._accept_breakpoint))

    def _accept_breakpoint(self, text: str) -> str | None:
        try:
            message = self.debugger.add_breakpoint(text)
        except BreakpointError as error:
            return str(error)
        self.show(message)
        return None

    def action_breakpoints(self) -> None:
        debugger = self.debugger
        self.app.push_screen(BreakpointsScreen(lambda: [b.text for b in debugger.breakpoints],
                                               debugger.remove_breakpoint, debugger.clear_breakpoints))

    # -- go to and search ----------------------------------------------------------------------------------
    def action_search(self, backward: bool) -> None:
        if self._refused():
            return
        question = tr("Search back for" if backward else "Go to", self.lang) + tr(
            " a step number, an operator (glob, short name), a kind or a condition (round=2, nan, abs>5, & combines):",
            self.lang)
        self.app.push_screen(PromptScreen(question, lambda text: self._accept_search(text, backward)))

    def _accept_search(self, text: str, backward: bool) -> str | None:
        if not text:
            return "type a step number or an operator name, kind or condition"
        if text.isdigit():
            try:
                self.show(self.debugger.goto_step(int(text)))
            except (SearchError, Busy) as error:
                self.show()
                return str(error)
            return None
        self.set_status(f"searching for {text}… (Esc cancels)")
        self._run(self.debugger.search, text, backward)
        return None

    def on_line_list_chosen(self, event: LineList.Chosen) -> None:
        if isinstance(event.list, OperatorList):
            self._guarded(lambda: self.debugger.goto_step(event.key))

    # -- panels and the matrix window -------------------------------------------------------------------------
    def action_panel(self, pane: str) -> None:
        self.query_one(TabbedContent).active = pane

    def action_heat(self) -> None:
        matrix = self.query_one(MatrixWindow)
        matrix.heat = not matrix.heat
        self.set_status(f"heat colouring {'on' if matrix.heat else 'off'}")

    def action_columns(self, direction: int) -> None:
        if not self.query_one(MatrixWindow).scroll_cols(direction):
            self.set_status("no more columns that way")

    def action_rows(self, direction: int) -> None:
        if not self.query_one(MatrixWindow).scroll_rows(direction):
            self.set_status("no more rows that way")

    def on_key(self, event) -> None:
        """[ ] and { } page the KV cache views; a printable key nothing is bound to gets an answer."""
        moves = {"left_square_bracket": (-1, 0), "right_square_bracket": (1, 0),
                 "left_curly_bracket": (0, -1), "right_curly_bracket": (0, 1)}
        if event.key in moves:
            for cache in self.query(CacheView):
                message = cache.move(*moves[event.key])
            self.set_status(message)
            event.stop()
        elif event.is_printable and event.key not in self.app.active_bindings:
            self.set_status(f"no action on {event.character!r}: press ? for the keys")

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self.BINDINGS, self.lang))

    # -- comparisons ----------------------------------------------------------------------------------------
    def action_diff(self) -> None:
        self.set_status("computing the full recompute to compare… (Esc cancels)")
        self._compute_diff()

    @work(thread=True, exclusive=True, group="diff")
    def _compute_diff(self) -> None:
        """On sessions of its own: the debugger's generator is not touched."""
        try:
            diffs = self.debugger.diff()
        except Cancelled:
            self.app.call_from_thread(self.set_status, "diff cancelled")
            return
        self.app.call_from_thread(self._show_diff, diffs)

    def _show_diff(self, diffs) -> None:
        self.set_status()
        self.app.push_screen(DiffScreen(diffs, self.debugger.inject), self._after_diff)

    def _after_diff(self, step: int | None) -> None:
        if step is not None:
            self._guarded(lambda: self.debugger.goto_step(step) + " from the diff")

    def action_cycle_injection(self) -> None:
        self.in_background("switching the injected bug, replaying to this step…", self.debugger.cycle_injection)

    # -- edits ----------------------------------------------------------------------------------------------
    def action_weights(self) -> None:
        if not self._refused():
            from tinyllm_tui.tui.widgets.weights import WeightsScreen

            self.app.push_screen(WeightsScreen(self.debugger))

    def action_undo(self) -> None:
        self.in_background("undoing, replaying to this step…", self.debugger.undo)

    def action_redo(self) -> None:
        self.in_background("redoing, replaying to this step…", self.debugger.redo)

    def action_recompute(self) -> None:
        self.in_background("recomputing the cache, replaying to this step…", self.debugger.recompute)

    def action_before_after(self) -> None:
        self.show_before = not self.show_before
        self.show("showing values BEFORE the last edit" if self.show_before else "showing current values")
