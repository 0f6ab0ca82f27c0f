"""A line of words as tall as it needs: wrapped to its width rather than cut (a fault's description, the
divergence's values, a KV cache's layout), up to a few lines."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tinyllm_tui.tui.widgets.textlines import TextLines


class Wrapped(TextLines, Static):
    """Text whose height follows its lines wrapped to its width, between `lines` and `most` lines (the rest is
    cut). Wrapped once per text and width, and drawn line by line: the status line changes at every step, and
    Static's own update would measure and wrap it again to draw it. Still a Static to those who read it
    (`render()` is its text), with Static's styles. The layout is redone only when the line count changes."""

    def __init__(self, lines: int = 1, most: int = 3, **options):
        super().__init__(**options)
        self._lines, self._most = lines, most
        self._text = Text()
        self._wrapped: list[Text] = []

    def show_text(self, text: Text) -> None:
        self._text = text
        self._fit()
        self.refresh()

    def on_resize(self) -> None:
        self._fit()
        self.refresh()  # wrapped again to the new width: a repaint before this handler drew the old lines

    def _fit(self) -> None:
        width = self.content_size.width
        if width <= 0:
            return
        self._wrapped = [_own_style_as_span(line) for line in self._text.wrap(self.app.console, width)]
        wanted = max(self._lines, min(len(self._wrapped), self._most))
        if self.styles.height is None or self.styles.height.value != wanted:
            self.styles.height = wanted

    def render(self) -> Text:
        return self._text

    def text_lines(self) -> list[Text]:
        return self._wrapped[: self.line_size.height]


def _own_style_as_span(line: Text) -> Text:
    """Rich draws a Text's own style only where it has spans (`Text.render`), as a Static's own pass did: the
    style of the whole text becomes a span over the wrapped line."""
    if line.style:
        line.stylize(line.style)
    return line
