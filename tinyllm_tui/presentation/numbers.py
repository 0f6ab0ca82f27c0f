"""How numbers and labelled matrices are written, on screen and on the command line."""

from __future__ import annotations

import math

from rich.cells import cell_len

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


def display_width(text: str) -> int:
    """Terminal cells: CJK labels are two cells wide (ASCII, every number, is counted without Rich)."""
    return len(text) if text.isascii() else cell_len(text)


def fit_cells(text: str, width: int) -> str:
    """`text` cut to `width` display cells, the cut marked with … (a wide character is never cut in half)."""
    if display_width(text) <= width:
        return text
    cut = text
    while cut and display_width(cut) > max(width - 1, 0):
        cut = cut[:-1]
    return cut + "…"


def left_aligned(text: str, width: int) -> str:
    """Padded on the right to `width` display cells."""
    return text + " " * max(width - display_width(text), 0)


def right_aligned(text: str, width: int = NUMBER_WIDTH) -> str:
    """Pad on the left by display cells.

    Textual renders Rich tables without their columns' justify, so alignment is in the text.
    """
    return " " * max(width - display_width(text), 0) + text


def _ends(count: int, keep: int) -> list[int | None]:
    """The first and last `keep` indices of `count`, None standing for the ones left out."""
    if count <= 2 * keep:
        return list(range(count))
    return [*range(keep), None, *range(count - keep, count)]


def text_table(matrix: Labelled, *, title: str, keep: int | None = None) -> str:
    """A labelled matrix as plain text, every number whole whatever the terminal; with `keep`,
    only its first and last `keep` rows and columns, "…" standing for the rest."""
    values = to_host(matrix.values)
    rows, cols = (_ends(n, keep) if keep else list(range(n)) for n in values.shape)
    row_labels = iter(resolve_some(matrix.row_axis, [i for i in rows if i is not None]))
    col_labels = iter(resolve_some(matrix.col_axis, [j for j in cols if j is not None]))
    table = [["", *("…" if j is None else next(col_labels) for j in cols)]]
    for i in rows:
        numbers = ("…" if i is None or j is None else format_number(float(values[i, j])) for j in cols)
        table.append(["…" if i is None else next(row_labels), *numbers])
    sizes = [[display_width(text) for text in line] for line in table]
    widths = [max(column) for column in zip(*sizes)]
    widths[1:] = [max(NUMBER_WIDTH, width) for width in widths[1:]]
    lines = [line[0] + " " * (widths[0] - used[0])
             + "".join(f"  {' ' * (width - size)}{text}" for text, size, width in zip(line[1:], used[1:], widths[1:]))
             for line, used in zip(table, sizes)]
    return "\n".join([title, *lines])
