"""The lower panels: explanation, the current operator's inputs, and the expect: tables."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from tinyllm_tui.debugger.frame import Frame, OperandCorner
from tinyllm_tui.presentation.numbers import format_number
from tinyllm_tui.presentation.summaries import expect_summary, shape_text
from tinyllm_tui.tui.explanations import explain
from tinyllm_tui.tui.i18n import cause_words, tr
from tinyllm_tui.tui.widgets.textlines import TextLines


class ExplanationPanel(TextLines):
    """Wrapped here and drawn line by line: a step repaints the lines of text, not the blank panel below."""

    frame: reactive[Frame | None] = reactive(None, always_update=True)
    lang = "en"
    _wrapped: tuple = (None, 0, [])  # (frame, width, lines)
    KEPT = 256  # paragraphs kept wrapped: an operator's texts are the same in every layer

    def __init__(self) -> None:
        super().__init__()
        self._paragraphs: dict[tuple[str, str, int], list[Text]] = {}

    def _lines(self) -> list[Text]:
        width = max(self.line_size.width, 1)
        if self._wrapped[0] is not self.frame or self._wrapped[1] != width:
            lines = []
            for heading, text in explain(self.frame, self.lang) if self.frame is not None else ():
                lines.extend(self._paragraph(heading, text, width))
            self._wrapped = (self.frame, width, lines)
        return self._wrapped[2]

    def _paragraph(self, heading: str, text: str, width: int) -> list[Text]:
        key = (heading, text, width)
        if key not in self._paragraphs:
            if len(self._paragraphs) >= self.KEPT:
                self._paragraphs.clear()
            self._paragraphs[key] = Text.assemble((f"{heading}: ", "bold cyan"), text).wrap(self.app.console, width)
        return self._paragraphs[key]

    def line_count(self) -> int | None:
        return min(len(self._lines()), self.size.height) if self.size.height else None

    def text_lines(self) -> list[Text]:
        return self._lines()  # drawn, never changed: no copies


class InputsPanel(Widget):
    """Each array the operator read: its name, shape and top-left corner (the matrix view pages the output)."""

    frame: reactive[Frame | None] = reactive(None, always_update=True)
    lang = "en"

    def render(self) -> Text:
        if self.frame is None:
            return Text("")
        if not self.frame.inputs:
            return Text(tr("inputs.none", self.lang))
        return Text("\n").join(self._corner(operand) for operand in self.frame.inputs)

    def _corner(self, operand: OperandCorner) -> Text:
        rows, cols = operand.corner.shape
        more = "" if (rows, cols) == operand.shape[-2:] else tr("inputs.corner", self.lang, rows=rows, cols=cols)
        text = Text(f"{operand.name} · {shape_text(operand.shape)}{more}\n", style="bold")
        for label, values in zip(operand.rows, operand.corner):
            text.append(f"  {label}: " + " ".join(format_number(float(x)) for x in values) + "\n")
        return text


class ExpectPanel(VerticalScroll):
    """Every expect: table of the scenario with how many of its printed cells agree."""

    outcomes = reactive(None, init=False, always_update=True)  # tuple of engine Outcomes; None while checking
    lang = "en"

    def compose(self):
        yield Static()

    def watch_outcomes(self, outcomes) -> None:
        static, lang = self.query_one(Static), self.lang
        if outcomes is None:
            static.update(Text(tr("expect.checking", lang)))
            return
        if not outcomes:
            static.update(Text(tr("expect.none", lang)))
            return
        table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0))
        for heading in ("", tr("expect.operator", lang), tr("expect.agree", lang), tr("expect.note", lang)):
            table.add_column(heading)
        for outcome in outcomes:
            mark, style = ("✓", "green") if outcome.passed else ("✗", "red")
            problem = None if outcome.problem is None else cause_words(outcome.problem, lang)
            table.add_row(Text(mark, style=style), cause_words(outcome.expectation.title, lang),
                          f"{outcome.agreeing}/{len(outcome.cells)}", problem or outcome.expectation.note)
        static.update(Group(Text(expect_summary(outcomes, lang), style="bold"), table))
