"""The round's readings as windows over what fits: the logit lens, every head of a layer at a glance, and a
mixture-of-experts layer's routing.

Both are computed in a worker before they open (the lens unembeds every residual stream); the
screens only cut what they hold to the window and move it with the arrow keys.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from tinyllm_tui.presentation.glance import GUTTER, heads_glance_lines, head_width
from tinyllm_tui.presentation.lens import CELL, attribution_lines, lens_lines
from tinyllm_tui.debugger.readings import Glance, LensReading, Routing
from tinyllm_tui.presentation.routing import experts_glance_lines, routing_lines
from tinyllm_tui.tui.i18n import tr

MOVES = [Binding("left", "move(0, -1)", "←", show=False), Binding("right", "move(0, 1)", "→", show=False),
         Binding("up", "move(-1, 0)", "↑", show=False), Binding("down", "move(1, 0)", "↓", show=False)]


class _Window(ModalScreen):
    """A title line and a body cut to the screen; `first_row`/`first_col` move with the arrows."""

    def __init__(self, title: str, lang: str = "en"):
        super().__init__()
        self._title, self.lang, self.first_row, self.first_col = title, lang, 0, 0

    def compose(self) -> ComposeResult:
        with Vertical(id="readings"):
            yield Static(Text(self._title, style="bold"), id="readings-title")
            yield Static(id="readings-body")

    def on_mount(self) -> None:
        self.refresh_body()

    def on_resize(self) -> None:
        self.refresh_body()

    def action_move(self, rows: int, cols: int) -> None:
        self.first_row, self.first_col = max(self.first_row + rows, 0), max(self.first_col + cols, 0)
        self.refresh_body()

    def refresh_body(self) -> None:
        body = self.query_one("#readings-body", Static)
        width, height = max(body.size.width, 20), max(body.size.height, 4)
        lines = self.lines(width, height)
        self.first_row = min(self.first_row, max(len(lines) - height, 0))
        body.update(Text("\n".join(lines[self.first_row:self.first_row + height])))  # a sentence too wide wraps, by
        # display cells (the tables are made to fit): cut by characters, a line with 学 lost its last words

    def lines(self, width: int, height: int) -> list[str]:
        raise NotImplementedError


class LensScreen(_Window):
    """The logit lens of the round: layers down, positions across (←/→ move the positions, ↑/↓ the rows)."""

    BINDINGS = [Binding("escape,l,q", "dismiss", "Close"), *MOVES]

    def __init__(self, title: str, reading: LensReading, lang: str = "en"):
        """`reading`: what the Debugger's lens read."""
        super().__init__(title, lang)
        self._run, self._rows, self._attribution, self._vocab = reading

    def lines(self, width: int, height: int) -> list[str]:
        label = max((len(row.hook) for row in self._rows), default=0)
        count = max((width - label) // (CELL + 1), 1)
        total = self._rows[0].top.shape[0] if self._rows else 0
        self.first_col = min(self.first_col, max(total - count, 0))
        lang, first = self.lang, self._run.first
        lines = lens_lines(self._rows, self._run, self._run.context, self._vocab, first=self.first_col, count=count,
                           lang=lang)
        lines.insert(0, tr("lens.positions", lang, first=first + self.first_col,
                           last=first + min(self.first_col + count, total) - 1, total=total))
        if self._attribution is None:
            return lines
        return lines + [""] + attribution_lines(self._attribution, self._vocab, lang=lang)


class GlanceScreen(_Window):
    """Every head of one layer as a small heat map; ←/→ pick a head, ↑/↓ the layer, Enter opens the head's
    pattern as the current matrix (dismisses with (layer, head))."""

    BINDINGS = [Binding("escape,A,q", "dismiss(None)", "Close"), Binding("enter", "open", "Open"), *MOVES]

    def __init__(self, title: str, glance: Glance, lang: str = "en"):
        super().__init__(title, lang)
        self.first_row, self._layers, self._patterns = glance.layer, glance.layers, glance.patterns
        self._keys = [key.strip()[:1] or "␣" for key in glance.keys]  # a key's first visible character

    def action_move(self, rows: int, cols: int) -> None:
        self.first_row = min(max(self.first_row + rows, 0), self._layers - 1)
        self.first_col = max(self.first_col + cols, 0)
        self.refresh_body()

    def refresh_body(self) -> None:  # the layer is not a scroll position: keep it as chosen
        body = self.query_one("#readings-body", Static)
        lines = self.lines(max(body.size.width, 20), max(body.size.height, 4))
        body.update(Text("\n".join(lines)))

    def lines(self, width: int, height: int) -> list[str]:
        patterns = self._patterns(self.first_row)
        if not patterns:
            return [tr("glance.no_pattern", self.lang, layer=self.first_row)]
        self.first_col = min(self.first_col, len(patterns) - 1)
        fit = max((width - GUTTER) // head_width(patterns, self._keys, width)[1], 1)  # as heads_glance_lines lays them
        first_head = max(self.first_col - fit + 1, 0)
        return [tr("glance.layer", self.lang, layer=self.first_row, last=self._layers - 1)] + heads_glance_lines(
            patterns, self._keys, width=width, height=height - 1, first_head=first_head, selected=self.first_col,
            shown_words=tr("glance.shown", self.lang))

    def action_open(self) -> None:
        self.dismiss((self.first_row, self.first_col))


class RoutingScreen(_Window):
    """Each token's chosen experts in one mixture-of-experts layer: ↑/↓ the tokens, ←/→ the experts, [ and ] the
    previous and next sparse layer; `a` toggles the experts at a glance (every sparse layer's tokens per expert
    and least margin; ↑/↓ then move the layers)."""

    BINDINGS = [Binding("escape,E,q", "dismiss", "Close"), Binding("left_square_bracket", "layer(-1)", "Layer −"),
                Binding("right_square_bracket", "layer(1)", "Layer +"), Binding("a", "glance", "Every layer"),
                *MOVES]

    def __init__(self, title: str, routings: list[Routing], index: int, lang: str = "en"):
        super().__init__(title, lang)
        self._routings, self._index, self.glance = routings, index, False

    def action_layer(self, step: int) -> None:
        self._index = min(max(self._index + step, 0), len(self._routings) - 1)
        self.refresh_body()

    def action_glance(self) -> None:
        self.glance, self.first_row = not self.glance, 0
        self.refresh_body()

    def refresh_body(self) -> None:  # the window is cut by routing_lines: keep the rows as moved
        body = self.query_one("#readings-body", Static)
        body.update(Text("\n".join(self.lines(max(body.size.width, 20), max(body.size.height, 4)))))

    def lines(self, width: int, height: int) -> list[str]:
        if self.glance:
            self.first_row = min(self.first_row, max(len(self._routings) - max(height - 2, 1), 0))
            self.first_col = min(self.first_col, self._routings[0].n_experts - 1)
            return experts_glance_lines(self._routings, width=width, height=height, first_row=self.first_row,
                                  first_expert=self.first_col, lang=self.lang)
        routing = self._routings[self._index]
        rows = max(height - 3, 1)
        self.first_row = min(self.first_row, max(len(routing.labels) - rows, 0))
        self.first_col = min(self.first_col, routing.n_experts - 1)
        return routing_lines(routing, width=width, height=height, first_row=self.first_row,
                             first_expert=self.first_col, lang=self.lang)
