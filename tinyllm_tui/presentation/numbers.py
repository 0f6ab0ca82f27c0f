"""How numbers and labelled matrices are written, on screen and on the command line."""

from __future__ import annotations

import math

import numpy as np

from rich.cells import cell_len

from engine import Labelled, to_host
from engine.labels import Axis, resolve_some

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


class _LabelCache:
    """The labels (and their widths in cells) of an axis's entries, made once for the operators that share them:
    a round's thousands of operators have the same rows, and `run` prints a table for each."""

    SIZE = 4096

    def __init__(self):
        self._made: dict[tuple, tuple] = {}

    def get(self, axis: Axis | tuple[str, ...], indices: list[int]) -> tuple[tuple[str, ...], list[int]]:
        if not isinstance(axis, Axis):
            labels = resolve_some(axis, indices)
            return labels, list(map(display_width, labels))
        key = (*axis[:4], *axis[5:], tuple(indices))  # the vocabulary by identity (a vocabulary's hash reads it all)
        vocab, labels, widths = self._made.get(key, (None, None, None))
        if labels is None or vocab is not axis.vocab:
            if len(self._made) >= self.SIZE:
                self._made.clear()
            labels = resolve_some(axis, indices)
            widths = tuple(map(display_width, labels))
            self._made[key] = (axis.vocab, labels, widths)
        return labels, list(widths)


some_labels = _LabelCache().get


def _shown(count: int, keep: int | None) -> list[int]:
    """The indices of `count` a table shows: all, or with `keep` its first and last `keep`."""
    if keep is None or count <= 2 * keep:
        return list(range(count))
    return [*range(keep), *range(count - keep, count)]


def number_texts(block: np.ndarray) -> list[str]:
    """`format_number` of every entry of `block`, row after row, in one formatting call: `run` prints about
    fifty of them for every operator, and one call per number was most of its cost."""
    flat = block.ravel().tolist()
    text = _SIX * len(flat) % tuple(flat)
    if "n" in text or "-0.000000" in text:  # nan, inf: their own signs; a negative zero without its sign
        return [format_number(x) for x in flat]
    return text.split("\n")[:-1]


_SIX = f"%.{DECIMALS}f\n"


def text_table(matrix: Labelled, *, title: str, keep: int | None = None) -> str:
    """A labelled matrix as plain text, every number whole whatever the terminal; with `keep`,
    only its first and last `keep` rows and columns, "…" standing for the rest."""
    values = to_host(matrix.values)
    rows, cols = (_shown(n, keep) for n in values.shape)
    cut_rows, cut_cols = len(rows) < values.shape[0], len(cols) < values.shape[1]
    texts = number_texts(values.take(rows, 0).take(cols, 1) if cut_rows or cut_cols else values)
    body = [texts[k * len(cols):(k + 1) * len(cols)] for k in range(len(rows))]
    labels, label_sizes = some_labels(matrix.row_axis, rows)
    header, header_sizes = some_labels(matrix.col_axis, cols)
    labels, header = list(labels), list(header)
    if cut_cols:
        for line in [header, header_sizes, *body]:
            line.insert(keep, "…")
        header_sizes[keep] = 1
    if cut_rows:
        labels.insert(keep, "…")
        label_sizes.insert(keep, 1)
        body.insert(keep, ["…"] * len(header))
    label_width = max(label_sizes, default=0)
    widths = [max(NUMBER_WIDTH, size, *map(len, column))
              for size, column in zip(header_sizes, zip(*body) if body else [()] * len(header))]
    numbers_line = "".join(f"  %{width}s" for width in widths)  # numbers and "…" are one cell a character
    lines = [" " * label_width + "".join(f"  {' ' * (width - size)}{text}"
                                         for text, size, width in zip(header, header_sizes, widths))]
    lines += [label + " " * (label_width - size) + numbers_line % tuple(line)
              for label, size, line in zip(labels, label_sizes, body)]
    return "\n".join([title, *lines])
