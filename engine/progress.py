"""How far a long load has got, for whoever shows it: a plain callable, listening for the duration of a call.

    with listening(lambda stage, done, total: print(stage, done, total)):
        scenario = open_model(path)

The loading code calls `report(stage, done, total)`: READING counts the YAML's bytes the parser
has taken, WEIGHTS the tensors converted. Without a listener a report costs one lookup. The
listener runs in the loading thread; raising `LoadCancelled` from it stops the load there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

READING, WEIGHTS = "reading", "weights"

Listener = Callable[[str, int, int], None]
_listener: ContextVar[Listener | None] = ContextVar("progress_listener", default=None)


class LoadCancelled(BaseException):
    """The person stopped the load. Like KeyboardInterrupt, not an Exception: no `except Exception`
    on the way (a checkpoint reader's catch-all) turns a cancel into an error of the file."""


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def report(stage: str, done: int, total: int) -> None:
    listener = _listener.get()
    if listener is not None:
        listener(stage, done, total)
