"""What the TUI's lens and attention-at-a-glance panels read from the round the cursor is in.

Computed on demand (in a worker: the lens unembeds every residual stream), never per step.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from engine.analysis import Attribution, LensRow, Pass, attribution, logit_lens, passes
from engine.backend import to_host
from engine.model import Transformer
from engine.trace import OpState


def round_lens(model: Transformer, states: Iterable[OpState], k: int = 3) -> tuple[Pass, list[LensRow],
                                                                                   Attribution | None]:
    """The lens of the round `states` belong to, and the chosen token's attribution once it is chosen."""
    run = next(passes(states))
    chosen = ("sample.hook_choice", None) in run.values and not model.spec.post_norms
    return run, logit_lens(model, run, k), attribution(model, run) if chosen else None


def layer_patterns(states: Iterable[OpState], layer: int, chunk: int = 0) -> list[np.ndarray]:
    """Every head's attention pattern of `layer` in one chunk of the round, head 0 first."""
    name = f"blocks.{layer}.attn.hook_pattern"
    found = {s.head: to_host(s.values) for s in states if s.name == name and s.chunk == chunk}
    return [found[head] for head in sorted(found)]
