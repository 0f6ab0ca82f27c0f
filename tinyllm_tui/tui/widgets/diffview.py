"""The full-vs-cached diff: per operator of every round, the largest |cached − full|."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from engine.compare.diff import OpDiff, first_divergence
from engine.session import INJECTIONS
from tinyllm_tui.presentation.summaries import diff_cell, diff_summary, where

from tinyllm_tui.tui.widgets.linelist import LineList


def diff_line(d: OpDiff, first: OpDiff | None) -> Text:
    mark = "▶ first" if d is first else ("✗" if not d.agrees else "✓")
    head = "" if d.head is None else f" h{d.head}"
    style = "bold red" if d is first else ("red" if not d.agrees else "")
    return Text(f"{mark:<8}req {d.request} {where(d.phase, d.round):<9} {diff_cell(d):>10}  {d.name}{head}", style=style)


class DiffScreen(ModalScreen[int | None]):
    """Dismisses with the step of the chosen operator (Enter), or None."""

    BINDINGS = [Binding("escape,d,q", "dismiss(None)", "Close")]

    def __init__(self, diffs: list[OpDiff], inject: str | None):
        super().__init__()
        self._diffs, self._inject = diffs, inject

    def compose(self) -> ComposeResult:
        with Vertical(id="diff"):
            yield Static(Text("Full recompute vs KV-cached run · Enter: go to the operator · Esc: close", style="bold"))
            summary = Text()
            if self._inject:
                summary.append(f"injected bug {self._inject}: {INJECTIONS[self._inject]}\n", style="bold yellow")
            first = first_divergence(self._diffs)
            summary.append(diff_summary(self._diffs, self._inject), style="bold green" if first is None else "bold red")
            yield Static(summary, id="diff-summary")
            yield LineList(id="diff-list")

    def on_mount(self) -> None:
        first = first_divergence(self._diffs)
        listing = self.query_one(LineList)
        listing.show(tuple((i, diff_line(d, first)) for i, d in enumerate(self._diffs)),
                     self._diffs.index(first) if first is not None else 0)
        listing.focus()

    def on_line_list_chosen(self, event: LineList.Chosen) -> None:
        self.dismiss(self._diffs[event.key].step)
