"""The attention gradient check (003, A.11) and proof that it can fail."""

from __future__ import annotations

import numpy as np
from conftest import SCENARIOS

from engine import load_scenario, ops
from engine.compare.gradcheck import GradCheck, analytic_grad_q, check_head, numeric_grad_q


def test_analytic_gradient_matches_finite_differences_on_every_scenario():
    for name in ("x01", "decoder2", "eos7"):
        assert check_head(load_scenario(SCENARIOS / f"{name}.yaml")).relative_error < 1e-7, name


def test_a_wrong_backward_rule_is_caught():
    """Dropping the softmax Jacobian's row-sum term must show as a large relative error."""
    rng = np.random.default_rng(1)
    q, k, v, g = rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    visible = np.tril(np.ones((3, 3), dtype=bool))
    pattern = ops.softmax(np, np.where(visible, q @ k.T / np.sqrt(2), -np.inf))
    wrong = (pattern * (g @ v.T)) @ k / np.sqrt(2)
    numeric = numeric_grad_q(q, k, v, visible, g)
    assert GradCheck(analytic_grad_q(q, k, v, visible, g), numeric).relative_error < 1e-7
    assert GradCheck(wrong, numeric).relative_error > 1e-2
