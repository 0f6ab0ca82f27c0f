"""What a layer keeps between tokens (`LayerState`), and the one protocol every reader of it goes through.

The forward pass, the timeline, the history's time travel, the Debugger's frame and its cache view,
the --against comparison, the --save-activations dump and the exact-cache report read a layer's state
only through this protocol, never its fields: a new kind of state (a recurrent one, a latent cache)
implements it and is displayed, compared, dumped and travelled in time without touching them.
The K/V caches of engine.caches (contiguous, ring, paged, quantized) are its first implementations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

Array = Any
RowsDiffer = Callable[[str, Any, Any], Any]  # (item, ours, theirs) host rows -> booleans: beyond the tolerance


class StaleCacheError(RuntimeError):
    """A state computed with other weights was about to be extended."""


class Size(int):
    """A count of bytes among the facts a state's line is worded with (`words()`), which a view shows as a size."""


class Positions(tuple):
    """Positions among the facts a state's line is worded with, which a view shows as spans ("1–4 9")."""


@dataclass(frozen=True)
class Phrase:
    """A fact of a state's line worded by a code of its own and its facts (a ring's "+2 sinks"), as the line is."""

    code: str
    facts: Mapping[str, Any] = field(default_factory=dict)


# A state's `facts` (LayerState.facts) say how views word them: `fed` (True: the state counts the tokens
# fed and holds no rows of them); `words()`, the code (of its kind's CAUSES, or the stack's for a K/V layout) and the
# facts of the line beside its rows;
# `heading`, the code of its kind's CAUSES the panel's heading is worded with (none: the K/V caches' "KV · layer …");
# `slots` (True: its rows are slots written round robin, not positions in order: a view has no newest end).


@dataclass(frozen=True, eq=False)
class StateView:
    """One named matrix of a state, as a view shows it: its rows are the state's `row_positions` (or features)."""

    name: str  # "K", "V"
    values: Array  # (rows, cols), in the session's namespace
    head_width: int  # columns per head: a view shows one head at a time (0: the columns are not split)
    positional: bool = True  # its rows are the state's `row_positions` (False: features, a recurrent state's d_k)
    axes: tuple[str, str] = ("", "d")  # the words before the index of a row (of features) and of a column: k3, d0
    title: str = ""  # the code of its kind's CAUSES a view titles it with ("view.conv_window"); "": its name is
    # notation (K, V, S), shown as it is


def _rows_first(row: int, col: int, d_head: int) -> tuple[int, ...]:
    return (row, col)


def _as_it_is(values: Array, d_head: int) -> Array:
    return values


@dataclass(frozen=True)
class DumpLayout:
    """How a dump lays out one of a state's items (`LayerState.dump_items`) where that is not the engine's matrix,
    rows first: its kind lists it in DUMP_LAYOUTS by the item's name (engine.layout reads them). `d_head`: the
    columns of a head."""

    align: Callable[[Array, tuple], Array]  # (a dump's array, the engine's shape) -> the engine's matrix, or as it is
    index: Callable[[int, int, int], tuple[int, ...]] = _rows_first  # (row, col, d_head) -> the dump's index
    dumped: Callable[[Array, int], Array] = _as_it_is  # (the engine's matrix, d_head) -> the dump's array


class StateDelta(Protocol):
    """A state at a kept round start, stored as what it adds to the kept one before (or whole)."""

    whole: bool  # needs nothing earlier to be restored

    @property
    def nbytes(self) -> int: ...

    def after(self, earlier: StateDelta) -> StateDelta:
        """This delta counted from where `earlier` began (`earlier` is being dropped)."""

    def restore(self, earlier: list[StateDelta]) -> LayerState:
        """The state this delta ends, the deltas `earlier` (oldest first) before it, bit for bit."""


class LayerState(Protocol):
    """One layer's state; immutable: extending it makes a new one (a kind's own `extend`, with its fault points)."""

    fingerprint: str  # the weights it was computed with
    module: str  # the part of the hook names its dump items go under (blocks.L.<module>.<item>)

    @property
    def length(self) -> int:
        """Tokens it holds."""

    @property
    def seen(self) -> int:
        """Tokens fed through it (more than `length` once a window evicts)."""

    @property
    def nbytes(self) -> int: ...

    @property
    def row_positions(self) -> tuple[int, ...]:
        """The position each row of its views holds (−1: an empty slot)."""

    @property
    def facts(self) -> Any:
        """What a view shows of it beside its matrices (None: nothing)."""

    def fresh(self, fingerprint: str) -> LayerState: ...

    def views(self) -> tuple[StateView, ...]: ...

    def delta(self, older: LayerState | None) -> StateDelta:
        """What a kept round start stores: the part newer than `older` (the previous kept one's), or all."""

    def dump_items(self) -> dict[str, Array]:
        """Its arrays as a dump names them within the layer's module (`cache_k`), rows first."""

    def differing(self, theirs: Mapping[str, Any], beyond: RowsDiffer) -> frozenset[int]:
        """The positions whose rows differ from another run's dump items `theirs` (aligned to ours, host
        arrays; a missing item is not compared): what "the same" means for this state."""

    # optional: `row_place(row) -> (code, facts)`, where row `row` of its views lies in its layout, which a view words
    # before the row's position: a ring's slot ("slot", {slot, next}), a paged cache's block ("block", {block, row});
    # absent: its rows are marked by their positions alone
    # optional: `cell(item, row, col, position) -> (code, facts) | None`, a cell of one of its dump items as a
    # comparison names it, a cause code and its facts (`position`: the words of the position row `row` holds; None,
    # or absent: as a position and a channel)


def evicted_positions(state: LayerState) -> tuple[int, ...]:
    """The positions fed through `state` that it holds no more (a ring's evicted tokens)."""
    held = set(state.row_positions)
    return tuple(p for p in range(state.seen) if p not in held)


def tokens_held(states) -> int:
    """How many tokens the layers' states hold (the timeline's count): the most any layer holds."""
    return max((state.length for state in states), default=0)


@dataclass(frozen=True)
class WholeState:
    """A state kept whole at a round start: one that is replaced, not appended to (a recurrent state)."""

    state: LayerState
    whole: bool = True

    @property
    def nbytes(self) -> int:
        return self.state.nbytes

    def after(self, earlier: StateDelta) -> WholeState:
        return self

    def restore(self, earlier: list[StateDelta]) -> LayerState:
        return self.state
