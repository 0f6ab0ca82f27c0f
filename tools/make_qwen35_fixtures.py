"""Write tests/fixtures/qwen3_5/: a tiny random Qwen3.5 text model (Qwen3_5ForCausalLM) and transformers' true
float64 outputs.

    /work/refenv/bin/python tools/make_qwen35_fixtures.py

Written with transformers 5.24.0 and torch 2.13.0 (CPU), in the reference environment of make_fixtures.py.
3 layers of width 32 (a multiple of Q8_0's block): Gated DeltaNet, Gated DeltaNet, gated full attention
(`layer_types`); the DeltaNet has 2 key heads of width 8 serving 4 value heads of width 8 and a conv kernel of 3; the attention 4 heads of width 8 over 2 kv
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

gguf-qwen3_5/qwen35-f32.gguf and qwen35-q8_0.gguf: the checkpoint as llama.cpp's own converter writes it
(convert_hf_to_gguf.py --outtype f32 / q8_0 --no-mtp, from the llama-cpp-python 0.3.36 sdist at LLAMA_CPP), its
tokenizer's pre-tokenizer named "gpt-2" (a byte-level BPE, which the converter does not know by its hash). The
converter stores A as −exp(A_log), every norm gain but the gated norm's as 1 + w, the conv squeezed to
[channels, K], dt_bias as ssm_dt.bias, and the value heads tiled instead of grouped by key head. Their references
(reference-f32.npz, reference-q8_0.npz, the same arrays) are transformers' float64 forward of a Hugging Face
folder rebuilt from the dequantized tensors (each of those transforms undone in float64) with the file's own ε
(float32: 9.99999997e-07, which the gated norm's small inputs feel at 1e-8); the rebuilt f32 folder
is checked against the original weights (≤ 1e-6: the converter's float32 rounding of 1 + w and −exp(A_log)).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from float64_reference import counter_sees_float32, eager_attention, gemma_rms_norm, greedy_passes  # noqa: E402
from make_fixtures import OUT, PROMPT, byte_bpe, randomize  # noqa: E402

LLAMA_CPP = Path("/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp")
CONVERT = """import runpy, sys
sys.path.insert(0, {llama!r})
from conversion import base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = ["convert_hf_to_gguf.py", {folder!r}, "--outtype", {outtype!r}, "--no-mtp", "--outfile", {out!r}]
runpy.run_path({llama!r} + "/convert_hf_to_gguf.py", run_name="__main__")
"""
NEW_TOKENS = 5
SEED = 7
CHUNK = 4
LAYER_TYPES = ["linear_attention", "linear_attention", "full_attention"]


def config(vocab_size: int):
    import transformers

    return transformers.Qwen3_5TextConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=len(LAYER_TYPES),
        layer_types=LAYER_TYPES, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
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


def pure_float64(module=None, prefix: str = "Qwen3_5") -> None:
    """The patches on transformers' Qwen3.5 modelling module (or on `module`, whose classes are named `prefix`…, as
    make_qwen35moe_fixtures.py's Qwen3_5Moe ones: the same layers)."""
    if module is None:
        from transformers.models.qwen3_5 import modeling_qwen3_5 as module

    getattr(module, f"{prefix}RMSNorm").forward = gemma_rms_norm  # x / rms(x) · (1 + w), as Gemma's
    getattr(module, f"{prefix}RMSNormGated").forward = _gated_norm
    getattr(module, f"{prefix}TextRotaryEmbedding").forward = _rotary
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
    linear = [i for i, kind in enumerate(LAYER_TYPES) if kind == "linear_attention"]

    def states(cache):
        return {"recurrent": np.stack([cache.layers[i].recurrent_states[0][0].numpy() for i in linear]),
                "conv": np.stack([cache.layers[i].conv_states[0][0].numpy() for i in linear])}

    with _TensorFloatIsDouble():
        passes, counter = greedy_passes(model, ids, NEW_TOKENS, states)
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


# -- the GGUF files and the references of their dequantized weights ---------------------------------------------
def convert(folder: Path, out: Path, outtype: str) -> None:
    """llama.cpp's converter on `folder`, in a process of its own (its gguf-py before the installed gguf)."""
    code = CONVERT.format(llama=str(LLAMA_CPP), folder=str(folder), out=str(out), outtype=outtype)
    env = os.environ | {"PYTHONPATH": str(LLAMA_CPP / "gguf-py")}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)


def grouped(w: np.ndarray, config, where: str) -> np.ndarray:
    """The converter's tiled value heads ([G0v0, G1v0, …, G0v1, …]) back in Hugging Face's grouped order."""
    k, v = config.linear_num_key_heads, config.linear_num_value_heads
    if where == "columns":
        return grouped(w.T, config, "rows").T
    if where == "v rows":
        qk = 2 * k * config.linear_key_head_dim
        return np.concatenate([w[:qk], grouped(w[qk:], config, "rows")])
    tiled = w.reshape(v // k, k, -1, *w.shape[1:])
    return np.swapaxes(tiled, 0, 1).reshape(w.shape)


HF_OF_GGUF = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
              "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
              "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
              "attn_qkv": "linear_attn.in_proj_qkv", "attn_gate": "linear_attn.in_proj_z",
              "ssm_alpha": "linear_attn.in_proj_a", "ssm_beta": "linear_attn.in_proj_b",
              "ssm_out": "linear_attn.out_proj", "ssm_norm": "linear_attn.norm", "ssm_conv1d": "linear_attn.conv1d",
              "ssm_a": "linear_attn.A_log", "ssm_dt": "linear_attn.dt_bias"}
VALUE_HEADS = {"attn_qkv": "v rows", "ssm_conv1d": "v rows", "attn_gate": "rows", "ssm_alpha": "rows",
               "ssm_beta": "rows", "ssm_a": "rows", "ssm_dt": "rows", "ssm_out": "columns"}


def hf_tensors_of(path: Path, config, names: dict[str, str] = HF_OF_GGUF) -> dict[str, torch.Tensor]:
    """The GGUF's tensors dequantized by gguf-py, as the Hugging Face tensors they were converted from (float64);
    `names`: each block tensor's Hugging Face module."""
    import gguf
    from gguf.quants import dequantize

    found = {}
    for tensor in gguf.GGUFReader(path).tensors:
        w = dequantize(tensor.data, tensor.tensor_type).astype(np.float64).reshape(tuple(reversed(tensor.shape)))
        if tensor.name == "token_embd.weight":
            found["model.embed_tokens.weight"] = w
            continue
        if tensor.name == "output_norm.weight":
            found["model.norm.weight"] = w - 1
            continue
        _, layer, kind, *_ = tensor.name.split(".")
        if kind.endswith("norm") and kind != "ssm_norm":
            w = w - 1
        if kind == "ssm_a":
            w = np.log(-w)
        if kind in VALUE_HEADS and config.linear_num_value_heads != config.linear_num_key_heads:
            w = grouped(w, config, VALUE_HEADS[kind])
        if kind == "ssm_conv1d":
            w = w[:, None, :]
        suffix = "" if kind in ("ssm_a", "ssm_dt") else ".weight"
        found[f"model.layers.{layer}.{names[kind]}{suffix}"] = w
    return {name: torch.tensor(np.ascontiguousarray(w)) for name, w in found.items()}


def gguf_reference(path: Path, folder: Path, ids: list[int], original: dict | None = None) -> dict[str, np.ndarray]:
    """transformers' float64 run of the GGUF's dequantized weights (`original`: the weights they must be close to)."""
    import transformers

    with rebuilt_folder(path, transformers.Qwen3_5TextConfig.from_pretrained(folder), hf_tensors_of, original) as rebuilt:
        model = transformers.Qwen3_5ForCausalLM.from_pretrained(rebuilt, dtype=torch.float64,
                                                                attn_implementation="eager").eval()
        rebuild_rotary(model)
        return run(model, ids)


@contextlib.contextmanager
def rebuilt_folder(path: Path, config, tensors_of, original: dict | None):
    """A Hugging Face folder of `config` and the GGUF's tensors as `tensors_of(path, config)` gives them (checked
    against `original` where given), for as long as the block runs."""
    from safetensors.torch import save_file

    import gguf

    # the file's ε is float32 (1e-6 reads 9.99999997e-07), and the gated norm's inputs are small enough to see it
    fields = gguf.GGUFReader(path).fields
    arch = fields["general.architecture"].contents()
    config.rms_norm_eps = float(fields[f"{arch}.attention.layer_norm_rms_epsilon"].contents())
    tensors = tensors_of(path, config)
    if original is not None:
        assert set(tensors) == set(original), set(tensors) ^ set(original)
        worst = max(float((tensors[k] - original[k].to(torch.float64)).abs().max()) for k in tensors)
        assert worst <= 1e-6, worst
    with tempfile.TemporaryDirectory() as rebuilt:
        (Path(rebuilt) / "config.json").write_text(json.dumps(config.to_dict()))
        save_file(tensors, Path(rebuilt) / "model.safetensors")
        yield rebuilt


def make_gguf(folder: Path, ids: list[int]) -> None:
    from safetensors.torch import load_file

    out = OUT / "gguf-qwen3_5"
    out.mkdir(exist_ok=True)
    original = dict(load_file(folder / "model.safetensors"))
    for outtype in ("f32", "q8_0"):
        path = out / f"qwen35-{outtype}.gguf"
        convert(folder, path, outtype)
        ref = gguf_reference(path, folder, ids, original if outtype == "f32" else None)
        np.savez_compressed(out / f"reference-{outtype}.npz", **ref)
        print(f"{path.name}: greedy {ref['greedy_ids'].tolist()}, {int(ref['float32_ops'])} float32 operators")


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
    make_gguf(folder, ids)
    print(f"qwen3_5: {len(ids)} prompt tokens, {int(ref['ops'])} operators dispatched, {int(ref['float32_ops'])} "
          f"read or wrote float32; greedy {ref['greedy_ids'].tolist()}")


if __name__ == "__main__":
    main()
