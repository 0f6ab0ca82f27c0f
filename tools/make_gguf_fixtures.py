"""Write tests/fixtures/gguf-mixed-llama/ and gguf-mixed-qwen2/: GGUFs whose matrices mix Q2_K, Q3_K,
Q4_K, Q5_K, Q6_K, Q5_0, Q5_1 and Q8_0, and gguf-qwen3/, gguf-gemma2/, gguf-gemma3/ (Q8_0 matrices,
Gemma's sliding window 4), with transformers' float64 references.

    /work/refenv/bin/python tools/make_gguf_fixtures.py

gguf-py quantizes the legacy types (Q5_0, Q5_1, Q8_0) but not the K-quants, so K-quant tensors are
random blocks whose f16 scales are set to give weights of order 1/sqrt(fan-in): the model *is*
whatever the file decodes to, and transformers reads the same file (its own GGUF loader,
dequantized, unpermuted, as a float64 model). The llama and gemma3 files carry SentencePiece tokenizers
(`tokenizer.ggml.model = llama`: scores, byte-fallback `<0x..>` pieces, no merges; transformers reads
Gemma's its own way), the others a byte-level BPE one with qwen2's pre-tokenizer; reference.npz holds transformers' ids for TEXTS
beside the model references (every layer, the logits, a greedy cached generation; for the sliding-
window architectures, each step recomputed over the whole sequence, as transformers' cache keeps
only the window).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from gguf_blocks import random_blocks  # noqa: E402
from make_fixtures import CORPUS, NEW_TOKENS, PROMPT, byte_bpe, pure_float64, recomputed, reference  # noqa: E402

OUT = ROOT / "tests" / "fixtures"
TEXTS = ["The cat sat on the mat.", "  two leading spaces\nand a newline", "naïve café 日本語 🙂 x²",
         "Keys and values are cached; queries read them.", ""]
TYPES = {  # each matrix's type; every one of the eight appears in each file
    "llama": {"attn_q": "Q2_K", "attn_k": "Q3_K", "attn_v": "Q4_K", "attn_output": "Q5_K", "ffn_gate": "Q6_K",
              "ffn_up": "Q5_0", "ffn_down": "Q5_1", "token_embd": "Q8_0", "output": "Q4_K"},
    "qwen2": {"attn_q": "Q5_0", "attn_k": "Q5_1", "attn_v": "Q8_0", "attn_output": "Q2_K", "ffn_gate": "Q3_K",
              "ffn_up": "Q4_K", "ffn_down": "Q5_K", "token_embd": "Q6_K"},
}
SHAPES = {  # hidden, heads, kv heads, head dim, ffn: K-quant rows need multiples of 256; transformers reads
    "llama": (256, 4, 2, 64, 256),  # no qwen3 head_dim nor Gemma query_pre_attn_scalar from a GGUF, so
    "qwen2": (256, 4, 2, 64, 256),  # those take its defaults: 128 and 256
    "qwen3": (256, 2, 1, 128, 256),
    "gemma2": (128, 2, 1, 256, 256),
    "gemma3": (128, 2, 1, 256, 256),
}
WINDOW = 4  # Gemma's sliding window: shorter than the prompt
SENTENCEPIECE = {"llama": ["<unk>", "<s>", "</s>"], "gemma3": ["<pad>", "<eos>", "<bos>", "<unk>"]}  # their specials


def tensor(kind: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    import gguf

    if kind.endswith("_K"):
        return random_blocks(kind, shape, 1 / np.sqrt(shape[1]), rng)
    return gguf.quants.quantize(rng.normal(0, 1 / np.sqrt(shape[1]), shape).astype(np.float32),
                                gguf.GGMLQuantizationType[kind])


def sentencepiece_vocab(specials: list[str]) -> tuple[list[str], list[float], list[int]]:
    """The special pieces (<unk> unknown, the others control), the 256 byte pieces, then BPE pieces over
    `▁`-marked text, scored by rank, and a piece of two spaces spelled as such (as Gemma's files do)."""
    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    model.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=200, show_progress=False))
    pieces = [p for p, _ in sorted(model.get_vocab().items(), key=lambda item: item[1])] + ["  "]
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0] * (len(specials) + 256) + [-float(rank) for rank in range(len(pieces))]
    types = [2 if t == "<unk>" else 3 for t in specials] + [6] * 256 + [1] * len(pieces)
    return tokens, scores, types


def add_tokenizer(writer, arch: str) -> int:
    """llama and gemma3: SentencePiece; the others byte-level BPE with qwen2's pre-tokenizer. Returns the size."""
    if arch in SENTENCEPIECE:
        specials = SENTENCEPIECE[arch]
        tokens, scores, types = sentencepiece_vocab(specials)
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_unk_token_id(tokens.index("<unk>"))
        writer.add_bos_token_id(tokens.index(specials[1] if arch == "llama" else "<bos>"))
        writer.add_eos_token_id(tokens.index(specials[2] if arch == "llama" else "<eos>"))
        writer.add_add_bos_token(True)
        writer.add_add_space_prefix(arch == "llama")
        return len(tokens)
    bpe = byte_bpe(["<|endoftext|>"])
    tokens = [t for t, _ in sorted(bpe.get_vocab().items(), key=lambda item: item[1])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_merges(_merges(bpe))
    writer.add_token_types([3 if t == "<|endoftext|>" else 1 for t in tokens])
    writer.add_eos_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    return len(tokens)


def write(path: Path, arch: str, rng: np.random.Generator) -> None:
    import gguf

    hidden, heads, kv_heads, head_dim, ffn = SHAPES[arch]
    writer = gguf.GGUFWriter(str(path), arch)
    vocab = add_tokenizer(writer, arch)
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_block_count(1)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0 if arch in ("llama", "gemma2") else 1000000.0)
    writer.add_vocab_size(vocab)
    if arch.startswith("gemma"):
        writer.add_sliding_window(WINDOW)
    if arch == "gemma2":  # llama.cpp's and transformers' defaults, stated
        writer.add_attn_logit_softcapping(50.0)
        writer.add_final_logit_softcapping(30.0)
    kinds = TYPES.get(arch, {})
    q, kv = heads * head_dim, kv_heads * head_dim
    shapes = {"token_embd": (vocab, hidden), "attn_q": (q, hidden), "attn_k": (kv, hidden), "attn_v": (kv, hidden),
              "attn_output": (hidden, q), "ffn_gate": (ffn, hidden), "ffn_up": (ffn, hidden), "ffn_down": (hidden, ffn)}
    if "output" in kinds:
        shapes["output"] = (vocab, hidden)
    for name, shape in shapes.items():
        kind = kinds.get(name, "Q8_0")
        full = name if name in ("token_embd", "output") else f"blk.0.{name}"
        writer.add_tensor(f"{full}.weight", tensor(kind, shape, rng), raw_dtype=gguf.GGMLQuantizationType[kind])
    norms = {"blk.0.attn_norm": hidden, "blk.0.ffn_norm": hidden, "output_norm": hidden}
    if arch in ("qwen3", "gemma3"):
        norms |= {"blk.0.attn_q_norm": head_dim, "blk.0.attn_k_norm": head_dim}
    if arch.startswith("gemma"):
        norms |= {"blk.0.post_attention_norm": hidden, "blk.0.post_ffw_norm": hidden}
    for norm, width in norms.items():  # gains near 1 (Gemma's stored as 1 + w: w near 0)
        writer.add_tensor(f"{norm}.weight", (1 + 0.1 * rng.normal(size=width)).astype(np.float32))
    if arch == "qwen2":
        for name, width in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
            writer.add_tensor(f"blk.0.{name}.bias", (0.1 * rng.normal(size=width)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _merges(tokenizer: Tokenizer) -> list[str]:
    import json

    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return [" ".join(m) if isinstance(m, list) else m for m in merges]


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    torch.manual_seed(0)
    pure_float64()
    for seed, arch in enumerate(SHAPES):
        folder = OUT / (f"gguf-mixed-{arch}" if arch in TYPES else f"gguf-{arch}")
        folder.mkdir(parents=True, exist_ok=True)
        name = "mixed.gguf" if arch in TYPES else f"{arch}.gguf"
        write(folder / name, arch, np.random.default_rng(seed))
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float64,
                                                     attn_implementation="eager",
                                                     quantization_config=GgufConfig(dequantize=True)).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        ids = tokenizer(PROMPT)["input_ids"]
        text_ids = [tokenizer(text)["input_ids"] for text in TEXTS]
        print(arch, type(tokenizer).__name__, ids, [len(i) for i in text_ids])
        ref = reference(model, ids, True) if arch in TYPES else recomputed(model, ids, NEW_TOKENS)
        np.savez_compressed(folder / "reference.npz", **ref, texts=np.array(TEXTS),
                            text_ids=np.concatenate([np.array(i, dtype=np.int64) for i in text_ids]),
                            text_lengths=np.array([len(i) for i in text_ids]))


if __name__ == "__main__":
    main()
