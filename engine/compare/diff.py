"""Full-vs-cached diff: the cached run beside a run that recomputes the whole prefix.

Rows are aligned by (request, round, operator, layer, head, absolute position); key columns by
(position, token), others by index. Columns only one run has count as equal only when masked
(−∞ scores, 0 probabilities), so a cache that holds extra or missing rows shows, and a ring
buffer (which holds only its window) meets the full recompute's masked columns.

At the end of each round every layer's state (engine.state.LayerState: a K/V cache, or any other
kind's) is compared with the full recompute's through the protocol: its `dump_items`, its own
`differing` (what "the same" means for it) and its `row_positions`, so a new kind of state is diffed
without a line here. It reads as one row per item, named as a dump names it (`blocks.0.attn.cache_k`).

A batch run is read request by request; `shift` moves a request's positions back by its left
padding, so that a batched request lines up with the same request run alone (`diff_batch`); its
states (every row of the batch at once) are not compared with a request's alone.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.backend import Backend
from engine.arrays import to_host
from engine.causes import Cause
from engine.hooks import Hook
from engine.scenario import Scenario
from engine.session import Session, StaleFrom
from engine.labels import POSITIONAL, SINK, Axis
from engine.spec import Mode
from engine.state import LayerState
from engine.trace import OpKind, OpState, Phase

Reader = Callable[[Iterable[OpState]], Iterable[OpState]]  # how a comparison reads a stream (cancellable)

TOLERANCE = 1e-12  # in float64; other floats get as many of their own rounding steps (rounding_tolerance)
# A batch against each request alone: the same sums in another order (BLAS blocks a [2, T, d] product otherwise
# than a [T, d] one), so each block the stream has passed may move a value by a rounding step of the largest
# magnitude it holds (SmolLM2's residual reaches 3e4, whose step is 7.3e-12). Measured on SmolLM2: at most 0.5
# steps per block; RELATIVE_STEPS leaves room for other checkpoints.
RELATIVE_STEPS = 4

Key = tuple[int, int, str, int | None, int | None]


@dataclass(frozen=True)
class OpDiff:
    step: int  # the cached run's step of this operator (the chunk that differs most)
    request: int
    phase: Phase
    round: int
    name: str
    layer: int | None
    head: int | None
    max_abs: float  # inf where the runs' rows or key columns do not meet (`mismatch` says how)
    tolerance: float = TOLERANCE
    mismatch: Cause | None = None  # diff.shape (4×7 at positions 3–6, the reference's 4×4 at 0–3): nothing to subtract
    state: bool = False  # a layer's state (one of its dump items) at the end of the round, not an operator

    @property
    def agrees(self) -> bool:
        return self.max_abs <= self.tolerance


def rounding_tolerance(dtype) -> float:
    """TOLERANCE scaled by the dtype's rounding step: float32's summation order alone moves a GPT-2
    activation by ~1e-6, which is agreement there (float32: 5.4e-4; float64: 1e-12)."""
    return TOLERANCE * float(np.finfo(dtype).eps / np.finfo(np.float64).eps)


def batch_tolerance(dtype, depth: int, scale: float) -> float:
    """A batch against each request alone: |Δ| ≤ rounding_tolerance(dtype) + RELATIVE_STEPS · (depth + 1) · ε · scale
    (the views' catalogues word this rule: diff.batch_agrees),
    where depth is how many blocks the pass has run through at this operator and scale the largest finite
    |value| of the operator in the request run alone."""
    return rounding_tolerance(dtype) + RELATIVE_STEPS * (depth + 1) * float(np.finfo(dtype).eps) * scale


def op_key(state: OpState) -> Key:
    return (state.request, state.round, state.name, state.layer, state.head)


def diff_runs(cached: Iterable[OpState], full: Iterable[OpState], shift: Sequence[int] = (),
              relative: bool = False) -> list[OpDiff]:
    """Largest |cached − full| per operator of every round, in the cached run's order.

    Both runs are read round by round in step, so only one round of the reference is held.
    shift: each request's left padding in the cached run (its rows before it have no counterpart).
    relative: each operator's tolerance follows its magnitude and depth (batch_tolerance), else rounding_tolerance.
    """
    worst: dict[Key, OpDiff] = {}
    full_rounds = itertools.groupby(full, key=_round_key)
    current = next(full_rounds, None)
    for round_key, states in itertools.groupby(cached, key=_round_key):
        while current is not None and current[0] < round_key:  # a round only the full run has
            current = next(full_rounds, None)
        reference = _reference(current[1]) if current is not None and current[0] == round_key else {}
        last = _compare_round(states, reference, worst, shift[round_key[0]] if shift else 0, relative)
        if not shift and END in reference:
            _compare_states(last, reference[END], worst)
    return list(worst.values())


def _round_key(state: OpState) -> tuple[int, int]:
    return state.request, state.round


END = "end"  # the reference's key of its round's last state (whose layer states end the round)


def _reference(states: Iterable[OpState]) -> dict:
    """(operator key, position) -> (column ids, row); operator key -> (positions, shape), to word a mismatch;
    END -> the round's last state."""
    reference = {}
    for state in states:
        values, cols = to_host(state.values), _column_ids(state, 0)
        for i, position in enumerate(state.positions):
            reference[(*op_key(state), position)] = (cols, values[i])
        reference[op_key(state)] = (state.positions, values.shape)
        reference[END] = state
    return reference


def _compare_round(states: Iterable[OpState], reference: dict, worst: dict[Key, OpDiff], shift: int,
                   relative: bool) -> OpState:
    """Each operator of one round against the reference's; the round's last state."""
    depth = 0  # blocks the pass has run through
    for state in states:
        values, cols = to_host(state.values), _column_ids(state, shift)
        expected = [(values[i], reference.get((*op_key(state), position - shift)))
                    for i, position in enumerate(state.positions) if position >= shift]
        gaps = [_row_diff(cols, row, found) for row, found in expected]
        largest = max((gap for gap, _ in gaps), default=0.0)
        mismatch = _mismatch(state, values.shape, shift, reference) if any(apart for _, apart in gaps) else None
        depth = depth if state.layer is None else state.layer + 1
        tolerance = (batch_tolerance(values.dtype, depth, _scale(found for _, found in expected))
                     if relative and state.kind != OpKind.CHOICE else rounding_tolerance(values.dtype))  # ids: exact
        key = op_key(state)
        step = state.step
        # A chunked prefill runs it once per chunk: keep the worst chunk, except for a state's matrix (rows are
        # features, not tokens: a recurrent state), which only the round's last chunk leaves as the full run does.
        if key in worst and worst[key].max_abs >= largest and _positional(state):
            largest, step, mismatch = worst[key].max_abs, worst[key].step, worst[key].mismatch
        worst[key] = OpDiff(step, state.request, state.phase, state.round, state.name, state.layer, state.head, largest,
                            tolerance, mismatch)
    return state


def _compare_states(last: OpState, reference: OpState, worst: dict[Key, OpDiff]) -> None:
    """Every layer's state at the end of a round against the reference's, one row per dump item."""
    for layer, (ours, theirs) in enumerate(zip(last.caches, reference.caches)):
        for name, (largest, tolerance, mismatch) in _state_gaps(ours, theirs).items():
            hook = Hook(layer, ours.module, name).text
            worst[(last.request, last.round, hook, layer, None)] = OpDiff(
                last.step, last.request, last.phase, last.round, hook, layer, None, largest, tolerance, mismatch, True)


def _state_gaps(ours: LayerState, theirs: LayerState) -> dict[str, tuple[float, float, Cause | None]]:
    """Item -> (largest |Δ|, tolerance, mismatch). The state's own `differing` judges its rows; where they
    hold other positions than the reference's, or differ in a way no value shows (rows only one holds), the
    states do not meet (|Δ| inf, and the positions each holds)."""
    mine_items = {name: to_host(item) for name, item in ours.dump_items().items()}
    items = {name: to_host(item) for name, item in theirs.dump_items().items() if name in mine_items}
    tolerance = {name: rounding_tolerance(mine_items[name].dtype) for name in items}
    gaps = dict.fromkeys(tolerance, 0.0)

    def beyond(name: str, mine, other):
        delta = _gaps(mine, other)
        gaps[name] = max(gaps[name], float(np.max(delta, initial=0.0)))
        return delta > tolerance[name]

    aligned = {name: _aligned(mine_items[name], item, ours.row_positions, theirs.row_positions)
               for name, item in items.items()}
    apart = ours.differing(aligned, beyond)
    mine, other = set(ours.row_positions) - {-1}, set(theirs.row_positions) - {-1}
    unmet = mine != other or (apart and all(gaps[name] <= tolerance[name] for name in gaps))
    if not unmet:
        return {name: (gap, tolerance[name], None) for name, gap in gaps.items()}
    mismatch = Cause("diff.positions", {"positions": _span(sorted(mine)), "theirs": _span(sorted(other))})
    return {name: (math.inf, tolerance[name], mismatch) for name in gaps}
def _aligned(mine: np.ndarray, other: np.ndarray, positions: Sequence[int], theirs: Sequence[int]) -> np.ndarray:
    """`other`'s rows in the order of the positions `mine`'s rows hold (a ring's slots are filled in another order
    by a full recompute); a position only `mine` holds gets NaN, an empty slot (−1: what it holds is left from
    an earlier request) its own row. An item whose rows are not its state's rows is left as it is."""
    if len(mine) != len(positions) or len(other) != len(theirs):
        return other
    index = {position: row for row, position in enumerate(theirs) if position >= 0}
    missing = np.full(other.shape[1:], np.nan)
    rows = [other[index[p]] if p in index else mine[i] if p < 0 else missing for i, p in enumerate(positions)]
    return np.stack(rows) if rows else other[:0]


def _positional(state: OpState) -> bool:
    axis = state.output.row_axis
    return not isinstance(axis, Axis) or axis.scheme in POSITIONAL


def _mismatch(state: OpState, shape: tuple[int, ...], shift: int, reference: dict) -> Cause:
    """How an operator's rows or key columns fail to meet the reference's."""
    compared = [p - shift for p in state.positions if p >= shift]  # a batch row's padding has no counterpart
    mine = {"shape": f"{len(compared)}×{shape[1]}", "positions": _span(compared)}
    found = reference.get(op_key(state))
    if found is None:
        return Cause("diff.none", mine)
    positions, theirs = found
    theirs = {"their_shape": "×".join(map(str, theirs))}
    if compared == list(positions):
        return Cause("diff.unmasked", mine | theirs)
    return Cause("diff.shape", mine | theirs | {"theirs": _span(positions)})


def _span(positions: Sequence[int]) -> str:
    """`3–6` for consecutive positions, else `0, 2, 5`."""
    if len(positions) > 1 and list(positions) == list(range(positions[0], positions[-1] + 1)):
        return f"{positions[0]}–{positions[-1]}"
    return ", ".join(map(str, positions))


def _scale(rows: Iterable) -> float:
    """The largest finite |value| of the reference rows found."""
    finite = [np.abs(row[np.isfinite(row)]) for _, row in (found for found in rows if found is not None)]
    return float(max((np.max(row, initial=0.0) for row in finite), default=0.0))


def diff_scenario(scenario: Scenario, backend: Backend | None = None, inject: str | None = None,
                  stale: StaleFrom | None = None, read: Reader = iter) -> list[OpDiff]:
    """The cached run (with `inject`, and a `stale` cache) against a full recompute of the whole prefix."""
    cached = Session(scenario, backend, mode=Mode.CACHED, inject=inject, stale=stale)
    return diff_sessions(cached, Session(scenario, backend, mode=Mode.FULL), read)


def diff_batch(scenario: Scenario, backend: Backend | None = None, inject: str | None = None,
               stale: StaleFrom | None = None, read: Reader = iter) -> list[OpDiff]:
    """The requests run as one batch (cached, with `inject`) against each request run alone."""
    batch = dataclasses.replace(scenario, batch=True)
    return diff_sessions(Session(batch, backend, inject=inject, stale=stale), alone(batch, backend), read)


def alone(scenario: Scenario, backend: Backend | None = None) -> Session:
    """The reference of a batch: each request run by itself, cached, no bug."""
    return Session(dataclasses.replace(scenario, batch=False), backend)


def diff_sessions(cached: Session, reference: Session, read: Reader = iter) -> list[OpDiff]:
    """Two sessions' runs, each read through `read` (a cancellable wrapper); a batch is regrouped request by
    request, and shifted by its padding to meet a reference that is not a batch."""
    alone_ = cached.scenario.batch and not reference.scenario.batch
    shift = cached.padding if alone_ else ()
    return diff_runs(_by_request(cached, read), _by_request(reference, read), shift, relative=alone_)


def _by_request(session: Session, read) -> Iterable[OpState]:
    """A session's states request by request: a batch's lockstep rows are regrouped (and held)."""
    states = read(session.steps())
    return sorted(states, key=_round_key) if session.scenario.batch else states


def first_divergence(diffs: list[OpDiff]) -> OpDiff | None:
    return next((d for d in diffs if not d.agrees), None)


def _column_ids(state: OpState, shift: int) -> Sequence:
    """What each output column stands for: (position, token) for key columns, else its index."""
    axis = state.output.col_axis
    if not isinstance(axis, Axis):  # labels given as strings
        return tuple(axis)
    ids = axis.ids()
    if isinstance(ids, range):
        return ids
    return tuple(zip((p - shift for p in axis.positions), ids)) + ((SINK,) if axis.sink else ())


def _row_diff(cols: Sequence, row: np.ndarray, expected) -> tuple[float, bool]:
    """The row's largest |Δ|, and whether the row or its key columns have no counterpart (|Δ| is then inf)."""
    if expected is None:
        return math.inf, True
    expected_cols, expected_row = expected
    if cols == expected_cols:
        a, b = row, expected_row
    else:  # columns of one run only must be masked; the shared ones are compared
        where = {col: j for j, col in enumerate(expected_cols)}
        shared = [(i, where[col]) for i, col in enumerate(cols) if col in where]
        only = [row[i] for i, col in enumerate(cols) if col not in where]
        matched = {j for _, j in shared}
        only += [expected_row[j] for j in range(len(expected_cols)) if j not in matched]
        extra = np.asarray(only, dtype=row.dtype)
        if not np.all((extra == 0) | np.isneginf(extra)):
            return math.inf, True
        a = row[[i for i, _ in shared]]
        b = expected_row[[j for _, j in shared]]
    return float(np.max(_gaps(a, b), initial=0.0)), False


def _gaps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a − b| per cell, 0 where both hold the same value, NaN or infinity (equal infinities subtract to NaN)."""
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore"):
        return np.where(same, 0.0, np.abs(a - b))
