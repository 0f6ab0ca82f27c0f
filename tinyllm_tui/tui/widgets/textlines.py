"""Widgets drawn line by line from Rich Text, through Textual's line API.

Returning a Text from `render()` sends every step's content through a wrapping
and measuring pass; lines that already fit can go straight to strips. A subclass
gives `text_lines()`; they are turned into strips once per refresh. A subclass that
knows how many lines it draws (`line_count()`) gets a refresh of just those lines and
the ones it drew before: Textual redraws every dirty line, and a tall panel is mostly blank.
"""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget


class TextLines(Widget):
    def text_lines(self) -> list[Text | Strip]:
        """The lines to show, top first: Text, or a ready Strip where building Text would cost too much."""
        raise NotImplementedError

    _painted = 0  # lines drawn at the last refresh of the content

    def line_count(self) -> int | None:
        """How many lines the next refresh draws, if a subclass can tell cheaply."""
        return None

    def refresh(self, *regions, **options) -> Widget:
        self._strips: list[Strip] | None = None
        content = not regions and not options.get("layout") and not options.get("recompose")  # reactives repaint so
        count = self.line_count() if content and self.is_mounted else None
        if count is None:
            self._painted = self.outer_size.height
            return super().refresh(*regions, **options)
        dirty, self._painted = max(count, self._painted), count
        top = self.styles.padding.top
        return super().refresh(Region(0, 0, self.outer_size.width, top + max(dirty, 1)))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if getattr(self, "_strips", None) is None or getattr(self, "_strips_width", None) != width:
            console, base = self.app.console, self.rich_style
            self._strips = [(line if isinstance(line, Strip) else Strip(line.render(console)))
                            .adjust_cell_length(width, base).apply_style(base) for line in self.text_lines()]
            self._strips_width = width
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(width, self.rich_style)
