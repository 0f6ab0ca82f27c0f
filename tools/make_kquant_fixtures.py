"""Write tests/fixtures/gguf-kquant/: a tiny Qwen3 GGUF quantized by llama.cpp's own `llama-quantize` to Q4_K_M
and to Q6_K, each with transformers' true float64 forward on the weights gguf-py dequantizes from that file.

    /work/refenv/bin/python tools/make_kquant_fixtures.py /tmp/llamabuild/bin/llama-quantize

Run so on 2 December 2026 with transformers 5.24.0, torch 2.13.0 (CPU), gguf 0.19.0, and llama.cpp's
convert_hf_to_gguf.py and llama-quantize from the llama-cpp-python 0.3.36 sdist. llama-quantize was built from
the build folder that the sdist's own install left (`pip install --config-settings=build-dir=/tmp/llamabuild
llama_cpp_python-0.3.36.tar.gz`, its source folder /tmp/pip-req-build-* copied back after pip removed it):

    cmake -DLLAMA_BUILD_TOOLS=ON -DLLAVA_BUILD=OFF /tmp/llamabuild && cmake --build /tmp/llamabuild --target llama-quantize

(4 steps: libllama and llama-common were built already). The converter runs as make_moe_gguf_fixtures.py's, told
that our byte-level BPE is GPT-2's. It printed: Q4_K_M 502 784 bytes, 9 F32 / 12 Q4_K / 3 Q6_K tensors, greedy
[9, 9, 9, 9, 9]; Q6_K 667 520 bytes, 9 F32 / 15 Q6_K, greedy [50, 161, 161, 74, 238]; 0 float32 operators.

gguf-py quantizes no K-quant, and the other K-quant fixtures (make_gguf_fixtures.py) are random blocks: these are
llama.cpp's own quantization of a real float32 conversion, its mixes as it chooses them (Q4_K_M puts Q6_K on the
tied embedding and on some attn_v / ffn_down rows). K-quant super-blocks are 256 wide, so every matrix's rows
are: hidden 256, intermediate 256, 4 query heads of 64 (one KV head). The reference: the same model with every
tensor replaced by gguf-py's dequantization of the file's (norm gains stay float32 as the converter writes them),
through float64_reference.py's patches (rotary tables rebuilt in float64), prefill, then greedy decoding
through transformers' cache
(float64_reference.greedy_passes, 0 float32 operators). MIX.npz holds ids, every pass's `logits` and
`layers` (`pass_logits_N`, `pass_layers_N`, N = 0 the prefill) and the greedy ids.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from float64_reference import eager_attention, greedy_passes, rebuild_rotary, rms_norm, rotary  # noqa: E402
from make_fixtures import NEW_TOKENS, OUT, PROMPT, byte_bpe, randomize  # noqa: E402
from make_moe_gguf_fixtures import convert  # noqa: E402

TYPES = ("Q4_K_M", "Q6_K")  # llama-quantize's names for the two mixes
SEED = 11
HF_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
            "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
            "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def config(vocab_size: int):
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=vocab_size, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=1, head_dim=64, max_position_embeddings=64,
                       rms_norm_eps=float(np.float32(1e-6)), tie_word_embeddings=True,  # epsilon as the file stores it
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, eos_token_id=0)


def pure_float64() -> None:
    """Qwen3's RMSNorm, rotary tables and eager softmax in the input's dtype (transformers': float32)."""
    from transformers.models.qwen3 import modeling_qwen3 as qwen3

    qwen3.Qwen3RMSNorm.forward, qwen3.Qwen3RotaryEmbedding.forward = rms_norm, rotary
    qwen3.eager_attention_forward = eager_attention(qwen3.repeat_kv)


def hf_name(name: str) -> str:
    """A GGUF tensor's name in the transformers model."""
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    _, layer, kind, what = name.split(".")
    return f"model.layers.{layer}.{HF_NAMES[kind]}.{what}"


def with_decoded_weights(model, path: Path) -> list[str]:
    """Every parameter replaced by gguf-py's dequantization of the file's tensor; the files' tensor types."""
    parameters = dict(model.named_parameters())
    kinds = []
    with torch.no_grad():
        for tensor in gguf.GGUFReader(path).tensors:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            target = parameters.pop(hf_name(tensor.name))
            target.copy_(torch.tensor(values.reshape(target.shape), dtype=torch.float64))
            kinds.append(tensor.tensor_type.name)
    assert set(parameters) <= {"lm_head.weight"}, parameters  # tied to the embedding
    return kinds


def reference(model, ids: list[int]) -> dict[str, np.ndarray]:
    passes, counter = greedy_passes(model, ids, NEW_TOKENS)
    if counter.float32:
        sys.exit(f"float32 operators remain in the reference: {sorted(set(counter.float32))}")
    ref = {"ids": np.array(ids), "greedy_ids": np.array([int(np.argmax(p["logits"][-1])) for p in passes]),
           "ops": np.array(counter.ops)}
    for n, p in enumerate(passes):
        ref[f"pass_logits_{n}"], ref[f"pass_layers_{n}"] = p["logits"], p["layers"]
    return ref


def main() -> None:
    from transformers import Qwen3ForCausalLM

    quantize = sys.argv[1] if len(sys.argv) > 1 else "/tmp/llamabuild/bin/llama-quantize"
    pure_float64()
    tokenizer = byte_bpe(["<|endoftext|>"])
    ids = tokenizer.encode(PROMPT).ids
    out = OUT / "gguf-kquant"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        folder, converted = Path(scratch) / "hf", Path(scratch) / "f32.gguf"
        torch.manual_seed(SEED)
        model = Qwen3ForCausalLM(config(tokenizer.get_vocab_size()))
        randomize(model, SEED)
        model.save_pretrained(folder)
        tokenizer.save(str(folder / "tokenizer.json"))
        convert(folder, converted)
        for kind in TYPES:
            path = out / f"{kind}.gguf"
            subprocess.run([quantize, str(converted), str(path), kind], check=True, capture_output=True)
            reloaded = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float64,
                                                        attn_implementation="eager").eval()
            rebuild_rotary(reloaded)
            kinds = with_decoded_weights(reloaded, path)
            ref = reference(reloaded, ids)
            np.savez_compressed(out / f"{kind}.npz", **ref)
            counts = {k: kinds.count(k) for k in sorted(set(kinds))}
            print(f"{kind}: {path.stat().st_size} bytes, tensors {counts}, {int(ref['ops'])} operators, "
                  f"greedy {ref['greedy_ids'].tolist()}")


if __name__ == "__main__":
    main()
