"""The step debugger's Textual app: a thin shell around the main screen and a headless Debugger.

The app owns what spans screens: loading (a `Loading` opens on the loading screen, which
builds the Debugger in a thread and gives way to the main screen), saving, and quitting
(asking first when edits are unsaved; ctrl+c cancels a load or a run in flight, or quits like q).
"""

from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.binding import Binding

from engine import Backend, Scenario
from engine.loading.edits import Edit

from tinyllm_tui.debugger.debugger import Debugger
from tinyllm_tui.tui.explanations import default_language
from tinyllm_tui.tui.loading_screen import Loading, LoadingScreen, Opening
from tinyllm_tui.tui.main_screen import DebuggerScreen
from tinyllm_tui.tui.widgets.dialogs import ChoiceScreen, PromptScreen

HORIZONTAL = [(0, "-narrow"), (120, "-wide")]  # from 120 columns the KV cache sits beside the matrix


class DebuggerApp(App):
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "tinyllm-tui"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = HORIZONTAL
    BINDINGS = [Binding("ctrl+c", "interrupt", "Cancel or quit", show=False, priority=True)]

    def __init__(self, scenario: Scenario | Loading, backend: Backend | None = None, *, lang: str | None = None,
                 breakpoints: list[str] = (), inject: str | None = None, edits: list[Edit] = (),
                 budget: int | None = None, against: tuple | None = None):
        """Args:
        scenario: loaded (the main screen at once), or a Loading, whose Opening then gives breakpoints,
            edits and budget.
        against: a --against dump (engine.compare.dump.Dump) and its --tolerance and --rtol (None: per dtype).
        """
        super().__init__()
        self.backend, self.inject, self.against = backend, inject, against
        self.lang = lang or default_language()
        self.loading = scenario if isinstance(scenario, Loading) else None
        self.load_error: BaseException | None = None  # what ended a load: launch raises it once the terminal is back
        self.debugger: Debugger | None = None
        if self.loading is None:
            self._adopt(self.prepare(Opening(scenario, breakpoints, edits, budget)))
        else:
            self.sub_title = Path(self.loading.file).name

    def prepare(self, opening: Opening) -> Debugger:
        """The Debugger on a loaded scenario (in any thread: it touches no widget)."""
        extra = {} if opening.budget is None else {"budget": opening.budget}
        return Debugger(opening.scenario, self.backend, breakpoints=opening.breakpoints, inject=self.inject,
                        edits=opening.edits, against=self.against, **extra)

    def _adopt(self, debugger: Debugger) -> None:
        scenario = debugger.file_scenario
        self.debugger, self.title, self.sub_title = debugger, scenario.title, Path(scenario.path).name

    def on_mount(self) -> None:
        if self.loading is None:
            self._open(self.push_screen)
        else:
            self.push_screen(LoadingScreen(self.loading.file, self.loading.load, self.prepare, self.lang))

    def on_loading_screen_loaded(self, event: LoadingScreen.Loaded) -> None:
        if isinstance(event.result, BaseException):
            self.load_error = event.result
            self.exit()
            return
        self._adopt(event.result)
        self._open(self.switch_screen)  # the main screen takes the loading screen's place

    def _open(self, show) -> None:
        """The main screen, then the question about an earlier session's unsaved edits, if it left any."""
        show(DebuggerScreen(self.debugger, self.lang))
        unsaved = self.debugger.found_unsaved
        if unsaved is not None:
            count = len(unsaved.edits)
            question = (f"An earlier session left {count} unsaved weight edit{'s' if count != 1 else ''} "
                        f"({unsaved.written}) for this scenario.")
            answers = {"r": "restore them", "d": "discard them", "l": "decide later (keep them)"}
            self.push_screen(ChoiceScreen(question, answers, "l", self._after_restore_question))

    def _after_restore_question(self, answer: str) -> None:
        if answer == "r":
            self.main.in_background("restoring the unsaved edits…", self.debugger.restore, self.debugger.found_unsaved)
        elif answer == "d":
            self.debugger.drop_unsaved()
            self.notify_status("discarded the unsaved edits of the earlier session")

    @property
    def main(self) -> DebuggerScreen:
        return next(s for s in self.screen_stack if isinstance(s, DebuggerScreen))

    def notify_status(self, message: str) -> None:
        """Say something on the main screen's status line (it shows when that screen is back on top)."""
        self.main.set_status(message)

    def on_weights_screen_edited(self, event) -> None:
        self.notify_status(event.message)

    # -- saving ------------------------------------------------------------------------------------------
    def action_save(self) -> None:
        count = self.debugger.unsaved()
        if not count:
            self.notify_status("nothing to save: the weights equal the file")
            return
        question = f"Write {count} edited number{'s' if count != 1 else ''} into {self.debugger.file_scenario.path}?"
        self.push_screen(ChoiceScreen(question, {"y": "save", "n": "cancel"}, "n",
                                      lambda answer: self._save_to(None) if answer == "y" else None))

    def action_save_as(self) -> None:
        self.push_screen(PromptScreen("Save the scenario with the edited weights as:", self._accept_save_as))

    def _accept_save_as(self, text: str) -> str | None:
        target = Path(text).expanduser()
        if not text or target.is_dir() or not target.parent.is_dir():
            return f"cannot write {text!r}: give a file name in an existing folder"
        return self._save_to(target)

    def _save_to(self, path: Path | None) -> str | None:
        """None when saved; else what went wrong (the edits stay in memory)."""
        try:
            message = self.debugger.save(path)
        except OSError as error:
            problem = f"not saved: {error.strerror} ({path or self.debugger.file_scenario.path})"
            self.notify_status(problem)
            return problem
        self.sub_title = Path(self.debugger.file_scenario.path).name
        self.notify_status(message)
        if hasattr(self.screen, "refresh_matrix"):
            self.screen.refresh_matrix(message)
        return None

    # -- quitting ----------------------------------------------------------------------------------------
    async def action_interrupt(self) -> None:
        if self.debugger is None:
            self._cancel_loading()
        elif self.debugger.cancel():
            self.notify_status("cancelling…")
        else:
            await self.action_quit()

    async def action_quit(self) -> None:
        if self.debugger is None:
            self._cancel_loading()
            return
        self.debugger.cancel()
        count = self.debugger.unsaved()
        if not count:
            self.exit()
            return
        question = f"{count} edited number{'s' if count != 1 else ''} not saved."
        answers = {"s": "save and quit", "q": "quit without saving", "c": "cancel"}
        self.push_screen(ChoiceScreen(question, answers, "c", self._after_quit_question))

    def _after_quit_question(self, answer: str) -> None:
        if answer == "q":
            self.debugger.drop_unsaved()  # quitting without saving, on purpose
        if answer == "q" or (answer == "s" and self._save_to(None) is None):
            self.exit()

    def _cancel_loading(self) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.action_cancel()


def launch(loading: Loading, backend: Backend, *, lang: str | None, inject: str | None = None,
           against: tuple | None = None) -> None:
    """Run the app on a file still to load; a load that failed or was cancelled is raised here, after the
    app has given the terminal back, so the CLI reports it as it reports any bad input."""
    app = DebuggerApp(loading, backend, lang=lang, inject=inject, against=against)
    app.run()
    if app.load_error is not None:
        raise app.load_error
