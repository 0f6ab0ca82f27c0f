"""The lower panels: explanation, KV cache, and the current operator's inputs."""

from __future__ import annotations

from rich.console import Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from textual.containers import ScrollableContainer
from textual.widgets import Static

from engine import OpState, to_host
from engine.expect import Outcome

from ..explanations import explain
from ..numbers import matrix_table, number_cell, number_table


class TablesPanel(ScrollableContainer):
    """A stack of Rich renderables, scrolling both ways when wider than the panel."""

    wide = False  # True: keep tables at their natural width and scroll sideways

    def compose(self):
        yield Static()

    def show_renderables(self, *renderables) -> None:
        group = Group(*renderables)
        static = self.query_one(Static)
        static.update(group)
        if self.wide:  # Textual caps an auto width at the container's, which would squeeze the columns
            console = self.app.console
            static.styles.width = Measurement.get(console, console.options.update_width(10_000), group).maximum


class ExplanationPanel(TablesPanel):
    def show(self, state: OpState, lang: str) -> None:
        lines = [Text.assemble((f"{heading}: ", "bold cyan"), text) for heading, text in explain(state, lang)]
        self.show_renderables(*lines)


class InputsPanel(TablesPanel):
    wide = True

    def show(self, state: OpState) -> None:
        if not state.inputs:
            self.show_renderables(Text("This operator reads no array (it is computed from positions only)."))
            return
        self.show_renderables(*(matrix_table(m, title=m.name) for m in state.inputs))


class CachePanel(TablesPanel):
    """Every layer's K and V rows at this moment; rows appended in this round marked with +."""

    wide = True

    def show(self, state: OpState, d_head: int) -> None:
        renderables = []
        labels = [f"{t.position} · {t.text}" for t in state.timeline]
        for layer, cache in enumerate(state.caches):
            new = max(cache.length - state.past, 0)
            renderables.append(Text(
                f"layer {layer} · {cache.length} rows cached · {new} appended this round "
                f"(+) · weights {cache.fingerprint}", style="bold"))
            for name, array in (("K", cache.k), ("V", cache.v)):
                renderables.append(self._table(f"layer {layer} {name}", to_host(array), labels, state.past, d_head))
        self.show_renderables(*renderables)

    @staticmethod
    def _table(title: str, values, labels: list[str], past: int, d_head: int) -> Table:
        table = number_table(title, [f"h{j // d_head}·{j % d_head}" for j in range(values.shape[1])], box=None)
        for i, row in enumerate(values):
            new = i >= past
            label = ("+" if new else " ") + (labels[i] if i < len(labels) else str(i))
            table.add_row(label, *(number_cell(float(x)) for x in row), style="bold yellow" if new else None)
        return table


class ExpectPanel(TablesPanel):
    """Every expect: table of the scenario with how many of its printed cells agree."""

    def show(self, outcomes: list[Outcome]) -> None:
        if not outcomes:
            self.show_renderables(Text("This scenario has no expect: tables."))
            return
        table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0))
        for heading in ("", "operator", "agree", "%", "printed in the text"):
            table.add_column(heading)
        for outcome in outcomes:
            total = len(outcome.cells)
            share = f"{100 * outcome.agreeing / total:.0f}%" if total else "—"
            mark, style = ("✓", "green") if outcome.passed else ("✗", "red")
            what = outcome.expectation.describe()
            table.add_row(Text(mark, style=style), what, f"{outcome.agreeing}/{total}", share,
                          outcome.problem or outcome.expectation.note)
        cells = sum(len(o.cells) for o in outcomes)
        agreeing = sum(o.agreeing for o in outcomes)
        summary = Text(f"{agreeing}/{cells} printed cells agree with the computation "
                       f"({sum(o.passed for o in outcomes)}/{len(outcomes)} tables fully)", style="bold")
        self.show_renderables(summary, table)
