"""A labelled matrix shown through a window: only the rows and columns that fit are rendered.

The screen hands a `MatrixData` down; the window's offsets move with keys (`<` `>`
columns, PageUp/PageDown rows) and follow a cell cursor where there is one (the
weights browser). Wide rows get a summary line: min / max / mean / argmax, or for
logits the most likely tokens with their probabilities.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from functools import cached_property, lru_cache
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.strip import Strip

from engine.compare.expect import Cell
from engine.backend import to_host
from engine.labels import POSITIONAL, Axis, resolve_some
from engine.trace import OpState
from tinyllm_tui.presentation.summaries import VOCAB_KINDS, op_title, shape_text, top_tokens

from tinyllm_tui.tui.widgets.textlines import TextLines
from tinyllm_tui.presentation.numbers import NUMBER_WIDTH, format_number, right_aligned

CELL_WIDTH = NUMBER_WIDTH + 3  # an edit mark (•), a verdict (✓ ✗), the number, a space
PROBABILITY_KINDS = ("softmax", "probs")
BASE = (24, 24, 32)
POSITIVE, NEGATIVE, SEQUENTIAL = (170, 50, 50), (50, 90, 180), (40, 140, 70)
TITLE_LINES = 2


HEAT_LEVELS = 32
PLAIN, BOLD, DIM, CURSOR = Style(), Style(bold=True), Style(dim=True), Style(reverse=True, bold=True)
BLANK = Segment(" ")
EDITED = Segment("•", Style(bold=True, color="yellow"))
AGREES, DISAGREES = Segment("✓", Style(bold=True, color="green")), Segment("✗", Style(bold=True, color="red"))


def heat_style(x: float, scale: float, sequential: bool) -> Style:
    """Diverging red/blue for signed values, one green ramp for probabilities."""
    if not math.isfinite(x):
        return DIM
    level = round(min(abs(x) / scale, 1.0) * HEAT_LEVELS) if scale > 0 else 0
    return _heat(SEQUENTIAL if sequential else (POSITIVE if x >= 0 else NEGATIVE), level)


@lru_cache(maxsize=None)
def _heat(target: tuple[int, int, int], level: int) -> Style:
    """One style per colour and step of the ramp: cells share them instead of making their own."""
    t = level / HEAT_LEVELS
    rgb = [round(b + (c - b) * t) for b, c in zip(BASE, target)]
    return Style(bgcolor=Color.from_rgb(*rgb), color="white")


class Labels(Sequence):
    """`count` labels made one at a time when shown (a vocabulary axis has 50 000 of them)."""

    def __init__(self, count: int, label: Callable[[int], str]):
        self._count, self._label = count, label

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._label(i) for i in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(index)
        return self._label(index % self._count)


def lazy_labels(axis) -> Labels:
    """An operator's row or column labels, made only for the entries on screen."""
    count = axis.count if hasattr(axis, "count") else len(axis)
    return Labels(count, lambda i: resolve_some(axis, [i])[0])


def batch_matrix(state: OpState, group: Sequence[OpState], token_label=None) -> MatrixData:
    """One operator of every batch row stacked: rows "r2 · 11 · cat"; key columns by position alone
    ("k11"), since each row has its own tokens there."""
    starts = list(itertools.accumulate((g.values.shape[0] for g in group), initial=0))

    def row(i: int) -> str:
        member = bisect.bisect_right(starts, i) - 1
        return f"r{group[member].request} · {resolve_some(group[member].output.row_axis, [i - starts[member]])[0]}"

    axis = state.output.col_axis
    positional = isinstance(axis, Axis) and axis.scheme in POSITIONAL
    cols = Labels(axis.count, lambda j: f"k{axis.positions[j]}") if positional else lazy_labels(axis)
    values = np.concatenate([to_host(g.values) for g in group])
    return MatrixData(op_title(state), values, Labels(starts[-1], row), cols, kind=state.kind, token_label=token_label)


@dataclass(frozen=True)
class MatrixData:
    """What one matrix window shows. `values` are host NumPy, 2-D."""

    title: str
    values: np.ndarray
    rows: Sequence[str]
    cols: Sequence[str]
    kind: str = ""
    before: np.ndarray | None = None  # the values before the last weight edit (changed cells get •)
    show_before: bool = False  # display `before` instead of `values`
    verdicts: Mapping[tuple[int, int], Cell] = field(default_factory=dict)  # printed cells of an expect: table
    newest_first: bool = False  # open the window on the last rows (a KV cache's newest positions)
    token_label: Callable[[int], str] | None = None  # cells hold token ids (the decode rule's choice)

    @property
    def shown(self) -> np.ndarray:
        return self.before if self.show_before and self.before is not None else self.values

    @cached_property
    def scale(self) -> float:
        """The largest finite |value| shown: the heat colours' full scale (computed once, not per redraw)."""
        shown = self.shown
        return float(np.max(np.abs(shown[np.isfinite(shown)]), initial=0.0))

    def changed(self) -> np.ndarray | None:
        if self.before is None:
            return None
        same = (self.values == self.before) | (np.isnan(self.values) & np.isnan(self.before))
        return ~same


class MatrixWindow(TextLines):
    data: reactive[MatrixData | None] = reactive(None, always_update=True)
    row_offset = reactive(0)
    col_offset = reactive(0)
    heat = reactive(True)
    cursor: reactive[tuple[int, int] | None] = reactive(None)  # a cell cursor (weights browser)

    def watch_data(self, old: MatrixData | None, new: MatrixData | None) -> None:
        if old is None or new is None or (old.title, old.values.shape) != (new.title, new.values.shape):
            self.col_offset = 0
            self.row_offset = max(new.values.shape[0] - self._row_count(), 0) if new and new.newest_first else 0

    # -- the window -------------------------------------------------------------------------------
    def _label_width(self) -> int:
        rows = self.data.rows
        sample = [rows[i] for i in range(self.row_offset, min(self.row_offset + self._row_count(), len(rows)))]
        return min(max((cell_len(label) for label in sample), default=4) + 1, max(self.size.width // 3, 6))

    def _title_lines(self) -> int:
        """Up to three title lines (what, which part and marks, a summary of a row too wide to show),
        fewer in a short panel."""
        wide = self.data is not None and self._col_count() < self.data.values.shape[1]
        lines = TITLE_LINES + 1 if wide else TITLE_LINES
        return lines if self.size.height >= 2 * lines + 2 else 1

    def _row_count(self) -> int:
        title = TITLE_LINES + 1 if self.size.height >= 2 * TITLE_LINES + 4 else 1  # as _title_lines, at most
        return max(self.size.height - title - 1, 1)

    def _col_count(self) -> int:
        return max((self.size.width - self._label_width()) // CELL_WIDTH, 1)

    def window(self) -> tuple[range, range]:
        """The rows and columns on screen now."""
        n_rows, n_cols = self.data.values.shape
        rows = range(self.row_offset, min(self.row_offset + self._row_count(), n_rows))
        cols = range(self.col_offset, min(self.col_offset + self._col_count(), n_cols))
        return rows, cols

    def scroll_rows(self, pages: float) -> bool:
        return self._shift("row_offset", round(pages * self._row_count()) or int(math.copysign(1, pages)), 0)

    def scroll_cols(self, pages: float) -> bool:
        return self._shift("col_offset", round(pages * self._col_count()) or int(math.copysign(1, pages)), 1)

    def _shift(self, attribute: str, delta: int, axis: int) -> bool:
        if self.data is None:
            return False
        size = self.data.values.shape[axis]
        page = self._row_count() if axis == 0 else self._col_count()
        offset = max(0, min(getattr(self, attribute) + delta, max(size - page, 0)))
        if offset == getattr(self, attribute):
            return False
        setattr(self, attribute, offset)
        return True

    def watch_cursor(self, cursor: tuple[int, int] | None) -> None:
        """Keep the cursor's cell in view."""
        if cursor is None or self.data is None:
            return
        row, col = cursor
        rows, cols = self._row_count(), self._col_count()
        self.row_offset = min(max(self.row_offset, row - rows + 1), row)
        self.col_offset = min(max(self.col_offset, col - cols + 1), col)

    # -- rendering ---------------------------------------------------------------------------------
    def text_lines(self) -> list[Text | Strip]:
        if self.data is None:
            return []
        lines = self._lines()[: self.size.height]
        width = max(self.size.width, 1)
        for line in lines:
            if isinstance(line, Text):
                line.truncate(width, overflow="ellipsis")
        return lines

    def _lines(self) -> list[Text | Strip]:
        """Two title lines and a header as Text; each row as a Strip of segments (many cells, drawn often)."""
        data = self.data
        if not data.values.size:
            return [Text(f"{data.title} · {shape_text(data.values.shape)} · empty", style="bold")]
        rows, cols = self.window()
        values, scale = data.shown, data.scale
        changed = data.changed()
        width = self._label_width()
        header = Text(" " * width)
        for j in cols:
            header.append(right_aligned(_fit(data.cols[j], CELL_WIDTH - 1), CELL_WIDTH - 1) + " ", style="bold")
        lines: list[Text | Strip] = [*self._title(rows, cols, changed)[: self._title_lines()], header]
        sequential, heat, cursor = data.kind in PROBABILITY_KINDS, self.heat, self.cursor
        for i in rows:
            label = _fit(data.rows[i], width - 1)
            segments = [Segment(label + " " * (width - cell_len(label)), BOLD)]
            for j in cols:
                x = float(values[i, j])
                style = heat_style(x, scale, sequential) if heat else (DIM if not math.isfinite(x) else PLAIN)
                segments += [EDITED if changed is not None and changed[i, j] else BLANK, self._verdict(i, j),
                             *self._number(x, CURSOR if cursor == (i, j) else style), BLANK]
            lines.append(Strip(segments))
        return lines

    def _verdict(self, i: int, j: int) -> Segment:
        if (i, j) not in self.data.verdicts:
            return BLANK
        return AGREES if self._agrees(i, j) else DISAGREES

    def _number(self, x: float, style: Style) -> tuple[Segment, ...]:
        if self.data.token_label is not None:  # the decode rule's choice: a token, not a number
            return (Segment(right_aligned(_fit(self.data.token_label(int(x)), NUMBER_WIDTH)), BOLD),)
        return (Segment(right_aligned(format_number(x)), style),)

    def _title(self, rows: range, cols: range, changed: np.ndarray | None) -> list[Text]:
        """Two lines: what the matrix is and which part shows; a summary of a row too wide to show."""
        data = self.data
        n_rows, n_cols = data.values.shape
        parts = [f"{data.title} · {shape_text(data.values.shape)}"]
        if len(rows) < n_rows:
            parts.append(f"rows {rows[0]}–{rows[-1]} of {n_rows} (PgUp PgDn)" if rows else "")
        if len(cols) < n_cols:
            parts.append(f"cols {cols[0]}–{cols[-1]} of {n_cols} (< >)" if cols else "")
        if changed is not None and changed.any():
            count = int(changed.sum())
            parts.append(f"{count} cell{'' if count == 1 else 's'} changed by the edit (•)")
            parts.append("BEFORE the edit (v)" if data.show_before else "v: before")
        if data.token_label is not None:
            parts.append("chose " + ", ".join(data.token_label(int(x)) for x in data.values.ravel()))
        if data.verdicts:
            agreeing = (data.verdicts.agreeing(data.shown) if hasattr(data.verdicts, "agreeing")
                        else sum(self._agrees(i, j) for i, j in data.verdicts))
            label = getattr(data.verdicts, "label", "expect: {} printed cells agree (✓ ✗)")
            parts.append(label.format(f"{agreeing}/{len(data.verdicts)}"))
        lines = [Text(parts[0], style="bold"), Text(" · ".join(p for p in parts[1:] if p), style="italic")]
        return lines + [Text(self._summary(rows), style="italic")] if len(cols) < n_cols else lines

    def _summary(self, rows: range) -> str:
        """One line about the last visible row, whose columns do not all fit."""
        data = self.data
        i = rows[-1] if rows else data.values.shape[0] - 1
        row = data.shown[i]
        finite = row[np.isfinite(row)]
        if data.kind in VOCAB_KINDS and finite.size:
            top = top_tokens(row, probabilities=data.kind == "probs")
            return f"row {data.rows[i]}: top {len(top)}: " + ", ".join(f"{data.cols[j]} {p:.3f}" for j, p in top)
        if not finite.size:
            return f"row {data.rows[i]}: no finite value"
        best = int(np.argmax(np.where(np.isfinite(row), row, -np.inf)))
        return (f"row {data.rows[i]}: min {format_number(float(finite.min()))} max {format_number(float(finite.max()))} "
                f"mean {format_number(float(finite.mean()))} argmax {data.cols[best]}")

    def _agrees(self, i: int, j: int) -> bool:
        """A printed cell agrees with the value shown (the edited one, or the one before the edit)."""
        return dataclasses.replace(self.data.verdicts[(i, j)], computed=float(self.data.shown[i, j])).agrees


def _fit(text: str, width: int) -> str:
    """Cut `text` to `width` display cells, marking the cut with …."""
    if cell_len(text) <= width:
        return text
    cut = text
    while cell_len(cut) > max(width - 1, 0):
        cut = cut[:-1]
    return cut + "…"
