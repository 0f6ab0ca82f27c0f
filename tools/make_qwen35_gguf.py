"""Write a Qwen3.5-0.8B-shaped, Q4_K-style GGUF (about 500 MB; put it under /tmp, never commit it).

    .venv/bin/python tools/make_qwen35_gguf.py /tmp/qwen35-0.8b.gguf

qwen35 architecture as llama.cpp's converter writes it: 24 layers of width 1024, every fourth one gated full
attention (8 query / 2 key-value heads of 256, RoPE on 64 features), the others Gated DeltaNet (16 key heads and
16 value heads of 128, a conv of 4 taps), FFN 3584, a tied 248 320-token embedding. The vocabulary is SmolLM2's
byte-level BPE padded with `[PAD…]` entries (tools/make_qwen_gguf.py). Types as a Q4_K_M mix picks them: Q4_K,
Q6_K for attn_v / ffn_down in every other layer and for the embedding; norms, the conv, A and dt in F32. The
weights are random blocks (tools/gguf_blocks.py) of spread 1/sqrt(fan-in); the norm gains are stored as 1 + w
(near 1), A as −exp(A_log).
"""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_qwen_gguf import add_vocabulary, write_tensors  # noqa: E402

ARCH = "qwen35"
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, ROPE_DIMS, FFN, VOCAB = 24, 1024, 8, 2, 256, 64, 3584, 248_320
K_HEADS, V_HEADS, D_K, D_V, KERNEL = 16, 16, 128, 128, 4
RECURRENT = [(i + 1) % 4 != 0 for i in range(LAYERS)]


def tensors():
    """(name, shape [rows, row], type name) of every tensor."""
    yield "token_embd.weight", (VOCAB, HIDDEN), "Q6_K"
    yield "output_norm.weight", (HIDDEN,), "F32"
    channels, values = 2 * K_HEADS * D_K + V_HEADS * D_V, V_HEADS * D_V
    for layer, recurrent in enumerate(RECURRENT):
        wide, b = "Q6_K" if layer % 2 == 0 else "Q4_K", f"blk.{layer}"
        yield f"{b}.attn_norm.weight", (HIDDEN,), "F32"
        yield f"{b}.post_attention_norm.weight", (HIDDEN,), "F32"
        if recurrent:
            yield from ((f"{b}.attn_qkv.weight", (channels, HIDDEN), "Q4_K"), (f"{b}.attn_gate.weight", (values, HIDDEN), "Q4_K"),
                        (f"{b}.ssm_alpha.weight", (V_HEADS, HIDDEN), "Q4_K"), (f"{b}.ssm_beta.weight", (V_HEADS, HIDDEN), "Q4_K"),
                        (f"{b}.ssm_conv1d.weight", (channels, KERNEL), "F32"), (f"{b}.ssm_a", (V_HEADS,), "F32"),
                        (f"{b}.ssm_dt.bias", (V_HEADS,), "F32"), (f"{b}.ssm_norm.weight", (D_V,), "F32"),
                        (f"{b}.ssm_out.weight", (HIDDEN, values), wide))
        else:
            yield from ((f"{b}.attn_q.weight", (2 * HEADS * HEAD_DIM, HIDDEN), "Q4_K"),
                        (f"{b}.attn_k.weight", (KV_HEADS * HEAD_DIM, HIDDEN), "Q4_K"),
                        (f"{b}.attn_v.weight", (KV_HEADS * HEAD_DIM, HIDDEN), wide),
                        (f"{b}.attn_q_norm.weight", (HEAD_DIM,), "F32"), (f"{b}.attn_k_norm.weight", (HEAD_DIM,), "F32"),
                        (f"{b}.attn_output.weight", (HIDDEN, HEADS * HEAD_DIM), "Q4_K"))
        yield f"{b}.ffn_gate.weight", (FFN, HIDDEN), "Q4_K"
        yield f"{b}.ffn_up.weight", (FFN, HIDDEN), "Q4_K"
        yield f"{b}.ffn_down.weight", (HIDDEN, FFN), wide


def f32_values(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if name.endswith(".ssm_a"):
        return -np.exp(rng.uniform(0.0, 2.7, shape))  # −exp(A_log), A_log = log(uniform(1, 16)) as transformers inits
    if name.endswith("ssm_dt.bias"):
        return rng.uniform(-4.0, -2.0, shape)
    if name.endswith("ssm_conv1d.weight"):
        return rng.normal(0.0, 1 / np.sqrt(KERNEL), shape)
    return 1.0 + 0.1 * rng.normal(size=shape)  # a norm's 1 + w


def main(path: Path) -> None:
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), ARCH)
    writer.add_context_length(32768)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_freq_base(10_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_uint32(f"{ARCH}.rope.dimension_count", ROPE_DIMS)
    writer.add_array(f"{ARCH}.rope.dimension_sections", [11, 11, 10, 0])
    for key, value in (("conv_kernel", KERNEL), ("state_size", D_K), ("group_count", K_HEADS),
                       ("time_step_rank", V_HEADS), ("inner_size", V_HEADS * D_V)):
        writer.add_uint32(f"{ARCH}.ssm.{key}", value)
    writer.add_array(f"{ARCH}.attention.recurrent_layers", RECURRENT)
    writer.add_uint32(f"{ARCH}.full_attention_interval", 4)
    add_vocabulary(writer, VOCAB)
    write_tensors(writer, tensors(), f32_values, rng)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/qwen35-0.8b.gguf"))
