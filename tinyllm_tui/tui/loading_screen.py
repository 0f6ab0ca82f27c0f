"""The screen a scenario opens on while it loads: the file's name, how far loading has got, how to cancel.

Loading runs in a thread worker: the engine reports through `engine.progress` (the YAML's bytes
parsed, then the weights converted, tensor by tensor), then the Debugger is prepared. Each report
comes to this screen as a message; the thread never touches a widget. Esc or ctrl+c sets a flag
that the next report turns into `engine.progress.Cancelled`. At the end the app gets `Loaded`,
with the Debugger or with what stopped the load (a bad file's error, Cancelled).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import ProgressBar, Static

from engine import Scenario
from engine.loading.edits import Edit
from engine.progress import Cancelled, listening
from tinyllm_tui.presentation.summaries import loading_progress

from tinyllm_tui.debugger.debugger import Debugger
from tinyllm_tui.tui.i18n import tr

PREPARING = "preparing"  # the Debugger's first state: no count to show


@dataclass(frozen=True)
class Opening:
    """What the debugger opens with once the file is read: the scenario and what depends on it."""

    scenario: Scenario
    breakpoints: list[str] = ()
    edits: list[Edit] = ()
    budget: int | None = None


@dataclass(frozen=True)
class Loading:
    """A file still to load: `load()` reads it (in a thread, reporting through engine.progress)."""

    file: str
    load: Callable[[], Opening]


def stage_text(stage: str, done: int, total: int) -> str:
    return "preparing the debugger" if stage == PREPARING else loading_progress(stage, done, total)


class LoadingScreen(Screen):
    BINDINGS = [Binding("escape", "cancel", "Cancel loading", show=False)]

    @dataclass
    class Progress(Message):
        stage: str
        done: int
        total: int

    @dataclass
    class Loaded(Message):
        """The load is over: `result` is the Debugger, or the exception that ended it."""

        result: Debugger | BaseException

    def __init__(self, file: str, load: Callable[[], Opening], prepare: Callable[[Opening], Debugger],
                 lang: str = "en"):
        super().__init__()
        self.file, self.load, self.prepare, self.lang = file, load, prepare, lang
        self.cancelled = threading.Event()

    def compose(self) -> ComposeResult:
        with Vertical(id="loading"):
            yield Static(f"{tr('Loading', self.lang)} {self.file}", id="loading-file")
            yield Static(tr("reading the file", self.lang), id="loading-stage")
            yield ProgressBar(total=None, show_eta=False, id="loading-bar")
            yield Static(tr("Esc or ctrl+c cancels", self.lang), id="loading-hint")

    def on_mount(self) -> None:
        self._run()

    @work(thread=True)
    def _run(self) -> None:
        try:
            with listening(self._report):
                opening = self.load()
                self._report(PREPARING, 0, 0)
                result = self.prepare(opening)
            if self.cancelled.is_set():  # pressed while the debugger was prepared: honoured all the same
                raise Cancelled
        except BaseException as error:  # the app ends and the CLI says it: one line for a bad file
            result = error
        self.post_message(self.Loaded(result))

    def _report(self, stage: str, done: int, total: int) -> None:
        """The engine's listener, in the loading thread."""
        if self.cancelled.is_set():
            raise Cancelled
        self.post_message(self.Progress(stage, done, total))

    def on_loading_screen_progress(self, event: Progress) -> None:
        self.query_one("#loading-stage", Static).update(tr(stage_text(event.stage, event.done, event.total), self.lang))
        bar = self.query_one(ProgressBar)
        bar.update(total=event.total or None, progress=event.done)

    def action_cancel(self) -> None:
        self.cancelled.set()
        self.query_one("#loading-hint", Static).update(tr("cancelling…", self.lang))
