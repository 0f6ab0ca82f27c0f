"""What a scenario declares: vocabulary, model shape, decode rule, requests.

Plain frozen dataclasses; `scenario.py` builds them from YAML and checks them.
"""

from __future__ import annotations

from dataclasses import dataclass

NORM_KINDS = ("layernorm", "rmsnorm", "none")
NORM_PLACEMENTS = ("pre", "post")
POSITION_SCHEMES = ("none", "seed_sin", "sinusoidal", "learned")  # scenario files; checkpoints add "rope"
LINEARS = ("q", "k", "v", "o", "mlp")  # what ModelSpec.biases may name
FFN_KINDS = ("gated_silu", "relu", "tanh", "gelu", "gelu_tanh")
DECODE_RULES = ("greedy", "sample")


@dataclass(frozen=True)
class Vocab:
    tokens: tuple[str, ...]
    pad: int | None = None
    eos: int | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def label(self, token_id: int) -> str:
        return f"{token_id} · {self.tokens[token_id]}"


@dataclass(frozen=True)
class NormSpec:
    kind: str = "layernorm"
    placement: str = "pre"
    eps: float = 1e-5
    affine: bool = False


@dataclass(frozen=True)
class ModelSpec:
    d_model: int
    n_layers: int
    n_heads: int
    d_head: int
    d_ff: int
    norm: NormSpec
    final_norm: bool
    ffn: str = "gated_silu"
    positions: str = "none"
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
    biases: tuple[str, ...] | None = None  # the LINEARS with a bias (Qwen2: q, k, v); None: all if `bias`
    type_vocab: int = 0  # BERT: a token-type table whose row 0 is added to every embedding
    embed_norm: bool = False  # BERT: a norm (ln_embed) over the summed embeddings

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


@dataclass(frozen=True)
class DecodeRule:
    rule: str = "greedy"
    forbid: tuple[int, ...] = ()
    max_new_tokens: int = 1
    stop_at_eos: bool = True
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    prefill_chunk: int | None = None


@dataclass(frozen=True)
class Request:
    tokens: tuple[int, ...]  # PAD included where the request was padded
    max_new_tokens: int
    vectors: tuple[tuple[float, ...], ...] | None = None  # given input vectors instead of embedding rows
