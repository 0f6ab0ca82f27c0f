"""One layer's KV cache, one head at a time: K and V side by side, newest rows in view."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Container, Vertical
from textual.reactive import reactive
from textual.widgets import Static

from engine import OpState, to_host

from tinyllm_tui.presentation.cache_layout import layout_line, row_labels
from tinyllm_tui.tui.widgets.matrix import MatrixData, MatrixWindow


def cache_heads(state: OpState, d_head: int) -> int:
    return max(state.caches[0].k.shape[1] // d_head, 1) if state.caches else 0


class CacheView(Vertical):
    """Shows `state`'s cache of `layer` (the current operator's layer unless moved with [ ]) and `head`."""

    state: OpState | None = None
    shown_layer = reactive(0, init=False)
    shown_head = reactive(0, init=False)
    pinned = False  # True once the user picked a layer: it no longer follows the operator
    fingerprint = ""  # the current weights' identity: rows computed with other weights are stale
    differing: Callable[[OpState, int], frozenset[int]] | None = None

    def __init__(self, d_head: int, *, id: str | None = None):
        super().__init__(id=id)
        self.d_head = d_head
        self._shown: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Static(classes="cache-title")
        with Container(classes="cache-pair"):  # K above V beside the matrix, K beside V in a tab
            yield MatrixWindow(classes="cache-k")
            yield MatrixWindow(classes="cache-v")

    def show(self, state: OpState, fingerprint: str, differing: Callable[[OpState, int], frozenset[int]] | None = None
             ) -> None:
        """The cache as `state` left it; redrawn only where it changed (a container's refresh repaints all).

        differing: the rows of a layer's cache that differ from a --against dump (marked ✗)."""
        self.state, self.fingerprint, self.differing = state, fingerprint, differing
        if not self.pinned and state.layer is not None:
            self.shown_layer = state.layer
        elif not self.pinned and state.caches and state.caches[-1].length > state.chunk_past:
            self.shown_layer = len(state.caches) - 1  # past the blocks: the last layer's cache is the newest
        self._show()

    def watch_shown_layer(self) -> None:
        self._show()

    def watch_shown_head(self) -> None:
        self._show()

    def move(self, layers: int = 0, heads: int = 0) -> str:
        """Page through layers and heads; returns what is shown now."""
        state = self.state
        if state is None or not state.caches:
            return "no KV cache yet"
        self.pinned = self.pinned or bool(layers)
        self.shown_layer = (self.shown_layer + layers) % len(state.caches)
        self.shown_head = (self.shown_head + heads) % cache_heads(state, self.d_head)
        return f"KV cache: layer {self.shown_layer} head {self.shown_head}"

    def _show(self) -> None:
        state = self.state
        if state is None or not self.is_mounted:
            return
        title = self.query_one(".cache-title", Static)
        if not state.caches:
            title.update(Text("This model keeps no KV cache (no layer has run yet)."), layout=False)
            return
        layer = min(self.shown_layer, len(state.caches) - 1)
        cache = state.caches[layer]
        heads = cache_heads(state, self.d_head)
        head = min(self.shown_head, heads - 1)
        differing = self.differing(state, layer) if self.differing else frozenset()
        shown = (layer, head, self.fingerprint, state.chunk_past, differing)
        if self._shown is not None and self._shown[0] is cache.k and self._shown[1] == shown:
            return  # most operators leave the cache as it was: nothing to redraw
        self._shown = (cache.k, shown)
        appended = sum(p >= state.chunk_past for p in cache.row_positions)  # a ring holds them anywhere
        where = Text.assemble((f"KV cache · layer {layer}/{len(state.caches) - 1} · head {head}/{heads - 1}", "bold"),
                              " ([ ] { })\n")
        rows = f"{cache.length} rows, {appended} new (+)"
        layout = layout_line(cache)
        rows = f"{layout} · {rows}" if layout else rows  # the layout first: a ring's write slot must show
        if cache.fingerprint == self.fingerprint:
            where.append(f"{rows} · from the current weights")
        else:  # the warning first: it must survive a narrow panel
            where.append(f"⚠ stale: old weights, r recomputes · {rows}", style="bold yellow")
        if differing:
            where.append(f" · ✗ {len(differing)} rows differ from your dump", style="bold red")
        title.update(where, layout=False)  # two lines, always
        labels = row_labels(cache, state.timeline, state.chunk_past, differing)
        part = slice(head * self.d_head, (head + 1) * self.d_head)
        cols = [f"d{j}" for j in range(self.d_head)]
        for name, array in (("K", cache.k), ("V", cache.v)):
            window = self.query_one(f".cache-{name.lower()}", MatrixWindow)
            window.data = MatrixData(f"{name} · layer {layer} head {head}", to_host(array)[:, part], labels, cols,
                                     newest_first=True)

