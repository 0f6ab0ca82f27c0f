"""The debugger's main screen: timeline, operator list, matrix window, KV cache and panels.

It turns keys into Debugger moves and hands the frame each move publishes to its widgets; the
results of moves are worded here (tinyllm_tui.tui.i18n). Long actions (continue, search, replays,
the diff) go through the app's one runner; meanwhile moves are refused with a message, and Esc /
ctrl+c cancel the run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import wraps

from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import ProgressBar, TabbedContent

from tinyllm_tui.debugger import Debugger, DiffCancelled
from tinyllm_tui.debugger.frame import Frame
from tinyllm_tui.debugger.results import EndOfTrace, Moved, Reason, Refused, Result
from tinyllm_tui.tui.i18n import cause_words, tr, where
from tinyllm_tui.tui.result_words import describe, misnamed_words
from tinyllm_tui.tui.widgets.blank import Column, Pane, Row, Tabs
from tinyllm_tui.tui.widgets.cache import CacheView
from tinyllm_tui.tui.widgets.dialogs import LATER, BreakpointsScreen, HelpScreen, Later, PromptScreen
from tinyllm_tui.tui.widgets.diffview import DiffScreen
from tinyllm_tui.tui.widgets.footer import KeyFooter, translated_bindings
from tinyllm_tui.tui.widgets.linelist import LineList
from tinyllm_tui.tui.widgets.matrix import MatrixWindow
from tinyllm_tui.tui.widgets.operators import OperatorList
from tinyllm_tui.tui.widgets.panels import ExpectPanel, ExplanationPanel, InputsPanel
from tinyllm_tui.tui.widgets.readings import GlanceScreen, LensScreen, RoutingScreen
from tinyllm_tui.debugger.readings import Glance
from tinyllm_tui.presentation.cache_layout import spans
from tinyllm_tui.tui.widgets.statusbar import StatusBar
from tinyllm_tui.tui.widgets.timeline import Timeline
from tinyllm_tui.tui.widgets.weights import WeightsScreen
from tinyllm_tui.tui.messages import RestoreAsked, SaveOver, StatusSaid
from tinyllm_tui.tui.runner import RunDone, RunProgress, RunWorded

PLAY_SPEEDS = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)  # steps per second
DEFAULT_SPEED = 3
WIDE = 120  # from this many columns the KV cache sits beside the matrix: the card's three views at once
QUEUED = 8  # quick moves that may wait for the one in flight (a held key)
CACHE_MOVES = {"left_square_bracket": (-1, 0), "right_square_bracket": (1, 0),
               "left_curly_bracket": (0, -1), "right_curly_bracket": (0, 1)}


def matrix_title(frame: Frame, lang: str) -> str:
    """"blocks.0.attn.hook_pattern · head 0 · request 0 · prefill"."""
    head = "" if frame.matrix.head is None else tr("matrix.head", lang, head=frame.matrix.head)
    stacked = frame.matrix.batch_rows
    if stacked:  # every row of the batch, one under the other: the batch axis
        return tr("matrix.title.batch", lang, name=frame.matrix.name, head=head, requests=spans(stacked),
                  where=where(frame.phase, frame.round, lang))
    request = str(frame.request)
    rows = frame.timeline.batch
    if rows:  # which row of the batch, and its padding
        row = next(i for i, line in enumerate(rows) if line.request == frame.request)
        request += tr("matrix.batch", lang, row=row + 1, rows=len(rows), pad=rows[row].pad)
    return tr("matrix.title", lang, name=frame.matrix.name, head=head, request=request,
              where=where(frame.phase, frame.round, lang))


class MoveDone(RunDone):
    """A quick move (step, back, go to, cache page) is done."""


class RoundListed(RunDone):
    """The current round's operators are listed (after a quick start, or a step into a checkpoint's round)."""


class LongRunDone(RunDone):
    """A run that replays or computes ahead (continue, search, an edit, undo, the injected bug) is done."""


class Played(RunDone):
    """One step of play is done."""


class DiffDone(RunDone):
    """The diff against a full recompute is done (or cancelled)."""


class WentFromDiff(RunDone):
    """The go-to chosen in the diff dialog is done."""


class LensRead(RunDone):
    """The logit lens of the round is read."""


class WentTo(RunDone):
    """The go-to by number typed in a prompt is done: a refusal goes back to that prompt while it is open."""


class ExpectationsChecked(Message, bubble=False):
    """The expect: tables and the --against dump are checked (outside the runner: see check_expectations)."""


def when_idle(action: Callable[..., None]) -> Callable[..., None]:
    """A key that opens a screen on the Debugger's state: pressed while a quick move is in flight (or while a
    checkpoint's round is not all listed: the screen shows the whole round) it waits its turn, and the keys
    queued after it are dropped, being meant for the screen it covers; it is dropped itself when its turn comes
    under another screen (a prompt opened meanwhile); during a long run it is refused with a message."""

    @wraps(action)
    def guarded(self: DebuggerScreen, *args) -> None:
        if self.runner.running or self.debugger.round_pending:
            if not self._queue(lambda: guarded(self, *args), before_listing=False):
                self._refuse()
            self._list_round()
            return
        if not self.is_active:  # not on top: a prompt covers it
            return
        self._queued.clear()
        action(self, *args)

    return guarded


class DebuggerScreen(Screen):
    # the footer shows these in order and drops what does not fit: help and quit come early
    BINDINGS = [
        Binding("n,right,f10", "step", "Step"),
        Binding("left", "back", "Back"),
        Binding("c,f5", "continue", "Continue"),
        Binding("question_mark,f1", "help", "Help"),
        Binding("q", "app.quit", "Quit"),
        Binding("b,f9", "toggle_breakpoint", "Break"),
        Binding("space", "play", "Play"),
        Binding("g", "search(False)", "Go to"),
        Binding("d", "diff", "Diff"),
        Binding("w", "weights", "Weights"),
        Binding("B", "add_breakpoint", "Break on…", show=False),
        Binding("L", "breakpoints", "Breakpoint list", show=False),
        Binding("plus,equals_sign", "speed(1)", "Faster", show=False),
        Binding("minus", "speed(-1)", "Slower", show=False),
        Binding("G", "search(True)", "Search back", show=False),
        Binding("I", "cycle_injection", "Inject bug", show=False),
        Binding("x", "panel('explain')", "Explanation", show=False),
        Binding("k", "panel('cache')", "KV cache", show=False),
        Binding("i", "panel('inputs')", "Inputs", show=False),
        Binding("a", "panel('expect')", "Expectations", show=False),
        Binding("u", "undo", "Undo", show=False),  # the last edit or intervention: one undo list
        Binding("ctrl+r", "redo", "Redo", show=False),
        Binding("v", "before_after", "Before/after edit", show=False),
        Binding("r", "recompute", "Recompute stale cache", show=False),
        Binding("ctrl+s", "app.save", "Save weights", show=False),
        Binding("S", "app.save_as", "Save as…", show=False),
        Binding("h", "heat", "Heat", show=False),
        Binding("l", "lens", "Logit lens", show=False),
        Binding("A", "glance", "Heads at a glance", show=False),
        Binding("E", "routing", "Expert routing", show=False),
        Binding("p", "intervene", "Patch/ablate…", show=False),
        Binding("W", "save_interventions", "Save interventions", show=False),
        Binding("t", "sorted_columns", "Top-k sorted", show=False),
        Binding("T", "pieces", "Pieces", show=False),
        Binding("less_than_sign,shift+left", "columns(-1)", "Columns ←", show=False),
        Binding("greater_than_sign,shift+right", "columns(1)", "Columns →", show=False),
        Binding("pageup,shift+up", "rows(-1)", "Rows ↑", show=False, priority=True),
        Binding("pagedown,shift+down", "rows(1)", "Rows ↓", show=False, priority=True),
        Binding("escape", "cancel", "Cancel run", show=False),
    ]

    def __init__(self, debugger: Debugger, lang: str):
        super().__init__()
        self.debugger, self.lang = debugger, lang
        self._bindings = translated_bindings(self._bindings, lang)  # the footer speaks the chosen language
        self.speed = DEFAULT_SPEED
        self.player = None
        self.message = ""
        self.refusal = ""  # why the last key pressed during a run was refused
        self._refused = 0  # keys refused during the long run in flight, said once it is done
        self.wide = False
        self.cached = debugger.opened.cached  # an encoder runs one pass: it keeps no KV cache
        self._frame: Frame | None = None
        self._queued: deque = deque()  # (start, before_listing) of keys pressed while a quick move was in flight
        self._dropped = 0  # keys pressed while the queue was full, said once it has drained
        self.said: Result | None = None  # the last result worded on the status line
        self.pieces = False  # generated text as its tokens' pieces instead of decoded
        self._asker: Screen | None = None  # the other screen that asked for the run in flight
        self._goto_prompt: PromptScreen | None = None  # the prompt waiting for the go-to in flight

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield ProgressBar(id="progress", show_eta=False)  # only while a run is in flight
        opened = self.debugger.opened
        yield Timeline(id="timeline", classes="-batch" if opened.batch else "-chat" if opened.chat else None)
        with Row(id="body"):
            yield OperatorList(id="operators")
            with Column(id="right"):
                with Row(id="top"):
                    yield MatrixWindow(id="matrix")
                    yield CacheView(id="side-cache")
                with Tabs(initial="explain", id="panels"):
                    with Pane(tr("panel.explain", self.lang), id="explain"):
                        yield ExplanationPanel()
                    with Pane(tr("panel.cache", self.lang), id="cache"):
                        yield CacheView(id="tab-cache")
                    with Pane(tr("panel.inputs", self.lang), id="inputs"):
                        yield InputsPanel()
                    with Pane(tr("panel.expect", self.lang), id="expect"):
                        yield ExpectPanel()
        yield KeyFooter()

    def on_mount(self) -> None:
        for widget in (self.query_one(Timeline), self.query_one(StatusBar), self.query_one(ExplanationPanel),
                       self.query_one(OperatorList), self.query_one(InputsPanel), self.query_one(ExpectPanel),
                       *self.query(MatrixWindow), *self.query(CacheView)):
            widget.lang = self.lang
        self.query_one(Timeline).cached = self.cached
        if not self.cached:
            self.query_one(TabbedContent).hide_tab("cache")
        self.query_one(OperatorList).focus()
        pending = self.debugger.round_pending  # shown quickly: the rest of round 0 is listed once computed
        self.show(tr("screen.listing", self.lang) if pending else self._started())
        self.call_after_refresh(self._list_round)  # after a paint

    def on_unmount(self) -> None:
        """However the app ends, no run or comparison thread outlives it."""
        self.debugger.cancel()

    def on_screen_resume(self) -> None:
        self.show(self.message)
        self.check_expectations()

    @property
    def runner(self):
        return self.app.runner

    def check_expectations(self) -> None:
        """The expect: tables and the --against dump, checked off the UI thread once per set of weights (beside
        the runner: a check runs sessions of its own and only hands what it found to the Debugger)."""
        debugger = self.debugger
        if debugger.outcomes is None or (debugger.against is not None and debugger.divergences is None):
            self.run_worker(self._check, thread=True, exclusive=True, group="expect")

    def _check(self) -> None:
        """In a thread: what it finds goes into the Debugger's next frame (at once when no move is in flight)."""
        debugger = self.debugger
        try:
            if debugger.against is not None and debugger.divergences is None:
                debugger.compare_against()
        except DiffCancelled:
            return
        if debugger.outcomes is None:
            debugger.check_outcomes()
        self.post_message(ExpectationsChecked())

    def on_expectations_checked(self) -> None:
        if self.is_current:
            self.show(self.message)

    # -- showing the frame ---------------------------------------------------------------------------------
    def show(self, message: str = "") -> None:
        """Hand the debugger's current frame to every widget (only what a frame changed redraws)."""
        frame = self.debugger.frame
        if frame is not self._frame:
            self._frame = frame
            self.query_one(OperatorList).show_frame(frame)
            self.query_one(Timeline).show(frame.timeline)
            self.query_one("#matrix", MatrixWindow).show(frame.matrix, matrix_title(frame, self.lang))
            self._show_panels()
        self.set_status(message)

    def _show_panels(self) -> None:
        """The lower panel that is visible (the others catch up when shown) and the side cache."""
        frame = self.debugger.frame
        active = self.query_one(TabbedContent).active
        if self.wide:
            self.query_one("#side-cache", CacheView).show(frame.cache)
        if active == "explain":
            self.query_one(ExplanationPanel).frame = frame
        elif active == "cache":
            self.query_one("#tab-cache", CacheView).show(frame.cache)
        elif active == "inputs":
            self.query_one(InputsPanel).frame = frame
        else:
            self.query_one(ExpectPanel).outcomes = frame.outcomes

    def on_status_said(self, message: StatusSaid) -> None:
        self.set_status(message.text)

    def on_save_over(self, message: SaveOver) -> None:
        """The app's save, a long run of the runner, is over: said as a long run's result is."""
        self.refusal = ""
        self.show(message.text)
        self._say_refused()
        self._next_queued()

    def on_tabbed_content_tab_activated(self) -> None:
        self._show_panels()

    def on_resize(self, event) -> None:
        self.query_one("#side-cache").display = self.wide = event.size.width >= WIDE and self.cached
        self._show_panels()

    def set_status(self, message: str = "") -> None:
        self.message = message
        self.query_one(StatusBar).show(self.debugger.frame.status, message=message,
                                       playing=PLAY_SPEEDS[self.speed] if self.player is not None else None)

    def say(self, result: Result) -> None:
        """Show where a move went and what it did."""
        if isinstance(result, Refused) and result.reason is Reason.BUSY:
            self._refuse()
        else:
            self.said = result
            self.show(describe(result, self.lang, pieces=self.pieces))

    # -- the runner ------------------------------------------------------------------------------------------
    def move(self, move, *args) -> None:
        """A quick move (step, back, go to, cache page) in the runner: its frame is built off the UI thread.
        Pressed while another quick move is in flight, it waits its turn; during a long run it is refused."""
        if self.runner.running:
            if not self._queue(lambda: self.move(move, *args)):
                self._refuse()
            return
        self.runner.start(self, lambda report: move(*args), MoveDone, quick=True)

    def on_move_done(self, message: MoveDone) -> None:
        result = message.result
        if isinstance(result, BaseException):
            raise result
        self.say(result)
        self._next_queued()

    def on_round_listed(self, message: RoundListed) -> None:
        """The round's operators are listed (all of them, or those computed before a key was pressed): the frame
        is redrawn, the status line keeps its words (unless they were only saying that round 0 was being
        computed and it is)."""
        if isinstance(message.result, BaseException):
            raise message.result
        listing = self.message == tr("screen.listing", self.lang) and not self.debugger.round_pending
        self.show(self._started() if listing else self.message)
        self._next_queued()

    def _started(self) -> str:
        """The status line once round 0 is listed: first each breakpoint's name that no operator has."""
        return " · ".join([*(misnamed_words(m, self.lang) for m in self.debugger.misnamed_breakpoints()),
                           tr("screen.start", self.lang)])

    def _list_round(self) -> None:
        """The rest of the current round (a checkpoint's, whose weights are read on first use), computed in the
        runner while no key waits: a key pressed stops it after the operator in flight and goes first; once the
        keys are done, it goes on."""
        if self.debugger.round_pending and not self.runner.running and not self._move_waits():
            self.runner.start(self, lambda report: self.debugger.complete_round(stop=self._move_waits),
                              RoundListed, quick=True)

    def _move_waits(self) -> bool:
        """The first key waiting goes before the listing of a round (read from the runner's thread too): a move.
        One that opens a screen waits for the whole round, and the keys after it are meant for its screen."""
        first = next(iter(tuple(self._queued)), None)
        return first is not None and first[1]

    def _queue(self, start, before_listing: bool = True) -> bool:
        """`start()` once the quick move in flight is done; False (not queued) during a long run or a full queue,
        which drops the key and counts it. `before_listing`: it stops the listing of a round in flight."""
        queued = (self.runner.quick or not self.runner.running) and len(self._queued) < QUEUED
        if queued:
            self._queued.append((start, before_listing))
        elif self.runner.quick:
            self._dropped += 1
        return queued

    def _next_queued(self) -> None:
        """Start what waits, in turn: one that needs no run (a refusal, a go-to by number) lets the next go.
        Once nothing waits, the status line says how many keys the full queue dropped."""
        while self._queued and not self.runner.running:
            start, before_listing = self._queued[0]
            if self.debugger.round_pending and not before_listing:
                break  # it waits for the listing, started below
            self._queued.popleft()
            start()
        if self._dropped and not self._queued and not self.runner.running:
            dropped, self._dropped = self._dropped, 0
            self._add_to_status(tr("screen.dropped", self.lang, count=dropped, queue=QUEUED))
        self._list_round()

    def _add_to_status(self, words: str) -> None:
        """Say `words` after what the status line says now."""
        self.set_status(" · ".join(filter(None, [self.message, words])))


    def in_background(self, status: str, move, *args, asker: Screen | None = None, **options) -> bool:
        """Run a Debugger move that replays or computes ahead in the app's runner; False if refused.

        Args: status: what the status line says meanwhile (in words). asker: another screen that asked (the
        weights browser over this one), posted a RunWorded once this screen has worded the result.
        Asked while a quick move is in flight, it waits its turn (True)."""
        if self.runner.running and self._queue(lambda: self.in_background(status, move, *args, asker=asker,
                                                                            **options)):
            return True

        def work(report):
            return move(*args, progress=report, **options)

        started = self.runner.start(self, work, LongRunDone)
        if started:
            self._asker = asker
            self.set_status(status)
        else:
            self._refuse()
        return started

    def on_run_progress(self, message: RunProgress) -> None:
        """A run this screen started has got to step `message.progress` (handled in this screen's loop: never
        before its widgets exist, never once they are being removed)."""
        step = message.progress
        if self.runner.running:
            self.set_status(" · ".join(filter(None, [tr("screen.running_at", self.lang, step=step), self.refusal])))
            bar = self.query_one(ProgressBar)
            bar.display = True
            bar.update(total=self.debugger.frame.status.last, progress=step)  # total unknown at first: a pulse

    def on_long_run_done(self, message: LongRunDone) -> None:
        result = message.result
        bars = self.query(ProgressBar)
        if not bars:  # a run cancelled as the app closes: its widgets are gone, nothing to show it on
            return
        self.refusal = ""
        bars.first().display = False
        asker, self._asker = self._asker, None
        if isinstance(result, BaseException):
            raise result
        self.say(result)
        self._say_refused()
        if asker is not None:  # a message: dropped if that screen has closed meanwhile
            asker.post_message(RunWorded(result, self.message))
        self.check_expectations()  # a rebuild (edit, undo, fault) needs them checked again
        self._next_queued()  # a run started from the queue: what was queued after it

    def _say_refused(self) -> None:
        """After a long run's result: how many keys were refused meanwhile."""
        if self._refused:
            refused, self._refused = self._refused, 0
            self._add_to_status(tr("screen.refused", self.lang, count=refused))

    def _refuse(self) -> None:
        """Say a key is refused; one refused during a long run is counted (a full queue's are: `_dropped`)."""
        if self.runner.running and not self.runner.quick:
            self._refused += 1
        self.refusal = tr("refused.busy", self.lang)
        self.set_status(self.refusal)

    def action_cancel(self) -> None:
        self.set_status(tr("screen.cancelling" if self.debugger.cancel() else "screen.idle", self.lang))

    # -- stepping ------------------------------------------------------------------------------------------
    def action_step(self) -> None:
        self.move(self.debugger.step)

    def action_back(self) -> None:
        self.move(self.debugger.back)

    def action_continue(self) -> None:
        self.in_background(tr("screen.running", self.lang), self.debugger.continue_)

    def action_play(self) -> None:
        if self.player is not None:
            self._stop_playing(tr("screen.paused", self.lang))
        elif self.runner.running:
            self._refuse()
        else:
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
        self._list_round()  # stopped in a round still to be listed: it is listed now

    def _play_tick(self) -> None:
        if not self.runner.running:  # a tick that finds a move in flight waits for the next
            self.runner.start(self, lambda report: self.debugger.play_step(), Played, quick=True)

    def on_played(self, message: Played) -> None:
        result = message.result
        busy = isinstance(result, Refused) and result.reason is Reason.BUSY
        if self.player is None or busy or isinstance(result, Moved):  # paused meanwhile, or on it goes
            self.show()
        else:
            self._stop_playing(describe(result, self.lang))  # a breakpoint (the status names it) or the end
        if self.player is None:  # paused while this step was in flight: the round is listed now
            self._list_round()

    def action_speed(self, direction: int) -> None:
        self.speed = max(0, min(self.speed + direction, len(PLAY_SPEEDS) - 1))
        if self.player is not None:
            self._schedule_play()
        self.set_status(tr("screen.speed", self.lang, speed=f"{PLAY_SPEEDS[self.speed]:g}"))

    # -- breakpoints ---------------------------------------------------------------------------------------
    def action_toggle_breakpoint(self) -> None:
        """On the operator highlighted in the list (works while a run is in flight)."""
        self.say(self.debugger.toggle_breakpoint_at(self.query_one(OperatorList).highlighted_key))

    def action_add_breakpoint(self) -> None:
        self.app.push_screen(PromptScreen(tr("ask.break", self.lang), self._accept_breakpoint))

    def _accept_breakpoint(self, text: str) -> str | None:
        result = self.debugger.add_breakpoint(text)
        if isinstance(result, Refused) and result.reason is Reason.BAD_QUERY:  # stays open to be corrected
            return describe(result, self.lang)
        self.say(result)
        return None

    def action_breakpoints(self) -> None:
        debugger = self.debugger
        self.app.push_screen(BreakpointsScreen(lambda: [b.text for b in debugger.breakpoints],
                                               debugger.remove_breakpoint, debugger.clear_breakpoints, self.lang))

    # -- go to and search ----------------------------------------------------------------------------------
    def action_search(self, backward: bool) -> None:
        """The prompt opens even while a run is in flight: what is typed goes into it, never to the keys."""
        question = tr("ask.search_back" if backward else "ask.goto", self.lang)
        prompt = PromptScreen(question, lambda text: self._accept_search(text, backward, prompt))
        self.app.push_screen(prompt)

    def _accept_search(self, text: str, backward: bool, prompt: PromptScreen) -> str | Later | None:
        """What the prompt answers (it stays open to correct the text), or None once the search is on its way
        (LATER: a go-to by number, whose refusal goes back to the prompt). Sent while a quick move is in flight,
        the search waits its turn and answers on the status line."""
        if not self.runner.running:
            return self._search(text, backward, prompt)
        if self._queue(lambda: self._status_unless_none(self._search(text, backward))):
            return None
        return tr("refused.busy", self.lang)

    def _status_unless_none(self, text: str | None) -> None:
        if text is not None:
            self.set_status(text)

    def _search(self, text: str, backward: bool, prompt: PromptScreen | None = None) -> str | Later | None:
        """`prompt`: the one still open, waiting for what a go-to by number refuses (a step past the trace)."""
        refused = self.debugger.check_query(text)
        if refused is not None:  # the prompt stays open to correct it, as B's does
            return describe(refused, self.lang)
        if text.isdigit():  # a quick move: going there may replay or compute ahead
            self._goto_prompt = prompt
            self.runner.start(self, lambda report: self.debugger.goto_step(int(text)), WentTo, quick=True)
            return None if prompt is None else LATER
        self.in_background(tr("screen.searching", self.lang, text=text), self.debugger.search, text, backward)
        return None

    def on_went_to(self, message: WentTo) -> None:
        result, prompt, self._goto_prompt = message.result, self._goto_prompt, None
        if isinstance(result, BaseException):
            raise result
        if isinstance(result, Refused) and prompt is not None and prompt.is_active:
            prompt.post_message(PromptScreen.Answered(describe(result, self.lang)))  # to be corrected there
        else:
            if prompt is not None:
                prompt.post_message(PromptScreen.Answered(None))
            self.say(result)
        self._next_queued()

    def on_line_list_chosen(self, event: LineList.Chosen) -> None:
        if isinstance(event.list, OperatorList):
            self.move(self.debugger.goto_step, event.key)

    # -- panels and the windows ------------------------------------------------------------------------------
    def action_panel(self, pane: str) -> None:
        if pane == "cache" and not self.cached:
            self.set_status(tr("screen.no_cache", self.lang))
            return
        self.query_one(TabbedContent).active = pane

    @property
    def matrix(self) -> MatrixWindow:
        return self.query_one("#matrix", MatrixWindow)

    def action_heat(self) -> None:
        self.matrix.heat = not self.matrix.heat
        self.set_status(tr("screen.heat_on" if self.matrix.heat else "screen.heat_off", self.lang))

    def action_pieces(self) -> None:
        """Generated text decoded, or token by token (the end of the trace says it)."""
        self.pieces = not self.pieces
        if isinstance(self.said, EndOfTrace):
            self.say(self.said)

    def action_sorted_columns(self) -> None:
        matrix = self.matrix
        if matrix.matrix is None or matrix.matrix.order is None:
            self.set_status(tr("screen.not_vocab", self.lang))
            return
        matrix.sorted_view = not matrix.sorted_view
        self.set_status(tr("screen.sorted_on" if matrix.sorted_view else "screen.sorted_off", self.lang))

    def _shown_windows(self) -> list[MatrixWindow]:
        """The matrix and the KV cache windows on screen now: < > move the columns of each."""
        caches = [cache for cache in self.query(CacheView) if cache.display and cache.region.area]
        return [self.matrix, *(window for cache in caches for window in cache.windows)]

    def action_columns(self, direction: int) -> None:
        moved = [window.scroll_cols(direction) for window in self._shown_windows()]
        if not any(moved):
            self.set_status(tr("screen.no_columns", self.lang))

    def action_rows(self, direction: int) -> None:
        if not self.matrix.scroll_rows(direction):
            self.set_status(tr("screen.no_rows", self.lang))

    def on_key(self, event) -> None:
        """[ ] and { } page the KV cache; a printable key nothing is bound to gets an answer."""
        if event.key in CACHE_MOVES:
            self.move(self.debugger.move_cache, *CACHE_MOVES[event.key])
            event.stop()
        elif event.is_printable and event.key not in self.app.active_bindings:
            self.set_status(tr("screen.no_action", self.lang, key=event.character))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self.BINDINGS, self.lang))

    # -- comparisons -------------------------------------------------------------------------------------------
    def action_diff(self) -> None:
        if self.runner.start(self, lambda report: self.debugger.compare(), DiffDone):
            self.set_status(tr("screen.diffing", self.lang))
        else:
            self._refuse()

    def on_diff_done(self, message: DiffDone) -> None:
        report = message.result
        if isinstance(report, DiffCancelled):
            self.set_status(tr("screen.diff_cancelled", self.lang))
            return
        self.set_status()
        self.app.push_screen(DiffScreen(report, self.lang), self._after_diff)

    def _after_diff(self, step: int | None) -> None:
        if step is not None:
            self.runner.start(self, lambda report: self.debugger.goto_step(step), WentFromDiff, quick=True)

    def on_went_from_diff(self, message: WentFromDiff) -> None:
        result = message.result
        self.show(tr("diff.from", self.lang, step=result.step) if isinstance(result, Moved)
                  else describe(result, self.lang))

    def action_cycle_injection(self) -> None:
        self.in_background(tr("screen.injecting", self.lang), self.debugger.cycle_injection)

    # -- edits ----------------------------------------------------------------------------------------------
    @when_idle
    def action_weights(self) -> None:
        self.app.push_screen(WeightsScreen(self.debugger, self, self.lang))

    def action_undo(self, asker: Screen | None = None) -> bool:
        """`asker`: another screen that asked (the weights browser), posted a RunWorded once it is worded."""
        return self.in_background(tr("screen.undoing", self.lang), self.debugger.undo, asker=asker)

    def action_redo(self, asker: Screen | None = None) -> bool:
        return self.in_background(tr("screen.redoing", self.lang), self.debugger.redo, asker=asker)

    def action_recompute(self) -> None:
        self.in_background(tr("screen.recomputing", self.lang), self.debugger.recompute)

    def on_restore_asked(self, message: RestoreAsked) -> None:
        self.in_background(tr("screen.restoring", self.lang), self.debugger.restore, message.unsaved)

    def on_weights_screen_edit_asked(self, message: WeightsScreen.EditAsked) -> None:
        edit = message.edit
        self._for(message, self.in_background(tr("screen.applying", self.lang, name=edit.name), self.debugger.apply,
                                              edit, keep_stale=message.keep_stale, asker=message.asker))

    def on_weights_screen_undo_asked(self, message: WeightsScreen.UndoAsked) -> None:
        self._for(message, self.action_undo(asker=message.asker))

    def on_weights_screen_redo_asked(self, message: WeightsScreen.RedoAsked) -> None:
        self._for(message, self.action_redo(asker=message.asker))

    def _for(self, message: WeightsScreen.Asked, started: bool) -> None:
        """A refused ask is worded back at once (a started one when its run is done)."""
        if not started:
            message.asker.post_message(RunWorded(None, self.message))

    # -- interventions and readings (tinyllm_tui/tui/widgets/readings.py) ------------------------------------
    @when_idle
    def action_intervene(self) -> None:
        start = self.debugger.intervention_start()
        self.app.push_screen(PromptScreen(tr("ask.intervene", self.lang), self._accept_intervention, start))

    def _accept_intervention(self, text: str) -> str | None:
        """A malformed spec is refused in the prompt; a good one replays in the runner."""
        problem = self.debugger.intervention_problem(text)
        if problem:
            return cause_words(problem, self.lang)
        self.in_background(tr("screen.intervening", self.lang), self.debugger.intervene, text)
        return None

    def action_save_interventions(self) -> None:
        """Into the scenario file's interventions: (a checkpoint opened directly has no file for them)."""
        result = self.debugger.save_interventions()
        self.app.offer(result)
        self.say(result)

    def action_lens(self) -> None:
        debugger = self.debugger

        def read(report):  # in the runner: the lens unembeds every residual stream of the round
            return debugger.lens()

        if self.runner.start(self, read, LensRead):
            self.set_status(tr("screen.lens", self.lang))
        else:
            self._refuse()

    def on_lens_read(self, message: LensRead) -> None:
        reading = message.result
        if isinstance(reading, BaseException):
            raise reading
        if isinstance(reading, Refused):  # no lens for this model, or the expect: check held the generator a moment
            self.say(reading)
            return
        run, frame = reading.run, self.debugger.frame
        title = tr("lens.title", self.lang, request=run.request, where=where(frame.phase, run.round, self.lang))
        self.set_status()
        self.app.push_screen(LensScreen(title, reading, self.lang))

    @when_idle
    def action_glance(self) -> None:
        glance = self.debugger.glance()
        screen = GlanceScreen(tr("glance.title", self.lang), glance, self.lang)
        self.app.push_screen(screen, lambda chosen: self._open_head(glance, chosen))

    @when_idle
    def action_routing(self) -> None:
        routings, index = self.debugger.routing()
        if not routings:
            self.set_status(tr("routing.none", self.lang))
            return
        self.app.push_screen(RoutingScreen(tr("routing.title", self.lang), routings, index, self.lang))

    def _open_head(self, glance: Glance, chosen: tuple[int, int] | None) -> None:
        """Enter on a head at a glance: its pattern becomes the current matrix."""
        step = None if chosen is None else glance.step(*chosen)
        if step is not None:
            self.move(self.debugger.goto_step, step)

    def action_before_after(self) -> None:
        window = self.matrix
        window.show_before = not window.show_before
        shown = "after" if not window.show_before else "dump" if window.showing_dump() else "before"
        self.set_status(tr(f"screen.{shown}", self.lang))
