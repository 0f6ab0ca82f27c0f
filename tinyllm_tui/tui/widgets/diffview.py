"""The full-vs-cached diff: per operator of every round, the largest |cached − full|."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from tinyllm_tui.debugger.results import DiffReport
from tinyllm_tui.presentation.summaries import diff_cell, diff_measured, divergence_place
from tinyllm_tui.tui.i18n import cause_words, tr, where
from tinyllm_tui.tui.widgets.linelist import LineList


def diff_list_line(d, first: bool, lang: str) -> Text:
    mark = tr("diff.mark_first", lang) if first else ("✗" if not d.agrees else "✓")
    head = "" if d.head is None else f" h{d.head}"
    style = "bold red" if first else ("red" if not d.agrees else "")
    request = tr("diff.request", lang, request=d.request)
    mismatch = "" if d.mismatch is None else f"  {diff_measured(d, lang)}"
    return Text(f"{mark:<8}{request} {where(d.phase, d.round, lang):<9} {diff_cell(d, lang):>10}  {d.name}{head}{mismatch}",
                style=style)


def report_summary(report: DiffReport, lang: str) -> Text:
    summary = Text()
    if report.inject:
        summary.append(tr("diff.injected", lang, name=report.inject, description=tr(f"inject.{report.inject}", lang))
                       + "\n", style="bold yellow")
    if report.flip is not None:
        flip = report.flip
        summary.append(tr("diff.flip", lang, where=flip.key.label(report.requests), layer=flip.layer, token=flip.token,
                          ours=list(flip.ours), theirs=list(flip.theirs), margin=f"{flip.margin:.2e}",
                          other=cause_words(flip.other, lang)) + "\n", style="bold yellow")
    if report.first is None:
        summary.append(tr("diff.agrees", lang, tolerance=report.tolerance), style="bold green")
    else:
        summary.append(tr("diff.first", lang, where=divergence_place(report.diffs[report.first], lang)), style="bold red")
    return summary


class DiffScreen(ModalScreen[int | None]):
    """Dismisses with the step of the chosen operator (Enter), or None."""

    BINDINGS = [Binding("escape,d,q", "dismiss(None)", "Close")]

    def __init__(self, report: DiffReport, lang: str = "en"):
        super().__init__()
        self._report, self._lang = report, lang

    def compose(self) -> ComposeResult:
        with Vertical(id="diff"):
            yield Static(Text(tr("diff.title", self._lang), style="bold"))
            yield Static(report_summary(self._report, self._lang), id="diff-summary")
            yield LineList(id="diff-list")

    def on_mount(self) -> None:
        report, listing = self._report, self.query_one(LineList)
        listing.show(tuple((i, diff_list_line(d, i == report.first, self._lang)) for i, d in enumerate(report.diffs)),
                     report.first or 0)
        listing.focus()

    def on_line_list_chosen(self, event: LineList.Chosen) -> None:
        self.dismiss(self._report.diffs[event.key].step)
