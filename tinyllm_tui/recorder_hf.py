"""Forward hooks on a transformers causal LM that record a greedy generation (see recorder.record_hf).

Imported only when a model is given, so torch is never a dependency of the project. Three module
layouts are known: Llama-like (`model.model.layers`: llama, qwen2, mistral), LFM2 (short-conv and attention
layers) and GPT-2 (`model.transformer.h`). Every array loses its batch axis of 1.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol

import torch


class Recorder(Protocol):
    """What the hooks write into: tinyllm_tui.recorder.Recorder (named here, not imported: it imports this module)."""

    def prefill(self) -> Recorder: ...

    def decode(self, round_: int) -> Recorder: ...

    def record(self, name: str, array: Any) -> None: ...


Hook = tuple[Any, str, Callable]  # module, "pre" | "post", what to record from (input, output)


def generate_recorded(model: Any, ids: list[int], max_new_tokens: int, rec: Recorder) -> Recorder:
    handles = [_register(module, when, lambda x, y, fn=fn: fn(rec, x, y)) for module, when, fn in hooks(model)]
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
                for layer, pattern in zip(_attention_layers(model), out.attentions or ()):
                    rec.record(f"blocks.{layer}.attn.hook_pattern", pattern[0])
                for layer, (name, state) in enumerate(_cache_layers(past)):
                    for item, array in state.items():
                        rec.record(f"blocks.{layer}.{name}.{item}", array[0])
                tokens = out.logits[:, -1:].argmax(-1)
    finally:
        for handle in handles:
            handle.remove()
    return rec


def _cache_argument(model: Any) -> str:
    """transformers ≥ 5.24 names the KV cache argument `cache` (before: `past_key_values`)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _register(module: Any, when: str, record: Callable[[Any, Any], None]):
    if when == "pre":
        return module.register_forward_pre_hook(
            lambda m, args, kwargs: record(_first(args, kwargs), None), with_kwargs=True)
    return module.register_forward_hook(lambda m, args, kwargs, out: record(_first(args, kwargs), _first((out,), {})),
                                        with_kwargs=True)


def _first(args: tuple, kwargs: dict) -> Any:
    """The hidden states a module was called with (or returned: a decoder layer may return a tuple)."""
    value = args[0] if args else kwargs["hidden_states"]
    return value[0] if isinstance(value, tuple) else value


def _cache_layers(past: Any) -> list[tuple[str, dict[str, Any]]]:
    """Each layer's module and state items from a transformers cache: keys and values, [batch, kv_head, position,
    d_head]; an LFM2 conv layer's conv state as transformers keeps it, [batch, channels, K]."""
    if not hasattr(past, "layers"):  # before transformers 5
        return [("attn", {"cache_k": k, "cache_v": v}) for k, v in zip(past.key_cache, past.value_cache)]
    return [("conv", {"conv_state": layer.conv_states[0]}) if hasattr(layer, "conv_states") else
            ("attn", {"cache_k": layer.keys, "cache_v": layer.values}) for layer in past.layers]


def _attention_layers(model: Any) -> list[int]:
    """The layers with softmax attention, whose patterns `output_attentions` returns in order."""
    layers = model.transformer.h if hasattr(model, "transformer") else model.model.layers
    return [i for i, layer in enumerate(layers) if hasattr(layer, "self_attn") or hasattr(layer, "attn")]


def hooks(model: Any) -> list[Hook]:
    config = model.config
    heads = config.num_attention_heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // heads
    if hasattr(model, "transformer"):
        return _gpt2_hooks(model, heads, d_head)
    if config.model_type == "lfm2":
        return _lfm2_hooks(model, heads, config.num_key_value_heads, d_head)
    return _llama_hooks(model, heads, getattr(config, "num_key_value_heads", heads), d_head)


def _output(name: str, heads: int = 0, d_head: int = 0) -> Callable:
    def record(rec: Recorder, x, y) -> None:
        rec.record(name, _split(y[0], heads, d_head))
    return record


def _input(name: str, heads: int = 0, d_head: int = 0) -> Callable:
    def record(rec: Recorder, x, y) -> None:
        rec.record(name, _split(x[0], heads, d_head))
    return record


def _split(x, heads: int, d_head: int):
    return x.reshape(x.shape[0], heads, d_head) if heads else x


def _norm(prefix: str, module: Any) -> list[Hook]:
    """TransformerLens's three names of a norm: hook_scale (the divisor), hook_normalized (before the
    affine) and hook_out (after it). A LayerNorm centres first; an RMSNorm does not."""
    centred = isinstance(module, torch.nn.LayerNorm)
    eps = getattr(module, "variance_epsilon", None) or getattr(module, "eps")

    def record(rec: Recorder, x, y) -> None:
        x = x[0] - x[0].mean(-1, keepdim=True) if centred else x[0]
        scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        rec.record(f"{prefix}.hook_scale", scale)
        rec.record(f"{prefix}.hook_normalized", x / scale)
        rec.record(f"{prefix}.hook_out", y[0])
    return [(module, "post", record)]


def _llama_hooks(model: Any, heads: int, kv_heads: int, d_head: int) -> list[Hook]:
    base = model.model
    found = [(base.embed_tokens, "post", _output("hook_embed"))]
    for index, layer in enumerate(base.layers):
        b, attn, mlp = f"blocks.{index}.", layer.self_attn, layer.mlp
        found += [(layer, "pre", _input(b + "hook_resid_pre")), *_norm(b + "ln1", layer.input_layernorm),
                  (attn.q_proj, "post", _output(b + "attn.hook_q", heads, d_head)),
                  (attn.k_proj, "post", _output(b + "attn.hook_k", kv_heads, d_head)),
                  (attn.v_proj, "post", _output(b + "attn.hook_v", kv_heads, d_head)),
                  (attn.o_proj, "pre", _input(b + "attn.hook_z", heads, d_head)),
                  (attn.o_proj, "post", _output(b + "hook_attn_out")),
                  (layer.post_attention_layernorm, "pre", _input(b + "hook_resid_mid")),
                  *_norm(b + "ln2", layer.post_attention_layernorm),
                  (mlp.gate_proj, "post", _output(b + "mlp.hook_pre")),
                  (mlp.up_proj, "post", _output(b + "mlp.hook_pre_linear")),
                  (mlp.down_proj, "pre", _input(b + "mlp.hook_post")),
                  (mlp.down_proj, "post", _output(b + "hook_mlp_out")),
                  (layer, "post", _output(b + "hook_resid_post"))]
    return found + [*_norm("ln_final", base.norm), (model.lm_head, "post", _output("unembed.hook_out"))]


def _lfm2_hooks(model: Any, heads: int, kv_heads: int, d_head: int) -> list[Hook]:
    """LFM2's layers: a short conv (its in_proj, C-gated output and out_proj; its conv runs on the conv module's
    weight, not as a module call) or GQA attention, then the SwiGLU feed_forward (w1 gate, w3 up, w2 down)."""
    base = model.model
    found = [(base.embed_tokens, "post", _output("hook_embed"))]
    for index, layer in enumerate(base.layers):
        b, ffn = f"blocks.{index}.", layer.feed_forward
        found += [(layer, "pre", _input(b + "hook_resid_pre")), *_norm(b + "ln1", layer.operator_norm)]
        if hasattr(layer, "self_attn"):
            attn = layer.self_attn
            found += [(attn.q_proj, "post", _output(b + "attn.hook_q", heads, d_head)),
                      (attn.k_proj, "post", _output(b + "attn.hook_k", kv_heads, d_head)),
                      (attn.v_proj, "post", _output(b + "attn.hook_v", kv_heads, d_head)),
                      (attn.out_proj, "pre", _input(b + "attn.hook_z", heads, d_head)),
                      (attn.out_proj, "post", _output(b + "hook_attn_out"))]
        else:
            conv = layer.conv
            found += [(conv.in_proj, "post", _output(b + "conv.hook_in")),
                      (conv.out_proj, "pre", _input(b + "conv.hook_y")),
                      (conv.out_proj, "post", _output(b + "hook_conv_out"))]
        found += [(layer.ffn_norm, "pre", _input(b + "hook_resid_mid")), *_norm(b + "ln2", layer.ffn_norm),
                  (ffn.w1, "post", _output(b + "mlp.hook_pre")), (ffn.w3, "post", _output(b + "mlp.hook_pre_linear")),
                  (ffn.w2, "pre", _input(b + "mlp.hook_post")), (ffn.w2, "post", _output(b + "hook_mlp_out")),
                  (layer, "post", _output(b + "hook_resid_post"))]
    return found + [*_norm("ln_final", base.embedding_norm), (model.lm_head, "post", _output("unembed.hook_out"))]


def _gpt2_hooks(model: Any, heads: int, d_head: int) -> list[Hook]:
    t = model.transformer
    found = [(t.wte, "post", _output("hook_embed")), (t.wpe, "post", _output("hook_pos_embed"))]
    for index, block in enumerate(t.h):
        b = f"blocks.{index}."
        found += [(block, "pre", _input(b + "hook_resid_pre")), *_norm(b + "ln1", block.ln_1),
                  (block.attn.c_attn, "post", _qkv(b + "attn.", heads, d_head)),
                  (block.attn.c_proj, "pre", _input(b + "attn.hook_z", heads, d_head)),
                  (block.attn.c_proj, "post", _output(b + "hook_attn_out")),
                  (block.ln_2, "pre", _input(b + "hook_resid_mid")), *_norm(b + "ln2", block.ln_2),
                  (block.mlp.c_fc, "post", _output(b + "mlp.hook_pre")),
                  (block.mlp.c_proj, "pre", _input(b + "mlp.hook_post")),
                  (block.mlp.c_proj, "post", _output(b + "hook_mlp_out")),
                  (block, "post", _output(b + "hook_resid_post"))]
    return found + [*_norm("ln_final", t.ln_f), (model.lm_head, "post", _output("unembed.hook_out"))]


def _qkv(prefix: str, heads: int, d_head: int) -> Callable:
    """GPT-2's fused c_attn: q | k | v along the features."""
    def record(rec: Recorder, x, y) -> None:
        for name, part in zip("qkv", y[0].split(heads * d_head, dim=-1)):
            rec.record(f"{prefix}hook_{name}", _split(part, heads, d_head))
    return record
