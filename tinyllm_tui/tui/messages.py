"""What the app tells its screens, as typed messages handled in each screen's own loop (a screen that is
gone never gets one): the app words what it says, the screen decides how to show it."""

from __future__ import annotations

from textual.message import Message

from tinyllm_tui.debugger.autosave import Unsaved


class StatusSaid(Message, bubble=False):
    """Words for the main screen's status line (shown when that screen is back on top)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class RestoreAsked(Message, bubble=False):
    """Put back the edits an earlier session left unsaved (a replay: the main screen runs it)."""

    def __init__(self, unsaved: Unsaved) -> None:
        super().__init__()
        self.unsaved = unsaved


class WeightsSaved(Message, bubble=False):
    """The weights are saved (`text` says where): every screen that shows them redraws."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class NotSaved(Message, bubble=False):
    """The save is over without writing (`text` says why, in one line): the edits are still unsaved."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
