"""Write tests/fixtures/lfm2/: a tiny random LFM2 checkpoint (short-conv and attention layers) and transformers'
true float64 outputs, every layer and every state after every pass.

    /work/refenv/bin/python tools/make_lfm2_fixtures.py

Written with transformers 5.24.0 and torch 2.13.0 (CPU), in the reference environment of make_fixtures.py.
3 layers: conv, full attention (4 query heads of width 8 over 2 kv heads, q/k RMSNorms), conv; hidden 32 (every
matrix's rows a whole number of Q8_0 blocks); the conv's kernel conv_L_cache = 3 (shorter than the 20-token
prompt); the FFN's width from LFM2's own rule (block_auto_adjust_ff_dim: int(2·48/3) = 32, rounded up to
block_multiple_of 8: 32); tied embeddings.

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

gguf-lfm2/lfm2.gguf: the checkpoint as llama.cpp's own converter writes it (convert_hf_to_gguf.py --outtype f32, from the
llama-cpp-python 0.3.36 sdist at LLAMA_CPP), its tokenizer's pre-tokenizer named "gpt-2" (a byte-level BPE like
GPT-2's, which the converter does not know by its hash). The converter squeezes conv.conv's (hidden, 1, K) to
shortconv.conv (hidden, K) and keeps every tensor float32, so it computes what the folder computes.
gguf-lfm2/lfm2.q8_0.gguf: the converter's --outtype q8_0 (every matrix Q8_0, the embedding included; the conv
kernels and the norms F32, as it keeps them), and gguf-lfm2/reference.q8_0.npz: the same reference
run with the file's tensors as gguf-py dequantizes them copied into the transformers model.

hf_generation.safetensors: the same generation recorded by `tinyllm_tui.record_hf` (forward hooks under
TransformerLens's names, every layer's state after each pass as transformers' cache holds it: conv_state
[hidden, K]), what `check --against` reads; the prompt (its first DUMP_TOKENS ids) is its metadata `ids`.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from float64_reference import (counter_sees_float32, eager_attention, greedy_passes, rebuild_rotary,  # noqa: E402
                               rms_norm, rotary)
from make_fixtures import OUT, PROMPT, byte_bpe, randomize  # noqa: E402

from tinyllm_tui import record_hf  # noqa: E402

LLAMA_CPP = Path("/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp")
CONVERT = """import runpy, sys
sys.path.insert(0, {llama!r})
from conversion import base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = ["convert_hf_to_gguf.py", {folder!r}, "--outtype", {outtype!r}, "--outfile", {out!r}]
runpy.run_path({llama!r} + "/convert_hf_to_gguf.py", run_name="__main__")
"""
NEW_TOKENS = 5
SEED = 25
LAYER_TYPES = ["conv", "full_attention", "conv"]
DUMP_TOKENS = 8  # the record_hf dump's prompt: short, for a small file
SMALL = dict(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
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
    types = model.config.layer_types
    conv_layers = [i for i, kind in enumerate(types) if kind == "conv"]
    attention_layers = [i for i, kind in enumerate(types) if kind != "conv"]

    def read(cache):
        return dict(zip(("conv", "keys", "values"), states(cache, conv_layers, attention_layers)))

    passes, counter = greedy_passes(model, ids, NEW_TOKENS, read)
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


# GGUF tensor (under blk.N) -> the transformers parameter (under model.layers.N)
GGUF_TO_HF = {"attn_norm": "operator_norm", "ffn_norm": "ffn_norm", "ffn_gate": "feed_forward.w1",
              "ffn_up": "feed_forward.w3", "ffn_down": "feed_forward.w2", "attn_q": "self_attn.q_proj",
              "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.out_proj",
              "attn_q_norm": "self_attn.q_layernorm", "attn_k_norm": "self_attn.k_layernorm",
              "shortconv.in_proj": "conv.in_proj", "shortconv.out_proj": "conv.out_proj", "shortconv.conv": "conv.conv"}
OUTSIDE = {"token_embd.weight": "model.embed_tokens.weight", "token_embd_norm.weight": "model.embedding_norm.weight"}


def convert(folder: Path, out: Path, outtype: str = "f32") -> None:
    """llama.cpp's converter on `folder`, in a process of its own (its gguf-py before the installed gguf)."""
    code = CONVERT.format(llama=str(LLAMA_CPP), folder=str(folder), out=str(out), outtype=outtype)
    env = os.environ | {"PYTHONPATH": str(LLAMA_CPP / "gguf-py")}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)


def with_gguf_weights(model, path: Path):
    """`model` with every parameter replaced by the GGUF file's tensor as gguf-py dequantizes it."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    params, assigned = dict(model.named_parameters()), set()
    with torch.no_grad():
        for tensor in GGUFReader(path).tensors:
            name = OUTSIDE.get(tensor.name)
            if name is None:
                _, layer, rest = tensor.name.split(".", 2)
                name = f"model.layers.{layer}.{GGUF_TO_HF[rest.rsplit('.', 1)[0]]}.weight"
            values = dequantize(tensor.data, tensor.tensor_type).astype(np.float64)
            params[name].copy_(torch.from_numpy(values.reshape(params[name].shape)))
            assigned.add(name)
    assert assigned == set(params), set(params) - assigned  # (the tied head is the embedding)
    return model


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
    recorded = record_hf(load(folder), ids[:DUMP_TOKENS], NEW_TOKENS)
    save_file(recorded.arrays, folder / "hf_generation.safetensors", metadata={"ids": json.dumps(ids[:DUMP_TOKENS])})
    gguf_folder = OUT / "gguf-lfm2"
    gguf_folder.mkdir(exist_ok=True)
    convert(folder, gguf_folder / "lfm2.gguf")
    convert(folder, gguf_folder / "lfm2.q8_0.gguf", "q8_0")
    quantized = run(with_gguf_weights(load(folder), gguf_folder / "lfm2.q8_0.gguf"), ids)
    np.savez_compressed(gguf_folder / "reference.q8_0.npz", **quantized)
    print(f"lfm2.q8_0.gguf: greedy {quantized['greedy_ids'].tolist()}, its logits "
          f"{np.abs(quantized['logits'] - ref['logits']).max():.2g} from the float32 file's")
    print(f"lfm2: {len(ids)} prompt tokens, {int(ref['ops'])} operators dispatched, {int(ref['float32_ops'])} read "
          f"or wrote float32; greedy {ref['greedy_ids'].tolist()}; conv states {ref['step_conv_states'].shape}")


if __name__ == "__main__":
    main()
