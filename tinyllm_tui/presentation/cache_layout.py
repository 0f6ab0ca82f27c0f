"""A layer state's layout as a view words it: the words it hands the Debugger for row labels (row_words; the
labels themselves: tinyllm_tui.debugger.row_labels), position spans, and the line it is worded with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from engine.loading.budget import format_size
from engine.labels import WORDS
from engine.state import Positions, Size
from tinyllm_tui.debugger.row_labels import RowWords
from tinyllm_tui.tui.i18n import cause_words, tr

__all__ = ["row_words", "spans", "state_line"]


def row_words(lang: str) -> RowWords:
    """The catalogue's words inside row labels, and inside an operator's (an attention sink's column, a norm's
    divisor: engine.labels.WORDS), in `lang`, which a view hands Debugger.subscribe."""
    return RowWords(tr("label.slot", lang), tr("label.empty", lang), tr("label.batch_row", lang),
                    {code: tr(f"label.{code}", lang) for code in WORDS})


def spans(positions: Sequence[int]) -> str:
    """Ascending positions as ranges: "1–4 9"."""
    parts, start = [], None
    for i, p in enumerate(positions):
        start = p if start is None else start
        if i + 1 == len(positions) or positions[i + 1] != p + 1:
            parts.append(str(p) if p == start else f"{start}–{p}")
            start = None
    return " ".join(parts)


def state_line(line, lang: str) -> str:
    """The line a layer state is worded with beside its rows (a cache frame's `line`: a cause carrying its kind's
    words, or the catalogue's for a K/V cache's layout) in `lang`, byte counts as sizes, positions as spans; "" where
    it has none."""
    if line is None:
        return ""
    return cause_words(replace(line, facts={name: _fact(value, lang) for name, value in line.facts.items()}), lang)


def _fact(value, lang: str):
    if isinstance(value, Size):
        return format_size(value)
    if isinstance(value, Positions):
        return spans(value) or tr("cache.no_positions", lang)
    return value
