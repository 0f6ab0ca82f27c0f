"""The plain data a session yields: one `OpState` per operator.

Widgets and the CLI only read these; they never compute. Arrays stay in the
session's namespace until `engine.backend.to_host` is called for display.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum
from functools import cached_property
from typing import Any

from engine.labels import Axis, WithSink, resolve
from engine.state import LayerState

Array = Any


class Status(str, Enum):
    """Where a token stands: the A.9 timeline of the 003 walkthrough."""

    PROCESSED = "processed"  # its K/V are in the cache
    CURRENT = "current"  # being fed through the model in this round
    SELECTED = "selected"  # chosen by the decode rule, not yet fed back
    PENDING = "pending"  # input not yet reached (later prefill chunk, later request)


class Phase(StrEnum):
    """A round's phase; a str, so `state.phase == "prefill"` and f-strings read the value."""

    PREFILL = "prefill"
    DECODE = "decode"


class OpKind(StrEnum):
    """What an operator does: breakpoints stop on these (engine.breakpoints.KINDS)."""

    EMBED = "embed"
    POSITIONS = "positions"
    ROPE = "rope"
    NORM = "norm"
    LINEAR = "linear"
    SCORES = "scores"
    SOFTCAP = "softcap"
    SOFTMAX = "softmax"
    MIX = "mix"
    ROUTE = "route"  # a mixture of experts' choice: which experts each token goes to, and their scores
    CONCAT = "concat"
    RESIDUAL = "residual"
    ACTIVATION = "activation"
    DROPOUT = "dropout"
    LOGITS = "logits"
    FILTER = "filter"
    PROBS = "probs"
    CHOICE = "choice"


@dataclass(eq=False)
class Labelled:
    """A 2-D array with a label for every row and column (read-only by convention, see OpState).

    The axes are label strings or an `engine.labels.Axis`; an Axis is turned into
    strings the first time `rows`/`cols` is read (tracing never builds labels).
    """

    name: str
    values: Array
    row_axis: Axis | tuple[str, ...]
    col_axis: Axis | tuple[str, ...]

    @cached_property
    def rows(self) -> tuple[str, ...]:
        return resolve(self.row_axis)

    @cached_property
    def cols(self) -> tuple[str, ...]:
        return resolve(self.col_axis)


@dataclass(frozen=True)
class TokenState:
    token: int
    text: str  # as drawn (engine.labels.visible: a token of only whitespace made visible)
    position: int
    status: Status


@dataclass(frozen=True, eq=False)
class Moment:
    """Where a request stands while one chunk goes through the model: shared by that chunk's
    states, so that a state costs nothing for its timeline or its inputs' labels until read."""

    context: tuple[int, ...]  # the token ids at positions 0, 1, … (fed so far and being fed)
    fed: int  # how many of them are in the cache
    pending: tuple[int, ...]  # prompt tokens of later prefill chunks
    selected: int | None  # chosen, not yet fed back
    vocab: Any  # engine.spec.Vocab

    def axis(self, scheme: str | tuple[int, ...], count: int, column: bool) -> Axis:
        """An operand axis: positional schemes end at the last token of the context; a tuple of
        positions names the key rows a cache holds when they are not 0, 1, … (a ring buffer)."""
        if isinstance(scheme, WithSink):  # the keys, then one column more
            return self.axis(scheme.keys, count, column)._replace(sink=True)
        if isinstance(scheme, tuple):
            return Axis("keys", count, 0, self.context, self.vocab, column, at=scheme)
        first = len(self.context) - count if scheme in ("chunk", "last") else 0
        return Axis(scheme, count, first, self.context, self.vocab, column)

    def labelled(self, operand) -> Labelled:
        """An engine.model.Operand (name, values, row and column schemes) with its axes described."""
        values = operand.values
        if len(values.shape) == 1:
            values = values[None, :]
        rows = self.axis(operand.rows, values.shape[0], column=False)
        return Labelled(operand.name, values, rows, self.axis(operand.cols, values.shape[1], column=True))

    @cached_property
    def timeline(self) -> tuple[TokenState, ...]:
        statuses = ([Status.PROCESSED] * self.fed + [Status.CURRENT] * (len(self.context) - self.fed)
                    + [Status.PENDING] * len(self.pending) + [Status.SELECTED] * (self.selected is not None))
        tokens = (*self.context, *self.pending, *(() if self.selected is None else (self.selected,)))
        return tuple(TokenState(t, self.vocab.shown(t), p, status)
                     for p, (t, status) in enumerate(zip(tokens, statuses)))


@dataclass(frozen=True, eq=False)
class BatchRow:
    """One request of a batch as it stands at some step (its latest moment; its stop once it left)."""

    request: int
    pad: int  # left padding: the row's first `pad` positions hold PAD
    moment: Moment
    stop: str | None


@dataclass(eq=False)
class OpState:
    """One operator's output and where the run stood.

    A state holds the operator as the forward pass yielded it and the chunk's shared Moment;
    everything else (labelled output, positions, inputs, timeline) is made when first read,
    so that recording a state allocates almost nothing. Read-only by convention: not a frozen
    dataclass, whose __init__ costs more than the rest of a state.
    """

    step: int
    request: int
    phase: Phase
    round: int  # 0 for prefill, 1.. for cached decode rounds
    chunk: int  # prefill chunk index (0 when unchunked and in decode)
    op: Any  # the engine.model.Op: name, kind, layer, head, values, the operands it read
    moment: Moment
    caches: tuple[LayerState, ...]  # every layer's, whatever its kind keeps (a K/V cache, a conv window, …)
    past: int  # tokens fed before this round: a layer state's rows holding positions at or after it are new
    stop: str | None = None  # "eos" | "end_of_turn" | "max_new_tokens" on the op that ends a request
    original: Array | None = None  # what the operator computed, when an intervention replaced its values
    batch: tuple[BatchRow, ...] | None = None  # every row of a batch run as it stands (None: no batch)

    @property
    def name(self) -> str:
        """TransformerLens-style hook name."""
        return self.op.name

    @property
    def hook(self):
        """The engine.hooks.Hook of this operator, its head included."""
        return self.op.hook.at(self.op.head)

    @property
    def kind(self) -> OpKind:
        return self.op.kind

    @property
    def layer(self) -> int | None:
        return self.op.layer

    @property
    def head(self) -> int | None:
        return self.op.head

    @property
    def values(self) -> Array:
        return self.op.values  # an operator's output is 2-D

    @cached_property
    def output(self) -> Labelled:
        return self.moment.labelled(self.op)

    @cached_property
    def positions(self) -> tuple[int, ...]:
        """The absolute position of each output row."""
        return tuple(self.output.row_axis.positions)

    @cached_property
    def inputs(self) -> tuple[Labelled, ...]:
        return tuple(self.moment.labelled(operand) for operand in self.op.inputs)

    @property
    def chunk_past(self) -> int:
        """The tokens fed before this chunk: a layer state's rows holding positions at or after it were added by
        this chunk. `past` for a round's first chunk (and the decode rule after the round); a later chunk of a
        chunked prefill adds to what the earlier chunks fed."""
        return self.past if self.chunk == 0 else self.moment.fed

    @property
    def context(self) -> tuple[int, ...]:
        """The token ids at positions 0, 1, … (fed so far and being fed)."""
        return self.moment.context

    @property
    def timeline(self) -> tuple[TokenState, ...]:
        return self.moment.timeline


@dataclass(frozen=True)
class RequestResult:
    input: tuple[int, ...]
    generated: tuple[int, ...]
    stop: str
