"""Routing flips: the first token whose chosen experts differ between the reference run and a dump.

A float32 or quantized port that picks another expert for one token where two router scores nearly tie then
differs in every number after it; the flip names where that choice was made (pass · layer · token), both
sides' chosen experts and scores, and the reference's margin there, ahead of the numeric divergence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.layout import Key
from engine.hooks import Hook
from engine.layers.moe_ffn import SCORES, route
from engine.trace import OpState


@dataclass(frozen=True)
class RouteFlip:
    key: Key  # the pass and its top-k operator
    layer: int
    token: str  # the token's row label, "22 · +"
    ours: tuple[int, ...]  # the reference's experts, best first
    theirs: tuple[int, ...]  # the dump's
    our_scores: tuple[float, ...]  # the reference's scores of its experts
    their_scores: tuple[float, ...] | None  # the dump's scores of its experts, when it holds the router scores
    margin: float  # the reference's k-th score less its best unchosen one, at that token

    def text(self, requests: int = 1) -> str:
        theirs = "" if self.their_scores is None else f" (scores {_scores(self.their_scores)})"
        return (f"{self.key.label(requests)} · layer {self.layer} · token {self.token}: reference chose "
                f"{list(self.ours)} (scores {_scores(self.our_scores)}, margin {self.margin:.2e}), dump "
                f"{list(self.theirs)}{theirs}")

    def document(self, requests: int = 1) -> dict:
        return {"pass": self.key.label(requests), "layer": self.layer, "token": self.token,
                "reference": list(self.ours), "dump": list(self.theirs), "reference_scores": list(self.our_scores),
                "dump_scores": None if self.their_scores is None else list(self.their_scores),
                "margin": self.margin, "text": self.text(requests)}


def _scores(values: tuple[float, ...]) -> str:
    return ", ".join(f"{v:.6g}" for v in values)


def route_flip(state: OpState, key: Key, aligned) -> RouteFlip | None:
    """The first token of a top-k operator whose chosen experts (as a set) the dump's differ from; None for
    another operator, a dump without that top-k, or the same choices. `aligned(key, head, shape)`: the dump's
    array in the engine's layout (engine.compare.against.Against.aligned)."""
    chosen = route(state.op)
    theirs = None if chosen is None else aligned(key, None, chosen.chosen.shape)
    if theirs is None:
        return None
    theirs = theirs.astype(np.int64)
    rows = [t for t in range(len(theirs)) if set(theirs[t].tolist()) != set(chosen.chosen[t].tolist())]
    if not rows:
        return None
    t, hook = rows[0], state.op.hook
    their_scores = aligned(Key(key.request, key.pass_, Hook(hook.layer, hook.module, SCORES).text), None,
                           chosen.scores.shape)
    return RouteFlip(key, state.layer, state.output.rows[t], tuple(chosen.chosen[t].tolist()),
                     tuple(theirs[t].tolist()), tuple(float(chosen.scores[t, e]) for e in chosen.chosen[t]),
                     None if their_scores is None else tuple(float(their_scores[t, e]) for e in theirs[t]),
                     float(chosen.margins[t]))
