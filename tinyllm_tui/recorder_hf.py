"""Forward hooks on a transformers causal LM that record a greedy generation (see recorder.record_hf).

Imported only when a model is given, so torch is never a dependency of the project. Two module layouts are
known: GPT-2 (`model.transformer.h`) and the decoders under `model.model.layers` (Llama, Qwen, Mistral, LFM2,
Qwen3.5, Gemma 4, DeepSeek-V3, Qwen3-MoE, gpt-oss). A decoder layer's pieces are found by what it holds: its
token mixer (`self_attn`, with `kv_a_proj_with_mqa` for latent attention; `linear_attn`: a Gated DeltaNet;
`conv`: LFM2's short conv), its FFN (`mlp` / `feed_forward`: dense, or a router and experts), Gemma's norms
after each sublayer and its per-layer input. Every array loses its batch axis of 1.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol

import torch

from engine.hooks import Hook
from engine.model import LOGITS


class Recorder(Protocol):
    """What the hooks write into: tinyllm_tui.recorder.Recorder (named here, not imported: it imports this module)."""

    def prefill(self) -> Recorder: ...

    def decode(self, round_: int) -> Recorder: ...

    def record(self, name: str, array: Any) -> None: ...


Tap = tuple[Any, str, Callable]  # module, "pre" | "post", what to record from (input, output)


def generate_recorded(model: Any, ids: list[int], max_new_tokens: int, rec: Recorder) -> Recorder:
    handles = [_register(module, when, lambda x, y, fn=fn: fn(rec, x, y)) for module, when, fn in hooks(model)]
    attention, sinks, latent = _attention_layers(model)
    try:
        with torch.no_grad():
            tokens, past = torch.tensor([ids]), None
            rec.prefill()
            for round_ in range(max_new_tokens):
                if round_:
                    rec.decode(round_)
                cache = {} if past is None else {_cache_argument(model): past}
                out = model(input_ids=tokens, use_cache=True, output_attentions=True, **cache)
                past = out.cache if hasattr(out, "cache") else out.past_key_values
                seen = len(ids) + round_  # the keys every query of this pass may read
                for layer, pattern in zip(attention, out.attentions or ()):
                    rec.record(Hook(layer, "attn", "hook_pattern").text, _whole_pattern(pattern[0], seen, layer in sinks))
                for layer, (name, state) in enumerate(_cache_layers(past, latent)):
                    for item, array in state.items():
                        if item not in CACHES or array.shape[-2] == seen:  # a sliding cache drops its oldest rows
                            rec.record(Hook(layer, name, item).text, array)
                tokens = out.logits[:, -1:].argmax(-1)
    finally:
        for handle in handles:
            handle.remove()
    return rec


CACHES = ("cache_k", "cache_v")


def _whole_pattern(pattern, seen: int, sink: bool):
    """A pattern over every key so far: a sliding layer's decode reads only its window (the keys before it get
    probability 0, as in the engine's masked row), and gpt-oss's sink column (dropped by transformers, whose
    softmax included it) is what the row's probabilities leave: 1 − their sum."""
    pattern = torch.nn.functional.pad(pattern, (seen - pattern.shape[-1], 0))
    return torch.cat([pattern, 1 - pattern.sum(-1, keepdim=True)], -1) if sink else pattern


def _cache_argument(model: Any) -> str:
    """transformers ≥ 5.24 names the KV cache argument `cache` (before: `past_key_values`)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _register(module: Any, when: str, record: Callable[[Any, Any], None]):
    if when == "pre":
        return module.register_forward_pre_hook(lambda m, args, kwargs: record(_Inputs(args, kwargs), None),
                                                with_kwargs=True)
    return module.register_forward_hook(
        lambda m, args, kwargs, out: record(_Inputs(args, kwargs), out if isinstance(out, tuple) else (out,)),
        with_kwargs=True)


class _Inputs(tuple):
    """A module's positional inputs (the hidden states first, passed by name or not), its keyword inputs beside."""

    def __new__(cls, args: tuple, kwargs: dict):
        inputs = super().__new__(cls, args if args else (kwargs.get("hidden_states"),))
        inputs.kwargs = kwargs
        return inputs


def _cache_layers(past: Any, latent: set[int]) -> list[tuple[str, dict[str, Any]]]:
    """Each layer's module and state items from a transformers cache, without the batch axis: keys and values
    [kv_head, position, d_head]; a Gated DeltaNet's recurrent state [v_head, d_k, d_v] and its conv cache, or an
    LFM2 conv layer's, as transformers keeps it [channels, K]; a latent-attention layer's latent rows and rope
    keys (held as its keys and values, [1, position, width]) [position, width]; nothing for a KV-shared layer."""
    if not hasattr(past, "layers"):  # before transformers 5
        return [("attn", {"cache_k": k[0], "cache_v": v[0]}) for k, v in zip(past.key_cache, past.value_cache)]
    return [_layer_state(layer, i in latent) for i, layer in enumerate(past.layers)]


def _layer_state(layer: Any, latent: bool) -> tuple[str, dict[str, Any]]:
    recurrent, conv = _state(layer, "recurrent_states"), _state(layer, "conv_states")
    if recurrent is not None:
        return "linear_attn", {"recurrent_state": recurrent[0], "conv_state": conv[0]}
    if conv is not None:
        return "conv", {"conv_state": conv[0]}
    if getattr(layer, "keys", None) is None:  # a KV-shared layer's placeholder
        return "attn", {}
    if latent:
        return "attn", {"cache_latent": layer.keys[0, 0], "cache_rope_key": layer.values[0, 0]}
    return "attn", {"cache_k": layer.keys[0], "cache_v": layer.values[0]}


def _state(layer: Any, name: str):
    """A linear-attention cache layer's first state of that kind (they are kept by state index), or None."""
    return (getattr(layer, name, None) or {}).get(0)


def _attention_layers(model: Any) -> tuple[list[int], set[int], set[int]]:
    """The layers with softmax attention, whose patterns `output_attentions` returns in order; those of them
    with attention sinks, and those with latent attention."""
    layers = model.transformer.h if hasattr(model, "transformer") else model.model.layers
    found = [(i, getattr(layer, "self_attn", None) or getattr(layer, "attn", None)) for i, layer in enumerate(layers)]
    found = [(i, attn) for i, attn in found if attn is not None]
    return ([i for i, _ in found], {i for i, attn in found if hasattr(attn, "sinks")},
            {i for i, attn in found if hasattr(attn, "kv_a_proj_with_mqa")})


def hooks(model: Any) -> list[Tap]:
    config = model.config
    if hasattr(model, "transformer"):
        heads = config.num_attention_heads
        return _gpt2_hooks(model, heads, getattr(config, "head_dim", None) or config.hidden_size // heads)
    base = model.model
    found = [(base.embed_tokens, "post", _output(_name(None, "", "hook_embed"))), *_per_layer_embedding_hooks(base)]
    for index, layer in enumerate(base.layers):
        found += _block_hooks(index, layer, config)
    final = getattr(base, "norm", None) or base.embedding_norm  # LFM2 names its final norm embedding_norm
    return found + [*_norm(None, "ln_final", final), (model.lm_head, "post", _output(LOGITS.text))]


def _name(layer: int | None, module: str, name: str) -> str:
    """The engine's name of the hook (layer, module, name), as a dump's key holds it."""
    return Hook(layer, module, name).text


# -- what a hook records ---------------------------------------------------------------------------------
def _output(name: str, heads: int = 0, d_head: int = 0, index: int = 0) -> Callable:
    def record(rec: Recorder, x, y) -> None:
        rec.record(name, _split(y[index][0], heads, d_head))
    return record


def _input(name: str, heads: int = 0, d_head: int = 0) -> Callable:
    def record(rec: Recorder, x, y) -> None:
        rec.record(name, _split(x[0][0], heads, d_head))
    return record


def _argument(name: str, position: int, keyword: str) -> Callable:
    """A module's input other than the hidden states, passed at `position` or by name."""
    def record(rec: Recorder, x, y) -> None:
        rec.record(name, (x[position] if len(x) > position else x.kwargs[keyword])[0])
    return record


def _flat_output(name: str, index: int = 0) -> Callable:
    """A module that sees the tokens flattened ([tokens, width], a router's): its output as it is."""
    def record(rec: Recorder, x, y) -> None:
        rec.record(name, y[index])
    return record


def _split(x, heads: int, d_head: int):
    return x.reshape(x.shape[0], heads, d_head) if heads else x


def _norm(layer: int | None, norm: str, module: Any, out: str | None = None) -> list[Tap]:
    """TransformerLens's three names of a norm: hook_scale (the divisor), hook_normalized (before the
    affine) and hook_out (after it; `out`: the name the engine gives it, "" for none) of the norm `norm` of `layer`. A LayerNorm centres
    first; an RMSNorm does not. A norm over each head ([pos, head, d_head]) records a scale per head: [pos, head]."""
    centred = isinstance(module, torch.nn.LayerNorm)
    eps = getattr(module, "variance_epsilon", None) or getattr(module, "eps")

    def record(rec: Recorder, x, y) -> None:
        x = x[0][0] - x[0][0].mean(-1, keepdim=True) if centred else x[0][0]
        scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        rows = x.shape[0]
        rec.record(_name(layer, norm, "hook_scale"), scale.reshape(rows, -1))
        rec.record(_name(layer, norm, "hook_normalized"), (x / scale).reshape(rows, -1))
        if out != "":
            rec.record(out or _name(layer, norm, "hook_out"), y[0][0].reshape(rows, -1))
    return [(module, "post", record)]


# -- a decoder layer ---------------------------------------------------------------------------------------
def _block_hooks(b: int, layer: Any, config: Any) -> list[Tap]:
    sandwich = hasattr(layer, "pre_feedforward_layernorm")  # Gemma: a norm after each sublayer too
    found = [(layer, "pre", _input(_name(b, "", "hook_resid_pre"))),
             *_norm(b, "ln1", getattr(layer, "input_layernorm", None) or layer.operator_norm)]
    found += _mixer_hooks(b, layer, config, sandwich)
    if sandwich:
        found += [*_norm(b, "ln1_post", layer.post_attention_layernorm, _name(b, "", "hook_attn_out")),
                  (layer.pre_feedforward_layernorm, "pre", _input(_name(b, "", "hook_resid_mid"))),
                  *_norm(b, "ln2", layer.pre_feedforward_layernorm),
                  *_norm(b, "ln2_post", layer.post_feedforward_layernorm, _name(b, "", "hook_mlp_out"))]
    else:
        ln2 = getattr(layer, "post_attention_layernorm", None) or layer.ffn_norm
        found += [(ln2, "pre", _input(_name(b, "", "hook_resid_mid"))), *_norm(b, "ln2", ln2)]
    ffn = getattr(layer, "mlp", None) or layer.feed_forward
    found += _ffn_hooks(b, ffn, _name(b, "mlp", "hook_out") if sandwich else _name(b, "", "hook_mlp_out"))
    if getattr(layer, "per_layer_input_gate", None) is not None:
        found += _per_layer_input_hooks(b, layer)
    return found + [(layer, "post", _output(_name(b, "", "hook_resid_post")))]


def _mixer_hooks(b: int, layer: Any, config: Any, sandwich: bool) -> list[Tap]:
    if hasattr(layer, "linear_attn"):
        return _deltanet_hooks(b, layer.linear_attn)
    if hasattr(layer, "conv"):
        conv = layer.conv
        return [(conv.in_proj, "post", _output(_name(b, "conv", "hook_in"))),
                (conv.out_proj, "pre", _input(_name(b, "conv", "hook_y"))),
                (conv.out_proj, "post", _output(_name(b, "", "hook_conv_out")))]
    attn = layer.self_attn
    if hasattr(attn, "kv_a_proj_with_mqa"):
        return _latent_attention_hooks(b, attn)
    return _attention_hooks(b, attn, config, _name(b, "attn", "hook_out") if sandwich else _name(b, "", "hook_attn_out"))


def _attention_hooks(b: int, attn: Any, config: Any, out: str) -> list[Tap]:
    """Softmax attention: q, k, v per head, the q/k (and v) norms where the model has them, the mix into o_proj.
    A q_proj twice as wide (Qwen3.5) holds each head's query and its output gate side by side; then what
    o_proj reads is the gated mix (`hook_gated`), not hook_z."""
    heads = config.num_attention_heads
    dh = getattr(attn, "head_dim", None) or config.hidden_size // heads
    kv = attn.k_proj.out_features // dh if hasattr(attn, "k_proj") else 0  # 0: a KV-shared layer (Gemma 4)
    gated = attn.q_proj.out_features == 2 * heads * dh
    o_proj = getattr(attn, "o_proj", None) or attn.out_proj
    found = [(attn.q_proj, "post", _gated_query(b, heads, dh) if gated else
              _output(_name(b, "attn", "hook_q"), heads, dh))]
    if kv:
        found += [(attn.k_proj, "post", _output(_name(b, "attn", "hook_k"), kv, dh))]
    if getattr(attn, "v_proj", None) is not None:
        found += [(attn.v_proj, "post", _output(_name(b, "attn", "hook_v"), kv, dh))]
    for name, normed in (("q", "hook_q_normed"), ("k", "hook_k_normed")):  # Qwen3, Gemma: q_norm; LFM2: q_layernorm
        norm = getattr(attn, f"{name}_norm", None) or getattr(attn, f"{name}_layernorm", None)
        if norm is not None:
            found += _norm(b, f"attn.{name}_norm", norm, _name(b, "attn", normed))
    if getattr(attn, "v_norm", None) is not None:
        found += _norm(b, "attn.v_norm", attn.v_norm, "")  # Gemma 4's, without gain: its output is hook_normalized
    mixed = _input(_name(b, "attn", "hook_gated")) if gated else _input(_name(b, "attn", "hook_z"), heads, dh)
    return found + [(o_proj, "pre", mixed), (o_proj, "post", _output(out))]


def _gated_query(b: int, heads: int, dh: int) -> Callable:
    """Qwen3.5's q_proj: per head [query | gate]; the gate goes through a sigmoid before it multiplies the mix."""
    def record(rec: Recorder, x, y) -> None:
        both = y[0][0].reshape(y[0].shape[1], heads, 2 * dh)
        rec.record(_name(b, "attn", "hook_q"), both[..., :dh])
        rec.record(_name(b, "attn", "hook_gate"), torch.sigmoid(both[..., dh:]).reshape(both.shape[0], -1))
    return record


def _latent_attention_hooks(b: int, attn: Any) -> list[Tap]:
    """DeepSeek's MLA: the query (through its low-rank pair where q_lora_rank is set), the compressed latent with
    the rope key (kv_a_proj_with_mqa), the latent's norm, and the mix of every head into o_proj. Its heads'
    widths differ, so q is recorded stacked [pos, head·width]. With `rope_interleave` (DeepSeek's own) the rope
    columns of q and kv_a are on interleaved pairs, which RoPE writes half-split: they are recorded half-split
    (evens, then odds), as the engine and transformers' cache hold the rotated rope key."""
    nope, rope = attn.qk_nope_head_dim, attn.qk_rope_head_dim
    interleaved = getattr(attn.config, "rope_interleave", False)
    q_starts = [h * (nope + rope) + nope for h in range(attn.num_heads)]
    query = _rope_half_split(_name(b, "attn", "hook_q"), q_starts if interleaved else [], rope)
    kv_a = _rope_half_split(_name(b, "attn", "hook_kv_a"), [attn.kv_lora_rank] * interleaved, rope)
    found = [(attn.kv_a_proj_with_mqa, "post", kv_a),
             *_norm(b, "attn.kv_a_norm", attn.kv_a_layernorm, _name(b, "attn", "hook_latent")),
             (attn.o_proj, "pre", _input(_name(b, "attn", "hook_concat"))),
             (attn.o_proj, "post", _output(_name(b, "", "hook_attn_out")))]
    if attn.q_proj is not None:
        return [(attn.q_proj, "post", query), *found]
    return [(attn.q_a_proj, "post", _output(_name(b, "attn", "hook_q_a"))),
            *_norm(b, "attn.q_a_norm", attn.q_a_layernorm, _name(b, "attn", "hook_q_a_normed")),
            (attn.q_b_proj, "post", query), *found]


def _rope_half_split(name: str, starts: list[int], rope: int) -> Callable:
    """A projection's output with the `rope` columns from each of `starts` reordered evens first, then odds."""
    order = [*range(0, rope, 2), *range(1, rope, 2)]

    def record(rec: Recorder, x, y) -> None:
        out = y[0][0].clone()
        for start in starts:
            out[:, start:start + rope] = y[0][0][:, [start + i for i in order]]
        rec.record(name, out)
    return record


def _deltanet_hooks(b: int, net: Any) -> list[Tap]:
    """Qwen3.5's Gated DeltaNet: its four input projections, what the delta rule read for each value head (the
    gated norm's input, [pos·v_head, d_v] as transformers flattens it), the gated norm and out_proj. The conv
    and the rule themselves are functions, not modules: their results are seen in the state after the pass."""
    def reads(rec: Recorder, x, y) -> None:
        rec.record(_name(b, "linear_attn", "hook_read"), x[0].reshape(-1, net.num_v_heads, net.head_v_dim))

    return [*[(getattr(net, f"in_proj_{name}"), "post", _output(_name(b, "linear_attn", hook))) for name, hook in
              (("qkv", "hook_qkv"), ("z", "hook_in_z"), ("b", "hook_in_b"), ("a", "hook_in_a"))],
            (net.norm, "pre", reads), (net.out_proj, "pre", _input(_name(b, "linear_attn", "hook_gated_norm"))),
            (net.out_proj, "post", _output(_name(b, "", "hook_linear_attn_out")))]


# -- the FFN -----------------------------------------------------------------------------------------------
def _ffn_hooks(b: int, ffn: Any, out: str) -> list[Tap]:
    router = getattr(ffn, "router", None) or getattr(ffn, "gate", None)
    if router is None or not hasattr(ffn, "experts"):
        return _dense_hooks(b, "mlp", ffn, out)
    found = [(router, "post", _flat_output(_name(b, "mlp", "hook_router_logits"))),
             (router, "post", _flat_output(_name(b, "mlp", "hook_topk"), 2)),
             (ffn, "post", _output(_name(b, "", "hook_mlp_out")))]
    shared = getattr(ffn, "shared_experts", None)  # DeepSeek's, ungated
    if shared is None:
        return found
    return found + _dense_hooks(b, "mlp.shared", shared, _name(b, "mlp.shared", "hook_out"))


def _dense_hooks(b: int, p: str, ffn: Any, out: str) -> list[Tap]:
    """A gated MLP (its hooks under module `p` of layer `b`): gate (hook_pre), up (hook_pre_linear), what down reads
    (hook_post), down's output (`out`)."""
    gate, up, down = (ffn.gate_proj, ffn.up_proj, ffn.down_proj) if hasattr(ffn, "gate_proj") else (ffn.w1, ffn.w3,
                                                                                                      ffn.w2)
    return [(gate, "post", _output(_name(b, p, "hook_pre"))), (up, "post", _output(_name(b, p, "hook_pre_linear"))),
            (down, "pre", _input(_name(b, p, "hook_post"))), (down, "post", _output(out))]


# -- Gemma 4's per-layer inputs -----------------------------------------------------------------------------
def _per_layer_embedding_hooks(base: Any) -> list[Tap]:
    """The packed per-layer table's rows, the residual's projection (scaled, before its norm) and that norm."""
    table = getattr(base, "embed_tokens_per_layer", None)
    if table is None:
        return []

    def projected(rec: Recorder, x, y) -> None:
        rec.record(_name(None, "", "hook_per_layer_proj"), x[0][0].reshape(x[0].shape[1], -1))

    norm = base.per_layer_projection_norm
    return [(table, "post", _output(_name(None, "", "hook_per_layer_embed"))), (norm, "pre", projected),
            *_norm(None, "ln_per_layer", norm)]


def _per_layer_input_hooks(b: int, layer: Any) -> list[Tap]:
    """What a Gemma 4 layer adds after its FFN: its slice of the per-layer inputs, gated by the residual,
    projected back and normed."""
    return [(layer, "pre", _argument(_name(b, "", "hook_per_layer_input"), 1, "per_layer_input")),
            (layer.per_layer_input_gate, "pre", _input(_name(b, "", "hook_resid_post_mlp"))),
            (layer.per_layer_input_gate, "post", _output(_name(b, "", "hook_per_layer_gate"))),
            (layer.per_layer_projection, "pre", _input(_name(b, "", "hook_per_layer_gated"))),
            (layer.per_layer_projection, "post", _output(_name(b, "", "hook_per_layer_projected"))),
            *_norm(b, "ln3_post", layer.post_per_layer_input_norm, _name(b, "", "hook_per_layer_out"))]


def _gpt2_hooks(model: Any, heads: int, d_head: int) -> list[Tap]:
    t = model.transformer
    found = [(t.wte, "post", _output(_name(None, "", "hook_embed"))),
             (t.wpe, "post", _output(_name(None, "", "hook_pos_embed")))]
    for b, block in enumerate(t.h):
        found += [(block, "pre", _input(_name(b, "", "hook_resid_pre"))), *_norm(b, "ln1", block.ln_1),
                  (block.attn.c_attn, "post", _qkv(b, heads, d_head)),
                  (block.attn.c_proj, "pre", _input(_name(b, "attn", "hook_z"), heads, d_head)),
                  (block.attn.c_proj, "post", _output(_name(b, "", "hook_attn_out"))),
                  (block.ln_2, "pre", _input(_name(b, "", "hook_resid_mid"))), *_norm(b, "ln2", block.ln_2),
                  (block.mlp.c_fc, "post", _output(_name(b, "mlp", "hook_pre"))),
                  (block.mlp.c_proj, "pre", _input(_name(b, "mlp", "hook_post"))),
                  (block.mlp.c_proj, "post", _output(_name(b, "", "hook_mlp_out"))),
                  (block, "post", _output(_name(b, "", "hook_resid_post")))]
    return found + [*_norm(None, "ln_final", t.ln_f), (model.lm_head, "post", _output(LOGITS.text))]


def _qkv(b: int, heads: int, d_head: int) -> Callable:
    """GPT-2's fused c_attn: q | k | v along the features."""
    def record(rec: Recorder, x, y) -> None:
        for name, part in zip(("hook_q", "hook_k", "hook_v"), y[0][0].split(heads * d_head, dim=-1)):
            rec.record(_name(b, "attn", name), _split(part, heads, d_head))
    return record
