"""The frame builder: what the views draw after a move, built from where the Debugger's history stands.

Only a view that subscribes has one (the TUI, where it prepares the Debugger; a test reading
`Debugger.frame`): the CLI's `run` and `trace` never build a frame. The builder reads the Debugger
(its history, breakpoints, changes, comparisons) and writes nothing back into it; a frame is built in
the thread that owns the generator and published with one assignment, so a reader sees the old
frame or the new, never half of one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import numpy as np

from engine import OpState, to_host
from engine.compare.against import disagreement
from engine.layers import route, state_head
from engine.trace import OpKind, Phase
from tinyllm_tui.debugger.batch import batch_group, stacked
from tinyllm_tui.debugger.frame import (Frame, MatrixFrame, StatusFacts, VerdictSource, Verdicts, cache_frame,
                                        follow_layer, hook_key, lazy_labels, matrix_frame, operands, operator_lines,
                                        timeline_frame, with_breakpoints)
from tinyllm_tui.debugger.history import RoundSummary
from tinyllm_tui.debugger.row_labels import RowWords


@dataclass(frozen=True)
class View:
    """The current operator and its surroundings, for callers that want engine states (the CLI, tests)."""

    state: OpState
    round_states: tuple[OpState, ...]  # every operator of the current round
    rounds: tuple[RoundSummary, ...]  # the current request's finished rounds (A.9)
    breaks: frozenset[int]  # steps of `round_states` where a breakpoint hits
    total: int | None  # number of steps, once the trace has been run to its end
    at_end: bool


class FrameBuilder:
    def __init__(self, debugger, words: RowWords):
        """`debugger`: the tinyllm_tui.debugger.Debugger it builds frames of; `words`: the view's words inside
        row labels."""
        self.debugger, self.words = debugger, words
        self.cache_layer, self.cache_head = 0, 0  # the KV cache shown
        self.cache_pinned = self.head_pinned = False  # a layer, a head picked with [ ] { }: it stays put
        self.frame: Frame | None = None
        self.view: View | None = None
        self.pending = False  # the frame lists only the operators of its round computed so far
        self._lock = threading.Lock()  # a frame is replaced whole, by one thread at a time

    def publish(self, ahead: bool = True) -> None:
        """Build the view and the frame of where the history stands (in the owner's thread) and publish them.
        `ahead` False: the operator list holds the round's operators computed so far, nothing more."""
        d = self.debugger
        history = d.history
        state = history.current
        round_states = tuple(history.round_states(ahead))
        breaks = frozenset(s.step for s in round_states if d.hits(s))
        view = View(state, round_states, tuple(history.finished_rounds(state.request)), breaks, history.total,
                    history.at_end)
        if not self.cache_pinned:
            self.cache_layer = follow_layer(state) if follow_layer(state) is not None else self.cache_layer
        if not self.head_pinned and state.head is not None and state.layer is not None:
            self.cache_head = state_head(d.session.model.blocks[state.layer].mixer, state.head)  # the one it reads
        scenario = d.scenario
        operators = operator_lines(round_states, breaks)
        if self.frame is not None and self.frame.operators == operators:
            operators = self.frame.operators  # the same round: the list keeps its lines
        frame = Frame(
            step=state.step, phase=Phase(state.phase), request=state.request, round=state.round,
            matrix=self._matrix(state, batch_group(history.state_at, state)),
            cache=self._cache(state, self.cache_layer, self.cache_head),
            operators=operators,
            timeline=timeline_frame(state, len(scenario.requests), bool(scenario.decode.prefill_chunk), view.rounds,
                                    d.round_verdicts(), scenario.requests[state.request].chat),
            status=StatusFacts(state.step, None if history.total is None else history.total - 1,
                               next(line.short for line in operator_lines((state,), breaks)), d.inject,
                               d.stale is not None, d.unsaved(), len(d.breakpoints), d.hits(state),
                               tuple(i.text for i in d.changes.interventions)),
            hook=hook_key(state), inputs=operands(state), outcomes=d.outcomes, at_end=view.at_end)
        with self._lock:
            self.view, self.frame, self.pending = view, frame, not history.round_known()

    def _cache(self, state: OpState, layer: int, head: int):
        """The KV-cache slice shown, with the rows that differ from a --against dump."""
        d = self.debugger
        differing = d.differing_cache_rows(state, layer)
        return cache_frame(state, d.fingerprint, layer, head, differing, self.words)

    def _matrix(self, state: OpState, batch: tuple[OpState, ...]) -> MatrixFrame:
        """The operator's matrix; in a batch (no edit or verdicts to show) every row's, stacked: the batch axis."""
        d = self.debugger
        values = to_host(state.values)
        earlier = d.earlier(state)
        before = None if earlier is None else to_host(earlier.values)
        vocab = d.scenario.vocab
        verdicts = self._verdicts(state, values, before)
        words = self.words.labels
        rows, cols = lazy_labels(state.output.row_axis, words), lazy_labels(state.output.col_axis, words)
        stacks = len(batch) > 1 and before is None and verdicts is None and len({s.values.shape[1] for s in batch}) == 1
        if stacks:
            values, rows, cols = stacked(batch, self.words)
        tokens = tuple(vocab.label(int(x)) for x in values.ravel()) if state.kind == OpKind.CHOICE else ()
        matrix = matrix_frame(state.name, values, rows, cols, kind=state.kind, head=state.head, before=before,
                              verdicts=verdicts, tokens=tokens, names=vocab.tokens.__getitem__,
                              ids=route(state.op) is not None)
        if earlier is not None:  # its values under its own labels: an edit may have changed the tokens fed
            return replace(matrix, rows_before=lazy_labels(earlier.output.row_axis, words),
                           cols_before=lazy_labels(earlier.output.col_axis, words),
                           by_intervention=d.changes.last.intervention is not None)
        return replace(matrix, batch_rows=tuple(s.request for s in batch)) if stacks else matrix

    def _verdicts(self, state: OpState, values: np.ndarray, before: np.ndarray | None) -> Verdicts | None:
        """Cell by cell: the user's dump (every cell), or the printed cells of an expect: table."""
        d = self.debugger
        if d.against is not None:
            key = d.against.passes.key(state)
            wanted = d.against.aligned(key, state.head, tuple(state.values.shape))
            if wanted is not None:
                tolerance = d.against.tolerance(key)

                def agree(shown: np.ndarray) -> np.ndarray:
                    return ~disagreement(np.asarray(shown, dtype=np.float64), wanted, tolerance)[1]

                return Verdicts(VerdictSource.DUMP, np.ones(values.shape, bool), agree(values),
                                None if before is None else agree(before), (tolerance.atol, tolerance.rtol), wanted)
        cells = d.verdicts(state)
        if not cells:
            return None
        judged, agrees = np.zeros(values.shape, bool), np.zeros(values.shape, bool)
        agrees_before = None if before is None else np.zeros(values.shape, bool)
        for (i, j), cell in cells.items():
            judged[i, j] = True
            agrees[i, j] = replace(cell, computed=float(values[i, j])).agrees
            if before is not None:
                agrees_before[i, j] = replace(cell, computed=float(before[i, j])).agrees
        return Verdicts(VerdictSource.EXPECT, judged, agrees, agrees_before,
                        (next(iter(cells.values())).tolerance, 0.0))

    def refresh_breaks(self) -> None:
        """The marks in the operator list and the status follow the breakpoints (nothing else changes)."""
        d = self.debugger
        with self._lock:
            view = self.view
            breaks = frozenset(s.step for s in view.round_states if d.hits(s))
            self.view = replace(view, breaks=breaks)
            self.frame = with_breakpoints(self.frame, breaks, d.hits(view.state), len(d.breakpoints))

    def move_cache(self, state: OpState, layers: int, heads: int):
        """Page the KV cache shown through layers and heads; a layer or head picked stays put. The cache frame
        shown."""
        self.cache_pinned = self.cache_pinned or bool(layers)
        self.head_pinned = self.head_pinned or bool(heads)
        self.cache_layer = (min(self.cache_layer, len(state.caches) - 1) + layers) % len(state.caches)
        heads_shown = self._cache(state, self.cache_layer, 0).heads
        self.cache_head = (min(self.cache_head, heads_shown - 1) + heads) % heads_shown
        cache = self._cache(state, self.cache_layer, self.cache_head)
        with self._lock:
            self.frame = replace(self.frame, cache=cache)
        return cache
