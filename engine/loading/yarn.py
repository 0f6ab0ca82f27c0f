"""YaRN, the RoPE scaling of gpt-oss and DeepSeek-V3: which frequencies are interpolated, and the attention factor.

Written once for both loaders: a Hugging Face config (transformers' _compute_yarn_parameters) and a GGUF file (as
llama.cpp runs it: ggml_rope_yarn_corr_dims always floors and ceils the ramp's ends, transformers only with
`truncate`, which gpt-oss's config turns off). In float64.
"""

from __future__ import annotations

import math

import numpy as np


def yarn_divisors(theta: float, d_head: int, factor: float, original: float, beta_fast: float, beta_slow: float,
                  truncate: bool) -> tuple[float, ...]:
    """What each of the d_head/2 frequencies is divided by: those turning fewer than beta_slow times over the
    `original` context are interpolated (divided by `factor`), those turning more than beta_fast times are kept, and
    a linear ramp over the dimensions between blends the two."""
    def dim(rotations: float) -> float:
        return d_head * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim(beta_fast), dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d_head - 1)
    span = (high + 0.001 if low == high else high) - low
    ramp = np.clip((np.arange(d_head // 2, dtype=np.float64) - low) / span, 0, 1)  # 1: interpolated
    extrapolation = 1.0 / theta ** (np.arange(0, d_head, 2, dtype=np.float64) / d_head)
    inv_freq = extrapolation / factor * ramp + extrapolation * (1 - ramp)
    return tuple(float(d) for d in extrapolation / inv_freq)


def attention_factor(factor: float, mscale: float = 1.0, mscale_all_dim: float | None = None) -> float:
    """What cos and sin are multiplied by: 0.1·mscale·ln(factor) + 1 (DeepSeek: over the same with mscale_all_dim)."""
    def scaled(m: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    return scaled(mscale) / (1.0 if mscale_all_dim is None else scaled(mscale_all_dim))
