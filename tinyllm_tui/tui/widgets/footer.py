"""The key line at the bottom of a screen: its shown bindings as Textual's Footer draws them, in one widget.

Textual's Footer mounts a widget per key and recomposes them all whenever the bindings change (each
focus change): three times at start, about 30 ms each, which was a third of the debugger's start-up.
This draws the same keys, in the same styles (the Footer's own component classes and colours), as
the lines of one widget; a click on a key presses it, as on the Footer.
"""

from __future__ import annotations

import dataclasses

from rich.text import Text
from textual import events
from textual.binding import BindingsMap
from textual.widget import Widget

from tinyllm_tui.tui.i18n import EN, tr


def translated_bindings(bindings: BindingsMap, lang: str) -> BindingsMap:
    """The same bindings in the same order, their descriptions (the footer's words) in `lang`
    (Textual's own, such as focus moves, as Textual words them)."""
    translated = bindings.copy()
    for key, listed in translated.key_to_bindings.items():
        translated.key_to_bindings[key] = [dataclasses.replace(b, description=tr(b.description, lang))
                                           if b.description in EN else b for b in listed]
    return translated


class KeyFooter(Widget):
    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"footer-key--key", "footer-key--description"}
    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        text-wrap: nowrap;
        text-overflow: clip;
        .footer-key--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        .footer-key--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
    }
    """

    def __init__(self) -> None:
        super().__init__()
        self._keys: list[tuple[int, str]] = []  # (the cell where a key's label ends, its key)

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, lambda screen: self.refresh())

    def render(self) -> Text:
        """One entry per action (its first key), in the order the screen lists them, as many as fit whole
        (none cut mid-word); disabled ones dim."""
        key_style = self.get_component_rich_style("footer-key--key")
        description_style = self.get_component_rich_style("footer-key--description")
        shown: dict[str, tuple] = {}
        for _, binding, enabled, _ in self.screen.active_bindings.values():
            if binding.show:
                shown.setdefault(binding.action, (binding, enabled))
        line, self._keys = Text(), []
        for binding, enabled in shown.values():
            entry = Text.assemble((f" {self.app.get_key_display(binding)} ", key_style),
                                  (f"{binding.description} ", description_style))
            if line.cell_len + entry.cell_len > self.size.width:
                break
            if not enabled:
                entry.stylize("dim")
            line.append_text(entry)
            self._keys.append((line.cell_len, binding.key))
        return line

    def on_click(self, event: events.Click) -> None:
        key = next((key for end, key in self._keys if event.x < end), None)
        if key is not None:
            self.app.simulate_key(key)
