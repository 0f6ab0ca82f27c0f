"""How numbers and labelled matrices are written, on screen and on the command line."""

from __future__ import annotations

import math

from rich import box
from rich.cells import cell_len
from rich.style import Style
from rich.table import Table
from rich.text import Text

from engine import Labelled, to_host

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
