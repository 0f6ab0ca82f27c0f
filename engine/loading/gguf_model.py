"""GGUF files (llama.cpp's format) of the llama architecture, read with the `gguf` package.

Tensors are dequantized by gguf-py (llama.cpp's own reference code) to float32. llama.cpp's
converter permutes the rows of attn_q / attn_k for its RoPE layout; they are permuted back here
(as transformers does when it loads a GGUF), so RoPE is the half-split rotate_half form again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from engine.loading.document import ScenarioError
from engine.spec import ModelSpec, NormSpec

SUPPORTED = ("F32", "F16", "Q8_0", "Q4_0", "Q4_1")
LAYER_TENSORS = {"ln1.w": "attn_norm", "ln2.w": "ffn_norm", "attn.wq": "attn_q", "attn.wk": "attn_k",
                 "attn.wv": "attn_v", "attn.wo": "attn_output", "mlp.w_gate": "ffn_gate", "mlp.w_up": "ffn_up",
                 "mlp.w_down": "ffn_down"}


class GGUFModel:
    def __init__(self, path: Path):
        self.path = path
        self.reader = GGUFReader(path)
        self.meta = {key: field.contents() for key, field in self.reader.fields.items()}
        self.tensors = {tensor.name: tensor for tensor in self.reader.tensors}

    def error(self, key: str, message: str) -> ScenarioError:
        return ScenarioError(str(self.path), None, key, message)

    def spec(self) -> ModelSpec:
        arch = self.meta.get("general.architecture")
        if arch != "llama":
            raise self.error("general.architecture", f"only the llama architecture is supported, got {arch!r}")
        scaling = self.meta.get("llama.rope.scaling.type", "none")
        if scaling != "none":
            raise self.error("llama.rope.scaling.type", f"RoPE scaling {scaling!r} is not supported")
        d, heads = self._size("llama.embedding_length"), self._size("llama.attention.head_count")
        kv_heads = self._size("llama.attention.head_count_kv", heads)
        if d % heads or heads % kv_heads:
            raise self.error("llama.attention.head_count", f"{heads} heads of {d} wide with {kv_heads} key/value "
                             "heads: the heads must divide the width and the key/value heads the heads")
        return ModelSpec(
            d_model=d, n_layers=self._size("llama.block_count"), n_heads=heads, d_head=d // heads,
            d_ff=self._size("llama.feed_forward_length"),
            norm=NormSpec("rmsnorm", "pre", float(self._key("llama.attention.layer_norm_rms_epsilon")), affine=True),
            final_norm=True, ffn="gated_silu", positions="rope",
            max_positions=int(self.meta.get("llama.context_length", 0)), bias=False,
            tied_unembed="output.weight" not in self.tensors,
            kv_heads=kv_heads,
            rope_theta=float(self.meta.get("llama.rope.freq_base", 10000.0)),
        )

    def _key(self, key: str) -> int | float:
        if key not in self.meta:
            raise self.error(key, "missing from the file's metadata")
        return self.meta[key]

    def _size(self, key: str, default: int | None = None) -> int:
        value = self.meta.get(key, default) if default is not None else self._key(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31:
            raise self.error(key, f"expected an integer in 1..2^31, got {value!r}")
        return value

    def weight(self, name: str, spec: ModelSpec) -> np.ndarray:
        """The engine parameter `name`, dequantized, unpermuted, as [in, out] for matrices."""
        if name in ("embed", "ln_final.w"):
            return self._tensor("token_embd.weight" if name == "embed" else "output_norm.weight")
        if name == "unembed":
            return self._tensor("output.weight").T
        _, layer, leaf = name.split(".", 2)
        kind = LAYER_TENSORS[leaf]
        w = self._tensor(f"blk.{layer}.{kind}.weight")
        if kind == "attn_q":
            w = unpermute(w, spec.n_heads)
        elif kind == "attn_k":
            w = unpermute(w, spec.n_kv_heads)
        return w if w.ndim == 1 else w.T

    def _tensor(self, name: str) -> np.ndarray:
        if name not in self.tensors:
            raise self.error(name, "tensor missing from the file")
        tensor = self.tensors[name]
        kind = GGMLQuantizationType(tensor.tensor_type).name
        if kind not in SUPPORTED:
            raise self.error(name, f"tensor type {kind} is not supported ({', '.join(SUPPORTED)})")
        return dequantize(tensor.data, tensor.tensor_type).astype(np.float32)


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's reshape(n_head, 2, rows/n_head/2, in).swapaxes(1, 2) of q/k rows ([out, in])."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
