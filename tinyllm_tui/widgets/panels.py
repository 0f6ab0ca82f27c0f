"""The lower panels: explanation, KV cache, and the current operator's inputs."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from engine import OpState, to_host

from ..explanations import explain
from ..numbers import format_number, matrix_table


class TablesPanel(VerticalScroll):
    """A scrollable stack of Rich renderables."""

    def compose(self):
        yield Static()

    def show_renderables(self, *renderables) -> None:
        self.query_one(Static).update(Group(*renderables))


class ExplanationPanel(TablesPanel):
    def show(self, state: OpState, lang: str) -> None:
        lines = [Text.assemble((f"{heading}: ", "bold cyan"), text) for heading, text in explain(state, lang)]
        self.show_renderables(*lines)


class InputsPanel(TablesPanel):
    def show(self, state: OpState) -> None:
        if not state.inputs:
            self.show_renderables(Text("This operator reads no array (it is computed from positions only)."))
            return
        self.show_renderables(*(matrix_table(m, title=m.name) for m in state.inputs))


class CachePanel(TablesPanel):
    """Every layer's K and V rows at this moment; rows appended in this round marked with +."""

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
        table = Table(title=title, title_justify="left", box=None, pad_edge=False)
        table.add_column("")
        for j in range(values.shape[1]):
            table.add_column(f"h{j // d_head}·{j % d_head}", justify="right")
        for i, row in enumerate(values):
            new = i >= past
            label = ("+" if new else " ") + (labels[i] if i < len(labels) else str(i))
            table.add_row(label, *(format_number(float(x)) for x in row), style="bold yellow" if new else None)
        return table
