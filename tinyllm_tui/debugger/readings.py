"""What the TUI's lens and attention-at-a-glance panels read from the round the cursor is in.

Computed on demand (in a worker: the lens unembeds every residual stream), never per step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from engine.analysis import AnalysisError, Attribution, LensRow, Pass, attribution, logit_lens, passes
from engine.backend import to_host
from engine.model import Transformer
from engine.trace import OpState
from tinyllm_tui.debugger.results import Reason, Refused


def round_lens(model: Transformer, states: Iterable[OpState], k: int = 3
               ) -> tuple[Pass, list[LensRow], Attribution | None] | Refused:
    """The lens of the round `states` belong to, and the chosen token's attribution once it is chosen;
    refused, with the reason `run --lens` gives, for a model without one (an encoder, a post-norm model)."""
    run = next(passes(states))
    chosen = ("sample.hook_choice", None) in run.values and not model.spec.post_norms
    try:
        return run, logit_lens(model, run, k), attribution(model, run) if chosen else None
    except AnalysisError as error:
        return Refused(Reason.NO_LENS, (str(error),))


def layer_patterns(states: Iterable[OpState], layer: int, chunk: int = 0) -> list[np.ndarray]:
    """Every head's attention pattern of `layer` in one chunk of the round, head 0 first."""
    name = f"blocks.{layer}.attn.hook_pattern"
    found = {s.head: to_host(s.values) for s in states if s.name == name and s.chunk == chunk}
    return [found[head] for head in sorted(found)]



def choice_before_after(states: Iterable[OpState], previous) -> tuple[tuple[int, float], tuple[int, float]] | None:
    """The round's choice and its probability before the last change and now (`previous`: the History of the
    run before it); None before the round has chosen, or without an earlier run."""
    by_step = {s.step: s for s in states}
    steps = [next((step for step, s in by_step.items() if s.name == name), None)
             for name in ("sample.hook_probs", "sample.hook_choice")]
    if previous is None or None in steps:
        return None
    before, after = _choice(previous.state_at, *steps), _choice(by_step.get, *steps)
    return None if before is None or after is None else (before, after)


def _choice(at: Callable[[int], OpState | None], probs_step: int, choice_step: int) -> tuple[int, float] | None:
    probs, choice = at(probs_step), at(choice_step)
    if probs is None or choice is None or choice.name != "sample.hook_choice":
        return None  # the earlier run had other operators there
    token = int(to_host(choice.values)[0, 0])
    return token, float(to_host(probs.values)[0, token])
