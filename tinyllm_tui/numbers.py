"""How numbers and labelled matrices are written, on screen and on the command line."""

from __future__ import annotations

import math

from rich import box
from rich.table import Table

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


def matrix_table(matrix: Labelled, *, title: str | None = None) -> Table:
    """A Rich table with the row labels in the first column."""
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    table.add_column("", style="bold")
    for col in matrix.cols:
        table.add_column(col, justify="right")
    for label, row in zip(matrix.rows, to_host(matrix.values)):
        table.add_row(label, *(format_number(float(x)) for x in row))
    return table
