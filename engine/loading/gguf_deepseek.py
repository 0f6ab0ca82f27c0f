"""GGUF files of llama.cpp's `deepseek2` architecture (DeepSeek-V2/V3, Kimi) as its converter writes them.

The converter (conversion/deepseek.py) writes MLA's kv_b_proj split per head into `attn_k_b` ([heads, kv_lora_rank,
d_nope]: W_UK already transposed, for the absorbed form) and `attn_v_b` ([heads, d_v, kv_lora_rank]), the routed
experts merged into `ffn_{gate,up,down}_exps` ([experts, out, in]), the selection bias as `exp_probs_b.bias`, the
shared experts as `ffn_*_shexp`; the rope columns stay on interleaved pairs (llama.cpp's NORM rope). The kinds read
their tensors (engine.layers.mla's and moe_ffn's GGUF tables, latent attention's gguf_tensor); this module reads the
metadata: `head_count_kv` is 1 (MLA read as MQA) and `key_length` the latent's width: the heads' own widths are
`key_length_mla` and `value_length_mla`. YaRN is read as llama.cpp reads it: `yarn_log_multiplier` is
0.1 · mscale_all_dim, and mscale is taken equal to it (the rotated q/k unscaled).
"""

from __future__ import annotations

import numpy as np

from engine.causes import cause
from engine.loading.yarn import mscale, yarn_divisors
from engine.layers.mla import MlaSpec
from engine.layers.moe_ffn import MoeSpec
from engine.spec import FfnKind, ModelSpec, NormKind, NormPlacement, NormSpec, Positions

ARCH = "deepseek2"
SIGMOID = 2  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID


def spec(model) -> ModelSpec:
    """The ModelSpec of a deepseek2 file (`model`: an engine.loading.gguf_model.GGUFModel)."""
    key = lambda name: f"{ARCH}.{name}"  # noqa: E731
    size = lambda name, default=None: model._size(key(name), default)  # noqa: E731
    d, heads, layers = size("embedding_length"), size("attention.head_count"), size("block_count")
    rope, width = size("rope.dimension_count"), size("attention.key_length_mla")
    model._check_held(layers, heads * width)  # before anything is made per layer or per frequency
    if width <= rope:
        raise model.error(key("attention.key_length_mla"), cause("gguf.mla_width", width=width, rope=rope))
    q_lora = size("attention.q_lora_rank") if key("attention.q_lora_rank") in model.meta else None
    mla = MlaSpec(size("attention.kv_lora_rank"), width - rope, rope, size("attention.value_length_mla"), q_lora)
    theta = model._number(key("rope.freq_base"), 10000.0, lowest=1.0)
    divisors, scale = _yarn(model, theta, rope, width)
    return ModelSpec(
        d_model=d, n_layers=layers, n_heads=heads, d_head=width, d_ff=size("feed_forward_length"),
        norm=NormSpec(NormKind.RMSNORM, NormPlacement.PRE, model._epsilon(), affine=True), final_norm=True,
        ffn=FfnKind.GATED_SILU, positions=Positions.ROPE, max_positions=model._count(key("context_length")),
        tied_unembed="output.weight" not in model.tensors, rope_theta=theta, rope_factors=divisors,
        attn_scale=scale, mla=mla, moe=_moe(model, layers))


def _yarn(model, theta: float, rope: int, width: int) -> tuple[tuple[float, ...] | None, float]:
    """RoPE's divisors and the scores' factor: YaRN's frequencies and its mscale², or none of them."""
    prefix = f"{ARCH}.rope.scaling"
    kind = model.meta.get(f"{prefix}.type", "none")
    if kind not in ("none", "yarn"):
        raise model.error(f"{prefix}.type", cause("gguf.deepseek_rope", kind=kind))
    if kind == "none":
        return None, width**-0.5
    factor = model._number(f"{prefix}.factor", 1.0)
    log_mul = f"{prefix}.yarn_log_multiplier"  # float32: its shortest decimal is the config's 0.1 · mscale_all_dim
    all_dim = float(str(np.float32(model._number(log_mul, 1.0)))) / 0.1 if log_mul in model.meta else 0.0
    scale = width**-0.5 * (mscale(factor, all_dim) ** 2 if all_dim else 1.0)
    divisors = yarn_divisors(theta, rope, factor, model._size(f"{prefix}.original_context_length"),
                             model._number(f"{prefix}.yarn_beta_fast", 32.0),
                             model._number(f"{prefix}.yarn_beta_slow", 1.0), truncate=True)  # as llama.cpp runs it
    return divisors, scale


def _moe(model, layers: int) -> MoeSpec:
    key = lambda name: f"{ARCH}.{name}"  # noqa: E731
    gating = model.meta.get(key("expert_gating_func"))
    if gating != SIGMOID:  # llama.cpp takes a missing one as a softmax, DeepSeek-V3's is a sigmoid
        raise model.error(key("expert_gating_func"), cause("gguf.gating", sigmoid=SIGMOID, gating=gating))
    first = model._count(key("leading_dense_block_count"))
    if first > layers:
        raise model.error(key("leading_dense_block_count"), cause("gguf.dense_layers", first=first, layers=layers))
    d_expert = model._size(key("expert_feed_forward_length"))
    experts, groups = model._size(key("expert_count")), model._size(key("expert_group_count"), 1)
    if experts % groups:
        raise model.error(key("expert_group_count"), cause("gguf.groups_divide", groups=groups, experts=experts))
    norm = model.meta.get(key("expert_weights_norm"), False)
    return MoeSpec(experts, model._size(key("expert_used_count")), d_expert, bool(norm), tuple(range(first, layers)),
                   d_expert * model._count(key("expert_shared_count")), shared_gate=False, sigmoid=True,
                   groups=groups, topk_groups=model._size(key("expert_group_used_count"), 1),
                   routed_scale=model._number(key("expert_weights_scale"), 1.0))
