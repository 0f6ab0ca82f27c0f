"""Modal screens: help, a one-line prompt, a one-key choice, and the breakpoint list."""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from tinyllm_tui.debugger.results import Result
from tinyllm_tui.tui.i18n import tr
from tinyllm_tui.tui.result_words import describe
from tinyllm_tui.tui.widgets.linelist import LineList


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def __init__(self, bindings: list[Binding], lang: str):
        super().__init__()
        self._listed, self._lang = bindings, lang

    def _breakpoint_forms(self) -> Table:
        """A breakpoint's forms and what each means, in two columns: a meaning wraps beside its form."""
        table = Table(box=None, show_header=False)
        table.add_column(style="italic cyan", max_width=40)
        table.add_column(style="italic")
        for line in tr("help.break_forms", self._lang).splitlines():
            table.add_row(*line.split("\t"))
        return table

    def compose(self) -> ComposeResult:
        table = Table(title=tr("help.keys", self._lang), title_justify="left", box=None)
        table.add_column(tr("help.key", self._lang), style="bold cyan")
        table.add_column(tr("help.action", self._lang))
        for binding in self._listed:
            keys = ", ".join(self.app.get_key_display(Binding(key.strip(), "")) for key in binding.key.split(","))
            table.add_row(keys, tr(binding.description, self._lang))
        with VerticalScroll(id="help"):
            yield Static(table)
            yield Static(Text(tr("help.windows", self._lang)))
            yield Static(Text(tr("help.mouse", self._lang)))
            yield Static(Text(tr("help.breakpoints", self._lang), style="italic"))
            yield Static(self._breakpoint_forms())
            yield Static(Text(tr("help.close", self._lang), style="dim"))


class Later:
    """What a prompt's `accept` returns when the answer comes afterwards, posted as a PromptScreen.Answered."""


LATER = Later()


class PromptScreen(ModalScreen[None]):
    """Asks for one line; `accept` returns an error message (stay open), None (close), or LATER: the prompt
    stays open until a PromptScreen.Answered says which (a move run off the UI thread that may refuse)."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel")]

    class Answered(Message):
        """The answer to a line `accept` sent away: an error to show, or None to close."""

        def __init__(self, error: str | None) -> None:
            super().__init__()
            self.error = error

    def __init__(self, question: str, accept: Callable[[str], str | Later | None], value: str = ""):
        """Args: value: the line as it starts (the cursor at its end)."""
        super().__init__()
        self._question, self._accept, self._value = question, accept, value

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt"):
            yield Static(self._question)
            yield Input(self._value, select_on_focus=False)  # what is typed goes after the value, not over it
            yield Static(id="prompt-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        error = self._accept(event.value.strip())
        if error is not LATER:
            self._answer(error)

    def on_prompt_screen_answered(self, message: Answered) -> None:
        self._answer(message.error)

    def _answer(self, error: str | None) -> None:
        if error:
            self.query_one("#prompt-error", Static).update(Text(error, style="bold red"))
        elif self.is_active:  # not closed with Escape while the answer was on its way
            self.dismiss()


class ChoiceScreen(ModalScreen[None]):
    """A question answered with one key; Escape gives the default answer."""

    def __init__(self, question: str, answers: dict[str, str], default: str, then: Callable[[str], None],
                 lang: str = "en"):
        """Args:
        answers: key -> what it does, e.g. {"r": "recompute the cache", "k": "keep the stale cache"}.
        default: the key Escape stands for.
        then: called with the answer once the question has closed (whoever opened it may be gone).
        """
        super().__init__()
        self._question, self._answers, self._default, self._then = question, answers, default, then
        self._lang = lang
        for key in [*answers, "escape"]:  # priority: the app's own keys must not answer for the user
            self._bindings.bind(key, f"answer({key!r})", priority=True)

    def compose(self) -> ComposeResult:
        choices = "   ".join(f"[{key}] {text}" for key, text in self._answers.items())
        with Vertical(id="prompt"):
            yield Static(Text(self._question, style="bold"))
            yield Static(Text(f"{choices}   ({tr('answer.escape', self._lang, answer=self._answers[self._default])})"))

    def action_answer(self, key: str) -> None:
        self.dismiss()
        self._then(self._default if key == "escape" else key)


class BreakpointsScreen(ModalScreen[None]):
    """Every breakpoint; d/Delete removes the highlighted one, C removes all."""

    BINDINGS = [
        Binding("escape,q,L", "dismiss", "Close"),
        Binding("d,delete", "remove", "Delete"),
        Binding("C", "clear", "Clear all"),
    ]

    def __init__(self, texts: Callable[[], list[str]], remove: Callable[[str], Result], clear: Callable[[], Result],
                 lang: str = "en"):
        """Args: texts lists the breakpoints now; remove and clear change them and return what they did."""
        super().__init__()
        self._texts, self._remove, self._clear, self._lang = texts, remove, clear, lang

    def compose(self) -> ComposeResult:
        with Vertical(id="breakpoints"):
            yield Static(Text(tr("breakpoints.title", self._lang), style="bold"))
            yield LineList(id="breakpoint-list")
            yield Static(id="breakpoint-message")

    def on_mount(self) -> None:
        self._refresh("")
        self.query_one(LineList).focus()

    def _refresh(self, message: str) -> None:
        texts = self._texts()
        lines = tuple((text, Text(f"● {text}")) for text in texts) or (
            (None, Text(tr("breakpoints.none", self._lang), style="dim")),)
        listing = self.query_one(LineList)
        listing.show(lines, listing.highlighted_key if listing.highlighted_key in texts else (texts or [None])[0])
        self.query_one("#breakpoint-message", Static).update(message)

    def action_remove(self) -> None:
        key = self.query_one(LineList).highlighted_key
        self._refresh(describe(self._remove(key), self._lang) if key is not None
                      else tr("breakpoints.nothing", self._lang))

    def action_clear(self) -> None:
        self._refresh(describe(self._clear(), self._lang))
