"""How much memory a model needs, and the budget it must fit (`--max-memory`).

Estimates count array bytes only (no Python overhead): the weights as the session holds
them, the KV cache of a request, and the largest single operator output a step records.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np

from .document import Node
from .parameters import parameter_shapes
from .spec import ModelSpec

UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


DEFAULT_BUDGET = physical_memory() // 2


def parse_size(text: str) -> int:
    """`8G`, `512M`, `1.5GiB`, `1000000` (bytes) -> bytes; K, M, G, T are powers of 1024."""
    match = SIZE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"expected a size such as 8G, 512M or 1.5G, got {text!r}")
    return int(float(match.group(1)) * UNITS[match.group(2).upper()])


def format_size(size: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if size >= UNITS[unit]:
            return f"{size / UNITS[unit]:.1f} {unit}iB"
    return f"{size} B"


def _itemsize(dtype: str) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # an unknown dtype is the backend's to refuse; estimate as float64
        return 8


def weight_bytes(spec: ModelSpec, vocab_size: int, dtype: str = "float64") -> int:
    return sum(math.prod(shape) for shape in parameter_shapes(spec, vocab_size).values()) * _itemsize(dtype)


def cache_bytes(spec: ModelSpec, dtype: str, n_tokens: int) -> int:
    """K and V of every layer for `n_tokens` positions."""
    return 2 * spec.n_layers * n_tokens * spec.d_attn * _itemsize(dtype)


def step_bytes(spec: ModelSpec, vocab_size: int, dtype: str, n_tokens: int) -> int:
    """The largest operator output a step records: logits, FFN activations or attention scores."""
    widths = (vocab_size if spec.lm_head else 0, spec.d_ff, spec.d_model, spec.d_attn, n_tokens)
    return n_tokens * max(widths) * _itemsize(dtype)


def estimate(spec: ModelSpec, vocab_size: int, dtype: str, n_tokens: int) -> int:
    """Bytes for the weights, one request's KV cache and the largest step's output."""
    return (weight_bytes(spec, vocab_size, dtype) + cache_bytes(spec, dtype, n_tokens)
            + step_bytes(spec, vocab_size, dtype, n_tokens))


def check_budget(node: Node, spec: ModelSpec, vocab_size: int, dtype: str, budget: int) -> None:
    """Refuse, at the `model:` section, a model whose weights alone exceed the budget."""
    need = weight_bytes(spec, vocab_size, dtype)
    if need > budget:
        raise node.error(f"the weights alone need about {format_size(need)} as {dtype}, over the memory budget "
                         f"of {format_size(budget)}; raise it with --max-memory (e.g. --max-memory "
                         f"{math.ceil(need * 1.5 / UNITS['G'])}G)")
