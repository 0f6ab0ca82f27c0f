"""DeepSeek's multi-head latent attention (MLA: DeepSeek-V2/V3, Kimi): the cache holds one latent row per token.

The query: LN(x) · q_a, its RMSNorm, · q_b (or one q projection), each head's columns a no-position part
(d_nope) and a part RoPE turns (d_rope). The keys and values: LN(x) · kv_a gives the compressed latent
(kv_lora_rank, through its RMSNorm) and one rope key (d_rope, turned by RoPE) shared by every head; only these
two are cached. kv_b expands a latent row into each head's no-position key (W_UK) and its value (W_UV).

Two forms of the same function (MlaSpec.absorbed):
- naive (transformers): every cached latent row expanded into per-head K = [latent · W_UK_h, rope key] and
  V = latent · W_UV_h, then softmax attention;
- absorbed (serving engines' kernels): W_UK folded into the query, q̃_h = q_nope_h · W_UK_hᵀ, the scores
  q̃_h · latentᵀ + q_rope_h · rope_keyᵀ read the cache as it is, the mix stays a latent (pattern · latent), and
  W_UV comes after it. Both give the same scores, pattern, z and output (the tests hold them within 1e-12).
Its state is a LatentCache (the latent rows and rope keys; the per-head K/V they expand to are a view made when
shown); its fault points: the rope key a cache stores, and the W_UK the absorbed query multiplies by.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from engine import ops
from engine.arrays import namespace
from engine.caches import LayerCache, Read
from engine.hooks import Hook, HookSite
from engine.layers import attention
from engine.layers.attention import Attention
from engine.operators import Op, Operand, OpStream, op
from engine.spec import KindOptions, LayerSpec, ModelSpec
from engine.state import StateView
from engine.trace import OpKind

Array = Any
NAME, MODULE = "mla", "attn"
ADDED = "hook_attn_out"  # the hook of what the residual stream adds: its output
HF = {"deepseek": {"q": "self_attn.q_proj", "q_a": "self_attn.q_a_proj", "q_b": "self_attn.q_b_proj",
                   "kv_a": "self_attn.kv_a_proj_with_mqa", "kv_b": "self_attn.kv_b_proj", "o": "self_attn.o_proj",
                   "q_a_norm": "self_attn.q_a_layernorm", "kv_a_norm": "self_attn.kv_a_layernorm"}}
HF_LAYER_TYPES: dict[str, bool] = {}
CHECKPOINT_ONLY = True  # its shape (engine.spec.MlaSpec) comes from a DeepSeek checkpoint's config, not a scenario
# llama.cpp's deepseek2 tensors (its wq and wo: attention's; kv_b from attn_k_b and attn_v_b: gguf_tensor)
GGUF = {"attn.wq_a": "attn_q_a", "attn.q_a_norm.w": "attn_q_a_norm", "attn.wq_b": "attn_q_b",
        "attn.wkv_a": "attn_kv_a_mqa", "attn.kv_a_norm.w": "attn_kv_a_norm", "attn.wkv_b": "attn_k_b"}
PER_HEAD = ("hook_z_latent",)  # with the attention's scores, pattern, z and result
# its scores, pattern, per-head vectors and results are attention's (engine.layers.attention)
HEAD_MATRICES, HEAD_AXIS, MASKED = attention.HEAD_MATRICES, attention.HEAD_AXIS, attention.MASKED
PATTERN_HOOKS, HEAD_RESULT, output_bias = attention.PATTERN_HOOKS, attention.HEAD_RESULT, attention.output_bias
LATENT = "cache_latent"  # its state's latent rows, as an operand of the keys and values expanded from them
STACKED_HEADS = True  # its q, k, v, rope parts and z have heads of different widths: dumped stacked


EXPLANATIONS: dict[str, dict[str, tuple[str, str, str, str]]] = {
    "hook_q_a": {
        "en": ("DeepSeek's query goes through a low-rank bottleneck first.", "LN(x) · W_q_a (q_lora_rank columns), "
               "then its RMSNorm (q_a_norm) and · W_q_b into every head's no-position and rope parts.",
               "The bottleneck's norm has its own gain: skipping it changes every query.",
               "Width = q_lora_rank."),
        "zh": ("DeepSeek的查询先经过低秩瓶颈。", "LN(x)·W_q_a（q_lora_rank列），再经RMSNorm（q_a_norm）和W_q_b得到各头的无位置部分与rope部分。",
               "瓶颈的归一化有自己的增益：跳过它会改变所有查询。", "宽度=q_lora_rank。"),
    },
    "hook_kv_a": {
        "en": ("Everything a token will offer as keys and values, compressed: the latent, then one shared rope key.",
               "LN(x) · W_kv_a: the first kv_lora_rank columns are the latent (normalised next), the last d_rope "
               "the rope key (turned by RoPE next).",
               "The split is latent first, rope key last; swapping them reads noise.",
               "Width = kv_lora_rank + qk_rope_head_dim."),
        "zh": ("Token将要提供的键和值，压缩后的形式：先是潜向量，再是一个共享的rope键。",
               "LN(x)·W_kv_a：前kv_lora_rank列是潜向量（随后归一化），后d_rope列是rope键（随后做RoPE）。",
               "顺序是潜向量在前、rope键在后；弄反会读到噪声。", "宽度=kv_lora_rank+qk_rope_head_dim。"),
    },
    "hook_latent": {
        "en": ("The latent row this layer caches for each token instead of per-head K and V.",
               "RMSNorm(kv_a[:, :kv_lora_rank]) · kv_a_norm; kv_b expands it into every head's key and value.",
               "The cache holds the normalised latent: expanding the raw one gives other keys.",
               "Cache rows = latent rows of the tokens fed; bytes grow by kv_lora_rank + d_rope per token, not "
               "2·heads·d_head."),
        "zh": ("本层为每个Token缓存的潜向量行，代替各头的K和V。", "RMSNorm(kv_a[:, :kv_lora_rank])·kv_a_norm；kv_b把它展开成各头的键和值。",
               "缓存的是归一化后的潜向量：展开未归一化的会得到不同的键。", "每个Token缓存增加kv_lora_rank+d_rope个数，而不是2·头数·头宽。"),
    },
    "hook_q_a_normed": {
        "en": ("The query's bottleneck, normalised before it widens into the heads.",
               "RMSNorm over the q_lora_rank features, times q_a_norm's gain; then · W_q_b.",
               "Its epsilon is DeepSeek's 1e-6 default, not necessarily the config's rms_norm_eps.",
               "Before the gain each row's root mean square is ≈ 1."),
        "zh": ("查询的瓶颈，在展开到各头之前先归一化。", "对q_lora_rank个特征做RMSNorm，乘以q_a_norm的增益；然后乘W_q_b。",
               "其epsilon是DeepSeek默认的1e-6，不一定等于配置中的rms_norm_eps。", "增益前每行的均方根约为1。"),
    },
    "hook_rot_q": {
        "en": ("RoPE turns each head's query by its position, so scores depend on how far apart tokens are.",
               "Pairs of features rotated by position·θ^(−2i/d) (half-split layout); latent attention turns only "
               "each head's d_rope part.", "A decode step must turn the new query by its absolute position, "
               "not by 0.", "Row i equals the unrotated row turned by angle i·θ_j per pair."),
        "zh": ("RoPE按位置旋转每个头的查询，使分数取决于Token之间的距离。",
               "特征两两按position·θ^(−2i/d)旋转（半分布局）；潜在注意力只旋转每个头的d_rope部分。",
               "解码时必须按新查询的绝对位置旋转，而不是按0。", "第i行等于未旋转的行按每对角度i·θ_j旋转。"),
    },
    "hook_rot_k": {
        "en": ("RoPE turns the keys by their positions before they are cached.",
               "The same rotation as the query's; latent attention has one rope key per token, shared by every head.",
               "Keys are cached after RoPE: a key cached before it is never turned.",
               "The cache's newest rows equal these rows."),
        "zh": ("RoPE在缓存之前按位置旋转键。", "与查询相同的旋转；潜在注意力每个Token只有一个rope键，所有头共享。",
               "键在RoPE之后缓存：在此之前缓存的键永远不会被旋转。", "缓存最新的行等于这些行。"),
    },
    "hook_k(latent)": {
        "en": ("The naive form: every cached latent row expanded into each head's key.",
               "K_h = [latent · W_UK_h, rope key]: kv_b's no-position columns of head h, then the shared rope key.",
               "This recomputes every cached row each step: the absorbed form avoids it.",
               "Rows = cached tokens; each head's last d_rope columns are the same rope key."),
        "zh": ("朴素形式：把每个缓存的潜向量行展开成各头的键。", "K_h = [latent·W_UK_h, rope键]：kv_b中头h的无位置列，再接共享的rope键。",
               "每步都要重算所有缓存行：吸收形式避免了这一点。", "行数=缓存的Token数；每个头最后d_rope列都是同一个rope键。"),
    },
    "hook_v(latent)": {
        "en": ("The naive form: every cached latent row expanded into each head's value.",
               "V_h = latent · W_UV_h (kv_b's value columns of head h).",
               "Values carry no rope part: only the keys share the rotated key.", "Rows = cached tokens; width heads·d_v."),
        "zh": ("朴素形式：把每个缓存的潜向量行展开成各头的值。", "V_h = latent·W_UV_h（kv_b中头h的值列）。",
               "值没有rope部分：只有键共享旋转后的键。", "行数=缓存的Token数；宽度为头数·d_v。"),
    },
    "hook_q_absorbed": {
        "en": ("The absorbed form: W_UK folded into the query, so the scores read the latent cache directly.",
               "q̃_h = q_nope_h · W_UK_hᵀ for each head (kv_lora_rank columns per head).",
               "W_UK must be transposed: a kernel multiplying by it untransposed reads every score wrong.",
               "q̃_h · latentᵀ equals the naive form's q_nope_h · k_nope_hᵀ."),
        "zh": ("吸收形式：把W_UK并入查询，分数直接读取潜向量缓存。", "每个头q̃_h = q_nope_h·W_UK_hᵀ（每头kv_lora_rank列）。",
               "W_UK必须转置：不转置相乘会让所有分数出错。", "q̃_h·latentᵀ等于朴素形式的q_nope_h·k_nope_hᵀ。"),
    },
    "hook_z_latent": {
        "en": ("The absorbed form's mix: still a latent, before W_UV turns it into the head's values.",
               "pattern_h · latent rows; then z_h = this · W_UV_h.",
               "W_UV comes after the mix here, before it in the naive form: the same numbers either way.",
               "Width = kv_lora_rank."),
        "zh": ("吸收形式的混合：仍是潜向量，之后W_UV把它变成该头的值。", "pattern_h·潜向量行；然后z_h=它·W_UV_h。",
               "这里W_UV在混合之后，朴素形式在之前：结果相同。", "宽度=kv_lora_rank。"),
    },
}


@dataclass(frozen=True)
class MlaSpec(KindOptions):
    """Its model-wide options (ModelSpec.mla; every layer's mixer): each token's keys and values are one latent row
    of `kv_lora_rank` features (expanded per head by kv_b) plus one rope key of `d_rope` features shared by the
    heads; the query is a no-position part of `d_nope` features and a rotated part of `d_rope` per head."""

    kv_lora_rank: int
    d_nope: int  # qk_nope_head_dim
    d_rope: int  # qk_rope_head_dim (ModelSpec.d_head is d_nope + d_rope, the scores' width)
    d_v: int  # v_head_dim
    q_lora_rank: int | None = None  # the query through a low-rank q_a, its norm and q_b (None: one q projection)
    absorbed: bool = False  # W_UK folded into the query and W_UV after the mix (serving engines); else expanded
    ROLE: ClassVar[str] = "mixer"
    KIND: ClassVar[str] = NAME

    def covers(self, layer: int) -> bool:
        return True


class FaultPoints:
    """Where an injected bug may change what latent attention does; these are the correct answers."""

    def cached_rope_key(self, xp, rotated: Array, unrotated: Array) -> Array:
        """The rope-key rows a latent cache stores for a chunk: the keys after RoPE."""
        return rotated

    def absorbed_uk(self, xp, w_uk: Array) -> Array:
        """The (d_nope, kv_lora_rank) matrix the absorbed form multiplies a head's q_nope by: W_UK_h transposed
        (w_uk is W_UK_h, kv_lora_rank × d_nope, as the engine stores kv_b)."""
        return xp.matrix_transpose(w_uk)


FORMS = {"naive": False, "absorbed": True}  # what its option (--mla) picks: the latent expanded per head, or absorbed


def in_form(model: ModelSpec, form: str) -> ModelSpec:
    """`model` with its latent attention in `form` (one of FORMS); ValueError(a code of its CAUSES) where it has
    none."""
    if model.mla is None:
        raise ValueError("mla.none")
    return dataclasses.replace(model, mla=dataclasses.replace(model.mla, absorbed=FORMS[form]))


def explanation_key(operator) -> str | None:
    """Its keys and values, expanded from its latent cache (the input named as its layer's LATENT hook): filed apart
    from attention's."""
    hook, inputs = operator.hook, operator.inputs
    latent = Hook(hook.layer, MODULE, LATENT).text
    return f"{hook.name}(latent)" if hook.name in ("hook_k", "hook_v") and inputs and inputs[0].name == latent else None


class RopeKeyUnrotated:
    def cached_rope_key(self, xp, rotated, unrotated):
        return unrotated

    def unseen(self, scenario):
        return _no_layer(scenario.model)


class AbsorbedUkUntransposed:
    def absorbed_uk(self, xp, w_uk):
        # W_UK_h's (kv_lora_rank, d_nope) buffer read as the (d_nope, kv_lora_rank) the product needs: no transpose
        return xp.reshape(w_uk, (w_uk.shape[1], w_uk.shape[0]))

    def unseen(self, scenario):
        mla = scenario.model.mla
        if mla is not None and not mla.absorbed:
            return ("fault.naive_mla", {})
        return _no_layer(scenario.model)


def _no_layer(model) -> tuple[str, dict] | None:
    return None if model.mla is not None else ("mla.none", {})


# the words of its causes (engine.causes: a code and facts), per language; the English is the CLI's
CAUSES = {"en": {"fault.naive_mla": "the model's latent attention runs the naive form (--mla absorbed runs the "
                                    "absorbed one)",
                 "mla.none": "the model has no latent attention (DeepSeek's MLA)",
                 "view.latent": "latent", "view.rope_key": "rope key"},  # its cache's views (K and V: notation)
          "zh": {"fault.naive_mla": "模型的潜在注意力以朴素形式运行（--mla absorbed 才运行吸收形式）",
                 "mla.none": "模型没有潜在注意力（DeepSeek 的 MLA）",
                 "view.latent": "潜向量", "view.rope_key": "rope键"}}
BUGS = (RopeKeyUnrotated, AbsorbedUkUntransposed)


@dataclass(frozen=True, eq=False)
class LatentCache(LayerCache):
    """One MLA layer's cache, an engine.state.LayerState: `k` holds the latent rows (S, kv_lora_rank), `v` the
    rope keys (S, d_rope, after RoPE); `kv_b` (kv_lora_rank, heads·(d_nope + d_v)) expands them into the per-head
    K and V its views show."""

    kv_b: Array = None
    d_nope: int = 0
    d_v: int = 0
    module: ClassVar[str] = MODULE

    def extend(self, xp, latent: Array, rope_key: Array, fault) -> Read:
        cache = dataclasses.replace(self, k=xp.concat([self.k, latent], axis=0), v=xp.concat([self.v, rope_key], axis=0))
        return Read(cache.k, cache.v, range(cache.length), cache)

    def expanded(self) -> tuple[Array, Array]:
        """The per-head K and V its rows expand to (`expand`)."""
        return expand(namespace(self.k), self.k, self.v, self.kv_b, self.d_nope, self.d_v)

    def views(self) -> tuple[StateView, ...]:
        keys, values = self.expanded()  # made only when a view is shown
        return (StateView("latent", self.k, 0, title="view.latent"),
                StateView("rope key", self.v, 0, title="view.rope_key"),
                StateView("K", keys, self.d_nope + int(self.v.shape[1])), StateView("V", values, self.d_v))

    def dump_items(self) -> dict[str, Array]:
        return {LATENT: self.k, "cache_rope_key": self.v}


def expand(xp, latent: Array, rope_key: Array, kv_b: Array, d_nope: int, d_v: int) -> tuple[Array, Array]:
    """Every head's keys [latent · W_UK_h, rope key] and values latent · W_UV_h, (S, H·(d_nope + d_rope)) and
    (S, H·d_v): what the naive form attends over."""
    s, heads = latent.shape[0], kv_b.shape[1] // (d_nope + d_v)  # (not −1: an empty cache has no rows to infer by)
    kv = xp.reshape(latent @ kv_b, (s, heads, d_nope + d_v))
    rope = xp.broadcast_to(rope_key[:, None, :], (s, heads, rope_key.shape[1]))
    keys = xp.concat([kv[..., :d_nope], rope], axis=-1)
    return xp.reshape(keys, (s, heads * keys.shape[2])), xp.reshape(kv[..., d_nope:], (s, heads * d_v))


def hf_tensor(leaf: str, tensors) -> Array:
    """Its parameter `leaf` from a Hugging Face block (`tensors`: an engine.loading.hf.BlockTensors): the
    projections (`wq_b` from q_b_proj, `wkv_a` from kv_a_proj_with_mqa, …, their rope columns in the half-split
    layout) and the norms."""
    table = tensors.table(HF)
    if leaf.endswith("_norm.w"):
        return tensors.get(f"{table[leaf[:-2]]}.weight")
    return half_split_rope(tensors.linear(table[leaf[1:]]), leaf, tensors.spec)


def gguf_tensor(leaf: str, tensors) -> Array:
    """Its parameter `leaf` from a GGUF block (`tensors`: an engine.loading.gguf_model.GGUFBlock) of llama.cpp's
    deepseek2, whose converter writes kv_b_proj split per head into attn_k_b ([heads, kv_lora_rank, d_nope]: W_UK
    already transposed, for the absorbed form) and attn_v_b ([heads, d_v, kv_lora_rank]), and leaves the rope
    columns on interleaved pairs (llama.cpp's NORM rope): reordered to the half-split layout, as for Hugging Face."""
    if leaf == "wkv_b":
        return _kv_b(tensors.get("attn_k_b.weight"), tensors.get("attn_v_b.weight"), tensors.spec)
    w = tensors.stored(leaf)
    return w if w.ndim == 1 else half_split_rope(w.T, leaf, tensors.spec)


def _kv_b(k_b: Array, v_b: Array, spec: ModelSpec) -> Array:
    """kv_b as the engine keeps it, (kv_lora_rank, heads·(d_nope + d_v)), each head's W_UK then W_UV columns,
    from the split attn_k_b ([heads, kv_lora_rank, d_nope]) and attn_v_b ([heads, d_v, kv_lora_rank])."""
    heads = [np.concatenate([k_b[h], np.swapaxes(v_b[h], 0, 1)], axis=1) for h in range(spec.n_heads)]
    return np.concatenate(heads, axis=1)


def gguf_locate(leaf: str, index: tuple[int, ...], tensors) -> tuple[str, int, int] | None:
    """The tensor, row and column (its rows as a 2-D [rows, in] table) that hold its matrix `leaf` at `index`
    ([in, out]): rope columns reordered, kv_b's in attn_k_b or attn_v_b (None: a vector, stored as it is)."""
    if len(index) == 1:
        return None
    row, col = index
    mla = tensors.spec.mla
    if leaf == "wkv_b":
        head, part = divmod(col, mla.d_nope + mla.d_v)
        if part < mla.d_nope:  # attn_k_b [heads, kv_lora_rank, d_nope]: W_UK transposed
            return tensors.tensor("attn_k_b.weight"), head * mla.kv_lora_rank + row, part
        return tensors.tensor("attn_v_b.weight"), head * mla.d_v + part - mla.d_nope, row
    columns = rope_columns(leaf, tensors.spec, tensors.shape(leaf)[-2])
    return tensors.name(leaf), col if columns is None else int(columns[col]), row

def half_split_rope(weight: np.ndarray, leaf: str, spec: ModelSpec) -> np.ndarray:
    """DeepSeek rotates interleaved pairs (x0, x1), (x2, x3), … and writes the result half-split: the rope
    columns of `wq`/`wq_b` (each head's last d_rope) and of `wkv_a` (its last d_rope) reordered evens first, then
    odds, make the engine's half-split RoPE give the same rotated rows. Other weights pass as they are."""
    columns = rope_columns(leaf, spec, weight.shape[1])
    return weight if columns is None else weight[:, columns]


def rope_columns(leaf: str, spec: ModelSpec, width: int) -> np.ndarray | None:
    """Engine column j of a DeepSeek projection `leaf` is the checkpoint's column `rope_columns(…)[j]` (None: the
    same column)."""
    mla = spec.mla
    if leaf not in ("wq", "wq_b", "wkv_a"):
        return None
    order = np.concatenate([np.arange(0, mla.d_rope, 2), np.arange(1, mla.d_rope, 2)])
    starts = ([mla.kv_lora_rank] if leaf == "wkv_a" else
              [h * (mla.d_nope + mla.d_rope) + mla.d_nope for h in range(spec.n_heads)])
    columns = np.arange(width)
    for start in starts:
        columns[start:start + mla.d_rope] = start + order
    return columns

def parameter_shapes(model: ModelSpec, layer: int, block: LayerSpec) -> dict[str, tuple[int, ...]]:
    mla, p, d, heads = model.mla, f"blocks.{layer}.attn", model.d_model, model.n_heads
    query = heads * (mla.d_nope + mla.d_rope)
    if mla.q_lora_rank is None:
        shapes = {f"{p}.wq": (d, query)}
    else:
        shapes = {f"{p}.wq_a": (d, mla.q_lora_rank), f"{p}.q_a_norm.w": (mla.q_lora_rank,),
                  f"{p}.wq_b": (mla.q_lora_rank, query)}
    return shapes | {f"{p}.wkv_a": (d, mla.kv_lora_rank + mla.d_rope), f"{p}.kv_a_norm.w": (mla.kv_lora_rank,),
                     f"{p}.wkv_b": (mla.kv_lora_rank, heads * (mla.d_nope + mla.d_v)), f"{p}.wo": (heads * mla.d_v, d)}


def hook_widths(model: ModelSpec) -> dict[str, int]:
    mla, heads = model.mla, model.n_heads
    if mla is None:
        return {}
    widths = {"attn.hook_q": heads * (mla.d_nope + mla.d_rope), "attn.hook_kv_a": mla.kv_lora_rank + mla.d_rope,
              "attn.hook_latent": mla.kv_lora_rank, "attn.hook_rot_q": heads * mla.d_rope,
              "attn.hook_rot_k": mla.d_rope, "attn.hook_z": mla.d_v, "attn.hook_concat": heads * mla.d_v,
              "attn.hook_result": model.d_model}
    if mla.q_lora_rank is not None:
        widths["attn.hook_q_a"] = widths["attn.hook_q_a_normed"] = mla.q_lora_rank
    if mla.absorbed:
        widths |= {"attn.hook_q_absorbed": heads * mla.kv_lora_rank, "attn.hook_z_latent": mla.kv_lora_rank}
    else:
        widths |= {"attn.hook_k": heads * (mla.d_nope + mla.d_rope), "attn.hook_v": heads * mla.d_v}
    return widths


def hooks(model: ModelSpec, layer: int, block: LayerSpec, hook, norm_sites) -> list[HookSite]:
    mla, heads = model.mla, model.n_heads
    sites = []
    if mla.q_lora_rank is not None:
        sites += [HookSite(hook(layer, MODULE, "hook_q_a"))]
        sites += norm_sites(layer, f"{MODULE}.q_a_norm", out=hook(layer, MODULE, "hook_q_a_normed"))
    sites += [HookSite(hook(layer, MODULE, "hook_q")), HookSite(hook(layer, MODULE, "hook_kv_a"))]
    sites += norm_sites(layer, f"{MODULE}.kv_a_norm", out=hook(layer, MODULE, "hook_latent"))
    sites += [HookSite(hook(layer, MODULE, "hook_rot_q")), HookSite(hook(layer, MODULE, "hook_rot_k"))]
    if mla.absorbed:
        sites.append(HookSite(hook(layer, MODULE, "hook_q_absorbed")))
        per_head = ("hook_attn_scores", "hook_pattern", "hook_z_latent", "hook_z")
    else:
        sites += [HookSite(hook(layer, MODULE, "hook_k")), HookSite(hook(layer, MODULE, "hook_v"))]
        per_head = ("hook_attn_scores", "hook_pattern", "hook_z")
    sites += [HookSite(hook(layer, MODULE, name), heads) for name in per_head]
    return sites + [HookSite(hook(layer, MODULE, "hook_concat")), HookSite(hook(layer, MODULE, "hook_result"), heads)]


class LatentAttention(Attention):
    """One layer's latent attention; the mask, the stale-cache check and the residual sum are the attention's."""

    NAMES = ("hook_q_a", "hook_q_a_normed", "hook_q", "hook_kv_a", "hook_latent", "hook_rot_q", "hook_rot_k",
             "hook_k", "hook_v", "hook_q_absorbed", "hook_attn_scores", "hook_pattern", "hook_z_latent", "hook_z",
             "hook_concat", "hook_result")

    def __init__(self, model, layer: int, block: LayerSpec):
        self.model, self.layer, self.block, self.spec, self.mla = model, layer, block, model.spec, model.spec.mla
        self.prefix = f"blocks.{layer}.attn"
        self.hooks = {name: model.hook(layer, MODULE, name) for name in self.NAMES}
        self.cache_names = tuple(model.hook(layer, MODULE, name).text for name in (LATENT, "cache_rope_key"))

    def fresh_state(self) -> LatentCache:
        model, mla = self.model, self.mla
        empty = lambda width: model.xp.zeros((0, width), dtype=model.backend.dtype)  # noqa: E731
        return LatentCache(empty(mla.kv_lora_rank), empty(mla.d_rope), model.fingerprint, 0,
                           kv_b=self.model.param(f"{self.prefix}.wkv_b").values, d_nope=mla.d_nope, d_v=mla.d_v)

    def forward(self, h: Op, states: list, positions: list[int], padded_keys: list[bool] | None, out) -> OpStream:
        model, mla, hooks, p, xp = self.model, self.mla, self.hooks, self.prefix, self.model.xp
        q = yield from self._query(h)
        kv_a = model.linear(hooks["hook_kv_a"], h, f"{p}.wkv_a", None)
        yield kv_a
        raw = Operand(f"{kv_a.name}[latent]", kv_a.values[:, :mla.kv_lora_rank])
        latent = yield from model.norm(self.layer, "attn.kv_a_norm", raw, out=hooks["hook_latent"])
        t, heads, width = q.values.shape[0], self.spec.n_heads, mla.d_nope + mla.d_rope
        split = xp.reshape(q.values, (t, heads, width))
        rot_q = self._rope(hooks["hook_rot_q"], xp.reshape(split[..., mla.d_nope:], (t, -1)), positions, (q,))
        yield rot_q
        rope_key = kv_a.values[:, mla.kv_lora_rank:]
        rot_k = self._rope(hooks["hook_rot_k"], rope_key, positions, (kv_a,))
        yield rot_k
        stored = model.fault.cached_rope_key(xp, rot_k.values, rope_key)
        read = self._append(model.fault.layer_state(self.layer, states), latent.values, stored)
        states[self.layer] = read.cache
        visible = self._mask(read, t, padded_keys)
        q_nope = xp.reshape(split[..., :mla.d_nope], (t, -1))
        form = self._absorbed if mla.absorbed else self._naive
        heads_z = yield from form(q_nope, rot_q, read, visible)
        concat = op(hooks["hook_concat"], xp.concat([z.values for z in heads_z], axis=1), OpKind.CONCAT,
                    inputs=tuple(heads_z))
        yield concat
        wo, dv, results = model.param(f"{p}.wo"), mla.d_v, []
        for head, z in enumerate(heads_z):
            result = op(hooks["hook_result"], z.values @ wo.values[head * dv:(head + 1) * dv, :], OpKind.LINEAR,
                        head=head, inputs=(z, wo))
            yield result
            results.append(result)
        total = model.sum(out, results, f"{p}.bo")
        yield total
        return total

    @property
    def _scale(self) -> float:
        """The scores' factor: the model's (YaRN's mscale² over √d_head), else 1/√(d_nope + d_rope)."""
        scale = self.spec.attn_scale
        return (self.mla.d_nope + self.mla.d_rope) ** -0.5 if scale is None else scale

    def _query(self, h: Op) -> OpStream:
        model, hooks, p = self.model, self.hooks, self.prefix
        if self.mla.q_lora_rank is None:
            q = model.linear(hooks["hook_q"], h, f"{p}.wq", None)
            yield q
            return q
        q_a = model.linear(hooks["hook_q_a"], h, f"{p}.wq_a", None)
        yield q_a
        normed = yield from model.norm(self.layer, "attn.q_a_norm", q_a, out=hooks["hook_q_a_normed"])
        q = model.linear(hooks["hook_q"], normed, f"{p}.wq_b", None)
        yield q
        return q

    def _rope(self, hook, x: Array, positions: list[int], inputs: tuple) -> Op:
        spec, xp, mla = self.spec, self.model.xp, self.mla
        rotated = ops.rope(xp, x, xp.asarray(positions), mla.d_rope, spec.theta(self.layer),
                           spec.rope_divisors(self.layer), scale=spec.rope_scale)
        return op(hook, rotated, OpKind.ROPE, inputs=inputs)

    def _naive(self, q_nope: Array, rot_q: Op, read: Read, visible) -> OpStream:
        """Every cached latent row expanded per head (transformers' form), then softmax attention per head."""
        mla, hooks, xp = self.mla, self.hooks, self.model.xp
        latent, rope = self._cached(read)
        kv_b = self.model.param(f"{self.prefix}.wkv_b")
        keys, values = expand(xp, latent.values, rope.values, kv_b.values, mla.d_nope, mla.d_v)
        k = op(hooks["hook_k"], keys, OpKind.LINEAR, inputs=(latent, kv_b, rope), rows="keys")
        yield k
        v = op(hooks["hook_v"], values, OpKind.LINEAR, inputs=(latent, kv_b), rows="keys")
        yield v
        width, zs = mla.d_nope + mla.d_rope, []
        for head in range(self.spec.n_heads):
            query = xp.concat([q_nope[:, head * mla.d_nope:(head + 1) * mla.d_nope],
                               rot_q.values[:, head * mla.d_rope:(head + 1) * mla.d_rope]], axis=1)
            k_h = Operand(f"{k.name}[head {head}]", k.values[:, head * width:(head + 1) * width], rows=read.columns)
            scores = ops.attention_scores(xp, query, k_h.values, visible, self._scale)
            pattern = yield from self._pattern(head, scores, (rot_q, k_h), read)
            v_h = Operand(f"{v.name}[head {head}]", v.values[:, head * mla.d_v:(head + 1) * mla.d_v], rows=read.columns)
            z = op(hooks["hook_z"], pattern.values @ v_h.values, OpKind.MIX, head=head, inputs=(pattern, v_h))
            yield z
            zs.append(z)
        return zs

    def _absorbed(self, q_nope: Array, rot_q: Op, read: Read, visible) -> OpStream:
        """W_UK folded into the query, the scores over the latent rows and rope keys as cached, W_UV after the mix."""
        mla, hooks, xp, fault = self.mla, self.hooks, self.model.xp, self.model.fault
        latent, rope = self._cached(read)
        kv_b = self.model.param(f"{self.prefix}.wkv_b")
        per_head = xp.reshape(kv_b.values, (mla.kv_lora_rank, self.spec.n_heads, mla.d_nope + mla.d_v))
        absorbed = [q_nope[:, h * mla.d_nope:(h + 1) * mla.d_nope] @ fault.absorbed_uk(xp, per_head[:, h, :mla.d_nope])
                    for h in range(self.spec.n_heads)]
        q_abs = op(hooks["hook_q_absorbed"], xp.concat(absorbed, axis=1), OpKind.LINEAR, inputs=(rot_q, kv_b))
        yield q_abs
        r, zs = mla.kv_lora_rank, []
        for head in range(self.spec.n_heads):
            q_h = q_abs.values[:, head * r:(head + 1) * r]
            scores = (q_h @ xp.matrix_transpose(latent.values)
                      + rot_q.values[:, head * mla.d_rope:(head + 1) * mla.d_rope] @ xp.matrix_transpose(rope.values))
            scores = ops.masked(xp, scores * self._scale, visible)
            pattern = yield from self._pattern(head, scores, (q_abs, latent, rope), read)
            mixed = op(hooks["hook_z_latent"], pattern.values @ latent.values, OpKind.MIX, head=head,
                       inputs=(pattern, latent))
            yield mixed
            z = op(hooks["hook_z"], mixed.values @ per_head[:, head, mla.d_nope:], OpKind.LINEAR, head=head,
                   inputs=(mixed, kv_b))
            yield z
            zs.append(z)
        return zs

    def _cached(self, read: Read) -> tuple[Operand, Operand]:
        return (Operand(self.cache_names[0], read.k, rows=read.columns),
                Operand(self.cache_names[1], read.v, rows=read.columns))

    def _pattern(self, head: int, scores_h: Array, inputs: tuple, read: Read) -> OpStream:
        """The head's scores and their softmax (the softmax reads the scores operator: an intervention there counts)."""
        hooks, xp = self.hooks, self.model.xp
        scores = op(hooks["hook_attn_scores"], scores_h, OpKind.SCORES, head=head, inputs=inputs, cols=read.columns)
        yield scores
        pattern = op(hooks["hook_pattern"], ops.softmax(xp, scores.values), OpKind.SOFTMAX, head=head,
                     inputs=(scores,), cols=read.columns)
        yield pattern
        return pattern


Layer = LatentAttention
