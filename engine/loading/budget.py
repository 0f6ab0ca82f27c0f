"""How much memory a model needs, and the budget it must fit (`--max-memory`).

Estimates count array bytes only (no Python overhead): the weights as the session holds
them, the KV cache of a request, and the largest single operator output a step records.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import replace

import numpy as np

from engine.causes import Cause, CausedError, cause
from engine.loading.document import Node
from engine.parameters import parameter_shapes
from engine.spec import ModelSpec

MAX_TENSORS = 100_000  # the largest released models have a few thousand
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


DEFAULT_BUDGET = physical_memory() // 2


def parse_size(text: str) -> int:
    """`8G`, `512M`, `1.5GiB`, `1000000` (bytes) -> bytes; K, M, G, T are powers of 1024. CausedError for a text that
    is none (size.syntax)."""
    match = SIZE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise CausedError("size.syntax", text=text)
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


def _sizes(spec: ModelSpec, vocab_size: int) -> tuple[list[int], list[tuple[list[int], int]]]:
    """Element counts of the tensors outside the blocks, and of each kind of block with how many layers are of
    it: a stack of alike blocks (the flags) is counted from one, so nothing here grows with the number of layers a
    file may claim; a mixed stack (`layers`, a list the file holds) from one block of each kind."""
    kinds = Counter(spec.layers) if spec.layers is not None else {None: spec.n_layers}
    rest, blocks = [], []
    for kind, count in kinds.items():
        shapes = parameter_shapes(replace(spec, n_layers=1, layers=None if kind is None else (kind,)), vocab_size)
        rest = [math.prod(shape) for name, shape in shapes.items() if not name.startswith("blocks.")]
        blocks.append(([math.prod(shape) for name, shape in shapes.items() if name.startswith("blocks.")], count))
    return rest, blocks


def weight_bytes(spec: ModelSpec, vocab_size: int, dtype: str = "float64") -> int:
    rest, blocks = _sizes(spec, vocab_size)
    return (sum(rest) + sum(sum(block) * count for block, count in blocks)) * _itemsize(dtype)


def resident_weight_bytes(spec: ModelSpec, vocab_size: int, dtype: str = "float64") -> int:
    """The weights a token's pass holds at once: all but the experts it does not use (a sparse layer reads top_k
    of its n_experts; the others are dequantized only when a token uses them, and dropped past the budget)."""
    moe = spec.moe
    if moe is None:
        return weight_bytes(spec, vocab_size, dtype)
    sparse = len(moe.layers) if moe.layers is not None else spec.n_layers
    expert = 3 * spec.d_model * moe.d_expert + (2 * moe.d_expert + spec.d_model if moe.bias else 0)
    return weight_bytes(spec, vocab_size, dtype) - sparse * (moe.n_experts - moe.top_k) * expert * _itemsize(dtype)


def tensor_count(spec: ModelSpec, vocab_size: int) -> int:
    rest, blocks = _sizes(spec, vocab_size)
    return len(rest) + sum(len(block) * count for block, count in blocks)


def too_many_tensors(spec: ModelSpec, vocab_size: int) -> Cause | None:
    """Why a model has too many weight tensors to hold (~1 KB of Python objects each), or None."""
    count = tensor_count(spec, vocab_size)
    if count <= MAX_TENSORS:
        return None
    return cause("budget.tensors", layers=spec.n_layers, count=count, limit=MAX_TENSORS)


def check_budget(node: Node, spec: ModelSpec, vocab_size: int, dtype: str, budget: int) -> None:
    """Refuse, at the `model:` section, a model whose weights alone exceed the budget."""
    if too_many_tensors(spec, vocab_size):
        raise node.get("layers").error(too_many_tensors(spec, vocab_size))
    need = weight_bytes(spec, vocab_size, dtype)
    if need > budget:
        raise node.error(cause("budget.scenario", need=format_size(need), dtype=dtype, budget=format_size(budget),
                               suggest=math.ceil(need * 1.5 / UNITS["G"])))
