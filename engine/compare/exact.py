"""A lossy cache against the exact one: the error a quantized KV cache introduces, round by round.

Both sessions run cached; a round is compared only while both have fed the same tokens (after a
different choice the two runs no longer compute the same thing, and the report stops there).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from engine.backend import Backend
from engine.arrays import to_host
from engine.caches import CacheSpec
from engine.decoding import CHOICE
from engine.model import LOGITS
from engine.scenario import Scenario
from engine.session import Session
from engine.trace import OpKind, OpState


@dataclass(frozen=True)
class RoundError:
    request: int
    round: int
    logits_error: float  # max |Δ| of the round's logits
    pattern_error: tuple[float | None, ...]  # max |Δ| of the attention pattern, per layer (every head; None: a
    # layer without one, a short conv's)
    kv_error: tuple[float | None, ...]  # max |Δ| of the rows each layer's state holds after the round (K and V; a
    # conv window's; None: a layer that keeps none of its own, reading another layer's K/V)
    kv_scale: tuple[float | None, ...]  # the largest |value| of each layer's exact rows (the errors' yardstick)
    same_choice: bool  # both runs chose the same token (else the report of this request ends here)


def against_exact(scenario: Scenario, backend: Backend | None = None) -> list[RoundError]:
    """The scenario's cache (quantized) beside the same scenario with an exact contiguous cache."""
    exact = _rounds(Session(dataclasses.replace(scenario, cache=CacheSpec()), backend).steps())
    lossy = _rounds(Session(scenario, backend).steps())
    report, ended = [], set()
    for lossy_round, exact_round in zip(lossy, exact):
        request = lossy_round[0].request
        if request not in ended:
            report.append(_round_error(_paired(lossy_round, exact_round), scenario.model.n_layers))
            if not report[-1].same_choice:
                ended.add(request)
    return report


def _rounds(states) -> Iterator[list[OpState]]:
    """A run's states round by round."""
    for _, round_ in itertools.groupby(states, key=lambda s: (s.request, s.round)):
        yield list(round_)


def _paired(lossy: list[OpState], exact: list[OpState]) -> list[tuple[OpState, OpState]]:
    """One round's operators of both runs, met by name, head and chunk: where a mixture of experts routes a token
    otherwise, each run has experts the other did not run (those are left out)."""
    by_key = {(s.name, s.head, s.chunk): s for s in exact}
    return [(s, by_key[(s.name, s.head, s.chunk)]) for s in lossy if (s.name, s.head, s.chunk) in by_key]


def _gap(a, b) -> float:
    """max |a − b| of two arrays over b's finite cells."""
    a, b = to_host(a), to_host(b)
    return float(np.max(np.abs(a - b), initial=0.0, where=np.isfinite(b)))


def _largest(gaps) -> float | None:
    """The largest of some gaps; None when there are none."""
    return max(gaps, default=None)


def _round_error(states: list[tuple[OpState, OpState]], layers: int) -> RoundError:
    logits = _largest(_gap(a.values, b.values) for a, b in states if a.op.hook == LOGITS)
    patterns = tuple(_largest(_gap(a.values, b.values) for a, b in states  # a head's softmax: its pattern
                              if a.layer == layer and a.kind is OpKind.SOFTMAX and a.head is not None)
                     for layer in range(layers))
    last_lossy, last_exact = states[-1]
    views = [tuple(zip(lossy.views(), exact.views())) for lossy, exact in zip(last_lossy.caches, last_exact.caches)]
    kv = tuple(_largest(_gap(q.values, e.values) for q, e in pairs) for pairs in views)
    scale = tuple(_largest(float(np.max(np.abs(to_host(e.values)), initial=0.0)) for _, e in pairs) for pairs in views)
    choices = [(a, b) for a, b in states if a.op.hook == CHOICE]
    same = all(np.array_equal(to_host(a.values), to_host(b.values)) for a, b in choices)
    return RoundError(last_lossy.request, last_lossy.round, logits, patterns, kv, scale, same)
