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


class SaveOver(Message, bubble=False):
    """The app's save is over (`text` says where it wrote, or why it did not, in one line; `written`: which): every
    screen that shows the weights or the status line redraws. A failed write leaves the edits unsaved."""

    def __init__(self, text: str, written: bool) -> None:
        super().__init__()
        self.text, self.written = text, written
