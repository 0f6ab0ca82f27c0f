"""Deliberate KV-cache bugs from the 003 walkthrough (A.9-A.11), for the diff to catch.

The session asks a `Fault` at a few named points: which positions a round gets, what a round
feeds, which states a round starts from and which state a layer extends; which padded keys are
masked and how far padding shifts positions (batches). Each layer kind adds the points of its
own (engine.layers: the attention's which keys a query may read, which kv head a query head
reads; how K rows are stored, which ring slot and which physical block a row goes to, and what
shares a quantization scale). The base class answers correctly; each bug overrides one answer. The
reference path has no branch on a bug's name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from engine.caches import Layout, Quantize, ScaleAxis
from engine.layers import FaultPoints
from engine.layers.causal_conv import shifted
from engine.spec import Positions
from engine.trace import LayerCache, Phase

Array = Any
STALE_SCALE = 1.1  # the "other checkpoint" of the stale-cache bug: every weight ×1.1


class Fault(FaultPoints):
    """The correct behaviour at every named point: the session's here, each layer kind's from its module
    (engine.layers.FaultPoints: the attention's mask, kv heads and K/V cache layouts)."""

    keeps_stale_cache = False  # may a cache computed with other weights be extended?

    def positions(self, phase: Phase, first: int, count: int) -> list[int]:
        """The absolute positions of a chunk whose first token sits at `first`."""
        return list(range(first, first + count))

    def feed(self, phase: Phase, new: list[int], sequence: list[int]) -> list[int]:
        """The tokens a round feeds: `new`, or the whole `sequence` so far."""
        return new

    def per_layer_tokens(self, phase: Phase, current: list[int], fed: list[int]) -> list[int]:
        """The tokens whose per-layer input rows (Gemma 4) a chunk `current` reads, `fed` before it."""
        return current

    def starting_caches(self, round_: int, caches: list[LayerCache],
                        recompute: Callable[[float], list[LayerCache]]) -> list[LayerCache]:
        """The caches a cached round starts from; `recompute(scale)` rebuilds the prefix cache
        with every weight multiplied by `scale`."""
        return caches

    def layer_state(self, layer: int, caches: list[LayerCache]) -> LayerCache:
        """The state `layer` extends and then reads (its K/V cache: the rows it appends to)."""
        return caches[layer]

    def unseen(self, scenario) -> str | None:
        """Why this bug would change no number of the scenario (None: it shows)."""
        return None

    def padded(self, flags: list[bool]) -> list[bool] | None:
        """Which key positions hold padding, to be masked (None: none)."""
        return flags

    def position_offset(self, pad: int) -> int:
        """How far a request's `pad` left-padding tokens shift its position ids back."""
        return pad

    def cannot_run(self, scenario) -> str | None:
        """Why this bug cannot run on an engine.scenario.Scenario (None: it can): an encoder keeps no
        cache between rounds, the bug must change some number, and the positions it feeds must stay
        inside a learned position table."""
        model, requests = scenario.model, scenario.requests
        if not model.lm_head:
            return "an encoder (model.lm_head: false) runs one prefill and no cached round, so no cache bug can show"
        unseen = self.unseen(scenario)
        if unseen or model.positions != Positions.LEARNED:
            return unseen
        for request in requests:
            fed = len(request.tokens)
            for round_ in range(1, request.max_new_tokens):  # a decode round feeds what `feed` gives
                fed += len(self.feed(Phase.DECODE, [0], [0] * (len(request.tokens) + round_)))
            if fed > model.max_positions:
                return f"it would feed position {fed - 1}, past the model's {model.max_positions} learned positions"
        return None


class ChunkMask(Fault):

    def mask(self, xp, visible, n_new, n_keys):
        return None if visible is None else xp.tril(xp.ones((n_new, n_keys), dtype=xp.bool))


class PositionReset(Fault):

    def positions(self, phase, first, count):
        return super().positions(phase, 0 if phase is Phase.DECODE else first, count)

    def unseen(self, scenario):
        return _no_positions(scenario.model)


class DuplicateAppend(Fault):

    def feed(self, phase, new, sequence):
        return sequence if phase is Phase.DECODE else new


class StaleCache(Fault):
    keeps_stale_cache = True

    def starting_caches(self, round_, caches, recompute):
        return recompute(STALE_SCALE) if round_ == 1 else caches


class NoCacheLayer1(Fault):

    def layer_state(self, layer, caches):
        return caches[0] if layer == 1 and caches[1].length > 0 else caches[layer]

    def unseen(self, scenario):
        blocks = scenario.model.blocks
        if len(blocks) < 2:
            return "the model has no layer 1"
        return None if blocks[0].mixer == blocks[1].mixer else "layers 0 and 1 keep different kinds of state"


class PaddingUnmasked(Fault):

    def padded(self, flags):
        return None

    def unseen(self, scenario):
        padded = any(scenario.vocab.pad in r.tokens for r in scenario.requests) or _padding(scenario)
        return None if padded else "no request is padded (run prompts of different lengths as a batch)"


class PositionsNotOffset(Fault):

    def position_offset(self, pad):
        return 0

    def unseen(self, scenario):
        model = scenario.model
        why = _no_positions(model) or (None if _padding(scenario) else "no request is left-padded "
                                       "(run prompts of different lengths as a batch)")
        longest = max(len(r.tokens) for r in scenario.requests) + max(r.max_new_tokens for r in scenario.requests) - 1
        if not why and model.positions == Positions.LEARNED and longest > model.max_positions:
            why = f"it would feed position {longest - 1}, past the model's {model.max_positions} learned positions"
        return why


class RopeOffByOne(Fault):

    def positions(self, phase, first, count):
        return super().positions(phase, first + (phase is Phase.DECODE), count)

    def unseen(self, scenario):
        return _no_positions(scenario.model)


class GqaModulo(Fault):

    def kv_head(self, head, group, kv_heads):
        return head % kv_heads

    def unseen(self, scenario):
        model = scenario.model
        if model.n_kv_heads < 2 or model.n_kv_heads == model.n_heads:
            return "the model needs grouped-query attention with at least two kv heads"
        return None


class TransposedK(Fault):

    def stored_k(self, xp, k, head_width):
        t = k.shape[0]
        heads = xp.permute_dims(xp.reshape(k, (t, -1, head_width)), (1, 2, 0))  # (H, dh, T)
        return xp.reshape(xp.permute_dims(xp.reshape(heads, (-1, t, head_width)), (1, 0, 2)), (t, -1))

    def unseen(self, scenario):
        if all(len(r.tokens) < 2 for r in scenario.requests):
            return "every prompt is one token, whose K reads the same either way"
        return None


class RingWrongSlot(Fault):

    def ring_slot(self, index, sinks, size):
        wrapped = index >= sinks + size
        return super().ring_slot(index + wrapped, sinks, size)

    def unseen(self, scenario):
        cache, model = scenario.cache, scenario.model
        windows = [w for w in map(model.window, range(model.n_layers)) if w is not None]
        longest = max(len(r.tokens) + r.max_new_tokens - 1 for r in scenario.requests) + max(_padding(scenario), default=0)
        if cache.layout is not Layout.RING or not windows or longest <= cache.sinks + min(windows):
            return "no ring buffer wraps (cache: {layout: ring} and a sequence longer than its window)"
        return None


class BlockTableWrong(Fault):

    def table_entry(self, physical, table):
        return table[-1] if table else physical

    def unseen(self, scenario):
        longest = max(len(r.tokens) + r.max_new_tokens - 1 for r in scenario.requests)
        if scenario.cache.layout is not Layout.PAGED or scenario.cache.quantize is not Quantize.NONE or longest <= scenario.cache.block_size:
            return "no request fills a second block of a paged cache (cache: {layout: paged})"
        return None


class ScalePerTensor(Fault):

    def scale_axis(self, axis):
        return ScaleAxis.PER_TENSOR

    def unseen(self, scenario):
        if scenario.cache.quantize is Quantize.NONE:
            return "the cache is not quantized (cache: {quantize: int8})"
        return None


class ConvNotShifted(Fault):
    def conv_window(self, xp, window, inputs):
        n = min(int(inputs.shape[0]), int(window.shape[0]))
        return xp.concat([window[:int(window.shape[0]) - n, ...], inputs[-n:, ...]], axis=0) if n else window

    def unseen(self, scenario):
        return _no_conv_window(scenario)


class ConvShiftedTwice(Fault):
    def conv_window(self, xp, window, inputs):
        return shifted(xp, xp.concat([window, xp.zeros_like(inputs)], axis=0), inputs, int(window.shape[0]))

    def unseen(self, scenario):
        return _no_conv_window(scenario)


def _no_conv_window(scenario) -> str | None:
    """Why a wrong conv window changes nothing: a window of two rows or more must be read by a later round."""
    kernels = [block.conv_kernel or 0 for block in scenario.model.blocks]
    if max(kernels, default=0) < 3:
        return "no layer has a causal conv of 3 taps or more (a window of two earlier inputs)"
    if max(r.max_new_tokens for r in scenario.requests) < 3:
        return "no request decodes a second round that reads the window the first one kept (max_new_tokens ≥ 3)"
    return None


class StateNotDecayed(Fault):

    def decayed(self, xp, state, decay):
        return state

    def unseen(self, scenario):
        return _no_deltanet(scenario, rounds=2)


class ChunkStateDropped(Fault):

    def carried(self, xp, state, chunk):
        return state * 0.0 if chunk else state

    def unseen(self, scenario):
        net = scenario.model.deltanet
        why = _no_deltanet(scenario, rounds=1)
        if why is None and all(len(r.tokens) <= net.chunk for r in scenario.requests):
            return f"no prompt is longer than the delta rule's chunk ({net.chunk} tokens)"
        return why


def _no_deltanet(scenario, rounds: int) -> str | None:
    """Why a Gated DeltaNet bug that shows from round `rounds` − 1 on cannot show."""
    if not any(block.mixer == "gated_deltanet" for block in scenario.model.blocks):
        return "the model has no Gated DeltaNet (linear-attention) layer"
    if all(r.max_new_tokens < rounds for r in scenario.requests):
        return f"it shows from decode round {rounds - 1} on: generate at least {rounds} tokens"
    return None


class SharedKvOwnCache(Fault):
    """A KV-shared layer attending over its own cache in a cached round: nothing was written there but the
    chunk's rows, so it reads the new tokens' keys only."""

    def shared_read(self, read, n_new):
        if read.cache.seen == n_new:  # a prefill (or a full recompute): the source read only the chunk too
            return read
        index = tuple(read.index)[-n_new:]
        return dataclasses.replace(read, k=read.k[-n_new:, ...], v=read.v[-n_new:, ...], index=index)

    def unseen(self, scenario):
        return None if _kv_shared(scenario.model) else "the model has no KV-shared layer (num_kv_shared_layers)"


class PerLayerPrevious(Fault):
    """A cached round reading the per-layer input row of the token before each new one."""

    def per_layer_tokens(self, phase, current, fed):
        return (fed[-1:] + current)[:len(current)]

    def unseen(self, scenario):
        return None if scenario.model.per_layer_input else "the model has no per-layer inputs"


def _kv_shared(model) -> bool:
    return any(block.kv_source is not None for block in model.blocks)


def _no_positions(model) -> str | None:
    if model.positions == Positions.NONE and not model.training:  # dropout masks are drawn per position
        return "the model has no position term, so wrong positions change nothing"
    return None


def _padding(scenario) -> tuple[int, ...]:
    """Each request's left padding in a batch (none outside one)."""
    lengths = [len(r.tokens) for r in scenario.requests]
    return tuple(max(lengths) - n for n in lengths if n < max(lengths)) if scenario.batch else ()


NO_FAULT = Fault()
FAULTS: dict[str, Fault] = {
    "chunk-mask": ChunkMask(),
    "position-reset": PositionReset(),
    "duplicate-append": DuplicateAppend(),
    "stale-cache": StaleCache(),
    "no-cache-layer1": NoCacheLayer1(),
    "padding-unmasked": PaddingUnmasked(),
    "positions-not-offset": PositionsNotOffset(),
    "rope-off-by-one": RopeOffByOne(),
    "gqa-modulo": GqaModulo(),
    "transposed-k": TransposedK(),
    "ring-wrong-slot": RingWrongSlot(),
    "block-table-wrong": BlockTableWrong(),
    "scale-per-tensor": ScalePerTensor(),
    "conv-not-shifted": ConvNotShifted(),
    "conv-shifted-twice": ConvShiftedTwice(),
    "state-not-decayed": StateNotDecayed(),
    "chunk-state-dropped": ChunkStateDropped(),
    "shared-kv-own-cache": SharedKvOwnCache(),
    "per-layer-previous": PerLayerPrevious(),
}
INJECTIONS = tuple(FAULTS)  # the names --inject takes; what each does is the views' to say (their catalogues)
