"""What a scenario declares: vocabulary, model shape, decode rule, requests.

Plain frozen dataclasses and the enums of their kinds; engine.loading builds them from YAML
and checkpoints (parsing each kind once) and checks them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any, ClassVar, NamedTuple

from engine.labels import visible


class NormKind(StrEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"
    NONE = "none"


class NormPlacement(StrEnum):
    PRE = "pre"  # x + f(norm(x)) (GPT-2, Llama)
    POST = "post"  # norm(x + f(x)) (the original Transformer, BERT)


class Positions(StrEnum):
    """How positions enter: added to the embedding (the first four), or RoPE turning each head's q and k."""

    NONE = "none"
    SEED_SIN = "seed_sin"
    SINUSOIDAL = "sinusoidal"
    LEARNED = "learned"
    ROPE = "rope"


class FfnKind(StrEnum):
    GATED_SILU = "gated_silu"  # SwiGLU: silu(x·W_gate) ⊙ (x·W_up), as Llama
    GATED_GELU_TANH = "gated_gelu_tanh"  # GeGLU with the tanh GELU, as Gemma
    RELU = "relu"
    TANH = "tanh"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"

    @property
    def gated(self) -> bool:
        return self.value.startswith("gated_")


class Rule(StrEnum):
    GREEDY = "greedy"
    SAMPLE = "sample"


class Mode(StrEnum):
    """How a session feeds a round: only the new tokens, or the whole prefix again."""

    CACHED = "cached"
    FULL = "full"


@dataclass(frozen=True)
class Vocab:
    tokens: Sequence[str]  # a tuple, or a checkpoint's texts made as they are read
    pad: int | None = None
    eos: int | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def pad_id(self) -> int:
        """The token a batch pads with: PAD, else EOS, else 0 (padding is masked by position anyway)."""
        return next((t for t in (self.pad, self.eos) if t is not None), 0)

    def shown(self, token_id: int) -> str:
        """The token's text as a label draws it (engine.labels.visible: one of only whitespace made visible)."""
        return visible(self.tokens[token_id])

    def label(self, token_id: int) -> str:
        return f"{token_id} · {self.shown(token_id)}"


@dataclass(frozen=True)
class NormSpec:
    kind: NormKind = NormKind.LAYERNORM
    placement: NormPlacement = NormPlacement.PRE
    eps: float = 1e-5
    affine: bool = False
    weight_offset: bool = False  # Gemma: the stored gain w is applied as (1 + w)


class KindOptions:
    """A layer kind's model-wide options (a frozen dataclass in its module, engine.layers): the kind they are for
    (`ROLE`, `KIND`: engine.layers' names) and which layers the flags make that kind (`covers`)."""

    ROLE: ClassVar[str]
    KIND: ClassVar[str]

    def covers(self, layer: int) -> bool:
        """Whether `layer` is of this kind where a model lists no `layers` (by default none: those of its kind come
        listed)."""
        return False


class LayerContext(NamedTuple):
    """What a scenario's model says beside its `layers:` that a layer option may be checked against."""

    positions: Positions
    causal: bool


@dataclass(frozen=True)
class LayerOption:
    """A per-layer option a kind declares in its module (its `LAYER_OPTIONS`: the `layers:` key -> this): how a
    scenario's value is read (`parse(node, context)`: an engine.loading.document.Node and a LayerContext; its
    errors name the node), the value of a layer that gives none, and the code of the cause said of the key on a
    layer whose kinds take no such option (facts `mixer` and `ffn`; engine.causes' or the kind's CAUSES)."""

    parse: Callable[[Any, LayerContext], Hashable]
    default: Hashable
    elsewhere: str = "scenario.option_elsewhere"


@dataclass(frozen=True)
class LayerSpec:
    """One block of the stack: its token mixer and its FFN, each a kind named in engine.layers, with the
    options of those kinds. A stack of mixed blocks is another tuple of these, not a flag."""

    mixer: str = "attention"
    ffn: str = "dense"
    window: int | None = None  # attention: query i reads keys j > i − window only (None: every earlier key)
    rope_theta: float | None = None  # attention under positions "rope": this layer's base (None: the model's)
    rope_divisors: tuple[float, ...] | None = None  # what its RoPE frequencies are divided by (None: nothing;
    # inf: a frequency that stands still, as Gemma 4's proportional RoPE)
    d_head: int | None = None  # attention: this layer's head width (None: the model's; Gemma 4's full layers)
    kv_heads: int | None = None  # attention: this layer's kv heads (None: the model's)
    k_eq_v: bool = False  # attention: the keys' projection is the values' too (Gemma 4's attention_k_eq_v)
    kv_source: int | None = None  # attention: a KV-shared layer, reading that earlier layer's K/V (writing none)
    d_ff: int | None = None  # dense FFN: this layer's width (None: the model's; Gemma 4's double-wide MLP)
    # its kinds' own options, by name (a mapping given, kept as sorted pairs so that the spec stays hashable): a
    # scenario's, as its kinds' LAYER_OPTIONS read them, or a checkpoint reader's (short_conv's `kernel`)
    options: Mapping[str, Hashable] | tuple[tuple[str, Hashable], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "options", tuple(sorted(dict(self.options).items())))

    def option(self, name: str, default: Hashable = None) -> Hashable:
        """The value of its kinds' option `name`, or `default` where it has none."""
        return dict(self.options).get(name, default)


@dataclass(frozen=True)
class ModelSpec:
    d_model: int
    n_layers: int
    n_heads: int
    d_head: int
    d_ff: int
    norm: NormSpec
    final_norm: bool
    ffn: FfnKind = FfnKind.GATED_SILU
    positions: Positions = Positions.NONE
    max_positions: int = 0
    bias: bool = False
    tied_unembed: bool = True
    causal: bool = True
    lm_head: bool = True  # False: an encoder, whose last block's output is the result (no decoding)
    dropout: float = 0.0  # after the FFN activation, only when training
    dropout_seed: int = 0
    training: bool = False
    kv_heads: int | None = None  # grouped-query attention: query head h reads kv head h // (heads / kv_heads)
    rope_theta: float = 10000.0  # positions "rope": half-split rotate_half, as Llama and Qwen2
    biases: tuple[str, ...] | None = None  # the linears with a bias (q, k, v, o, mlp, conv: a short conv's three; Qwen2: q, k, v); None: all if `bias`
    type_vocab: int = 0  # BERT: a token-type table whose row 0 is added to every embedding
    embed_norm: bool = False  # BERT: a norm (ln_embed) over the summed embeddings
    embed_scale: float = 1.0  # Gemma: the embedding rows times √d_model
    qk_norm: bool = False  # Qwen3, Gemma 3: an RMSNorm over each head's q and k (attn.q_norm.w, attn.k_norm.w)
    post_norms: bool = False  # Gemma 2/3: ln1_post after attention and ln2_post after the MLP, before each sum
    attn_scale: float | None = None  # the scores' factor; None: 1/√d_head (Gemma: query_pre_attn_scalar^-½)
    attn_softcap: float | None = None  # Gemma 2: scores -> cap·tanh(scores / cap), before the mask
    final_softcap: float | None = None  # Gemma 2: logits -> cap·tanh(logits / cap)
    sliding_window: int | None = None  # on sliding layers, query i reads keys j > i − window only
    sliding_layers: tuple[int, ...] | None = None  # the layers with that window; None: every layer (Mistral)
    rope_theta_local: float | None = None  # Gemma 3: the RoPE base of sliding layers (rope_theta: the others)
    rope_factors: tuple[float, ...] | None = None  # d_head/2 divisors of the RoPE frequencies on the layers with
    # rope_theta (linear scaling: all the factor; Llama 3: by wavelength), as llama.cpp's rope_freqs tensor
    rope_dims: int | None = None  # partial rotary: the features of each head RoPE turns (None: all d_head)
    layers: tuple[LayerSpec, ...] | None = None  # each block's kinds (a scenario's `layers:`); None: from the flags
    # a layer kind's model-wide options, its module's (engine.layers: the sparse FFN's, latent attention's, the Gated
    # DeltaNet's shape); one that `covers` a layer makes it that kind where `layers` is None
    moe: KindOptions | None = None
    mla: KindOptions | None = None
    deltanet: KindOptions | None = None
    attn_gate: bool = False  # Qwen3.5: attention's output times sigmoid(x·W_gate) before W_o (attn.wgate)
    v_norm: bool = False  # Gemma 4: an RMSNorm without gain over each value head
    per_layer_input: int = 0  # Gemma 4: the width of each layer's input embedding (0: none)
    layer_scalar: bool = False  # Gemma 4: each block's output times its blocks.L.layer_scalar
    attn_sinks: bool = False  # gpt-oss: a learned logit per head (attn.sinks) in every softmax's denominator
    rope_scale: float = 1.0  # YaRN's attention factor: RoPE's cos and sin are multiplied by it

    @property
    def d_attn(self) -> int:
        return self.n_heads * self.d_head

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.n_heads

    @property
    def d_kv(self) -> int:
        """Width of K, V and of each layer's cache rows."""
        return self.n_kv_heads * self.d_head

    def has_bias(self, linear: str) -> bool:
        return linear in self.biases if self.biases is not None else self.bias

    @cached_property
    def blocks(self) -> tuple[LayerSpec, ...]:
        """Every block's kinds: the scenario's `layers:`, else what a checkpoint's flags say (LayerSpec's default
        kinds, or those whose model-wide options cover the layer; the window, RoPE base and scaling of its layer
        type)."""
        if self.layers is not None:
            return self.layers
        return tuple(LayerSpec(mixer=self._flag_kind("mixer", layer), ffn=self._flag_kind("ffn", layer),
                               window=self._flag_window(layer),
                               rope_theta=self._flag_theta(layer), rope_divisors=self._flag_divisors(layer))
                     for layer in range(self.n_layers))

    def window(self, layer: int) -> int | None:
        """The sliding window of `layer`'s attention, or None (every earlier key visible)."""
        return self.blocks[layer].window

    def theta(self, layer: int) -> float:
        """`layer`'s RoPE base: Gemma 3's sliding layers have their own."""
        theta = self.blocks[layer].rope_theta
        return self.rope_theta if theta is None else theta

    def rope_divisors(self, layer: int) -> tuple[float, ...] | None:
        """What `layer`'s RoPE frequencies are divided by (None: nothing); Gemma 3 scales its global layers only."""
        return self.blocks[layer].rope_divisors

    def _flag_kind(self, role: str, layer: int) -> str:
        """The kind (`role`: "mixer" or "ffn") of `layer` by the flags: the first kind options covering it, else
        LayerSpec's default."""
        options = (getattr(self, field.name) for field in dataclasses.fields(self))
        return next((found.KIND for found in options if isinstance(found, KindOptions) and found.ROLE == role
                     and found.covers(layer)), getattr(LayerSpec, role))

    def _flag_window(self, layer: int) -> int | None:
        if self.sliding_window is None or (self.sliding_layers is not None and layer not in self.sliding_layers):
            return None
        return self.sliding_window

    def _flag_theta(self, layer: int) -> float:
        return self.rope_theta_local if self._local_rope(layer) else self.rope_theta

    def _flag_divisors(self, layer: int) -> tuple[float, ...] | None:
        return None if self._local_rope(layer) else self.rope_factors

    def _local_rope(self, layer: int) -> bool:
        return bool(self.rope_theta_local and self._flag_window(layer))


@dataclass(frozen=True)
class DecodeRule:
    rule: Rule = Rule.GREEDY
    forbid: tuple[int, ...] = ()
    max_new_tokens: int = 1
    stop_at_eos: bool = True
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    prefill_chunk: int | None = None


class Message(NamedTuple):  # a plain (role, content) pair is one too
    role: str
    content: str


@dataclass(frozen=True)
class Chat:
    """One request's conversation as the model reads it: each token's origin, and what ends the reply."""

    messages: tuple[Message, ...]
    text: str  # the template's output
    ids: tuple[int, ...]
    sources: tuple[int | None, ...]  # per token: the message whose content it holds; None for the template's own
    control: tuple[bool, ...]  # per token: a special token (the template's markup: <|im_start|>, <|im_end|>)
    end_of_turn: int | None  # the token the template closes an assistant turn with, where it writes one


@dataclass(frozen=True)
class Request:
    tokens: tuple[int, ...]  # PAD included where the request was padded
    max_new_tokens: int
    vectors: tuple[tuple[float, ...], ...] | None = None  # given input vectors instead of embedding rows
    chat: Chat | None = None  # the conversation the tokens were rendered from (engine.loading.chat)
