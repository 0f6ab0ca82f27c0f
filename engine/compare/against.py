"""Compare your own implementation's activations with the engine's over a whole generation.

The dump (layout in engine.layout) holds any subset of the operators of the prompt's
pass, of every decode round and of every layer's KV cache after each pass. The reference runs the
scenario with its own decode rule (greedy for a checkpoint, as `run` does) and meets the dump
pass by pass, operator by operator, in execution order: a layer's cache right after the layer
appended to it, before its attention reads it. The report gives per pass and operator the largest
|Δ|, and the first cell over the whole generation that leaves the tolerance of its dtype; for a
mixture of experts whose dump holds the top-k choices, first the first token routed otherwise. It is facts:
a cell's labels are a cause (engine.causes: a code and its facts), which a front end words.

TransformerLens conventions hold: masked attention scores may be written as −∞ or as the dtype's
most negative finite number; the extra keys of TL's bridge (`…hook_in`, `…q.hook_out`, …) are
listed once, not compared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.backend import Backend
from engine.arrays import to_host
from engine.causes import LABEL_WORDS, Cause, cause
from engine.compare.dump import Dump, load_dump
from engine.compare.routes import RouteFlip, route_flip
from engine import layers
from engine.hooks import Hook, HookError
from engine.layout import Key, Passes, align, dump_index
from engine.labels import resolve_some
from engine.scenario import Scenario
from engine.session import Session
from engine.trace import OpState

BF16_LOWEST = -3.3895313892515355e38
BRIDGE_SUFFIXES = ("hook_in", "hook_out", "hook_hidden_states", "hook_cos", "hook_sin")  # TL bridge extras


@dataclass(frozen=True)
class Tolerance:
    """A cell agrees when |ours − theirs| ≤ atol + rtol·|ours| (or both are the same ±∞ / NaN)."""

    atol: float
    rtol: float


DEFAULT_TOLERANCES = {  # what each storage dtype's rounding (and a computation in it) leaves
    "float64": Tolerance(1e-9, 1e-9),
    "float32": Tolerance(1e-5, 1e-5),
    "bfloat16": Tolerance(1e-2, 1e-2),
    "float16": Tolerance(1e-3, 1e-3),
}
EXACT = Tolerance(0.0, 0.0)  # integer arrays (the chosen token)


def dump_tolerance(dtype: str, atol: float | None = None, rtol: float | None = None) -> Tolerance:
    """The dtype's default, or what --tolerance/--rtol ask for (--tolerance alone: |Δ| ≤ it)."""
    default = DEFAULT_TOLERANCES.get(dtype, EXACT)
    if atol is None and rtol is None:
        return default
    return Tolerance(default.atol if atol is None else atol, (0.0 if atol is not None else default.rtol)
                     if rtol is None else rtol)


@dataclass(frozen=True)
class OpAgreement:
    key: Key  # its pass and hook name
    head: int | None
    max_abs: float  # inf where the shapes do not fit or only one side is ±∞ / NaN
    tolerance: Tolerance
    dtype: str = "float64"
    index: tuple[int, ...] | None = None  # the first cell beyond the tolerance, in the dump's layout
    place: Cause | None = None  # that cell's labels (`against.pattern`: head, query, key), or why the arrays could
    #                             not be compared (`against.shape`)
    ours: float | None = None
    theirs: float | None = None
    step: int | None = None  # the reference's step (a cache: the step where its layer's attention first reads it)
    cell: tuple[int, int] | None = None  # the first disagreeing cell in the engine's matrix (row, col)

    @property
    def agrees(self) -> bool:
        return self.index is None and self.place is None


@dataclass(frozen=True)
class OperatorRow:
    """One pass and operator of the table: every head together."""

    key: Key
    max_abs: float
    dtype: str
    tolerance: Tolerance
    first: OpAgreement | None  # its first disagreeing head or cell


@dataclass(frozen=True)
class Report:
    ops: tuple[OpAgreement, ...]  # in execution order; per-head operators once per head
    missing: dict[str, int] = field(default_factory=dict)  # hook name -> passes of the dump that lack it
    absent_passes: tuple[str, ...] = ()  # passes of the reference the dump has no key for
    unused: tuple[str, ...] = ()  # dump keys that name no operator of the reference run
    beyond: tuple[str, ...] = ()  # passes of the dump the reference run does not reach
    bridge: tuple[str, ...] = ()  # TransformerLens bridge keys the engine has no operator for
    requests: int = 1
    flip: RouteFlip | None = None  # the first token whose chosen experts differ

    @property
    def first_divergence(self) -> OpAgreement | None:
        return next((op for op in self.ops if not op.agrees), None)

    def round_verdicts(self) -> dict[tuple[int, int], bool]:
        """(request, round) -> whether every operator the dump holds for it agrees."""
        verdicts: dict[tuple[int, int], bool] = {}
        for op in self.ops:
            where = (op.key.request, op.key.round)
            verdicts[where] = verdicts.get(where, True) and op.agrees
        return verdicts

    def rows(self) -> list[OperatorRow]:
        grouped: dict[Key, list[OpAgreement]] = {}
        for op in self.ops:
            grouped.setdefault(op.key, []).append(op)
        return [OperatorRow(key, max(op.max_abs for op in ops), ops[0].dtype, ops[0].tolerance,
                    next((op for op in ops if not op.agrees), None)) for key, ops in grouped.items()]


# -- the reference run meets the dump --------------------------------------------------------------
class Against:
    """A dump and the tolerances it is held to, looked up by the reference's operator states."""

    def __init__(self, dump: Dump, scenario: Scenario, atol: float | None = None, rtol: float | None = None):
        self.dump, self.atol, self.rtol = dump, atol, rtol
        self.passes = Passes(scenario)
        self.d_head = scenario.model.d_head

    def tolerance(self, key: Key) -> Tolerance:
        return dump_tolerance(self.dump.dtypes[key], self.atol, self.rtol)

    def aligned(self, key: Key, head: int | None, shape: tuple[int, ...]) -> np.ndarray | None:
        """The dump's array for `key` in the engine's layout, masked scores as −∞ (None: no such key or shape)."""
        theirs = self.dump.get(key)
        aligned = None if theirs is None else align(theirs, key.hook.name, head, shape)
        if aligned is None:
            return None
        aligned = np.asarray(aligned, dtype=np.float64)
        if key.hook.name in layers.masked():
            aligned = np.where(aligned <= _lowest(self.dump.dtypes[key]), -np.inf, aligned)
        return aligned

    def compare(self, key: Key, head: int | None, ours: np.ndarray, label: Callable[[int, int], Cause],
                step: int | None = None) -> OpAgreement:
        ours = np.asarray(ours, dtype=np.float64)
        tolerance, dtype = self.tolerance(key), self.dump.dtypes[key]
        theirs = self.aligned(key, head, ours.shape)
        if theirs is None:
            shape = tuple(self.dump.arrays[key].shape)
            return OpAgreement(key, head, float("inf"), tolerance, dtype,
                               place=Cause("against.shape", {"theirs": shape, "ours": tuple(ours.shape)}), step=step)
        delta, beyond = disagreement(ours, theirs, tolerance)
        if not beyond.any():
            return OpAgreement(key, head, float(delta.max(initial=0.0)), tolerance, dtype, step=step)
        row, col = (int(i) for i in np.argwhere(beyond)[0])
        return OpAgreement(key, head, float(delta.max()), tolerance, dtype,
                           dump_index(key.hook.name, head, row, col, self.d_head), label(row, col),
                           float(ours[row, col]), float(theirs[row, col]), step, (row, col))

    def meet(self, states: Iterable[OpState]) -> Report:
        """The reference's `states` (a whole run, in order) against the dump."""
        meeting = _Meeting(self)
        for state in states:
            meeting.see(state)
        return meeting.report()

    def differing_cache_rows(self, state: OpState, layer: int) -> frozenset[int]:
        """The positions of `layer`'s state, as it stands at `state`, whose rows differ from the dump's state after
        the same pass (rows the pass has not appended yet are compared as they stand): the state says what
        "the same" means for it (engine.state.LayerState.differing)."""
        cache, theirs, keys = state.caches[layer], {}, {}
        for name, ours in cache.dump_items().items():
            keys[name] = key = self.passes.key(state, Hook(layer, cache.module, name).text)
            found = self.dump.get(key)
            if found is not None:
                theirs[name] = align(found, name, None, (None, int(ours.shape[1])))
        return cache.differing(theirs, lambda name, ours, other: disagreement(ours, other, self.tolerance(keys[name]))[1])


def disagreement(ours: np.ndarray, theirs: np.ndarray, tolerance: Tolerance) -> tuple[np.ndarray, np.ndarray]:
    """|Δ| per cell (0 where both are the same ±∞ or NaN, ∞ where only one is) and the cells beyond the tolerance."""
    same = (ours == theirs) | (np.isnan(ours) & np.isnan(theirs))
    with np.errstate(invalid="ignore"):  # ∞ − ∞ where both are masked: `same` covers those
        delta = np.where(same, 0.0, np.abs(ours - theirs))
    delta = np.where(np.isnan(delta), np.inf, delta)
    bound = tolerance.atol + tolerance.rtol * np.where(np.isfinite(ours), np.abs(ours), 0.0)
    return delta, delta > bound


def _lowest(dtype: str) -> float:
    """The most negative finite number of a dump's dtype: TransformerLens writes masked scores as it."""
    if dtype == "bfloat16":
        return BF16_LOWEST
    return float(np.finfo(dtype).min) if np.issubdtype(np.dtype(dtype), np.floating) else -np.inf


def compare_generation(scenario: Scenario, dump: Dump | str | Path, atol: float | None = None,
                       rtol: float | None = None, backend: Backend | None = None,
                       states: Iterable[OpState] | None = None) -> Report:
    """The scenario's whole run (or `states` of it) against the dump, pass by pass and operator by operator."""
    dump = dump if isinstance(dump, Dump) else load_dump(dump)
    return Against(dump, scenario, atol, rtol).meet(Session(scenario, backend).steps() if states is None else states)


class _Meeting:
    """Walks the reference's states once, comparing whatever the dump holds for each."""

    def __init__(self, against: Against):
        self.against = against
        self.held = against.dump.passes
        self.ops: list[OpAgreement] = []
        self.used: set[Key] = set()
        self.missing: dict[str, int] = {}
        self.absent: dict[str, None] = {}
        self.reached: set[tuple[int, str]] = set()
        self.first_state: dict[tuple[int, str, int], object] = {}  # each layer's state as a pass found it
        self.compared: set[tuple[int, str, int]] = set()  # the layers whose new state a pass compared
        self.flip: RouteFlip | None = None

    def see(self, state: OpState) -> None:
        passes = self.against.passes
        key = passes.key(state)
        self.reached.add((key.request, key.pass_))
        if (key.request, key.pass_) not in self.held:
            self.absent[key.label(passes.requests)] = None
            return
        if state.layer is not None and state.caches and self._extended(key, state):
            cache = state.caches[state.layer]
            for name, values in cache.dump_items().items():
                self._cache(state, passes.key(state, Hook(state.layer, cache.module, name).text), values,
                            cache.row_positions)
        if self.flip is None:  # before the top-k's own key is looked for: scores or logits may stand for it
            self.flip = route_flip(state, key, self.against.aligned, self.against.dump.side)
        if key not in self.against.dump.arrays:
            if state.head in (None, 0):
                self.missing[key.name] = self.missing.get(key.name, 0) + 1
            return
        self.used.add(key)
        ours = to_host(state.values)
        self.ops.append(self.against.compare(key, state.head, ours,
                                             lambda r, c: _cell_labels(state, r, c, self.against.d_head), state.step))

    def _extended(self, key: Key, state: OpState) -> bool:
        """Whether the pass has just extended the operator's layer state (the first operator to see it new)."""
        where, now = (key.request, key.pass_, state.layer), state.caches[state.layer]
        first = self.first_state.setdefault(where, now)
        if now is first or where in self.compared:
            return False
        self.compared.add(where)
        return True

    def _cache(self, state: OpState, key: Key, values, rows: tuple[int, ...]) -> None:
        if key not in self.against.dump.arrays:
            return
        self.used.add(key)
        ours = to_host(values)
        positions = state.moment.axis(rows, ours.shape[0], column=False)  # the position each row holds
        own = getattr(state.caches[state.layer], "cell", None)

        def label(row: int, col: int) -> Cause:
            position = resolve_some(positions, [row])[0]
            if own and (cell := own(key.hook.name, row, col, position)) is not None:
                return cause(cell[0], **cell[1])  # a state names its own items' cells (a K/V
                # cache's kv heads, a recurrent state's heads)
            return Cause("against.channel", {"position": position, "channel": col})

        self.ops.append(self.against.compare(key, None, ours, label, state.step))

    def report(self) -> Report:
        requests = self.against.passes.requests
        beyond = sorted(self.held - self.reached)
        unused = [k for k in self.against.dump.arrays if k not in self.used and (k.request, k.pass_) in self.reached]
        bridge = tuple(k.text(requests) for k in unused if _bridge(k))
        other = tuple(k.text(requests) for k in unused if k.text(requests) not in bridge)
        return Report(tuple(self.ops), self.missing, tuple(self.absent), other,
                      tuple(Key(r, p, "").label(requests) for r, p in beyond), bridge, requests, self.flip)


def _bridge(key: Key) -> bool:
    """A TransformerLens bridge key; a routed part's hook_out that the run did not route to (an expert's: its kind's
    `routed_expert`) is the engine's own."""
    try:
        hook = key.hook
    except HookError:  # not a hook's name: no bridge's
        return False
    return (hook.name in BRIDGE_SUFFIXES and layers.routed_expert(hook) is None) or key.name == "hook_unembed"


def _cell_labels(state: OpState, row: int, col: int, d_head: int) -> Cause:
    output = state.output
    (row,), (col_label,) = (resolve_some(axis, [i], LABEL_WORDS) for axis, i in ((output.row_axis, row),
                                                                                   (output.col_axis, col)))
    kind = state.op.hook.name
    if kind in layers.head_matrices():
        return Cause("against.pattern", {"head": state.head, "query": row, "key": col_label})
    if state.head is not None:
        return Cause("against.head", {"position": row, "head": state.head, "d_head": col})
    if kind in layers.head_axis() and d_head:
        return Cause("against.head", {"position": row, "head": col // d_head, "d_head": col % d_head})
    return Cause("against.row", {"row": row, "col": col_label})
