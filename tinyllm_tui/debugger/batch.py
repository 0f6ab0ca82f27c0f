"""A batch's operator across its rows: the states, and the matrix that stacks them (the batch axis).

The rows of a batch go through each operator in turn (engine.session), so one operator's states
for every row are neighbouring steps with the same operator, round and chunk.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable

import numpy as np

from engine.arrays import to_host
from engine.labels import POSITIONAL, Axis, resolve_some
from engine.trace import OpState
from tinyllm_tui.debugger.frame import Labels, lazy_labels
from tinyllm_tui.debugger.row_labels import RowWords


def batch_group(state_at: Callable[[int], OpState | None], state: OpState) -> tuple[OpState, ...]:
    """`state`'s operator for every row of its batch still going, in row order (`state` alone outside
    a batch). `state_at(step)` reads a step (History.state_at: computing ahead as needed)."""
    if state.batch is None:
        return (state,)
    key, reach = _operator(state), len(state.batch) - 1
    first = last = state.step
    while first > max(state.step - reach, 0) and _operator(state_at(first - 1)) == key:
        first -= 1
    while last < state.step + reach and _operator(state_at(last + 1)) == key:
        last += 1
    return tuple(state_at(step) for step in range(first, last + 1))


def same_operator(a: OpState | None, b: OpState | None) -> bool:
    """Two rows' states of one operator of a batch (a move passes over them: they are one matrix)."""
    return a is not None and b is not None and a.batch is not None and _operator(a) == _operator(b)


def _operator(state: OpState | None) -> tuple | None:
    return None if state is None else (state.name, state.layer, state.head, state.round, state.chunk)


def stacked(batch: tuple[OpState, ...], words: RowWords) -> tuple[np.ndarray, Labels, Labels]:
    """The rows' matrices one under the other: rows "r2 · 11 · cat" (`words.batch_row`); key columns by position
    alone ("k11"), since each row has its own tokens there."""
    starts = list(itertools.accumulate((s.values.shape[0] for s in batch), initial=0))

    def row(i: int) -> str:
        member = bisect.bisect_right(starts, i) - 1
        return f"{words.batch_row.format(request=batch[member].request)} · {resolve_some(batch[member].output.row_axis, [i - starts[member]])[0]}"

    axis = batch[0].output.col_axis
    positional = isinstance(axis, Axis) and axis.scheme in POSITIONAL
    keys = axis.positions if positional else ()
    sink = words.labels["sink"]
    cols = Labels(axis.count, lambda j: f"k{keys[j]}" if j < len(keys) else sink) if positional else lazy_labels(
        axis, words.labels)
    return np.concatenate([to_host(s.values) for s in batch]), Labels(starts[-1], row), cols
