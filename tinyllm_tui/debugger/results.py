"""What a move of the Debugger did, as typed values: views word them (tinyllm_tui.tui.messages), the
Debugger never does. Each result names facts (steps, breakpoint texts, counts), never a sentence."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from engine.causes import Cause
from engine.trace import Phase


class Reason(StrEnum):
    """Why a move was refused; `Refused.args` carries the facts its message names."""

    BUSY = "busy"  # a run owns the generator
    FIRST_STEP = "first_step"  # stepping back from step 0
    NO_STEP = "no_step"  # args: (step, last recorded step)
    NO_MATCH = "no_match"  # args: (text,)
    EMPTY_SEARCH = "empty_search"
    BAD_QUERY = "bad_query"  # args: (the breakpoint parser's message,)
    ALREADY_SET = "already_set"  # args: (breakpoint text,)
    NO_BREAKPOINT = "no_breakpoint"  # args: (breakpoint text,)
    NOTHING_TO_UNDO = "nothing_to_undo"
    NOTHING_TO_REDO = "nothing_to_redo"
    NOT_STALE = "not_stale"
    UNCHANGED = "unchanged"  # args: (parameter name,)
    BAD_EDIT = "bad_edit"  # args: (the edit parser's message,)
    NOTHING_TO_SAVE = "nothing_to_save"
    NO_CACHE = "no_cache"
    NO_DUMP = "no_dump"  # `g diverged` without --against
    NO_LENS = "no_lens"  # args: (the engine's reason: an encoder, a post-norm model,)


@dataclass(frozen=True)
class Moved:
    step: int
    wrapped: bool = False  # a search went past one end of the trace


@dataclass(frozen=True)
class HitBreakpoint:
    step: int
    names: tuple[str, ...]


@dataclass(frozen=True)
class Generated:
    """One request's continuation: the decoded text, and its pieces (one per token) on demand."""

    text: str
    pieces: tuple[str, ...]
    stop: str | None


@dataclass(frozen=True)
class EndOfTrace:
    results: tuple[Generated, ...]


@dataclass(frozen=True)
class Cancelled:
    step: int


@dataclass(frozen=True)
class Refused:
    reason: Reason
    args: tuple = ()


@dataclass(frozen=True)
class Diverged:
    """`g diverged`: the first step where your activations leave the reference (None: they agree everywhere)."""

    step: int | None
    first: object | None = None  # engine.compare.against.OpAgreement: the first cell that differs, its pass,
    #                              operator, labels, values and |Δ|
    requests: int = 1  # how many requests the scenario has (a pass names its request when there are several)


@dataclass(frozen=True)
class Misnamed:
    """A name in breakpoint `text` that no operator has, with the nearest name one has (None: none is near)."""

    text: str
    name: str
    near: str | None


@dataclass(frozen=True)
class BreakpointAdded:
    text: str
    misnamed: tuple[Misnamed, ...] = ()  # its names that no operator of the round on view has


@dataclass(frozen=True)
class BreakpointRemoved:
    text: str


@dataclass(frozen=True)
class BreakpointsCleared:
    count: int


@dataclass(frozen=True)
class InjectionChanged:
    name: str | None  # None: no injected bug
    skipped: tuple[tuple[str, object], ...] = ()  # the bugs passed over to reach it, each with why it cannot run
    # here (a cause, engine.causes)


class EditKind(StrEnum):
    EDITED = "edited"
    RESTORED = "restored"
    UNDONE = "undone"
    REDONE = "redone"
    RECOMPUTED = "recomputed"


@dataclass(frozen=True)
class Rebuilt:
    """The weights changed (or the cache was recomputed) and the session was replayed to the same step."""

    kind: EditKind
    name: str = ""  # the edited parameter (EDITED)
    count: int = 0  # edits restored (RESTORED)


@dataclass(frozen=True)
class Saved:
    path: str


@dataclass(frozen=True)
class CacheShown:
    layer: int
    head: int


@dataclass(frozen=True)
class DiffLine:
    """One operator of the run against a full recompute (or a layer's state at the end of a round), as the diff
    views show it: engine.compare.diff.OpDiff's fields, copied at the Debugger's edge so that no engine object
    reaches a view (tests/test_view_data.py)."""

    step: int  # the cached run's step of this operator (the chunk that differs most)
    request: int
    phase: Phase
    round: int
    name: str
    layer: int | None
    head: int | None
    max_abs: float  # inf where the runs' rows or key columns do not meet (`mismatch` says how)
    tolerance: float
    agrees: bool  # max_abs is within the tolerance
    mismatch: Cause | None = None  # how the runs' rows or key columns do not meet: nothing to subtract
    state: bool = False  # a layer's state (one of its dump items), not an operator


@dataclass(frozen=True)
class FlipPass:
    """The pass a routing flip is in."""

    request: int
    pass_: str  # "prefill", "decode.2"

    def label(self, requests: int = 1) -> str:
        """As a dump's key names it: the request only when there are several."""
        return (f"request.{self.request}." if requests > 1 else "") + self.pass_


@dataclass(frozen=True)
class FlipLine:
    """The first token a run routes to other experts than another (from engine.compare.routes.RouteFlip)."""

    key: FlipPass
    layer: int
    token: str  # the token's row label, "22 · +"
    ours: tuple[int, ...]  # the reference's experts, best first
    theirs: tuple[int, ...]  # the other run's
    our_scores: tuple[float, ...]
    their_scores: tuple[float, ...] | None  # None: the other side holds no router scores
    margin: float  # the reference's k-th score less its best unchosen one, at that token
    other: Cause  # what the other side is (engine.causes `side.*`)


@dataclass(frozen=True)
class DiffReport:
    """The run being debugged against a full recompute: one line per operator."""

    diffs: tuple[DiffLine, ...]
    first: int | None  # index of the first divergence, None when every operator agrees
    inject: str | None
    tolerance: float
    flip: FlipLine | None = None  # a float32 or quantized-cache run's first routing flip
    requests: int = 1  # how many requests the scenario has (a pass names its request when there are several)


Result = (Moved | HitBreakpoint | EndOfTrace | Cancelled | Refused | Diverged | BreakpointAdded | BreakpointRemoved
          | BreakpointsCleared | InjectionChanged | Rebuilt | Saved | CacheShown)
