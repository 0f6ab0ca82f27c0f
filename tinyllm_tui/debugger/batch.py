"""A batch's operator across its rows: the states a matrix stacks along the batch axis.

The rows of a batch go through each operator in turn (engine.session), so one operator's states
for every row are neighbouring steps with the same operator, round and chunk.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.trace import OpState


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


def _operator(state: OpState | None) -> tuple | None:
    return None if state is None else (state.name, state.layer, state.head, state.round, state.chunk)
