"""Operators as small pure functions over an Array API namespace `xp`.

Shapes: T = new tokens in this chunk, S = all visible key positions (past + new),
D = d_model, dh = head width, V = vocabulary size.
"""

from __future__ import annotations

import math
from typing import Any

Array = Any


def norm_scale(xp, x: Array, eps: float, *, centred: bool) -> tuple[Array, Array]:
    """(…, D) -> the rows to divide, (…, D), and their divisor, (…, 1): TransformerLens's `hook_scale`.

    centred (LayerNorm): each row minus its mean over its (biased) standard deviation;
    otherwise (RMSNorm): each row over its root mean square."""
    if centred:
        x = x - xp.mean(x, axis=-1, keepdims=True)
    return x, xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + eps)


def causal_mask(xp, queries: Array, keys: Array, window: int | None = None, sinks: int = 0) -> Array:
    """(T, S) booleans from the queries' and the keys' sequence positions: query i may read key j iff
    j ≤ i, and with a sliding window only if j > i − window (or j is one of the first `sinks`)."""
    keys, queries = keys[None, :], queries[:, None]
    visible = keys <= queries
    return visible if window is None else visible & ((keys > queries - window) | (keys < sinks))


def attention_scores(xp, q: Array, k: Array, visible: Array | None, scale: float | None = None) -> Array:
    """(…, T, dh) · (…, S, dh) -> (…, T, S): scores over √dh (or times `scale`), −∞ where a key is hidden."""
    scores = q @ xp.matrix_transpose(k)
    scores = scores / math.sqrt(q.shape[-1]) if scale is None else scores * scale
    return masked(xp, scores, visible)


def masked(xp, scores: Array, visible: Array | None) -> Array:
    """−∞ where a key is not visible (None: every key is)."""
    if visible is None:
        return scores
    return xp.where(visible, scores, xp.asarray(-xp.inf, dtype=scores.dtype))


def softcap(xp, x: Array, cap: float) -> Array:
    """Gemma 2's soft cap: cap·tanh(x / cap), smooth and within (−cap, cap)."""
    return xp.tanh(x / cap) * cap


def softmax(xp, x: Array) -> Array:
    """Row-wise softmax; −∞ entries get probability exactly 0.

    A row with every entry −∞ (a query that may read only PAD keys) gets all zeros
    rather than NaN, as fused attention kernels do.
    """
    top = xp.max(x, axis=-1, keepdims=True)
    e = xp.exp(x - xp.where(xp.isfinite(top), top, xp.zeros_like(top)))
    total = xp.sum(e, axis=-1, keepdims=True)
    return e / xp.where(total > 0, total, xp.ones_like(total))


def rope(xp, x: Array, positions: Array, d_head: int, theta: float,
         divisors: tuple[float, ...] | None = None, dims: int | None = None, scale: float = 1.0) -> Array:
    """(T, H·dh) -> (T, H·dh): every head rotated by position·θ^(−2i/dh) (over divisors[i], a scaled RoPE)
    in the half-split layout of Llama's rotate_half (feature i pairs with feature i + dh/2).

    dims < dh (partial rotary, as GPT-NeoX and Phi): only each head's first `dims` features turn, with
    θ^(−2i/dims); the others pass unchanged. `scale` multiplies cos and sin (YaRN's attention factor)."""
    if dims is not None and dims < d_head:
        t = x.shape[0]
        heads = xp.reshape(x, (t, -1, d_head))
        turned = rope(xp, xp.reshape(heads[..., :dims], (t, -1)), positions, dims, theta, divisors, scale=scale)
        return xp.reshape(xp.concat([xp.reshape(turned, (t, -1, dims)), heads[..., dims:]], axis=-1), (t, -1))
    half, t = d_head // 2, x.shape[0]
    heads = xp.reshape(x, (t, -1, d_head))
    inv_freq = 1.0 / theta ** (xp.astype(xp.arange(0, d_head, 2), x.dtype) / d_head)
    if divisors is not None:
        inv_freq = inv_freq / xp.asarray(divisors, dtype=x.dtype)
    angle = xp.astype(positions, x.dtype)[:, None] * inv_freq[None, :]
    angle = xp.concat([angle, angle], axis=1)[:, None, :]
    rotated = xp.concat([-heads[..., half:], heads[..., :half]], axis=-1)
    cos, sin = xp.cos(angle), xp.sin(angle)
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return xp.reshape(heads * cos + rotated * sin, (t, -1))


def silu(xp, x: Array) -> Array:
    return x / (1.0 + xp.exp(-x))


def sigmoid(xp, x: Array) -> Array:
    return 1.0 / (1.0 + xp.exp(-x))


def relu(xp, x: Array) -> Array:
    return xp.where(x > 0, x, xp.zeros_like(x))


def gelu_tanh(xp, x: Array) -> Array:
    """GPT-2's `gelu_new`: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).

    x·x·x rather than x**3: NumPy's float32 power is a scalar loop, 140× slower at d_ff 3072."""
    return 0.5 * x * (1.0 + xp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))


def gelu_from_erf(x: Array, erf_x_over_sqrt2: Array) -> Array:
    """Exact GELU 0.5·x·(1 + erf(x/√2)); erf comes from the backend."""
    return 0.5 * x * (1.0 + erf_x_over_sqrt2)


def seed_sin_positions(xp, positions: Array, d_model: int, dtype) -> Array:
    """The 003 walkthrough's position term: 0.1·sin((p+1)/(j+1))."""
    p = xp.astype(positions, dtype)[:, None] + 1.0
    j = xp.astype(xp.arange(d_model), dtype)[None, :] + 1.0
    return 0.1 * xp.sin(p / j)


def sinusoidal_positions(xp, positions: Array, d_model: int, dtype) -> Array:
    """The original Transformer encoding: sin on even features, cos on odd, base 10000."""
    p = xp.astype(positions, dtype)[:, None]
    j = xp.arange(d_model)
    even = xp.astype(j - j % 2, dtype)[None, :]
    angle = p / (10000.0 ** (even / d_model))
    return xp.where((j % 2 == 0)[None, :], xp.sin(angle), xp.cos(angle))
