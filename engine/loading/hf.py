"""Hugging Face folders (config.json, safetensors, tokenizer.json) of llama, qwen2, qwen3, qwen2_moe, qwen3_moe,
gpt_oss, mistral, phi3, gemma2, gemma3 (text), gemma4 (text), qwen3_5 and qwen3_5_moe (text: Gated DeltaNet and gated
attention layers; the second with sparse FFNs), lfm2 (short-conv and attention layers), deepseek_v3, gpt2 and bert;
and the Hub's composites of six (qwen3_5, qwen3_5_moe, gemma4, gemma3, lfm2_vl, mistral3: *ForConditionalGeneration,
the text model under `text_config` and `model.language_model.`, Gemma 3's and Mistral 3's under llava's
`language_model.model.`), read as their text model.

config.json becomes a ModelSpec; each engine parameter is read from its Hugging Face tensor, a block's by the
kind it is of (its hf_tensor, through the block's BlockTensors) and its family's norms here
(linear weights are stored [out, in] and transposed to the engine's [in, out]; GPT-2's Conv1D
weights are already [in, out] and its fused `c_attn` is split into q | k | v; Phi-3's fused
`qkv_proj` and `gate_up_proj` are split by rows; Qwen2/3-MoE's experts are read one tensor each, as the Hub
stores them, or from transformers 5's fused expert tensors; DeepSeek-V3's rope columns, on interleaved pairs
(`rope_interleave`), are reordered to the half-split layout, which gives the rotated rows transformers gives).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open

from engine.layers import hf_layer_kinds, hf_layer_types, hf_tensor
from engine.loading import hf_gemma4, hf_mxfp4
from engine.causes import Cause, cause
from engine.loading.document import ScenarioError, read_text, warn
from engine.loading.weightfile import SAFETENSORS_DTYPES, safetensors_header, safetensors_refusal, widen_bf16
from engine.loading.yarn import mscale, yarn_divisors
from engine.layers.causal_conv import KERNEL
from engine.layers.gated_deltanet import DeltaNetSpec
from engine.layers.mla import MlaSpec
from engine.layers.moe_ffn import MoeSpec
from engine.spec import FfnKind, LayerSpec, ModelSpec, NormKind, NormPlacement, NormSpec, Positions

MOE = ("qwen2_moe", "qwen3_moe")
GPT_OSS = "gpt_oss"  # sparse too: its router and experts with biases, a clamped SwiGLU, attention sinks, YaRN
QWEN35, QWEN35_MOE = "qwen3_5_text", "qwen3_5_moe_text"  # the second: Qwen3.5's layers, every FFN sparse
QWEN35S = (QWEN35, QWEN35_MOE)
QWEN35_LAYER_TYPES = ("full_attention", "linear_attention")  # its config's layer_types (the kinds': HF_LAYER_TYPES)
SPARSE = (*MOE, GPT_OSS, QWEN35_MOE)  # the architectures whose FFNs may be experts
LLAMA_FAMILY = ("llama", "qwen2", "qwen3", *MOE, GPT_OSS, "mistral", "phi3", "gemma2",
                "gemma3_text", hf_gemma4.ARCH, *QWEN35S, "deepseek_v3")  # RoPE, RMSNorm, gated MLP
ARCHITECTURES = (*LLAMA_FAMILY, "lfm2", "gpt2", "bert")
GEMMA = ("gemma2", "gemma3_text", hf_gemma4.ARCH)
PREFIXES = ("", "model.", "transformer.", "bert.")
# a composite's text model -> where its lm_head is: transformers 5's nesting, and llava's older one, which it still
# writes for Gemma 3 and Mistral 3
LANGUAGE_MODELS = {"model.language_model.": "", "language_model.model.": "language_model."}
# a Hub composite (…ForConditionalGeneration) -> its text_config's model_type, and transformers' default of its
# tie_word_embeddings (read at the top, not in text_config: the composite's lm_head is tied or not by it)
COMPOSITES = {"qwen3_5": (QWEN35, False), "qwen3_5_moe": (QWEN35_MOE, False),
              hf_gemma4.COMPOSITE: (hf_gemma4.ARCH, True), "gemma3": ("gemma3_text", True), "lfm2_vl": ("lfm2", True),
              "mistral3": ("mistral", True)}
STAND_IN_DTYPES = SAFETENSORS_DTYPES | {"BF16": "<f4", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
                                       "U8": "u1", "BOOL": "?"}  # what a tensor reads as (only floats pass)
RAW_DTYPES = SAFETENSORS_DTYPES | {"U8": "u1"}  # what `load` maps (uint8: MXFP4's blocks and scales)
MAX_SIZE = 2**31  # a width, depth or count beyond this is a corrupt config, not a model
ACTIVATIONS = {"gelu": FfnKind.GELU, "gelu_new": FfnKind.GELU_TANH, "gelu_pytorch_tanh": FfnKind.GELU_TANH,
               "relu": FfnKind.RELU, "tanh": FfnKind.TANH}


class ConfigError(ScenarioError):
    def __init__(self, file: Path, key: str, message: Cause):
        super().__init__(str(file), None, key, message)


# -- config.json -> ModelSpec ---------------------------------------------------------------
def read_spec(folder: Path, held: tuple[int, int]) -> tuple[str, ModelSpec, dict]:
    """config.json as a ModelSpec; `held` is (tensors, bytes) the weight files hold, what its sizes are checked
    against before any table is made from them."""
    file = folder / "config.json"
    config = read_json(file)
    if not isinstance(config, dict):
        raise ConfigError(file, "", cause("hf.not_object"))
    if isinstance(config.get("model_type"), str) and config["model_type"] in COMPOSITES:  # else refused below
        text = text_model(config, file)
        try:
            return _read_spec(file, text, held)
        except ConfigError as error:  # located in the text model's settings
            raise ConfigError(file, f"text_config.{error.path}".rstrip("."), error.message) from None
    return _read_spec(file, config, held)


def text_model(config: dict, file: Path) -> dict:
    """A composite's text model: its `text_config` with the top level's `tie_word_embeddings` (the lm_head is the
    composite's); the vision (and audio) towers are not read."""
    kind, tied = COMPOSITES[config["model_type"]]
    text = config.get("text_config")
    if "text_config" not in config:
        raise ConfigError(file, "text_config", cause("hf.no_text_config", model_type=config["model_type"]))
    if not isinstance(text, dict):
        raise ConfigError(file, "text_config", cause("hf.text_config", text=text))
    if text.get("model_type", kind) != kind:
        raise ConfigError(file, "text_config.model_type", cause("hf.text_model_type", kind=kind,
                                                                model_type=config["model_type"],
                                                                given=text["model_type"]))
    tied = config.get("tie_embedding", config.get("tie_word_embeddings", tied))  # (LFM2-VL's older key wins)
    return {**text, "model_type": kind, "tie_word_embeddings": tied}


def _read_spec(file: Path, config: dict, held: tuple[int, int]) -> tuple[str, ModelSpec, dict]:
    arch = config.get("model_type")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise ConfigError(file, "model_type", cause("hf.architecture", arch=arch,
                                                    supported=', '.join((*ARCHITECTURES, *COMPOSITES))))
    hf_mxfp4.check_config(config, file)
    if arch in LLAMA_FAMILY or arch == "lfm2":
        _check_held(config, file, *held)
    if arch == hf_gemma4.ARCH:
        spec = hf_gemma4.read(config, lambda table, key, default=None: _get(table, key, file, default),
                              lambda key, default: _eps(config, key, file, default),
                              lambda table, key, default, where: _positive(table, key, file, default, where),
                              lambda key, message: ConfigError(file, key, message))
    else:
        spec = (_llama if arch in LLAMA_FAMILY else {"lfm2": _lfm2, "gpt2": _gpt2, "bert": _bert}[arch])(config, file)
    vocab_size = _get(config, "vocab_size", file)
    for key in ("eos_token_id", "pad_token_id"):
        special = config.get(key)
        ids = special if isinstance(special, list) else [special]
        if any(i is not None and (isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab_size)
               for i in ids):
            raise ConfigError(file, key, cause("hf.special_token", vocab_size=vocab_size - 1, special=special))
    return arch, spec, config


def read_json(file: Path):
    try:
        return json.loads(read_text(file))  # at most 64 MiB read; its own error if not UTF-8
    except (json.JSONDecodeError, RecursionError) as error:  # (RecursionError: arrays nested thousands deep)
        raise ConfigError(file, "", cause("hf.not_json", error=str(error))) from None


def _check_held(config: dict, file: Path, tensors: int, nbytes: int) -> None:
    """The depth and the query width against what the weight files hold, before RoPE's divisors (one per
    frequency) and the sliding layers' list are made from them: 2^31 would take gigabytes."""
    layers = _get(config, "num_hidden_layers", file)
    if layers > tensors:
        raise ConfigError(file, "num_hidden_layers", cause("hf.layers_held", layers=layers, tensors=tensors))
    d, heads = _get(config, "hidden_size", file), _get(config, "num_attention_heads", file)
    key = "head_dim" if config.get("head_dim") is not None else "hidden_size"
    width = heads * (_get(config, "head_dim", file) if key == "head_dim" else d // heads)
    if d * width > nbytes:
        raise ConfigError(file, key, cause("hf.query_held", d=d, width=width, nbytes=nbytes))
    experts = "num_experts" if "num_experts" in config else "num_local_experts"
    if config["model_type"] in SPARSE and config.get(experts):  # one layer's experts, before their tables
        count, f = _get(config, experts, file), _get(config, _expert_width(config), file)
        if 3 * count * f * d > nbytes:
            raise ConfigError(file, experts, cause("hf.experts_held", count=count, numbers=3 * f * d, nbytes=nbytes))


def _get(config: dict, key: str, file: Path, default=None):
    """A size (an integer ≥ 1), the only kind of value the architectures read with `get`."""
    if key not in config and default is None:
        raise ConfigError(file, key, cause("hf.missing"))
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(file, key, cause("hf.integer", value=value))
    if value > MAX_SIZE:
        raise ConfigError(file, key, cause("hf.too_big", value=value, limit=MAX_SIZE))
    return value


def _eps(config: dict, key: str, file: Path, default: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ConfigError(file, key, cause("hf.eps", value=value))
    return float(value)


def _heads(file: Path, d: int, heads: int, kv_heads: int, key: str = "num_attention_heads") -> None:
    if d % heads:
        raise ConfigError(file, key, cause("hf.heads_divide", heads=heads, d=d))
    if heads % kv_heads:
        raise ConfigError(file, "num_key_value_heads", cause("hf.kv_heads_divide", kv_heads=kv_heads, heads=heads))


def _llama(config: dict, file: Path) -> ModelSpec:
    """Llama and the architectures that differ from it by a few settings (see `_gemma`)."""
    get = lambda key, default=None: _get(config, key, file, default)  # noqa: E731
    arch = config["model_type"]
    heads, d, layers = get("num_attention_heads"), get("hidden_size"), get("num_hidden_layers")
    kv_heads = get("num_key_value_heads", heads) if config.get("num_key_value_heads") is not None else heads
    head_dim = get("head_dim") if config.get("head_dim") is not None else None
    _heads(file, head_dim * heads if head_dim else d, heads, kv_heads)
    if arch == "qwen2" or arch == "qwen2_moe" and config.get("qkv_bias", True):
        biases = ("q", "k", "v")
    else:
        biases = (("q", "k", "v", "o") if config.get("attention_bias") else ()) + (
            ("mlp",) if config.get("mlp_bias") else ())
    window, sliding_layers = _sliding(config, file, layers)
    theta, divisors = _rope(config, file, head_dim or d // heads, "full_attention" if arch == "gemma3_text" else None,
                            partial=arch in QWEN35S)
    spec = ModelSpec(
        d_model=d, n_layers=layers, n_heads=heads, d_head=head_dim or d // heads,
        d_ff=get("moe_intermediate_size" if arch == QWEN35_MOE else "intermediate_size"),  # (it has no dense FFN)
        norm=NormSpec(NormKind.RMSNORM, NormPlacement.PRE, _eps(config, "rms_norm_eps", file, 1e-6), affine=True),
        final_norm=True, ffn=FfnKind.GATED_SILU, positions=Positions.ROPE,
        max_positions=get("max_position_embeddings") if "max_position_embeddings" in config else 0,
        biases=biases, tied_unembed=bool(config.get("tie_word_embeddings", arch in GEMMA)),
        kv_heads=kv_heads, rope_theta=theta, rope_factors=divisors,
        qk_norm=arch in ("qwen3", "qwen3_moe", "gemma3_text", *QWEN35S), sliding_window=window,
        sliding_layers=sliding_layers, moe=_moe(config, file, layers) if arch in SPARSE else None,
        attn_sinks=arch == GPT_OSS, rope_scale=_rope_scale(config, file),
    )
    if arch in GEMMA:
        return _gemma(config, file, spec)
    if arch == "deepseek_v3":
        return _deepseek(config, file, spec)
    if config.get("hidden_act", "silu") != "silu":
        raise ConfigError(file, "hidden_act", cause("hf.silu", hidden_act=config["hidden_act"]))
    return _qwen35(config, file, spec) if arch in QWEN35S else spec


def _qwen35(config: dict, file: Path, spec: ModelSpec) -> ModelSpec:
    """Qwen3.5: Gated DeltaNet layers (`linear_attention`) among gated full-attention ones, (1 + w) norms,
    partial RoPE; the layer types from `layer_types` or, as transformers, every `full_attention_interval`-th."""
    get = lambda key, default=None: _get(config, key, file, default)  # noqa: E731
    types = config.get("layer_types")
    if types is None:
        interval = get("full_attention_interval", 4)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(spec.n_layers)]
    if not isinstance(types, list) or len(types) != spec.n_layers:
        raise ConfigError(file, "layer_types", cause("hf.layer_types", n_layers=spec.n_layers, types=types))
    kinds = hf_layer_kinds()
    mixers = {kind: kinds[kind] for kind in QWEN35_LAYER_TYPES}
    for i, kind in enumerate(types):
        if kind not in mixers:
            raise ConfigError(file, f"layer_types[{i}]", cause("hf.layer_type", kind=kind, supported=", ".join(mixers)))
    net = DeltaNetSpec(get("linear_num_key_heads"), get("linear_num_value_heads"), get("linear_key_head_dim"),
                       get("linear_value_head_dim"), get("linear_conv_kernel_dim", 4))
    if net.v_heads % net.k_heads:
        raise ConfigError(file, "linear_num_value_heads", cause("hf.value_heads", v_heads=net.v_heads,
                                                                k_heads=net.k_heads))
    if config.get("attention_bias"):
        raise ConfigError(file, "attention_bias", cause("hf.qwen_bias"))
    params = config.get("rope_parameters") or {}
    key = "rope_parameters.partial_rotary_factor" if "partial_rotary_factor" in params else "partial_rotary_factor"
    factor = _positive(params if "partial_rotary_factor" in params else config, "partial_rotary_factor", file, 0.25)
    dims = int(spec.d_head * factor)
    if factor > 1 or dims < 2 or dims % 2:
        raise ConfigError(file, key, cause("hf.rotary_odd", factor=factor, d_head=spec.d_head))
    return replace(spec, norm=replace(spec.norm, weight_offset=True), attn_gate=True, deltanet=net, rope_dims=dims,
                   layers=tuple(LayerSpec(mixer=mixers[kind], ffn=block.ffn, options={KERNEL: net.kernel}
                                          if kind == "linear_attention" else ())
                                for kind, block in zip(types, spec.blocks)))  # (the FFNs: dense, or on moe's layers)


def _lfm2(config: dict, file: Path) -> ModelSpec:
    """LFM2: short-convolution layers (conv_L_cache taps) and GQA attention layers with q/k RMSNorms, each followed
    by a SwiGLU FFN (w1, w3, w2) whose width follows LFM2's rule; the last norm is named embedding_norm."""
    get = lambda key, default=None: _get(config, key, file, default)  # noqa: E731
    heads, d, layers = get("num_attention_heads"), get("hidden_size"), get("num_hidden_layers")
    kv_heads = get("num_key_value_heads", heads) if config.get("num_key_value_heads") is not None else heads
    _heads(file, d, heads, kv_heads)
    if config.get("conv_bias"):
        raise ConfigError(file, "conv_bias", cause("hf.conv_bias"))
    theta, divisors = _rope(config, file, d // heads)
    kernel = get("conv_L_cache", 3)
    kinds = hf_layer_kinds()
    blocks = tuple(LayerSpec(mixer=kinds[kind], rope_divisors=divisors) if kind == "full_attention" else
                   LayerSpec(mixer=kinds[kind], options={KERNEL: kernel})
                   for kind in _lfm2_layer_types(config, file, layers))
    tied = config.get("tie_word_embeddings", config.get("tie_embedding", True))
    return ModelSpec(
        d_model=d, n_layers=layers, n_heads=heads, d_head=d // heads, d_ff=_lfm2_ff(config, file),
        norm=NormSpec(NormKind.RMSNORM, NormPlacement.PRE, _eps(config, "norm_eps", file, 1e-5), affine=True),
        final_norm=True, ffn=FfnKind.GATED_SILU, positions=Positions.ROPE,
        max_positions=get("max_position_embeddings") if "max_position_embeddings" in config else 0, biases=(),
        tied_unembed=bool(tied), kv_heads=kv_heads, rope_theta=theta, rope_factors=divisors, qk_norm=True,
        layers=blocks)


def _lfm2_layer_types(config: dict, file: Path, layers: int) -> list[str]:
    """`layer_types` ("conv", "full_attention"), else `full_attn_idxs` (the attention layers; absent: every layer)."""
    types = config.get("layer_types")
    if types is None:
        full = config.get("full_attn_idxs")
        full = range(layers) if full is None else full
        if not isinstance(full, (list, range)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in full):
            raise ConfigError(file, "full_attn_idxs", cause("hf.layer_numbers", value=full))
        return ["full_attention" if i in full else "conv" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers:
        raise ConfigError(file, "layer_types", cause("hf.layer_types", n_layers=layers, types=types))
    for i, kind in enumerate(types):
        if kind not in ("conv", "full_attention"):
            raise ConfigError(file, f"layer_types[{i}]", cause("hf.conv_layer_type", kind=kind))
    return types


def _lfm2_ff(config: dict, file: Path) -> int:
    """The FFN's width: block_ff_dim (or intermediate_size), and with block_auto_adjust_ff_dim two thirds of
    it, times block_ffn_dim_multiplier, rounded up to block_multiple_of (transformers' Lfm2MLP)."""
    key = "block_ff_dim" if "block_ff_dim" in config else "intermediate_size"
    width = _get(config, key, file)
    if not config.get("block_auto_adjust_ff_dim", True):
        return width
    width = int(2 * width / 3)
    multiplier = config.get("block_ffn_dim_multiplier", 1.0)
    if multiplier is None:
        return width
    multiplier = _positive(config, "block_ffn_dim_multiplier", file, 1.0)
    multiple = _get(config, "block_multiple_of", file, 256)
    width = int(multiplier * width)
    return _checked_width(multiple * ((width + multiple - 1) // multiple), file, key)


def _checked_width(width: int, file: Path, key: str) -> int:
    if not 1 <= width <= MAX_SIZE:
        raise ConfigError(file, key, cause("hf.ffn_width", width=width))
    return width


def _moe(config: dict, file: Path, layers: int) -> MoeSpec | None:
    """Qwen2/3-MoE's sparse FFN: on layer i unless i is in `mlp_only_layers` or (i + 1) is not a multiple of
    `decoder_sparse_step` (transformers' rule); no experts at all is a dense model. Qwen2-MoE adds a shared
    expert (`shared_expert_intermediate_size`). Qwen3.5 MoE has one too, and its router always renormalises the
    chosen scores on every layer (transformers 5's config has no norm_topk_prob, mlp_only_layers or
    decoder_sparse_step: written there, they change nothing, so they are not read)."""
    key = "num_experts" if "num_experts" in config else "num_local_experts"  # transformers 5 writes the second
    if config.get(key) == 0:
        return None
    experts = _get(config, key, file)
    top_k = _get(config, "num_experts_per_tok", file)
    if top_k > experts:
        raise ConfigError(file, "num_experts_per_tok", cause("hf.top_k", top_k=top_k, experts=experts))
    arch = config["model_type"]
    gpt_oss = arch == GPT_OSS  # a softmax over its top k logits: the chosen scores renormalised
    norm = True if arch == QWEN35_MOE else config.get("norm_topk_prob", gpt_oss)
    if not isinstance(norm, bool):
        raise ConfigError(file, "norm_topk_prob", cause("hf.boolean", value=norm))
    sparse = tuple(range(layers)) if arch == QWEN35_MOE else _sparse_layers(config, file, layers)
    shared = _get(config, "shared_expert_intermediate_size", file) if arch in ("qwen2_moe", QWEN35_MOE) else 0
    clamp = tuple(_positive(config, key, file, default) for key, default in (("swiglu_alpha", 1.702),
                                                                             ("swiglu_limit", 7.0)))
    return MoeSpec(experts, top_k, _get(config, _expert_width(config), file), norm, sparse, shared, bias=gpt_oss,
                   clamp=clamp if gpt_oss else None)


def _sparse_layers(config: dict, file: Path, layers: int) -> tuple[int, ...]:
    step = _get(config, "decoder_sparse_step", file, 1)
    dense = config.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
        raise ConfigError(file, "mlp_only_layers", cause("hf.layer_numbers", value=dense))
    return tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)


def _expert_width(config: dict) -> str:
    """The key of each expert's hidden width: gpt-oss has no dense FFN and calls it intermediate_size."""
    return "intermediate_size" if config["model_type"] == GPT_OSS else "moe_intermediate_size"


def _deepseek(config: dict, file: Path, spec: ModelSpec) -> ModelSpec:
    """DeepSeek-V3: latent attention (MLA) on every layer, dense FFNs before `first_k_dense_replace`, then
    DeepSeek's routing (sigmoid scores, the selection bias, group-limited top-k, the scaled weights, ungated
    shared experts); with YaRN, the rotated q/k times its attention factor and the scores times mscale²."""
    get = lambda key, default=None: _get(config, key, file, default)  # noqa: E731
    for key, supported in (("scoring_func", "sigmoid"), ("topk_method", "noaux_tc")):  # older remote-code configs
        if config.get(key, supported) != supported:
            raise ConfigError(file, key, cause("hf.only", supported=supported, value=config[key]))
    if config.get("rope_interleave", True) is not True:  # the weights' rope columns are read as interleaved pairs
        raise ConfigError(file, "rope_interleave", cause("hf.rope_interleave"))
    q_lora = None if config.get("q_lora_rank") is None else get("q_lora_rank")
    nope, rope, layers = get("qk_nope_head_dim"), get("qk_rope_head_dim"), spec.n_layers
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    scale = (nope + rope) ** -0.5
    if params.get("rope_type", params.get("type")) == "yarn" and params.get("mscale_all_dim"):
        scale *= mscale(params["factor"], params["mscale_all_dim"]) ** 2
    mla = MlaSpec(get("kv_lora_rank"), nope, rope, get("v_head_dim"), q_lora)
    experts, top_k, groups = get("n_routed_experts"), get("num_experts_per_tok"), get("n_group", 1)
    if experts % groups:
        raise ConfigError(file, "n_group", cause("hf.groups_divide", groups=groups, experts=experts))
    if get("topk_group", 1) > groups:
        raise ConfigError(file, "topk_group", cause("hf.topk_group", topk_group=config["topk_group"], groups=groups))
    first = config.get("first_k_dense_replace", 0)
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first <= layers:
        raise ConfigError(file, "first_k_dense_replace", cause("hf.dense_layers", layers=layers, first=first))
    scaling = _positive(config, "routed_scaling_factor", file, 1.0)
    d_expert = get("moe_intermediate_size")
    moe = MoeSpec(experts, top_k, d_expert, bool(config.get("norm_topk_prob", True)), tuple(range(first, layers)),
                  d_expert * config.get("n_shared_experts", 0), shared_gate=False, sigmoid=True, groups=groups,
                  topk_groups=get("topk_group", 1), routed_scale=scaling)
    theta, divisors = _rope(config, file, rope)  # the rotary part's own frequencies, whatever head_dim says
    return replace(spec, d_head=nope + rope, kv_heads=None, mla=mla, moe=moe, attn_scale=scale, rope_theta=theta,
                   rope_factors=divisors)


def _gemma(config: dict, file: Path, spec: ModelSpec) -> ModelSpec:
    """Gemma 2 and 3: GeGLU, (1 + w) norms before and after each sublayer, embeddings times √d,
    scores over √query_pre_attn_scalar; Gemma 2 soft-caps scores and logits, Gemma 3 has q/k norms
    and its own RoPE base on sliding layers."""
    act = config.get("hidden_activation", config.get("hidden_act", "gelu_pytorch_tanh"))
    if act != "gelu_pytorch_tanh":
        raise ConfigError(file, "hidden_activation", cause("hf.gelu", act=act))
    if config.get("use_bidirectional_attention"):
        raise ConfigError(file, "use_bidirectional_attention", cause("hf.bidirectional"))
    gemma2 = config["model_type"] == "gemma2"
    scalar = _positive(config, "query_pre_attn_scalar", file, 256)
    caps = {key: config.get(key, default if gemma2 else None)
            for key, default in (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0))}
    attn_cap, final_cap = (None if caps[key] is None else _positive(caps, key, file, None) for key in caps)
    return replace(
        spec, ffn=FfnKind.GATED_GELU_TANH, norm=replace(spec.norm, weight_offset=True), post_norms=True,
        embed_scale=math.sqrt(spec.d_model),  # a float32 run rounds it to float32, as transformers does
        attn_scale=scalar**-0.5, attn_softcap=attn_cap, final_softcap=final_cap,
        rope_theta_local=None if gemma2 else _local_theta(config, file, spec.d_head),
    )


def _local_theta(config: dict, file: Path, d_head: int) -> float:
    """Gemma 3's sliding layers: their own RoPE base, never scaled."""
    theta, divisors = _rope(config, file, d_head, "sliding_attention")
    if divisors is not None:
        raise ConfigError(file, "rope_parameters.sliding_attention.rope_type", cause("hf.gemma_sliding"))
    return theta


def _positive(config: dict, key: str, file: Path, default, where: str = "") -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ConfigError(file, where + key, cause("hf.positive", value=value))
    return float(value)


def _sliding(config: dict, file: Path, layers: int) -> tuple[int | None, tuple[int, ...] | None]:
    """The sliding window and the layers that use it: `layer_types` where given, else Qwen's
    `max_window_layers` or every layer (Mistral, Phi-3); Gemma alternates (2: every other layer,
    3: five of six) when the config does not list them."""
    arch = config["model_type"]
    if arch in ("qwen2", "qwen3", *MOE) and not config.get("use_sliding_window"):
        return None, None
    default = 4096 if arch in GEMMA else None  # transformers' default for Gemma
    if config.get("sliding_window", default) is None:
        return None, None
    window = _get(config, "sliding_window", file, default)
    types = config.get("layer_types")
    if types is None:
        if arch in GEMMA:
            period = 2 if arch == "gemma2" else _get(config, "sliding_window_pattern", file, 6)
            return window, tuple(i for i in range(layers) if (i + 1) % period)
        if arch in ("qwen2", "qwen3", *MOE):
            return window, tuple(range(_get(config, "max_window_layers", file, layers), layers))
        return window, None
    if not isinstance(types, list) or len(types) != layers:
        raise ConfigError(file, "layer_types", cause("hf.attention_types", layers=layers, types=types))
    known = hf_layer_types(hf_layer_kinds()["full_attention"])  # the attention types: whether each slides
    for i, kind in enumerate(types):
        if kind not in known:
            raise ConfigError(file, f"layer_types[{i}]", cause("hf.attention_type", kind=kind,
                                                               supported=', '.join(known)))
    return window, tuple(i for i, kind in enumerate(types) if known[kind])


def _rope(config: dict, file: Path, d_head: int, layer_type: str | None = None,
          partial: bool = False) -> tuple[float, tuple | None]:
    """theta and the frequency divisors (None: unscaled) from `rope_parameters` (transformers 5; Gemma 3:
    one table per layer type) or the older top-level `rope_theta` / `rope_scaling`. Linear and Llama 3
    scaling are read; any other RoPE scaling type is refused rather than silently ignored."""
    params = config.get("rope_parameters") or {}
    prefix = "rope_parameters"
    if layer_type is not None and isinstance(params, dict) and isinstance(params.get(layer_type), dict):
        params, prefix = params[layer_type], f"rope_parameters.{layer_type}"
    if not partial and config.get("partial_rotary_factor", 1.0) != 1.0:
        raise ConfigError(file, "partial_rotary_factor", cause("hf.partial_rope"))
    tables = ((prefix, params), ("rope_scaling", config.get("rope_scaling") or {}))
    for key, table in tables:
        if not isinstance(table, dict):
            raise ConfigError(file, key, cause("hf.rope_table", table=table))
    fallback = config.get("rope_local_base_freq", 10000.0) if layer_type == "sliding_attention" else 10000.0
    theta = params.get("rope_theta", config.get("rope_theta", fallback))
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 1 < theta < math.inf:
        raise ConfigError(file, f"{prefix}.rope_theta", cause("hf.rope_theta", theta=theta))
    divisors = None
    for key, table in tables:
        kind = table.get("rope_type", table.get("type", "default"))
        if kind not in SCALINGS:
            raise ConfigError(file, f"{key}.rope_type", cause("hf.rope_scaling", kind=kind,
                                                              supported=', '.join(SCALINGS)))
        if kind != "default":
            read = _Reader(table, file, key)
            if kind == "llama3":
                _check_band(read("low_freq_factor"), read("high_freq_factor"), file, key)
            divisors = SCALINGS[kind](read, float(theta), d_head)
    return float(theta), divisors


def _check_band(low: float, high: float, file: Path, key: str) -> None:
    """Llama 3 blends the frequencies whose wavelengths lie between original/high and original/low."""
    if high < low:
        raise ConfigError(file, f"{key}.high_freq_factor", cause("hf.freq_band", low=low, high=high))
    if high == low:
        warn(str(file), f"{key}.high_freq_factor", cause("hf.freq_equal", low=low))


class _Reader:
    """A RoPE scaling table's numbers (each > 0; `default` where it may be missing) and flags, refused by key."""

    def __init__(self, table: dict, file: Path, key: str):
        self.table, self.file, self.key = table, file, key

    def __call__(self, name: str, default: float | None = None) -> float:
        return _positive(self.table, name, self.file, default, f"{self.key}.")

    def flag(self, name: str, default: bool) -> bool:
        value = self.table.get(name, default)
        if not isinstance(value, bool):
            raise ConfigError(self.file, f"{self.key}.{name}", cause("hf.boolean", value=value))
        return value


def _yarn_divisors(read: _Reader, theta: float, d_head: int) -> tuple[float, ...]:
    """YaRN as transformers computes it (its ramp's ends floored and ceiled unless `truncate` is false)."""
    return yarn_divisors(theta, d_head, read("factor"), read("original_max_position_embeddings"),
                         read("beta_fast", 32.0), read("beta_slow", 1.0), read.flag("truncate", True))


def _yarn_scale(read: _Reader) -> float:
    """YaRN's attention factor: given, or (missing or null, as transformers reads it) from factor (DeepSeek: with
    mscale and mscale_all_dim)."""
    if read.table.get("attention_factor") is not None:
        return read("attention_factor")
    if read.table.get("mscale") and read.table.get("mscale_all_dim"):
        return mscale(read("factor"), read("mscale")) / mscale(read("factor"), read("mscale_all_dim"))
    return mscale(read("factor"))


def _rope_scale(config: dict, file: Path) -> float:
    """What RoPE's cos and sin are multiplied by: YaRN's attention factor, else 1."""
    for key in ("rope_parameters", "rope_scaling"):
        table = config.get(key)
        if isinstance(table, dict) and table.get("rope_type", table.get("type")) == "yarn":
            return _yarn_scale(_Reader(table, file, key))
    return 1.0


def _linear_divisors(read, theta: float, d_head: int) -> tuple[float, ...]:
    return (read("factor"),) * (d_head // 2)


def _llama3_divisors(read, theta: float, d_head: int) -> tuple[float, ...]:
    """Llama 3's scaling: wavelengths beyond original/low_freq_factor slow down by `factor`, those below
    original/high_freq_factor stay, and the ones between blend smoothly (transformers' formula, in float64)."""
    factor, low, high = read("factor"), read("low_freq_factor"), read("high_freq_factor")
    old = read("original_max_position_embeddings")
    inv_freq = 1.0 / theta ** (np.arange(0, d_head, 2, dtype=np.float64) / d_head)
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old / low, inv_freq / factor, inv_freq)
    if high != low:  # equal factors: no band to blend over, a step (what the blend tends to)
        smooth = (old / wavelen - low) / (high - low)
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        scaled = np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    return tuple(float(d) for d in inv_freq / scaled)


SCALINGS = {"default": None, "linear": _linear_divisors, "llama3": _llama3_divisors, "yarn": _yarn_divisors}


def _activation(config: dict, key: str, file: Path, default: str) -> FfnKind:
    name = config.get(key, default)
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise ConfigError(file, key, cause("hf.activation", name=name, supported=", ".join(ACTIVATIONS)))
    return ACTIVATIONS[name]


def _gpt2(config: dict, file: Path) -> ModelSpec:
    get = lambda key, default=None: _get(config, key, file, default)  # noqa: E731
    for key, ok in (("scale_attn_by_inverse_layer_idx", False), ("scale_attn_weights", True),
                    ("add_cross_attention", False)):
        if config.get(key, ok) != ok:
            raise ConfigError(file, key, cause("hf.only_flag", value=str(ok).lower()))
    d, heads = get("n_embd"), get("n_head")
    _heads(file, d, heads, heads, "n_head")
    return ModelSpec(
        d_model=d, n_layers=get("n_layer"), n_heads=heads, d_head=d // heads,
        d_ff=get("n_inner") if config.get("n_inner") is not None else 4 * d,
        norm=NormSpec(NormKind.LAYERNORM, NormPlacement.PRE, _eps(config, "layer_norm_epsilon", file, 1e-5),
                      affine=True), final_norm=True,
        ffn=_activation(config, "activation_function", file, "gelu_new"), positions=Positions.LEARNED,
        max_positions=get("n_positions"), bias=True, tied_unembed=bool(config.get("tie_word_embeddings", True)),
    )


def _bert(config: dict, file: Path) -> ModelSpec:
    get = lambda key, default=None: _get(config, key, file, default)  # noqa: E731
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(file, "position_embedding_type", cause("hf.bert_positions"))
    if config.get("is_decoder"):
        raise ConfigError(file, "is_decoder", cause("hf.bert_decoder"))
    d, heads = get("hidden_size"), get("num_attention_heads")
    _heads(file, d, heads, heads)
    return ModelSpec(
        d_model=d, n_layers=get("num_hidden_layers"), n_heads=heads, d_head=d // heads,
        d_ff=get("intermediate_size"),
        norm=NormSpec(NormKind.LAYERNORM, NormPlacement.POST, _eps(config, "layer_norm_eps", file, 1e-12),
                      affine=True), final_norm=False,
        ffn=_activation(config, "hidden_act", file, "gelu"), positions=Positions.LEARNED,
        max_positions=get("max_position_embeddings"), bias=True, causal=False, lm_head=False,
        type_vocab=get("type_vocab_size", 2), embed_norm=True,
    )


# -- tensors ---------------------------------------------------------------------------------
def tensor_files(folder: Path) -> dict[str, Path]:
    """Each tensor name -> the safetensors file holding it (one file or a sharded index)."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        return _shards(index)
    single = folder / "model.safetensors"
    if not single.exists():
        raise ScenarioError(str(folder), None, "", cause("hf.no_weights"))
    return {name: single for name in _header(single)[1] if name != "__metadata__"}


def _shards(index: Path) -> dict[str, Path]:
    """A sharded checkpoint's index: each tensor's file, which must be one in the folder."""
    document = read_json(index)
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ConfigError(index, "weight_map", cause("hf.weight_map"))
    folder, files = index.parent.resolve(), {}
    for name, shard in weight_map.items():
        file = (index.parent / shard).resolve() if isinstance(shard, str) and shard else None
        if file is None or file.parent != folder:
            raise ConfigError(index, f"weight_map.{name}", cause("hf.shard_name", shard=shard))
        if not file.is_file():
            raise ConfigError(index, f"weight_map.{name}", cause("hf.shard_missing", shard=shard))
        files[name] = index.parent / shard
    return files


class Tensors:
    """A folder's tensors by name, whatever prefix its files give them (`model.`, `transformer.`,
    `bert.` or none; a composite's text model under `model.language_model.`, its lm_head outside, the rest, such
    as a vision tower, never read). Each file's header is checked by `safetensors` and its data memory-mapped:
    `load(key)` is a read-only view of the map (bfloat16 widened to float32), `stand_in(key)` a
    zero-byte array of the tensor's shape and dtype, for checking shapes without reading; gpt-oss's
    MXFP4 experts (`key_blocks`, `key_scales`) read as `key`, one expert dequantized at a time (hf_mxfp4.py)."""

    def __init__(self, folder: Path):
        self.folder, self.files = folder, tensor_files(folder)
        nested = [prefix for prefix in LANGUAGE_MODELS if any(name.startswith(prefix) for name in self.files)]
        self.nested = nested[0] if nested else None  # a composite's language model
        self.prefixes = (self.nested, LANGUAGE_MODELS[self.nested]) if nested else PREFIXES
        self.packed = hf_mxfp4.Packed(self)  # gpt-oss's MXFP4 experts
        self._headers = {file: _header(file) for file in set(self.files.values())}
        for name, file in self.files.items():
            if name not in self._headers[file][1]:
                raise ScenarioError(str(folder / "model.safetensors.index.json"), None, f"weight_map.{name}",
                                    cause("hf.shard_tensor", name=file.name))

    def held(self) -> tuple[int, int]:
        """How many tensors the files hold, and how many bytes of data."""
        return len(self.files), sum(file.stat().st_size - start for file, (start, _) in self._headers.items())

    def find(self, key: str) -> tuple[Path, str, dict] | None:
        """The file holding `key`, its name there (with the files' prefix) and its header entry; None if none does."""
        for prefix in self.prefixes:
            name = prefix + key
            if name in self.files:
                file = self.files[name]
                return file, name, self._headers[file][1][name]
        return None

    def _entry(self, key: str) -> tuple[Path, str, dict]:
        found = self.find(key)
        if found is None:
            raise ScenarioError(str(self.folder), None, self._expected(key), cause("hf.tensor_missing"))
        return found

    def _expected(self, key: str) -> str:
        """Where `key` was looked for: a composite's language model (its lm_head beside it), else as it is named."""
        if self.nested is None:
            return key
        return (LANGUAGE_MODELS[self.nested] if key == "lm_head.weight" else self.nested) + key

    def stand_in(self, key: str, expert: int | None = None) -> np.ndarray:
        """(`expert`: that expert's slice of a tensor whose first axis is the experts; an MXFP4 pair reads as one.)"""
        if self.packed.holds(key):
            return np.broadcast_to(np.float32(0), self.packed.shape(key, expert))
        file, name, entry = self._entry(key)
        dtype = STAND_IN_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ScenarioError(str(file), None, name, cause("hf.not_float", dtype=entry["dtype"]))
        whole = np.broadcast_to(np.zeros((), dtype), entry["shape"])
        return whole if expert is None else whole[expert]

    def load(self, key: str, expert: int | None = None) -> np.ndarray:
        if self.packed.holds(key):
            return self.packed.load(key, expert)
        whole = self._load(key)
        return whole if expert is None else whole[expert]

    def _load(self, key: str) -> np.ndarray:
        file, name, entry = self._entry(key)
        start = self._headers[file][0]
        begin, end = (start + offset for offset in entry["data_offsets"])
        data = np.memmap(file, dtype=np.uint8, mode="r", offset=begin, shape=(end - begin,))
        array = np.asarray(data).view(RAW_DTYPES[entry["dtype"]]).reshape(entry["shape"])
        return widen_bf16(array) if entry["dtype"] == "BF16" else array


def _header(file: Path) -> tuple[int, dict]:
    """Where the data starts and each tensor's entry; `safe_open` validates the header first."""
    if not file.is_file():  # (safe_open says "No such device" of a folder, without naming it)
        raise ScenarioError(str(file), None, "", cause("hf.not_regular"))
    try:
        with safe_open(file, framework="numpy"):
            pass
    except SafetensorError as error:
        raise safetensors_refusal(file, error) from None
    return safetensors_header(file)


Getter = Callable[..., np.ndarray]  # (tensor name[, expert]) -> its array (an expert: that slice of the experts)


FIXED = {  # engine parameter -> tensor, outside the blocks
    "llama": {"embed": "embed_tokens.weight", "ln_final.w": "norm.weight"},
    "gpt2": {"embed": "wte.weight", "pos_embed": "wpe.weight", "ln_final.w": "ln_f.weight", "ln_final.b": "ln_f.bias"},
    "lfm2": {"embed": "embed_tokens.weight", "ln_final.w": "embedding_norm.weight"},
    "bert": {"embed": "embeddings.word_embeddings.weight", "pos_embed": "embeddings.position_embeddings.weight",
             "type_embed": "embeddings.token_type_embeddings.weight", "ln_embed.w": "embeddings.LayerNorm.weight",
             "ln_embed.b": "embeddings.LayerNorm.bias"},
}


def engine_weight(arch: str, spec: ModelSpec, name: str, get: Getter) -> np.ndarray:
    """The engine parameter `name`, read through `get(hf_name)`: outside the blocks by the family's names, a block's
    norms by its family's, the rest by the block's kinds (engine.layers.hf_tensor)."""
    family = "llama" if arch in LLAMA_FAMILY else arch
    tensor = hf_gemma4.tensor(name) if arch == hf_gemma4.ARCH else None  # its per-layer inputs, layer scalars
    if tensor is not None:
        return _linear(get, tensor) if name == "per_layer_proj" or ".w_" in name else get(tensor)
    if name in FIXED[family]:
        return get(FIXED[family][name])
    if name == "unembed":
        return _linear(get, "lm_head.weight")
    _, layer, part, leaf = name.split(".", 3)
    tensors = BlockTensors(f"{BLOCKS[family]}.{layer}", TABLES.get(arch, (family,)), spec, get, family != "gpt2")
    if part.startswith("ln"):
        norms = GEMMA_NORMS if arch in GEMMA else NORMS[family]
        return tensors.get(f"{norms[part]}.{'weight' if leaf == 'w' else 'bias'}")
    return hf_tensor(spec.blocks[int(layer)], part, leaf, tensors)


def _linear(get: Getter, key: str) -> np.ndarray:
    return get(key).T


BLOCKS = {"llama": "layers", "lfm2": "layers", "gpt2": "h", "bert": "encoder.layer"}  # a family's block L: BLOCKS.L
NORMS = {"llama": {"ln1": "input_layernorm", "ln2": "post_attention_layernorm"},
         "lfm2": {"ln1": "operator_norm", "ln2": "ffn_norm"}, "gpt2": {"ln1": "ln_1", "ln2": "ln_2"},
         "bert": {"ln1": "attention.output.LayerNorm", "ln2": "output.LayerNorm"}}  # a block's norms, by family
GEMMA_NORMS = {"ln1": "input_layernorm", "ln1_post": "post_attention_layernorm",
               "ln2": "pre_feedforward_layernorm", "ln2_post": "post_feedforward_layernorm"}
# an architecture -> the kinds' tables (their HF) it is read by, the first a kind has: a layout of its own, then its
# family's (Phi-3's fused qkv_proj and gate_up_proj, DeepSeek's latent attention and experts, gpt-oss's experts)
TABLES = {"phi3": ("phi3", "llama"), "deepseek_v3": ("deepseek", "llama"), GPT_OSS: ("gpt_oss", "llama")}


@dataclass(frozen=True)
class BlockTensors:
    """One block's tensors in a Hugging Face checkpoint, as a kind's `hf_tensor(leaf, tensors)` reads them:
    `get(name[, expert])` the tensor `name` under the block's prefix (`layers.3`, `h.3`, `encoder.layer.3`),
    `table(HF)` the kind's table (its HF) of the first of `families` it has, `spec` the model's ModelSpec."""

    base: str
    families: tuple[str, ...]
    spec: ModelSpec
    getter: Getter
    transposed: bool = True  # linear weights stored [out, in] (GPT-2's Conv1D: already [in, out])

    def get(self, name: str, *expert: int) -> np.ndarray:
        return self.getter(f"{self.base}.{name}", *expert)

    def family(self, tables: dict) -> str | None:
        """The first of the families that `tables` (a kind's HF) has."""
        return next((family for family in self.families if family in tables), None)

    def table(self, tables: dict) -> dict:
        return tables.get(self.family(tables), {})

    def linear(self, module: str) -> np.ndarray:
        """A linear module's weight, [in, out] as the engine keeps it."""
        weight = self.get(f"{module}.weight")
        return weight.T if self.transposed else weight

    def projection(self, leaf: str, module: str) -> np.ndarray:
        """`module`'s weight (a leaf `w…`) or bias (`b…`)."""
        return self.linear(module) if leaf.startswith("w") else self.get(f"{module}.bias")

    def either(self, first: Callable[[], np.ndarray], second: Callable[[], np.ndarray]) -> np.ndarray:
        """`first()`, or where a tensor it reads is missing, `second()` (where that is missing too: `first`'s
        refusal)."""
        try:
            return first()
        except ScenarioError as missing:
            try:
                return second()
            except ScenarioError:
                raise missing from None
