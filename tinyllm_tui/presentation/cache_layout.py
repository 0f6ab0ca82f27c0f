"""How a KV-cache layout and a batch read on screen: text the TUI's cache view and timeline share.

A ring's rows are its physical slots ("s2 ↺ 7 · cat": slot 2 holds position 7; the next write goes to
the slot marked ↺), a paged cache's rows carry their physical block and row ("b3.1"), and one line
says what the layout holds beside its rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.caches import LayerCache, PagedCache, PagedFacts, QuantizedFacts, RingCache, RingFacts
from engine.loading.budget import format_size
from engine.trace import BatchRow, TokenState


def layout_line(cache: LayerCache) -> str:
    """One line about what the layout holds beside its rows ("" for a contiguous cache)."""
    facts = cache.facts
    if isinstance(facts, RingFacts):
        sinks = f"+{facts.sinks} sink{'s' * (facts.sinks != 1)}" if facts.sinks else ""
        held = set(cache.row_positions)
        evicted = spans([p for p in range(cache.seen) if p not in held])
        return f"ring w{facts.window}{sinks} · next s{facts.write} · evicted {evicted or 'none'}"
    if isinstance(facts, PagedFacts):
        table = " ".join(f"{block}{'*' * shared}" for block, shared in zip(facts.table, facts.shared))
        return f"paged ×{facts.block_size} · table [{table}] (*shared) · pool {facts.blocks}"
    if isinstance(facts, QuantizedFacts):
        return (f"{facts.quantize} {facts.scale.replace('_', ' ')}: {format_size(facts.nbytes)} stored "
                f"(exact {format_size(facts.exact_nbytes)})")
    return ""


def spans(positions: Sequence[int]) -> str:
    """Ascending positions as ranges: "1–4 9"."""
    parts, start = [], None
    for i, p in enumerate(positions):
        start = p if start is None else start
        if i + 1 == len(positions) or positions[i + 1] != p + 1:
            parts.append(str(p) if p == start else f"{start}–{p}")
            start = None
    return " ".join(parts)


def row_labels(cache: LayerCache, timeline: Sequence[TokenState], new_from: int,
               differing: frozenset[int] = frozenset()) -> list[str]:
    """A label per row of k/v: ✗ for rows that differ from a --against dump, + for rows this chunk
    added, the position and its token; a ring's slot (↺ where the next write goes, "empty" before it
    is filled), a paged row's block."""
    def token(position: int) -> str:
        return timeline[position].text if position < len(timeline) else "?"  # an injected bug added a row

    def label(row: int, position: int) -> str:
        new = "✗" if position in differing else "+" if position >= new_from else " "
        if isinstance(cache, RingCache):
            mark = "↺" if row == cache.write_position else " "
            return f"s{row}{mark} " + ("empty" if position < 0 else f"{new}{position} · {token(position)}")
        if isinstance(cache, PagedCache):
            block, offset = cache.slot_of(position)
            return f"b{block}.{offset} {new}{position} · {token(position)}"
        return f"{new}{position} · {token(position)}"

    return [label(row, position) for row, position in enumerate(cache.row_positions)]


def batch_row_head(row: BatchRow, current: int, pad: str = "pad") -> str:
    """The start of a batch row's line: ▸ on the current request, its padding (`pad`: the word), a
    stop once it left."""
    stop = f" ⏹ {row.stop}" if row.stop else ""
    return f"{'▸' if row.request == current else ' '} r{row.request} {pad} {row.pad}{stop}  "
