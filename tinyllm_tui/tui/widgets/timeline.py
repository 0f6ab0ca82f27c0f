"""The token timeline (A.9 of 003): a window of tokens around the one being fed, and the rounds so far."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from engine import OpState, Status, TokenState
from tinyllm_tui.presentation.cache_layout import batch_row_head
from tinyllm_tui.debugger.history import RoundSummary
from tinyllm_tui.presentation.summaries import round_line, where

from tinyllm_tui.tui.i18n import tr

# A glyph per status as well as a colour, so that monochrome terminals keep the meaning.
STYLES = {
    Status.PROCESSED: ("✓", "green"),
    Status.CURRENT: ("▶", "bold black on yellow"),
    Status.SELECTED: ("★", "bold magenta"),
    Status.PENDING: ("…", "dim"),
}
LEGEND = ("processed (K/V cached)", "being fed", "selected, not yet fed", "pending")


@dataclass(frozen=True)
class TimelineData:
    state: OpState
    requests: int
    chunked: bool
    rounds: tuple[RoundSummary, ...]
    verdicts: Mapping[tuple[int, int], bool] = field(default_factory=dict)  # (request, round) -> your dump agrees

    def shown(self) -> tuple:
        """What the timeline draws of these: most steps change none of it."""
        state = self.state
        return (state.timeline, self.rounds, state.caches[0].length if state.caches else 0, state.chunk,
                tuple(self.marks().items()), state.batch, state.request)

    def marks(self) -> dict[int, str]:
        """round -> ✓/✗ of the current request, where a --against dump was compared."""
        request = self.state.request
        return {r: "✓" if agrees else "✗" for (q, r), agrees in self.verdicts.items() if q == request}


def focus_index(timeline: Sequence[TokenState]) -> int:
    """The token the window centres on: the first one being fed, else the selected one, else the last."""
    for status in (Status.CURRENT, Status.SELECTED):
        for i, token in enumerate(timeline):
            if token.status is status:
                return i
    return max(len(timeline) - 1, 0)


def token_window(timeline: Sequence[TokenState], width: int) -> Text:
    """As many tokens around the focus as fit in `width` cells, with counts of the hidden ones."""
    pieces = [(f"{STYLES[t.status][0]}{t.position}:{t.text}", STYLES[t.status][1]) for t in timeline]
    if not pieces:
        return Text("")
    first = last = focus_index(timeline)
    used = cell_len(pieces[first][0]) + 1
    reserve = 2 * len("‹ 9999 ")  # room for the hidden counts
    while True:
        grew = False
        for side in (1, -1):
            index = last + 1 if side == 1 else first - 1
            if 0 <= index < len(pieces) and used + cell_len(pieces[index][0]) + 1 + reserve <= width:
                used += cell_len(pieces[index][0]) + 1
                first, last = (first, index) if side == 1 else (index, last)
                grew = True
        if not grew:
            break
    text = Text(no_wrap=True, overflow="ellipsis")
    if first:
        text.append(f"‹ {first} ", style="dim")
    for piece, style in pieces[first : last + 1]:
        text.append(piece, style=style)
        text.append(" ")
    if last < len(pieces) - 1:
        text.append(f"{len(pieces) - 1 - last} ›", style="dim")
    return text


class Timeline(Widget):
    data: reactive[TimelineData | None] = reactive(None, always_update=True)
    lang = "en"

    def show(self, data: TimelineData) -> None:
        """Redraw only when what the timeline draws has changed."""
        if self.data is None or self.data.shown() != data.shown():
            self.data = data

    def render(self) -> Text:
        if self.data is None:
            return Text("")
        state, width = self.data.state, max(self.size.width, 10)
        place = f"{tr('request', self.lang)} {state.request} (of {self.data.requests}) · {where(state.phase, state.round)}"
        if self.data.chunked and state.phase == "prefill":
            place += f" · chunk {state.chunk}"
        if state.round in self.data.marks():
            place += f" {self.data.marks()[state.round]}"
        place += f" · {tr('cache', self.lang)} {state.caches[0].length if state.caches else 0}  "
        lines = Text(place, style="bold", no_wrap=True, overflow="ellipsis")
        if state.batch:  # one line per row of the batch, as many as the panel holds around the current one
            return self._batch(lines, state, width)
        lines.append_text(token_window(state.timeline, width - cell_len(place)))
        rounds = self._rounds(width)
        lines.append("\n")
        lines.append(rounds, style="italic")
        legend = "  ".join(f"{STYLES[s][0]} {tr(text, self.lang)}" for s, text in zip(STYLES, LEGEND))
        lines.append("\n" + legend, style="dim")
        return lines

    def _batch(self, lines: Text, state: OpState, width: int) -> Text:
        rows = state.batch
        room = max(self.size.height - 1, 1)
        mine = next(i for i, row in enumerate(rows) if row.request == state.request)
        first = min(max(mine - room // 2, 0), max(len(rows) - room, 0))
        window = f" · {tr('rows', self.lang)} {first}–{first + room - 1}" if len(rows) > room else ""
        lines.append(f"{tr('batch of', self.lang)} {len(rows)}{window}", style="dim")
        for row in rows[first : first + room]:
            head = batch_row_head(row, state.request, tr("pad", self.lang))
            lines.append("\n" + head, style="bold" if row.request == state.request else "")
            lines.append_text(token_window(row.moment.timeline, width - cell_len(head)))
        return lines

    def _rounds(self, width: int) -> str:
        """The latest finished rounds that fit, with how many earlier ones are hidden."""
        rounds = self.data.rounds
        if not rounds:
            return tr("no round finished yet", self.lang)
        start = len(rounds) - 1
        marks = self.data.marks()
        while start > 0 and cell_len(round_line(rounds[start - 1 :], marks)) + len(f"‹ {start} earlier │ ") <= width:
            start -= 1
        line = round_line(rounds[start:], marks)
        return f"‹ {start} earlier │ {line}" if start else line
