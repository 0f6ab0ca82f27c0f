"""Finite-difference check of one attention head's gradient with respect to Q (003, A.11).

The loss is L = Σ G ⊙ Z with Z = softmax(mask(Q·Kᵀ/√dh))·V and a fixed seeded G,
so dL/dZ = G and the analytic dL/dQ follows the softmax backward rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine import ops
from engine.arrays import namespace, to_host
from engine.causes import CausedError
from engine.hooks import Hook
from engine.scenario import Scenario
from engine.session import Session
from engine.trace import OpKind

STEP = 1e-6


@dataclass(frozen=True)
class GradCheck:
    analytic: np.ndarray
    numeric: np.ndarray

    @property
    def relative_error(self) -> float:
        scale = max(np.abs(self.analytic).max(), np.abs(self.numeric).max(), np.finfo(float).tiny)
        return float(np.abs(self.analytic - self.numeric).max() / scale)


class NotSoftmaxHead(CausedError):
    """The layer's heads are not softmax(Q·Kᵀ·scale)·V of its scores operator's two inputs (latent attention, a
    soft cap, attention sinks): the check has no backward rule for them (gradcheck.not_softmax)."""


def head_output(q: np.ndarray, k: np.ndarray, v: np.ndarray, visible: np.ndarray,
                scale: float | None = None) -> np.ndarray:
    xp = namespace(q)
    return ops.softmax(xp, ops.attention_scores(xp, q, k, visible, scale)) @ v


def analytic_grad_q(q, k, v, visible, upstream, scale: float | None = None) -> np.ndarray:
    """dL/dQ for L = Σ upstream ⊙ head_output (scale: the scores' factor, None for 1/√d_head)."""
    xp = namespace(q)
    pattern = ops.softmax(xp, ops.attention_scores(xp, q, k, visible, scale))
    d_pattern = upstream @ v.T
    d_scores = pattern * (d_pattern - np.sum(d_pattern * pattern, axis=-1, keepdims=True))
    return d_scores @ k / math.sqrt(q.shape[-1]) if scale is None else d_scores @ k * scale


def numeric_grad_q(q, k, v, visible, upstream, step: float = STEP, scale: float | None = None) -> np.ndarray:
    grad = np.zeros_like(q)
    for index in np.ndindex(*q.shape):
        shifted = [q.copy(), q.copy()]
        shifted[0][index] += step
        shifted[1][index] -= step
        plus, minus = (np.sum(upstream * head_output(s, k, v, visible, scale)) for s in shifted)
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
        raise CausedError("gradcheck.no_head", head=head, layer=layer, request=request)
    q, k, v, visible = _softmax_head(scenario, layer, found)
    scale = scenario.model.attn_scale
    upstream = np.random.default_rng(seed).normal(size=(q.shape[0], v.shape[1]))
    return GradCheck(analytic_grad_q(q, k, v, visible, upstream, scale),
                     numeric_grad_q(q, k, v, visible, upstream, scale=scale))


def _softmax_head(scenario: Scenario, layer: int, found: dict) -> tuple:
    """Q, K, V and the visible keys of the head whose scores and mix operators `found` holds, by kind; raises
    NotSoftmaxHead unless its recorded scores are Q·Kᵀ·scale of the scores operator's two inputs."""
    scores, mix = found.get(OpKind.SCORES), found.get(OpKind.MIX)
    operands = () if scores is None else scores.inputs
    if mix is None or len(operands) != 2 or operands[0].values.shape[-1] != operands[1].values.shape[-1]:
        raise NotSoftmaxHead("gradcheck.not_softmax", layer=layer, mixer=scenario.model.blocks[layer].mixer)
    q, k = (np.asarray(to_host(operand.values), dtype=np.float64) for operand in operands)
    recorded = to_host(scores.values)
    visible = np.isfinite(recorded) if scenario.model.causal else None
    if not np.allclose(ops.attention_scores(np, q, k, visible, scenario.model.attn_scale), recorded,
                       rtol=1e-9, atol=0.0):
        raise NotSoftmaxHead("gradcheck.not_softmax", layer=layer, mixer=scenario.model.blocks[layer].mixer)
    return q, k, np.asarray(to_host(mix.inputs[1].values), dtype=np.float64), visible

