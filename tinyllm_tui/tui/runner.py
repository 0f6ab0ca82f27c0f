"""One runner for every long action on every screen: continue, search, the replay after an edit,
undo/redo, the injected bug, the diff, the load.

Quick moves (a step, back, go to) run here too, so that the frame a move publishes is built off the
UI thread: the UI thread only hands it to the widgets. A run is a thread worker that owns the
Debugger's generator while it works (the Debugger refuses other moves meanwhile). Its progress and its
result are messages posted to the screen that started it, which handles them in its own message loop:
a screen still composing gets them once mounted, a screen being removed (its widgets going first) never
does. Esc / ctrl+c cancel through `Debugger.cancel()`; one run at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message
from textual.screen import Screen

Work = Callable[[Callable[[object], None]], object]  # work(report) -> result; report(progress) from the thread


@dataclass
class RunProgress(Message):
    """How far the run in flight has got (a step, a loading stage): the screen that started it shows it."""

    progress: object


@dataclass
class RunDone(Message):
    """The run is over: `result` is what the work returned, or the exception that ended it."""

    result: object
    then: Callable[[object], None]  # a method of the screen this is posted to


class RunsInBackground:
    """For a screen that starts runs: their result goes to the method it named, in its own message loop."""

    def on_run_done(self, message: RunDone) -> None:
        message.then(message.result)


class Runner:
    def __init__(self, app):
        self.app = app
        self.running = False
        self.quick = False  # the run in flight is a quick move: another may wait for it

    def start(self, screen: Screen, work: Work, then: Callable[[object], None], *, quick: bool = False) -> bool:
        """Run `work` in a thread, posting `screen` a RunProgress for each report and a RunDone for `then(result)`,
        a method of `screen`. False (nothing started) while another run is in flight."""
        if getattr(then, "__self__", None) is not screen:
            raise ValueError(f"{then!r} is not a method of {screen!r}: its result would reach another screen")
        if self.running:
            return False
        self.running, self.quick = True, quick

        def run() -> None:
            try:
                result = work(lambda progress: screen.post_message(RunProgress(progress)))
            except BaseException as error:  # handed to `then`: a load's bad file, a cancelled load
                result = error
            self.running = False
            screen.post_message(RunDone(result, then))

        self.app.run_worker(run, thread=True, group="runner", exit_on_error=False)
        return True
