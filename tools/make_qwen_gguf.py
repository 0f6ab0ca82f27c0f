"""Write a Qwen2.5-0.5B-shaped, Q4_K_M-style GGUF (about 400 MB; put it under /tmp, never commit it).

    .venv/bin/python tools/make_qwen_gguf.py /tmp/qwen-0.5b.gguf

qwen2 architecture, 24 layers, hidden 896, 14 query / 2 key-value heads, ffn 4864, tied embedding.
The vocabulary is SmolLM2's real byte-level BPE (its GGUF in ~/.cache/tinyllm-tui) padded with
`[PAD…]` entries to 151 936, as llama.cpp's converter pads Qwen's. Types as llama.cpp's Q4_K_M
picks them: Q4_K, with Q6_K for attn_v / ffn_down in every other layer; rows whose length is not a
multiple of 256 (everything that reads the 896-wide stream) fall back to Q5_0, Q6_K to Q8_0.
The weights are random blocks (tools/gguf_blocks.py) of spread 1/sqrt(fan-in).
"""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from engine.loading.gguf_file import GGUFFile  # noqa: E402
from gguf_blocks import random_blocks  # noqa: E402

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 24, 896, 14, 2, 4864, 151_936
SOURCE = Path.home() / ".cache" / "tinyllm-tui" / "SmolLM2-135M-Instruct.Q4_1.gguf"
FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}
UNUSED = 5  # llama.cpp's token type for padding entries


def kind(preferred: str, row: int) -> str:
    return preferred if row % 256 == 0 else FALLBACK[preferred]


def add_vocabulary(writer: gguf.GGUFWriter, vocab: int = VOCAB) -> None:
    meta = GGUFFile(SOURCE).meta
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = [int(t) for t in meta["tokenizer.ggml.token_type"]]
    padding = range(len(tokens), vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens + [f"[PAD{i}]" for i in padding])
    writer.add_token_types(types + [UNUSED] * len(padding))
    writer.add_token_merges(meta["tokenizer.ggml.merges"])
    writer.add_eos_token_id(int(meta["tokenizer.ggml.eos_token_id"]))
    writer.add_add_bos_token(False)


def tensors(rng: np.random.Generator):
    """(name, shape, type name) of every tensor."""
    kv = HIDDEN // HEADS * KV_HEADS
    yield "token_embd.weight", (VOCAB, HIDDEN), kind("Q6_K", HIDDEN)
    yield "output_norm.weight", (HIDDEN,), "F32"
    for layer in range(LAYERS):
        wide = "Q6_K" if layer % 2 == 0 else "Q4_K"
        block = f"blk.{layer}"
        yield f"{block}.attn_norm.weight", (HIDDEN,), "F32"
        yield f"{block}.ffn_norm.weight", (HIDDEN,), "F32"
        for name, rows in (("attn_q", HIDDEN), ("attn_k", kv), ("attn_v", kv)):
            yield f"{block}.{name}.weight", (rows, HIDDEN), kind(wide if name == "attn_v" else "Q4_K", HIDDEN)
            yield f"{block}.{name}.bias", (rows,), "F32"
        yield f"{block}.attn_output.weight", (HIDDEN, HIDDEN), kind("Q4_K", HIDDEN)
        yield f"{block}.ffn_gate.weight", (FFN, HIDDEN), kind("Q4_K", HIDDEN)
        yield f"{block}.ffn_up.weight", (FFN, HIDDEN), kind("Q4_K", HIDDEN)
        yield f"{block}.ffn_down.weight", (HIDDEN, FFN), kind(wide, FFN)


def main(path: Path) -> None:
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_context_length(32768)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(VOCAB)
    add_vocabulary(writer)
    write_tensors(writer, tensors(rng), _f32_values, rng)


def _f32_values(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    center = 1.0 if name.endswith("norm.weight") else 0.0  # norm gains near 1
    return center + 0.1 * rng.normal(size=shape)


def write_tensors(writer: gguf.GGUFWriter, tensors, f32_values, rng: np.random.Generator) -> None:
    """Each (name, shape, type) of `tensors`: float32 from `f32_values(name, shape, rng)`, else random blocks of that
    quantisation type; then the file."""
    for name, shape, type_name in tensors:
        if type_name == "F32":
            writer.add_tensor(name, f32_values(name, shape, rng).astype(np.float32))
        else:
            data = random_blocks(type_name, shape, 1 / np.sqrt(shape[1]), rng)
            writer.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType[type_name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/qwen-0.5b.gguf"))
