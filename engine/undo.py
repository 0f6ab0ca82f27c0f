"""One undo/redo rule for every list of changes the debugger keeps (weight edits, interventions)."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class UndoList(Generic[T]):
    """Every value a session has had, in order, and which one is current: undo steps back, redo forward,
    and a new value forgets what was undone."""

    def __init__(self, first: T):
        self._values: list[T] = [first]
        self._at = 0

    @property
    def current(self) -> T:
        return self._values[self._at]

    @property
    def first(self) -> T:
        return self._values[0]

    @property
    def made(self) -> list[T]:
        """The values after the first, up to the current one."""
        return self._values[1 : self._at + 1]

    def push(self, value: T) -> None:
        del self._values[self._at + 1 :]
        self._values.append(value)
        self._at += 1

    def discard(self) -> None:
        """Forget the current value altogether (it cannot be redone)."""
        del self._values[self._at :]
        self._at -= 1

    def undo(self) -> bool:
        if self._at == 0:
            return False
        self._at -= 1
        return True

    def redo(self) -> bool:
        if self._at + 1 == len(self._values):
            return False
        self._at += 1
        return True
