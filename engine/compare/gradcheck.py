"""Finite-difference check of one attention head's gradient with respect to Q (003, A.11).

The loss is L = Σ G ⊙ Z with Z = softmax(mask(Q·Kᵀ/√dh))·V and a fixed seeded G,
so dL/dZ = G and the analytic dL/dQ follows the softmax backward rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine import ops
from engine.backend import namespace, to_host
from engine.hooks import Hook
from engine.scenario import Scenario
from engine.session import Session

STEP = 1e-6


@dataclass(frozen=True)
class GradCheck:
    analytic: np.ndarray
    numeric: np.ndarray

    @property
    def relative_error(self) -> float:
        scale = max(np.abs(self.analytic).max(), np.abs(self.numeric).max(), np.finfo(float).tiny)
        return float(np.abs(self.analytic - self.numeric).max() / scale)


def head_output(q: np.ndarray, k: np.ndarray, v: np.ndarray, visible: np.ndarray) -> np.ndarray:
    xp = namespace(q)
    return ops.softmax(xp, ops.attention_scores(xp, q, k, visible)) @ v


def analytic_grad_q(q, k, v, visible, upstream) -> np.ndarray:
    xp = namespace(q)
    pattern = ops.softmax(xp, ops.attention_scores(xp, q, k, visible))
    d_pattern = upstream @ v.T
    d_scores = pattern * (d_pattern - np.sum(d_pattern * pattern, axis=-1, keepdims=True))
    return d_scores @ k / math.sqrt(q.shape[-1])


def numeric_grad_q(q, k, v, visible, upstream, step: float = STEP) -> np.ndarray:
    grad = np.zeros_like(q)
    for index in np.ndindex(*q.shape):
        shifted = [q.copy(), q.copy()]
        shifted[0][index] += step
        shifted[1][index] -= step
        plus, minus = (np.sum(upstream * head_output(s, k, v, visible)) for s in shifted)
        grad[index] = (plus - minus) / (2 * step)
    return grad


def check_head(scenario: Scenario, *, request: int = 0, layer: int = 0, head: int = 0, seed: int = 0) -> GradCheck:
    """Take Q, K, V of one head from the prefill of `request` and compare the two gradients."""
    wanted = {Hook(layer, "attn", name).text for name in ("hook_attn_scores", "hook_z")}
    found = {}
    for state in Session(scenario).steps():
        if state.request == request and state.round == 0 and state.head == head and state.name in wanted:
            found[state.kind] = state
        if len(found) == 2:
            break
    if len(found) < 2:
        raise ValueError(f"no head {head} in layer {layer} of request {request}")
    q, k = (to_host(operand.values) for operand in found["scores"].inputs)
    v = to_host(found["mix"].inputs[1].values)
    visible = np.isfinite(to_host(found["scores"].values)) if scenario.model.causal else None
    upstream = np.random.default_rng(seed).normal(size=(q.shape[0], v.shape[1]))
    return GradCheck(analytic_grad_q(q, k, v, visible, upstream), numeric_grad_q(q, k, v, visible, upstream))
