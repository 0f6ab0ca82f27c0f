"""Deliberate KV-cache bugs from the 003 walkthrough (A.9-A.11), for the diff to catch.

The forward pass and the session ask a `Fault` at a few named points: which keys a
query may read, which positions a round gets, what a round feeds, which cache a round
starts from and which cache a layer appends to. The base class answers correctly;
each bug overrides one answer. The reference path has no branch on a bug's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.spec import Positions
from engine.trace import LayerCache, Phase

Array = Any
STALE_SCALE = 1.1  # the "other checkpoint" of the stale-cache bug: every weight ×1.1


class Fault:
    """The correct behaviour at every named point."""

    description = "no bug"
    keeps_stale_cache = False  # may a cache computed with other weights be extended?

    def mask(self, xp, visible: Array | None, n_new: int, n_keys: int) -> Array | None:
        """Which of `n_keys` keys each of the `n_new` queries may read (None: all)."""
        return visible

    def positions(self, phase: Phase, first: int, count: int) -> list[int]:
        """The absolute positions of a chunk whose first token sits at `first`."""
        return list(range(first, first + count))

    def feed(self, phase: Phase, new: list[int], sequence: list[int]) -> list[int]:
        """The tokens a round feeds: `new`, or the whole `sequence` so far."""
        return new

    def starting_caches(self, round_: int, caches: list[LayerCache],
                        recompute: Callable[[float], list[LayerCache]]) -> list[LayerCache]:
        """The caches a cached round starts from; `recompute(scale)` rebuilds the prefix cache
        with every weight multiplied by `scale`."""
        return caches

    def layer_cache(self, layer: int, caches: list[LayerCache]) -> LayerCache:
        """The cache `layer` appends its new K/V rows to and then reads."""
        return caches[layer]

    def cannot_run(self, model, requests) -> str | None:
        """Why this bug cannot run on `model` with `requests` (None: it can): an encoder keeps no cache
        between rounds, and the positions a bug feeds must stay inside a learned position table."""
        if not model.lm_head:
            return "an encoder (model.lm_head: false) runs one prefill and no cached round, so no cache bug can show"
        if model.positions != Positions.LEARNED:
            return None
        for request in requests:
            fed = len(request.tokens)
            for round_ in range(1, request.max_new_tokens):  # a decode round feeds what `feed` gives
                fed += len(self.feed(Phase.DECODE, [0], [0] * (len(request.tokens) + round_)))
            if fed > model.max_positions:
                return f"it would feed position {fed - 1}, past the model's {model.max_positions} learned positions"
        return None


class ChunkMask(Fault):
    description = "a cached chunk is masked with tril(ones(C, P+C)): new queries miss most of the cache"

    def mask(self, xp, visible, n_new, n_keys):
        return None if visible is None else xp.tril(xp.ones((n_new, n_keys), dtype=xp.bool))


class PositionReset(Fault):
    description = "positions restart at 0 in every decode round"

    def positions(self, phase, first, count):
        return super().positions(phase, 0 if phase is Phase.DECODE else first, count)

    def cannot_run(self, model, requests):
        if model.positions == Positions.NONE and not model.training:  # dropout masks are drawn per position
            return "the model has no position term, so wrong positions change nothing"
        return super().cannot_run(model, requests)


class DuplicateAppend(Fault):
    description = "decode feeds the whole sequence again, so the prefix is appended to the cache twice"

    def feed(self, phase, new, sequence):
        return sequence if phase is Phase.DECODE else new


class StaleCache(Fault):
    description = "decode reuses a prefix cache computed with other weights (every weight ×1.1)"
    keeps_stale_cache = True

    def starting_caches(self, round_, caches, recompute):
        return recompute(STALE_SCALE) if round_ == 1 else caches


class NoCacheLayer1(Fault):
    description = "layer 1 attends over layer 0's cache instead of its own"

    def layer_cache(self, layer, caches):
        return caches[0] if layer == 1 and caches[1].length > 0 else caches[layer]

    def cannot_run(self, model, requests):
        return "the model has no layer 1" if model.n_layers < 2 else super().cannot_run(model, requests)


NO_FAULT = Fault()
FAULTS: dict[str, Fault] = {
    "chunk-mask": ChunkMask(),
    "position-reset": PositionReset(),
    "duplicate-append": DuplicateAppend(),
    "stale-cache": StaleCache(),
    "no-cache-layer1": NoCacheLayer1(),
}
INJECTIONS = {name: fault.description for name, fault in FAULTS.items()}
