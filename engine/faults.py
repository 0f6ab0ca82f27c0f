"""Deliberate KV-cache bugs from the 003 walkthrough (A.9-A.11), for the diff to catch.

The session asks a `Fault` at a few named points: which positions a round gets, what a round
feeds, which states a round starts from and which state a layer extends; which padded keys are
masked and how far padding shifts positions (batches). Each layer kind adds the points of its
own (engine.layers: the attention's which keys a query may read, which kv head a query head
reads; how K rows are stored, which ring slot and which physical block a row goes to, and what
shares a quantization scale), and the bugs that change them (its module's BUGS). The base class
answers correctly; each bug overrides one answer. The reference path has no branch on a bug's name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache
from typing import Any

from engine import layers
from engine.causes import Cause, cause
from engine.layers import FaultPoints
from engine.spec import Positions
from engine.state import LayerState
from engine.trace import Phase

Array = Any
STALE_SCALE = 1.1  # the "other checkpoint" of the stale-cache bug: every weight ×1.1


class Fault(FaultPoints):
    """The correct behaviour at every named point: the session's here, each layer kind's from its module
    (engine.layers.FaultPoints: the attention's mask, kv heads and K/V cache layouts)."""

    keeps_stale_cache = False  # may a cache computed with other weights be extended?

    def __getattr__(self, name: str):
        """A fault point of a kind registered after this module was read (as a test registers one): the correct
        answer its module's FaultPoints gives."""
        points = None if name.startswith("__") else next((p for p in layers.fault_points() if hasattr(p, name)), None)
        if points is None:
            raise AttributeError(name)
        return getattr(points, name).__get__(self)

    def positions(self, phase: Phase, first: int, count: int) -> list[int]:
        """The absolute positions of a chunk whose first token sits at `first`."""
        return list(range(first, first + count))

    def feed(self, phase: Phase, new: list[int], sequence: list[int]) -> list[int]:
        """The tokens a round feeds: `new`, or the whole `sequence` so far."""
        return new

    def per_layer_tokens(self, phase: Phase, current: list[int], fed: list[int]) -> list[int]:
        """The tokens whose per-layer input rows (Gemma 4) a chunk `current` reads, `fed` before it."""
        return current

    def starting_caches(self, round_: int, caches: list[LayerState],
                        recompute: Callable[[float], list[LayerState]]) -> list[LayerState]:
        """The layers' states a cached round starts from; `recompute(scale)` rebuilds the prefix's
        states with every weight multiplied by `scale`."""
        return caches

    def layer_state(self, layer: int, caches: list[LayerState]) -> LayerState:
        """The state `layer` extends and then reads (attention's K/V cache: the rows it appends to)."""
        return caches[layer]

    def unseen(self, scenario) -> tuple[str, dict] | None:
        """Why this bug would change no number of the scenario (None: it shows): a code, the stack's (engine.causes)
        or its kind's (its CAUSES), and the facts, which `cannot_run` makes a Cause."""
        return None

    def padded(self, flags: list[bool]) -> list[bool] | None:
        """Which key positions hold padding, to be masked (None: none)."""
        return flags

    def position_offset(self, pad: int) -> int:
        """How far a request's `pad` left-padding tokens shift its position ids back."""
        return pad

    def cannot_run(self, scenario) -> Cause | None:
        """Why this bug cannot run on an engine.scenario.Scenario, as a cause (None: it can): an encoder keeps no
        cache between rounds, the bug must change some number, and the positions it feeds must stay
        inside a learned position table."""
        model, requests = scenario.model, scenario.requests
        if not model.lm_head:
            return cause("fault.encoder")
        unseen = self.unseen(scenario)
        if unseen:
            return cause(unseen[0], **unseen[1])
        if model.positions != Positions.LEARNED:
            return None
        for request in requests:
            fed = len(request.tokens)
            for round_ in range(1, request.max_new_tokens):  # a decode round feeds what `feed` gives
                fed += len(self.feed(Phase.DECODE, [0], [0] * (len(request.tokens) + round_)))
            if fed > model.max_positions:
                return cause("fault.past_positions", position=fed - 1, positions=model.max_positions)
        return None


class PositionReset(Fault):

    def positions(self, phase, first, count):
        return super().positions(phase, 0 if phase is Phase.DECODE else first, count)

    def unseen(self, scenario):
        return _no_positions(scenario.model)


class DuplicateAppend(Fault):

    def feed(self, phase, new, sequence):
        return sequence if phase is Phase.DECODE else new


class StaleCache(Fault):
    keeps_stale_cache = True

    def starting_caches(self, round_, caches, recompute):
        return recompute(STALE_SCALE) if round_ == 1 else caches


class NoCacheLayer1(Fault):

    def layer_state(self, layer, caches):
        return caches[0] if layer == 1 and caches[1].length > 0 else caches[layer]

    def unseen(self, scenario):
        blocks = scenario.model.blocks
        if len(blocks) < 2:
            return ("fault.one_layer", {})
        return None if blocks[0].mixer == blocks[1].mixer else ("fault.mixed_layers", {})


class PaddingUnmasked(Fault):

    def padded(self, flags):
        return None

    def unseen(self, scenario):
        padded = any(scenario.vocab.pad in r.tokens for r in scenario.requests) or _padding(scenario)
        return None if padded else ("fault.unpadded", {})


class PositionsNotOffset(Fault):

    def position_offset(self, pad):
        return 0

    def unseen(self, scenario):
        model = scenario.model
        why = _no_positions(model) or (None if _padding(scenario) else ("fault.not_left_padded", {}))
        longest = max(len(r.tokens) for r in scenario.requests) + max(r.max_new_tokens for r in scenario.requests) - 1
        if not why and model.positions == Positions.LEARNED and longest > model.max_positions:
            why = ("fault.past_positions", {"position": longest - 1, "positions": model.max_positions})
        return why


class RopeOffByOne(Fault):

    def positions(self, phase, first, count):
        return super().positions(phase, first + (phase is Phase.DECODE), count)

    def unseen(self, scenario):
        return _no_positions(scenario.model)


class PerLayerPrevious(Fault):
    """A cached round reading the per-layer input row of the token before each new one."""

    def per_layer_tokens(self, phase, current, fed):
        return (fed[-1:] + current)[:len(current)]

    def unseen(self, scenario):
        return None if scenario.model.per_layer_input else ("fault.no_per_layer_input", {})


def _no_positions(model) -> tuple[str, dict] | None:
    if model.positions == Positions.NONE and not model.training:  # dropout masks are drawn per position
        return ("fault.no_positions", {})
    return None


def _padding(scenario) -> tuple[int, ...]:
    """Each request's left padding in a batch (none outside one)."""
    lengths = [len(r.tokens) for r in scenario.requests]
    return tuple(max(lengths) - n for n in lengths if n < max(lengths)) if scenario.batch else ()


NO_FAULT = Fault()
SESSION_BUGS = (PositionReset, DuplicateAppend, StaleCache, NoCacheLayer1, PaddingUnmasked, PositionsNotOffset,
                RopeOffByOne, PerLayerPrevious)
# the order --inject and the TUI's cycle list them in: the 003 walkthrough's (A.9-A.11), then in the order they
# came; a kind's bug not named here follows, in the registry's order
LISTED = ("chunk-mask", "position-reset", "duplicate-append", "stale-cache", "no-cache-layer1", "padding-unmasked",
          "positions-not-offset", "rope-off-by-one", "gqa-modulo", "transposed-k", "ring-wrong-slot",
          "block-table-wrong", "scale-per-tensor", "conv-not-shifted", "conv-shifted-twice", "state-not-decayed",
          "chunk-state-dropped", "shared-kv-own-cache", "per-layer-previous", "rope-key-unrotated",
          "absorbed-uk-untransposed")


@cache
def _faults(kinds: tuple[type, ...]) -> dict[str, Fault]:
    made = (*SESSION_BUGS, *(type(bug.__name__, (bug, Fault), {}) for bug in kinds))
    found = {re.sub(r"(?<!^)(?=[A-Z])", "-", bug.__name__).lower(): bug for bug in made}
    return {name: found[name]() for name in dict.fromkeys((*LISTED, *found)) if name in found}


class Faults(Mapping[str, Fault]):
    """Every bug by its name (its class's: ChunkMask is chunk-mask): the session's, and each layer kind's (its
    module's BUGS: a class overriding one of its fault points, and `unseen`), made a Fault; read from the registry
    as it is now (one Fault per bug while it stays)."""

    def _now(self) -> dict[str, Fault]:
        return _faults(layers.bugs())

    def __getitem__(self, name: str) -> Fault:
        return self._now()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __len__(self) -> int:
        return len(self._now())


class Names(Sequence[str]):
    """The names --inject takes, in their listing order; what each does is the views' to say (their catalogues)."""

    def __getitem__(self, index):
        return tuple(FAULTS)[index]

    def __len__(self) -> int:
        return len(FAULTS)


FAULTS = Faults()
INJECTIONS = Names()
