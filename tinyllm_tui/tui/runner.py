"""One runner for every long action on every screen: continue, search, the replay after an edit,
undo/redo, the injected bug, the diff, the load, and the app's save (a scenario with a big weights file,
a GGUF-opened model's conversion: seconds of writing).

Quick moves (a step, back, go to) run here too, so that the frame a move publishes is built off the
UI thread: the UI thread only hands it to the widgets. A run is a thread worker that owns the
Debugger's generator while it works (the Debugger refuses other moves meanwhile). Its progress and its
result are typed messages, data only, posted to the screen that started it (the app, for a save), which
handles them in its own message loop: a screen still composing gets them once mounted, a screen being
removed (its widgets going first) never does. Which handler a result reaches is the message's type (a
`RunDone` subclass the screen declares), never a function carried along. Esc / ctrl+c cancel through
`Debugger.cancel()` (a save is never cancelled: it writes atomically or not at all); one run at a time.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.message import Message
from textual.message_pump import MessagePump

Work = Callable[[Callable[[object], None]], object]  # work(report) -> result; report(progress) from the thread


class RunProgress(Message):
    """How far the run in flight has got (a step, a loading stage): the screen that started it shows it."""

    def __init__(self, progress: object) -> None:
        super().__init__()
        self.progress = progress


class RunDone(Message):
    """The run is over: `result` is what the work returned, or the exception that ended it. A screen
    subclasses it once per kind of run it starts, and handles each subclass (`on_<name>`)."""

    def __init__(self, result: object) -> None:
        super().__init__()
        self.result = result


class Runner:
    def __init__(self, app):
        self.app = app
        self.running = False
        self.quick = False  # the run in flight is a quick move: another may wait for it

    def start(self, screen: MessagePump, work: Work, done: type[RunDone], *, quick: bool = False) -> bool:
        """Run `work` in a thread, posting `screen` a RunProgress for each report and `done(result)` at the end.
        False (nothing started) while another run is in flight."""
        if not (isinstance(done, type) and issubclass(done, RunDone)):
            raise TypeError(f"{done!r} is not a RunDone message type")
        if self.running:
            return False
        self.running, self.quick = True, quick

        def run() -> None:
            try:
                result = work(lambda progress: screen.post_message(RunProgress(progress)))
            except BaseException as error:  # handed to the screen: a load's bad file, a cancelled load
                result = error
            self.running = False
            screen.post_message(done(result))

        self.app.run_worker(run, thread=True, group="runner", exit_on_error=False)
        return True


class RunWorded(RunDone):
    """A run another screen started for this one (the main screen, under the weights browser) is over, or was
    refused, and that screen has worded its result: `text` is what its status line says."""

    def __init__(self, result: object, text: str = "") -> None:
        super().__init__(result)
        self.text = text
