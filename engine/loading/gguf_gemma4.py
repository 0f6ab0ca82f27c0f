"""GGUF files of the `gemma4` architecture, as llama.cpp's converter writes them (conversion/gemma.py, Gemma4Model).

Its metadata holds per-layer arrays: `feed_forward_length` (double on the KV-shared layers with
use_double_wide_mlp), `attention.head_count_kv`, `attention.sliding_window_pattern` (true: sliding); the full
layers' head width is `attention.key_length`, the sliding layers' `key_length_swa`; `rope.freq_base` is the full
layers' base, `rope.freq_base_swa` the sliding layers'; `attention.shared_kv_layers` the last layers that read an
earlier layer's K/V; `embedding_length_per_layer_input` the per-layer inputs' width. The full layers' proportional
RoPE is the `rope_freqs` tensor (1 for a frequency that turns, 1e30 for one that stands: llama.cpp's NEOX RoPE
cannot leave the middle of a head unturned otherwise). Norm gains are stored as they are (no 1 + w, unlike
Gemma 2/3); a full layer without `attn_v` takes its values from its keys (attention_k_eq_v). Not supported, and
refused by name: partial RoPE on sliding layers, the MoE block's tensors.
"""

from __future__ import annotations

import math

import numpy as np

from engine.causes import cause
from engine.spec import FfnKind, LayerSpec, ModelSpec, NormKind, NormPlacement, NormSpec, Positions

ARCH = "gemma4"


def spec(model) -> ModelSpec:
    """`model`: the engine.loading.gguf_model.GGUFModel whose metadata and tensors are read."""
    a = f"{ARCH}."
    d, heads, n = model._size(a + "embedding_length"), model._size(a + "attention.head_count"), model._size(
        a + "block_count")
    model._check_held(n, d * heads * model._size(a + "attention.key_length"))
    if any(name.endswith(("ffn_gate_inp.weight", "ffn_gate_up_exps.weight")) for name in model.tensors):
        raise model.error(a + "expert_count", cause("gguf.gemma_moe"))
    sliding = [bool(s) for s in _per_layer(model, a + "attention.sliding_window_pattern", n)]
    sliding[-1] = False  # transformers' rule: the last layer attends to everything
    ff = _per_layer(model, a + "feed_forward_length", n)
    kv = _per_layer(model, a + "attention.head_count_kv", n)
    width = {True: model._size(a + "attention.key_length_swa"), False: model._size(a + "attention.key_length")}
    if model.meta.get(a + "rope.dimension_count_swa", width[True]) != width[True]:
        raise model.error(a + "rope.dimension_count_swa", cause("gguf.sliding_partial_rope"))
    first_shared = n - model._count(a + "attention.shared_kv_layers")
    full_divisors = _proportional(model, width[False])
    theta = {True: model._number(a + "rope.freq_base_swa", 10000.0, lowest=1.0),
             False: model._number(a + "rope.freq_base", 1e6, lowest=1.0)}
    window = model._size(a + "attention.sliding_window")
    blocks = []
    for i in range(n):
        slides = sliding[i]
        earlier = [j for j in range(first_shared) if sliding[j] == slides]
        if i >= first_shared and not earlier:
            raise model.error(a + "attention.shared_kv_layers", cause("gguf.shared_kv", i=i))
        source = earlier[-1] if i >= first_shared else None
        own_v = f"blk.{i}.attn_v.weight" in model.tensors
        blocks.append(LayerSpec(
            window=window if slides else None, rope_theta=theta[slides], rope_divisors=None if slides else full_divisors,
            d_head=None if slides else width[False], kv_heads=_own(kv, i), k_eq_v=source is None and not own_v,
            kv_source=source, d_ff=_own(ff, i)))
    cap = model.meta.get(a + "final_logit_softcapping")
    return ModelSpec(
        d_model=d, n_layers=n, n_heads=heads, d_head=width[True], d_ff=int(ff[0]),
        norm=NormSpec(NormKind.RMSNORM, NormPlacement.PRE, model._epsilon(), affine=True), final_norm=True,
        ffn=FfnKind.GATED_GELU_TANH, positions=Positions.ROPE, max_positions=model._count(a + "context_length"),
        tied_unembed="output.weight" not in model.tensors, kv_heads=int(kv[0]), qk_norm=True, v_norm=True,
        post_norms=True, embed_scale=math.sqrt(d), attn_scale=1.0,
        final_softcap=None if cap is None else model._number(a + "final_logit_softcapping", 30.0),
        per_layer_input=model._count(a + "embedding_length_per_layer_input"), layer_scalar=True, layers=tuple(blocks))


def _own(values: np.ndarray, layer: int) -> int | None:
    """A layer's own value where it differs from the first layer's (the model's), else None."""
    return None if values[layer] == values[0] else int(values[layer])


def _per_layer(model, key: str, n: int) -> np.ndarray:
    """A per-layer array (or one number for every layer), each an integer ≥ 1 (a bool for the pattern)."""
    value = model.meta.get(key)
    if value is None:
        raise model.error(key, cause("gguf.missing"))
    values = np.full(n, value) if isinstance(value, int) else value
    if not isinstance(values, np.ndarray) or values.shape != (n,) or not (values.dtype == bool or (
            np.issubdtype(values.dtype, np.integer) and (values >= 1).all())):
        raise model.error(key, cause("gguf.per_layer", n=n, value=value))
    return values


def _proportional(model, d_head: int) -> tuple[float, ...] | None:
    """The full layers' `rope_freqs` divisors (1e30: a frequency that stands still, as inf would)."""
    if "rope_freqs.weight" not in model.tensors:
        return None
    freqs = model.dequantized("rope_freqs.weight", np.float64)
    if freqs.shape != (d_head // 2,) or not np.all(np.isfinite(freqs) & (freqs > 0)):
        raise model.error("rope_freqs.weight", cause("gguf.full_freqs", d_head=d_head // 2, shape=freqs.shape))
    return tuple(math.inf if f >= 1e30 else float(f) for f in freqs)
