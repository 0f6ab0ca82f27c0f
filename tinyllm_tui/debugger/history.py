"""Time travel over a session's operator stream.

The stream is pulled lazily. Recorded states are kept while their values fit in
`budget` bytes (and `limit` states); older ones are dropped. Stepping back inside
the kept window moves a cursor; stepping back before it resumes the session from the
latest kept round start at or before the wanted step and pulls forward to it (sessions
are deterministic). Values are kept by reference: a state shares its arrays with the
session, nothing is copied. A kept state costs its output and the KV cache entries no
older kept state holds: a decode round's states hold a cache of their own.

Round starts (engine.session.RoundStart) get at most RESUME_SHARE of the budget, the
states the rest; engine.resume says what one costs and which are kept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinyllm_tui.debugger.resume import RoundStarts
from engine.state import tokens_held
from engine.trace import OpKind, OpState, Phase, Status

if TYPE_CHECKING:
    from engine.session import RoundStart

HISTORY_BUDGET = 2 * 1024**3  # bytes of operator outputs (and the caches they hold) kept for going back
RESUME_SHARE = 0.25  # of the budget, at most, for round starts to resume from


def state_bytes(state: OpState, before: OpState | None = None) -> int:
    """What keeping `state` after `before` costs: its output, and the KV cache entries it is the first
    to hold (an append makes one layer's entry anew, shared by the states after it until the next)."""
    cost = int(getattr(state.values, "nbytes", 0))
    shared = before.caches if before is not None else ()
    if state.caches is not shared:
        cost += sum(c.nbytes for i, c in enumerate(state.caches) if i >= len(shared) or c is not shared[i])
    return cost


class History:
    def __init__(self, start: Callable[..., Iterator[OpState]], *, limit: int = 1_000_000,
                 budget: int = HISTORY_BUDGET):
        """Args:
        start: `start(resume=None, on_round=None)` returns the operator stream from a round start
            (or the beginning), handing each round start to `on_round`: `Session(...).steps`.
        limit: how many states to keep in memory before older ones are dropped.
        budget: how many bytes of outputs and round starts to keep before older ones are dropped.
        """
        self._start, self._limit, self.budget = start, limit, budget
        self.round_starts = RoundStarts(budget * RESUME_SHARE)
        # (step, request, summary) of every round finished so far, kept past the budget: a few token texts
        # each, where the round's last OpState would hold that round's whole KV cache
        self._rounds: list[tuple[int, int, RoundSummary]] = []
        self.total: int | None = None  # known once the stream is exhausted
        self._restart(None)
        self.cursor = 0

    def _restart(self, resume: RoundStart | None) -> None:
        self._stream = self._start(resume=resume, on_round=self.round_starts.add)
        self._states: deque[OpState] = deque()
        self._costs: deque[int] = deque()  # state_bytes of each kept state after the one before it
        self._kept_bytes = 0
        self._fetched = resume.step if resume else 0
        self._fetch()

    def _fetch(self) -> bool:
        if self.total is not None and self._fetched >= self.total:
            return False
        state = next(self._stream, None)
        if state is None:
            self.total = self._fetched
            return False
        self._keep(state)
        while len(self._states) > 1 and (len(self._states) > self._limit or self.kept_bytes > self.budget):
            self._drop_oldest()
        if state.kind is OpKind.CHOICE and (not self._rounds or state.step > self._rounds[-1][0]):
            self._rounds.append((state.step, state.request, round_summary(state)))
        self._fetched += 1
        return True

    def _keep(self, state: OpState) -> None:
        cost = state_bytes(state, self._states[-1] if self._states else None)
        self._states.append(state)
        self._costs.append(cost)
        self._kept_bytes += cost

    def _drop_oldest(self) -> None:
        """Drop the oldest state; the next one now holds alone the cache entries they shared."""
        self._states.popleft()
        self._kept_bytes -= self._costs.popleft()
        alone = state_bytes(self._states[0])
        self._kept_bytes += alone - self._costs[0]
        self._costs[0] = alone

    @property
    def kept_bytes(self) -> int:
        """Bytes of kept outputs and round starts."""
        return self._kept_bytes + self.round_starts.nbytes

    @property
    def _offset(self) -> int:
        """The step of the oldest state still in memory."""
        return self._fetched - len(self._states)

    @property
    def current(self) -> OpState:
        return self.state_at(self.cursor)

    @property
    def last_recorded(self) -> int:
        return self._fetched - 1

    def _have(self, step: int) -> bool:
        """Pull the stream until `step` is recorded; False if it ends first."""
        while step > self.last_recorded:
            if not self._fetch():
                return False
        return True

    @property
    def at_end(self) -> bool:
        return not self._have(self.cursor + 1)

    def forward(self) -> bool:
        return self.goto(self.cursor + 1)

    def back(self) -> bool:
        return self.goto(self.cursor - 1)

    def goto(self, step: int) -> bool:
        """Move to `step`; past the end, move to the last step. False if not exactly there."""
        if step < 0:
            return False
        state = self.state_at(step)
        self.cursor = step if state is not None else self.last_recorded
        return state is not None

    def state_at(self, step: int) -> OpState | None:
        """The state of `step` (replaying if it was dropped), without moving the cursor; None past the end.

        A dropped step, or one past a kept round start that the stream has not reached since it last
        resumed, is reached from the nearest round start before it. Reading a step far from the cursor
        may drop the cursor's own state; `current` replays it.
        """
        ahead = step > self.last_recorded + 1 and self.round_starts.latest_step(step) > self.last_recorded + 1
        if step < self._offset or ahead:
            resume = self.round_starts.latest(step)
            self._restart(resume)
        return self._at(step) if self._have(step) else None

    def states_from(self, step: int) -> Iterator[OpState]:
        """Every state from `step` on, in order (computing ahead as needed), without moving the cursor."""
        while (state := self.state_at(step)) is not None:
            yield state
            step += 1

    def round_states(self, ahead: bool = True) -> list[OpState]:
        """Every operator of the current state's round still in memory, computing ahead to the round's end
        (with `ahead` False, only those computed so far: nothing is pulled).

        Walks out from the cursor, so a step costs the round's length, not the whole kept history's. A batch's
        rows go through a round in lockstep: its states interleave with the other rows' of the same round."""
        current = self.current
        member = self._member(current)
        first = last = self.cursor
        while first > self._offset and member(self._at(first - 1)):
            first -= 1
        known = self._have if ahead else lambda step: step <= self.last_recorded
        while known(last + 1) and member(self._at(last + 1)):
            last += 1
        first = max(first, self._offset)  # computing ahead may have dropped the round's oldest states
        return [s for s in map(self._at, range(first, last + 1)) if s.request == current.request]

    @staticmethod
    def _member(current: OpState) -> Callable[[OpState], bool]:
        """Whether a state belongs to `current`'s round (a batch's rows share their rounds)."""
        batch = current.batch is not None
        return lambda state: state.round == current.round and (batch or state.request == current.request)

    def round_known(self) -> bool:
        """The current round's last operator is computed: the stream has gone past it, or ended."""
        return self.total is not None or not self._member(self.current)(self._at(self.last_recorded))

    def complete_round(self, stop: Callable[[], bool]) -> bool:
        """Compute the current round to its end, one operator at a time, unless `stop()` turns true first: True
        once its last operator is known."""
        while not self.round_known():
            if stop():
                return False
            self._fetch()
        return True

    def _at(self, step: int) -> OpState:
        return self._states[step - self._offset]

    def finished_rounds(self, request: int) -> list[RoundSummary]:
        """The rounds of `request` finished at or before the cursor."""
        return [summary for step, index, summary in self._rounds if step <= self.cursor and index == request]


@dataclass(frozen=True)
class RoundSummary:
    """One row of the 003 walkthrough's A.9 table."""

    round: int
    phase: Phase
    fed: tuple[str, ...]
    cache_length: int
    chosen: str | None
    stop: str | None


def round_summary(choice: OpState) -> RoundSummary:
    """The round that `choice`, its last operator, finishes."""
    selected = [t.text for t in choice.timeline if t.status is Status.SELECTED]
    fed = tuple(t.text for t in choice.timeline[choice.past : -1])
    length = tokens_held(choice.caches)
    return RoundSummary(choice.round, choice.phase, fed, length, selected[0] if selected else None, choice.stop)
