"""The current operator's output as a labelled table with optional heat colouring.

Only a window of columns is put into the DataTable, so a 768-wide matrix costs
no more per step than what fits on screen; `<` and `>` move the window.
"""

from __future__ import annotations

import math

import numpy as np
from rich.cells import cell_len
from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from engine import Labelled, to_host

from ..numbers import number_cell

CELL_WIDTH = 10  # "-1.371908" plus one space; the table adds no padding
PROBABILITY_KINDS = ("softmax", "probs")
BASE = (24, 24, 32)
POSITIVE, NEGATIVE, SEQUENTIAL = (170, 50, 50), (50, 90, 180), (40, 140, 70)


def heat_style(x: float, scale: float, sequential: bool) -> Style:
    """Diverging red/blue for signed values, one green ramp for probabilities."""
    if not math.isfinite(x):
        return Style(dim=True)
    t = min(abs(x) / scale, 1.0) if scale > 0 else 0.0
    target = SEQUENTIAL if sequential else (POSITIVE if x >= 0 else NEGATIVE)
    rgb = [round(b + (c - b) * t) for b, c in zip(BASE, target)]
    return Style(bgcolor=Color.from_rgb(*rgb), color="white")


class MatrixView(Vertical):
    def compose(self):
        yield Static(id="matrix-title")
        table = DataTable(cursor_type="none", show_cursor=False, cell_padding=0)
        table.can_focus = False
        yield table

    def on_mount(self) -> None:
        self.col_offset = 0
        self._matrix: Labelled | None = None
        self._title = ""
        self._kind = ""
        self.heat = True

    def show(self, matrix: Labelled, *, title: str, kind: str) -> None:
        if matrix is not self._matrix:
            self.col_offset = 0
        self._matrix, self._title, self._kind = matrix, title, kind
        self.refresh_table()

    def shift_columns(self, direction: int) -> bool:
        if self._matrix is None:
            return False
        width = self._visible_columns()
        offset = self.col_offset + direction * width
        if not 0 <= offset < len(self._matrix.cols):
            return False
        self.col_offset = offset
        self.refresh_table()
        return True

    def on_resize(self, event) -> None:
        # Only a new width changes the column window; height follows the rows we put in.
        if self._matrix is not None and event.size.width != getattr(self, "_laid_out_width", None):
            self._laid_out_width = event.size.width
            self.refresh_table()

    def _visible_columns(self) -> int:
        label_width = max((cell_len(r) for r in self._matrix.rows), default=4) + 2
        return max(1, (self.size.width - label_width) // CELL_WIDTH) if self.size.width else 8

    def refresh_table(self) -> None:
        matrix = self._matrix
        values = to_host(matrix.values)
        first, count = self.col_offset, self._visible_columns()
        cols = range(first, min(first + count, len(matrix.cols)))
        window = "" if len(cols) == len(matrix.cols) else f" · cols {cols[0]}–{cols[-1]} of {len(matrix.cols)} (< >)"
        shape = f"{len(matrix.rows)}×{len(matrix.cols)}"
        self.query_one("#matrix-title", Static).update(Text(f"{self._title} · {shape}{window}", style="bold"))
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_column("", key="label")
        for j in cols:
            table.add_column(Text(matrix.cols[j], justify="right"), key=str(j), width=CELL_WIDTH)
        finite = values[np.isfinite(values)]
        scale = float(np.max(np.abs(finite), initial=0.0))
        sequential = self._kind in PROBABILITY_KINDS
        for i, label in enumerate(matrix.rows):
            cells = [self._cell(float(values[i, j]), scale, sequential) for j in cols]
            table.add_row(Text(label + " ", style="bold"), *cells)

    def _cell(self, x: float, scale: float, sequential: bool) -> Text:
        return number_cell(x, heat_style(x, scale, sequential) if self.heat else Style(dim=not math.isfinite(x)))
