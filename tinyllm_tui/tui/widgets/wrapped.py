"""A line of words as tall as it needs: wrapped to its width rather than cut (a fault's description, the
divergence's values, a KV cache's layout), up to a few lines."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class Wrapped(Static):
    """A Static whose height follows its text wrapped to its width, between `lines` and `most` lines. The layout
    is redone only when that count changes: most updates keep it (the status line changes at every step)."""

    def __init__(self, lines: int = 1, most: int = 3, **options):
        super().__init__(**options)
        self._lines, self._most = lines, most
        self._text = Text()

    def show_text(self, text: Text) -> None:
        self._text = text
        self._fit()
        self.update(text, layout=False)

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        width = self.content_size.width
        if width <= 0:
            return
        wanted = max(self._lines, min(len(self._text.wrap(self.app.console, width)), self._most))
        if self.styles.height is None or self.styles.height.value != wanted:
            self.styles.height = wanted
