"""Gemma 4 text (`gemma4_text`, Gemma4ForCausalLM) config.json as a ModelSpec, and its tensors.

What transformers 5's Gemma4TextModel does (modeling_gemma4.py): Gemma's embeddings times √d and post-norms,
but RMSNorm gains applied as they are (no 1 + w) and scores not scaled (scaling 1.0: q and k are
RMS-normalized per head, v too, without gain); sliding and full layers with their own head width, kv heads
(`per_layer_config`, or `global_head_dim` / `num_global_key_value_heads`) and RoPE (`rope_parameters` per
type: the full layers' `proportional` turns only the first partial_rotary_factor·dh/2 frequencies, each
θ^(−2i/dh)); keys that are the values on full layers (`attention_k_eq_v`); the last `num_kv_shared_layers`
layers read the K/V of the last earlier layer of their type and have MLPs twice as wide with
`use_double_wide_mlp`; per-layer input embeddings (`hidden_size_per_layer_input`) and a layer scalar per block.
Refused by name: the MoE block, bidirectional attention, attention biases, other RoPE types, other activations.
"""

from __future__ import annotations

import math

from engine.causes import cause
from engine.layers import per_layer_input
from engine.spec import FfnKind, LayerSpec, ModelSpec, NormKind, NormPlacement, NormSpec, Positions

ARCH, COMPOSITE = "gemma4_text", "gemma4"  # the second: Gemma4ForConditionalGeneration, the Hub's
SLIDING, FULL = "sliding_attention", "full_attention"
ROPE_TYPES = ("default", "proportional")


def read(config: dict, size, eps, positive, error) -> ModelSpec:
    """loading.hf's checks: `size(table, key, default)` an integer ≥ 1, `eps(key, default)` a number in [0, 1),
    `positive(table, key, default, where)` a number > 0; `error(key, message)` is the refusal to raise."""
    get = lambda key, default=None: size(config, key, default)  # noqa: E731
    for key, ok in (("enable_moe_block", False), ("use_bidirectional_attention", None), ("attention_bias", False)):
        if config.get(key, ok) not in (ok, False, None):
            raise error(key, cause("hf.only_value", value=config[key], ok=ok))
    if config.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise error("hidden_activation", cause("hf.gelu", act=config["hidden_activation"]))
    d, heads, n = get("hidden_size"), get("num_attention_heads"), get("num_hidden_layers")
    p = config.get("hidden_size_per_layer_input") or 0
    if p:
        p = get("hidden_size_per_layer_input")
        if config.get("vocab_size_per_layer_input", config.get("vocab_size")) != config.get("vocab_size"):
            raise error("vocab_size_per_layer_input", cause("hf.per_layer_vocab", vocab_size=config.get("vocab_size")))
    types = _layer_types(config, n, error)
    blocks = _blocks(config, types, size, positive, error)
    cap = config.get("final_logit_softcapping")
    return ModelSpec(
        d_model=d, n_layers=n, n_heads=heads, d_head=get("head_dim", 256), d_ff=get("intermediate_size"),
        norm=NormSpec(NormKind.RMSNORM, NormPlacement.PRE, eps("rms_norm_eps", 1e-6), affine=True),
        final_norm=True, ffn=FfnKind.GATED_GELU_TANH, positions=Positions.ROPE,
        max_positions=get("max_position_embeddings", 131072), tied_unembed=bool(config.get("tie_word_embeddings", True)),
        kv_heads=get("num_key_value_heads", 4), qk_norm=True, v_norm=True, post_norms=True,
        embed_scale=math.sqrt(d), attn_scale=1.0,
        final_softcap=None if cap is None else positive(config, "final_logit_softcapping", None, ""),
        per_layer_input=p, layer_scalar=True, layers=blocks)


def _layer_types(config: dict, n: int, error) -> list[str]:
    """transformers' default (five sliding layers to one full), the last layer always full."""
    types = config.get("layer_types")
    if types is None:
        types = [SLIDING if (i + 1) % 6 else FULL for i in range(n)]
    if not isinstance(types, list) or len(types) != n:
        raise error("layer_types", cause("hf.attention_types", layers=n, types=types))
    for i, kind in enumerate(types):
        if kind not in (SLIDING, FULL):
            raise error(f"layer_types[{i}]", cause("hf.gemma_attention_type", kind=kind, sliding=SLIDING, full=FULL))
    return [*types[:-1], FULL]


def _blocks(config: dict, types: list[str], size, positive, error) -> tuple[LayerSpec, ...]:
    get = lambda key, default=None: size(config, key, default)  # noqa: E731
    n, window = len(types), get("sliding_window", 512)
    shared = config.get("num_kv_shared_layers") or 0
    if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared < n:
        raise error("num_kv_shared_layers", cause("hf.shared_layers", n=n - 1, shared=shared))
    first_shared, k_eq_v = n - shared, bool(config.get("attention_k_eq_v"))
    double = bool(config.get("use_double_wide_mlp"))
    blocks = []
    for i, kind in enumerate(types):
        d_head, kv_heads = _head_dims(config, i, kind, size)
        theta, divisors = _rope(config, kind, d_head or get("head_dim", 256), positive, error)
        source = None
        if i >= first_shared:  # the last earlier layer of its type that keeps a cache
            earlier = [j for j in range(first_shared) if types[j] == kind]
            if not earlier:
                raise error("num_kv_shared_layers", cause("hf.shared_kv", i=i, kind=kind))
            source = earlier[-1]
        blocks.append(LayerSpec(window=window if kind == SLIDING else None, rope_theta=theta, rope_divisors=divisors,
                                d_head=d_head, kv_heads=kv_heads, k_eq_v=k_eq_v and kind == FULL and source is None, kv_source=source,
                                d_ff=2 * get("intermediate_size") if double and source is not None else None))
    return tuple(blocks)


def _head_dims(config: dict, layer: int, kind: str, size) -> tuple[int | None, int | None]:
    """A layer's own head width and kv heads (None: the model's): `per_layer_config` as transformers 5.24 saves
    it, else the full layers' `global_head_dim` and, with keys as values, `num_global_key_value_heads`."""
    overrides = config.get("per_layer_config")
    if isinstance(overrides, dict):
        own = overrides.get(str(layer)) or {}
        return tuple(None if own.get(key) is None else size(own, key)
                     for key in ("head_dim", "num_key_value_heads"))
    if kind != FULL:
        return None, None
    kv = config.get("num_global_key_value_heads") if config.get("attention_k_eq_v", True) else None
    return size(config, "global_head_dim", 512), None if kv is None else size(config, "num_global_key_value_heads")


def _rope(config: dict, kind: str, d_head: int, positive, error) -> tuple[float, tuple[float, ...] | None]:
    """A layer type's RoPE base, and for `proportional` the divisors of its frequencies: `factor` for the first
    partial_rotary_factor·dh/2, inf (a frequency that stands still) for the others."""
    where = f"rope_parameters.{kind}"
    params = (config.get("rope_parameters") or {}).get(kind)
    if not isinstance(params, dict):
        raise error(where, cause("hf.rope_table", table=params))
    kind_of = params.get("rope_type", "default")
    if kind_of not in ROPE_TYPES:
        raise error(f"{where}.rope_type", cause("hf.rope_type", kind_of=kind_of, supported=", ".join(ROPE_TYPES)))
    theta = positive(params, "rope_theta", None, f"{where}.")
    if kind_of == "default":
        return theta, None
    fraction = params.get("partial_rotary_factor", 1.0)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise error(f"{where}.partial_rotary_factor", cause("hf.fraction", fraction=fraction))
    factor = positive(params, "factor", 1.0, f"{where}.")
    turned = int(fraction * d_head // 2)
    return theta, (factor,) * turned + (math.inf,) * (d_head // 2 - turned)



def tensor(name: str) -> str | None:
    """The Hugging Face tensor (under `model.`) of a Gemma 4 parameter that Llama's tables do not name."""
    if name in per_layer_input.HF:
        return per_layer_input.HF[name]
    parts = name.split(".", 2)
    if parts[0] == "blocks" and parts[2] in per_layer_input.HF_BLOCK:
        return f"layers.{parts[1]}.{per_layer_input.HF_BLOCK[parts[2]]}"
    return None
