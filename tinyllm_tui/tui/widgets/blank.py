"""Containers that only arrange the panels of a screen, and draw nothing of their own.

Textual redraws a refresh's bounding box: every widget inside it is asked for its lines, containers
included, though their panels cover them. A step dirties the status line at the top and the panels
below, so each container of the main screen was drawn again at every step (its styles applied line
by line, ~40 µs each). These are `BLANK` (Textual's flag for a widget with no border and no content):
their lines are one blank strip of their background, which is what a container without border or
content shows. None of them may have a border or content of its own.
"""

from __future__ import annotations

from textual.containers import Container, Horizontal, Vertical
from textual.widgets import TabbedContent, TabPane


class Row(Horizontal):
    BLANK = True


class Column(Vertical):
    BLANK = True


class Box(Container):
    BLANK = True


class Tabs(TabbedContent):
    """The lower panels' tabs: the tab bar and the panel shown are its own widgets."""

    BLANK = True


class Pane(TabPane):
    BLANK = True
