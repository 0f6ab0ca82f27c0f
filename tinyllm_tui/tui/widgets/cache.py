"""One layer's state, one head at a time: each of its views (a K/V cache's K and V) side by side, newest rows
in view.

The frame holds the slice shown (tinyllm_tui.debugger.frame.CacheFrame): which layer and head, its views,
how many rows are new, whether they were computed with other weights. A state with more views than the
two windows composed gets a window more for each. `[ ] { }` page through
layers and heads (a Debugger move), `< >` the head's columns, as in the matrix window.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical

from tinyllm_tui.debugger.frame import CacheFrame
from tinyllm_tui.presentation.cache_layout import state_line
from tinyllm_tui.tui.i18n import cause_words, tr, words
from tinyllm_tui.tui.widgets.blank import Box
from tinyllm_tui.tui.widgets.matrix import MatrixWindow
from tinyllm_tui.tui.widgets.wrapped import Wrapped


class CacheView(Vertical):
    lang = "en"

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self._shown: CacheFrame | None = None
        self._windows: list[MatrixWindow] = []  # one per view, found once

    def compose(self) -> ComposeResult:
        yield Wrapped(lines=2, most=4, classes="cache-title")  # where, then what it holds: wrapped, never cut
        with Box(classes="cache-pair"):  # K above V beside the matrix, K beside V in a tab
            yield MatrixWindow(classes="cache-k")
            yield MatrixWindow(classes="cache-v")

    def on_mount(self) -> None:
        for window in self.query(MatrixWindow):
            window.lang = self.lang

    @property
    def windows(self) -> list[MatrixWindow]:
        return list(self.query(MatrixWindow))

    def show(self, cache: CacheFrame | None) -> None:
        """Redrawn only where it changed: most operators leave the cache as it was."""
        if self._shown is not None and cache is not None and _same(self._shown, cache):
            return
        self._shown = cache
        lang = self.lang
        title = self.query_one(".cache-title", Wrapped)
        if cache is None:
            title.show_text(Text(tr("cache.none", lang)))
            return
        where = Text(cause_words(cache.heading, lang) if cache.heading else tr(  # a kind's own, or the K/V caches'
            "cache.where", lang, layer=cache.layer, last_layer=cache.layers - 1, head=cache.head,
            last_head=cache.heads - 1), style="bold")
        where.append(" ([ ] { })\n")
        rows = tr("cache.fed" if cache.fed else "cache.rows", lang, rows=cache.length, new=cache.appended)
        layout = layout_line(cache, lang)
        rows = f"{layout} · {rows}" if layout else rows  # the layout first: a ring's write slot must show
        if cache.stale:  # the warning first: it must survive a narrow panel
            where.append(f"{tr('cache.stale', lang)} · {rows}", style="bold yellow")
        else:
            where.append(f"{rows} · {tr('cache.current', lang)}")
        if cache.differing:
            where.append(" · " + tr("cache.differ", lang, count=len(cache.differing)), style="bold red")
        title.show_text(where)
        windows = self._windows or self.windows
        if len(cache.views) > len(windows):  # a state with more views than K and V: a window more for each
            extra = [MatrixWindow() for _ in range(len(cache.views) - len(windows))]
            for window in extra:
                window.lang = lang
            self.query_one(".cache-pair", Box).mount(*extra)
            windows += extra
        self._windows = windows
        for index, window in enumerate(windows):
            shown = index < len(cache.views)
            if window.display != shown:
                window.display = shown
            if shown:
                window.show(cache.views[index], words(cache.titles[index], lang))  # layer and head: the title above


def layout_line(cache: CacheFrame, lang: str) -> str:
    """What the state holds beside its rows, worded by its kind or, a K/V cache's layout, by the catalogue ("" for a
    contiguous cache)."""
    return state_line(cache.line, lang)


def _same(old: CacheFrame, new: CacheFrame) -> bool:
    if not old.views or not new.views:  # a state with no rows of its own: its title is all there is
        return False
    first, other = old.views[0].values, new.views[0].values
    return (first.base is other.base and first.base is not None and len(old.views) == len(new.views)
            and (old.layer, old.head, old.length, old.appended, old.stale, old.differing, old.line, old.evicted)
            == (new.layer, new.head, new.length, new.appended, new.stale, new.differing, new.line, new.evicted))
