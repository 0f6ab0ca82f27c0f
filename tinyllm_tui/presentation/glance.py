"""Attention at a glance: every head of a layer as a small heat map of shade glyphs, side by side.

Plain text lines, windowed: the heads and the positions that fit the width and height asked for
(the last query and key positions: the ones a decode round adds). Shared by the TUI panel and tests.
"""

from __future__ import annotations

import numpy as np

SHADES = " ░▒▓█"  # probability 0 … 1, in five steps
GAP = 2  # columns between two heat maps
GUTTER = 2  # the query labels' column on the left


def shade(probability: float) -> str:
    """0 -> ' ', 1 -> '█': masked (0.000000) keys stay blank."""
    if not probability > 0:
        return SHADES[0]
    return SHADES[min(len(SHADES) - 1, 1 + int(probability * (len(SHADES) - 1)))]


def glance_lines(patterns: list[np.ndarray], keys: list[str], *, width: int, height: int,
                 first_head: int = 0, selected: int | None = None) -> list[str]:
    """Heads `first_head`, … of one layer as heat maps, as many as fit in `width` × `height`.

    Args:
        patterns: each head's (queries, keys) attention pattern, host arrays.
        keys: a one-character label per key position; the queries are the last positions, labelled alike
            in a gutter on the left.
        selected: the head marked with ▸ in its title (the one Enter opens).
    Returns the lines, each at most `width` characters; the first names the heads shown.
    """
    if not patterns:
        return []
    queries, count = patterns[0].shape
    rows = min(queries, max(height - 3, 1))  # a title line, the key labels, the window line
    cols = min(count, max(width - GUTTER - 4, 1))
    per = max(cols, 4) + GAP
    shown = range(first_head, min(len(patterns), first_head + max((width - GUTTER) // per, 1)))
    lines = [" " * GUTTER + "".join(f"{('▸' if head == selected else ' ') + f'h{head}':<{per}}" for head in shown)]
    for row in range(rows):
        label = keys[count - rows + row] if count - rows + row < len(keys) else " "  # a query at its key's position
        lines.append(f"{label:<{GUTTER}}" + "".join(
            f"{''.join(shade(float(p)) for p in patterns[head][-rows + row, -cols:]):<{per}}" for head in shown))
    labels = "".join((label or " ")[0] for label in keys[count - cols:count])
    lines.append(" " * GUTTER + "".join(f"{labels:<{per}}" for _ in shown))
    lines.append(f"heads {shown.start}–{shown.stop - 1} of {len(patterns)} · last {rows} of {queries} queries, "
                 f"{cols} of {count} keys")
    return [line.rstrip()[:width] for line in lines]
