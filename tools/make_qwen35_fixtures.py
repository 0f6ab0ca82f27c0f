"""Write tests/fixtures/qwen3_5/: a tiny random Qwen3.5 text model (Qwen3_5ForCausalLM) and transformers' true
float64 outputs.

    /work/refenv/bin/python tools/make_qwen35_fixtures.py

Written with transformers 5.24.0 and torch 2.13.0 (CPU), in the reference environment of make_fixtures.py.
3 layers: Gated DeltaNet, Gated DeltaNet, gated full attention (`layer_types`); the DeltaNet has 2 key heads of
width 8 serving 4 value heads of width 6 and a conv kernel of 3; the attention 4 heads of width 8 over 2 kv
heads, RoPE on a quarter of each head (partial_rotary_factor 0.25 of 16: 4 features). The delta rule's chunked
form runs in chunks of CHUNK tokens (transformers' default is 64), shorter than the prompt, so the state is
carried across chunk boundaries in the reference too.

transformers' float64 forward is not float64 throughout: its RMSNorm (1 + w) and the gated RMSNorm compute in
float32, the delta rule casts q, k, v, β and g to float32 (`.to(torch.float32)` in torch_chunk_gated_delta_rule
and torch_recurrent_gated_delta_rule), the decay reads `A_log.float()` and `a.float()`, eager attention's softmax
is float32 and the rotary module's inv_freq is a float32 buffer. The norms and the rotary embedding are patched,
the two delta-rule functions run transformers' own code with `torch.float32` meaning float64, `Tensor.float()`
means float64 during the passes, and a dispatch-mode counter proves that no operator of the reference passes
reads or writes a float32 tensor; the script stops if one does.

reference.npz: `ids`, `greedy_ids`, `chunk`; for the prefill `layers` (every layer's output) and `logits`; for each
pass (the prefill, then every cached decode step through transformers' DynamicCache) `step_logits`, `step_layers`
and, per linear-attention layer, `step_recurrent` (pass × layer × v_heads × d_k × d_v) and `step_conv` (pass ×
layer × channels × K: transformers keeps K columns, the newest last). `float32_ops` is the counter's count (0),
`ops` how many operators it saw.
"""

from __future__ import annotations

import functools
import sys
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from float64_reference import Float32Counter, counter_sees_float32, eager_attention, gemma_rms_norm  # noqa: E402
from make_fixtures import OUT, PROMPT, byte_bpe, randomize  # noqa: E402

NEW_TOKENS = 5
SEED = 7
CHUNK = 4
LAYER_TYPES = ["linear_attention", "linear_attention", "full_attention"]


def config(vocab_size: int):
    import transformers

    return transformers.Qwen3_5TextConfig(
        vocab_size=vocab_size, hidden_size=24, intermediate_size=40, num_hidden_layers=len(LAYER_TYPES),
        layer_types=LAYER_TYPES, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=6,
        linear_conv_kernel_dim=3, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        eos_token_id=0)


# -- float64 everywhere -------------------------------------------------------------------------------
def _gated_norm(self, x, gate):
    """Qwen3_5RMSNormGated: w · x / rms(x) · SiLU(gate), in the input's dtype."""
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight * x * torch.nn.functional.silu(gate)


def _rotary(self, x, position_ids):
    """Qwen3_5TextRotaryEmbedding for text (the three mrope position rows are equal), in float64 (its position
    ids have an mrope axis first, which float64_reference.rotary does not expect)."""
    positions = position_ids[0] if position_ids.ndim == 3 else position_ids
    freqs = positions[..., None].to(torch.float64) * self.inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rebuild_rotary(model) -> None:
    """inv_freq over the rotated quarter of each head in float64 (transformers makes it float32 at init, and
    from_pretrained keeps that); float64_reference.rebuild_rotary's turns whole heads."""
    rotary, config = model.model.rotary_emb, model.config
    dim = int(config.head_dim * config.rope_parameters["partial_rotary_factor"])
    ours = 1.0 / config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    assert torch.allclose(ours.float(), rotary.inv_freq.float(), rtol=1e-6, atol=0)
    rotary.inv_freq = ours


class _Float64Torch(types.ModuleType):
    """torch, except that `torch.float32` is float64: the delta rule's own code with its casts made harmless."""

    float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


def _as_float64(function):
    original = getattr(function, "__wrapped__", function)
    namespace = dict(original.__globals__, torch=_Float64Torch("torch"))
    return types.FunctionType(original.__code__, namespace, original.__name__, original.__defaults__)


def pure_float64() -> None:
    from transformers.models.qwen3_5 import modeling_qwen3_5 as module

    module.Qwen3_5RMSNorm.forward = gemma_rms_norm  # x / rms(x) · (1 + w), as Gemma's
    module.Qwen3_5RMSNormGated.forward = _gated_norm
    module.Qwen3_5TextRotaryEmbedding.forward = _rotary
    module.eager_attention_forward = eager_attention(module.repeat_kv)
    module.torch_chunk_gated_delta_rule = functools.partial(_as_float64(module.torch_chunk_gated_delta_rule),
                                                            chunk_size=CHUNK)
    module.torch_recurrent_gated_delta_rule = _as_float64(module.torch_recurrent_gated_delta_rule)


class _TensorFloatIsDouble:
    """During the passes `Tensor.float()` (the decay's `A_log.float()`, `a.float()`) gives float64."""

    def __enter__(self):
        self.saved = torch.Tensor.float
        torch.Tensor.float = lambda tensor, *args, **kwargs: tensor.to(torch.float64)

    def __exit__(self, *exc):
        torch.Tensor.float = self.saved


# -- the reference ---------------------------------------------------------------------------------------
def run(model, ids: list[int]) -> dict[str, np.ndarray]:
    """Prefill, then greedy decoding through transformers' own cache: every pass's logits, layer outputs and
    the linear-attention layers' states, under the float32 counter."""
    from transformers import DynamicCache

    captured = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: captured.append(out[0] if isinstance(out, tuple) else out))
             for layer in model.model.layers]
    linear = [i for i, kind in enumerate(LAYER_TYPES) if kind == "linear_attention"]
    cache, feed, passes = DynamicCache(config=model.config), ids, []
    counter = Float32Counter()
    with torch.no_grad(), _TensorFloatIsDouble(), counter:
        for _ in range(NEW_TOKENS):
            captured.clear()
            logits = model(torch.tensor([feed]), cache=cache, use_cache=True).logits[0]
            passes.append({"logits": logits.numpy(), "layers": np.stack([h[0].numpy() for h in captured]),
                           "recurrent": np.stack([cache.layers[i].recurrent_states[0][0].numpy() for i in linear]),
                           "conv": np.stack([cache.layers[i].conv_states[0][0].numpy() for i in linear])})
            feed = [int(torch.argmax(logits[-1]))]
    for hook in hooks:
        hook.remove()
    if counter.float32:
        sys.exit(f"float32 operators remain in the reference: {sorted(set(counter.float32))}")
    prefill = passes[0]
    return {"ids": np.array(ids), "greedy_ids": np.array([int(np.argmax(p["logits"][-1])) for p in passes]),
            "layers": prefill["layers"], "logits": prefill["logits"], "chunk": np.array(CHUNK),
            "linear_layers": np.array(linear),
            "step_logits": np.stack([p["logits"][-1] for p in passes]),
            "step_layers": np.stack([p["layers"][:, -1] for p in passes]),
            "step_recurrent": np.stack([p["recurrent"] for p in passes]),
            "step_conv": np.stack([p["conv"] for p in passes]),
            "float32_ops": np.array(len(counter.float32)), "ops": np.array(counter.ops)}


def main() -> None:
    import transformers

    assert counter_sees_float32()
    pure_float64()
    tokenizer = byte_bpe(["<|endoftext|>"])
    folder = OUT / "qwen3_5"
    folder.mkdir(parents=True, exist_ok=True)
    ids = tokenizer.encode(PROMPT).ids
    assert len(ids) > 2 * CHUNK, "the prompt must cross chunk boundaries"
    torch.manual_seed(SEED)
    model = transformers.Qwen3_5ForCausalLM(config(tokenizer.get_vocab_size()))
    randomize(model, SEED)
    model.save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    reloaded = transformers.Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.float64,
                                                              attn_implementation="eager").eval()
    rebuild_rotary(reloaded)
    ref = run(reloaded, ids)
    np.savez_compressed(folder / "reference.npz", **ref)
    print(f"qwen3_5: {len(ids)} prompt tokens, {int(ref['ops'])} operators dispatched, {int(ref['float32_ops'])} "
          f"read or wrote float32; greedy {ref['greedy_ids'].tolist()}")


if __name__ == "__main__":
    main()
