"""Routing flips: the first token whose chosen experts differ between the reference run and another side.

A float32 or quantized port that picks another expert for one token where two router scores nearly tie then
differs in every number after it; the flip names where that choice was made (pass · layer · token), both
sides' chosen experts and scores, and the reference's margin there, ahead of the numeric divergence. The other
side is a dump (`check --against`, llama.cpp's tensors) or another run of the same scenario (`diff` of a float32
run or a quantized cache against the float64, exact-cache reference): one `route_flip` reads them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from engine.arrays import to_host
from engine.causes import Cause
from engine.layout import Key, Passes
from engine.hooks import Hook
from engine.layers import route, route_hooks
from engine.trace import OpKind, OpState


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
    other: Cause  # what the other side is (engine.causes `side.*`): a dump, llama.cpp, a float32 run, an int8 cache


def route_flip(state: OpState, key: Key, aligned, other: Cause) -> RouteFlip | None:
    """The first token of a top-k operator whose chosen experts (as a set) the dump's differ from; None for
    another operator, a dump without its choices, or the same choices. The dump's choices are its top-k, else
    the k best of its router scores, else of its router logits (a softmax router: the same order).
    `aligned(key, head, shape)`: the dump's array in the engine's layout (engine.compare.against.Against.aligned)."""
    chosen = route(state.op)
    if chosen is None:
        return None
    hook = state.op.hook

    def dumped(name: str, shape: tuple[int, ...]):
        return aligned(Key(key.request, key.pass_, Hook(hook.layer, hook.module, name).text), None, shape)

    their_scores = dumped(chosen.SCORES, chosen.scores.shape)
    theirs = _their_choice(aligned(key, None, chosen.chosen.shape), their_scores,
                           dumped(chosen.LOGITS, chosen.scores.shape), chosen.chosen.shape[1])
    if theirs is None:
        return None
    rows = [t for t in range(len(theirs)) if set(theirs[t].tolist()) != set(chosen.chosen[t].tolist())]
    if not rows:
        return None
    t = rows[0]
    return RouteFlip(key, state.layer, state.output.rows[t], tuple(chosen.chosen[t].tolist()),
                     tuple(theirs[t].tolist()), tuple(float(chosen.scores[t, e]) for e in chosen.chosen[t]),
                     None if their_scores is None else tuple(float(their_scores[t, e]) for e in theirs[t]),
                     float(chosen.margins[t]), other)


def _their_choice(topk, scores, logits, k: int) -> np.ndarray | None:
    """The dump's experts per token: its top-k as dumped, else the k best of its scores or logits."""
    if topk is not None:
        return topk.astype(np.int64)
    ranked = scores if scores is not None else logits
    return None if ranked is None else np.argsort(-ranked, axis=1, kind="stable")[:, :k]


def flip_between(reference: Iterable[OpState], run: Iterable[OpState], passes: Passes,
                 other: Cause) -> RouteFlip | None:
    """The first routing flip of `run` (another run of the same scenario: in float32, over a quantized cache)
    against `reference`, over the passes both reach having chosen the same tokens before them (after another
    choice they no longer feed the same tokens). `run` is read whole first: only its routing is kept."""
    theirs, choices = _routing(run, passes)
    apart: set[int] = set()  # requests whose runs chose another token before the pass now read

    def aligned(key: Key, head, shape: tuple[int, ...]):
        found = theirs.get(key)
        return found if found is not None and found.shape == shape else None

    for state in reference:
        key = passes.key(state)
        if state.request in apart:
            continue
        if state.kind == OpKind.CHOICE:
            if choices.get((state.request, state.round)) != to_host(state.values).tolist():
                apart.add(state.request)
            continue
        flip = route_flip(state, key, aligned, other)
        if flip is not None:
            return flip
    return None


def _routing(states: Iterable[OpState], passes: Passes) -> tuple[dict[Key, np.ndarray], dict]:
    """A run's top-k choices and the scores they read, keyed as a dump keys them, and its token per round."""
    arrays, choices, kept = {}, {}, route_hooks()
    for state in states:
        if state.kind == OpKind.CHOICE:
            choices[(state.request, state.round)] = to_host(state.values).tolist()
        elif (state.op.hook.module, state.op.hook.name) in kept:
            arrays[passes.key(state)] = np.asarray(to_host(state.values), dtype=np.float64)
    return arrays, choices
