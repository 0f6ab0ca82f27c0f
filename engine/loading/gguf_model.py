"""GGUF files (llama.cpp's format) of the llama, qwen2, qwen3, gemma2, gemma3, gemma4 (gguf_gemma4), lfm2, qwen35,
qwen35moe, qwen3moe, gpt-oss and deepseek2 (gguf_deepseek.py) architectures.

Metadata and the tensor table come from `GGUFFile` (a memory map); each tensor is dequantized by
gguf-py (`gguf.quants`, llama.cpp's own reference code, every type it has) when first used.
llama.cpp's converter permutes the rows of a llama model's attn_q / attn_k for its interleaved
RoPE; they are permuted back (by attention's gguf_tensor: a block's tensors are read by their kinds, through a
GGUFBlock), as transformers does when it loads a GGUF, so RoPE is the half-split rotate_half form again. qwen2,
qwen3 and Gemma files are written unpermuted (llama.cpp runs them with its NEOX RoPE, the half-split form);
llama.cpp stores Gemma's norm gains as 1 + w
(undone here, as transformers does). An lfm2 file names its short-conv layers by a key/value head count of 0
(`attention.head_count_kv` is one count per layer), their taps by `shortconv.l_cache`, and its last norm
token_embd_norm; its conv kernel is stored (channels, K), squeezed from transformers' (channels, 1, K).
The sparse architectures' experts are merged tensors (ffn_gate_exps … with the expert first, MXFP4 in gpt-oss
files): an expert's matrices are dequantized only when a token first uses it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from engine.hooks import Hook
from engine.layers import (gguf_locate, gguf_suffixes, gguf_tensor, gguf_tensors, hf_layer_kinds, per_layer_input,
                           routed_expert, routed_name)
from engine.loading import gguf_deepseek, gguf_gemma4
from engine.causes import Cause, cause
from engine.loading.document import ScenarioError
from engine.loading.gguf_blocks import EncodedBlock, block_of, dequantize_into
from engine.loading.gguf_file import GGUFFile, TensorInfo
from engine.parameters import format_shape
from engine.loading.yarn import mscale, yarn_divisors
from engine.layers.causal_conv import KERNEL
from engine.layers.gated_deltanet import DeltaNetSpec
from engine.layers.moe_ffn import MoeSpec
from engine.spec import FfnKind, LayerSpec, ModelSpec, NormKind, NormPlacement, NormSpec, Positions

GEMMA = ("gemma2", "gemma3")
QWEN35, QWEN35_MOE = "qwen35", "qwen35moe"  # Qwen3.5's layers; the second's FFNs sparse, with a shared expert
QWEN35S = (QWEN35, QWEN35_MOE)
SPARSE = ("qwen3moe", "gpt-oss", QWEN35_MOE)
ARCHITECTURES = ("llama", "qwen2", "qwen3", *GEMMA, gguf_gemma4.ARCH, "lfm2", QWEN35, *SPARSE, gguf_deepseek.ARCH)
OFFSET_NORMS = {*GEMMA, *QWEN35S}  # llama.cpp stores their norm gains as 1 + w (Gated DeltaNet reads its ssm_norm: w)
ARCH_TENSORS = {"gpt-oss": {"ln2.w": "post_attention_norm"}}  # where an architecture names a block tensor its own way
AS_STORED = ("embed", "per_layer_embed")  # matrices the engine keeps [rows, width] as the file does, not transposed
GPT_OSS_SWIGLU = (1.702, 7.0)  # llama.cpp's constants for gpt-oss's clamped SwiGLU (alpha, limit): not in the file
UNSUPPORTED = {  # metadata (under the architecture) that would change what the model computes, with the value it
    "expert_shared_count": 0, "expert_weights_scale": 1.0, "leading_dense_block_count": 0,  # may take here
    "rope.scaling.yarn_ext_factor": 1.0, "rope.scaling.yarn_log_multiplier": 0.0}
LAYER_TENSORS = {"ln1.w": "attn_norm", "ln2.w": "ffn_norm", "ln1_post.w": "post_attention_norm",
                 "ln2_post.w": "post_ffw_norm", **gguf_tensors(),
                 **per_layer_input.GGUF_BLOCK}  # the block's norms, its kinds', Gemma 4's block tail's
Getter = Callable[[str], np.ndarray]


@cache
def dequantizable() -> frozenset[GGMLQuantizationType]:
    """The tensor types gguf-py dequantizes, found by asking it (one zero block of each)."""
    found = set()
    for kind in GGMLQuantizationType:
        try:
            dequantize(np.zeros((1, GGML_QUANT_SIZES[kind][1]), dtype=np.uint8), kind)
        except (NotImplementedError, KeyError, ValueError):
            continue
        found.add(kind)
    return frozenset(found)


class GGUFModel:
    def __init__(self, path: Path):
        self.path = path
        self.file = GGUFFile(path)
        self.meta, self.tensors = self.file.meta, self.file.tensors
        self.arch = self.meta.get("general.architecture")

    def error(self, key: str, message: Cause) -> ScenarioError:
        return ScenarioError(str(self.path), None, key, message)

    def spec(self) -> ModelSpec:
        arch = self.arch
        if not isinstance(arch, str) or arch not in ARCHITECTURES:
            raise self.error("general.architecture", cause("gguf.architecture", arch=arch,
                                                           supported=', '.join(ARCHITECTURES)))
        if arch == gguf_gemma4.ARCH:
            return gguf_gemma4.spec(self)
        if arch == gguf_deepseek.ARCH:
            return gguf_deepseek.spec(self)
        d, heads = self._size(f"{arch}.embedding_length"), self._size(f"{arch}.attention.head_count")
        layers = self._size(f"{arch}.block_count")
        blocks = self._lfm2_blocks(layers) if arch == "lfm2" else None
        kv_heads = self._lfm2_kv_heads() if arch == "lfm2" else self._size(f"{arch}.attention.head_count_kv", heads)
        d_head = self._size(f"{arch}.attention.key_length", d // heads)
        if (f"{arch}.attention.key_length" not in self.meta and d % heads) or heads % kv_heads:
            raise self.error(f"{arch}.attention.head_count", cause("gguf.heads", heads=heads, d=d, kv_heads=kv_heads))
        self._check_held(layers, d * heads * d_head)
        if f"{arch}.vocab_size" in self.meta:  # llama.cpp counts the tokens instead; a number is all it may be
            self._size(f"{arch}.vocab_size")
        spec = ModelSpec(
            d_model=d, n_layers=layers, n_heads=heads, d_head=d_head,
            d_ff=self._size(f"{arch}.{'expert_' if arch == QWEN35_MOE else ''}feed_forward_length"),  # (no dense FFN)
            norm=NormSpec(NormKind.RMSNORM, NormPlacement.PRE, self._epsilon(), affine=True),
            final_norm=True, ffn=FfnKind.GATED_SILU, positions=Positions.ROPE,
            max_positions=self._count(f"{arch}.context_length"), bias=False,
            biases=("q", "k", "v") if arch == "qwen2" else (),
            tied_unembed="output.weight" not in self.tensors,
            kv_heads=kv_heads, rope_theta=self._number(f"{arch}.rope.freq_base", 10000.0, lowest=1.0),
            qk_norm=arch in ("qwen3", "gemma3", "lfm2", *QWEN35S, "qwen3moe"), rope_factors=self._rope_factors(d_head),
            rope_scale=self._rope_scale(), layers=blocks,
        )
        spec = self._sparse(spec) if arch in SPARSE else spec
        if arch in QWEN35S:
            return self._qwen35(spec)
        return self._gemma(spec) if arch in GEMMA else spec

    def _sparse(self, spec: ModelSpec) -> ModelSpec:
        """qwen3moe, qwen35moe and gpt-oss as llama.cpp runs them: a layer whose file holds a router (ffn_gate_inp) is
        sparse, its chosen scores renormalised (llama.cpp's norm_w for qwen3moe and qwen35moe; gpt-oss's softmax over
        its top k); qwen35moe adds a shared expert (ffn_*_shexp, `expert_shared_feed_forward_length` wide) under its
        sigmoid gate (ffn_gate_inp_shexp); gpt-oss adds biases (router, experts, q/k/v/o), attention sinks, the clamped
        SwiGLU and a sliding window on even layers."""
        arch = self.arch
        for key, allowed in UNSUPPORTED.items():
            if self.meta.get(f"{arch}.{key}", allowed) != allowed:
                raise self.error(f"{arch}.{key}", cause("gguf.only", value=self.meta[f"{arch}.{key}"], allowed=allowed))
        experts, used = self._size(f"{arch}.expert_count"), self._size(f"{arch}.expert_used_count")
        if used > experts:
            raise self.error(f"{arch}.expert_used_count", cause("gguf.top_k", used=used, experts=experts))
        sparse = tuple(i for i in range(spec.n_layers) if f"blk.{i}.ffn_gate_inp.weight" in self.tensors)
        gpt_oss = arch == "gpt-oss"
        shared = f"{arch}.expert_shared_feed_forward_length"
        moe = MoeSpec(experts, used, self._size(f"{arch}.expert_feed_forward_length"), True, sparse,
                      self._size(shared) if arch == QWEN35_MOE and shared in self.meta else 0, bias=gpt_oss,
                      clamp=GPT_OSS_SWIGLU if gpt_oss else None)
        if not gpt_oss:
            return replace(spec, moe=moe)
        return replace(spec, moe=moe, biases=("q", "k", "v", "o"), attn_sinks=True,
                       sliding_window=self._size(f"{arch}.attention.sliding_window"),
                       sliding_layers=tuple(range(0, spec.n_layers, 2)))

    def _qwen35(self, spec: ModelSpec) -> ModelSpec:
        """Qwen3.5 as llama.cpp's converter writes it: Gated DeltaNet layers where `attention.recurrent_layers`
        says (else all but every `full_attention_interval`-th), gated attention with partial RoPE, (1 + w) norms."""
        arch = self.arch
        key = f"{arch}.ssm"
        if self.meta.get(f"{arch}.nextn_predict_layers", 0):
            raise self.error(f"{arch}.nextn_predict_layers", cause("gguf.mtp"))
        k_heads, v_heads = self._size(f"{key}.group_count"), self._size(f"{key}.time_step_rank")
        inner = self._size(f"{key}.inner_size")
        if v_heads % k_heads or inner % v_heads:
            raise self.error(f"{key}.time_step_rank", cause("gguf.value_heads", v_heads=v_heads, k_heads=k_heads,
                                                            inner=inner))
        net = DeltaNetSpec(k_heads, v_heads, self._size(f"{key}.state_size"), inner // v_heads,
                           self._size(f"{key}.conv_kernel"))
        recurrent = self.meta.get(f"{arch}.attention.recurrent_layers")
        if recurrent is None:
            interval = self._size(f"{arch}.full_attention_interval", 4)
            recurrent = [(i + 1) % interval != 0 for i in range(spec.n_layers)]
        recurrent = recurrent.tolist() if isinstance(recurrent, np.ndarray) else recurrent
        if not isinstance(recurrent, list) or len(recurrent) != spec.n_layers or \
                not all(isinstance(flag, bool) for flag in recurrent):
            raise self.error(f"{arch}.attention.recurrent_layers",
                             cause("gguf.recurrent", n_layers=spec.n_layers, recurrent=recurrent))
        dims = self._size(f"{arch}.rope.dimension_count", spec.d_head)
        if dims > spec.d_head or dims % 2:
            raise self.error(f"{arch}.rope.dimension_count", cause("gguf.rotary_dims", d_head=spec.d_head, dims=dims))
        blocks = tuple(LayerSpec(mixer=net.KIND, ffn=block.ffn, options={KERNEL: net.kernel}) if linear else
                       LayerSpec(ffn=block.ffn) for linear, block in zip(recurrent, spec.blocks))
        return replace(spec, norm=replace(spec.norm, weight_offset=True), attn_gate=True, deltanet=net,
                       rope_dims=dims, layers=blocks)

    def _lfm2_kv_heads(self) -> int:
        """LFM2's one key/value head count of its attention layers (0 on its short-conv layers)."""
        key = f"{self.arch}.attention.head_count_kv"
        counts = set(self._layer_counts(key)) - {0}
        if len(counts) != 1:
            raise self.error(key, cause("gguf.kv_counts", counts=sorted(counts)))
        return counts.pop()

    def _lfm2_blocks(self, layers: int) -> tuple[LayerSpec, ...]:
        """LFM2's layers: attention where the key/value head count is above 0, else a short conv."""
        key, counts = f"{self.arch}.attention.head_count_kv", self._layer_counts(f"{self.arch}.attention.head_count_kv")
        if len(counts) != layers:
            raise self.error(key, cause("gguf.layer_counts", layers=layers, n_counts=len(counts)))
        kernel = self._size(f"{self.arch}.shortconv.l_cache")
        for biased in (name for name in self.tensors if ".shortconv." in name and name.endswith(".bias")):
            raise self.error(biased, cause("gguf.conv_bias"))
        conv = hf_layer_kinds()["conv"]  # the kind of Hugging Face's LFM2 `conv` layers
        return tuple(LayerSpec() if count else LayerSpec(mixer=conv, options={KERNEL: kernel}) for count in counts)

    def _layer_counts(self, key: str) -> list[int]:
        counts = self._key(key)  # GGUFFile reads an array of integers as one NumPy array
        counts = counts.tolist() if isinstance(counts, np.ndarray) else [counts]
        if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 2**31 for c in counts):
            raise self.error(key, cause("gguf.count_values", counts=counts))
        return counts

    def _rope_factors(self, d_head: int) -> tuple[float, ...] | None:
        """What RoPE's frequencies are divided by, as llama.cpp reads it: linear scaling's factor
        (`rope.scaling.type` linear, Gemma 3 4B and up) times the `rope_freqs` tensor (Llama 3.x)."""
        key = f"{self.arch}.rope.scaling"
        kind = self.meta.get(f"{key}.type", "none")
        if not isinstance(kind, str) or kind not in ("none", "linear", "yarn"):
            raise self.error(f"{key}.type", cause("gguf.rope_scaling", kind=kind))
        if kind == "yarn":
            return self._yarn(d_head)
        factor = self.meta.get(f"{key}.factor", 1.0) if kind == "linear" else 1.0
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < math.inf:
            raise self.error(f"{key}.factor", cause("gguf.positive", value=factor))
        if "rope_freqs.weight" not in self.tensors:
            return None if factor == 1.0 else (float(factor),) * (d_head // 2)
        freqs = self.dequantized("rope_freqs.weight", np.float64)
        if freqs.shape != (d_head // 2,) or not np.all(np.isfinite(freqs) & (freqs > 0)):
            raise self.error("rope_freqs.weight", cause("gguf.freqs", d_head=d_head // 2,
                                                        shape=format_shape(freqs.shape)))
        return tuple(float(f) * factor for f in freqs)

    def _yarn(self, d_head: int) -> tuple[float, ...]:
        """YaRN's divisors as llama.cpp computes them (the ramp's ends always floored and ceiled)."""
        key = f"{self.arch}.rope.scaling"
        if "rope_freqs.weight" in self.tensors:
            raise self.error("rope_freqs.weight", cause("gguf.yarn_freqs"))
        return yarn_divisors(self._number(f"{self.arch}.rope.freq_base", 10000.0, lowest=1.0), d_head,
                             self._number(f"{key}.factor", 1.0), self._number(f"{key}.original_context_length", 0.0),
                             self._number(f"{key}.yarn_beta_fast", 32.0), self._number(f"{key}.yarn_beta_slow", 1.0),
                             truncate=True)

    def _rope_scale(self) -> float:
        """YaRN's attention factor as llama.cpp applies it: yarn_attn_factor · (1 + 0.1 ln factor); 1 otherwise."""
        key = f"{self.arch}.rope.scaling"
        if self.meta.get(f"{key}.type") != "yarn":
            return 1.0
        return self._number(f"{key}.yarn_attn_factor", 1.0) * mscale(self._number(f"{key}.factor", 1.0))

    def _gemma(self, spec: ModelSpec) -> ModelSpec:
        """As llama.cpp runs Gemma 2/3: GeGLU, (1 + w) norms around each sublayer, embeddings times √d,
        scores over √key_length; Gemma 2 soft-caps scores and logits and slides on even layers, Gemma 3
        slides on five layers of six with RoPE base 10 000 there."""
        arch, gemma2 = self.arch, self.arch == "gemma2"
        caps = [self._number(f"{arch}.{key}", default) if gemma2 or f"{arch}.{key}" in self.meta else None
                for key, default in (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0))]
        window = self.meta.get(f"{arch}.attention.sliding_window")
        period = 2 if gemma2 else 6
        return replace(
            spec, ffn=FfnKind.GATED_GELU_TANH, norm=replace(spec.norm, weight_offset=True), post_norms=True,
            embed_scale=math.sqrt(spec.d_model), attn_scale=spec.d_head**-0.5,
            attn_softcap=None if caps[0] is None else float(caps[0]),
            final_softcap=None if caps[1] is None else float(caps[1]),
            sliding_window=None if window is None else self._size(f"{arch}.attention.sliding_window"),
            sliding_layers=None if window is None else tuple(i for i in range(spec.n_layers) if (i + 1) % period),
            rope_theta_local=None if gemma2 else 10000.0,
        )

    def _check_held(self, layers: int, query_numbers: int) -> None:
        """The depth and the query width against what the file holds, before RoPE's divisors (one per
        frequency) and the sliding layers' list are made from them: 2^31 would take gigabytes."""
        if layers > len(self.tensors):
            raise self.error(f"{self.arch}.block_count", cause("gguf.layers_held", layers=layers,
                                                               n_tensors=len(self.tensors)))
        size = self.path.stat().st_size
        if query_numbers > 8 * size:  # no ggml type takes under a bit a number
            raise self.error(f"{self.arch}.attention.key_length",
                             cause("gguf.query_held", query_numbers=query_numbers, size=size))

    def _epsilon(self) -> float:
        """RMSNorm's epsilon: a number in [0, 1), as config.json's rms_norm_eps is read."""
        key = f"{self.arch}.attention.layer_norm_rms_epsilon"
        value = self._key(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise self.error(key, cause("gguf.eps", value=value))
        return float(value)

    def _count(self, key: str) -> int:
        """A count that may be absent or 0 (unknown), never negative."""
        value = self.meta.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**31:
            raise self.error(key, cause("gguf.count_key", value=value))
        return value

    def _number(self, key: str, default: float, lowest: float = 0.0) -> float:
        """A finite number above `lowest` (RoPE's base, a soft cap)."""
        value = self.meta.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lowest < value < math.inf:
            raise self.error(key, cause("gguf.above", lowest=f"{lowest:g}", value=value))
        return float(value)

    def _key(self, key: str) -> int | float:
        if key not in self.meta:
            raise self.error(key, cause("gguf.missing"))
        return self.meta[key]

    def _size(self, key: str, default: int | None = None) -> int:
        value = self.meta.get(key, default) if default is not None else self._key(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31:
            raise self.error(key, cause("gguf.size_key", value=value))
        return value

    def weight(self, name: str, spec: ModelSpec, get: Getter) -> np.ndarray:
        """The engine parameter `name` from `get(tensor name)`, as [in, out] for matrices: a block's read by its kinds
        (engine.layers.gguf_tensor), the rest as stored (`stored_weight`)."""
        parts = name.split(".", 3)
        if parts[0] == "blocks" and len(parts) == 4:
            tensors = GGUFBlock(self, spec, get, parts[1], parts[2])
            return gguf_tensor(spec.blocks[int(parts[1])], parts[2], parts[3], tensors)
        return self.stored_weight(name, get)

    def stored(self, name: str, get: Getter) -> np.ndarray:
        """The tensor behind engine parameter `name` as the file stores it ([out, in]; an expert's slice of a merged
        tensor)."""
        tensor, expert = self.tensor_name(name), expert_of(name)
        return get(tensor) if expert is None else get(tensor, expert)

    def stored_weight(self, name: str, get: Getter) -> np.ndarray:
        """Engine parameter `name` as stored, a norm's 1 + w undone where the architecture stores it so, as [in, out]
        for matrices."""
        w = self.stored(name, get)
        if self.arch in OFFSET_NORMS and self.tensor_name(name).split(".")[-2].endswith("norm"):
            w = w - 1
        return w if w.ndim == 1 or name in AS_STORED else w.T

    def block(self, name: str, index: tuple[int, ...], spec: ModelSpec) -> EncodedBlock | None:
        """The quantisation block behind engine parameter `name` at `index` (None if unquantized)."""
        tensor, row, col = self.locate(name, index, spec)
        info = self.info(tensor)
        raw = self.file.tensor_bytes(info)
        return block_of(tensor, info.kind, raw.reshape(-1, raw.shape[-1]), row, col)

    def locate(self, name: str, index: tuple[int, ...], spec: ModelSpec) -> tuple[str, int, int]:
        """The GGUF tensor, row and column that hold engine parameter `name` at `index`: matrices are
        transposed ([in, out] here, [out, in] there), a vector is one row; a block's kind may lay its parameters out
        otherwise (engine.layers.gguf_locate: a llama file's q/k rows permuted, Qwen3.5's gated attn_q)."""
        expert = expert_of(name)
        if expert is not None:  # its rows within the merged tensor's (experts × rows) rows
            tensor = self.tensor_name(name)
            if len(index) == 1:
                return tensor, expert, index[0]
            return tensor, expert * self.tensors[tensor].shape[1] + index[1], index[0]
        if name in AS_STORED:
            return self.tensor_name(name), index[0], index[1]
        parts = name.split(".", 3)
        if parts[0] == "blocks" and len(parts) == 4:
            found = gguf_locate(spec.blocks[int(parts[1])], parts[2], parts[3], index,
                                GGUFBlock(self, spec, None, parts[1], parts[2]))
            if found is not None:
                return found
        if len(index) == 1:
            return self.tensor_name(name), 0, index[0]
        tensor, (row, col) = self.tensor_name(name), index[::-1]
        return tensor, row, col

    def tensor_name(self, name: str) -> str:
        fixed = {"embed": "token_embd.weight", "unembed": "output.weight",
                 "ln_final.w": "token_embd_norm.weight" if self.arch == "lfm2" else "output_norm.weight",
                 **{name: f"{tensor}.weight" for name, tensor in per_layer_input.GGUF.items()}}
        if name in fixed:
            return fixed[name]
        _, layer, leaf = name.split(".", 2)
        if expert_of(name) is not None:  # mlp.experts.E.w_gate: expert E of the merged ffn_gate_exps
            leaf = routed_name(Hook.parse(leaf))
        if self.arch in QWEN35S and leaf == "ln2.w":  # written as the block's post_attention_layernorm
            return f"blk.{layer}.post_attention_norm.weight"
        tensor = ARCH_TENSORS.get(self.arch, {}).get(leaf) or LAYER_TENSORS[leaf]
        bias = leaf.startswith("attn.b") or leaf.rsplit(".", 1)[-1].startswith("b_")  # mlp.b_router, experts' b_gate
        suffix = gguf_suffixes().get(leaf, ".bias" if bias else ".weight")
        return f"blk.{layer}.{tensor}{suffix}"

    def info(self, name: str) -> TensorInfo:
        """A tensor's entry, refused (naming it) when missing or of a type gguf-py cannot dequantize."""
        if name not in self.tensors:
            raise self.error(name, cause("gguf.tensor_missing"))
        info = self.tensors[name]
        if info.kind not in dequantizable():
            known = ", ".join(sorted(kind.name for kind in dequantizable()))
            raise self.error(name, cause("gguf.dequantize", name=info.kind.name, known=known))
        return info

    def stand_in(self, name: str, expert: int | None = None) -> np.ndarray:
        """A zero-byte array of the tensor's shape (of one expert's slice of a merged tensor): checks shapes
        without reading any data."""
        return np.broadcast_to(np.float32(0), self._shape(name, expert))

    def _shape(self, name: str, expert: int | None) -> tuple[int, ...]:
        shape = self.info(name).shape
        if expert is None:
            return shape
        if len(shape) < 2 or expert >= shape[0]:
            raise self.error(name, cause("gguf.experts_slices", expert=expert + 1, shape=format_shape(shape)))
        return shape[1:]

    def dequantized(self, name: str, dtype: np.dtype, expert: int | None = None,
                    ids: np.ndarray | None = None) -> np.ndarray:
        """The tensor (or one expert's slice of a merged tensor, or the matrix's rows `ids`: only their bytes are read;
        a block never spans two rows) in `dtype`: F32 in float32 stays a view of the map; otherwise gguf-py's
        dequantization of a chunk of rows at a time, written straight into the result (no whole float32 copy)."""
        info, shape = self.info(name), self._shape(name, expert)
        raw = self.file.tensor_bytes(info)
        raw = raw if expert is None else raw[expert]
        if ids is not None:  # row indices of a matrix, of any shape (a batch's)
            raw, shape = raw[ids.reshape(-1)], (*ids.shape, *shape[1:])
        if info.kind is GGMLQuantizationType.F32 and np.dtype(dtype) == np.float32:
            return raw.view(np.float32).reshape(shape)
        return dequantize_into(raw.reshape(-1, raw.shape[-1]), info.kind, np.empty(shape, dtype=dtype))


@dataclass(frozen=True)
class Quantisation:
    """How a GGUF checkpoint stores each engine parameter (LazyWeights.quantisation)."""

    model: GGUFModel
    spec: ModelSpec

    def kind(self, name: str) -> str:
        """The parameter's tensor type, e.g. "Q4_K"."""
        return self.model.info(self.model.tensor_name(name)).kind.name

    def block(self, name: str, index: tuple[int, ...]) -> EncodedBlock | None:
        """The quantisation block behind the parameter's value at `index` (None if unquantized)."""
        return self.model.block(name, index, self.spec)


def expert_of(name: str) -> int | None:
    """The routed expert an engine parameter belongs to (blocks.L.mlp.experts.E.…), or None: its kind's
    routed_expert of the name read as a hook's (a parameter's module is its hooks')."""
    return routed_expert(Hook.parse(name))


@dataclass(frozen=True)
class GGUFBlock:
    """One kind's tensors in a block of a GGUF file (`part`: its module, `attn`), as its `gguf_tensor(leaf, tensors)`
    and `gguf_locate(leaf, index, tensors)` read them: `name(leaf)` the tensor of its parameter `leaf` (by the kinds'
    GGUF tables), `stored(leaf)` that tensor as the file stores it ([out, in]), `weight(leaf)` as the engine reads
    a tensor it stores plainly, `get(tensor)` the block's tensor `tensor` (`attn_k_b.weight`), `spec` the model's."""

    model: GGUFModel
    spec: ModelSpec
    getter: Getter | None  # None: only names and shapes are asked (locate)
    layer: str
    part: str

    @property
    def permuted(self) -> bool:
        """Whether llama.cpp's converter permuted the q/k rows for its interleaved RoPE (a llama file)."""
        return self.model.arch == "llama"

    def _param(self, leaf: str) -> str:
        return f"blocks.{self.layer}.{self.part}.{leaf}"

    def name(self, leaf: str) -> str:
        return self.model.tensor_name(self._param(leaf))

    def shape(self, leaf: str) -> tuple[int, ...]:
        return self.model.info(self.name(leaf)).shape

    def tensor(self, tensor: str) -> str:
        return f"blk.{self.layer}.{tensor}"

    def get(self, tensor: str) -> np.ndarray:
        return self.getter(self.tensor(tensor))

    def stored(self, leaf: str) -> np.ndarray:
        return self.model.stored(self._param(leaf), self.getter)

    def weight(self, leaf: str) -> np.ndarray:
        return self.model.stored_weight(self._param(leaf), self.getter)
