"""Readings of a run for interpretability: the logit lens and direct logit attribution.

Both read the operators a session produced in one pass (a request's prefill, or one decode round)
and apply the model's own final norm and unembedding (`Transformer.lens`). Numbers only; the CLI
and the TUI format them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import layers
from engine.arrays import to_host
from engine.causes import CausedError
from engine.decoding import CHOICE, PROBS
from engine.hooks import Hook
from engine.model import LOGITS, Transformer
from engine.spec import NormKind, NormPlacement
from engine.trace import OpState

Array = Any
RESIDUALS = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post")
STREAMS = ("pre", "mid", "post")  # what a lens row calls each of RESIDUALS
FINAL_SCALE = Hook(None, "ln_final", "hook_scale")  # the final norm's divisor of each row
_WANTED = {hook.text for hook in (FINAL_SCALE, LOGITS, PROBS, CHOICE)}
Key = tuple[str, int | None]  # (hook name, head)


class AnalysisError(CausedError):
    """The model cannot be read this way (an encoder, a post-norm model, …); its cause says which."""


@dataclass
class Pass:
    """The values one pass of one request produced, chunks joined: what the lens and DLA read."""

    request: int
    round: int
    first: int  # the absolute position of the first row
    values: dict[Key, np.ndarray]  # host arrays, (rows, cols)
    context: tuple[int, ...] = ()  # the token ids at positions 0, 1, … through the pass's last row

    def get(self, name: str, head: int | None = None) -> np.ndarray:
        return self.values[(name, head)]

    @property
    def choice(self) -> int:
        """The token the pass chose."""
        return int(self.get(CHOICE.text)[0, 0])

    def probability(self, token: int) -> float:
        """The probability the decode rule gave `token`."""
        return float(self.get(PROBS.text)[0, token])


def passes(states: Iterable[OpState]) -> Iterator[Pass]:
    """Each pass of a run, with the residual streams, head results, MLP outputs, final scale, logits
    and choice it produced (the other operators are not kept)."""
    current: Pass | None = None
    head_results = layers.head_results()  # the kinds' registry, read once a pass list
    for state in states:
        if current is not None and (state.request, state.round) != (current.request, current.round):
            yield current
            current = None
        if not _wanted(state.op.hook, head_results):
            continue
        rows = to_host(state.values)
        if current is None:
            current = Pass(state.request, state.round, len(state.context) - rows.shape[0], {})
        current.context = state.context
        key = (state.name, state.head)
        before = current.values.get(key)
        current.values[key] = rows if before is None or state.op.hook.module == "sample" else np.concatenate([before, rows])
    if current is not None:
        yield current


def _wanted(hook: Hook, head_results: frozenset[tuple[str, str]]) -> bool:
    """Outside a block, the final scale, logits and choice; in a block, what the residual stream is made of: the
    residuals and each sublayer's output (the block's own hooks) and the heads' results (`head_results`: the
    kinds' (module, name) of them)."""
    if not hook.in_block:
        return hook.text in _WANTED
    return not hook.module or (hook.module, hook.name) in head_results


def decisions(states: Iterable[OpState]) -> dict[tuple[int, int], tuple[int, float]]:
    """(request, round) -> the token each pass chose and its probability."""
    chosen, probs = {}, None
    for state in states:
        if state.op.hook == PROBS:
            probs = to_host(state.values)[0]
        elif state.op.hook == CHOICE:
            token = int(to_host(state.values)[0, 0])
            chosen[(state.request, state.round)] = (token, float(probs[token]))
    return chosen


# -- the logit lens ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LensRow:
    hook: str  # blocks.L.hook_resid_pre|mid|post
    layer: int
    top: np.ndarray  # (positions, k) token ids, most likely first
    probs: np.ndarray  # (positions, k) their probabilities

    @property
    def label(self) -> str:
        """`3 mid`: its layer and which residual stream of the block it reads (STREAMS)."""
        return f"{self.layer} {STREAMS[RESIDUALS.index(Hook.parse(self.hook).name)]}"


def logit_lens(model: Transformer, run: Pass, k: int = 5) -> list[LensRow]:
    """Every residual stream of the pass through the final norm and the unembedding, as top-k tokens
    with probabilities per position, in layer order (block 0's resid_pre, then each block's resid_mid
    and resid_post)."""
    _check_decoder(model)
    hooks = sorted((hook for hook in map(Hook.parse, dict.fromkeys(name for name, _ in run.values)) if _shown(hook)),
                   key=lambda hook: (hook.layer, RESIDUALS.index(hook.name)))
    if not hooks:
        return []
    stacked = np.concatenate([run.get(hook.text) for hook in hooks])  # one unembedding for every row
    logits = to_host(model.lens(model.backend.asarray(stacked)))
    probs = _softmax(logits)
    k = min(k, probs.shape[1])
    candidates = np.argpartition(-probs, k - 1, axis=1)[:, :k]  # the k largest, unordered: no sort of the vocabulary
    order = np.argsort(-np.take_along_axis(probs, candidates, axis=1), axis=1, kind="stable")
    top = np.take_along_axis(candidates, order, axis=1)
    ranked = np.take_along_axis(probs, top, axis=1)
    rows, count = [], run.get(hooks[0].text).shape[0]
    for index, hook in enumerate(hooks):
        part = slice(index * count, (index + 1) * count)
        rows.append(LensRow(hook.text, hook.layer, top[part], ranked[part]))
    return rows


def _shown(hook: Hook) -> bool:
    """Every block's resid_mid and resid_post; resid_pre only of block 0 (block L's is block L−1's resid_post)."""
    return hook.in_block and not hook.module and hook.name in RESIDUALS and (hook.name != RESIDUALS[0] or hook.layer == 0)


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _check_decoder(model: Transformer) -> None:
    spec = model.spec
    if not spec.lm_head:
        raise AnalysisError("analysis.encoder")
    if spec.norm.kind != NormKind.NONE and spec.norm.placement == NormPlacement.POST:
        raise AnalysisError("analysis.post_norm")


# -- direct logit attribution ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Attribution:
    """How much each head, MLP and the embedding adds to one token's logit at one position.

    The terms are linear in the residual stream once the final norm's divisor at that position is
    fixed: term · (gain ⊙ unembed[:, token]) / divisor (a LayerNorm centres each term first). They
    sum to `logit − bias_term`; `bias_term` is the final norm's bias through the unembedding
    (0 for RMSNorm). `logit` is before any final soft cap."""

    token: int
    position: int
    logit: float
    bias_term: float
    # (embed | L{l}.H{h} | L{l}.attn_bias | L{l}.<sublayer>: mlp, conv, linear_attn, contribution), largest first
    terms: tuple[tuple[str, float], ...]


def attribution(model: Transformer, run: Pass, token: int | None = None) -> Attribution:
    """Direct logit attribution at the pass's last position, for `token` (default: the one chosen)."""
    _check_decoder(model)
    spec = model.spec
    if spec.post_norms:
        raise AnalysisError("analysis.block_norm")
    if token is None:
        token = run.choice
    row = -1
    column = _unembedding(model, token)
    direction, bias_term = column, 0.0
    if spec.final_norm:
        if "ln_final.w" in model.weights:
            gain = _weight(model, "ln_final.w")
            direction = direction * (1.0 + gain if spec.norm.weight_offset else gain)
        if "ln_final.b" in model.weights:
            bias_term = float(_weight(model, "ln_final.b") @ column)
        direction = direction / float(run.get(FINAL_SCALE.text)[row, 0])
    centred = spec.final_norm and spec.norm.kind == NormKind.LAYERNORM
    terms = [(label, float(_centre(vector, centred) @ direction)) for label, vector in _terms(model, run, row)]
    terms.sort(key=lambda term: -term[1])
    logits = run.get(LOGITS.text)
    return Attribution(token, run.first + logits.shape[0] - 1, float(logits[row, token]), bias_term, tuple(terms))


def _unembedding(model: Transformer, token: int) -> np.ndarray:
    """The unembedding's column for `token` (the embedding's row, with a tied head)."""
    if model.spec.tied_unembed:
        return to_host(model.param("embed").values[token, :])
    return to_host(model.param("unembed").values[:, token])


def _weight(model: Transformer, name: str) -> np.ndarray:
    return to_host(model.param(name).values)


def _centre(vector: np.ndarray, centred: bool) -> np.ndarray:
    return vector - vector.mean() if centred else vector


def _terms(model: Transformer, run: Pass, row: int) -> Iterator[tuple[str, np.ndarray]]:
    """The residual stream at `row` as a sum: the embedding, then each block's sublayers: a mixer with per-head
    results (attention) as its heads and its output bias, any other (a conv, a linear attention, the FFN) whole."""
    yield "embed", run.get(Hook(0, "", "hook_resid_pre").text)[row]
    for block in model.blocks:
        layer = block.layer
        for part in block.parts:
            result = layers.head_result(block.spec, part.module)
            heads = None if result is None else Hook(layer, part.module, result).text
            if (heads, 0) not in run.values:
                yield f"L{layer}.{part.module}", run.get(part.added.text)[row]
                continue
            for head in range(model.spec.n_heads):
                yield f"L{layer}.H{head}", run.get(heads, head)[row]
            bias = layers.output_bias(block.spec, part.module, layer)
            if bias is not None and bias in model.weights:
                yield f"L{layer}.{part.module}_bias", _weight(model, bias)
