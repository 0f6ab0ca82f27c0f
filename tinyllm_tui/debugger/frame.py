"""One immutable `Frame` per move: everything the views draw, built by whoever made the move.

The Debugger builds a frame in the thread that moved (a worker for a long run), then publishes it
with one assignment; the UI thread only reads published frames, so it never meets a half-changed
session. Widgets render a frame's parts and compute nothing: values are host NumPy, labels are
made when shown, verdicts and changed cells are judged here, the KV cache is sliced to the head shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from engine import OpState, to_host
from engine.breakpoints import short_name
from engine.causes import Cause, cause
from engine.compare.expect import Outcome
from engine.labels import WORDS, resolve_some
from engine.layers import explanation, explanation_key
from engine.state import Phrase, evicted_positions, tokens_held
from engine.trace import OpKind, Phase, Status
from tinyllm_tui.debugger.row_labels import RowWords, row_label

if TYPE_CHECKING:
    from engine.spec import Chat

PROBABILITY_KINDS = (OpKind.SOFTMAX, OpKind.PROBS)
SORTED_COLUMNS = 256  # columns of a vocabulary row's top-k sorted view
CORNER = 4  # rows and columns of each input shown in the inputs panel
TOP_COUNT = 5  # entries of a vocabulary row's top-tokens line
VOCAB_KINDS = (OpKind.LOGITS, OpKind.FILTER, OpKind.PROBS)


class Labels(Sequence):
    """`count` labels made one at a time when shown (a vocabulary axis has 50 000 of them)."""

    def __init__(self, count: int, label: Callable[[int], str]):
        self._count, self._label = count, label

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._label(i) for i in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(index)
        return self._label(index % self._count)


def lazy_labels(axis, words: dict[str, str] = WORDS) -> Labels:
    """An operator's row or column labels, made only for the entries on screen; `words`: the view's inside them
    (RowWords.labels; the engine's by default)."""
    count = axis.count if hasattr(axis, "count") else len(axis)
    return Labels(count, lambda i: resolve_some(axis, [i], words)[0])


class VerdictSource(StrEnum):
    EXPECT = "expect"  # printed cells of the scenario's expect: tables
    DUMP = "dump"  # the user's own activations (--against)


@dataclass(frozen=True, eq=False)  # holds arrays: compared by identity
class Verdicts:
    """Which cells are judged and whether they agree, for the values and for the values before the edit."""

    source: VerdictSource
    judged: np.ndarray  # bool, the matrix's shape
    agrees: np.ndarray  # bool: the current values agree
    agrees_before: np.ndarray | None  # bool: the values before the last edit agree
    tolerance: tuple[float, float]  # (atol, rtol): a cell agrees when |ours − theirs| ≤ atol + rtol·|ours|
    theirs: np.ndarray | None = None  # a --against dump's own values of the matrix (`v` shows them)

    @property
    def count(self) -> int:
        return int(self.judged.sum())


@dataclass(frozen=True)
class RowSummary:
    """One line about a row too wide to show: its top entries (a vocabulary row) or its range."""

    label: str
    top: tuple[tuple[str, float], ...] = ()  # (column label, probability), most likely first
    low: float = math.nan
    high: float = math.nan
    mean: float = math.nan
    argmax: str = ""


@dataclass(frozen=True, eq=False)  # holds arrays: compared by identity
class MatrixFrame:
    """One matrix window's picture. `values` are host NumPy, 2-D; the labels are made when shown."""

    name: str
    values: np.ndarray
    rows: Sequence[str]
    cols: Sequence[str]
    kind: str = ""
    head: int | None = None
    before: np.ndarray | None = None  # the values before the last weight edit
    changed: np.ndarray | None = None  # bool: cells the edit changed
    verdicts: Verdicts | None = None
    tokens: tuple[str, ...] = ()  # the decode rule's choice: cells hold token ids, shown as these labels
    order: np.ndarray | None = None  # a vocabulary row's columns, most likely first (the top-k sorted view)
    summary: RowSummary | None = None  # of the last position
    scale: float = 0.0  # the largest finite |value|: the heat colours' full scale
    scale_before: float = 0.0
    newest_first: bool = False  # open the window on the last rows (a KV cache's newest positions)
    new_from: int | None = None  # rows from here on were appended this round (a KV cache)
    differing: frozenset[int] = frozenset()  # rows that differ from a --against dump (a KV cache)
    batch_rows: tuple[int, ...] = ()  # the requests whose rows are stacked (a batch's operator: its batch axis)
    rows_before: Sequence[str] | None = None  # the labels of `before`: the earlier run's (its tokens may differ)
    cols_before: Sequence[str] | None = None
    by_intervention: bool = False  # `before` is the run before an intervention's change, not a weight edit's
    ids: bool = False  # the cells are indices (a top-k's chosen experts), whole numbers stored as floats

    @property
    def sequential(self) -> bool:
        return self.kind in PROBABILITY_KINDS


@dataclass(frozen=True, eq=False)  # holds arrays: compared by identity
class CacheFrame:
    layer: int
    layers: int
    head: int
    heads: int
    length: int
    appended: int  # rows this round added (+)
    stale: bool  # computed with other weights than the current ones
    differing: frozenset[int]  # positions whose row in some view differs from a --against dump
    views: tuple[MatrixFrame, ...]  # the state's views (engine.state.StateView), one head's columns: K and V
    fed: bool = False  # its state counts the tokens fed through it, holding no rows of them (a recurrent state)
    evicted: tuple[int, ...] = ()  # positions fed that a ring holds no more
    line: Cause | None = None  # its state's line beside its rows (state_line): its kind's words, or the catalogue's
    # for a K/V layout; None: none
    heading: Cause | None = None  # its kind's heading, with where it is (state_heading); None: the K/V caches' own
    titles: tuple[Cause | str, ...] = ()  # each view's title: a Cause of its kind's words, or its name (notation: K)


class Group(StrEnum):
    INPUT = "input"
    LAYER = "layer"
    OUTPUT = "output"
    DECODE_RULE = "decode_rule"


@dataclass(frozen=True)
class OperatorLine:
    step: int
    short: str
    group: Group
    layer: int | None
    chunk: int
    breakpoint: bool


@dataclass(frozen=True)
class TimelineFrame:
    tokens: tuple[tuple[int, str, Status], ...]  # (position, text, status)
    focus: int  # the token the window centres on
    request: int
    requests: int
    phase: Phase
    round: int
    chunk: int | None  # shown when the prefill is chunked
    cache_length: int
    rounds: tuple  # tinyllm_tui.debugger.history.RoundSummary
    marks: tuple[tuple[int, bool], ...] = ()  # (round, your dump agrees) of this request, once compared
    batch: tuple[BatchLine, ...] = ()  # every row of a batch run as it stands (none outside a batch)
    chat: ChatLine | None = None  # the conversation the request's tokens were rendered from


@dataclass(frozen=True)
class ChatTurn:
    role: str
    content: str
    positions: tuple[int, int] | None  # the first and last position of its content's tokens


@dataclass(frozen=True)
class ChatLine:
    """The timeline's first stage: the messages, and what the chat template made of them."""

    turns: tuple[ChatTurn, ...]
    tokens: int  # of the rendered conversation
    control: frozenset[int]  # positions of the template's special tokens (<|im_start|>, <|im_end|>)
    end_of_turn: str | None  # the token that ends the reply, where the template writes one


@dataclass(frozen=True)
class BatchLine:
    """One row of a batch on the timeline."""

    request: int
    pad: int  # its first `pad` positions hold padding
    tokens: tuple[tuple[int, str, Status], ...]
    focus: int
    stop: str | None  # once it left the batch


@dataclass(frozen=True, eq=False)  # holds arrays: compared by identity
class OperandCorner:
    """An input of the operator: its name, shape and top-left corner."""

    name: str
    shape: tuple[int, ...]
    rows: tuple[str, ...]
    corner: np.ndarray


@dataclass(frozen=True)
class StatusFacts:
    step: int
    last: int | None  # None until the trace has been run to its end
    operator: str  # the short name: on screen at any terminal size
    inject: str | None
    stale: bool
    unsaved: int
    breakpoints: int
    hits: tuple[str, ...]  # the breakpoints that hit the current operator
    interventions: tuple[str, ...] = ()  # on activations, as --patch/--ablate write them


@dataclass(frozen=True, eq=False)  # holds arrays: compared by identity
class Frame:
    step: int
    phase: Phase
    request: int
    round: int
    matrix: MatrixFrame
    cache: CacheFrame | None
    operators: tuple[OperatorLine, ...]
    timeline: TimelineFrame
    status: StatusFacts
    hook: str  # the explanation's key: the last part of the hook name
    inputs: tuple[OperandCorner, ...]
    outcomes: tuple[Outcome, ...] | None  # None while the expect: tables are being checked
    at_end: bool


# -- building ------------------------------------------------------------------------------------

def group_of(state: OpState) -> tuple[Group, int | None]:
    """Where the operator list puts an operator: by the hook name's first part, so that BERT's
    `embed.hook_sum` (which the engine counts as layer 0's input) stays with the input."""
    hook = state.op.hook
    if hook.in_block:
        return Group.LAYER, hook.layer
    if hook.module == "sample":
        return Group.DECODE_RULE, None
    return (Group.OUTPUT if hook.module in ("ln_final", "unembed") else Group.INPUT), None


def operator_lines(states: Sequence[OpState], breaks: frozenset[int]) -> tuple[OperatorLine, ...]:
    return tuple(OperatorLine(s.step, short_name(s), *group_of(s), s.chunk, s.step in breaks) for s in states)


SCALE_CHUNK = 1 << 18  # values measured at a time: a 0.5B model's embedding needs no 1 GB temporaries


def finite_scale(values: np.ndarray | None) -> float:
    """The largest finite |value| (0 for none), a chunk of rows at a time."""
    if values is None or not values.size:
        return 0.0
    rows = values.reshape(values.shape[0], -1)
    step, scale = max(1, SCALE_CHUNK // max(rows.shape[1], 1)), 0.0
    for start in range(0, len(rows), step):
        magnitudes = np.abs(rows[start:start + step])
        scale = max(scale, float(np.max(magnitudes, where=np.isfinite(magnitudes), initial=0.0)))
    return scale


def changed_cells(values: np.ndarray, before: np.ndarray | None) -> np.ndarray | None:
    """Cells that differ from `before` (NaN in both is no change): one pass, then only the differing cells."""
    if before is None:
        return None
    changed = values != before
    where = np.nonzero(changed)
    changed[where] = ~(np.isnan(values[where]) & np.isnan(before[where]))
    return changed


def row_summary(values: np.ndarray, rows: Sequence[str], cols: Sequence[str], kind: str,
                names: Callable[[int], str] | None = None) -> RowSummary | None:
    """The last position's row in one line (a window shows it when the row is too wide)."""
    if not values.size:
        return None
    i = values.shape[0] - 1
    row = values[i]
    finite = row[np.isfinite(row)]
    if kind in VOCAB_KINDS and finite.size:
        top = top_tokens(row, probabilities=kind == OpKind.PROBS)
        return RowSummary(rows[i], tuple(((names or cols.__getitem__)(j), p) for j, p in top))
    if not finite.size:
        return RowSummary(rows[i])
    best = int(np.argmax(np.where(np.isfinite(row), row, -np.inf)))
    return RowSummary(rows[i], (), float(finite.min()), float(finite.max()), float(finite.mean()), cols[best])


def top_tokens(row: np.ndarray, probabilities: bool, count: int = TOP_COUNT) -> list[tuple[int, float]]:
    """The `count` most likely entries of a logits (softmax taken here, −∞ gets 0) or probabilities row."""
    if not probabilities:
        row = np.exp(row - np.max(row)) if np.isfinite(np.max(row)) else np.zeros_like(row)
        row = row / row.sum() if row.sum() > 0 else row
    count = min(count, row.size)
    best = np.argpartition(-row, count - 1)[:count]  # a vocabulary row: no need to sort all of it
    return [(int(t), float(row[t])) for t in best[np.argsort(-row[best], kind="stable")]]


def sorted_columns(values: np.ndarray, kind: str) -> np.ndarray | None:
    """A vocabulary row's most likely columns, best first: what the top-k view shows."""
    if kind not in VOCAB_KINDS or not values.size:
        return None
    row = np.where(np.isnan(values[-1]), -np.inf, values[-1])
    count = min(SORTED_COLUMNS, row.size)
    best = np.argpartition(-row, count - 1)[:count]
    return best[np.argsort(-row[best], kind="stable")]


def matrix_frame(name: str, values: np.ndarray, rows: Sequence[str], cols: Sequence[str], *, kind: str = "",
                 head: int | None = None, before: np.ndarray | None = None, verdicts: Verdicts | None = None,
                 tokens: tuple[str, ...] = (), newest_first: bool = False, new_from: int | None = None,
                 differing: frozenset[int] = frozenset(), names: Callable[[int], str] | None = None,
                 ids: bool = False) -> MatrixFrame:
    """Args: names: a vocabulary column's token text, for the top-tokens line. ids: the cells are indices."""
    return MatrixFrame(name, values, rows, cols, kind, head, before, changed_cells(values, before), verdicts,
                       tokens, sorted_columns(values, kind), row_summary(values, rows, cols, kind, names),
                       finite_scale(values), finite_scale(before), newest_first, new_from, differing, ids=ids)


def cache_frame(state: OpState, fingerprint: str, layer: int, head: int,
                differing: frozenset[int], words: RowWords) -> CacheFrame | None:
    """`state`'s layer state of `layer` through its views (engine.state), the columns of `head`; rows from
    `state.chunk_past` on were added by this chunk (this round, unless the prefill is chunked)."""
    if not state.caches:
        return None
    layer = min(layer, len(state.caches) - 1)
    cache = state.caches[layer]
    views = cache.views()
    if not views:  # a state of no rows of its own (a KV-shared layer): its facts say where it reads
        return CacheFrame(layer, len(state.caches), 0, 1, cache.length, 0, cache.fingerprint != fingerprint,
                          differing, (), fed(cache.facts), line=state_line(cache.facts),
                          heading=state_heading(cache.facts, layer, len(state.caches), 0, 1))
    heads = max(_heads(view) for view in views)  # views may differ in heads: the most of them
    head = min(head, heads - 1)
    timeline, new_from, positions = state.timeline, state.chunk_past, cache.row_positions
    # their labels carry the marks: rows are not positions 0, 1, … (a ring's slots, a paged table, a conv window)
    marked = hasattr(cache, "row_place") or positions != tuple(range(len(positions)))
    if marked:
        rows = Labels(len(positions), lambda i: row_label(cache, i, timeline, new_from, differing, words))
    else:
        rows = Labels(len(positions), lambda i: position_label(positions[i], timeline))
    slots = getattr(cache.facts, "slots", False)  # slots written round robin, not positions: no newest end

    def matrix(view) -> MatrixFrame:
        values, at = to_host(view.values)[:, _part(view, head)], min(head, _heads(view) - 1)
        (row, col), count = view.axes, values.shape[1]  # the words of its axes, the state's
        if not view.positional:  # its rows are features (a recurrent state's key features), not tokens
            return matrix_frame(view.name, values, Labels(values.shape[0], lambda i: f"{row}{i}"),
                                Labels(count, lambda j: f"{col}{j}"), head=at)
        return matrix_frame(view.name, values, rows, Labels(count, lambda j: f"{col}{j}"), head=at,
                            newest_first=not slots, new_from=None if marked else new_from,
                            differing=frozenset() if marked else differing)

    matrices = tuple(matrix(view) for view in views)
    titles = tuple(cause(view.title) if view.title else view.name for view in views)
    heading = state_heading(cache.facts, layer, len(state.caches), head, heads)
    return CacheFrame(layer, len(state.caches), head, heads, cache.length, sum(p >= new_from for p in positions),
                      cache.fingerprint != fingerprint, differing, matrices, fed(cache.facts), evicted_positions(cache),
                      state_line(cache.facts), heading, titles)


def fed(facts) -> bool:
    """Whether a state's facts say it counts the tokens fed, holding no rows of them (their `fed`, engine.state)."""
    return bool(getattr(facts, "fed", False))


def state_line(facts) -> Cause | None:
    """The line a layer state is worded with beside its rows: its facts' `words()` (a code of its kind's CAUSES, or
    of the stack's for a K/V cache's layout, and the facts) as a cause; None where its facts have none (a contiguous
    K/V cache's)."""
    if not hasattr(facts, "words"):
        return None
    return _said(*facts.words())


def _said(code: str, facts) -> Cause:
    """A code and its facts as a cause, a fact that is a phrase of its own (engine.state.Phrase) a cause too."""
    return cause(code, **{name: _said(value.code, value.facts) if isinstance(value, Phrase) else value
                          for name, value in facts.items()})


def state_heading(facts, layer: int, layers: int, head: int, heads: int) -> Cause | None:
    """The cache panel's heading of a layer kind's state, where its facts name one (their `heading`, a code of its
    kind's CAUSES), with the layer and head shown; None for the K/V caches' own heading."""
    code = getattr(facts, "heading", None)
    where = {"layer": layer, "last_layer": layers - 1, "head": head, "last_head": heads - 1}
    return None if code is None else cause(code, **where)


def _heads(view) -> int:
    total = int(view.values.shape[1])
    return max(total // (view.head_width or total or 1), 1)


def _part(view, head: int) -> slice:
    """The columns of `head` in a state view (its last head where it has fewer)."""
    width = min(view.head_width or int(view.values.shape[1]), int(view.values.shape[1]))
    head = min(head, _heads(view) - 1)
    return slice(head * width, (head + 1) * width)


def position_label(position: int, timeline) -> str:
    return f"{position} · {timeline[position].text}" if 0 <= position < len(timeline) else str(position)


def follow_layer(state: OpState) -> int | None:
    """The cache layer that follows the operator: its own, or past the blocks the last (the newest)."""
    if state.layer is not None:
        return state.layer
    if state.caches and state.caches[-1].seen > state.chunk_past:
        return len(state.caches) - 1
    return None


def timeline_frame(state: OpState, requests: int, chunked: bool, rounds: tuple,
                   verdicts: dict[tuple[int, int], bool], chat: Chat | None = None) -> TimelineFrame:
    """Args: verdicts: (request, round) -> your dump agrees, where a --against dump was compared;
    chat: the conversation of the request (shown outside a batch, whose rows' positions are padded)."""
    tokens, focus = timeline_tokens(state.timeline)
    chunk = state.chunk if chunked and state.phase is Phase.PREFILL else None
    marks = tuple((r, agrees) for (q, r), agrees in sorted(verdicts.items()) if q == state.request)
    batch = tuple(BatchLine(row.request, row.pad, *timeline_tokens(row.moment.timeline), row.stop)
                  for row in state.batch or ())
    shown = None if chat is None or batch else chat_line(chat, state.moment.vocab)
    return TimelineFrame(tokens, focus, state.request, requests, Phase(state.phase), state.round, chunk,
                         tokens_held(state.caches), rounds, marks, batch, shown)


def chat_line(chat: Chat, vocab) -> ChatLine:
    return _chat_line(chat, None if chat.end_of_turn is None else vocab.tokens[chat.end_of_turn])


@cache  # a frame per step, the same conversation throughout
def _chat_line(chat: Chat, end_of_turn: str | None) -> ChatLine:
    turns = []
    for index, message in enumerate(chat.messages):
        mine = [p for p, source in enumerate(chat.sources) if source == index]
        turns.append(ChatTurn(message.role, message.content, (mine[0], mine[-1]) if mine else None))
    control = frozenset(p for p, special in enumerate(chat.control) if special)
    return ChatLine(tuple(turns), len(chat.ids), control, end_of_turn)


def timeline_tokens(timeline) -> tuple[tuple[tuple[int, str, Status], ...], int]:
    """(position, text, status) of each token, and the one a window centres on: the first being fed,
    else the selected one, else the last."""
    tokens = tuple((t.position, t.text, t.status) for t in timeline)
    focus = next((i for status in (Status.CURRENT, Status.SELECTED)
                  for i, token in enumerate(tokens) if token[2] is status), max(len(tokens) - 1, 0))
    return tokens, focus


def operands(state: OpState) -> tuple[OperandCorner, ...]:
    def corner(operand) -> OperandCorner:
        shape = tuple(operand.values.shape)  # 2-D (trace.labelled); only the corner is read, not a whole table
        rows = tuple(resolve_some(operand.row_axis, range(min(shape[0], CORNER))))
        return OperandCorner(operand.name, shape, rows, to_host(operand.values[:CORNER, :CORNER]))

    return tuple(corner(operand) for operand in state.inputs)


BY_KIND = {("hook_out", OpKind.NORM): "norm.hook_out"}  # a norm's output, not the logits


def hook_key(state: OpState) -> str:
    """What the explanation of the operator is filed under: the hook name's last part, told apart where
    one hook does different things (given vectors or a scaled table, a norm's output; a layer kind's own, its
    `explanation_key`: capped scores, an expert's output), or `module.hook` where a kind files it so (two kinds
    with a hook of the same name: conv.hook_conv)."""
    site = state.op.hook
    if site.module and explanation(site.local) is not None:  # filed under `module.hook` by its kind
        return site.local
    hook = site.name
    if hook == "hook_embed" and not state.op.inputs:  # a request that gives its input vectors reads no table
        hook = "hook_embed(vectors)"
    elif hook == "hook_embed" and len(state.op.inputs) == 2:  # the table and Gemma's embed_scale
        hook = "hook_embed(scaled)"
    elif (key := explanation_key(state.op)) is not None:
        hook = key
    return BY_KIND.get((hook, state.kind), hook)


def explanation_texts(key: str) -> dict[str, tuple[str, ...]] | None:
    """What a layer kind says its operator filed under `key` computes (engine.layers), per language."""
    return explanation(key)


def with_breakpoints(frame: Frame, breaks: frozenset[int], hits: tuple[str, ...], count: int) -> Frame:
    """The same frame with other breakpoints: the marks and the status follow them."""
    lines = tuple(replace(line, breakpoint=line.step in breaks) for line in frame.operators)
    return replace(frame, operators=lines, status=replace(frame.status, hits=hits, breakpoints=count))
