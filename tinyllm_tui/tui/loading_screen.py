"""The screen a scenario opens on while it loads: the file's name, how far loading has got, how to cancel.

Loading runs in the app's runner (tinyllm_tui.debugger.opening.open_file): the engine reports the
YAML's bytes parsed, then the weights converted, tensor by tensor, then the Debugger is prepared.
Esc or ctrl+c sets a flag that the next report turns into Cancelled. At the end the app gets
`Loaded`, with the Debugger or with what stopped the load (a bad file's error, Cancelled).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import ProgressBar, Static

from tinyllm_tui.debugger.opening import Loading, Opening, open_file
from tinyllm_tui.presentation.summaries import loading_progress
from tinyllm_tui.tui.i18n import tr
from tinyllm_tui.tui.runner import RunDone, RunProgress

__all__ = ["Loading", "LoadingScreen", "Opening"]


class LoadingScreen(Screen):
    BINDINGS = [Binding("escape", "cancel", "Cancel loading", show=False)]

    class Loaded(RunDone):
        """The load is over: `result` is the Debugger, or the exception that ended it (it bubbles to the app)."""

    def __init__(self, loading: Loading, prepare: Callable[[Opening], object], lang: str = "en"):
        super().__init__()
        self.loading, self.prepare, self.lang = loading, prepare, lang
        self.cancelled = threading.Event()

    def compose(self) -> ComposeResult:
        with Vertical(id="loading"):
            yield Static(tr("loading.file", self.lang, file=self.loading.file), id="loading-file")
            yield Static(tr("loading.reading", self.lang), id="loading-stage")
            yield ProgressBar(total=None, show_eta=False, id="loading-bar")
            yield Static(tr("loading.hint", self.lang), id="loading-hint")

    def on_mount(self) -> None:
        def work(report):
            return open_file(self.loading, self.prepare, lambda *progress: report(progress), self.cancelled)

        self.app.runner.start(self, work, self.Loaded)

    def on_run_progress(self, message: RunProgress) -> None:
        stage, done, total = message.progress
        self.query_one("#loading-stage", Static).update(loading_progress(stage, done, total, self.lang))
        self.query_one(ProgressBar).update(total=total or None, progress=done)

    def action_cancel(self) -> None:
        self.cancelled.set()
        self.query_one("#loading-hint", Static).update(tr("screen.cancelling", self.lang))
