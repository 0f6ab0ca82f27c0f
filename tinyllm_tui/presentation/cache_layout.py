"""A KV-cache layout's rows as a view labels them, shared by the frame builder and the views.

A ring's rows are its physical slots ("s2↺ +8 · cat": slot 2 holds position 8, added this chunk; the
next write goes to the slot marked ↺; "s3  empty" before it is filled), a paged cache's rows carry
their physical block and row in it ("b3.1 +5 · cat").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.caches import LayerCache, PagedCache, RingCache
from engine.loading.budget import format_size
from engine.state import Size
from engine.trace import TokenState
from tinyllm_tui.tui.i18n import tr

__all__ = ["RowWords", "counts_fed", "layout_kind", "layout_words", "row_label", "row_words", "spans"]


@dataclass(frozen=True)
class RowWords:
    """The words inside row labels, in the language of the view that subscribes to frames (row_words)."""

    slot: str  # a ring's physical slot: "s{slot}"
    empty: str  # a slot not written yet
    batch_row: str  # a batch's row, by its request: "r{request}"


def row_words(lang: str) -> RowWords:
    """The catalogue's words inside row labels in `lang`."""
    return RowWords(tr("label.slot", lang), tr("label.empty", lang), tr("label.batch_row", lang))


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


def spans(positions: Sequence[int]) -> str:
    """Ascending positions as ranges: "1–4 9"."""
    parts, start = [], None
    for i, p in enumerate(positions):
        start = p if start is None else start
        if i + 1 == len(positions) or positions[i + 1] != p + 1:
            parts.append(str(p) if p == start else f"{start}–{p}")
            start = None
    return " ".join(parts)


def layout_kind(facts) -> str | None:
    """The word a cache frame's `layout` facts are filed under (their `layout`, engine.state): a serving layout
    ("ring", "paged", "quantized") or a layer kind's state that is not a K/V cache ("conv", "recurrent",
    "shared"); None: a contiguous K/V cache."""
    return getattr(facts, "layout", None)


def counts_fed(facts) -> bool:
    """Whether the state counts the tokens fed through it, holding no rows of them (a recurrent state)."""
    return bool(getattr(facts, "fed", False))


def layout_words(facts) -> tuple[str, dict] | None:
    """The catalogue key and facts of the line a layer kind's state is worded with beside its rows (its facts'
    `words()`), byte counts as sizes; None where its facts have none."""
    if not hasattr(facts, "words"):
        return None
    key, found = facts.words()
    return key, {name: format_size(value) if isinstance(value, Size) else value for name, value in found.items()}
