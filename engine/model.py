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

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import ops
from engine.backend import Backend
from engine.caches import CacheSpec, Read, empty_cache
from engine.faults import NO_FAULT, Fault
from engine.spec import FfnKind, ModelSpec, NormKind, NormPlacement, Positions
from engine.trace import LayerCache, OpKind

Array = Any


class StaleCacheError(RuntimeError):
    """A cache computed with other weights was about to be extended."""


@dataclass(eq=False, slots=True)
class Operand:
    """An array an operator reads or writes, with how to label its rows and columns.

    Read-only by convention, like OpState: a frozen dataclass's __init__ costs twice as much, and
    a decode step makes some 80 of these per layer.

    rows/cols are label schemes resolved by the session: "chunk" (the new tokens),
    "keys" (every cached position), "last" (the last new token), "features",
    "vocab", "in"/"out" (a weight's input/output features), "choice", "scale" (a norm's divisor).
    """

    name: str
    values: Array
    rows: str = "chunk"
    cols: str = "features"


@dataclass(eq=False, slots=True)
class Op(Operand):
    kind: OpKind = OpKind.EMBED
    layer: int | None = None
    head: int | None = None
    inputs: tuple[Operand, ...] = ()


OpStream = Generator[Op, None, Array]
HEAD = "(head)"  # the key of the head's operand among the parameters' (no parameter is named so)


class Transformer:
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
        self.fault, self.cache = fault, cache
        self.allow_stale = allow_stale or fault.keeps_stale_cache

    def param(self, name: str) -> Operand:
        operand = self._params.get(name)
        if operand is None:
            operand = Operand(name, self.backend.asarray(self.weights[name]), rows="in", cols="out")
            self._params[name] = operand
        return operand

    def empty_caches(self) -> list[LayerCache]:
        spec = self.spec
        return [empty_cache(self.cache, self.xp, spec.d_kv, spec.d_head, self.backend.dtype, self.fingerprint,
                            spec.window(layer)) for layer in range(spec.n_layers)]

    def forward(self, ids: list[int], positions: list[int], caches: list[LayerCache], *,
                vectors=None, padded_keys: list[bool] | None = None) -> OpStream:
        """Run `ids` (at absolute `positions`) through every layer, appending to `caches`.

        Args:
            vectors: input vectors given instead of embedding rows, (T, D).
            padded_keys: for every key position (cached and new), whether it holds PAD;
                those keys are −∞ for every query.
        Returns the logits, or for an encoder (no lm_head) the last block's output.
        """
        xp, spec = self.xp, self.spec
        if vectors is None:
            x = self._embed(ids)
        else:
            x = Op("hook_embed", self.backend.asarray(vectors), kind=OpKind.EMBED)
        yield x
        if spec.positions not in (Positions.NONE, Positions.ROPE) or spec.type_vocab:
            x = yield from self._add_positions(x, positions)
        if spec.embed_norm:
            x = yield from self._norm("ln_embed", x, layer=None)
        for layer in range(spec.n_layers):
            if x.name != f"blocks.{layer}.hook_resid_pre":
                x = Op(f"blocks.{layer}.hook_resid_pre", x.values, kind=OpKind.RESIDUAL, layer=layer, inputs=(x,))
                yield x
            x = yield from self._block(layer, x, caches, positions, padded_keys)
        if not spec.lm_head:
            return x
        if spec.final_norm:
            x = yield from self._norm("ln_final", x, layer=None)
        unembed = self._unembed_operand()
        logits = Op("unembed.hook_out", self._logits(x.values), cols="vocab", kind=OpKind.LOGITS,
                    inputs=(x, unembed))
        yield logits
        if spec.final_softcap:  # Gemma 2: what decoding reads is cap·tanh(logits / cap)
            logits = Op("unembed.hook_softcap", ops.softcap(self.xp, logits.values, spec.final_softcap),
                        cols="vocab", kind=OpKind.LOGITS, inputs=(logits,))
            yield logits
        return logits

    def lens(self, resid: Array) -> Array:
        """The logits the final norm and the unembedding make of residual rows (T, D): the logit lens."""
        x = Op("lens", resid)
        if self.spec.final_norm:
            x = _finish(self._norm("ln_final", x, layer=None))
        logits = self._logits(x.values)
        return ops.softcap(self.xp, logits, self.spec.final_softcap) if self.spec.final_softcap else logits

    def _embed(self, ids: list[int]) -> Op:
        """The embedding rows of `ids`; Gemma's times √d_model (TransformerLens's hook_embed is the scaled rows)."""
        embed = self.param("embed")
        rows = self.xp.take(embed.values, self.xp.asarray(ids), axis=0)
        if self.spec.embed_scale == 1.0:
            return Op("hook_embed", rows, kind=OpKind.EMBED, inputs=(embed,))
        scale = Operand("embed_scale", self.backend.asarray([[self.spec.embed_scale]]), rows="in", cols="out")
        return Op("hook_embed", rows * self.spec.embed_scale, kind=OpKind.EMBED, inputs=(embed, scale))

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
        xp, spec = self.xp, self.spec
        where = xp.asarray(positions)
        terms = [x]
        if spec.type_vocab:
            table = self.param("type_embed")
            terms.append(Op("hook_token_type_embed", xp.take(table.values, xp.zeros_like(where), axis=0),
                            kind=OpKind.EMBED, inputs=(table,)))
        if spec.positions == Positions.LEARNED:
            table = self.param("pos_embed")
            terms.append(Op("hook_pos_embed", xp.take(table.values, where, axis=0), kind=OpKind.EMBED, inputs=(table,)))
        elif spec.positions in (Positions.SEED_SIN, Positions.SINUSOIDAL):
            encode = ops.seed_sin_positions if spec.positions == Positions.SEED_SIN else ops.sinusoidal_positions
            terms.append(Op("hook_pos_embed", encode(xp, where, spec.d_model, self.backend.dtype),
                            kind=OpKind.POSITIONS))
        yield from terms[1:]
        total = terms[0].values
        for term in terms[1:]:
            total = total + term.values
        name = "embed.hook_sum" if spec.embed_norm else "blocks.0.hook_resid_pre"
        resid = Op(name, total, kind=OpKind.RESIDUAL, layer=0, inputs=tuple(terms))
        yield resid
        return resid

    # -- one block -----------------------------------------------------------------
    def _block(self, layer: int, x: Op, caches: list[LayerCache], positions: list[int],
               padded_keys: list[bool] | None) -> OpStream:
        block = f"blocks.{layer}"
        mid = yield from self._sublayer(layer, x, "attn", f"{block}.ln1", f"{block}.hook_resid_mid",
                                        lambda h: self._attention(layer, h, caches, positions, padded_keys))
        post = yield from self._sublayer(layer, mid, "mlp", f"{block}.ln2", f"{block}.hook_resid_post",
                                         lambda h: self._mlp(layer, h, positions))
        return post

    def _sublayer(self, layer: int, x: Op, module: str, norm: str, residual: str, body) -> OpStream:
        """x + body(LN(x)) with pre-LN; LN(x + body(x)) with post-LN (the original Transformer);
        x + LN_post(body(LN(x))) with Gemma's post-norms."""
        spec = self.spec
        normed, pre = spec.norm.kind != NormKind.NONE, spec.norm.placement == NormPlacement.PRE
        h = x
        if normed and pre:
            h = yield from self._norm(norm, x, layer)
        out = yield from body(h)
        if spec.post_norms:  # TransformerLens: hook_attn_out / hook_mlp_out are what the residual adds
            out = yield from self._norm(f"{norm}_post", out, layer, out=f"blocks.{layer}.hook_{module}_out")
        total = Op(residual, x.values + out.values, kind=OpKind.RESIDUAL, layer=layer, inputs=(x, out))
        yield total
        if normed and not pre:
            total = yield from self._norm(norm, total, layer)
        return total

    def _body_out(self, layer: int, module: str) -> str:
        """The name of the attention's (module "attn") or MLP's output projection: hook_attn_out / hook_mlp_out,
        what the residual adds, unless a post-norm follows (Gemma): its output takes that name, and the
        projection is TransformerLens's attn.hook_out / mlp.hook_out."""
        return f"blocks.{layer}.{module}.hook_out" if self.spec.post_norms else f"blocks.{layer}.hook_{module}_out"

    def _norm(self, prefix: str, x: Op, layer: int | None, *, heads: int = 1, out: str | None = None) -> OpStream:
        """TransformerLens's three norm hooks: `hook_scale` (each row's divisor), `hook_normalized`
        (the rows divided, before the affine) and, with an affine, `hook_out` (or `out`: after it).

        heads > 1: each row is that many heads, normalized one by one (Qwen3's q/k norms), and the
        divisor has a column per head."""
        xp, norm = self.xp, self.spec.norm
        t = x.values.shape[0]
        split = xp.reshape(x.values, (t, heads, -1))
        rows, divisor = ops.norm_scale(xp, split, norm.eps, centred=norm.kind == NormKind.LAYERNORM)
        scale = Op(f"{prefix}.hook_scale", xp.reshape(divisor, (t, heads)), cols="scale", kind=OpKind.NORM,
                   layer=layer, inputs=(x,))
        yield scale
        normalized = rows / xp.reshape(scale.values, (t, heads, 1))
        normalized = Op(f"{prefix}.hook_normalized", xp.reshape(normalized, (t, -1)), kind=OpKind.NORM, layer=layer,
                        inputs=(x, scale))
        yield normalized
        if not norm.affine:
            return normalized
        gain = self.param(f"{prefix}.w")
        y = xp.reshape(normalized.values, (t, heads, -1)) * (1.0 + gain.values if norm.weight_offset else gain.values)
        inputs = [normalized, gain]
        if norm.kind == NormKind.LAYERNORM:
            bias = self.param(f"{prefix}.b")
            y, inputs = y + bias.values, inputs + [bias]
        result = Op(out or f"{prefix}.hook_out", xp.reshape(y, (t, -1)), kind=OpKind.NORM, layer=layer,
                    inputs=tuple(inputs))
        yield result
        return result

    def _linear(self, name: str, x: Op, weight: str, bias: str | None, layer: int) -> Op:
        w = self.param(weight)
        y = x.values @ w.values
        inputs = (x, w)
        if bias is not None and bias in self.weights:  # parameter_shapes holds the biases ModelSpec asks for
            b = self.param(bias)
            y = y + b.values
            inputs = (x, w, b)
        return Op(name, y, kind=OpKind.LINEAR, layer=layer, inputs=inputs)

    def _attention(self, layer: int, h: Op, caches: list[LayerCache], positions: list[int],
                   padded_keys: list[bool] | None) -> OpStream:
        xp, spec = self.xp, self.spec
        block = f"blocks.{layer}.attn"
        q, k, v = (self._linear(f"{block}.hook_{n}", h, f"{block}.w{n}", f"{block}.b{n}", layer)
                   for n in "qkv")
        yield q
        yield k
        yield v
        if spec.qk_norm:  # Qwen3, Gemma 3: each head's q and k through an RMSNorm of their own
            q = yield from self._norm(f"{block}.q_norm", q, layer, heads=spec.n_heads, out=f"{block}.hook_q_normed")
            k = yield from self._norm(f"{block}.k_norm", k, layer, heads=spec.n_kv_heads, out=f"{block}.hook_k_normed")
        if spec.positions == Positions.ROPE:
            q, k = (self._rope(f"{block}.hook_rot_{n}", x, positions, layer) for n, x in (("q", q), ("k", k)))
            yield q
            yield k
        read = self._append(self.fault.layer_cache(layer, caches), k.values, v.values)
        caches[layer] = read.cache
        keys = Operand(f"{block}.cache_k", read.k, rows=read.columns)
        values = Operand(f"{block}.cache_v", read.v, rows=read.columns)
        visible = self._mask(read, q.values.shape[0], padded_keys, spec.window(layer))
        every = self._heads(q.values, keys.values, values.values, visible)
        heads = []
        for head in range(spec.n_heads):
            z = yield from self._head(layer, head, q, keys, values, every)
            heads.append(z)
        concat = Op(f"{block}.hook_concat", xp.concat([z.values for z in heads], axis=1),
                    kind=OpKind.CONCAT, layer=layer, inputs=tuple(heads))
        yield concat
        wo, dh, results = self.param(f"{block}.wo"), spec.d_head, []
        for head, z in enumerate(heads):  # each head's contribution to the residual, as TransformerLens's hook_result
            result = Op(f"{block}.hook_result", z.values @ wo.values[head * dh:(head + 1) * dh, :], kind=OpKind.LINEAR,
                        layer=layer, head=head, inputs=(z, wo))
            yield result
            results.append(result)
        out = self._sum(self._body_out(layer, "attn"), results, f"{block}.bo", layer)
        yield out
        return out

    def _sum(self, name: str, terms: list[Op], bias: str, layer: int) -> Op:
        """The heads' contributions (hook_result) summed, plus the output bias: concat @ wo + bo."""
        total = terms[0].values
        for term in terms[1:]:
            total = total + term.values
        inputs = tuple(terms)
        if bias in self.weights:
            total, inputs = total + self.param(bias).values, inputs + (self.param(bias),)
        return Op(name, total, kind=OpKind.LINEAR, layer=layer, inputs=inputs)

    def _mask(self, read: Read, n_new: int, padded_keys: list[bool] | None, window: int | None):
        """Which keys each new query may read: causal order (within a sliding `window`, sinks
        always) and key-side padding, by each key's sequence index; None = all."""
        xp = self.xp
        visible = read.visible(xp, n_new, window, self.cache.sinks) if self.spec.causal else None
        visible = self.fault.mask(xp, visible, n_new, len(read.index))
        flags = [padded_keys[i] if i < len(padded_keys) else False for i in read.index] if padded_keys else []
        if not any(flags):  # past the padding flags: rows a bug added
            return visible
        real = xp.asarray([not pad for pad in flags])[None, :]
        return real if visible is None else visible & real

    def _rope(self, name: str, x: Op, positions: list[int], layer: int) -> Op:
        spec = self.spec
        rotated = ops.rope(self.xp, x.values, self.xp.asarray(positions), spec.d_head, spec.theta(layer),
                           spec.rope_divisors(layer))
        return Op(name, rotated, kind=OpKind.ROPE, layer=layer, inputs=(x,))

    def _heads(self, q: Array, k: Array, v: Array, visible) -> tuple[Array | None, Array, Array, Array]:
        """Every head's scores before a soft cap (None without one), scores, pattern and output at once,
        (H, T, S) ×3 and (H, T, dh): one batched call per step instead of one per head (the heads are
        yielded one by one)."""
        xp, spec = self.xp, self.spec
        dh, group = spec.d_head, spec.n_heads // spec.n_kv_heads

        def split(x: Array) -> Array:  # (T, H·dh) -> (H, T, dh)
            return xp.permute_dims(xp.reshape(x, (x.shape[0], -1, dh)), (1, 0, 2))

        k, v = split(k), split(v)
        if group > 1:  # grouped-query attention: query head h reads kv head h // group
            kv = xp.asarray([self.fault.kv_head(head, group, spec.n_kv_heads) for head in range(spec.n_heads)])
            k, v = xp.take(k, kv, axis=0), xp.take(v, kv, axis=0)
        q = split(q)
        if spec.attn_softcap:  # the cap comes before the mask
            raw = ops.attention_scores(xp, q, k, None, spec.attn_scale)
            uncapped = ops.masked(xp, raw, visible)
            scores = ops.masked(xp, ops.softcap(xp, raw, spec.attn_softcap), visible)
        else:
            uncapped, scores = None, ops.attention_scores(xp, q, k, visible, spec.attn_scale)
        pattern = ops.softmax(xp, scores)
        return uncapped, scores, pattern, pattern @ v

    def _head(self, layer, head, q: Operand, keys: Operand, values: Operand, every) -> OpStream:
        """Query head `head` reads kv head head // group (grouped-query attention; group 1: its own)."""
        block, spec = f"blocks.{layer}.attn", self.spec
        dh, group = spec.d_head, spec.n_heads // spec.n_kv_heads
        part, kv = slice(head * dh, (head + 1) * dh), self.fault.kv_head(head, group, spec.n_kv_heads)
        kv_part, kv_name = slice(kv * dh, (kv + 1) * dh), f"head {kv}" if group == 1 else f"kv head {kv}"
        q_h = Operand(f"{q.name}[head {head}]", q.values[:, part])
        k_h = Operand(f"{keys.name}[{kv_name}]", keys.values[:, kv_part], rows=keys.rows)
        v_h = Operand(f"{values.name}[{kv_name}]", values.values[:, kv_part], rows=keys.rows)
        uncapped, scores_h, batch_pattern, z_h = (None if x is None else x[head, ...] for x in every)
        inputs = (q_h, k_h)
        if uncapped is not None:  # Gemma 2: the scores before their soft cap, then cap·tanh(s / cap)
            batch_uncapped = uncapped
            uncapped = Op(f"{block}.hook_attn_scores_uncapped", uncapped, cols=keys.rows, kind=OpKind.SCORES,
                          layer=layer, head=head, inputs=inputs)
            yield uncapped
            inputs = (uncapped,)
            if uncapped.values is not batch_uncapped:  # replaced: cap it again, keeping −∞ where masked
                scores_h = ops.masked(self.xp, ops.softcap(self.xp, uncapped.values, spec.attn_softcap),
                                      uncapped.values > -self.xp.inf)
        scores = Op(f"{block}.hook_attn_scores", scores_h, cols=keys.rows,
                    kind=OpKind.SCORES if uncapped is None else OpKind.SOFTCAP, layer=layer, head=head, inputs=inputs)
        yield scores
        # The batch computed every head at once; a value replaced since is followed from there on.
        pattern_h = batch_pattern if scores.values is scores_h else ops.softmax(self.xp, scores.values)
        pattern = Op(f"{block}.hook_pattern", pattern_h, cols=keys.rows, kind=OpKind.SOFTMAX, layer=layer, head=head,
                     inputs=(scores,))
        yield pattern
        z_h = z_h if pattern.values is batch_pattern else pattern.values @ v_h.values
        z = Op(f"{block}.hook_z", z_h, kind=OpKind.MIX, layer=layer, head=head, inputs=(pattern, v_h))
        yield z
        return z

    def _append(self, cache: LayerCache, k: Array, v: Array) -> Read:
        if cache.fingerprint != self.fingerprint and not self.allow_stale:
            raise StaleCacheError(
                f"the cache was computed with weights {cache.fingerprint}, the model now has {self.fingerprint}"
            )
        return cache.extend(self.xp, k, v, self.fault)

    def _mlp(self, layer: int, h: Op, positions: list[int]) -> OpStream:
        spec, mlp = self.spec, f"blocks.{layer}.mlp"
        if FfnKind(spec.ffn).gated:
            gate = self._linear(f"{mlp}.hook_pre", h, f"{mlp}.w_gate", f"{mlp}.b_gate", layer)
            up = self._linear(f"{mlp}.hook_pre_linear", h, f"{mlp}.w_up", f"{mlp}.b_up", layer)
            yield gate
            yield up
            post = Op(f"{mlp}.hook_post", self._activation(gate.values) * up.values, kind=OpKind.ACTIVATION,
                      layer=layer, inputs=(gate, up))
            down = f"{mlp}.w_down", f"{mlp}.b_down"
        else:
            pre = self._linear(f"{mlp}.hook_pre", h, f"{mlp}.w_in", f"{mlp}.b_in", layer)
            yield pre
            post = Op(f"{mlp}.hook_post", self._activation(pre.values), kind=OpKind.ACTIVATION, layer=layer,
                      inputs=(pre,))
            down = f"{mlp}.w_out", f"{mlp}.b_out"
        yield post
        if spec.training and spec.dropout > 0:
            post = self._dropout(post, layer, positions)
            yield post
        out = self._linear(self._body_out(layer, "mlp"), post, *down, layer)
        yield out
        return out

    def _dropout(self, post: Op, layer: int, positions: list[int]) -> Op:
        """Inverted dropout with a mask drawn per (seed, layer, absolute position) on the host,
        so that a cached run and a full recompute drop the same features."""
        spec = self.spec
        width = post.values.shape[1]
        keep = np.stack([np.random.default_rng([spec.dropout_seed, layer, p]).random(width) >= spec.dropout
                         for p in positions])
        scale = self.backend.asarray(keep / (1.0 - spec.dropout))
        return Op(f"blocks.{layer}.mlp.hook_dropout", post.values * scale, kind=OpKind.DROPOUT, layer=layer,
                  inputs=(post,))

    def _activation(self, x: Array) -> Array:
        xp, kind = self.xp, FfnKind(self.spec.ffn)
        if kind == FfnKind.GATED_SILU:
            return ops.silu(xp, x)
        if kind == FfnKind.RELU:
            return ops.relu(xp, x)
        if kind == FfnKind.TANH:
            return xp.tanh(x)
        if kind in (FfnKind.GELU_TANH, FfnKind.GATED_GELU_TANH):
            return ops.gelu_tanh(xp, x)
        return ops.gelu_from_erf(x, self.backend.erf(x / 2**0.5))


def _finish(stream: OpStream) -> Op:
    """Run an operator stream to its end, unrecorded, and return what it returns."""
    while True:
        try:
            next(stream)
        except StopIteration as done:
            return done.value
