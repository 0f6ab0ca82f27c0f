"""One runner for every long action on every screen: continue, search, the replay after an edit,
undo/redo, the injected bug, the diff, the load.

Quick moves (a step, back, go to) run here too, so that the frame a move publishes is built off the
UI thread: the UI thread only hands it to the widgets. A run is a thread worker that owns the
Debugger's generator while it works (the Debugger refuses other moves meanwhile); it reports
progress and its result as messages to the app, which hands them to the callbacks of whoever
started it, on the UI thread. Esc / ctrl+c cancel through `Debugger.cancel()`; one run at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message

Work = Callable[[Callable[[object], None]], object]  # work(report) -> result; report(progress) from the thread


@dataclass
class RunProgress(Message):
    progress: object
    report: Callable[[object], None]


@dataclass
class RunDone(Message):
    result: object  # what the work returned, or the exception that ended it
    then: Callable[[object], None]


class Runner:
    def __init__(self, app):
        self.app = app
        self.running = False
        self.quick = False  # the run in flight is a quick move: another may wait for it

    def start(self, work: Work, then: Callable[[object], None],
              report: Callable[[object], None] = lambda progress: None, *, quick: bool = False) -> bool:
        """Run `work` in a thread; `report(progress)` and then `then(result)` on the UI thread.
        False (nothing started) while another run is in flight."""
        if self.running:
            return False
        self.running, self.quick = True, quick
        app = self.app

        def run() -> None:
            try:
                result = work(lambda progress: app.post_message(RunProgress(progress, report)))
            except BaseException as error:  # handed to `then`: a load's bad file, a cancelled load
                result = error
            self.running = False
            app.post_message(RunDone(result, then))

        app.run_worker(run, thread=True, group="runner", exit_on_error=False)
        return True
