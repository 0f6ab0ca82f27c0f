"""A layer state's rows as the frames label them: a ring's physical slots ("s2↺ +8 · cat": slot 2 holds
position 8, added this chunk; the next write goes to the slot marked ↺; "s3  empty" before it is filled), a
paged cache's rows with their physical block and row in it ("b3.1 +5 · cat").

The words inside the labels are the view's (`RowWords`, handed to `Debugger.subscribe`); the Debugger has
none of its own: a reader that subscribes with none (a test, a benchmark) gets language-free marks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.caches import LayerCache, PagedCache, RingCache
from engine.labels import WORDS
from engine.trace import TokenState


@dataclass(frozen=True)
class RowWords:
    """The words inside row labels, in the language of the view that subscribes to frames."""

    slot: str  # a ring's physical slot: "s{slot}"
    empty: str  # a slot not written yet
    batch_row: str  # a batch's row, by its request: "r{request}"
    labels: dict[str, str] = field(default_factory=WORDS.copy)  # inside an operator's labels, by code
    # (engine.labels.WORDS: an attention sink's column, a norm's divisor, the decode rule's choice)


MARKS = RowWords("#{slot}", "–", "#{request}")  # no language's: for a subscriber that hands no words


def row_label(cache: LayerCache, row: int, timeline: Sequence[TokenState], new_from: int, differing: frozenset[int],
              words: RowWords) -> str:
    """Row `row` of a state's views: ✗ where it differs from a --against dump, + where this chunk added it, its
    position and token, after a ring's slot or a paged row's block (`words.empty` where no token is held yet)."""
    position = cache.row_positions[row]
    mark = "✗" if position in differing else "+" if position >= new_from else " "
    token = timeline[position].text if 0 <= position < len(timeline) else "?"  # an injected bug added a row
    text = f"{mark}{position} · {token}"
    if isinstance(cache, RingCache):
        slot = f"{words.slot.format(slot=row)}{'↺' if row == cache.write_position else ' '} "
        return slot + (words.empty if position < 0 else text)
    if position < 0:  # a conv window before as many tokens as it holds were fed
        return f" {words.empty}"
    if isinstance(cache, PagedCache):
        block, offset = cache.slot_of(position)
        return f"b{block}.{offset} {text}"
    return text
