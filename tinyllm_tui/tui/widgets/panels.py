"""The lower panels: explanation, the current operator's inputs, and the expect: tables."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from engine import OpState, to_host
from engine.compare.expect import Outcome
from tinyllm_tui.presentation.summaries import expect_summary, shape_text

from tinyllm_tui.tui.explanations import explain
from tinyllm_tui.presentation.numbers import format_number

CORNER = 4  # rows and columns of each input shown in the inputs panel


class ExplanationPanel(Widget):
    """Rendered in place (no layout pass): a step changes the text, never the panel's size."""

    state: reactive[OpState | None] = reactive(None, always_update=True)
    lang = "en"

    def render(self) -> Text:
        if self.state is None:
            return Text("")
        return Text("\n").join(Text.assemble((f"{heading}: ", "bold cyan"), text)
                               for heading, text in explain(self.state, self.lang))


class InputsPanel(Widget):
    """Each array the operator read: its name, shape and top-left corner (the matrix view pages the output)."""

    state: reactive[OpState | None] = reactive(None, always_update=True)

    def render(self) -> Text:
        if self.state is None:
            return Text("")
        if not self.state.inputs:
            return Text("This operator reads no array (it is computed from positions only).")
        return Text("\n").join(_corner(operand) for operand in self.state.inputs)


def _corner(operand) -> Text:
    values = to_host(operand.values)
    if values.ndim == 1:
        values = values[None, :]
    rows, cols = min(values.shape[0], CORNER), min(values.shape[1], CORNER)
    more = "" if (rows, cols) == values.shape else f" (corner {rows}×{cols})"
    text = Text(f"{operand.name} · {shape_text(values.shape)}{more}\n", style="bold")
    for i in range(rows):
        label = operand.rows[i]
        text.append(f"  {label}: " + " ".join(format_number(float(x)) for x in values[i, :cols]) + "\n")
    return text


class ExpectPanel(VerticalScroll):
    """Every expect: table of the scenario with how many of its printed cells agree."""

    outcomes: reactive[tuple[Outcome, ...] | None] = reactive(None, init=False, always_update=True)

    def compose(self):
        yield Static()

    def watch_outcomes(self, outcomes: tuple[Outcome, ...] | None) -> None:
        static = self.query_one(Static)
        if outcomes is None:
            static.update(Text("Checking the expect: tables…"))
            return
        if not outcomes:
            static.update(Text("This scenario has no expect: tables."))
            return
        table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0))
        for heading in ("", "operator", "agree", "printed in the text"):
            table.add_column(heading)
        for outcome in outcomes:
            mark, style = ("✓", "green") if outcome.passed else ("✗", "red")
            table.add_row(Text(mark, style=style), outcome.expectation.describe(),
                          f"{outcome.agreeing}/{len(outcome.cells)}", outcome.problem or outcome.expectation.note)
        static.update(Group(Text(expect_summary(outcomes), style="bold"), table))
