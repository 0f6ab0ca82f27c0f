"""Attention at a glance: every head of a layer as a small heat map of shade glyphs, side by side.

Plain text lines, windowed: the heads and the positions that fit the width and height asked for
(the last query and key positions: the ones a decode round adds). Shared by the TUI panel and tests.
"""

from __future__ import annotations

import numpy as np

SHADES = " ░▒▓█"  # probability 0 … 1, in five steps
GAP = 2  # columns between two heat maps


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
        keys: a short label per key position (one character is shown under each column).
        selected: the head marked with ▸ in its title (the one Enter opens).
    Returns the lines, each at most `width` characters; the first names the heads shown.
    """
    if not patterns:
        return []
    rows = min(patterns[0].shape[0], max(height - 3, 1))  # a title line, the key labels, the window line
    cols = min(patterns[0].shape[1], max(width - 4, 1))
    per = max(cols, 4) + GAP
    shown = range(first_head, min(len(patterns), first_head + max(width // per, 1)))
    lines = ["".join(f"{('▸' if head == selected else ' ') + f'h{head}':<{per}}" for head in shown)]
    for row in range(rows):
        lines.append("".join(
            f"{''.join(shade(float(p)) for p in patterns[head][-rows + row, -cols:]):<{per}}" for head in shown))
    labels = "".join((label or " ")[0] for label in keys[-cols:])
    lines.append("".join(f"{labels:<{per}}" for _ in shown))
    last = patterns[0].shape
    lines.append(f"heads {shown.start}–{shown.stop - 1} of {len(patterns)} · last {rows} of {last[0]} queries, "
                 f"{cols} of {last[1]} keys")
    return [line.rstrip()[:width] for line in lines]
