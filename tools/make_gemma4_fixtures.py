"""Write tests/fixtures/gemma4/: a tiny random Gemma 4 text checkpoint (`gemma4_text`) and transformers' true
float64 outputs; and tests/fixtures/gguf-gemma4/: the same checkpoint as llama.cpp's own converter writes it
(convert_hf_to_gguf.py, the `gemma4` architecture) in bf16 and q8_0, each with the reference of the weights
it holds (dequantized by gguf-py, then transformers' float64 forward again).

    /work/refenv/bin/python tools/make_gemma4_fixtures.py

Written with transformers 5.24.0 and torch 2.13.0 (CPU), in the reference environment of make_fixtures.py, and
the converter unpacked from the llama-cpp-python 0.3.36 sdist (LLAMA_CPP below; run with its own gguf-py).
4 layers: sliding, full, sliding, full, a window of 4 (the prompt is longer); the last two layers are KV-shared
(`num_kv_shared_layers: 2`): layer 2 reads layer 0's K/V, layer 3 reads layer 1's, and their MLPs are twice as
wide (`use_double_wide_mlp`). The full layers have their own head width (`global_head_dim` 16 against 8), one
kv head (`num_global_key_value_heads`), keys that are also the values (`attention_k_eq_v`) and proportional
RoPE (a quarter of the frequencies turn, base 1e6); the sliding layers default RoPE, base 1e4. Per-layer input
embeddings of width 8 (`hidden_size_per_layer_input`), a layer scalar per layer (random, not 1), logits
soft-capped at 3. The tokenizer is Gemma's kind (BPE with byte fallback over `▁`-spelled text: the converter reads
no other for Gemma 4). Widths are multiples of 32 where they can be, so that q8_0 quantizes most matrices.

transformers' float64 forward is not float64 throughout: Gemma4RMSNorm computes in float32, eager attention's
softmax is float32, the rotary module's forward casts positions and inv_freq to float32 (and its per-type
inv_freq buffers are float32, made at init and kept by from_pretrained), and the scaled embeddings' scale is a
float32 buffer. Each is patched here (the rotary buffers and the embedding scales rebuilt after
from_pretrained), and tools/float64_reference.py's counter proves that no operator of the reference passes
reads or writes a float32 tensor; the script stops if one does.

reference.npz (and gguf-gemma4/gemma4-TYPE.npz): `ids`, `greedy_ids`; for the prefill `layers` (every layer's
output), `logits`; for each pass (the prefill's last row, then every cached decode step through transformers'
DynamicCache) `step_logits` and `step_layers`. `float32_ops` is the counter's count (0), `ops` how many operators
it saw.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from float64_reference import Float32Counter, counter_sees_float32, eager_attention  # noqa: E402
from make_fixtures import CORPUS, OUT, PROMPT, randomize  # noqa: E402

LLAMA_CPP = Path("/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp")
GGUF_TYPES = ("bf16", "q8_0")
NEW_TOKENS = 5
SEED = 4
WINDOW = 4
ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}}


def config(vocab_size: int):
    import transformers

    return transformers.Gemma4TextConfig(
        vocab_size=vocab_size, vocab_size_per_layer_input=vocab_size, hidden_size=32, intermediate_size=64,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8, global_head_dim=16,
        num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=2, use_double_wide_mlp=True,
        hidden_size_per_layer_input=8, layer_types=["sliding_attention", "full_attention"] * 2,
        sliding_window=WINDOW, rope_parameters=ROPE, final_logit_softcapping=3.0, max_position_embeddings=64,
        rms_norm_eps=1e-6, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2)


def gemma_tokenizer():
    """Gemma's kind of tokenizer: BPE with byte fallback (<0x00>…<0xFF>), every space spelled `▁`, <bos> first."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokenizer.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                                              show_progress=False))
    tokenizer.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return tokenizer


# -- float64 everywhere -------------------------------------------------------------------------------
def _rms_norm(self, x):
    """Gemma4RMSNorm without its float32 cast: x · (mean(x²) + eps)^-½, times the gain as it is (no 1 + w)."""
    normed = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
    return normed * self.weight if self.with_scale else normed


def _rotary(self, x, position_ids, layer_type):
    freqs = position_ids[..., None].to(torch.float64) * getattr(self, f"{layer_type}_inv_freq")
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def pure_float64() -> None:
    from transformers.models.gemma4 import modeling_gemma4 as module

    module.Gemma4RMSNorm.forward = _rms_norm
    module.Gemma4TextRotaryEmbedding.forward = _rotary
    module.eager_attention_forward = eager_attention(module.repeat_kv)


def inv_freq(params: dict, dim: int) -> torch.Tensor:
    """transformers' default and proportional RoPE frequencies (modeling_rope_utils), in float64: proportional
    turns the first partial_rotary_factor·dim/2 frequencies, θ^(−2i/dim) over the whole head, the rest stand."""
    angles = int(params.get("partial_rotary_factor", 1.0) * dim // 2)
    turned = 1.0 / params["rope_theta"] ** (torch.arange(0, 2 * angles, 2, dtype=torch.float64) / dim)
    return torch.cat([turned, torch.zeros(dim // 2 - angles, dtype=torch.float64)]) / params.get("factor", 1.0)


def rebuild_float32_buffers(model) -> None:
    """The per-type inv_freq and the embedding scales in float64 (checked against transformers' own)."""
    text, config = model.model, model.config
    for layer_type, params in config.rope_parameters.items():
        dim = config.per_layer_config[layer_type].head_dim
        ours, theirs = inv_freq(params, dim), getattr(text.rotary_emb, f"{layer_type}_inv_freq")
        assert torch.allclose(ours.float(), theirs.float(), rtol=1e-6, atol=0), (layer_type, ours, theirs)
        setattr(text.rotary_emb, f"{layer_type}_inv_freq", ours)
    for embedding in (text.embed_tokens, text.embed_tokens_per_layer):
        embedding.embed_scale = torch.tensor(embedding.scalar_embed_scale, dtype=torch.float64)


# -- the reference ---------------------------------------------------------------------------------------
def load(folder: Path):
    from transformers import Gemma4ForCausalLM

    model = Gemma4ForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager").eval()
    rebuild_float32_buffers(model)
    return model


def run(model, ids: list[int]) -> dict[str, np.ndarray]:
    """Prefill, then greedy decoding through transformers' own cache: every pass's logits and layer outputs,
    under the float32 counter."""
    from transformers import DynamicCache

    captured = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: captured.append(out[0] if isinstance(out, tuple) else out))
             for layer in model.model.layers]
    cache, feed, passes = DynamicCache(config=model.config), ids, []
    counter = Float32Counter()
    with torch.no_grad(), counter:
        for _ in range(NEW_TOKENS):
            captured.clear()
            logits = model(torch.tensor([feed]), cache=cache, use_cache=True).logits[0]
            passes.append({"logits": logits.numpy(), "layers": np.stack([h[0].numpy() for h in captured])})
            feed = [int(torch.argmax(logits[-1]))]
    for hook in hooks:
        hook.remove()
    if counter.float32:
        sys.exit(f"float32 operators remain in the reference: {sorted(set(counter.float32))}")
    prefill = passes[0]
    return {"ids": np.array(ids), "greedy_ids": np.array([int(np.argmax(p["logits"][-1])) for p in passes]),
            "layers": prefill["layers"], "logits": prefill["logits"],
            "step_logits": np.stack([p["logits"][-1] for p in passes]),
            "step_layers": np.stack([p["layers"][:, -1] for p in passes]),
            "float32_ops": np.array(len(counter.float32)), "ops": np.array(counter.ops)}


def make() -> tuple[Path, list[int]]:
    from transformers import Gemma4ForCausalLM

    tokenizer = gemma_tokenizer()
    folder = OUT / "gemma4"
    folder.mkdir(parents=True, exist_ok=True)
    ids = tokenizer.encode(PROMPT).ids
    assert len(ids) > WINDOW
    torch.manual_seed(SEED)
    model = Gemma4ForCausalLM(config(tokenizer.get_vocab_size()))
    randomize(model, SEED)
    rng = np.random.default_rng(SEED + 1)
    with torch.no_grad():  # a buffer randomize does not reach: 1 would hide a missing multiplication
        for layer in model.model.layers:
            layer.layer_scalar.copy_(torch.tensor(rng.uniform(0.5, 1.5, 1)))
    model.save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    ref = run(load(folder), ids)
    np.savez_compressed(folder / "reference.npz", **ref)
    report("gemma4", ref, ids)
    return folder, ids


def report(name: str, ref: dict, ids: list[int]) -> None:
    print(f"{name}: {int(ref['ops'])} operators dispatched, {int(ref['float32_ops'])} read or wrote float32; "
          f"{len(ids)} prompt tokens, greedy {ref['greedy_ids'].tolist()}")


# -- the GGUF files, by llama.cpp's converter --------------------------------------------------------------
def convert(folder: Path, kind: str, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(LLAMA_CPP / "gguf-py")}
    subprocess.run([sys.executable, str(LLAMA_CPP / "convert_hf_to_gguf.py"), str(folder), "--outtype", kind,
                    "--outfile", str(out)], check=True, env=env, capture_output=True)


def dequantized_state(path: Path, model) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of `model` as the GGUF file holds it, dequantized by gguf-py (the converter's
    own tensor names, found through gguf-py's name map)."""
    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    import gguf

    reader = gguf.GGUFReader(path)
    tensors = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA4, model.config.num_hidden_layers)
    state = {}
    for name, value in model.state_dict().items():
        if name == "lm_head.weight" or "rotary_emb" in name or name.endswith("embed_scale"):
            continue  # tied, or made at init (not stored)
        base = names.get_name(name.removesuffix(".weight"))
        stored = tensors[f"{base}.weight"]
        state[name] = torch.tensor(np.asarray(stored, dtype=np.float64).reshape(value.shape))
    return state


def make_gguf(folder: Path, ids: list[int]) -> None:
    out = OUT / "gguf-gemma4"
    out.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for kind in GGUF_TYPES:
            path = out / f"gemma4-{kind}.gguf"
            convert(folder, kind, path)
            model = load(folder)
            model.load_state_dict(dequantized_state(path, model), strict=False)
            model.save_pretrained(Path(scratch) / kind)  # and read back as the reference reads any checkpoint
            shutil.copy(folder / "tokenizer.json", Path(scratch) / kind)
            ref = run(load(Path(scratch) / kind), ids)
            np.savez_compressed(out / f"gemma4-{kind}.npz", **ref)
            report(path.name, ref, ids)


def main() -> None:
    assert counter_sees_float32()
    pure_float64()
    make_gguf(*make())


if __name__ == "__main__":
    main()
