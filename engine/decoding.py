"""The decode rule: from the last position's logits to one chosen token.

Filtering (forbidden tokens, temperature, top-k, top-p) runs in the session's
namespace; the draw itself happens on the host with a seeded NumPy Generator so
that every backend picks the same token.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import ops
from engine.arrays import to_host
from engine.hooks import Hook, HookRegistry, HookSite
from engine.operators import Operand, OpStream, op
from engine.spec import DecodeRule, Rule
from engine.trace import OpKind

Array = Any
FILTERED, PROBS, CHOICE = (Hook(None, "sample", name) for name in ("hook_filtered", "hook_probs", "hook_choice"))
HOOKS = HookRegistry(HookSite(hook) for hook in (FILTERED, PROBS, CHOICE))  # what choosing a token yields


def choose(xp, logits, rule: DecodeRule, rng: np.random.Generator) -> OpStream:
    """Yield the filter, probability and choice operators; return the chosen token id."""
    last = Operand(f"{logits.name}[last]", logits.values[-1:, :], rows="last", cols="vocab")
    filtered = op(FILTERED, _filter(xp, last.values, rule), OpKind.FILTER, inputs=(last,), rows="last", cols="vocab")
    yield filtered
    probs = op(PROBS, ops.softmax(xp, filtered.values), OpKind.PROBS, inputs=(filtered,), rows="last", cols="vocab")
    yield probs
    host = to_host(probs.values)[0]
    if rule.rule == Rule.GREEDY:
        token = int(np.argmax(host))
    else:
        token = int(rng.choice(host.shape[0], p=host / host.sum()))
    yield op(CHOICE, xp.asarray([[float(token)]], dtype=probs.values.dtype), OpKind.CHOICE, inputs=(probs,),
             rows="last", cols="choice")
    return token


def _filter(xp, logits: Array, rule: DecodeRule) -> Array:
    """Forbidden tokens become −∞; sampling also applies temperature, top-k and top-p."""
    minus_inf = xp.asarray(-xp.inf, dtype=logits.dtype)
    vocab = xp.arange(logits.shape[-1])
    allowed = xp.ones(logits.shape, dtype=xp.bool)
    for token in rule.forbid:
        allowed = allowed & (vocab != token)[None, :]
    logits = xp.where(allowed, logits, minus_inf)
    if rule.rule == Rule.GREEDY:
        return logits
    logits = logits / rule.temperature
    if rule.top_k is not None and rule.top_k < logits.shape[-1]:
        kth = xp.sort(logits, axis=-1, descending=True)[:, rule.top_k - 1 : rule.top_k]
        logits = xp.where(logits >= kth, logits, minus_inf)
    if rule.top_p is not None:
        probs = ops.softmax(xp, logits)
        ranked = xp.sort(probs, axis=-1, descending=True)
        before = xp.cumulative_sum(ranked, axis=-1) - ranked  # mass of strictly more likely tokens
        kept = xp.where(before < rule.top_p, ranked, xp.ones_like(ranked))
        logits = xp.where(probs >= xp.min(kept, axis=-1, keepdims=True), logits, minus_inf)
    return logits
