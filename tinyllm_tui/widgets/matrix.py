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

CELL_WIDTH = 11  # a marker (✓ ✗ •) or space, "-1.371908", one space; the table adds no padding
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


def label_width(labels) -> int:
    return max((cell_len(label) for label in labels), default=4) + 1


def relabel(table: DataTable, row_labels, col_labels) -> None:
    """Empty `table`, then give it a label column and number columns of explicit widths
    (an auto-sized column sometimes rendered empty, or squeezed, right after clear())."""
    table.clear(columns=True)
    table.add_column("", key="label", width=label_width(row_labels))
    for j, label in enumerate(col_labels):
        table.add_column(Text(label, justify="right"), key=str(j), width=CELL_WIDTH)


class MatrixView(Vertical):
    def compose(self):
        yield Static(id="matrix-title")
        table = DataTable(cursor_type="none", show_cursor=False, cell_padding=0)
        table.can_focus = False
        yield table

    def on_mount(self) -> None:
        self.col_offset = 0
        self._before, self._show_before, self._verdicts = None, False, {}
        self._matrix: Labelled | None = None
        self._title = ""
        self._kind = ""
        self.heat = True

    def show(self, matrix: Labelled, *, title: str, kind: str, before=None, show_before: bool = False,
             verdicts: dict | None = None) -> None:
        """Args:
        before: the same operator's values before the last weight edit; changed cells get a •.
        show_before: display those earlier values instead of the current ones.
        verdicts: (row, col) -> whether the number printed in the text agrees (✓) or not (✗).
        """
        if matrix is not self._matrix:
            self.col_offset = 0
        self._matrix, self._title, self._kind = matrix, title, kind
        self._before, self._show_before = before, show_before
        self._verdicts = verdicts or {}
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
        return max(1, (self.size.width - label_width(self._matrix.rows) - 1) // CELL_WIDTH) if self.size.width else 8

    def refresh_table(self) -> None:
        matrix = self._matrix
        values = to_host(matrix.values)
        changed = np.zeros(values.shape, dtype=bool)
        if self._before is not None:
            changed = ~((values == self._before) | (np.isnan(values) & np.isnan(self._before)))
            values = self._before if self._show_before else values
        first, count = self.col_offset, self._visible_columns()
        cols = range(first, min(first + count, len(matrix.cols)))
        window = "" if len(cols) == len(matrix.cols) else f" · cols {cols[0]}–{cols[-1]} of {len(matrix.cols)} (< >)"
        shape = f"{len(matrix.rows)}×{len(matrix.cols)}"
        edit = ""
        if changed.any():
            edit = f" · {int(changed.sum())} cells changed by the edit (•)"
            edit += " · BEFORE the edit (v)" if self._show_before else " · v: before"
        if self._verdicts:
            agreeing = sum(self._verdicts.values())
            edit += f" · expect: {agreeing}/{len(self._verdicts)} printed cells agree (✓ ✗)"
        self.query_one("#matrix-title", Static).update(Text(f"{self._title} · {shape}{window}{edit}", style="bold"))
        table = self.query_one(DataTable)
        relabel(table, matrix.rows, [matrix.cols[j] for j in cols])
        finite = values[np.isfinite(values)]
        scale = float(np.max(np.abs(finite), initial=0.0))
        sequential = self._kind in PROBABILITY_KINDS
        for i, label in enumerate(matrix.rows):
            cells = [self._cell(float(values[i, j]), scale, sequential, changed[i, j], self._verdicts.get((i, j)))
                     for j in cols]
            table.add_row(Text(label, style="bold"), *cells)

    def _cell(self, x: float, scale: float, sequential: bool, changed: bool, agrees: bool | None) -> Text:
        """A space, one marker (✓/✗ against the text where it printed this cell, else • if edited), the number."""
        cell = number_cell(x, heat_style(x, scale, sequential) if self.heat else Style(dim=not math.isfinite(x)))
        if agrees is not None:
            marker = Text(" ✓", style="bold green") if agrees else Text(" ✗", style="bold red")
        else:
            marker = Text(" •", style="bold yellow") if changed else Text("  ")
        return marker + cell
