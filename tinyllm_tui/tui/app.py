"""The step debugger's Textual app: a thin shell around the main screen and a headless Debugger.

The app owns what spans screens: loading (a `Loading` opens on the loading screen, which
builds the Debugger in a thread and gives way to the main screen), saving, and quitting
(asking first when edits are unsaved; ctrl+c cancels a load or a run in flight, or quits like q).
"""

from __future__ import annotations

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
from tinyllm_tui.tui.messages import RestoreAsked, StatusSaid, WeightsSaved
from tinyllm_tui.tui.runner import Runner
from tinyllm_tui.tui.served import Served
from tinyllm_tui.tui.widgets.dialogs import ChoiceScreen, PromptScreen

HORIZONTAL = [(0, "-narrow"), (120, "-wide")]  # from 120 columns the KV cache sits beside the matrix


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
        self.push_screen(PromptScreen(tr(question, self.lang), self._accept_save_as))

    def _accept_save_as(self, text: str) -> str | None:
        if self.served:  # a bare name in the session's folder, nothing else
            target = Served.save_as_target(text)
            return tr("screen.bad_name", self.lang, text=text) if target is None else self._save_to(target)
        target = Path(text).expanduser()
        if not text or target.is_dir() or not target.parent.is_dir():
            return tr("screen.bad_path", self.lang, text=text)
        return self._save_to(target)

    def offer(self, result: Result) -> None:
        """Served: the file a save wrote, and the weight file it names, offered as a browser download."""
        if self.served and isinstance(result, Saved):
            source = self.debugger.opened.weights_file
            self.served.deliver(self, [Path(result.path), *([] if source is None else [source])])

    def _save_to(self, path: Path | None) -> str | None:
        """None when saved; else what went wrong (the edits stay in memory)."""
        try:
            result = self.debugger.save(path)
        except OSError as error:
            problem = tr("screen.not_saved", self.lang, error=error.strerror,
                         path=path or self.debugger.opened.path)
            self.notify_status(problem)
            return problem
        if isinstance(result, Refused):
            self.notify_status(describe(result, self.lang))
            return describe(result, self.lang)
        self.sub_title = self.debugger.opened.name
        self.offer(result)
        for screen in self.screen_stack:  # those showing the weights handle it
            screen.post_message(WeightsSaved(describe(result, self.lang)))
        return None

    # -- quitting ----------------------------------------------------------------------------------------
    async def action_interrupt(self) -> None:
        if self.debugger is None:
            self._cancel_loading()
        elif self.debugger.cancel():
            self.notify_status(tr("screen.cancelling", self.lang))
        else:
            await self.action_quit()

    async def action_quit(self) -> None:
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
        if answer == "q" or (answer == "s" and self._save_to(None) is None):
            self.exit()

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
