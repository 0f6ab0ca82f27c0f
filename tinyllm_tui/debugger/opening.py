"""Opening a file in the debugger: read it (reporting how far through engine.progress), then
prepare the Debugger, cancellable between reports. The TUI runs this in its runner."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from engine import Scenario
from engine.loading.edits import Edit
from engine.progress import READING, Cancelled, listening

PREPARING = "preparing"  # the Debugger's first state: no count to show
Report = Callable[[str, int, int], None]  # (stage, done, total)

__all__ = ["Cancelled", "Loading", "Opening", "PREPARING", "READING", "open_file"]


@dataclass(frozen=True)
class Opening:
    """What the debugger opens with once the file is read: the scenario and what depends on it."""

    scenario: Scenario
    breakpoints: list[str] = ()
    edits: list[Edit] = ()
    budget: int | None = None


@dataclass(frozen=True)
class Loading:
    """A file still to load: `load()` reads it (in a thread, reporting through engine.progress)."""

    file: str
    load: Callable[[], Opening]


def open_file(loading: Loading, prepare: Callable[[Opening], object], report: Report,
              cancelled: threading.Event):
    """The prepared Debugger; raises Cancelled at the report after `cancelled` was set (or at the end)."""

    def listener(stage: str, done: int, total: int) -> None:
        if cancelled.is_set():
            raise Cancelled
        report(stage, done, total)

    with listening(listener):
        opening = loading.load()
        listener(PREPARING, 0, 0)
        debugger = prepare(opening)
    if cancelled.is_set():  # pressed while the debugger was prepared: honoured all the same
        raise Cancelled
    return debugger
