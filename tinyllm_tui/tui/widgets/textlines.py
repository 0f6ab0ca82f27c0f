"""Widgets drawn line by line from Rich Text, through Textual's line API.

Returning a Text from `render()` sends every step's content through a wrapping
and measuring pass; lines that already fit can go straight to strips. A subclass
gives `text_lines()` (once per refresh), or `text_line(y)` where one line can be made alone; a line
becomes a strip only when Textual asks for it, which after a refresh of a few regions is just those
lines (a step moves the operator list's highlight: two lines of forty). A subclass that
knows how many lines it draws (`line_count()`) gets a refresh of just those lines and
the ones it drew before: Textual redraws every dirty line, and a tall panel is mostly blank.
"""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget


class TextLines(Widget):
    def text_lines(self) -> list[Text | Strip]:
        """The lines to show, top first: Text, or a ready Strip where building Text would cost too much."""
        raise NotImplementedError

    def text_line(self, y: int) -> Text | Strip | None:
        """Line `y` of `text_lines()` (made once per refresh), None below the last."""
        width = self.line_size.width
        if self._texts is None or self._texts_width != width:
            self._texts, self._texts_width = self.text_lines(), width
        return self._texts[y] if y < len(self._texts) else None

    _painted = 0  # lines drawn at the last refresh of the content
    _texts: list[Text | Strip] | None = None
    _texts_width = 0
    _pass_size: Size | None = None  # the content size during a render pass

    @property
    def line_size(self) -> Size:
        """The content size, looked up once per render pass: each look walks up to the screen, and a pass
        asks for it at every line."""
        return self._pass_size or self.size

    def render_lines(self, crop: Region) -> list[Strip]:
        self._pass_size = self.size
        try:
            return super().render_lines(crop)
        finally:
            self._pass_size = None

    def line_count(self) -> int | None:
        """How many lines the next refresh draws, if a subclass can tell cheaply."""
        return None

    def refresh(self, *regions, **options) -> Widget:
        self._texts = None
        content = not regions and not options.get("layout") and not options.get("recompose")  # reactives repaint so
        count = self.line_count() if content and self.is_mounted else None
        if count is None:
            self._painted = self.outer_size.height
            return super().refresh(*regions, **options)
        dirty, self._painted = max(count, self._painted), count
        top = self.styles.padding.top
        return super().refresh(Region(0, 0, self.outer_size.width, top + max(dirty, 1)))

    def render_line(self, y: int) -> Strip:
        width, base = self.line_size.width, self.visual_style.rich_style  # Textual keeps it until the styles change
        line = self.text_line(y)
        if line is None:
            return Strip.blank(width, base)
        strip = line if isinstance(line, Strip) else Strip(line.render(self.app.console))
        return strip.adjust_cell_length(width, base).apply_style(base)
