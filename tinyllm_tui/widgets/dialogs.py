"""Modal screens: help, and a one-line prompt (go to, add breakpoint)."""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from engine.breakpoints import __doc__ as BREAKPOINT_SYNTAX


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def __init__(self, bindings: list[Binding]):
        super().__init__()
        self._listed = bindings

    def compose(self) -> ComposeResult:
        table = Table(title="Keys", title_justify="left", box=None)
        table.add_column("key", style="bold cyan")
        table.add_column("action")
        for binding in self._listed:
            keys = ", ".join(self.app.get_key_display(Binding(key.strip(), "")) for key in binding.key.split(","))
            table.add_row(keys, binding.description)
        with VerticalScroll(id="help"):
            yield Static(table)
            yield Static(Text("Mouse: click an operator in the list to go there; click a tab to switch panels."))
            yield Static(Text(BREAKPOINT_SYNTAX.strip(), style="italic"))
            yield Static(Text("Esc, q or ? closes this screen.", style="dim"))


class PromptScreen(ModalScreen[None]):
    """Asks for one line; `accept` returns an error message (stay open) or None (close)."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel")]

    def __init__(self, question: str, accept: Callable[[str], str | None]):
        super().__init__()
        self._question, self._accept = question, accept

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt"):
            yield Static(self._question)
            yield Input()
            yield Static(id="prompt-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        error = self._accept(event.value.strip())
        if error:
            self.query_one("#prompt-error", Static).update(Text(error, style="bold red"))
        else:
            self.dismiss()


class ChoiceScreen(ModalScreen[None]):
    """A question answered with one key; Escape gives the default answer."""

    def __init__(self, question: str, answers: dict[str, str], default: str, then: Callable[[str], None]):
        """Args:
        answers: key -> what it does, e.g. {"r": "recompute the cache", "k": "keep the stale cache"}.
        default: the key Escape stands for.
        then: called with the answer once the question has closed (whoever opened it may be gone).
        """
        super().__init__()
        self._question, self._answers, self._default, self._then = question, answers, default, then
        for key in [*answers, "escape"]:  # priority: the app's own keys must not answer for the user
            self._bindings.bind(key, f"answer({key!r})", priority=True)

    def compose(self) -> ComposeResult:
        choices = "   ".join(f"[{key}] {text}" for key, text in self._answers.items())
        with Vertical(id="prompt"):
            yield Static(Text(self._question, style="bold"))
            yield Static(Text(f"{choices}   (Esc: {self._answers[self._default]})"))

    def action_answer(self, key: str) -> None:
        self.dismiss()
        self._then(self._default if key == "escape" else key)
