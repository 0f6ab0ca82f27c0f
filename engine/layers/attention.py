"""The attention token mixer: full or sliding-window softmax attention over a K/V cache.

Query, key and value projections (grouped-query: fewer kv heads), optional per-head q/k RMSNorms
(Qwen3, Gemma 3), RoPE, the cache append, scores (soft-capped: Gemma 2; gpt-oss: a last `sink` column,
each head's learned logit, which takes probability in the pattern but has no value row), the pattern, each head's
mix and its contribution to the residual, summed with the output bias. Its state is the layer's
K/V cache (engine.caches); its fault points are the mask, the kv head and the cache appended to.

Gemma 4 adds, per layer (engine.spec.LayerSpec): a head width and kv heads of its own (the full layers'),
keys that are also the values (`k_eq_v`: no wv), an RMSNorm without gain over the values, and KV-shared
layers (`kv_source`): no k, v of their own; they attend over what their source layer read in the same pass,
which the source hands them (engine.layers.shared_kv).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import caches, ops
from engine.caches import Layout, Quantize, Read, ScaleAxis, empty_cache, ring_slot
from engine.hooks import HookSite
from engine.labels import WithSink
from engine.layers import shared_kv
from engine.layers.shared_kv import SharedKV
from engine.operators import Op, Operand, OpStream, op
from engine.spec import LayerSpec, ModelSpec, Positions
from engine.state import StaleCacheError
from engine.trace import OpKind

Array = Any
NAME, MODULE = "attention", "attn"
ADDED = "hook_attn_out"  # the hook of what the residual stream adds: its output
# Hugging Face's module of each projection (w·/b· without the letter) per family, GGUF's tensor (under blk.N),
# and the config's layer_types this kind stands for (whether the layer slides)
HF = {"llama": {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj"},
      "lfm2": {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.out_proj"},
      "gpt2": {"qkv": "attn.c_attn", "o": "attn.c_proj"},  # qkv: q, k, v side by side
      "phi3": {"qkv": "self_attn.qkv_proj", "o": "self_attn.o_proj"},
      "bert": {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
               "o": "attention.output.dense"}}
HF_RAW = {"llama": {"q_norm.w": "self_attn.q_norm.weight", "k_norm.w": "self_attn.k_norm.weight",
                    "sinks": "self_attn.sinks"},
          "lfm2": {"q_norm.w": "self_attn.q_layernorm.weight", "k_norm.w": "self_attn.k_layernorm.weight"}}  # as stored
HF_LAYER_TYPES = {"full_attention": False, "sliding_attention": True}
GGUF = {"attn.wq": "attn_q", "attn.wk": "attn_k", "attn.wv": "attn_v", "attn.wo": "attn_output",
        "attn.bq": "attn_q", "attn.bk": "attn_k", "attn.bv": "attn_v", "attn.bo": "attn_output", "attn.q_norm.w": "attn_q_norm",
        "attn.k_norm.w": "attn_k_norm", "attn.sinks": "attn_sinks",
        "attn.wgate": "attn_q"}  # Qwen3.5: attn_q holds each head's query, then gate
PER_HEAD = ("hook_attn_scores", "hook_pattern", "hook_z", "hook_result")  # what an intervention names a head of
ABLATES = "hook_z"  # what `blocks.L.attn head H` zeroes: head H's output, before the output projection
# how a dump lays out its per-head operators (engine.layout): one [query, key] matrix per head as [head, query, key];
# a row per position of every head's vectors as [pos, head, d_head]
HEAD_MATRICES = ("hook_attn_scores", "hook_pattern")
HEAD_AXIS = ("hook_q", "hook_k", "hook_v", "hook_z", "hook_rot_q", "hook_rot_k")
MASKED = ("hook_attn_scores",)  # where a masked cell is −∞ (a dump holds its dtype's lowest there)
PATTERN_HOOKS = ((MODULE, "hook_pattern"),)  # each head's attention pattern (a view's glance)
HEAD_RESULT = "hook_result"  # each head's contribution to the residual (engine.analysis's attribution)


def output_bias(layer: int) -> str:
    """The weight added once to the heads' results (its parameter bo, where the checkpoint has one)."""
    return f"blocks.{layer}.{MODULE}.bo"

DUMP_LAYOUTS = caches.DUMP_LAYOUTS  # its state's K/V rows: [kv_head, position, d_head] in a dump


def hf_tensor(leaf: str, tensors) -> Array:
    """Its parameter `leaf` from a Hugging Face block (`tensors`: an engine.loading.hf.BlockTensors). A gated
    attention's (Qwen3.5's) q_proj holds each head's query rows, then its gate's; a fused `qkv` module (GPT-2's
    c_attn, Phi-3's qkv_proj) holds q | k | v side by side."""
    spec, table = tensors.spec, tensors.table(HF)
    stored = tensors.table(HF_RAW).get(leaf)
    if stored is not None:
        return tensors.get(stored)
    if spec.attn_gate and leaf in ("wq", "wgate"):
        rows = tensors.get(f"{table['q']}.weight").reshape(spec.n_heads, 2, spec.d_head, -1)
        return rows[:, int(leaf == "wgate")].reshape(spec.d_attn, -1).T
    if "qkv" in table and leaf[1:] in ("q", "k", "v"):
        widths, part = (spec.d_attn, spec.d_kv, spec.d_kv), "qkv".index(leaf[1])
        start = sum(widths[:part])
        return tensors.projection(leaf, table["qkv"])[..., start:start + widths[part]]
    return tensors.projection(leaf, table[leaf[1:]])


def gguf_tensor(leaf: str, tensors) -> Array:
    """Its parameter `leaf` from a GGUF block (`tensors`: an engine.loading.gguf_model.GGUFBlock): a llama file's
    q/k rows unpermuted (llama.cpp's converter permutes them for its interleaved RoPE, as transformers undoes when it
    loads one); a gated attention's attn_q, q_proj, each head's query rows then its gate's."""
    spec = tensors.spec
    if tensors.permuted and leaf in ("wq", "wk"):
        w, heads = tensors.stored(leaf), spec.n_heads if leaf == "wq" else spec.n_kv_heads
        if w.ndim == 2 and w.shape[0] % (2 * heads) == 0:
            w = unpermute(w, heads)  # (a shape it cannot be is refused by the shape check, as it is)
        return w.T
    if spec.attn_gate and leaf in ("wq", "wgate"):
        w = tensors.stored(leaf)
        if w.ndim == 2:
            w = gated_rows(w, spec.n_heads, leaf)
        return w if w.ndim == 1 else w.T
    return tensors.weight(leaf)


def gguf_locate(leaf: str, index: tuple[int, ...], tensors) -> tuple[str, int, int] | None:
    """The tensor, row and column of a llama file's q/k weight at `index` ([in, out]), its rows permuted, or of a
    gated attention's query or gate weight, its rows one half of each head's in attn_q (None: the transposed index of
    its tensor, as any other)."""
    spec = tensors.spec
    if tensors.permuted and leaf in ("wq", "wk"):
        heads = spec.n_heads if leaf == "wq" else spec.n_kv_heads
        rows = unpermute(np.arange(tensors.shape(leaf)[0]), heads)
    elif spec.attn_gate and leaf in ("wq", "wgate"):
        rows = gated_rows(np.arange(tensors.shape(leaf)[0]), spec.n_heads, leaf)
    else:
        return None
    row, col = index
    return tensors.name(leaf), int(rows[col]), row


def gated_rows(w: np.ndarray, n_head: int, leaf: str) -> np.ndarray:
    """A gated attention's query rows (`leaf` wq) or gate rows (wgate) of attn_q's, each head's query then gate."""
    return w.reshape(n_head, 2, -1, *w.shape[1:])[:, int(leaf == "wgate")].reshape(-1, *w.shape[1:])


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's reshape(n_head, 2, rows/n_head/2, in).swapaxes(1, 2) of q/k rows ([out, in])."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# What each of its operators computes, en and zh (why, how, pitfall, check): the views file it under the
# hook name's last part (tinyllm_tui.debugger.frame.hook_key) beside the stack's own texts.
EXPLANATIONS: dict[str, dict[str, tuple[str, str, str, str]]] = {
    ADDED: {
        "en": ("Mix the heads into the residual stream's features.", "Σ heads' results (+ bo) = concat · Wo (+ bo).",
               "Forgetting Wo only works when Wo = I, as in X01.", "Shape: new tokens × d_model."),
        "zh": ("把各头结果映射回残差特征。", "各头结果之和（+bo）= concat·Wo（+bo）。", "省略Wo只在Wo=I时成立。",
               "形状：新Token数×d_model。"),
    },
    "hook_q": {
        "en": ("Q says what the current position is looking for.", "Q = LN(X) · Wq, split into heads by columns.",
               "Q is never cached: only the new positions need queries.", "Columns h·dh…(h+1)·dh belong to head h."),
        "zh": ("Query表示当前位置要匹配什么。", "Q = LN(X)·Wq，按列分给各头。",
               "Q不需要缓存，只有新位置需要查询。", "第h个头使用第h段列。"),
    },
    "hook_k": {
        "en": ("K is what each position offers to be matched against.",
               "K = LN(X) · Wk; these rows are appended to this layer's cache.",
               "Appending the prefix again (duplicate append) makes old keys count twice.",
               "Cache length after this op = past + new tokens."),
        "zh": ("Key提供被匹配的方向。", "K = LN(X)·Wk，新行追加进本层缓存。",
               "重复追加前缀会让旧Key被计算两次。", "此后缓存长度=历史长度+新Token数。"),
    },
    "hook_v": {
        "en": ("V is the content that attention mixes.", "V = LN(X) · Wv; appended to the cache with K.",
               "Each layer has its own K/V: reusing another layer's cache is wrong.",
               "Cached V rows equal the full recompute's rows."),
        "zh": ("Value是注意力要混合的内容。", "V = LN(X)·Wv，与K一起追加进缓存。",
               "每层缓存各自独立，不能复用别层。", "缓存的V行与全量重算一致。"),
    },
    "hook_attn_scores": {
        "en": ("How well each query matches each visible key.",
               "q·kᵀ / √dh per head; keys it may not read are −∞ (later positions in a decoder, PAD keys).",
               "With cached keys the mask is key ≤ past + query index, not tril(ones(C, P+C)).",
               "Decoder row i has −∞ exactly at keys > i; every row has −∞ at PAD keys."),
        "zh": ("每个查询与每个可见键的匹配程度。", "每头q·kᵀ/√dh；不可读的键设为−∞（解码器的未来位置、PAD键）。",
               "有缓存时掩码是key ≤ past+query_index，不是tril(ones(C,P+C))。", "解码器第i行只在未来位置为−∞；PAD键在每行都是−∞。"),
    },
    "hook_attn_scores_uncapped": {
        "en": ("Gemma 2's scores before their soft cap: how well each query matches each visible key.",
               "q·kᵀ · query_pre_attn_scalar^-½ per head; −∞ at keys it may not read, including keys at or "
               "beyond the sliding window (j ≤ i − window) on sliding layers.",
               "Gemma scales by query_pre_attn_scalar, not by the head width; the two differ in some sizes.",
               "Sliding-layer row i is −∞ at keys ≤ i − window, full layers only at keys > i."),
        "zh": ("Gemma 2软上限之前的分数：每个查询与每个可见键的匹配程度。",
               "每头q·kᵀ·query_pre_attn_scalar^-½；不可读的键为−∞，滑动窗口层上还包括窗口外的键（j ≤ i − window）。",
               "Gemma按query_pre_attn_scalar缩放，而不是按头宽；有些尺寸两者不同。",
               "滑动层第i行在键≤i−window处为−∞，全局层只在键>i处为−∞。"),
    },
    "hook_attn_scores(softcap)": {
        "en": ("Keep every score within (−cap, cap) so that no key takes all the attention.",
               "cap · tanh(score / cap), applied before the mask; masked keys stay −∞.",
               "Capping after the mask, or in the wrong order with the scaling, changes every pattern.",
               "|score| < cap everywhere; scores much smaller than the cap barely change."),
        "zh": ("把每个分数限制在(−cap, cap)内，避免某个键独占注意力。", "cap·tanh(分数/cap)，在掩码之前；被掩码的键仍为−∞。",
               "在掩码之后或与缩放顺序颠倒地做上限，会改变所有注意力分布。", "处处|分数|<cap；远小于cap的分数几乎不变。"),
    },
    "hook_q_normed": {
        "en": ("Qwen3 and Gemma 3 normalize each head's query before RoPE, keeping scores in range.",
               "An RMSNorm over each head's d_head features, times its gain attn.q_norm.w (shared by the heads).",
               "Normalizing the whole row of all heads at once gives other numbers.",
               "Each head's slice has root mean square ≈ 1 before the gain."),
        "zh": ("Qwen3和Gemma 3在RoPE前对每个头的查询做归一化，让分数保持在合理范围。",
               "对每个头的d_head个特征做RMSNorm，再乘以各头共享的增益attn.q_norm.w。",
               "把所有头的一整行一起归一化会得到不同结果。", "增益前每个头切片的均方根约为1。"),
    },
    "hook_k_normed": {
        "en": ("The same per-head RMSNorm for the keys, before RoPE and before the cache.",
               "An RMSNorm over each key head's d_head features, times attn.k_norm.w.",
               "The cache holds normalized, rotated keys: a decode step must not normalize them again.",
               "Each kv head's slice has root mean square ≈ 1 before the gain."),
        "zh": ("键也做同样的逐头RMSNorm，在RoPE和写入缓存之前。", "对每个键头的d_head个特征做RMSNorm，再乘以attn.k_norm.w。",
               "缓存里存的是归一化并旋转后的键：解码时不能再归一化一次。", "增益前每个kv头切片的均方根约为1。"),
    },
    "hook_pattern": {
        "en": ("Turn scores into weights that sum to 1 per row.", "Row-wise softmax; −∞ becomes exactly 0.",
               "Softmax over all keys and then zeroing the future does not renormalise.",
               "Each row sums to 1; masked entries are 0.000000."),
        "zh": ("把分数变成每行和为1的权重。", "逐行softmax，−∞变为0。",
               "先对全部位置softmax再清零不会重新归一化。", "每行和为1，掩掉的位置为0。"),
    },
    "hook_z": {
        "en": ("Each position's mix of the visible values.", "z = pattern · V for this head.",
               "The output is a weighted sum, not the row with the largest weight.",
               "z equals Σ_j pattern[i,j] · V[j]."),
        "zh": ("每个位置对可见Value的加权混合。", "z = 权重 × V（本头）。",
               "输出是加权和，不是直接挑权重最大的一行。", "z等于Σ权重×V。"),
    },
    "hook_concat": {
        "en": ("Put the heads side by side again.", "Head 0's columns first, then head 1's, …",
               "Concatenation does not sum the heads.", "Width = heads × head width."),
        "zh": ("把各头输出拼回一起。", "头0的列在前，头1在后。", "拼接不是求和。", "宽度=头数×每头宽度。"),
    },
    "hook_gate": {
        "en": ("Qwen3.5's output gate: how much of each head's output feature passes to W_o.",
               "sigmoid(LN(X) · W_gate); W_gate is the second half of each head's rows of the doubled q_proj.",
               "q_proj's rows alternate per head (query, gate): taking its first half as the query is wrong.",
               "Every value lies in (0, 1)."),
        "zh": ("Qwen3.5的输出门：每个头的输出特征有多少传给W_o。", "sigmoid(LN(X)·W_gate)；W_gate是加倍的q_proj中每个头行的后一半。",
               "q_proj的行按头交替（查询、门）：直接取前一半作查询是错的。", "所有值在(0,1)内。"),
    },
    "hook_gated": {
        "en": ("The heads' outputs after their gate, what W_o reads.", "concat ⊙ sigmoid gate, feature by feature.",
               "The gate multiplies before o_proj, not after it.", "Zero wherever the gate is near 0."),
        "zh": ("各头输出经过门控之后，即W_o读取的内容。", "拼接结果逐特征乘以sigmoid门。", "门在o_proj之前相乘，而不是之后。", "门接近0处为0。"),
    },
    "hook_result": {
        "en": ("What this head alone adds to the residual stream.", "z · Wo's rows for this head.",
               "A head's result is not its z: Wo maps it into the residual's features.",
               "The heads' results sum to attn_out (less bo)."),
        "zh": ("本头单独加到残差流的量。", "z × Wo中本头的行。", "头的结果不是z：Wo把它映射到残差特征。",
               "各头结果之和等于attn_out（减去bo）。"),
    },
}


class FaultPoints:
    """Where an injected bug (engine.faults) may change what attention and its K/V cache do; these are the
    correct answers."""

    def mask(self, xp, visible: Array | None, n_new: int, n_keys: int) -> Array | None:
        """Which of `n_keys` keys each of the `n_new` queries may read (None: all)."""
        return visible

    def kv_head(self, head: int, group: int, kv_heads: int) -> int:
        """The kv head query head `head` reads (grouped-query attention: `group` query heads each)."""
        return head // group

    def stored_k(self, xp, k: Array, head_width: int) -> Array:
        """The K rows a cache stores for a chunk's (T, kv_heads·dh) keys."""
        return k

    def ring_slot(self, index: int, sinks: int, size: int) -> int:
        """The ring-buffer slot the token at sequence `index` is written to (`size` slots past the sinks)."""
        return ring_slot(index, sinks, size)

    def table_entry(self, physical: int, table: list[int]) -> int:
        """The block-table entry of a new logical block stored in physical block `physical`."""
        return physical

    def scale_axis(self, axis: ScaleAxis) -> ScaleAxis:
        """What shares one quantization scale."""
        return axis

    def shared_read(self, read: Read, n_new: int) -> Read:
        """What a KV-shared layer attends over: the read its source layer handed it in this pass (whose last
        `n_new` rows are the chunk's)."""
        return read


def explanation_key(operator) -> str | None:
    """Gemma 2's capped scores: filed apart from the scores."""
    hook = operator.hook
    return "hook_attn_scores(softcap)" if hook.name == "hook_attn_scores" and operator.kind == OpKind.SOFTCAP else None


# The bugs that change one of its fault points (engine.faults makes each a Fault named after its class, ChunkMask:
# chunk-mask; `unseen`: why it would change no number of a scenario, None where it shows).
class ChunkMask:
    def mask(self, xp, visible, n_new, n_keys):
        return None if visible is None else xp.tril(xp.ones((n_new, n_keys), dtype=xp.bool))


class GqaModulo:
    def kv_head(self, head, group, kv_heads):
        return head % kv_heads

    def unseen(self, scenario):
        model = scenario.model
        if model.n_kv_heads < 2 or model.n_kv_heads == model.n_heads:
            return ("fault.gqa", {})
        return None


class TransposedK:
    def stored_k(self, xp, k, head_width):
        t = k.shape[0]
        heads = xp.permute_dims(xp.reshape(k, (t, -1, head_width)), (1, 2, 0))  # (H, dh, T)
        return xp.reshape(xp.permute_dims(xp.reshape(heads, (-1, t, head_width)), (1, 0, 2)), (t, -1))

    def unseen(self, scenario):
        if all(len(r.tokens) < 2 for r in scenario.requests):
            return ("fault.one_token", {})
        if not any(block.mixer == NAME for block in scenario.model.blocks):
            return ("fault.no_k_rows", {})
        return None


class RingWrongSlot:
    def ring_slot(self, index, sinks, size):
        wrapped = index >= sinks + size
        return super().ring_slot(index + wrapped, sinks, size)

    def unseen(self, scenario):
        cache, model, requests = scenario.cache, scenario.model, scenario.requests
        windows = [w for w in map(model.window, range(model.n_layers)) if w is not None]
        lengths = [len(r.tokens) for r in requests]
        padding = max(lengths) - min(lengths) if scenario.batch else 0  # a batch's longest left padding
        longest = max(len(r.tokens) + r.max_new_tokens - 1 for r in requests) + padding
        if cache.layout is not Layout.RING or not windows or longest <= cache.sinks + min(windows):
            return ("fault.no_wrap", {})
        return None


class BlockTableWrong:
    def table_entry(self, physical, table):
        return table[-1] if table else physical

    def unseen(self, scenario):
        longest = max(len(r.tokens) + r.max_new_tokens - 1 for r in scenario.requests)
        cache = scenario.cache
        if cache.layout is not Layout.PAGED or cache.quantize is not Quantize.NONE or longest <= cache.block_size:
            return ("fault.one_block", {})
        return None


class ScalePerTensor:
    def scale_axis(self, axis):
        return ScaleAxis.PER_TENSOR

    def unseen(self, scenario):
        return ("fault.not_quantized", {}) if scenario.cache.quantize is Quantize.NONE else None


# the words of its causes (engine.causes: a code and facts), per language, and shared_kv's; the English is the CLI's
CAUSES = {"en": {"fault.gqa": "the model needs grouped-query attention with at least two kv heads",
                 "fault.one_token": "every prompt is one token, whose K reads the same either way",
                 "fault.no_k_rows": "no layer caches K rows (latent attention caches latent rows and rope keys, not "
                                    "per-head K)",
                 "fault.no_wrap": "no ring buffer wraps (cache: {{layout: ring}} and a sequence longer than its window)",
                 "fault.one_block": "no request fills a second block of a paged cache (cache: {{layout: paged}})",
                 "fault.not_quantized": "the cache is not quantized (cache: {{quantize: int8}})",
                 **shared_kv.CAUSES["en"]},
          "zh": {"fault.gqa": "模型需要至少两个 kv 头的分组查询注意力",
                 "fault.one_token": "每个提示都只有一个Token，它的 K 无论怎样存放读出来都一样",
                 "fault.no_k_rows": "没有层缓存 K 行（潜在注意力缓存的是潜在行和 rope 键，而不是每个头的 K）",
                 "fault.no_wrap": "没有环形缓冲区发生回绕（cache: {{layout: ring}}，且序列长于其窗口）",
                 "fault.one_block": "没有请求填满分页缓存的第二个块（cache: {{layout: paged}}）",
                 "fault.not_quantized": "缓存没有量化（cache: {{quantize: int8}}）",
                 **shared_kv.CAUSES["zh"]}}
BUGS = (ChunkMask, GqaModulo, TransposedK, RingWrongSlot, BlockTableWrong, ScalePerTensor, *shared_kv.BUGS)


def head_dims(model: ModelSpec, block: LayerSpec) -> tuple[int, int]:
    """A layer's head width and kv heads: its own (Gemma 4's full layers), else the model's."""
    return block.d_head or model.d_head, block.kv_heads or model.n_kv_heads


def projections(block: LayerSpec) -> str:
    """The projections a layer has: a KV-shared layer only q, keys that are the values no v."""
    return "q" if block.kv_source is not None else "qk" if block.k_eq_v else "qkv"


def parameter_shapes(model: ModelSpec, layer: int, block: LayerSpec) -> dict[str, tuple[int, ...]]:
    prefix, d = f"blocks.{layer}.attn", model.d_model
    dh, kv_heads = head_dims(model, block)
    a, names = model.n_heads * dh, projections(block)
    widths = {n: a if n == "q" else kv_heads * dh for n in names}
    shapes = {f"{prefix}.w{n}": (d, width) for n, width in widths.items()}
    if model.qk_norm:
        shapes.update({f"{prefix}.{n}_norm.w": (dh,) for n in "qk" if n in names})
    if model.attn_gate:
        shapes[f"{prefix}.wgate"] = (d, a)
    shapes[f"{prefix}.wo"] = (a, d)
    shapes.update({f"{prefix}.b{n}": (width,) for n, width in widths.items() if model.has_bias(n)})
    if model.has_bias("o"):
        shapes[f"{prefix}.bo"] = (d,)
    if model.attn_sinks:
        shapes[f"{prefix}.sinks"] = (model.n_heads,)
    return shapes


def hook_widths(model: ModelSpec) -> dict[str, int]:
    """The columns of this kind's hooks (those the spec alone fixes; scores and patterns have one per key;
    a width that differs between layers, as Gemma 4's head widths, is left out)."""
    found: dict[str, set[int]] = {}
    for block in dict.fromkeys(b for b in model.blocks if b.mixer == NAME):
        dh, kv_heads = head_dims(model, block)
        a, kv = model.n_heads * dh, kv_heads * dh
        widths = {"attn.hook_q": a, "attn.hook_rot_q": a, "attn.hook_k": kv, "attn.hook_rot_k": kv, "attn.hook_v": kv,
                  "attn.hook_z": dh, "attn.hook_result": model.d_model, "attn.hook_concat": a, "attn.hook_gate": a,
                  "attn.hook_gated": a}
        for name, width in widths.items():
            found.setdefault(name, set()).add(width)
    return {name: widths.pop() for name, widths in found.items() if len(widths) == 1}


def hooks(model: ModelSpec, layer: int, block: LayerSpec, hook, norm_sites) -> list[HookSite]:
    """Every hook this kind yields in `layer`, in order (`hook` interns, `norm_sites` lists a norm's hooks)."""
    heads = model.n_heads
    shared = block.kv_source is not None  # a KV-shared layer computes only its queries: it reads k and v
    sites = [HookSite(hook(layer, MODULE, f"hook_{n}")) for n in ("q" if shared else "qkv")]
    turned = "q" if shared else "qk"  # normalized (q/k norms) and rotated
    sites += [HookSite(hook(layer, MODULE, "hook_gate"))] if model.attn_gate else []
    if model.qk_norm:
        for n in turned:
            sites += norm_sites(layer, f"{MODULE}.{n}_norm", out=hook(layer, MODULE, f"hook_{n}_normed"))
    if model.v_norm and not shared:
        sites += [HookSite(hook(layer, f"{MODULE}.v_norm", name)) for name in ("hook_scale", "hook_normalized")]
    if model.positions == Positions.ROPE:
        sites += [HookSite(hook(layer, MODULE, f"hook_rot_{n}")) for n in turned]
    per_head = (["hook_attn_scores_uncapped"] if model.attn_softcap else []) + ["hook_attn_scores", "hook_pattern",
                                                                                "hook_z"]
    sites += [HookSite(hook(layer, MODULE, name), heads) for name in per_head]
    sites += [HookSite(hook(layer, MODULE, "hook_concat"))]
    sites += [HookSite(hook(layer, MODULE, "hook_gated"))] if model.attn_gate else []
    sites += [HookSite(hook(layer, MODULE, "hook_result"), heads)]
    return sites


class Attention:
    """One layer's attention, made once per model: its parameter names and hooks are resolved here."""

    def __init__(self, model, layer: int, block: LayerSpec):
        self.model, self.layer, self.block, self.spec = model, layer, block, model.spec
        self.prefix = f"blocks.{layer}.attn"
        hook = model.hook
        self.hooks = {name: hook(layer, MODULE, name) for name in (
            "hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_q_normed", "hook_k_normed",
            "hook_attn_scores_uncapped", "hook_attn_scores", "hook_pattern", "hook_z", "hook_concat", "hook_result",
            "hook_gate", "hook_gated")}
        self.cache_names = tuple(hook(layer, MODULE, name).text for name in ("cache_k", "cache_v"))  # its state's
        if block.kv_source is not None:  # what it attends over is its source's
            self.cache_names = tuple(hook(block.kv_source, MODULE, name).text for name in ("cache_k", "cache_v"))
        self.dh, self.kv_heads = head_dims(self.spec, block)
        self.readers = tuple(i for i, other in enumerate(self.spec.blocks) if other.kv_source == layer)

    def state_head(self, head: int) -> int:
        """The kv head query head `head` reads (grouped-query attention: h // (n_heads / kv_heads), unless an
        injected bug reads another)."""
        return self.model.fault.kv_head(head, self.spec.n_heads // self.kv_heads, self.kv_heads)

    def fresh_state(self):
        model, source = self.model, self.block.kv_source
        if source is not None:
            return SharedKV(source, model.fingerprint)
        return empty_cache(model.cache, model.xp, self.kv_heads * self.dh, self.dh, model.backend.dtype,
                           model.fingerprint, self.block.window)

    def forward(self, h: Op, states: list, positions: list[int], padded_keys: list[bool] | None, out) -> OpStream:
        """`out`: the hook of the summed output (what the residual adds, unless a post-norm follows)."""
        model, spec, layer, hooks, p = self.model, self.spec, self.layer, self.hooks, self.prefix
        own = self.block.kv_source is None  # a KV-shared layer (Gemma 4) computes only its queries
        q = model.linear(hooks["hook_q"], h, f"{p}.wq", f"{p}.bq")
        yield q
        if own:
            k = model.linear(hooks["hook_k"], h, f"{p}.wk", f"{p}.bk")
            yield k
            v = self._values(h, k)
            yield v
        gate = None
        if spec.attn_gate:  # Qwen3.5: the other half of its q_proj, a sigmoid gate on every head's output
            wgate = model.param(f"{p}.wgate")
            gate = op(hooks["hook_gate"], ops.sigmoid(model.xp, h.values @ wgate.values), OpKind.ACTIVATION,
                      inputs=(h, wgate))
            yield gate
        if spec.qk_norm:  # Qwen3, Gemma 3: each head's q and k through an RMSNorm of their own
            q = yield from model.norm(layer, "attn.q_norm", q, heads=spec.n_heads, out=hooks["hook_q_normed"])
            if own:
                k = yield from model.norm(layer, "attn.k_norm", k, heads=self.kv_heads, out=hooks["hook_k_normed"])
        if own and spec.v_norm:  # Gemma 4: each value head through an RMSNorm without gain
            v = yield from model.norm(layer, "attn.v_norm", v, heads=self.kv_heads, gain=False)
        if spec.positions == Positions.ROPE:
            q = self._rope(hooks["hook_rot_q"], q, positions)
            yield q
            if own:
                k = self._rope(hooks["hook_rot_k"], k, positions)
                yield k
        if own:
            read = self._append(model.fault.layer_state(layer, states), k.values, v.values)
            states[layer] = read.cache
            for reader in self.readers:  # the KV-shared layers that attend over this read
                states[reader] = states[reader].reading(read)
        else:
            read = model.fault.shared_read(states[layer].read, q.values.shape[0])
        keys = Operand(self.cache_names[0], read.k, rows=read.columns)
        values = Operand(self.cache_names[1], read.v, rows=read.columns)
        visible = self._mask(read, q.values.shape[0], padded_keys)
        every = self._heads(q.values, keys.values, values.values, visible)
        heads = []
        for head in range(spec.n_heads):
            z = yield from self._head(head, q, keys, values, every)
            heads.append(z)
        concat = op(hooks["hook_concat"], model.xp.concat([z.values for z in heads], axis=1), OpKind.CONCAT,
                    inputs=tuple(heads))
        yield concat
        if gate is not None:
            concat = op(hooks["hook_gated"], concat.values * gate.values, OpKind.ACTIVATION, inputs=(concat, gate))
            yield concat
        wo, dh, results = model.param(f"{p}.wo"), self.dh, []
        for head in range(spec.n_heads):  # each head's contribution to the residual, as TransformerLens's hook_result
            z = concat.values[:, head * dh:(head + 1) * dh] if gate is not None else heads[head].values
            result = op(hooks["hook_result"], z @ wo.values[head * dh:(head + 1) * dh, :], OpKind.LINEAR,
                        head=head, inputs=(heads[head] if gate is None else concat, wo))
            yield result
            results.append(result)
        total = model.sum(out, results, f"{p}.bo")
        yield total
        return total

    def _values(self, h: Op, k: Op) -> Op:
        if self.block.k_eq_v:  # Gemma 4's full layers: the keys' projection is the values' too
            return op(self.hooks["hook_v"], k.values, OpKind.LINEAR, inputs=(k,))
        return self.model.linear(self.hooks["hook_v"], h, f"{self.prefix}.wv", f"{self.prefix}.bv")

    def _mask(self, read: Read, n_new: int, padded_keys: list[bool] | None):
        """Which keys each new query may read: causal order (within a sliding window, sinks
        always) and key-side padding, by each key's sequence index; None = all."""
        xp, model = self.model.xp, self.model
        visible = read.visible(xp, n_new, self.block.window, model.cache.sinks) if self.spec.causal else None
        visible = model.fault.mask(xp, visible, n_new, len(read.index))
        flags = [padded_keys[i] if i < len(padded_keys) else False for i in read.index] if padded_keys else []
        if not any(flags):  # past the padding flags: rows a bug added
            return visible
        real = xp.asarray([not pad for pad in flags])[None, :]
        return real if visible is None else visible & real

    def _rope(self, hook, x: Op, positions: list[int]) -> Op:
        spec, xp = self.spec, self.model.xp
        rotated = ops.rope(xp, x.values, xp.asarray(positions), self.dh, spec.theta(self.layer),
                           spec.rope_divisors(self.layer), spec.rope_dims, spec.rope_scale)
        return op(hook, rotated, OpKind.ROPE, inputs=(x,))

    def _heads(self, q: Array, k: Array, v: Array, visible) -> tuple[Array | None, Array, Array, Array]:
        """Every head's scores before a soft cap (None without one), scores, pattern and output at once,
        (H, T, S) ×3 and (H, T, dh): one batched call per step instead of one per head (the heads are
        yielded one by one)."""
        xp, spec = self.model.xp, self.spec
        dh, group = self.dh, spec.n_heads // self.kv_heads

        def split(x: Array) -> Array:  # (T, H·dh) -> (H, T, dh)
            return xp.permute_dims(xp.reshape(x, (x.shape[0], -1, dh)), (1, 0, 2))

        k, v = split(k), split(v)
        if group > 1:  # grouped-query attention: query head h reads kv head h // group
            kv = xp.asarray([self.state_head(head) for head in range(spec.n_heads)])
            k, v = xp.take(k, kv, axis=0), xp.take(v, kv, axis=0)
        q = split(q)
        if spec.attn_softcap:  # the cap comes before the mask
            raw = ops.attention_scores(xp, q, k, None, spec.attn_scale)
            uncapped = ops.masked(xp, raw, visible)
            scores = ops.masked(xp, ops.softcap(xp, raw, spec.attn_softcap), visible)
        else:
            uncapped, scores = None, ops.attention_scores(xp, q, k, visible, spec.attn_scale)
        if spec.attn_sinks:  # gpt-oss: each head's sink logit is one more column, which no value row follows
            sinks = self.model.param(f"{self.prefix}.sinks").values
            scores = xp.concat([scores, xp.broadcast_to(sinks[:, None, None], (*scores.shape[:2], 1))], axis=-1)
        pattern = ops.softmax(xp, scores)
        return uncapped, scores, pattern, self._mix(pattern, v)

    def _mix(self, pattern: Array, v: Array) -> Array:
        """pattern · V; a sink's column takes probability but mixes no value."""
        return (pattern[..., :-1] if self.spec.attn_sinks else pattern) @ v

    def _head(self, head, q: Operand, keys: Operand, values: Operand, every) -> OpStream:
        """Query head `head` reads kv head head // group (grouped-query attention; group 1: its own)."""
        xp, spec, hooks = self.model.xp, self.spec, self.hooks
        dh, group = self.dh, spec.n_heads // self.kv_heads
        part, kv = slice(head * dh, (head + 1) * dh), self.state_head(head)
        kv_part, kv_name = slice(kv * dh, (kv + 1) * dh), f"head {kv}" if group == 1 else f"kv head {kv}"
        q_h = Operand(f"{q.name}[head {head}]", q.values[:, part])
        k_h = Operand(f"{keys.name}[{kv_name}]", keys.values[:, kv_part], rows=keys.rows)
        v_h = Operand(f"{values.name}[{kv_name}]", values.values[:, kv_part], rows=keys.rows)
        uncapped, scores_h, batch_pattern, z_h = (None if x is None else x[head, ...] for x in every)
        inputs = (q_h, k_h, self.model.param(f"{self.prefix}.sinks")) if spec.attn_sinks else (q_h, k_h)
        cols = WithSink(keys.rows) if spec.attn_sinks else keys.rows
        if uncapped is not None:  # Gemma 2: the scores before their soft cap, then cap·tanh(s / cap)
            batch_uncapped = uncapped
            uncapped = op(hooks["hook_attn_scores_uncapped"], uncapped, OpKind.SCORES, head=head, inputs=inputs,
                          cols=keys.rows)
            yield uncapped
            inputs = (uncapped,)
            if uncapped.values is not batch_uncapped:  # replaced: cap it again, keeping −∞ where masked
                scores_h = ops.masked(xp, ops.softcap(xp, uncapped.values, spec.attn_softcap),
                                      uncapped.values > -xp.inf)
        scores = op(hooks["hook_attn_scores"], scores_h, OpKind.SCORES if uncapped is None else OpKind.SOFTCAP,
                    head=head, inputs=inputs, cols=cols)
        yield scores
        # The batch computed every head at once; a value replaced since is followed from there on.
        pattern_h = batch_pattern if scores.values is scores_h else ops.softmax(xp, scores.values)
        pattern = op(hooks["hook_pattern"], pattern_h, OpKind.SOFTMAX, head=head, inputs=(scores,), cols=cols)
        yield pattern
        z_h = z_h if pattern.values is batch_pattern else self._mix(pattern.values, v_h.values)
        z = op(hooks["hook_z"], z_h, OpKind.MIX, head=head, inputs=(pattern, v_h))
        yield z
        return z

    def _append(self, cache, k: Array, v: Array) -> Read:
        model = self.model
        if cache.fingerprint != model.fingerprint and not model.allow_stale:
            raise StaleCacheError(
                f"the cache was computed with weights {cache.fingerprint}, the model now has {model.fingerprint}"
            )
        return cache.extend(model.xp, k, v, model.fault)


Layer = Attention
