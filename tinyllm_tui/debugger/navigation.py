"""Moving through a History: a step or back over a batch's rows, going to a step, running until a condition,
replaying to a step, and searching with wrap-around. Functions over the history and the Debugger's cancel
event: the Debugger owns the generator while they run, publishes the frame after them and words nothing
they return (steps and flags only). Each yields the interpreter now and then (`time.sleep(0)`): the UI
thread's keys stay quick during a long walk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from engine.trace import OpState
from tinyllm_tui.debugger.batch import batch_group, same_operator
from tinyllm_tui.debugger.history import History

PROGRESS_EVERY = 200  # steps between progress reports of a long walk
Progress = Callable[[int], None]


def step(history: History) -> bool:
    """To the next operator: in a batch, to its last row's state, every row having been through it (the rows
    are its matrix's batch axis). False at the end of the trace."""
    start = history.current
    moved = history.forward()
    while moved and same_operator(history.current, start):
        moved = history.forward()
    while moved and same_operator(history.state_at(history.cursor + 1), history.current):
        moved = history.forward()
    return moved


def back(history: History) -> bool:
    """To the previous operator: in a batch, to its last row's state. False at the first step."""
    history.goto(batch_group(history.state_at, history.current)[0].step)
    return history.back()


def goto(history: History, target: int) -> bool:
    """To step `target`; where there is none, the cursor stays where it was."""
    start = history.cursor
    if history.goto(target):
        return True
    history.goto(start)
    return False


def run_until(history: History, stop: Callable[[OpState], bool], cancel: threading.Event,
              progress: Progress | None) -> bool | None:
    """Forward until `stop(state)` (True), a cancel (False) or the end of the trace (None)."""
    while history.forward():
        time.sleep(0)
        if stop(history.current):
            return True
        if cancel.is_set():
            return False
        _report(progress, history.cursor)
    return None


def replay(history: History, target: int, cancel: threading.Event, progress: Progress | None) -> None:
    """Forward to step `target` (a new session after an edit), or until a cancel."""
    while history.cursor < target and not cancel.is_set() and history.forward():
        time.sleep(0)
        _report(progress, history.cursor)


def search(history: History, wanted: Callable[[OpState], bool], backward: bool, cancel: threading.Event,
           progress: Progress | None) -> tuple[int | None, bool]:
    """The next (previous) step whose state is `wanted`, wrapping around past one end of the trace: (the step
    found or None, whether it wrapped). The cursor goes there, or stays."""
    start = history.cursor
    after, before = (start + 1, None), (0, start)
    found = _scan(history, *(before if backward else after), wanted, backward, cancel, progress)
    wrapped = found is None and not cancel.is_set()
    if wrapped:
        found = _scan(history, *(after if backward else before), wanted, backward, cancel, progress)
    history.goto(start if found is None else found)
    return found, wrapped


def _scan(history: History, first: int, end: int | None, wanted, last: bool, cancel: threading.Event,
          progress: Progress | None) -> int | None:
    """The first (or last) step in [first, end) whose state is `wanted`."""
    found = None
    for state in history.states_from(first):
        time.sleep(0)
        if (end is not None and state.step >= end) or cancel.is_set():
            break
        if wanted(state):
            found = state.step
            if not last:
                break
        _report(progress, state.step)
    return found


def _report(progress: Progress | None, step: int) -> None:
    if progress is not None and step % PROGRESS_EVERY == 0:
        progress(step)
