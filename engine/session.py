"""A session: every request of a scenario through prefill and cached decode rounds.

`Session.steps()` yields one `OpState` per operator in execution order. In
mode CACHED only new tokens are fed and the KV cache grows; in mode FULL
every round recomputes the whole prefix from an empty cache, which is the
reference the cached run is diffed against.

Before each round of each request runs its first operator, the session can hand out
a `RoundStart`: everything needed to run on from there. `steps(resume=start)` yields
exactly the states (step numbers, values bit for bit) a run from scratch yields from
`start.step` on. A round start holds its layers' states by reference: a LayerState is never
changed in place (extending one makes a new one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from engine.backend import Backend, make_backend
from engine import decoding
from engine.hooks import HookRegistry
from engine.decoding import choose
from engine.faults import FAULTS, INJECTIONS, NO_FAULT
from engine.interventions import Patcher
from engine.model import Op, OpStream, Transformer
from engine.scenario import Scenario
from engine.spec import Mode, Request
from engine.state import LayerState
from engine.trace import BatchRow, Moment, OpKind, OpState, Phase, RequestResult

__all__ = ["INJECTIONS", "Mode", "RoundStart", "Session", "StaleFrom"]  # INJECTIONS: the faults' names, from engine.faults


@dataclass(frozen=True)
class StaleFrom:
    """Weights were edited at (request, round) and the cache computed before was kept on purpose."""

    weights: dict  # the weights every earlier round was computed with
    request: int
    round: int


@dataclass(frozen=True, eq=False)
class RoundStart:
    """A session as it stands before a round's first operator: enough to run on from there.

    What a round start does not hold is derived: the token the round feeds (the last one
    generated, or the prompt in round 0), and the choice and stop (none before a round)."""

    step: int  # the round's first operator
    request: int
    round: int
    results: tuple[RequestResult, ...]  # of the requests finished before this one
    caches: tuple[LayerState, ...]
    fed: tuple[int, ...]
    generated: tuple[int, ...]
    rng: dict  # the request's sampling Generator: its bit_generator.state


OnRound = Callable[[RoundStart], None]


class _Counter:
    """The step numbers a session's requests share; a round start reads the next one without taking it."""

    def __init__(self, first: int):
        self.next = first

    def take(self) -> int:
        self.next += 1
        return self.next - 1


class Session:
    def __init__(self, scenario: Scenario, backend: Backend | None = None, *, mode: Mode | str = Mode.CACHED,
                 inject: str | None = None, stale: StaleFrom | None = None):
        """Args:
        mode: CACHED (feed only new tokens) or FULL (recompute the whole prefix every round).
        inject: one of INJECTIONS, applied to the cached path only; the full recompute stays correct.
        stale: run rounds before an edit with the old weights and keep their cache (cached mode only).
        """
        if mode not in tuple(Mode):
            raise ValueError(f"unknown mode {mode!r} (expected one of {', '.join(Mode)})")
        if inject is not None and inject not in INJECTIONS:
            raise ValueError(f"unknown bug {inject!r} (expected one of {', '.join(INJECTIONS)})")
        self.scenario = scenario
        self.backend = backend or make_backend()
        self.mode = mode = Mode(mode)
        self.inject = inject if mode == Mode.CACHED else None
        self.fault = FAULTS[self.inject] if self.inject else NO_FAULT
        self.stale = stale if mode == Mode.CACHED else None
        self.model = Transformer(scenario.model, scenario.weights, self.backend, scenario.fingerprint,
                                 self.fault, allow_stale=self.stale is not None, cache=scenario.cache)
        self.old_model = None
        if self.stale is not None:
            old = dataclasses.replace(scenario, weights=self.stale.weights)
            self.old_model = Transformer(old.model, old.weights, self.backend, old.fingerprint, cache=scenario.cache)
        self.results: list[RequestResult] = []
        self.patcher = Patcher(scenario.interventions, self.backend.xp, self._clean_run) if scenario.interventions else None

    def _clean_run(self) -> Iterator[OpState]:
        """This session's states without the scenario's interventions (what `from:` patches copy)."""
        clean = dataclasses.replace(self.scenario, interventions=())
        return Session(clean, self.backend, mode=self.mode, inject=self.inject, stale=self.stale).steps()

    @property
    def hooks(self) -> HookRegistry:
        """Every hook a pass may yield, known before any runs: the model's, then choosing a token's (a decoder's)."""
        return self.model.hooks + decoding.HOOKS if self.scenario.model.lm_head else self.model.hooks

    def model_for(self, request: int, round_: int) -> Transformer:
        """The model a round runs with: the old weights before a kept-stale edit, else the current ones."""
        if self.stale is not None and (request, round_) < (self.stale.request, self.stale.round):
            return self.old_model
        return self.model

    def scaled_caches(self, tokens: list[int], scale: float) -> list:
        """The prefix cache another checkpoint (every weight × `scale`) would have left behind."""
        weights = {name: w * scale for name, w in self.scenario.weights.items()}
        other = dataclasses.replace(self.scenario, weights=weights)
        model = Transformer(other.model, other.weights, self.backend, other.fingerprint, cache=self.scenario.cache)
        caches = model.empty_caches()
        for _ in model.forward(tokens, list(range(len(tokens))), caches):
            pass
        return caches

    def steps(self, resume: RoundStart | None = None, on_round: OnRound | None = None) -> Iterator[OpState]:
        """Every operator's state, from the start or from `resume`; `on_round` is given each round start."""
        if self.scenario.batch:
            if resume is not None:
                raise ValueError("a batch hands out no round starts to resume from")
            yield from self._batch_steps()
            return
        self.results = list(resume.results) if resume else []
        counter = _Counter(resume.step if resume else 0)
        first = resume.request if resume else 0
        caches = None  # a paged cache's pool goes on from one request to the next
        for index in range(first, len(self.scenario.requests)):
            run = _RequestRun(self, index, self.scenario.requests[index], counter, on_round, caches)
            yield from run.run(resume if index == first else None)
            self.results.append(run.result())
            caches = run.caches

    @property
    def padding(self) -> tuple[int, ...]:
        """Each request's left padding: none one after another; up to the longest prompt in a batch."""
        lengths = [len(request.tokens) for request in self.scenario.requests]
        return tuple(max(lengths) - n if self.scenario.batch else 0 for n in lengths)

    def _batch_steps(self) -> Iterator[OpState]:
        """Every request as a row of one left-padded batch: the rows go through each operator in
        turn (lockstep), and a row that stops leaves the batch while the others go on. A batch hands
        out no round starts: a resume replays it from the first step."""
        counter = _Counter(0)
        runs = [_RequestRun(self, index, request, counter, pad=pad)
                for index, (request, pad) in enumerate(zip(self.scenario.requests, self.padding))]
        rows = _BatchRows(runs)
        for run in runs:
            run.batch = rows.now
        streams = {run.index: run.run() for run in runs}
        while streams:
            for index, stream in list(streams.items()):
                state = next(stream, None)
                if state is None:
                    del streams[index]
                else:
                    yield state
        self.results = [run.result() for run in runs]


class _BatchRows:
    """Every row of a batch as it stands, one tuple shared by the states until a row's moment or stop changes."""

    def __init__(self, runs: list[_RequestRun]):
        self.runs, self._rows, self._key = runs, (), ()

    def now(self) -> tuple[BatchRow, ...]:
        key = tuple((run._moment, run.stop) for run in self.runs)
        if key != self._key:
            self._key = key
            self._rows = tuple(BatchRow(run.index, run.pad, moment, stop) for run, (moment, stop) in zip(self.runs, key)
                               if moment is not None)
        return self._rows


class _RequestRun:
    """One request's prefill and decode rounds, and the context each OpState reports."""

    def __init__(self, session: Session, index: int, request: Request, counter: _Counter,
                 on_round: OnRound | None = None, previous: list[LayerState] | None = None, pad: int = 0):
        """previous: the caches the request before left (a paged pool goes on); pad: left padding."""
        self.session, self.index, self.request, self.counter = session, index, request, counter
        self.on_round = on_round
        self.xp = session.model.xp
        self.rule = session.scenario.decode
        self.vocab = session.scenario.vocab
        self.pad = pad
        self.batch: Callable[[], tuple[BatchRow, ...]] | None = None  # the batch's rows (a batch run only)
        self.prompt = (self.vocab.pad_id,) * pad + tuple(request.tokens)
        model = session.model_for(index, 0)
        self.caches = [cache.fresh(model.fingerprint) for cache in previous] if previous else model.empty_caches()
        self.fed: list[int] = []  # tokens whose K/V are in the cache
        self.current: list[int] = []  # tokens going through the model now
        self.generated: list[int] = []
        self.selected: int | None = None  # chosen, not yet fed back
        self.round = self.chunk = 0
        self.round_start = 0  # tokens fed when this round began (OpState.past)
        self.stop: str | None = None
        self._moment: Moment | None = None
        self._caches: tuple = ()
        self._caches_of: list | None = None  # the list `_caches` was taken from

    def run(self, resume: RoundStart | None = None) -> Iterator[OpState]:
        rng = np.random.default_rng([self.rule.seed, self.index])
        if resume is not None:
            self._resume(resume, rng)
        new = [self.selected] if self.round else list(self.prompt)
        while True:
            if self.on_round is not None:
                self.on_round(self._round_start(rng))
            logits = yield from self._feed(new)
            if not self.session.scenario.model.lm_head:  # an encoder: the prefill is the whole job
                self.stop = "encoded"
                return
            yield from self._states(choose(self.xp, logits, self.rule, rng))
            self.generated.append(self.selected)
            if self.stop:
                return
            self.round += 1
            new = [self.selected]

    def _round_start(self, rng: np.random.Generator) -> RoundStart:
        return RoundStart(self.counter.next, self.index, self.round, tuple(self.session.results),
                          tuple(self.caches), tuple(self.fed), tuple(self.generated), rng.bit_generator.state)

    def _resume(self, start: RoundStart, rng: np.random.Generator) -> None:
        self.caches, self.fed, self.generated = list(start.caches), list(start.fed), list(start.generated)
        self.round = start.round
        self.selected = self.generated[-1] if self.round else None  # chosen last round, fed in this one
        rng.bit_generator.state = start.rng

    def result(self) -> RequestResult:
        return RequestResult(self.request.tokens, tuple(self.generated), self.stop or "")

    @property
    def phase(self) -> Phase:
        return Phase.PREFILL if self.round == 0 else Phase.DECODE

    def _feed(self, new: list[int]) -> OpStream:
        """Feed new tokens (cached mode) or the whole prefix again (full mode)."""
        fault, sequence = self.session.fault, list(self.prompt) + self.generated
        new = sequence if self.session.mode == Mode.FULL else fault.feed(self.phase, new, sequence)
        if self.session.mode == Mode.FULL:
            self.caches, self.fed = self.session.model.empty_caches(), []
        fed = list(self.fed)
        self.caches = fault.starting_caches(self.round, self.caches, lambda scale: self.session.scaled_caches(fed, scale))
        size = self.rule.prefill_chunk if self.phase == Phase.PREFILL and self.session.mode == Mode.CACHED else None
        size = size or len(new)
        self.selected, self.round_start = None, len(self.fed)
        for self.chunk, start in enumerate(range(0, len(new), size)):
            self.current = new[start : start + size]
            shift = fault.position_offset(self.pad)  # left padding: the first real token sits at position 0
            positions = [max(0, p - shift) for p in fault.positions(self.phase, len(self.fed), len(self.current))]
            model = self.session.model_for(self.index, self.round)
            stream = model.forward(self.current, positions, self.caches, vectors=self._vectors(start, size),
                                   padded_keys=self._padded_keys(),
                                   per_layer_ids=fault.per_layer_tokens(self.phase, self.current, self.fed))
            logits = yield from self._states(stream)
            self.fed += self.current
            self.current = []
        self.chunk = 0
        return logits

    def _vectors(self, start: int, size: int):
        """The request's given input vectors for this chunk (only encoders have them: no decode rounds)."""
        vectors = self.request.vectors
        return None if vectors is None else vectors[start : start + size]

    def _padded_keys(self) -> list[bool] | None:
        """PAD keys, and a batch row's left padding, whatever token fills it."""
        pad = self.vocab.pad
        flags = [i < self.pad or token == pad for i, token in enumerate(self.fed + self.current)]
        return self.session.fault.padded(flags) if any(flags) else None

    def _states(self, stream: OpStream) -> OpStream:
        """Wrap each Op of `stream` in an OpState; pass the stream's return value through."""
        while True:
            try:
                op = next(stream)
            except StopIteration as done:
                return done.value
            original = self._intervene(op)
            if op.kind == OpKind.CHOICE:
                self._select(int(op.values[0, 0]))
            yield self._state(op, original)

    def _intervene(self, op: Op):
        """Apply the scenario's interventions to `op` before the pass reads it; its values before, or None."""
        patcher = self.session.patcher
        if patcher is None:
            return None
        first = len(self.fed) + len(self.current) - op.values.shape[0]  # the absolute position of its first row
        return patcher.apply(op, self.index, self.round, self.chunk, first)

    def _select(self, token: int) -> None:
        self.selected = token
        chat = self.request.chat
        if self.rule.stop_at_eos and chat is not None and token == chat.end_of_turn:
            self.stop = "end_of_turn"
        elif self.rule.stop_at_eos and token == self.vocab.eos:
            self.stop = "eos"
        elif len(self.generated) + 1 >= self.request.max_new_tokens:
            self.stop = "max_new_tokens"

    def _state(self, op: Op, original=None) -> OpState:
        return OpState(self.counter.take(), self.index, self.phase, self.round, self.chunk, op, self._now(),
                       self._caches_now(op.layer), self.round_start, self.stop if op.kind == OpKind.CHOICE else None,
                       original, None if self.batch is None else self.batch())

    def _caches_now(self, layer: int | None) -> tuple:
        """The caches as they stand, one tuple shared by the states between two appends.

        Only two things change them: a round may start from a new list, and an append replaces the
        entry of the operator's own layer; checking just those keeps a traced step cheap."""
        if self._caches_of is not self.caches or (layer is not None and self._caches[layer] is not self.caches[layer]):
            self._caches_of, self._caches = self.caches, tuple(self.caches)
        return self._caches

    def _now(self) -> Moment:
        """The moment the request is at, made anew only when the tokens or the choice changed."""
        m, fed = self._moment, len(self.fed)
        if m is None or (m.fed, len(m.context), m.selected) != (fed, fed + len(self.current), self.selected):
            pending = self.prompt[fed + len(self.current):] if self.round == 0 else ()
            self._moment = Moment(tuple(self.fed + self.current), fed, tuple(pending), self.selected, self.vocab)
        return self._moment
