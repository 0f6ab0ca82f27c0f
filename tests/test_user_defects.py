"""The defects a new user found (issue 27, "Defects found by a new user"), tested headlessly against the
engine, the Debugger and the CLI; what only the views do is in test_tui_defects.py."""

from __future__ import annotations

import numpy as np

from engine.compare.diff import diff_batch, first_divergence
from engine.parameters import parameter_shapes
from engine.scenario import Scenario
from engine.spec import DecodeRule, ModelSpec, NormSpec, Request, Vocab


def loud_residual_batch() -> Scenario:
    """Two prompts of a random Llama-like model whose residual stream holds values near 3e4, as SmolLM2's does:
    a rounding step there is 7.3e-12, so a batch's other summation order moves it past an absolute 1e-12."""
    model = ModelSpec(d_model=128, n_layers=4, n_heads=2, d_head=64, d_ff=512, norm=NormSpec(kind="rmsnorm"),
                      final_norm=True, ffn="gated_silu", positions="rope")
    vocab = Vocab(tuple(f"t{i}" for i in range(50)))
    rng = np.random.default_rng(0)
    weights = {name: rng.normal(0, 1 / np.sqrt(shape[0]), shape)
               for name, shape in parameter_shapes(model, len(vocab)).items()}
    weights["embed"] = weights["embed"] * 3e4
    requests = tuple(Request(tuple(int(t) for t in rng.integers(0, 50, n)), 2) for n in (9, 3))
    return Scenario("loud.yaml", "loud", vocab, model, weights, requests, DecodeRule(max_new_tokens=2))


def test_a_batch_meets_each_request_alone_within_a_tolerance_that_follows_magnitude_and_depth():
    """Defect 3: every token identical, yet an absolute 1e-12 called round-off at 3e4 a divergence."""
    diffs = diff_batch(loud_residual_batch())
    moved = [d for d in diffs if d.max_abs > 1e-12]
    assert moved  # the batch does move numbers by more than an absolute 1e-12 ...
    assert first_divergence(diffs) is None  # ... each within its rounding steps
    assert all(1e-12 < d.tolerance < 1e-8 for d in moved)  # rounding steps of values up to ~1e5, not a blanket
    choices = [d for d in diffs if d.name == "sample.hook_choice"]
    assert choices and all(d.tolerance == 1e-12 for d in choices)  # token ids must be equal
