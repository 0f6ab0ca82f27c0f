"""The dump layout of a whole generation: which pass a key belongs to, and each array's shape.

A key is a TransformerLens hook name prefixed by the pass that computed it:

    prefill.blocks.0.attn.hook_q          the prompt's pass
    prefill.chunk.1.blocks.0.attn.hook_q  the second chunk of a chunked prefill
    decode.3.unembed.hook_out             decode round 3 (rounds count from 1)
    request.1.decode.2.hook_embed         request 1's round 2, when a scenario has several requests
    decode.2.blocks.0.attn.cache_k        layer 0's KV cache after that pass

A key without a pass (TransformerLens's own `run_with_cache` names) is the first request's prefill.
Arrays may carry a leading batch axis of 1. Their layouts are TransformerLens's: residual-like
hooks [pos, d]; hook_q/k/v/z and hook_rot_q/k [pos, head, d_head] (or stacked [pos, head·d_head]);
hook_attn_scores and hook_pattern [head, query, key]; a layer's state items as its kind's DUMP_LAYOUTS lay
them out (attention's cache_k/cache_v [kv_head, position, d_head], a causal conv's conv_state, a Gated
DeltaNet's recurrent_state). The engine's own layout is one 2-D matrix per operator (and per head for scores, pattern and z);
`align` turns a dump's array into it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from engine import layers
from engine.hooks import Hook

DECODE_RULE = ("filter", "probs", "choice")  # engine.trace.OpKind values of the sample.* operators
_KEY = re.compile(r"(?:request\.(\d+)\.)?(prefill\.chunk\.\d+|prefill|decode\.\d+)\.(.+)")


class Key(NamedTuple):
    """Where a dumped array belongs: request, pass ("prefill", "prefill.chunk.1", "decode.3"), hook name."""

    request: int
    pass_: str
    name: str

    @property
    def round(self) -> int:
        """The round a pass belongs to: 0 for the prefill (every chunk of it), N for decode.N."""
        return int(self.pass_.split(".")[1]) if self.pass_.startswith("decode.") else 0

    @property
    def hook(self) -> Hook:
        """The hook its name names (engine.hooks.HookError: a dump's key that names none)."""
        return Hook.parse(self.name)

    def label(self, requests: int = 1) -> str:
        """The pass as a key prefix shows it (the request only when there are several)."""
        return (f"request.{self.request}." if requests > 1 else "") + self.pass_

    def text(self, requests: int = 1) -> str:
        return f"{self.label(requests)}.{self.name}"


def parse_key(key: str) -> Key:
    match = _KEY.fullmatch(key)
    if match is None:
        return Key(0, "prefill", key)
    request, pass_, name = match.groups()
    return Key(int(request or 0), pass_, name)


def pass_of(round_: int, chunk: int, chunked: bool) -> str:
    if round_:
        return f"decode.{round_}"
    return f"prefill.chunk.{chunk}" if chunked else "prefill"


class Passes:
    """Names the pass of each operator state of a scenario's run (a prefill is chunked only when
    the decode rule's chunk size splits the prompt)."""

    def __init__(self, scenario):
        # a kind whose q, k, v and z have heads of different widths (STACKED_HEADS: latent attention's rope parts)
        # dumps them stacked (d_head 0)
        self.requests = len(scenario.requests)
        stacked = any(getattr(kind, "STACKED_HEADS", False) for block in scenario.model.blocks
                      for kind in layers.block_kinds(block))
        self.d_head = 0 if stacked else scenario.model.d_head
        size = scenario.decode.prefill_chunk
        self._chunks = [-(-len(r.tokens) // size) if size else 1 for r in scenario.requests]

    def key(self, state, name: str | None = None) -> Key:
        """The key of `state` (an engine.trace.OpState), or of another operator `name` of its pass.
        The decode rule's operators after a chunked prefill belong to its last chunk."""
        chunks = self._chunks[state.request]
        chunk = chunks - 1 if state.kind in DECODE_RULE else state.chunk
        return Key(state.request, pass_of(state.round, chunk, chunks > 1), name or state.name)

    def text(self, state, name: str | None = None) -> str:
        return self.key(state, name).text(self.requests)


def align(theirs: np.ndarray, name: str, head: int | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """The dump's array in the engine's 2-D layout for operator `name` (the hook's name: `Hook.name`, hook_z,
    cache_k) and `head`, or None; `shape`'s rows may be None (as many as the dump holds)."""
    candidates = [theirs] + ([theirs[0]] if theirs.ndim >= 2 and theirs.shape[0] == 1 else [])
    state_item = layers.dump_layouts().get(name)  # a kind's state item in a layout of its own
    for array in candidates:
        if head is not None and name in layers.head_matrices() and array.ndim == 3:
            array = array[head] if head < array.shape[0] else array
        elif head is not None and array.ndim == 3:  # hook_z: [pos, head, d_head]
            array = array[:, head] if head < array.shape[1] else array
        elif head is not None and array.ndim == 2 and array.shape[1] > shape[1]:  # stacked heads
            width = shape[1]
            array = array[:, head * width:(head + 1) * width]
        elif name in layers.head_axis() and array.ndim == 3:
            array = array.reshape(array.shape[0], -1)
        elif state_item is not None:
            array = state_item.align(array, shape)
        if tuple(array.shape) == tuple(shape) or shape[0] is None and tuple(array.shape[1:]) == tuple(shape[1:]):
            return array
    return None


def dump_index(name: str, head: int | None, row: int, col: int, d_head: int) -> tuple[int, ...]:
    """A cell of the engine's matrix as an index into the dump's own layout (without the batch axis); `name`: the
    hook's name, as for `align`."""
    if (state_item := layers.dump_layouts().get(name)) is not None:
        return state_item.index(row, col, d_head)
    if head is not None and name in layers.head_matrices():
        return (head, row, col)
    if head is not None:  # hook_z of one head
        return (row, head, col)
    if name in layers.head_axis() and d_head:
        return (row, col // d_head, col % d_head)
    return (row, col)


def to_dump(name: str, values: np.ndarray, d_head: int) -> np.ndarray:
    """An operator's 2-D output (every head's stacked for per-head operators) in the dump's layout,
    with a batch axis of 1; `name`: the hook's name, as for `align`."""
    if (state_item := layers.dump_layouts().get(name)) is not None:
        return state_item.dumped(values, d_head)[None]
    if name in layers.head_axis() and d_head:
        return values.reshape(values.shape[0], -1, d_head)[None]
    return values[None]


def stack_heads(name: str, heads: list[np.ndarray]) -> np.ndarray:
    """One operator's per-head matrices as one array: [head, query, key] or hook_z's [pos, head, d_head] (`name`: the
    hook's name)."""
    return np.stack(heads, axis=0 if name in layers.head_matrices() else 1)[None]
