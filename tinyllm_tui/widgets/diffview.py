"""The full-vs-cached diff: per operator of every round, the largest |cached − full|."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from engine.diff import TOLERANCE, OpDiff, first_divergence
from engine.session import INJECTIONS


def summary(diffs: list[OpDiff], inject: str | None) -> Text:
    text = Text()
    if inject:
        text.append(f"injected bug {inject}: {INJECTIONS[inject]}\n", style="bold yellow")
    first = first_divergence(diffs)
    if first is None:
        worst = max((d.max_abs for d in diffs), default=0.0)
        text.append(f"✓ cached equals full recompute: max |Δ| = {worst:.3e} ≤ {TOLERANCE:g}", style="bold green")
    else:
        text.append(f"✗ first divergence: {first.describe()}", style="bold red")
    return text


class DiffScreen(ModalScreen[int | None]):
    """Dismisses with the step of the chosen operator (Enter), or None."""

    BINDINGS = [Binding("escape,d,q", "dismiss(None)", "Close"), Binding("enter", "choose", "Go to operator")]

    def __init__(self, diffs: list[OpDiff], inject: str | None):
        super().__init__()
        self._diffs, self._inject = diffs, inject

    def compose(self) -> ComposeResult:
        with Vertical(id="diff"):
            yield Static(Text("Full recompute vs KV-cached run · Enter: go to the operator · Esc: close", style="bold"))
            yield Static(summary(self._diffs, self._inject))
            yield DataTable(cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("", "request", "round", "operator", "head", "max |Δ|")
        first = first_divergence(self._diffs)
        for d in self._diffs:
            style = "bold red" if d is first else ("red" if not d.agrees else "")
            mark = "▶ first" if d is first else ("✗" if not d.agrees else "✓")
            where = "prefill" if d.phase == "prefill" else f"decode {d.round}"
            head = "" if d.head is None else str(d.head)
            cells = [mark, str(d.request), where, d.name, head, f"{d.max_abs:.3e}"]
            table.add_row(*(Text(c, style=style) for c in cells))
        if first is not None:
            table.move_cursor(row=self._diffs.index(first))
        table.focus()

    def action_choose(self) -> None:
        self.dismiss(self._diffs[self.query_one(DataTable).cursor_row].step)

    def on_data_table_row_selected(self) -> None:
        self.action_choose()
