"""Write tests/fixtures/lfm2/: a tiny random LFM2 checkpoint (short-conv and attention layers) and transformers'
true float64 outputs, every layer and every state after every pass.

    /work/refenv/bin/python tools/make_lfm2_fixtures.py

Written with transformers 5.24.0 and torch 2.13.0 (CPU), in the reference environment of make_fixtures.py.
3 layers: conv, full attention (4 query heads of width 6 over 2 kv heads, q/k RMSNorms), conv; hidden 24;
the conv's kernel conv_L_cache = 3 (shorter than the 15-token prompt); the FFN's width from LFM2's own rule
(block_auto_adjust_ff_dim: int(2·40/3) = 26, rounded up to block_multiple_of 8: 32); tied embeddings.

transformers' float64 forward is not float64 throughout: Lfm2RMSNorm computes in float32, the rotary module's
inv_freq is a float32 buffer made at init (and its forward casts to float), and eager attention's softmax is
float32. Each is patched (tools/float64_reference.py; the rotary module is rebuilt after from_pretrained), and
a dispatch-mode counter proves that no operator of the reference passes reads or writes a float32 tensor.

reference.npz: `ids`, `greedy_ids`, `conv_layers`, `attention_layers`; for the prefill `layers` (every layer's
output) and `logits`; for each pass (the prefill's last row, then every cached decode step through
transformers' DynamicCache) `step_logits`, `step_layers`, and the states it leaves: `step_conv_states` (pass ×
conv layer × K × hidden: transformers' conv cache, (hidden, K) per layer, transposed to rows; it keeps K
inputs, of which the next step reads the last K−1), `step_keys` / `step_values` (pass × attention layer ×
positions × kv_heads·head_dim, the cache rows after the q/k norms and RoPE, laid out as the engine's cache_k).
`float32_ops` is the counter's count (0), `ops` how many operators it saw.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from float64_reference import (Float32Counter, counter_sees_float32, eager_attention, rebuild_rotary, rms_norm,  # noqa: E402
                               rotary)
from make_fixtures import OUT, PROMPT, byte_bpe, randomize  # noqa: E402

NEW_TOKENS = 5
SEED = 25
LAYER_TYPES = ["conv", "full_attention", "conv"]
SMALL = dict(hidden_size=24, intermediate_size=40, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=len(LAYER_TYPES), layer_types=LAYER_TYPES, conv_L_cache=3, conv_bias=False,
             block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.0, block_multiple_of=8,
             max_position_embeddings=64, norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
             tie_word_embeddings=True, eos_token_id=0, bos_token_id=None, pad_token_id=None)


def pure_float64() -> None:
    module = importlib.import_module("transformers.models.lfm2.modeling_lfm2")
    module.Lfm2RMSNorm.forward = rms_norm
    module.Lfm2RotaryEmbedding.forward = rotary
    module.eager_attention_forward = eager_attention(module.repeat_kv)


def load(folder: Path):
    from transformers import Lfm2ForCausalLM

    model = Lfm2ForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager").eval()
    rebuild_rotary(model)
    return model


def states(cache, conv_layers: list[int], attention_layers: list[int]) -> tuple[np.ndarray, ...]:
    """The cache's conv states (layer × K × hidden) and K/V rows (layer × positions × kv_heads·head_dim)."""
    conv = np.stack([cache.layers[i].conv_states[0][0].numpy().T for i in conv_layers])
    rows = [[getattr(cache.layers[i], name)[0].transpose(0, 1).flatten(1).numpy() for i in attention_layers]
            for name in ("keys", "values")]
    return conv, np.stack(rows[0]), np.stack(rows[1])


def run(model, ids: list[int]) -> dict[str, np.ndarray]:
    """Prefill, then greedy decoding through transformers' own cache: every pass's logits, layer outputs and
    the states it leaves, under the float32 counter."""
    from transformers import DynamicCache

    types = model.config.layer_types
    conv_layers = [i for i, kind in enumerate(types) if kind == "conv"]
    attention_layers = [i for i, kind in enumerate(types) if kind != "conv"]
    captured = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: captured.append(out[0] if isinstance(out, tuple) else out))
             for layer in model.model.layers]
    cache, feed, passes = DynamicCache(config=model.config), ids, []
    counter = Float32Counter()
    with torch.no_grad(), counter:
        for _ in range(NEW_TOKENS):
            captured.clear()
            logits = model(torch.tensor([feed]), cache=cache, use_cache=True).logits[0]
            conv, keys, values = states(cache, conv_layers, attention_layers)
            passes.append({"logits": logits.numpy(), "layers": np.stack([h[0].numpy() for h in captured]),
                           "conv": conv, "keys": keys, "values": values})
            feed = [int(torch.argmax(logits[-1]))]
    for hook in hooks:
        hook.remove()
    if counter.float32:
        sys.exit(f"float32 operators remain in the reference: {sorted(set(counter.float32))}")
    prefill = passes[0]
    return {"ids": np.array(ids), "greedy_ids": np.array([int(np.argmax(p["logits"][-1])) for p in passes]),
            "conv_layers": np.array(conv_layers), "attention_layers": np.array(attention_layers),
            "layers": prefill["layers"], "logits": prefill["logits"],
            "step_logits": np.stack([p["logits"][-1] for p in passes]),
            "step_layers": np.stack([p["layers"][:, -1] for p in passes]),
            "step_conv_states": np.stack([p["conv"] for p in passes]),
            # the attention caches grow a row a pass: one array per pass
            **{f"step_keys_{n}": p["keys"] for n, p in enumerate(passes)},
            **{f"step_values_{n}": p["values"] for n, p in enumerate(passes)},
            "float32_ops": np.array(len(counter.float32)), "ops": np.array(counter.ops)}


def main() -> None:
    from transformers import Lfm2Config, Lfm2ForCausalLM

    assert counter_sees_float32()
    pure_float64()
    tokenizer = byte_bpe(["<|endoftext|>"])
    folder = OUT / "lfm2"
    folder.mkdir(parents=True, exist_ok=True)
    ids = tokenizer.encode(PROMPT).ids
    torch.manual_seed(SEED)
    model = Lfm2ForCausalLM(Lfm2Config(vocab_size=tokenizer.get_vocab_size(), **SMALL))
    randomize(model, SEED)
    model.save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    ref = run(load(folder), ids)
    np.savez_compressed(folder / "reference.npz", **ref)
    print(f"lfm2: {len(ids)} prompt tokens, {int(ref['ops'])} operators dispatched, {int(ref['float32_ops'])} read "
          f"or wrote float32; greedy {ref['greedy_ids'].tolist()}; conv states {ref['step_conv_states'].shape}")


if __name__ == "__main__":
    main()
