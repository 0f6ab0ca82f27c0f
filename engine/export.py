"""A session's trace as one JSON-ready document (`tinyllm-tui run --json`), or as arrays in the dump
layout of a whole generation (`run --save-activations`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import numpy as np

from engine.arrays import to_host
from engine.hooks import Hook
from engine.layout import Passes, stack_heads, to_dump
from engine.session import Session
from engine.trace import OpState, RequestResult


# JSON has no infinities: ±∞ are written 1e999 and -1e999, numbers too large for a double, which JSON readers
# parse as ±∞ (Python's json, JavaScript's JSON.parse, serde_json's f64); NaN is written null.
NON_FINITE = {"Infinity": "1e999", "-Infinity": "-1e999", "NaN": "null"}
_LITERALS = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|NaN')  # a string, or a non-finite number outside one


def json_number(x: float) -> float:
    """A number for `json_text` (which writes the non-finite ones as NON_FINITE says)."""
    return float(x)


def json_text(document) -> str:
    """`document` as standard JSON: ±∞ as ±1e999, NaN as null (NON_FINITE); text written as it is (UTF-8)."""
    text = json.dumps(document, ensure_ascii=False)
    if "Infinity" not in text and "NaN" not in text:  # nothing to rewrite: the scan costs more than the dump
        return text
    return _LITERALS.sub(lambda match: NON_FINITE.get(match[0], match[0]), text)


def record(state: OpState) -> dict:
    return {
        "step": state.step,
        "request": state.request,
        "phase": state.phase,
        "round": state.round,
        "name": state.name,
        "layer": state.layer,
        "head": state.head,
        "rows": list(state.output.rows),
        "cols": list(state.output.cols),
        "values": np.asarray(to_host(state.values), dtype=float).tolist(),  # json_number of each, in one call
    }


def trace_document(session: Session, states: Iterable[OpState]) -> dict:
    """Consume `states` (from `session.steps()`) into the document `run --json` prints."""
    records = [record(state) for state in states]
    return {
        "scenario": session.scenario.path,
        "backend": session.backend.name,
        "dtype": session.backend.dtype_name,
        "records": records,
        **requests_record(session.results),
    }


def requests_record(results: list[RequestResult]) -> dict:
    """What every request generated: the last record of `run --jsonl`."""
    return {"requests": [{"input": list(r.input), "generated": list(r.generated), "stop": r.stop} for r in results]}


# -- activations in the dump layout (engine.layout) ----------------------------------------
class ActivationDump:
    """Collects every operator a run yields and every layer's KV cache after each pass, keyed as a
    dump names them (`decode.2.blocks.0.attn.hook_k`), in TransformerLens's layouts with a batch axis of 1."""

    def __init__(self, passes: Passes):
        self.passes = passes
        self._arrays: dict[str, np.ndarray] = {}
        self._heads: dict[str, tuple[str, list[np.ndarray]]] = {}  # key -> (the hook's name, every head's values)
        self._last: OpState | None = None

    def see(self, state: OpState) -> None:
        if self._last is not None and self.passes.key(self._last)[:2] != self.passes.key(state)[:2]:
            self._caches(self._last)
        name = self.passes.text(state)
        values = np.asarray(to_host(state.values))
        if state.head is None:
            self._arrays[name] = to_dump(state.op.hook.name, values, self.passes.d_head)
        else:
            self._heads.setdefault(name, (state.op.hook.name, []))[1].append(values)
        self._last = state

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything seen so far (the last pass's caches included)."""
        if self._last is not None:
            self._caches(self._last)
        return {**self._arrays, **{key: stack_heads(name, heads) for key, (name, heads) in self._heads.items()}}

    def _caches(self, state: OpState) -> None:
        """Every layer's state as the pass that `state` ends left it, its dump items as its kind lays them out."""
        for layer, cache in enumerate(state.caches):
            for name, values in cache.dump_items().items():
                key = self.passes.text(state, Hook(layer, cache.module, name).text)
                self._arrays[key] = to_dump(name, np.asarray(to_host(values)), self.passes.d_head)
