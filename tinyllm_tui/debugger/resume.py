"""The round starts a History keeps to resume its session from (engine.session.RoundStart).

A kept round start costs the K/V rows it alone holds: each layer's cache is stored as the
rows added since the previous kept round start when the older cache is a prefix of the
newer (cached decode, bit for bit), else whole (the first one, full-mode recomputes, a
bug that swaps caches, a layout that does not only append rows: ring, paged, quantized). A decode round then costs one row per layer instead of the whole
cache, and resuming concatenates the rows back, bit for bit.

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
from typing import Any

from array_api_compat import array_namespace

from engine.caches import array_bytes
from engine.session import RoundStart
from engine.trace import LayerCache

Array = Any


@dataclass(frozen=True)
class _Rows:
    """One layer's cache at a kept round start: all of it, or the rows after the previous kept one's."""

    k: Array
    v: Array
    whole: bool
    empty: LayerCache  # the cache's layout and fields without its rows (or the whole cache, not only rows)

    @property
    def nbytes(self) -> int:
        return array_bytes(self.k) + array_bytes(self.v)

    def cache(self, earlier: list[_Rows]) -> LayerCache:
        """The cache these rows end, the rows of `earlier` (oldest first) before them."""
        if not self.empty.appends_rows:
            return self.empty
        xp = array_namespace(self.k)
        parts = [*earlier, self]
        return dataclasses.replace(self.empty, k=xp.concat([p.k for p in parts], axis=0),
                                   v=xp.concat([p.v for p in parts], axis=0))


def _rows(new: LayerCache, old: LayerCache | None) -> _Rows:
    n = 0 if old is None else old.length
    xp = array_namespace(new.k)  # copies: a view would keep the whole newer cache alive
    empty = dataclasses.replace(new, k=xp.asarray(new.k[:0, ...], copy=True), v=xp.asarray(new.v[:0, ...], copy=True))
    if not new.appends_rows:
        return _Rows(new.k, new.v, True, new)
    if old is None or new.length < n or new.fingerprint != old.fingerprint or not (
            _same(new.k[:n, ...], old.k) and _same(new.v[:n, ...], old.v)):
        return _Rows(new.k, new.v, True, empty)
    return _Rows(xp.asarray(new.k[n:, ...], copy=True), xp.asarray(new.v[n:, ...], copy=True), False, empty)


def _same(a: Array, b: Array) -> bool:
    """Bit for bit, as far as floats go: equal, and −0.0 is not 0.0 (NaN is never the same)."""
    xp = array_namespace(a)
    return a.shape == b.shape and bool(xp.all(a == b)) and bool(xp.all(xp.signbit(a) == xp.signbit(b)))


def _merge(earlier: _Rows, later: _Rows) -> _Rows:
    """`later`'s rows counted from where `earlier`'s began (`earlier` is being dropped)."""
    if later.whole:
        return later
    xp = array_namespace(later.k)
    return _Rows(xp.concat([earlier.k, later.k], axis=0), xp.concat([earlier.v, later.v], axis=0),
                 earlier.whole, later.empty)


@dataclass
class _Kept:
    ordinal: int
    start: RoundStart  # without its caches: those are in `layers`
    layers: tuple[_Rows, ...]

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
        self._base: tuple[LayerCache, ...] | None = None  # the newest kept one's caches: what rows follow
        self._seen = 0  # round starts passed so far: the next one's ordinal
        self._last_step = -1

    def add(self, start: RoundStart) -> None:
        if start.step <= self._last_step:  # a resumed stream passes round starts again
            return
        self._last_step, ordinal, self._seen = start.step, self._seen, self._seen + 1
        if ordinal % self.stride:
            return
        base = self._base if self._base is not None and len(self._base) == len(start.caches) else None
        layers = tuple(_rows(new, None if base is None else base[i]) for i, new in enumerate(start.caches))
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
                after.layers = tuple(_merge(a, b) for a, b in zip(entry.layers, after.layers))
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

    def _cache(self, index: int, layer: int) -> LayerCache:
        parts = [self._kept[index].layers[layer]]
        while not parts[-1].whole:
            index -= 1
            parts.append(self._kept[index].layers[layer])
        return parts[0].cache(parts[:0:-1])
