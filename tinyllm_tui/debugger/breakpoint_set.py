"""The session's breakpoints, each judged once per step, and what `g`/`G` look for.

The tuple of breakpoints is replaced, never mutated: a run in flight reads the one it started with, so
breakpoints may be added and removed meanwhile. A text that cannot be understood is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from engine.breakpoints import Breakpoint, BreakpointError, misnamed, parse_breakpoint
from engine.hooks import HookRegistry
from engine.trace import OpState
from tinyllm_tui.debugger.results import (BreakpointAdded, BreakpointRemoved, BreakpointsCleared, Misnamed, Reason,
                                          Refused, Result)

JUDGED = 4096  # steps whose hits are remembered before the memory starts again


def matcher(text: str) -> Callable[[OpState], bool]:
    """What `g`/`G` look for: what a breakpoint accepts (glob, short name or its first parts, kind,
    field=value, …). Raises BreakpointError for what a breakpoint refuses too (`abs>`)."""
    return parse_breakpoint(text).hits


def misnamed_in(breakpoints: Iterable[Breakpoint], hooks: HookRegistry) -> tuple[Misnamed, ...]:
    """Each name of `breakpoints` that no hook of `hooks` (a session's registry) has, with the nearest name one
    has."""
    every = tuple(hooks.every())
    return tuple(Misnamed(b.text, name, near) for b in breakpoints for name, near in misnamed(b, every))


class BreakpointSet:
    def __init__(self, texts: Iterable[str] = ()):
        """Raises BreakpointError for a text that cannot be understood (the same text twice counts once)."""
        parsed = (parse_breakpoint(text.strip()) for text in texts)
        self.all: tuple[Breakpoint, ...] = tuple({b.text: b for b in parsed}.values())
        self._hits: dict[int, tuple[str, ...]] = {}  # step -> the breakpoints hitting it

    def forget(self) -> None:
        """Judge every step again (another run, or another set of breakpoints)."""
        self._hits = {}

    def hits(self, state: OpState) -> tuple[str, ...]:
        """The breakpoints that hit `state`, judged once per step until `forget()`."""
        found = self._hits.get(state.step)
        if found is None:
            if len(self._hits) > JUDGED:
                self._hits = {}
            found = self._hits[state.step] = tuple(b.text for b in self.all if b.hits(state))
        return found

    def add(self, text: str) -> Result:
        try:
            breakpoint = parse_breakpoint(text.strip())
        except BreakpointError as error:
            return Refused(Reason.BAD_QUERY, (error.cause,))
        if any(b.text == breakpoint.text for b in self.all):
            return Refused(Reason.ALREADY_SET, (breakpoint.text,))
        self.all = (*self.all, breakpoint)
        return BreakpointAdded(breakpoint.text)

    def remove(self, text: str) -> Result:
        kept = tuple(b for b in self.all if b.text != text)
        if len(kept) == len(self.all):
            return Refused(Reason.NO_BREAKPOINT, (text,))
        self.all = kept
        return BreakpointRemoved(text)

    def toggle(self, name: str) -> Result:
        return self.remove(name) if any(b.text == name for b in self.all) else self.add(name)

    def clear(self) -> Result:
        count, self.all = len(self.all), ()
        return BreakpointsCleared(count)
