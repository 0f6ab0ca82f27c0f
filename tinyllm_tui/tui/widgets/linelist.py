"""A list that renders only the lines that fit: operators, diff rows, parameters, breakpoints.

Lines are (key, Text); a key of None is a heading that cannot be highlighted.
The highlighted line is always kept in view; Enter or a click posts `Chosen`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region
from textual.message import Message
from textual.reactive import reactive

from tinyllm_tui.tui.widgets.textlines import TextLines

Line = tuple[object, Text]


class LineList(TextLines, can_focus=True):
    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
        Binding("enter", "choose", "Choose", show=False),
    ]

    lines: reactive[tuple[Line, ...]] = reactive((), layout=False)
    highlighted: reactive[int | None] = reactive(None, repaint=False)  # repaints just its two lines (watcher)

    @dataclass
    class Chosen(Message):
        list: LineList
        key: object

    @dataclass
    class Highlighted(Message):
        list: LineList
        key: object

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self._top = 0

    @property
    def highlighted_key(self) -> object:
        return None if self.highlighted is None else self.lines[self.highlighted][0]

    def show(self, lines: tuple[Line, ...], key: object = None) -> None:
        """New lines (if they differ) with the line of `key` highlighted."""
        if lines != self.lines:
            self.lines = lines
        self.highlight(key)

    def highlight(self, key: object) -> None:
        index = next((i for i, (k, _) in enumerate(self.lines) if k == key and k is not None), None)
        if index is not None:
            self.highlighted = index

    def watch_highlighted(self, old: int | None, index: int | None) -> None:
        if index is not None:
            self.post_message(self.Highlighted(self, self.lines[index][0]))
        top = self._top
        if old is None or index is None or self._scroll_to_highlight() != top:
            self.refresh()
        else:  # a step moves the highlight by a line or two: repaint those, not the whole list
            self.refresh(*(Region(0, i - top, self.size.width, 1) for i in (old, index)))

    def _scroll_to_highlight(self) -> int:
        """Keep the highlighted line in view, with one line of context; the first line shown."""
        height = self.line_size.height
        if self.highlighted is not None:
            if self.highlighted < self._top + 1:
                self._top = max(self.highlighted - 1, 0)
            elif self.highlighted >= self._top + height - 1:
                self._top = self.highlighted - height + 2
        self._top = max(min(self._top, len(self.lines) - height), 0)
        return self._top

    def text_lines(self) -> list[Text]:
        return [self.text_line(y) for y in range(min(self.line_size.height, len(self.lines)))]

    def text_line(self, y: int) -> Text | None:
        """Made alone: a step repaints the two lines its highlight moved between, not the whole list."""
        size = self.line_size
        index = self._scroll_to_highlight() + y
        if y >= size.height or index >= len(self.lines):
            return None
        line = self.lines[index][1].copy()
        line.truncate(max(size.width, 1), overflow="ellipsis")
        if index == self.highlighted:
            line.stylize("reverse" if self.has_focus else "bold reverse dim")
        return line

    def _step_to(self, index: int, direction: int) -> None:
        """Highlight the nearest selectable line from `index` on in `direction`."""
        index = max(0, min(index, len(self.lines) - 1))
        while 0 <= index < len(self.lines) and self.lines[index][0] is None:
            index += direction
        if 0 <= index < len(self.lines):
            self.highlighted = index

    def action_move(self, delta: int) -> None:
        self._step_to((self.highlighted or 0) + delta, 1 if delta > 0 else -1)

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(self.size.height - 2, 1))

    def action_jump(self, where: int) -> None:
        self._step_to(where if where >= 0 else len(self.lines) - 1, 1 if where >= 0 else -1)

    def action_choose(self) -> None:
        if self.highlighted is not None:
            self.post_message(self.Chosen(self, self.lines[self.highlighted][0]))

    def on_click(self, event: events.Click) -> None:
        index = self._top + event.y
        if 0 <= index < len(self.lines) and self.lines[index][0] is not None:
            self.highlighted = index
            self.action_choose()

    def on_mouse_scroll_down(self) -> None:
        self.action_move(3)

    def on_mouse_scroll_up(self) -> None:
        self.action_move(-3)
