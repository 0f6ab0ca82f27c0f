"""The causal depthwise convolution of the recurrent mixers, and its rolling window of the last K−1 inputs.

y[t, c] = Σ_j w[c, j] · x[t − K + 1 + j, c]: each channel mixes its own last K inputs (zeros before the first).
A cached pass keeps the last K−1 inputs (`ConvWindow`) and reads them before its new rows, so a decode step
convolves exactly what a full recompute does; the window then shifts by the rows fed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

Array = Any


class FaultPoints:
    """Where an injected bug (engine.faults) may change the conv window; these are the correct answers."""

    def conv_window(self, xp, window: Array, new: Array, kept: int, seen: int) -> Array:
        """The window kept after a pass: the last `kept` rows of the old `window` then the `new` inputs
        (`seen`: the tokens the old window had seen)."""
        return xp.concat([window, new], axis=0)[-kept:, ...]


@dataclass(frozen=True, eq=False)
class ConvWindow:
    """The last K−1 inputs of a causal conv, oldest first (zero rows before the first token)."""

    rows: Array  # (K − 1, channels)
    seen: int  # the tokens fed through it

    @classmethod
    def empty(cls, xp, kernel: int, channels: int, dtype) -> ConvWindow:
        return cls(xp.zeros((kernel - 1, channels), dtype=dtype), 0)

    @property
    def kernel(self) -> int:
        return int(self.rows.shape[0]) + 1

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes)

    @property
    def positions(self) -> tuple[int, ...]:
        """The position of each row (−1: not filled yet)."""
        first = self.seen - self.rows.shape[0]
        return tuple(p if p >= 0 else -1 for p in range(first, self.seen))

    def fresh(self) -> ConvWindow:
        return dataclasses.replace(self, rows=self.rows * 0.0, seen=0)


def apply(xp, window: ConvWindow, x: Array, weight: Array, fault: FaultPoints) -> tuple[ConvWindow, Array]:
    """The conv of the new rows `x` (T, channels) read after `window`, with `weight` (channels, K): the next
    window and the (T, channels) outputs (no activation)."""
    full = xp.concat([window.rows, x], axis=0)
    t, kernel = x.shape[0], weight.shape[1]
    out = full[0:t, ...] * weight[:, 0]
    for j in range(1, kernel):
        out = out + full[j:j + t, ...] * weight[:, j]
    kept = fault.conv_window(xp, window.rows, x, kernel - 1, window.seen)
    return ConvWindow(kept, window.seen + t), out
