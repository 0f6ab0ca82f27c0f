"""The transformer forward pass over one chunk of new tokens, as a stream of operators.

`Transformer.forward` is a generator: it yields an `Op` after every operator and
returns the logits. The same code serves prefill (many tokens, empty cache),
chunked prefill (C tokens onto P cached ones) and cached decode (one token), so
that a full recompute and the cached path differ only in what they are fed.

Whoever drives the generator may replace a yielded Op's `values` before resuming it
(engine.interventions does, from outside): everything computed afterwards reads `op.values`,
so the rest of the pass, and the KV cache rows it appends, follow the replacement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from engine import layers, ops
from engine.backend import Backend
from engine.caches import CacheSpec
from engine.faults import NO_FAULT, Fault
from engine.hooks import Hook, HookRegistry, HookSite, Interned
from engine.layers import per_layer_input
from engine.lazy_weights import LazyWeights, RowTable
from engine.operators import Op, Operand, OpStream, finish, op
from engine.spec import LayerSpec, ModelSpec, NormKind, NormPlacement, Positions
from engine.state import LayerState, StaleCacheError
from engine.trace import OpKind

__all__ = ["HEAD", "Block", "Op", "OpStream", "Operand", "StaleCacheError", "Transformer"]
Array = Any
LOGITS = Hook(None, "unembed", "hook_out")  # the head's logits (before a final soft cap)
HEAD = "(head)"  # the key of the head's operand among the parameters' (no parameter is named so)


class Part(NamedTuple):
    """A sublayer of a block (its mixer or its FFN) with the norms and hooks around it."""

    sub: Any  # the kind's Layer
    module: str  # its part of the hook and parameter names (the kind's MODULE)
    norm: str  # the norm before it (after it with post-LN): ln1, ln2
    post_norm: str  # Gemma's norm of its output: ln1_post, ln2_post
    out: Hook  # its body's output: the kind's hook_out under post-norms, else `added`
    added: Hook  # what the residual adds (the kind's ADDED; TransformerLens: hook_attn_out, hook_mlp_out)
    residual: Hook  # the sum


class Block:
    """One layer: a token mixer, then an FFN, each a kind of engine.layers, around the residual stream."""

    def __init__(self, model: Transformer, layer: int, spec: LayerSpec):
        mixer, ffn = layers.block_kinds(spec)
        self.layer, self.spec = layer, spec
        self.mixer, self.ffn = mixer.Layer(model, layer, spec), ffn.Layer(model, layer, spec)
        self.kinds = (mixer, ffn)
        hook = model.hook
        post = model.spec.post_norms  # Gemma: a norm follows each sublayer; its output is what the residual adds
        self.resid_pre = hook(layer, "", "hook_resid_pre")
        # Gemma 4: the per-layer input and the layer scalar follow the FFN (per_layer_input.Tail), whose last
        # residual is the block's output
        self.tail = per_layer_input.Tail(model, layer) if per_layer_input.has_tail(model.spec) else None
        ffn_residual = "hook_resid_post" if self.tail is None else per_layer_input.FFN_RESIDUAL
        self.parts = tuple(_part(hook, layer, sub, kind, norm, residual, post)
                           for sub, kind, norm, residual in ((self.mixer, mixer, "ln1", "hook_resid_mid"),
                                                             (self.ffn, ffn, "ln2", ffn_residual)))


def _part(hook: Interned, layer: int, sub, kind, norm: str, residual: str, post: bool) -> Part:
    added, module = hook(layer, "", kind.ADDED), kind.MODULE
    return Part(sub, module, norm, f"{norm}_post", hook(layer, module, "hook_out") if post else added, added,
                hook(layer, "", residual))


class Transformer:
    """The stack driver: embed, the blocks (each made of its kinds), the final norm and the head."""

    def __init__(self, spec: ModelSpec, weights: Mapping[str, Any], backend: Backend, fingerprint: str,
                 fault: Fault = NO_FAULT, allow_stale: bool = False, cache: CacheSpec = CacheSpec()):
        """Args:
        fault: an injected cache bug (engine.faults); the default computes correctly.
        allow_stale: extend caches computed with other weights instead of refusing.
        cache: the KV-cache layout (engine.caches); the forward pass reads every layout alike.
        """
        self.spec, self.backend, self.xp, self.fingerprint = spec, backend, backend.xp, fingerprint
        self.weights = weights  # a checkpoint's LazyWeights read each array on first use
        # One Operand per weight, made when first read and shared by every operator that reads it:
        # a kept history then holds fewer objects for Python's garbage collector to walk.
        self._params: dict[str, Operand] = {}
        self._tables: dict[str, Operand] = {}  # tables read by token id, as operators' inputs (`table_rows`)
        self.fault, self.cache = fault, cache
        self.allow_stale = allow_stale or fault.keeps_stale_cache
        self.hook = Interned()
        self.blocks = [Block(self, layer, block) for layer, block in enumerate(spec.blocks)]
        self._hooks: HookRegistry | None = None
        self._norms: dict[tuple[int | None, str], tuple] = {}

    def param(self, name: str) -> Operand:
        operand = self._params.get(name)
        if operand is None:
            operand = Operand(name, self.backend.asarray(self.weights[name]), rows="in", cols="out")
            self._params[name] = operand
        return operand

    def table_rows(self, name: str, ids: list[int]) -> tuple[Operand, Array]:
        """Rows `ids` of a table read by token id, and the table as the operator's input. A checkpoint's
        weights give those rows alone (a GGUF dequantizes just them): the table is read whole only by what
        needs all of it (a tied head's logits)."""
        if not isinstance(self.weights, LazyWeights):
            table = self.param(name)
            return table, self.xp.take(table.values, self.xp.asarray(ids), axis=0)
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = Operand(name, RowTable(self.weights, name), rows="in", cols="out")
        return table, self.backend.asarray(self.weights.rows(name, np.asarray(ids, dtype=np.int64)))

    def empty_caches(self) -> list[LayerState]:
        """Every layer's state before the first token: its mixer's (a K/V cache for attention)."""
        return [block.mixer.fresh_state() for block in self.blocks]

    @property
    def hooks(self) -> HookRegistry:
        """Every hook the forward pass yields (decoding's excepted), in order, known before it runs."""
        if self._hooks is None:
            self._hooks = HookRegistry(self._sites())
        return self._hooks

    def _sites(self):
        spec, hook = self.spec, self.hook
        yield HookSite(hook(None, "", "hook_embed"))
        if spec.type_vocab:
            yield HookSite(hook(None, "", "hook_token_type_embed"))
        if spec.positions in (Positions.LEARNED, Positions.SEED_SIN, Positions.SINUSOIDAL):
            yield HookSite(hook(None, "", "hook_pos_embed"))
        if spec.embed_norm:
            yield HookSite(hook(None, "embed", "hook_sum"))
            yield from self._norm_sites(None, "ln_embed")
        yield from per_layer_input.hooks(spec, self.hook, self._norm_sites)
        normed, pre = spec.norm.kind != NormKind.NONE, spec.norm.placement == NormPlacement.PRE
        for block in self.blocks:
            yield HookSite(block.resid_pre)
            for kind, part in zip(block.kinds, block.parts):
                if normed and pre:
                    yield from self._norm_sites(block.layer, part.norm)
                yield from kind.hooks(spec, block.layer, block.spec, self.hook, self._norm_sites)
                yield HookSite(part.out)
                if spec.post_norms:
                    yield from self._norm_sites(block.layer, part.post_norm, part.added)
                yield HookSite(part.residual)
                if normed and not pre:
                    yield from self._norm_sites(block.layer, part.norm)
            if block.tail is not None:
                yield from per_layer_input.block_hooks(spec, block.layer, self.hook, self._norm_sites)
        if spec.lm_head:
            if spec.final_norm:
                yield from self._norm_sites(None, "ln_final")
            yield HookSite(LOGITS)
            if spec.final_softcap:
                yield HookSite(hook(None, "unembed", "hook_softcap"))

    def _norm_sites(self, layer: int | None, module: str, out: Hook | None = None) -> list[HookSite]:
        sites = [HookSite(self.hook(layer, module, name)) for name in ("hook_scale", "hook_normalized")]
        return sites + [HookSite(out or self.hook(layer, module, "hook_out"))] if self.spec.norm.affine else sites

    def forward(self, ids: list[int], positions: list[int], caches: list[LayerState], *,
                vectors=None, padded_keys: list[bool] | None = None, per_layer_ids: list[int] | None = None) -> OpStream:
        """Run `ids` (at absolute `positions`) through every layer, replacing each layer's state in `caches`.

        Args:
            vectors: input vectors given instead of embedding rows, (T, D).
            padded_keys: for every key position (cached and new), whether it holds PAD;
                those keys are −∞ for every query.
            per_layer_ids: the tokens whose per-layer input rows are read (Gemma 4; None: `ids`).
        Returns the logits, or for an encoder (no lm_head) the last block's output.
        """
        spec, hook = self.spec, self.hook
        if vectors is None:
            x = self._embed(ids)
        else:
            x = op(hook(None, "", "hook_embed"), self.backend.asarray(vectors), OpKind.EMBED)
        yield x
        if spec.positions not in (Positions.NONE, Positions.ROPE) or spec.type_vocab:
            x = yield from self._add_positions(x, positions)
        if spec.embed_norm:
            x = yield from self.norm(None, "ln_embed", x)
        per_layer = None
        if spec.per_layer_input:  # Gemma 4: every layer's input embedding, made once
            per_layer = yield from per_layer_input.inputs(self, ids if per_layer_ids is None else per_layer_ids, x)
        for block in self.blocks:
            if x.hook is not block.resid_pre:
                x = op(block.resid_pre, x.values, OpKind.RESIDUAL, inputs=(x,))
                yield x
            for part in block.parts:
                x = yield from self._sublayer(block.layer, x, part, caches, positions, padded_keys)
            if block.tail is not None:
                x = yield from block.tail.forward(x, per_layer)
        if not spec.lm_head:
            return x
        if spec.final_norm:
            x = yield from self.norm(None, "ln_final", x)
        unembed = self._unembed_operand()
        logits = op(LOGITS, self._logits(x.values), OpKind.LOGITS, inputs=(x, unembed), cols="vocab")
        yield logits
        if spec.final_softcap:  # Gemma 2: what decoding reads is cap·tanh(logits / cap)
            logits = op(hook(None, "unembed", "hook_softcap"), ops.softcap(self.xp, logits.values, spec.final_softcap),
                        OpKind.LOGITS, inputs=(logits,), cols="vocab")
            yield logits
        return logits

    def lens(self, resid: Array) -> Array:
        """The logits the final norm and the unembedding make of residual rows (T, D): the logit lens."""
        x = Operand("lens", resid)
        if self.spec.final_norm:
            x = finish(self.norm(None, "ln_final", x))
        logits = self._logits(x.values)
        return ops.softcap(self.xp, logits, self.spec.final_softcap) if self.spec.final_softcap else logits

    def _embed(self, ids: list[int]) -> Op:
        """The embedding rows of `ids`; Gemma's times √d_model (TransformerLens's hook_embed is the scaled rows)."""
        (embed, rows), hook = self.table_rows("embed", ids), self.hook(None, "", "hook_embed")
        if self.spec.embed_scale == 1.0:
            return op(hook, rows, OpKind.EMBED, inputs=(embed,))
        scale = Operand("embed_scale", self.backend.asarray([[self.spec.embed_scale]]), rows="in", cols="out")
        return op(hook, rows * self.spec.embed_scale, OpKind.EMBED, inputs=(embed, scale))

    def _unembed_operand(self) -> Operand:
        """The head as the logits read it (made once, kept beside the parameters' operands): the tied
        head reads the embedding through a transposed view, never a copy."""
        operand = self._params.get(HEAD)
        if operand is None:
            tied = self.spec.tied_unembed
            table = self.xp.matrix_transpose(self.param("embed").values) if tied else self.param("unembed").values
            operand = self._params[HEAD] = Operand("embed.T" if tied else "unembed", table, rows="in", cols="vocab")
        return operand

    def _logits(self, x: Array) -> Array:
        """x @ unembed. On NumPy a decode row meets the tied table through vecdot, which reads it row by
        row at the full memory bandwidth; BLAS reads the transposed view at about half of it (engine_speed.py)."""
        if self.spec.tied_unembed and x.shape[0] == 1 and self.backend.name == "numpy":
            return self.xp.vecdot(self.param("embed").values, x)[None, :]
        return x @ self._unembed_operand().values

    def _add_positions(self, x: Op, positions: list[int]) -> OpStream:
        """Token embeddings plus position terms (and BERT's token type 0): the residual stream."""
        xp, spec, hook = self.xp, self.spec, self.hook
        where = xp.asarray(positions)
        terms = [x]
        if spec.type_vocab:
            table = self.param("type_embed")
            terms.append(op(hook(None, "", "hook_token_type_embed"), xp.take(table.values, xp.zeros_like(where), axis=0),
                            OpKind.EMBED, inputs=(table,)))
        if spec.positions == Positions.LEARNED:
            table = self.param("pos_embed")
            terms.append(op(hook(None, "", "hook_pos_embed"), xp.take(table.values, where, axis=0), OpKind.EMBED,
                            inputs=(table,)))
        elif spec.positions in (Positions.SEED_SIN, Positions.SINUSOIDAL):
            encode = ops.seed_sin_positions if spec.positions == Positions.SEED_SIN else ops.sinusoidal_positions
            terms.append(op(hook(None, "", "hook_pos_embed"), encode(xp, where, spec.d_model, self.backend.dtype),
                            OpKind.POSITIONS))
        yield from terms[1:]
        total = terms[0].values
        for term in terms[1:]:
            total = total + term.values
        where_to = hook(None, "embed", "hook_sum") if spec.embed_norm else self.blocks[0].resid_pre
        # layer 0 either way: BERT's summed embeddings are the first block's input too
        resid = Op(where_to.text, total, "chunk", "features", OpKind.RESIDUAL, 0, None, tuple(terms), where_to)
        yield resid
        return resid

    # -- the pieces every kind is made of ------------------------------------------------------------
    def _sublayer(self, layer: int, x: Op, part: Part, *args) -> OpStream:
        """x + body(LN(x)) with pre-LN; LN(x + body(x)) with post-LN (the original Transformer);
        x + LN_post(body(LN(x))) with Gemma's post-norms (TransformerLens: hook_attn_out / hook_mlp_out
        are what the residual adds)."""
        spec = self.spec
        normed, pre = spec.norm.kind != NormKind.NONE, spec.norm.placement == NormPlacement.PRE
        h = x
        if normed and pre:
            h = yield from self.norm(layer, part.norm, x)
        result = yield from part.sub.forward(h, *args, part.out)
        if spec.post_norms:
            result = yield from self.norm(layer, part.post_norm, result, out=part.added)
        total = op(part.residual, x.values + result.values, OpKind.RESIDUAL, inputs=(x, result))
        yield total
        if normed and not pre:
            total = yield from self.norm(layer, part.norm, total)
        return total

    def norm(self, layer: int | None, module: str, x: Operand, *, heads: int = 1, out: Hook | None = None,
             gain: bool = True) -> OpStream:
        """TransformerLens's three norm hooks: `hook_scale` (each row's divisor), `hook_normalized`
        (the rows divided, before the affine) and, with an affine, `hook_out` (or `out`: after it).
        Its parameters are `module`'s `.w` (and `.b`), under `blocks.L.` in a layer.

        heads > 1: each row is that many heads, normalized one by one (Qwen3's q/k norms), and the
        divisor has a column per head. gain False: no affine whatever the model's norms have (Gemma 4's v norm)."""
        xp, norm = self.xp, self.spec.norm
        hooks = self._norms.get((layer, module)) or self._norm_hooks(layer, module)
        t = x.values.shape[0]
        split = xp.reshape(x.values, (t, heads, -1))
        rows, divisor = ops.norm_scale(xp, split, norm.eps, centred=norm.kind == NormKind.LAYERNORM)
        scale = op(hooks[0], xp.reshape(divisor, (t, heads)), OpKind.NORM, inputs=(x,), cols="scale")
        yield scale
        normalized = rows / xp.reshape(scale.values, (t, heads, 1))
        normalized = op(hooks[1], xp.reshape(normalized, (t, -1)), OpKind.NORM, inputs=(x, scale))
        yield normalized
        if not norm.affine or not gain:
            return normalized
        gain = self.param(hooks[3])
        y = xp.reshape(normalized.values, (t, heads, -1)) * (1.0 + gain.values if norm.weight_offset else gain.values)
        inputs = [normalized, gain]
        if norm.kind == NormKind.LAYERNORM:
            bias = self.param(hooks[4])
            y, inputs = y + bias.values, inputs + [bias]
        result = op(out or hooks[2], xp.reshape(y, (t, -1)), OpKind.NORM, inputs=tuple(inputs))
        yield result
        return result

    def _norm_hooks(self, layer: int | None, module: str) -> tuple:
        """A norm's three hooks and its gain's and bias's names, made once per norm."""
        prefix = module if layer is None else f"blocks.{layer}.{module}"
        found = self._norms[(layer, module)] = (*(self.hook(layer, module, name) for name in
                                                  ("hook_scale", "hook_normalized", "hook_out")),
                                                f"{prefix}.w", f"{prefix}.b")
        return found

    def linear(self, hook: Hook, x: Op, weight: str, bias: str | None) -> Op:
        w = self.param(weight)
        y = x.values @ w.values
        inputs = (x, w)
        if bias is not None and bias in self.weights:  # parameter_shapes holds the biases ModelSpec asks for
            b = self.param(bias)
            y = y + b.values
            inputs = (x, w, b)
        return op(hook, y, OpKind.LINEAR, inputs=inputs)

    def sum(self, hook: Hook, terms: list[Op], bias: str) -> Op:
        """The heads' contributions (hook_result) summed, plus the output bias: concat @ wo + bo."""
        total = terms[0].values
        for term in terms[1:]:
            total = total + term.values
        inputs = tuple(terms)
        if bias in self.weights:
            total, inputs = total + self.param(bias).values, inputs + (self.param(bias),)
        return op(hook, total, OpKind.LINEAR, inputs=inputs)
