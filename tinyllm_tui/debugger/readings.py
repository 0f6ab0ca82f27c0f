"""What the TUI's lens, attention-at-a-glance and routing panels read from the round the cursor is in.

Computed on demand (in a worker: the lens unembeds every residual stream), never per step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from engine.analysis import AnalysisError, Attribution, LensRow, Pass, attribution, logit_lens, passes
from engine.arrays import to_host
from engine.decoding import CHOICE, PROBS
from engine.layers import pattern_hooks, route
from engine.model import Transformer
from engine.scenario import Vocab
from engine.trace import OpState
from tinyllm_tui.debugger.results import Reason, Refused


class LensReading(NamedTuple):
    """One round's logit lens, its choice's attribution (None before the choice), and the vocabulary to word
    their tokens with."""

    run: Pass
    rows: list[LensRow]
    attribution: Attribution | None
    vocab: Vocab


def round_lens(model: Transformer, states: Iterable[OpState], vocab: Vocab, k: int = 3) -> LensReading | Refused:
    """The lens of the round `states` belong to, and the chosen token's attribution once it is chosen;
    refused, with the reason `run --lens` gives, for a model without one (an encoder, a post-norm model)."""
    run = next(passes(states))
    try:
        return LensReading(run, *pass_lens(model, run, k), vocab)
    except AnalysisError as error:
        return Refused(Reason.NO_LENS, (error.cause,))


def pass_lens(model: Transformer, run: Pass, k: int) -> tuple[list[LensRow], Attribution | None]:
    """One pass's logit lens, and its chosen token's direct logit attribution (None before the pass has chosen,
    or where the model normalizes each block's output: heads do not add to the residual there)."""
    chosen = (CHOICE.text, None) in run.values and not model.spec.post_norms
    return logit_lens(model, run, k), attribution(model, run) if chosen else None


def parameter_readers(states: Iterable[OpState], name: str) -> list[str]:
    """The operators among `states` that read parameter `name` (a transposed one too), in order, once each."""
    return list(dict.fromkeys(s.name for s in states if any(o.name.removesuffix(".T") == name for o in s.inputs)))


def pattern_sites(states: Iterable[OpState], chunk: int) -> dict[int, dict[int, tuple[int, object]]]:
    """Layer -> head -> (its pattern's step, its pattern as the backend holds it), heads in order, for one chunk."""
    sites: dict[int, dict[int, tuple[int, object]]] = {}
    patterns = pattern_hooks()  # where a layer's attention patterns are: its kinds' PATTERN_HOOKS
    for s in states:
        if s.chunk == chunk and s.layer is not None and (s.op.hook.module, s.op.hook.name) in patterns:
            sites.setdefault(s.layer, {})[s.head] = (s.step, s.values)
    return {layer: dict(sorted(heads.items())) for layer, heads in sites.items()}


@dataclass(frozen=True)
class Glance:
    """Every head's attention pattern, layer by layer, in one chunk of the round the cursor is in (heads at a
    glance): each layer's copied to the host as the window moves to it."""

    layer: int  # the cursor's layer (0 outside one): shown first
    layers: int
    keys: tuple[str, ...]  # the text of each key position's token
    sites: Mapping[int, Mapping[int, tuple[int, object]]] = field(repr=False)  # pattern_sites of the round

    def patterns(self, layer: int) -> list[np.ndarray]:
        return [to_host(values) for _, values in self.sites.get(layer, {}).values()]

    def step(self, layer: int, head: int) -> int | None:
        """Where `head`'s pattern of `layer` is (None: not in this chunk of the round)."""
        site = self.sites.get(layer, {}).get(head)
        return None if site is None else site[0]


def round_glance(states: Sequence[OpState], state: OpState, layers: int, tokens: Sequence[str]) -> Glance:
    """Heads at a glance of the chunk `state` is in, starting at its layer; `tokens`: the vocabulary's texts."""
    return Glance(state.layer or 0, layers, tuple(tokens[token] for token in state.context),
                  pattern_sites(states, state.chunk))


@dataclass(frozen=True)
class Routing:
    """One pass's routing at one layer (host arrays)."""

    layer: int
    positions: tuple[int, ...]  # each token row's position
    labels: tuple[str, ...]  # each token row's label ("3 · sat")
    chosen: np.ndarray  # (T, k) experts, best first
    weights: np.ndarray  # (T, k) what each chosen expert's output is multiplied by
    margins: np.ndarray  # (T,)
    n_experts: int

    @property
    def counts(self) -> np.ndarray:
        """How many of the pass's tokens each expert got."""
        return np.bincount(self.chosen.ravel(), minlength=self.n_experts)


def round_routing(states: Iterable[OpState], chunk: int = 0) -> list[Routing]:
    """Each mixture-of-experts layer's routing in one chunk of the round, in layer order: what each token chose,
    with the weights of its chosen experts and its margin."""
    found, weights = [], {}
    for state in states:
        if state.chunk != chunk:
            continue
        if (chosen := route(state.op)) is not None:
            found.append((state, chosen))
        elif found and state.op.hook.name == found[-1][1].WEIGHTS:  # the chosen experts' weights, after top-k
            weights[state.layer] = to_host(state.values)
    return [Routing(state.layer, state.positions, state.output.rows, chosen.chosen, weights[state.layer],
                    chosen.margins, chosen.scores.shape[1]) for state, chosen in found if state.layer in weights]


def routing_at(states: Iterable[OpState], state: OpState) -> tuple[list[Routing], int]:
    """The routing of the chunk `state` is in, and which of it to show first: `state`'s layer, or the next sparse
    layer after it (the last where none follows); no routing: an empty list."""
    routings = round_routing(states, state.chunk)
    layer = state.layer or 0
    return routings, next((i for i, routing in enumerate(routings) if routing.layer >= layer),
                          max(len(routings) - 1, 0))


def choice_before_after(states: Iterable[OpState], previous) -> tuple[tuple[int, float], tuple[int, float]] | None:
    """The round's choice and its probability before the last change and now (`previous`: the History of the
    run before it); None before the round has chosen, or without an earlier run."""
    by_step = {s.step: s for s in states}
    steps = [next((step for step, s in by_step.items() if s.op.hook == hook), None) for hook in (PROBS, CHOICE)]
    if previous is None or None in steps:
        return None
    before, after = _choice(previous.state_at, *steps), _choice(by_step.get, *steps)
    return None if before is None or after is None else (before, after)


def _choice(at: Callable[[int], OpState | None], probs_step: int, choice_step: int) -> tuple[int, float] | None:
    probs, choice = at(probs_step), at(choice_step)
    if probs is None or choice is None or choice.op.hook != CHOICE:
        return None  # the earlier run had other operators there
    token = int(to_host(choice.values)[0, 0])
    return token, float(to_host(probs.values)[0, token])
