"""The round starts a History keeps to resume its session from (engine.session.RoundStart).

A kept round start costs what its layers' states alone hold: each is stored as its delta from the
previous kept round start's (engine.state.LayerState.delta: for a K/V cache the rows added since, when
the older cache is a prefix of the newer, else the whole cache). A decode round then costs one row per
layer instead of the whole cache, and resuming restores the states from their deltas, bit for bit.

The rule within `budget` bytes: keep the round starts whose ordinal (0, 1, 2, … in stream
order) is a multiple of a stride, at first 1; when the kept ones cost more, the stride
doubles, which drops every other one and doubles the spacing of those to come. A dropped
one's rows move into the next kept one, so only dropping the newest frees memory: the kept
ones cost about the newest one's cache, and a share smaller than a late round's cache keeps
only early round starts. Ordinal 0, the session's start, always stays. Not counted: the
newest kept one's caches held whole to compare the next one with (the session holds that
many anyway).
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass

from engine.session import RoundStart
from engine.state import LayerState, StateDelta


@dataclass
class _Kept:
    ordinal: int
    start: RoundStart  # without its caches: those are in `layers`
    layers: tuple[StateDelta, ...]

    @property
    def nbytes(self) -> int:
        return sum(rows.nbytes for rows in self.layers)


class RoundStarts:
    """The round starts kept to resume from, within `budget` bytes (the module docstring's rule)."""

    def __init__(self, budget: float):
        self.budget = budget
        self.stride = 1
        self._kept: list[_Kept] = []  # in step order
        self._nbytes = 0  # of `_kept`, counted as it changes: the history asks after every state
        self._base: tuple[LayerState, ...] | None = None  # the newest kept one's caches: what rows follow
        self._seen = 0  # round starts passed so far: the next one's ordinal
        self._last_step = -1

    def add(self, start: RoundStart) -> None:
        if start.step <= self._last_step:  # a resumed stream passes round starts again
            return
        self._last_step, ordinal, self._seen = start.step, self._seen, self._seen + 1
        if ordinal % self.stride:
            return
        base = self._base if self._base is not None and len(self._base) == len(start.caches) else None
        layers = tuple(new.delta(None if base is None else base[i]) for i, new in enumerate(start.caches))
        self._kept.append(_Kept(ordinal, dataclasses.replace(start, caches=()), layers))
        self._nbytes += self._kept[-1].nbytes
        self._base = start.caches
        while self._nbytes > self.budget and len(self._kept) > 1:
            self.stride *= 2
            self._thin()

    def _thin(self) -> None:
        kept: list[_Kept] = []
        for i, entry in enumerate(self._kept):
            if entry.ordinal % self.stride == 0:
                kept.append(entry)
            elif i + 1 < len(self._kept):
                after = self._kept[i + 1]
                after.layers = tuple(b.after(a) for a, b in zip(entry.layers, after.layers))
            else:  # the newest goes: the next one kept is stored whole
                self._base = None
        self._kept = kept
        self._nbytes = sum(entry.nbytes for entry in kept)  # merged rows: counted anew (each thinning halves them)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def steps(self) -> list[int]:
        return [entry.start.step for entry in self._kept]

    def _latest_index(self, step: int) -> int:
        """The index of the kept round start nearest before or at `step`; -1 if none is."""
        return bisect.bisect_right(self.steps, step) - 1

    def latest_step(self, step: int) -> int:
        """Where the kept round start nearest before or at `step` begins (0: the session's start)."""
        index = self._latest_index(step)
        return self._kept[index].start.step if index >= 0 else 0

    def latest(self, step: int) -> RoundStart | None:
        """The kept round start nearest before or at `step`, its caches put back together."""
        index = self._latest_index(step)
        if index < 0:
            return None
        caches = tuple(self._cache(index, layer) for layer in range(len(self._kept[index].layers)))
        return dataclasses.replace(self._kept[index].start, caches=caches)

    def _cache(self, index: int, layer: int) -> LayerState:
        parts = [self._kept[index].layers[layer]]
        while not parts[-1].whole:
            index -= 1
            parts.append(self._kept[index].layers[layer])
        return parts[0].restore(parts[:0:-1])
