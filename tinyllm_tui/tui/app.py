"""The step debugger's Textual app: a thin shell around the main screen and a headless Debugger.

The app owns what spans screens: loading (a `Loading` opens on the loading screen, which
builds the Debugger in a thread and gives way to the main screen), saving (written in the runner, told to
every screen by a message), and quitting (asking first when edits are unsaved; ctrl+c cancels a load or a
run in flight, or quits like q; both wait for a save in flight).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.app import App
from textual.binding import Binding

from tinyllm_tui.debugger import Debugger
from tinyllm_tui.debugger.opening import Loading, Opening
from tinyllm_tui.debugger.results import Reason, Refused, Result, Saved
from tinyllm_tui.presentation.cache_layout import row_words
from tinyllm_tui.tui.explanations import default_language
from tinyllm_tui.tui.i18n import tr
from tinyllm_tui.tui.result_words import describe
from tinyllm_tui.tui.loading_screen import LoadingScreen
from tinyllm_tui.tui.main_screen import DebuggerScreen
from tinyllm_tui.tui.messages import RestoreAsked, SaveOver, StatusSaid
from tinyllm_tui.tui.runner import RunDone, Runner
from tinyllm_tui.tui.served import Served
from tinyllm_tui.tui.widgets.dialogs import LATER, ChoiceScreen, Later, PromptScreen

HORIZONTAL = [(0, "-narrow"), (120, "-wide")]  # from 120 columns the KV cache sits beside the matrix


class Written(RunDone):
    """A save is over: `result` is the Saved, the OSError that failed the write, or the refusal."""


class WrittenToQuit(RunDone):
    """The save asked for on quitting is over: the app ends once the file is written."""


@dataclass(frozen=True)
class Saving:
    """The save in flight: the file it writes, and the save-as prompt that waits for its answer."""

    target: Path
    prompt: PromptScreen | None


class DebuggerApp(App):
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "tinyllm-tui"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = HORIZONTAL
    BINDINGS = [Binding("ctrl+c", "interrupt", "Cancel or quit", show=False, priority=True)]

    def __init__(self, scenario, backend=None, *, lang: str | None = None,
                 breakpoints: list[str] = (), inject: str | None = None, edits: list = (),
                 budget: int | None = None, against: tuple | None = None):
        """Args:
        scenario: an engine Scenario, loaded (the main screen at once), or a Loading, whose Opening then
            gives breakpoints, edits and budget.
        backend: the engine Backend (default: NumPy, float64).
        against: a --against dump (engine.compare.dump.Dump) and its --tolerance and --rtol (None: per dtype).
        """
        super().__init__()
        self.backend, self.inject, self.against = backend, inject, against
        self.lang = lang or default_language()
        self.served = Served.from_environment()  # run for a learner by `tinyllm-tui serve`
        self.runner = Runner(self)  # every long action of every screen
        self.loading = scenario if isinstance(scenario, Loading) else None
        self.load_error: BaseException | None = None  # what ended a load: launch raises it once the terminal is back
        self.debugger: Debugger | None = None
        self._main: DebuggerScreen | None = None  # made once the Debugger is (see `main`)
        self._saving: Saving | None = None
        if self.loading is None:
            self._adopt(self.prepare(Opening(scenario, breakpoints, edits, budget)))
        else:
            self.sub_title = Path(self.loading.file).name

    def prepare(self, opening: Opening) -> Debugger:
        """The Debugger on a loaded scenario (in any thread: it touches no widget)."""
        extra = {} if opening.budget is None else {"budget": opening.budget}
        debugger = Debugger(opening.scenario, self.backend, breakpoints=opening.breakpoints, inject=self.inject,
                            edits=opening.edits, against=self.against, quick_start=True, **extra)
        debugger.subscribe(row_words(self.lang))  # its first frame, built here rather than in the UI thread, in the view's words
        return debugger

    def _adopt(self, debugger: Debugger) -> None:
        opened = debugger.opened
        self.debugger, self.title, self.sub_title = debugger, opened.title, opened.name

    def on_mount(self) -> None:
        if self.loading is None:
            self._open(self.push_screen)
        else:
            self.push_screen(LoadingScreen(self.loading, self.prepare, self.lang))

    def on_loading_screen_loaded(self, event: LoadingScreen.Loaded) -> None:
        if isinstance(event.result, BaseException):
            self.load_error = event.result
            self.exit()
            return
        self._adopt(event.result)
        self._open(self.switch_screen)  # the main screen takes the loading screen's place

    def _open(self, show) -> None:
        """The main screen, then the question about an earlier session's unsaved edits, if it left any."""
        self._main = DebuggerScreen(self.debugger, self.lang)
        show(self._main)
        unsaved = self.debugger.found_unsaved
        if unsaved is not None:
            question = tr("ask.restore", self.lang, count=len(unsaved.edits), written=unsaved.written)
            answers = {key: tr(f"answer.{word}", self.lang) for key, word in
                       (("r", "restore"), ("d", "discard"), ("l", "later"))}
            self.push_screen(ChoiceScreen(question, answers, "l", self._after_restore_question, self.lang))

    def _after_restore_question(self, answer: str) -> None:
        if answer == "r":
            self.main.post_message(RestoreAsked(self.debugger.found_unsaved))
        elif answer == "d":
            self.debugger.drop_unsaved()
            self.notify_status(tr("screen.discarded", self.lang))

    @property
    def main(self) -> DebuggerScreen | None:
        """The main screen: the app made it and keeps it (never looked up in the screen stack), and tells it
        things by messages (tinyllm_tui.tui.messages), which it handles once mounted, in its own loop."""
        return self._main

    def notify_status(self, message: str) -> None:
        """Say something on the main screen's status line (it shows when that screen is back on top)."""
        self.main.post_message(StatusSaid(message))

    # -- saving ------------------------------------------------------------------------------------------
    def action_save(self) -> None:
        count, lang = self.debugger.unsaved(), self.lang
        if not count:
            self.notify_status(describe(Refused(Reason.NOTHING_TO_SAVE), lang))
            return
        question = tr("ask.save", lang, count=count, path=self.debugger.opened.path)
        answers = {"y": tr("answer.save", lang), "n": tr("answer.cancel", lang)}
        self.push_screen(ChoiceScreen(question, answers, "n",
                                      lambda answer: self._save_to(None) if answer == "y" else None, lang))

    def action_save_as(self) -> None:
        question = "ask.save_as.served" if self.served else "ask.save_as"
        prompt = PromptScreen(tr(question, self.lang), lambda text: self._accept_save_as(text, prompt))
        self.push_screen(prompt)

    def _accept_save_as(self, text: str, prompt: PromptScreen) -> str | Later:
        """What is wrong with the file name (the prompt stays open to correct it), or LATER: the save's answer."""
        if self.served:  # a bare name in the session's folder, nothing else
            target = Served.save_as_target(text)
            if target is None:
                return tr("screen.bad_name", self.lang, text=text)
        else:
            target = Path(text).expanduser()
            if not text or target.is_dir() or not target.parent.is_dir():
                return tr("screen.bad_path", self.lang, text=text)
        return LATER if self._save_to(target, prompt=prompt) else tr("refused.busy", self.lang)

    def offer(self, result: Result) -> None:
        """Served: the file a save wrote, and the weight file it names, offered as a browser download."""
        if self.served and isinstance(result, Saved):
            source = self.debugger.opened.weights_file
            self.served.deliver(self, [Path(result.path), *([] if source is None else [source])])

    def _save_to(self, path: Path | None, done: type[RunDone] = Written, prompt: PromptScreen | None = None) -> bool:
        """Write the edited weights in the runner, off the UI thread; `done` brings the outcome back here.
        False, and said, while another run is in flight."""
        debugger = self.debugger
        if not self.runner.start(self, lambda report: debugger.save(path), done):
            self.notify_status(tr("refused.busy", self.lang))
            return False
        self._saving = Saving(Path(path or debugger.opened.path), prompt)
        self.notify_status(tr("screen.saving", self.lang, path=self._saving.target))
        return True

    def on_written(self, message: Written) -> None:
        self._tell_saved(message.result)

    def on_written_to_quit(self, message: WrittenToQuit) -> None:
        if self._tell_saved(message.result):
            self.exit()

    def _tell_saved(self, result: object) -> bool:
        """Tell every screen (and the save-as prompt) what the save did; True when the file is written. A write
        that failed changed nothing: the edits stay in memory, unsaved."""
        saving, self._saving = self._saving, None
        problem = self._save_problem(result, saving.target)
        if problem is None:
            self.sub_title = self.debugger.opened.name
            self.offer(result)
        told = SaveOver(describe(result, self.lang) if problem is None else problem, problem is None)
        for screen in self.screen_stack:  # those showing the weights or the status line handle it
            screen.post_message(told)
        if saving.prompt is not None:  # stays open with the problem, to correct the name
            saving.prompt.post_message(PromptScreen.Answered(problem))
        return problem is None

    def _save_problem(self, result: object, target: Path) -> str | None:
        """Why a save wrote nothing, in one line (None: it wrote)."""
        if isinstance(result, OSError):
            return tr("screen.not_saved", self.lang, error=result.strerror, path=target)
        if isinstance(result, BaseException):
            raise result
        return describe(result, self.lang) if isinstance(result, Refused) else None

    # -- quitting ----------------------------------------------------------------------------------------
    async def action_interrupt(self) -> None:
        if self._waits_for_save():
            return
        if self.debugger is None:
            self._cancel_loading()
        elif self.debugger.cancel():
            self.notify_status(tr("screen.cancelling", self.lang))
        else:
            await self.action_quit()

    async def action_quit(self) -> None:
        if self._waits_for_save():
            return
        if self.debugger is None:
            self._cancel_loading()
            return
        self.debugger.close()  # weights equal to the file leave no autosave behind
        count = self.debugger.unsaved()
        if not count:
            self.exit()
            return
        answers = {key: tr(f"answer.{word}", self.lang) for key, word in
                   (("s", "save_quit"), ("q", "quit"), ("c", "cancel"))}
        self.push_screen(ChoiceScreen(tr("ask.quit", self.lang, count=count), answers, "c",
                                      self._after_quit_question, self.lang))

    def _after_quit_question(self, answer: str) -> None:
        if answer == "q":
            self.debugger.drop_unsaved()  # quitting without saving, on purpose
            self.exit()
        elif answer == "s":
            self._save_to(None, WrittenToQuit)

    def _waits_for_save(self) -> bool:
        """A write in flight cannot be cancelled, and quitting then would race it: both wait until it is over."""
        if self._saving is not None:
            self.notify_status(tr("screen.saving_quit", self.lang, path=self._saving.target))
        return self._saving is not None

    def _cancel_loading(self) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.action_cancel()


def launch(loading: Loading, backend, *, lang: str | None, inject: str | None = None,
           against: tuple | None = None) -> int:
    """Run the app on a file still to load; a load that failed or was cancelled is raised here, after the
    app has given the terminal back, so the CLI reports it as it reports any bad input. Returns the app's
    exit status: non-zero when it ended on an error (Textual has printed its traceback)."""
    app = DebuggerApp(loading, backend, lang=lang, inject=inject, against=against)
    app.run()
    if app.load_error is not None:
        raise app.load_error
    return app.return_code or 0
