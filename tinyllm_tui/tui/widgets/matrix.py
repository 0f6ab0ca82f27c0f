"""A labelled matrix shown through a window: only the rows and columns that fit are rendered.

The screen hands down a `MatrixFrame` (tinyllm_tui.debugger.frame: host values, labels made when
shown, changed cells and verdicts already judged) with its title; the window's offsets move with
keys (`<` `>` columns, PageUp/PageDown rows) and follow a cell cursor where there is one (the
weights browser). A vocabulary row can be shown top-k sorted (`t`). A row too wide to show whole
gets a summary line about the last position: its most likely tokens, or its range.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.strip import Strip

from tinyllm_tui.debugger.frame import MatrixFrame
from tinyllm_tui.presentation.numbers import NUMBER_WIDTH, fit_cells, format_number, right_aligned
from tinyllm_tui.presentation.against_words import tolerance_words
from tinyllm_tui.presentation.summaries import shape_text
from tinyllm_tui.tui.i18n import tr
from tinyllm_tui.tui.widgets.textlines import TextLines

CELL_WIDTH = NUMBER_WIDTH + 3  # an edit mark (•), a verdict (✓ ✗), the number, a space
BASE = (24, 24, 32)
POSITIVE, NEGATIVE, SEQUENTIAL = (170, 50, 50), (50, 90, 180), (40, 140, 70)
TITLE_LINES = 2
HEAT_LEVELS = 32
PLAIN, BOLD, DIM, CURSOR = Style(), Style(bold=True), Style(dim=True), Style(reverse=True, bold=True)
BLANK = Segment(" ")
EDITED = Segment("•", Style(bold=True, color="yellow"))
AGREES, DISAGREES = Segment("✓", Style(bold=True, color="green")), Segment("✗", Style(bold=True, color="red"))


def _marked_edited(mark: Segment, number: Segment) -> tuple[Segment, ...]:
    """A changed cell: its • right before its number, in the number's padding (one column left of it, the • looked
    like the mark of the cell before); before the verdict mark where the number fills its width."""
    digits = number.text.lstrip()
    pad = len(number.text) - len(digits)
    if mark is not BLANK or not pad:
        return EDITED, mark, number
    return BLANK, BLANK, Segment(" " * (pad - 1)), EDITED, Segment(digits, number.style)


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


class MatrixWindow(TextLines):
    matrix: reactive[MatrixFrame | None] = reactive(None, always_update=True)
    row_offset = reactive(0)
    col_offset = reactive(0)
    heat = reactive(True)
    show_before = reactive(False)  # the values before the last edit (else your dump's) instead of the current ones
    sorted_view = reactive(False)  # a vocabulary row's columns, most likely first
    cursor: reactive[tuple[int, int] | None] = reactive(None)  # a cell cursor (weights browser)
    SUMMARY = True  # a line about the last position when its row does not fit
    title = ""
    lang = "en"
    _shape: tuple | None = None  # (matrix, (size, first row), its window's shape): see _window_shape

    def show(self, matrix: MatrixFrame, title: str) -> None:
        self.title = title
        self.matrix = matrix

    def watch_matrix(self, old: MatrixFrame | None, new: MatrixFrame | None) -> None:
        if old is None or new is None or (old.name, old.head, old.values.shape) != (new.name, new.head,
                                                                                    new.values.shape):
            self.col_offset = 0
            self.row_offset = max(new.values.shape[0] - self._row_count(), 0) if new and new.newest_first else 0

    def watch_sorted_view(self) -> None:
        self.col_offset = 0

    # -- the window -------------------------------------------------------------------------------
    @property
    def _columns(self) -> np.ndarray | None:
        """The columns in the order shown: the top-k sorted ones, or None for all in order."""
        matrix = self.matrix
        return matrix.order if self.sorted_view and matrix is not None else None

    def _n_cols(self) -> int:
        columns = self._columns
        return len(columns) if columns is not None else self.matrix.values.shape[1]

    def _label_width(self) -> int:
        return self._window_shape()[0]

    def _title_lines(self) -> int:
        """Up to three title lines (what, which part and marks, the last position's summary when its row
        does not fit), fewer in a short panel: the second line, which says where the window is, goes last."""
        return self._window_shape()[2]

    def _row_count(self, height: int | None = None) -> int:
        height = self.line_size.height if height is None else height
        title = TITLE_LINES + 1 if height >= 2 * TITLE_LINES + 4 else (2 if height >= 5 else 1)
        return max(height - title - 1, 1)

    def _col_count(self) -> int:
        return self._window_shape()[1]

    def _window_shape(self) -> tuple[int, int, int]:
        """(label width, columns shown, title lines), worked out once per matrix, first row and size: a refresh
        asks for them several times, and each look at the widget's size walks up to its screen."""
        size, matrix = self.line_size, self.matrix
        key = (size, self.row_offset)
        if self._shape is not None and self._shape[0] is matrix and self._shape[1] == key:
            return self._shape[2]
        rows = range(self.row_offset, min(self.row_offset + self._row_count(size.height), len(matrix.rows)))
        labels = min(max((cell_len(self._row_label(i)) for i in rows), default=4) + 1, max(size.width // 3, 6))
        cols = max((size.width - labels + 1) // CELL_WIDTH, 1)  # no blank needed after the last column
        wide = self.SUMMARY and cols < matrix.values.shape[1]
        lines = TITLE_LINES + 1 if wide else TITLE_LINES
        if size.height < 2 * lines + 2:
            lines = 2 if size.height >= 5 else 1
        self._shape = (matrix, key, (labels, cols, lines))
        return self._shape[2]

    def window(self) -> tuple[range, range]:
        """The rows and the positions among the columns shown (in `_columns` order when sorted)."""
        n_rows = self.matrix.values.shape[0]
        rows = range(self.row_offset, min(self.row_offset + self._row_count(), n_rows))
        cols = range(self.col_offset, min(self.col_offset + self._col_count(), self._n_cols()))
        return rows, cols

    def scroll_rows(self, pages: float) -> bool:
        return self._shift("row_offset", round(pages * self._row_count()) or int(math.copysign(1, pages)), 0)

    def scroll_cols(self, pages: float) -> bool:
        return self._shift("col_offset", round(pages * self._col_count()) or int(math.copysign(1, pages)), 1)

    def _shift(self, attribute: str, delta: int, axis: int) -> bool:
        if self.matrix is None:
            return False
        size = self.matrix.values.shape[0] if axis == 0 else self._n_cols()
        page = self._row_count() if axis == 0 else self._col_count()
        offset = max(0, min(getattr(self, attribute) + delta, max(size - page, 0)))
        if offset == getattr(self, attribute):
            return False
        setattr(self, attribute, offset)
        return True

    def watch_cursor(self, cursor: tuple[int, int] | None) -> None:
        """Keep the cursor's cell in view."""
        if cursor is None or self.matrix is None:
            return
        row, col = cursor
        rows, cols = self._row_count(), self._col_count()
        self.row_offset = min(max(self.row_offset, row - rows + 1), row)
        self.col_offset = min(max(self.col_offset, col - cols + 1), col)

    # -- rendering ---------------------------------------------------------------------------------
    def line_count(self) -> int | None:
        if self.matrix is None or not self.size.height:
            return None
        if not self.matrix.values.size:
            return 1
        rows = min(self.row_offset + self._row_count(), self.matrix.values.shape[0]) - self.row_offset
        return min(self._title_lines() + 1 + max(rows, 0), self.size.height)

    def text_lines(self) -> list[Text | Strip]:
        if self.matrix is None:
            return []
        lines = self._lines()[: self.size.height]
        width = max(self.size.width, 1)
        for line in lines:
            if isinstance(line, Text):
                line.truncate(width, overflow="ellipsis")
        return lines

    def _lines(self) -> list[Text | Strip]:
        """The title lines and a header as Text; each row as a Strip of segments (many cells, drawn often)."""
        matrix, lang = self.matrix, self.lang
        if not matrix.values.size:
            return [Text(tr("matrix.empty", lang, title=self.title, shape=shape_text(matrix.values.shape)),
                         style="bold")]
        rows, where = self.window()
        columns = self._columns
        cols = [int(columns[j]) for j in where] if columns is not None else list(where)
        before = self.show_before and matrix.before is not None
        verdicts = matrix.verdicts
        values = matrix.before if before else self._theirs() if self.showing_dump() else matrix.values
        scale = matrix.scale_before if before else matrix.scale
        agrees = None if verdicts is None else (verdicts.agrees_before if before else verdicts.agrees)
        width = self._label_width()
        row_labels = matrix.rows_before if before and matrix.rows_before is not None else matrix.rows
        col_labels = matrix.cols_before if before and matrix.cols_before is not None else matrix.cols
        header = Text(" " * width)
        for j in cols:
            header.append(right_aligned(fit_cells(col_labels[j], CELL_WIDTH - 1), CELL_WIDTH - 1) + " ", style="bold")
        header.rstrip()  # the last column's blank may not fit (a row's is cropped with its strip)
        title = self._title(rows, where)
        if self._title_lines() == 1 and title[1].plain:  # a short panel: which part shows stays said
            title = [Text.assemble(title[0], " · ", title[1])]
        lines: list[Text | Strip] = [*title[: self._title_lines()], header]
        heat, cursor, changed = self.heat, self.cursor, matrix.changed
        for i in rows:
            label = fit_cells(self._row_label(i, row_labels), width - 1)
            segments = [Segment(label + " " * (width - cell_len(label)), BOLD)]
            for j in cols:
                x = float(values[i, j])
                style = heat_style(x, scale, matrix.sequential) if heat else (DIM if not math.isfinite(x) else PLAIN)
                mark = BLANK if agrees is None or not verdicts.judged[i, j] else (AGREES if agrees[i, j] else DISAGREES)
                number = self._number(i, j, x, CURSOR if cursor == (i, j) else style)
                edited = changed is not None and changed[i, j]
                segments += [*(_marked_edited(mark, *number) if edited else (BLANK, mark, *number)), BLANK]
            lines.append(Strip(segments))
        return lines

    def _theirs(self) -> np.ndarray | None:
        verdicts = self.matrix.verdicts
        return None if verdicts is None else verdicts.theirs

    def showing_dump(self) -> bool:
        """`v` with a --against dump and no edit: the dump's own values, marked as judged."""
        return self.show_before and self.matrix.before is None and self._theirs() is not None

    def _row_label(self, i: int, labels=None) -> str:
        """A KV cache marks the rows that differ from your dump ✗, else the rows this chunk appended +.
        `labels`: the earlier run's, under its values (default: the matrix's own)."""
        matrix = self.matrix
        label = (matrix.rows if labels is None else labels)[i]
        if matrix.new_from is None:
            return label
        return f"{'✗' if i in matrix.differing else '+' if i >= matrix.new_from else ' '}{label}"

    def _number(self, i: int, j: int, x: float, style: Style) -> tuple[Segment, ...]:
        matrix = self.matrix
        if matrix.tokens:  # the decode rule's choice: a token, not a number
            text = matrix.tokens[i * matrix.values.shape[1] + j]
            return (Segment(right_aligned(fit_cells(text, NUMBER_WIDTH)), BOLD),)
        return (Segment(right_aligned(f"{x:.0f}" if matrix.ids else format_number(x)), style),)

    def _title(self, rows: range, cols: range) -> list[Text]:
        """What the matrix is; which part shows and the marks; a summary of the last position."""
        matrix, lang = self.matrix, self.lang
        n_rows, n_cols = matrix.values.shape
        parts = []
        if len(rows) < n_rows:
            parts.append(tr("matrix.rows", lang, first=rows[0], last=rows[-1], count=n_rows) if rows else "")
        if self._columns is not None:
            parts.append(tr("matrix.sorted", lang, count=len(self._columns)))
        if len(cols) < self._n_cols():
            parts.append(tr("matrix.cols", lang, first=cols[0], last=cols[-1], count=self._n_cols()) if cols else "")
        if matrix.changed is not None and matrix.changed.any():
            by = "intervention" if matrix.by_intervention else "edit"  # what made the run before differ
            parts.append(tr(f"matrix.changed.{by}", lang, count=int(matrix.changed.sum())))
            parts.append(tr(f"matrix.showing_before.{by}" if self.show_before else "matrix.v", lang))
        if matrix.tokens:
            parts.append(tr("matrix.chose", lang, tokens=", ".join(matrix.tokens)))
        verdicts = matrix.verdicts
        if verdicts is not None:
            agrees = verdicts.agrees_before if self.show_before and verdicts.agrees_before is not None \
                else verdicts.agrees
            agree = int((agrees & verdicts.judged).sum())
            if verdicts.theirs is not None and matrix.before is None:  # first: the verdict's words are long
                parts.append(tr("matrix.showing_dump" if self.show_before else "matrix.v_dump", lang))
            parts.append(tr(f"matrix.{verdicts.source}", lang, agree=agree, count=verdicts.count,
                            tolerance=tolerance_words(*verdicts.tolerance, lang)))
        lines = [Text(f"{self.title} · {shape_text(matrix.values.shape)}", style="bold"),
                 Text(" · ".join(p for p in parts if p), style="italic")]
        wide = self.SUMMARY and len(cols) < n_cols
        return lines + [Text(summary_text(matrix, lang), style="italic")] if wide else lines


def summary_text(matrix: MatrixFrame, lang: str) -> str:
    """The last position's row in one line; the top entries as compactly as their labels allow."""
    summary = matrix.summary
    if summary is None:
        return ""
    if summary.top:
        entries = ", ".join(f"{_piece(label)} {p:.2f}".replace(" 0.", " .") for label, p in summary.top)
        return tr("matrix.top", lang, label=summary.label, count=len(summary.top), entries=entries)
    if math.isnan(summary.low):
        return tr("matrix.no_finite", lang, label=summary.label)
    return tr("matrix.range", lang, label=summary.label, low=format_number(summary.low),
              high=format_number(summary.high), mean=format_number(summary.mean), argmax=summary.argmax)


def _piece(text: str) -> str:
    """A token's text, quoted where spaces at its ends would otherwise not show."""
    return repr(text) if not text or text != text.strip() else text
