"""The causal depthwise convolution over channels, and its state: the rolling window of the last K−1 inputs.

Each channel c of a sequence x (T, C) is convolved with its own K taps w (K, C), oldest tap first:

    y_t[c] = b[c] + Σ_{k<K} w[k, c] · x_{t−K+1+k}[c]          (x before the first token: 0)

so y_t reads x_t and the K−1 inputs before it. A cached decode keeps those K−1 inputs between rounds as
a `ConvWindow` (an engine.state.LayerState whose size does not grow with the sequence). LFM2's short
convolution (engine.layers.short_conv) and Qwen3.5's Gated DeltaNet (over its q/k/v channels, then SiLU)
are built on it. The API, for a kind that has such a convolution:

- `ConvWindow.empty(xp, kernel, channels, dtype, fingerprint, module)`: the state before the first token;
- `window.extend(xp, inputs, fault, padded)` → `ConvRead`: the rows the chunk's outputs read (the window,
  then the chunk) and the window to keep; `fault` is the kind's FaultPoints, a `ConvFaultPoints`;
- `convolve(xp, read.rows, weight, bias)`: the outputs (T, C), as a full recompute or a prefill computes
  them (one shifted slice per tap), or for one token as a cached decode does (a dot of the window with
  the taps): two computations of the same function, which the full-vs-cached diff holds equal.

Weights are (K, C) in this module's tap order: Hugging Face's `conv.weight` (C, 1, K) transposed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from engine.arrays import namespace, to_host
from engine.caches import array_bytes
from engine.state import DumpLayout, Size, StateView

Array = Any
KERNEL = "kernel"  # the layer option (engine.spec.LayerSpec.option) of a causal conv's taps K
DUMP_ITEM = "conv_state"  # blocks.L.<module>.conv_state: (K−1, C), oldest input first, rows before the first token 0


def _dumped_rows(array, shape: tuple):
    """A dumped conv state as rows (inputs) of channels: transformers' [channels, K] transposed, its oldest input (no
    longer read) dropped where the engine's K − 1 rows are asked for."""
    if array.ndim != 2:
        return array
    if array.shape[1] != shape[1] and array.shape[0] == shape[1]:
        array = array.T
    return array[1:] if shape[0] is not None and array.shape[0] == shape[0] + 1 else array


DUMP_LAYOUTS = {DUMP_ITEM: DumpLayout(_dumped_rows)}  # engine.layout: [K − 1, channels], or transformers' [channels, K]


def shifted(xp, window: Array, inputs: Array, keep: int | None = None) -> Array:
    """The last `keep` (the window's K−1) rows of the window followed by the chunk's inputs: the window after
    the chunk."""
    keep = int(window.shape[0]) if keep is None else keep
    return xp.concat([window, inputs], axis=0)[-keep:, ...] if keep else window[:0, ...]


class ConvFaultPoints:
    """Where an injected bug may change the conv window (the correct answer). A kind with a causal conv
    subclasses it in its own FaultPoints, so that the registry's union of every kind's points holds it once."""

    def conv_window(self, xp, window: Array, inputs: Array) -> Array:
        """The window kept after a chunk's (T, C) inputs were read after `window` (K−1, C)."""
        return shifted(xp, window, inputs)


class ConvNotShifted:
    def conv_window(self, xp, window, inputs):
        n = min(int(inputs.shape[0]), int(window.shape[0]))
        return xp.concat([window[:int(window.shape[0]) - n, ...], inputs[-n:, ...]], axis=0) if n else window

    def unseen(self, scenario):
        return _no_window(scenario)


class ConvShiftedTwice:
    def conv_window(self, xp, window, inputs):
        return shifted(xp, xp.concat([window, xp.zeros_like(inputs)], axis=0), inputs, int(window.shape[0]))

    def unseen(self, scenario):
        return _no_window(scenario)


def _no_window(scenario) -> tuple[str, dict] | None:
    """Why a wrong conv window changes nothing: a window of two rows or more must be read by a later round."""
    kernels = [block.option(KERNEL, 0) for block in scenario.model.blocks]
    if max(kernels, default=0) < 3:
        return ("fault.conv_taps", {})
    if max(r.max_new_tokens for r in scenario.requests) < 3:
        return ("fault.conv_rounds", {})
    return None


BUGS = (ConvNotShifted, ConvShiftedTwice)  # a kind with a causal conv offers them among its own, and these words
# its bugs' words, and its state's line, heading and view: a kind with a causal conv offers them
CAUSES = {"en": {"fault.conv_taps": "no layer has a causal conv of 3 taps or more (a window of two earlier inputs)",
                 "fault.conv_rounds": "no request decodes a second round that reads the window the first one kept "
                                      "(max_new_tokens ≥ 3)",
                 "cache.conv": "the last {rows} inputs of a {kernel}-tap conv · {size}, the same at any length",
                 "cache.where.conv": "conv window · layer {layer} of 0–{last_layer}", "view.conv_window": "conv window"},
          "zh": {"fault.conv_taps": "没有层的因果卷积有 3 个或更多抽头（即两个更早输入的窗口）",
                 "fault.conv_rounds": "没有请求解码到第二轮去读第一轮留下的窗口（max_new_tokens ≥ 3）",
                 "cache.conv": "{kernel} 抽头卷积的最近 {rows} 个输入 · {size}，与序列长度无关",
                 "cache.where.conv": "卷积窗口 · 第 {layer} 层（0–{last_layer}）", "view.conv_window": "卷积窗口"}}


@dataclass(frozen=True)
class ConvFacts:
    """What a view shows of a conv window beside its rows: the conv's taps and the bytes it keeps (the same
    however long the sequence)."""

    kernel: int
    nbytes: int
    heading: ClassVar[str] = "cache.where.conv"

    def words(self) -> tuple[str, dict]:
        return "cache.conv", {"rows": self.kernel - 1, "kernel": self.kernel, "size": Size(self.nbytes)}


@dataclass(frozen=True, eq=False)
class ConvRead:
    """What one chunk's conv outputs read: the window's K−1 rows, then the chunk's T inputs."""

    rows: Array  # (K−1+T, C)
    positions: tuple[int, ...]  # the sequence position of each row (−1: before the first token)
    state: ConvWindow  # the window to keep


@dataclass(frozen=True, eq=False)
class ConvWindow:
    """One layer's conv state: the last K−1 inputs fed (oldest first), zeros where fewer were fed."""

    rows: Array  # (K−1, C)
    fed: int  # tokens fed through it
    fingerprint: str  # the weights the inputs were computed with
    module: str  # its dump item goes under blocks.L.<module>.conv_state
    head_width: int = 0  # columns per head a view shows at a time (0: the columns are not split)

    @classmethod
    def empty(cls, xp, kernel: int, channels: int, dtype, fingerprint: str, module: str,
              head_width: int = 0) -> ConvWindow:
        return cls(xp.zeros((kernel - 1, channels), dtype=dtype), 0, fingerprint, module, head_width)

    @property
    def length(self) -> int:
        return min(self.fed, int(self.rows.shape[0]))

    @property
    def seen(self) -> int:
        return self.fed

    @property
    def nbytes(self) -> int:
        return array_bytes(self.rows)

    @property
    def row_positions(self) -> tuple[int, ...]:
        first = self.fed - int(self.rows.shape[0])
        return tuple(p if p >= 0 else -1 for p in range(first, self.fed))

    @property
    def facts(self) -> ConvFacts:
        return ConvFacts(int(self.rows.shape[0]) + 1, self.nbytes)

    def fresh(self, fingerprint: str) -> ConvWindow:
        return dataclasses.replace(self, rows=namespace(self.rows).zeros_like(self.rows), fed=0,
                                   fingerprint=fingerprint)

    def extend(self, xp, inputs: Array, fault: ConvFaultPoints, padded: list[bool] | None = None) -> ConvRead:
        """Read a chunk's (T, C) inputs after the window. `padded`: which of them are a batch row's padding,
        read as zeros (as if the row had begun after them, like the request run alone)."""
        if padded and any(padded):
            inputs = inputs * xp.asarray([[0.0 if pad else 1.0] for pad in padded], dtype=inputs.dtype)
        rows = xp.concat([self.rows, inputs], axis=0)
        fed = self.fed + int(inputs.shape[0])
        state = dataclasses.replace(self, rows=fault.conv_window(xp, self.rows, inputs), fed=fed)
        first = self.fed - int(self.rows.shape[0])
        return ConvRead(rows, tuple(p if p >= 0 else -1 for p in range(first, fed)), state)

    # -- the LayerState protocol (engine.state) ------------------------------------------------------
    def views(self) -> tuple[StateView, ...]:
        return (StateView("conv window", self.rows, self.head_width, title="view.conv_window"),)

    def delta(self, older) -> WholeWindow:
        return WholeWindow(self)  # K−1 rows: kept whole, never as a difference

    def dump_items(self) -> dict[str, Array]:
        return {DUMP_ITEM: self.rows}

    def differing(self, theirs, beyond) -> frozenset[int]:
        """The positions whose window rows differ from theirs. Theirs may hold K rows, as transformers' conv
        cache does (the oldest of them is no longer read): its last K−1 are compared."""
        if DUMP_ITEM not in theirs:
            return frozenset()
        ours, other, positions = np.asarray(to_host(self.rows), np.float64), theirs[DUMP_ITEM], self.row_positions
        if other is None or other.ndim != 2 or other.shape[1] != ours.shape[1] or len(other) < len(ours):
            rows = range(len(ours))  # another shape: every row differs
        else:
            differ = beyond(DUMP_ITEM, ours, np.asarray(other[len(other) - len(ours):], np.float64))
            rows = np.flatnonzero(differ.any(axis=1)).tolist()
        return frozenset(positions[row] for row in rows if positions[row] >= 0)


@dataclass(frozen=True)
class WholeWindow:
    """A conv window at a kept round start: the whole state (it has K−1 rows)."""

    state: ConvWindow
    whole: bool = True

    @property
    def nbytes(self) -> int:
        return self.state.nbytes

    def after(self, earlier) -> WholeWindow:
        return self

    def restore(self, earlier) -> ConvWindow:
        return self.state


def convolve(xp, rows: Array, weight: Array, bias: Array | None = None) -> Array:
    """The conv outputs (T, C) of `rows` (K−1+T, C: the window, then the chunk) under `weight` (K, C).

    One token (a cached decode step): the window and the new input, times the taps, summed over them.
    More (a full recompute, a prefill or a prefill chunk): one shifted slice of the rows per tap, summed."""
    kernel = int(weight.shape[0])
    count = int(rows.shape[0]) - kernel + 1
    if count == 1:
        out = xp.sum(rows * weight, axis=0, keepdims=True)
    else:
        out = rows[:count, ...] * weight[0, ...]
        for tap in range(1, kernel):
            out = out + rows[tap:tap + count, ...] * weight[tap, ...]
    return out if bias is None else out + bias
