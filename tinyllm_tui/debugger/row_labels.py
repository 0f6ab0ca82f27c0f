"""A layer state's rows as the frames label them: a ring's physical slots ("s2↺ +8 · cat": slot 2 holds
position 8, added this chunk; the next write goes to the slot marked ↺; "s3  empty" before it is filled), a
paged cache's rows with their physical block and row in it ("b3.1 +5 · cat").

The words inside the labels are the view's (`RowWords`, handed to `Debugger.subscribe`); the Debugger has
none of its own: a reader that subscribes with none (a test, a benchmark) gets language-free marks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.labels import WORDS
from engine.state import LayerState
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


PLACES = {  # where a row lies in its state's layout (LayerState.row_place), before its position
    "slot": lambda words, slot, next: f"{words.slot.format(slot=slot)}{'↺' if next else ' '} ",  # a ring's slot
    "block": lambda words, block, row: f"b{block}.{row} ",  # a paged cache's physical block and row in it
}


def row_label(state: LayerState, row: int, timeline: Sequence[TokenState], new_from: int, differing: frozenset[int],
              words: RowWords) -> str:
    """Row `row` of a state's views: ✗ where it differs from a --against dump, + where this chunk added it, its
    position and token, after where it lies in the state's layout (its `row_place`: a ring's slot, a paged row's
    block; `words.empty` where no token is held yet)."""
    position = state.row_positions[row]
    mark = "✗" if position in differing else "+" if position >= new_from else " "
    token = timeline[position].text if 0 <= position < len(timeline) else "?"  # an injected bug added a row
    text = f"{mark}{position} · {token}"
    if hasattr(state, "row_place"):
        code, facts = state.row_place(row)
        return PLACES[code](words, **facts) + (words.empty if position < 0 else text)
    if position < 0:  # a conv window before as many tokens as it holds were fed
        return f" {words.empty}"
    return text
