"""The attention token mixer: full or sliding-window softmax attention over a K/V cache.

Query, key and value projections (grouped-query: fewer kv heads), optional per-head q/k RMSNorms
(Qwen3, Gemma 3), RoPE, the cache append, scores (soft-capped: Gemma 2), the pattern, each head's
mix and its contribution to the residual, summed with the output bias. Its state is the layer's
K/V cache (engine.caches); its fault points are the mask, the kv head and the cache appended to.
"""

from __future__ import annotations

from typing import Any

from engine import ops
from engine.caches import Read, ScaleAxis, empty_cache, ring_slot
from engine.hooks import HookSite
from engine.operators import Op, Operand, OpStream, op
from engine.spec import LayerSpec, ModelSpec, Positions
from engine.trace import OpKind

Array = Any
NAME, MODULE = "attention", "attn"
# Hugging Face's module of each projection (w·/b· without the letter) per family, GGUF's tensor (under blk.N),
# and the config's layer_types this kind stands for (whether the layer slides)
HF = {"llama": {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj"},
      "gpt2": {"o": "attn.c_proj"},  # q, k, v: side by side in attn.c_attn
      "bert": {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
               "o": "attention.output.dense"}}
HF_LAYER_TYPES = {"full_attention": False, "sliding_attention": True}
GGUF = {"attn.wq": "attn_q", "attn.wk": "attn_k", "attn.wv": "attn_v", "attn.wo": "attn_output",
        "attn.bq": "attn_q", "attn.bk": "attn_k", "attn.bv": "attn_v", "attn.q_norm.w": "attn_q_norm",
        "attn.k_norm.w": "attn_k_norm"}
PER_HEAD = ("hook_attn_scores", "hook_pattern", "hook_z", "hook_result")  # what an intervention names a head of


class FaultPoints:
    """Where an injected bug (engine.faults) may change what attention and its K/V cache do; these are the
    correct answers."""

    def mask(self, xp, visible: Array | None, n_new: int, n_keys: int) -> Array | None:
        """Which of `n_keys` keys each of the `n_new` queries may read (None: all)."""
        return visible

    def kv_head(self, head: int, group: int, kv_heads: int) -> int:
        """The kv head query head `head` reads (grouped-query attention: `group` query heads each)."""
        return head // group

    def stored_k(self, xp, k: Array, head_width: int) -> Array:
        """The K rows a cache stores for a chunk's (T, kv_heads·dh) keys."""
        return k

    def ring_slot(self, index: int, sinks: int, size: int) -> int:
        """The ring-buffer slot the token at sequence `index` is written to (`size` slots past the sinks)."""
        return ring_slot(index, sinks, size)

    def table_entry(self, physical: int, table: list[int]) -> int:
        """The block-table entry of a new logical block stored in physical block `physical`."""
        return physical

    def scale_axis(self, axis: ScaleAxis) -> ScaleAxis:
        """What shares one quantization scale."""
        return axis


class StaleCacheError(RuntimeError):
    """A cache computed with other weights was about to be extended."""


def parameter_shapes(model: ModelSpec, layer: int, block: LayerSpec) -> dict[str, tuple[int, ...]]:
    prefix, d, a = f"blocks.{layer}.attn", model.d_model, model.d_attn
    widths = {"q": a, "k": model.d_kv, "v": model.d_kv}
    shapes = {f"{prefix}.w{n}": (d, width) for n, width in widths.items()}
    if model.qk_norm:
        shapes.update({f"{prefix}.{n}_norm.w": (model.d_head,) for n in "qk"})
    shapes[f"{prefix}.wo"] = (a, d)
    shapes.update({f"{prefix}.b{n}": (width,) for n, width in widths.items() if model.has_bias(n)})
    if model.has_bias("o"):
        shapes[f"{prefix}.bo"] = (d,)
    return shapes


def hook_widths(model: ModelSpec) -> dict[str, int]:
    """The columns of this kind's hooks (those the spec alone fixes; scores and patterns have one per key)."""
    return {"attn.hook_q": model.d_attn, "attn.hook_rot_q": model.d_attn, "attn.hook_k": model.d_kv,
            "attn.hook_rot_k": model.d_kv, "attn.hook_v": model.d_kv, "attn.hook_z": model.d_head,
            "attn.hook_result": model.d_model, "attn.hook_concat": model.d_attn}


def hooks(model: ModelSpec, layer: int, block: LayerSpec, hook, norm_sites) -> list[HookSite]:
    """Every hook this kind yields in `layer`, in order (`hook` interns, `norm_sites` lists a norm's hooks)."""
    heads = model.n_heads
    sites = [HookSite(hook(layer, MODULE, f"hook_{n}")) for n in "qkv"]
    if model.qk_norm:
        for n in "qk":
            sites += norm_sites(layer, f"{MODULE}.{n}_norm", out=hook(layer, MODULE, f"hook_{n}_normed"))
    if model.positions == Positions.ROPE:
        sites += [HookSite(hook(layer, MODULE, f"hook_rot_{n}")) for n in "qk"]
    per_head = (["hook_attn_scores_uncapped"] if model.attn_softcap else []) + ["hook_attn_scores", "hook_pattern",
                                                                                "hook_z"]
    sites += [HookSite(hook(layer, MODULE, name), heads) for name in per_head]
    sites += [HookSite(hook(layer, MODULE, "hook_concat")), HookSite(hook(layer, MODULE, "hook_result"), heads)]
    return sites


class Attention:
    """One layer's attention, made once per model: its parameter names and hooks are resolved here."""

    def __init__(self, model, layer: int, block: LayerSpec):
        self.model, self.layer, self.block, self.spec = model, layer, block, model.spec
        self.prefix = f"blocks.{layer}.attn"
        hook = model.hook
        self.hooks = {name: hook(layer, MODULE, name) for name in (
            "hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_q_normed", "hook_k_normed",
            "hook_attn_scores_uncapped", "hook_attn_scores", "hook_pattern", "hook_z", "hook_concat", "hook_result")}
        self.cache_names = (f"{self.prefix}.cache_k", f"{self.prefix}.cache_v")

    def fresh_state(self):
        spec, model = self.spec, self.model
        return empty_cache(model.cache, model.xp, spec.d_kv, spec.d_head, model.backend.dtype, model.fingerprint,
                           self.block.window)

    def forward(self, h: Op, states: list, positions: list[int], padded_keys: list[bool] | None, out) -> OpStream:
        """`out`: the hook of the summed output (what the residual adds, unless a post-norm follows)."""
        model, spec, layer, hooks, p = self.model, self.spec, self.layer, self.hooks, self.prefix
        q, k, v = (model.linear(hooks[f"hook_{n}"], h, f"{p}.w{n}", f"{p}.b{n}") for n in "qkv")
        yield q
        yield k
        yield v
        if spec.qk_norm:  # Qwen3, Gemma 3: each head's q and k through an RMSNorm of their own
            q = yield from model.norm(layer, "attn.q_norm", q, heads=spec.n_heads, out=hooks["hook_q_normed"])
            k = yield from model.norm(layer, "attn.k_norm", k, heads=spec.n_kv_heads, out=hooks["hook_k_normed"])
        if spec.positions == Positions.ROPE:
            q, k = (self._rope(hooks[f"hook_rot_{n}"], x, positions) for n, x in (("q", q), ("k", k)))
            yield q
            yield k
        read = self._append(model.fault.layer_state(layer, states), k.values, v.values)
        states[layer] = read.cache
        keys = Operand(self.cache_names[0], read.k, rows=read.columns)
        values = Operand(self.cache_names[1], read.v, rows=read.columns)
        visible = self._mask(read, q.values.shape[0], padded_keys)
        every = self._heads(q.values, keys.values, values.values, visible)
        heads = []
        for head in range(spec.n_heads):
            z = yield from self._head(head, q, keys, values, every)
            heads.append(z)
        concat = op(hooks["hook_concat"], model.xp.concat([z.values for z in heads], axis=1), OpKind.CONCAT,
                    inputs=tuple(heads))
        yield concat
        wo, dh, results = model.param(f"{p}.wo"), spec.d_head, []
        for head, z in enumerate(heads):  # each head's contribution to the residual, as TransformerLens's hook_result
            result = op(hooks["hook_result"], z.values @ wo.values[head * dh:(head + 1) * dh, :], OpKind.LINEAR,
                        head=head, inputs=(z, wo))
            yield result
            results.append(result)
        total = model.sum(out, results, f"{p}.bo")
        yield total
        return total

    def _mask(self, read: Read, n_new: int, padded_keys: list[bool] | None):
        """Which keys each new query may read: causal order (within a sliding window, sinks
        always) and key-side padding, by each key's sequence index; None = all."""
        xp, model = self.model.xp, self.model
        visible = read.visible(xp, n_new, self.block.window, model.cache.sinks) if self.spec.causal else None
        visible = model.fault.mask(xp, visible, n_new, len(read.index))
        flags = [padded_keys[i] if i < len(padded_keys) else False for i in read.index] if padded_keys else []
        if not any(flags):  # past the padding flags: rows a bug added
            return visible
        real = xp.asarray([not pad for pad in flags])[None, :]
        return real if visible is None else visible & real

    def _rope(self, hook, x: Op, positions: list[int]) -> Op:
        spec, xp = self.spec, self.model.xp
        rotated = ops.rope(xp, x.values, xp.asarray(positions), spec.d_head, spec.theta(self.layer),
                           spec.rope_divisors(self.layer))
        return op(hook, rotated, OpKind.ROPE, inputs=(x,))

    def _heads(self, q: Array, k: Array, v: Array, visible) -> tuple[Array | None, Array, Array, Array]:
        """Every head's scores before a soft cap (None without one), scores, pattern and output at once,
        (H, T, S) ×3 and (H, T, dh): one batched call per step instead of one per head (the heads are
        yielded one by one)."""
        xp, spec, fault = self.model.xp, self.spec, self.model.fault
        dh, group = spec.d_head, spec.n_heads // spec.n_kv_heads

        def split(x: Array) -> Array:  # (T, H·dh) -> (H, T, dh)
            return xp.permute_dims(xp.reshape(x, (x.shape[0], -1, dh)), (1, 0, 2))

        k, v = split(k), split(v)
        if group > 1:  # grouped-query attention: query head h reads kv head h // group
            kv = xp.asarray([fault.kv_head(head, group, spec.n_kv_heads) for head in range(spec.n_heads)])
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

    def _head(self, head, q: Operand, keys: Operand, values: Operand, every) -> OpStream:
        """Query head `head` reads kv head head // group (grouped-query attention; group 1: its own)."""
        xp, spec, hooks = self.model.xp, self.spec, self.hooks
        dh, group = spec.d_head, spec.n_heads // spec.n_kv_heads
        part, kv = slice(head * dh, (head + 1) * dh), self.model.fault.kv_head(head, group, spec.n_kv_heads)
        kv_part, kv_name = slice(kv * dh, (kv + 1) * dh), f"head {kv}" if group == 1 else f"kv head {kv}"
        q_h = Operand(f"{q.name}[head {head}]", q.values[:, part])
        k_h = Operand(f"{keys.name}[{kv_name}]", keys.values[:, kv_part], rows=keys.rows)
        v_h = Operand(f"{values.name}[{kv_name}]", values.values[:, kv_part], rows=keys.rows)
        uncapped, scores_h, batch_pattern, z_h = (None if x is None else x[head, ...] for x in every)
        inputs = (q_h, k_h)
        if uncapped is not None:  # Gemma 2: the scores before their soft cap, then cap·tanh(s / cap)
            batch_uncapped = uncapped
            uncapped = op(hooks["hook_attn_scores_uncapped"], uncapped, OpKind.SCORES, head=head, inputs=inputs,
                          cols=keys.rows)
            yield uncapped
            inputs = (uncapped,)
            if uncapped.values is not batch_uncapped:  # replaced: cap it again, keeping −∞ where masked
                scores_h = ops.masked(xp, ops.softcap(xp, uncapped.values, spec.attn_softcap),
                                      uncapped.values > -xp.inf)
        scores = op(hooks["hook_attn_scores"], scores_h, OpKind.SCORES if uncapped is None else OpKind.SOFTCAP,
                    head=head, inputs=inputs, cols=keys.rows)
        yield scores
        # The batch computed every head at once; a value replaced since is followed from there on.
        pattern_h = batch_pattern if scores.values is scores_h else ops.softmax(xp, scores.values)
        pattern = op(hooks["hook_pattern"], pattern_h, OpKind.SOFTMAX, head=head, inputs=(scores,), cols=keys.rows)
        yield pattern
        z_h = z_h if pattern.values is batch_pattern else pattern.values @ v_h.values
        z = op(hooks["hook_z"], z_h, OpKind.MIX, head=head, inputs=(pattern, v_h))
        yield z
        return z

    def _append(self, cache, k: Array, v: Array) -> Read:
        model = self.model
        if cache.fingerprint != model.fingerprint and not model.allow_stale:
            raise StaleCacheError(
                f"the cache was computed with weights {cache.fingerprint}, the model now has {model.fingerprint}"
            )
        return cache.extend(model.xp, k, v, model.fault)


Layer = Attention
