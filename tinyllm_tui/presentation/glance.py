"""Attention at a glance: every head of a layer as a small heat map of shade glyphs, side by side.

Plain text lines, windowed: the heads and the positions that fit the width and height asked for
(the last query and key positions: the ones a decode round adds). Shared by the TUI panel and tests.
"""

from __future__ import annotations

import numpy as np

from tinyllm_tui.presentation.numbers import display_width, fit_cells, left_aligned

SHADES = " ░▒▓█"  # probability 0 … 1, in five steps
GAP = 2  # columns between two heat maps
GUTTER = 2  # the query labels' column on the left


def shade(probability: float) -> str:
    """0 -> ' ', 1 -> '█': masked (0.000000) keys stay blank."""
    if not probability > 0:
        return SHADES[0]
    return SHADES[min(len(SHADES) - 1, 1 + int(probability * (len(SHADES) - 1)))]


def key_width(keys: list[str]) -> int:
    """Display cells per key: 2 where a key's label begins with a wide character (学), so that labels and
    shades stay in their columns; else 1."""
    return 2 if any(display_width(label[:1]) > 1 for label in keys) else 1


def head_width(patterns: list[np.ndarray], keys: list[str], width: int) -> tuple[int, int]:
    """How many key columns each heat map shows within `width`, and the cells one takes with the gap after it."""
    cell = key_width(keys)
    cols = min(patterns[0].shape[1], max((width - GUTTER - 4) // cell, 1))
    return cols, max(cols * cell, 4) + GAP


SHOWN = "heads {first}–{last} of {heads} · last {rows} of {queries} queries, {cols} of {keys} keys"  # the CLI's


def heads_glance_lines(patterns: list[np.ndarray], keys: list[str], *, width: int, height: int,
                 first_head: int = 0, selected: int | None = None, shown_words: str = SHOWN) -> list[str]:
    """Heads `first_head`, … of one layer as heat maps, as many as fit in `width` × `height`.

    Args:
        patterns: each head's (queries, keys) attention pattern, host arrays.
        keys: a one-character label per key position; the queries are the last positions, labelled alike
            in a gutter on the left.
        selected: the head marked with ▸ in its title (the one Enter opens).
        shown_words: the last line's words (the view's catalogue; fields first, last, heads, rows, queries, cols, keys).
    Returns the lines, each at most `width` characters; the first names the heads shown.
    """
    if not patterns:
        return []
    queries, count = patterns[0].shape
    rows = min(queries, max(height - 3, 1))  # a title line, the key labels, the window line
    cell = key_width(keys)
    cols, per = head_width(patterns, keys, width)
    shown = range(first_head, min(len(patterns), first_head + max((width - GUTTER) // per, 1)))
    lines = [" " * GUTTER + "".join(f"{('▸' if head == selected else ' ') + f'h{head}':<{per}}" for head in shown)]
    for row in range(rows):
        label = keys[count - rows + row] if count - rows + row < len(keys) else " "  # a query at its key's position
        lines.append(left_aligned(fit_cells(label[:1] or " ", GUTTER), GUTTER) + "".join(
            f"{''.join(shade(float(p)) * cell for p in patterns[head][-rows + row, -cols:]):<{per}}" for head in shown))
    labels = "".join(left_aligned((label or " ")[:1], cell) for label in keys[count - cols:count])
    lines.append(" " * GUTTER + "".join(left_aligned(labels, per) for _ in shown))
    lines.append(shown_words.format(first=shown.start, last=shown.stop - 1, heads=len(patterns), rows=rows,
                                    queries=queries, cols=cols, keys=count))
    return [fit_cells(line.rstrip(), width) for line in lines]
