"""Write tests/fixtures/: tiny random-weight checkpoints and float64 reference outputs from transformers.

    /work/refenv/bin/python tools/make_fixtures.py                 # the tiny models
    /work/refenv/bin/python tools/make_fixtures.py gemma2 qwen3    # only those (of ALL)
    /work/refenv/bin/python tools/make_fixtures.py --real          # also the two real models' references

Needs torch, transformers, tokenizers, safetensors, gguf and accelerate (a separate virtual
environment; the project itself never depends on torch). For every architecture (llama with
grouped-query attention, qwen2 with q/k/v biases, gpt2, bert) it writes a Hugging Face folder
(config.json, model.safetensors in float32, tokenizer.json) and reference.npz with transformers'
float64 outputs: every layer's output, the full-forward logits, and a greedy cached generation
with each step's logits. tiny-gguf/ holds a quantized llama GGUF (Q4_0, Q4_1, Q8_0, F16, F32)
whose reference transformers computes from its own dequantization of the file.

The newer architectures (qwen3 with q/k norms, mistral and phi3 with sliding windows, phi3's fused
projections, gemma2 with soft caps, gemma3 with q/k norms, per-layer RoPE bases and linear RoPE scaling,
llama3: Llama with Llama 3's RoPE scaling) have windows shorter than the prompt, so their decode references recompute the whole sequence at each step
(transformers' DynamicCache keeps only the window): `step_logits` and `step_layers` (every layer's
last row) per step.

transformers' `model.double()` is not pure float64 (RMSNorm and RoPE compute in float32, eager
softmax is float32): `pure_float64()` patches those three paths first, for every architecture.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "tools"))
from fetch_real_models import MINILM, SMOLLM2, cache_dir  # noqa: E402
from float64_reference import eager_attention, gemma_rms_norm, rms_norm  # noqa: E402

CORPUS = [
    "The cat sat on the mat. The dog sat on the log.",
    "A small model learns the next token of a sentence.",
    "café naïve 我爱学习 — the attention pattern of a head.",
    "Keys and values are cached; queries read them.",
] * 20
PROMPT = "The cat sat on the mat, 我爱 café"
BERT_PROMPT = "The cat sat on the mat."
NEW_TOKENS = 5


# -- float64 everywhere -------------------------------------------------------------
LLAMA_LIKE = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral", "phi3": "Phi3",
              "gemma2": "Gemma2", "gemma3": "Gemma3"}


def pure_float64() -> None:
    for arch in LLAMA_LIKE:
        pure_float64_module(arch)
    from transformer_lens.model_bridge.generalized_components import attention  # its softmax is float32 too

    softmax = attention.AttentionBridge._masked_softmax
    attention.AttentionBridge._masked_softmax = lambda self, scores, dtype=None: softmax(self, scores, scores.dtype)


def pure_float64_module(arch: str) -> None:
    """One architecture's modelling module: its RMSNorm, rotary module and eager attention in the input's dtype."""
    import importlib

    module, prefix = importlib.import_module(f"transformers.models.{arch}.modeling_{arch}"), LLAMA_LIKE[arch]
    getattr(module, f"{prefix}RMSNorm").forward = gemma_rms_norm if arch.startswith("gemma") else rms_norm
    getattr(module, f"{prefix}RotaryEmbedding").forward = _rotary
    module.eager_attention_forward = eager_attention(module.repeat_kv)


def _rotary(self, x, position_ids, layer_type=None):
    config = self.config
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    params = config.rope_parameters if layer_type is None else config.rope_parameters[layer_type]
    inv_freq = _scaled(params, 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)))
    theirs = getattr(self, "inv_freq" if layer_type is None else f"{layer_type}_inv_freq")  # float32, transformers'
    assert torch.allclose(inv_freq, theirs.to(torch.float64), rtol=1e-6, atol=0), (inv_freq, theirs)
    freqs = position_ids[..., None].to(torch.float64) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _scaled(params: dict, inv_freq):
    """transformers' linear and Llama 3 RoPE scaling (modeling_rope_utils), written again in float64."""
    kind = params.get("rope_type", "default")
    if kind == "linear":
        return inv_freq / params["factor"]
    if kind != "llama3":
        return inv_freq
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    old = params["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    llama = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    medium = ~(wavelen < old / high) * ~(wavelen > old / low)
    return torch.where(medium, (1 - smooth) * llama / factor + smooth * llama, llama)


# -- tokenizers -----------------------------------------------------------------------
def byte_bpe(specials: list[str], bos: str | None = None) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    if bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tokenizer.token_to_id(bos))])
    return tokenizer


def wordpiece() -> Tokenizer:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=120, special_tokens=specials,
                                                                    show_progress=False))
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", tokenizer.token_to_id("[SEP]")),
                                                         ("[CLS]", tokenizer.token_to_id("[CLS]")))
    return tokenizer


# -- models ---------------------------------------------------------------------------
def configs(vocab: dict[str, int]):
    from transformers import BertConfig, GPT2Config, LlamaConfig, Qwen2Config

    small = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=64)
    return {
        "llama": LlamaConfig(vocab_size=vocab["llama"], num_key_value_heads=2, rms_norm_eps=1e-5,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                             tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, **small),
        "qwen2": Qwen2Config(vocab_size=vocab["qwen2"], num_key_value_heads=2, rms_norm_eps=1e-6,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                             tie_word_embeddings=True, use_sliding_window=False, eos_token_id=0, **small),
        "gpt2": GPT2Config(vocab_size=vocab["gpt2"], n_positions=64, n_embd=16, n_layer=2, n_head=4,
                           activation_function="gelu_new", layer_norm_epsilon=1e-5, bos_token_id=0,
                           eos_token_id=0),
        "bert": BertConfig(vocab_size=vocab["bert"], type_vocab_size=2, layer_norm_eps=1e-12,
                           hidden_act="gelu", pad_token_id=0, **small),
    }


WINDOW = 4  # shorter than the prompt: the sliding layers mask keys in prefill and in every decode step
NEW_SMALL = dict(hidden_size=24, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=8, max_position_embeddings=64, rms_norm_eps=1e-6)


def new_configs(vocab: dict[str, int]):
    """qwen3 (sliding from layer 1 on), mistral and phi3 (sliding everywhere), gemma2 (every other layer,
    soft caps low enough to bite), gemma3 (text; one full layer between sliding ones, two RoPE bases, the
    global one linearly scaled), llama3 (Llama 3's RoPE scaling: one unscaled, one blended and two slowed
    frequencies)."""
    import transformers as t

    rope = {"rope_type": "default", "rope_theta": 10000.0}
    gemma = dict(query_pre_attn_scalar=12, sliding_window=WINDOW, hidden_activation="gelu_pytorch_tanh",
                 pad_token_id=0, eos_token_id=1, bos_token_id=None, tie_word_embeddings=True, **NEW_SMALL)
    llama3 = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 8.0, "original_max_position_embeddings": 256}  # one frequency of each kind
    return {
        "qwen3": t.Qwen3Config(vocab_size=vocab["qwen3"], rope_parameters=rope, use_sliding_window=True,
                               sliding_window=WINDOW, max_window_layers=1, tie_word_embeddings=True,
                               eos_token_id=0, **NEW_SMALL),
        "mistral": t.MistralConfig(vocab_size=vocab["mistral"], rope_parameters=rope, sliding_window=WINDOW,
                                   tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, **NEW_SMALL),
        "phi3": t.Phi3Config(vocab_size=vocab["phi3"], rope_parameters=rope, sliding_window=WINDOW + 1,
                             tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=None,
                             **NEW_SMALL),
        "gemma2": t.Gemma2Config(vocab_size=vocab["gemma2"], rope_parameters=rope, attn_logit_softcapping=2.0,
                                 final_logit_softcapping=3.0, **gemma),
        "gemma3": t.Gemma3TextConfig(  # the global layer's RoPE linearly scaled, as Gemma 3 4B and larger
            vocab_size=vocab["gemma3"], layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}, **gemma),
        "llama3": t.LlamaConfig(vocab_size=vocab["llama3"], rope_parameters=llama3, tie_word_embeddings=True,
                                bos_token_id=0, eos_token_id=1, **NEW_SMALL),
    }


def randomize(model, seed: int) -> None:
    """Weights of order 1/sqrt(fan-in) and gains near 1, so that the logits are far from uniform."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                values = rng.normal(0.0, 1.0 / np.sqrt(min(p.shape)), p.shape)
            elif "norm" in name.lower() and name.endswith("weight") or name.endswith("ln_1.weight") \
                    or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                values = 1.0 + 0.1 * rng.normal(size=p.shape)
            else:
                values = 0.1 * rng.normal(size=p.shape)
            p.copy_(torch.tensor(values, dtype=p.dtype))


def model_class(arch: str):
    import transformers

    arch = "llama" if arch == "llama3" else arch
    if arch in LLAMA_LIKE:
        return getattr(transformers, f"{LLAMA_LIKE[arch]}ForCausalLM")
    return {"gpt2": transformers.GPT2LMHeadModel, "bert": transformers.BertModel}[arch]


# -- references -----------------------------------------------------------------------
def layer_modules(model):
    base = getattr(model, "model", None) or getattr(model, "transformer", None) or model
    return list(getattr(base, "layers", None) or getattr(base, "h", None) or base.encoder.layer)


def forward_with_layers(model, ids: list[int]):
    captured = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: captured.append(out[0] if isinstance(out, tuple) else out))
             for layer in layer_modules(model)]
    with torch.no_grad():
        out = model(torch.tensor([ids]))
    for hook in hooks:
        hook.remove()
    layers = np.stack([h[0].numpy() for h in captured])
    return out, layers


def greedy(model, ids: list[int], steps: int):
    """Greedy decoding through transformers' own KV cache: each step's last-position logits."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    chosen, step_logits, feed = [], [], ids
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([feed]), cache=cache, use_cache=True).logits[0, -1]
            step_logits.append(logits.numpy())
            chosen.append(int(torch.argmax(logits)))
            feed = chosen[-1:]
    return np.array(chosen), np.stack(step_logits)


def reference(model, ids: list[int], decoder: bool) -> dict[str, np.ndarray]:
    out, layers = forward_with_layers(model, ids)
    ref = {"ids": np.array(ids), "layers": layers}
    if decoder:
        ref["logits"] = out.logits[0].numpy()
        ref["greedy_ids"], ref["step_logits"] = greedy(model, ids, NEW_TOKENS)
    else:
        ref["hidden"] = out.last_hidden_state[0].numpy()
    return ref


def recomputed(model, ids: list[int], steps: int) -> dict[str, np.ndarray]:
    """The prefill, then greedy decoding that runs the whole sequence again at every step: each step's
    last-position logits and every layer's last row."""
    out, layers = forward_with_layers(model, ids)
    ref = {"ids": np.array(ids), "layers": layers, "logits": out.logits[0].numpy()}
    sequence, chosen, step_logits, step_layers = list(ids), [], [], []
    for _ in range(steps):
        out, layers = forward_with_layers(model, sequence)
        step_logits.append(out.logits[0, -1].numpy())
        step_layers.append(layers[:, -1])
        chosen.append(int(torch.argmax(out.logits[0, -1])))
        sequence.append(chosen[-1])
    return ref | {"greedy_ids": np.array(chosen), "step_logits": np.stack(step_logits),
                  "step_layers": np.stack(step_layers)}


def make_hf(arch: str, tokenizer: Tokenizer, config, seed: int) -> None:
    folder = OUT / arch
    folder.mkdir(parents=True, exist_ok=True)
    model = model_class(arch)(config)
    randomize(model, seed)
    model.save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    reloaded = model_class(arch).from_pretrained(folder, dtype=torch.float64, attn_implementation="eager").eval()
    ids = tokenizer.encode(BERT_PROMPT if arch == "bert" else PROMPT).ids
    if arch in NEW_ARCHS:
        ref = recomputed(reloaded, ids, NEW_TOKENS)
    else:
        ref = reference(reloaded, ids, arch != "bert")
    np.savez_compressed(folder / "reference.npz", **ref)
    if arch in TL_ARCHS:
        transformer_lens_dump(arch, ids)


# -- TransformerLens's own names and values ------------------------------------------------
TL_ARCHS = ("qwen3", "gemma2", "gemma3")
TL_TOKENS = 8  # longer than every window, short enough for a small file
BRIDGE_ONLY = (".hook_in", ".hook_cos", ".hook_sin", ".q.hook_out", ".k.hook_out", ".v.hook_out", ".o.hook_out",
               ".gate.hook_out", ".in.hook_out", ".out.hook_out")


def transformer_lens_dump(arch: str, ids: list[int]) -> None:
    """`run_with_cache` of TransformerLens's bridge on the fixture (its softmax made float64 too): what a
    TransformerLens user would dump, minus the bridge's wrapper aliases (hook_in, the projections' hook_out)."""
    from transformer_lens.model_bridge import TransformerBridge

    folder = OUT / arch
    hf = model_class(arch).from_pretrained(folder, dtype=torch.float64, attn_implementation="eager").eval()
    bridge = TransformerBridge.boot_transformers(str(folder), hf_model=hf, dtype=torch.float64)
    _, cache = bridge.run_with_cache(torch.tensor([ids[:TL_TOKENS]]))
    arrays = {name: value[0].detach().numpy() for name, value in cache.items() if not name.endswith(BRIDGE_ONLY)}
    np.savez_compressed(folder / "transformer_lens.npz", **arrays)


# -- a quantized llama GGUF -------------------------------------------------------------
GGUF_TYPES = {"token_embd": "Q8_0", "attn_q": "Q4_0", "attn_k": "Q4_1", "attn_v": "Q8_0",
              "attn_output": "F16", "ffn_gate": "Q4_1", "ffn_up": "Q4_0", "ffn_down": "Q8_0"}
HF_TO_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
              "post_attention_layernorm": "ffn_norm"}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf.py does to q_proj / k_proj rows."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    _, _, layer, rest = hf.split(".", 3)
    module = rest.rsplit(".", 1)[0]
    return f"blk.{layer}.{HF_TO_GGUF[module]}.weight"


def write_gguf(path: Path, model, tokenizer: Tokenizer) -> None:
    import gguf

    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_vocab_size(config.vocab_size)
    spec = json.loads(tokenizer.to_str())
    vocab = sorted(spec["model"]["vocab"].items(), key=lambda item: item[1])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([token for token, _ in vocab])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]])
    specials = {t["content"] for t in spec["added_tokens"]}
    writer.add_token_types([3 if token in specials else 1 for token, _ in vocab])
    writer.add_bos_token_id(tokenizer.token_to_id("<s>"))
    writer.add_eos_token_id(tokenizer.token_to_id("</s>"))
    writer.add_add_bos_token(True)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":  # tied: the file has no output.weight
            continue
        w = tensor.numpy().astype(np.float32)
        if "q_proj" in name:
            w = llama_cpp_permute(w, config.num_attention_heads)
        elif "k_proj" in name:
            w = llama_cpp_permute(w, config.num_key_value_heads)
        target = gguf_name(name)
        kind = GGUF_TYPES.get(target.split(".")[-2] if target.startswith("blk") else target.split(".")[0], "F32")
        if kind == "F32":
            writer.add_tensor(target, w)
        elif kind == "F16":
            writer.add_tensor(target, w.astype(np.float16))
        else:
            qtype = gguf.GGMLQuantizationType[kind]
            writer.add_tensor(target, gguf.quants.quantize(w, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def load_gguf(folder: Path, name: str):
    """transformers' own dequantization of the file, as a plain float64 model."""
    from transformers import GgufConfig, LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float64, attn_implementation="eager",
                                            quantization_config=GgufConfig(dequantize=True)).eval()


def make_gguf(tokenizer: Tokenizer) -> None:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = OUT / "tiny-gguf"
    folder.mkdir(parents=True, exist_ok=True)
    config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    model = LlamaForCausalLM(config)
    randomize(model, 5)
    write_gguf(folder / "tiny.gguf", model, tokenizer)
    reloaded = load_gguf(folder, "tiny.gguf")
    ids = AutoTokenizer.from_pretrained(folder, gguf_file="tiny.gguf")(PROMPT)["input_ids"]
    np.savez_compressed(folder / "reference.npz", **reference(reloaded, ids, True))


# -- the two real models ------------------------------------------------------------------
SMOLLM2_PROMPT = "The capital of France is"
MINILM_SENTENCES = ("A man is playing a guitar.", "Someone plays an instrument.")


def make_real() -> None:
    from transformers import AutoTokenizer, BertModel

    cache, folder = cache_dir(), OUT / "real"
    folder.mkdir(parents=True, exist_ok=True)
    model = load_gguf(cache, SMOLLM2)
    tokenizer = AutoTokenizer.from_pretrained(cache, gguf_file=SMOLLM2)
    ids = tokenizer(SMOLLM2_PROMPT)["input_ids"]
    with torch.no_grad():
        last = model(torch.tensor([ids])).logits[0, -1].numpy()
    chosen, _ = greedy(model, ids, 6)
    print("SmolLM2:", ids, repr(tokenizer.decode(chosen)))
    np.savez_compressed(folder / "smollm2.npz", ids=np.array(ids), last_logits=last, greedy_ids=chosen)
    bert = BertModel.from_pretrained(cache / MINILM, dtype=torch.float64, attn_implementation="eager").eval()
    bert_tokenizer = Tokenizer.from_file(str(cache / MINILM / "tokenizer.json"))
    bert_tokenizer.no_padding()  # the file pads to 128; sentence-transformers masks those, we feed none
    hidden = {}
    for i, sentence in enumerate(MINILM_SENTENCES):
        ids = bert_tokenizer.encode(sentence).ids
        with torch.no_grad():
            hidden[f"hidden{i}"] = bert(torch.tensor([ids])).last_hidden_state[0].numpy()
        hidden[f"ids{i}"] = np.array(ids)
    np.savez_compressed(folder / "minilm.npz", **hidden)


NEW_ARCHS = ("qwen3", "mistral", "phi3", "gemma2", "gemma3", "llama3")
ALL = ("llama", "qwen2", "gpt2", "bert", *NEW_ARCHS, "gguf")


def main() -> None:
    torch.manual_seed(0)
    pure_float64()
    chosen = [a for a in sys.argv[1:] if not a.startswith("--")] or ALL
    if unknown := set(chosen) - set(ALL):
        sys.exit(f"unknown fixture(s) {', '.join(sorted(unknown))} (known: {', '.join(ALL)})")
    tokenizers = {"llama": byte_bpe(["<s>", "</s>"], bos="<s>"), "qwen2": byte_bpe(["<|endoftext|>"]),
                  "gpt2": byte_bpe(["<|endoftext|>"]), "bert": wordpiece(),
                  "llama3": byte_bpe(["<s>", "</s>"], bos="<s>"), "qwen3": byte_bpe(["<|endoftext|>"]), "mistral": byte_bpe(["<s>", "</s>"], bos="<s>"),
                  "phi3": byte_bpe(["<s>", "</s>"], bos="<s>"), "gemma2": byte_bpe(["<pad>", "<eos>", "<bos>"]),
                  "gemma3": byte_bpe(["<pad>", "<eos>", "<bos>"])}
    vocab = {arch: t.get_vocab_size() for arch, t in tokenizers.items()}
    every = configs(vocab) | new_configs(vocab)
    for seed, (arch, config) in enumerate(every.items()):
        if arch in chosen:
            make_hf(arch, tokenizers[arch], config, seed)
    if "gguf" in chosen:
        make_gguf(tokenizers["llama"])
    if "--real" in sys.argv:
        make_real()


if __name__ == "__main__":
    main()
