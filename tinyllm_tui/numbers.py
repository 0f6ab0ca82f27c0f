"""How numbers and labelled matrices are written, on screen and on the command line."""

from __future__ import annotations

import math

from rich import box
from rich.cells import cell_len
from rich.style import Style
from rich.table import Table
from rich.text import Text

from engine import Labelled, to_host
from engine.labels import resolve_some

DECIMALS = 6


def format_number(x: float) -> str:
    """6 decimals, like the seed tables; −∞ for masked scores."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "−∞" if x < 0 else "+∞"
    text = f"{x:.{DECIMALS}f}"
    return "0.000000" if text == "-0.000000" else text


NUMBER_WIDTH = len("-0.000000")


def right_aligned(text: str, width: int = NUMBER_WIDTH) -> str:
    """Pad on the left by display cells (CJK labels are two cells wide).

    Textual renders Rich tables without their columns' justify, so alignment is in the text.
    """
    return " " * max(width - cell_len(text), 0) + text


def number_cell(x: float, style: Style | str = "") -> Text:
    return Text(right_aligned(format_number(x)), style=style)


def number_table(title: str | None, cols, **options) -> Table:
    """A table whose number columns never squeeze a value: 6 decimals stay readable."""
    table = Table(title=title, title_justify="left", pad_edge=False, padding=(0, 1, 0, 0), **options)
    table.add_column("", style="bold", no_wrap=True)
    for col in cols:
        table.add_column(right_aligned(col), no_wrap=True)
    return table


def matrix_table(matrix: Labelled, *, title: str | None = None) -> Table:
    """A Rich table with the row labels in the first column."""
    table = number_table(title, matrix.cols, box=box.SIMPLE_HEAD)
    for label, row in zip(matrix.rows, to_host(matrix.values)):
        table.add_row(label, *(number_cell(float(x)) for x in row))
    return table


def _ends(count: int, keep: int) -> list[int | None]:
    """The first and last `keep` indices of `count`, None standing for the ones left out."""
    if count <= 2 * keep:
        return list(range(count))
    return [*range(keep), None, *range(count - keep, count)]


def corner_table(matrix: Labelled, *, title: str | None = None, keep: int = 4) -> Table:
    """The corners of a large matrix: its first and last `keep` rows and columns, "…" between."""
    values = to_host(matrix.values)
    rows, cols = _ends(values.shape[0], keep), _ends(values.shape[1], keep)
    row_labels = iter(resolve_some(matrix.row_axis, [i for i in rows if i is not None]))
    col_labels = iter(resolve_some(matrix.col_axis, [j for j in cols if j is not None]))
    table = number_table(title, ["…" if j is None else next(col_labels) for j in cols], box=box.SIMPLE_HEAD)
    for i in rows:
        if i is None:
            table.add_row("…", *(right_aligned("…") for _ in cols))
            continue
        cells = (right_aligned("…") if j is None else number_cell(float(values[i, j])) for j in cols)
        table.add_row(next(row_labels), *cells)
    return table
