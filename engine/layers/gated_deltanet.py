"""The Gated DeltaNet token mixer: Qwen3.5's (and Qwen3-Next's) `linear_attention` layers.

    qkv = h·W_qkv  z = h·W_z  b = h·W_b  a = h·W_a
    conv = SiLU(causal depthwise conv of qkv, kernel K)  ->  q | k | v  (q, k L2-normalised per key head)
    β = sigmoid(b)    g = −exp(A_log) · softplus(a + dt_bias)                    (one per value head)
    per value head, the state S (d_k × d_v):  S ← e^g·S;  δ = β·(v − Sᵀk);  S ← S + k·δᵀ;  o = Sᵀq / √d_k
    out = (RMSNorm(o) · w · SiLU(z)) · W_out                                       (the norm per value head)

Each key head serves v_heads / k_heads consecutive value heads. Two computations of the same function: a
pass of several tokens (a prefill, each chunk of a chunked prefill, a full recompute) runs the CHUNKED form
(the WY/UT transform over `chunk` tokens at a time, the state carried from chunk to chunk, as the Gated
DeltaNet paper and transformers' torch_chunk_gated_delta_rule), a cached one-token decode the RECURRENT form
(one token at a time, as torch_recurrent_gated_delta_rule); δ, each head's read and its state are the same
numbers either way, which is what a full-vs-cached diff checks. Its state (`DeltaState`) is the conv window
(the last K−1 inputs) and every value head's d_k × d_v matrix: its size does not grow with the sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from engine import ops
from engine.arrays import namespace, to_host
from engine.hooks import HookSite
from engine.layers import causal_conv
from engine.operators import Op, OpStream, op
from engine.spec import KindOptions, LayerSpec, ModelSpec
from engine.state import DumpLayout, Size, StateView, WholeState
from engine.trace import OpKind

Array = Any
NAME, MODULE = "gated_deltanet", "linear_attn"
ADDED = "hook_linear_attn_out"  # the hook of what the residual stream adds: its output
HF = {"llama": {"_qkv": "linear_attn.in_proj_qkv", "_z": "linear_attn.in_proj_z", "_b": "linear_attn.in_proj_b",
                "_a": "linear_attn.in_proj_a", "_out": "linear_attn.out_proj"}}
HF_RAW = {"llama": {"conv.w": "linear_attn.conv1d.weight", "dt_bias": "linear_attn.dt_bias",
                    "A_log": "linear_attn.A_log", "norm.w": "linear_attn.norm.weight"}}  # as stored (the conv squeezed)
HF_LAYER_TYPES = {"linear_attention": False}
GGUF = {"linear_attn.w_qkv": "attn_qkv", "linear_attn.w_z": "attn_gate", "linear_attn.w_b": "ssm_beta",
        "linear_attn.w_a": "ssm_alpha", "linear_attn.conv.w": "ssm_conv1d", "linear_attn.dt_bias": "ssm_dt",
        "linear_attn.A_log": "ssm_a", "linear_attn.norm.w": "ssm_norm", "linear_attn.w_out": "ssm_out"}
CHECKPOINT_ONLY = True  # its shape (engine.spec.DeltaNetSpec) comes from a checkpoint's config, not a scenario file
READ = "hook_read"  # a value head's read of its state: what `blocks.L.linear_attn head H` ablates
PER_HEAD = ("hook_state", READ)
ABLATES = READ
GGUF_SUFFIX = {"linear_attn.A_log": "", "linear_attn.dt_bias": ".bias"}  # the others: .weight
CAUSES = {"en": {**causal_conv.CAUSES["en"],  # a state cell, its state's line (fresh: no token yet), its bugs
                 "against.recurrent": "value head {head}, k{k}, d{d} (after position {position})",
                 "cache.recurrent": "recurrent state after token {last} · conv window: last {rows} inputs (K={kernel}) · "
                                    "{stored} at any length",
                 "cache.recurrent.fresh": "recurrent state: no token yet · conv window: last {rows} inputs "
                                          "(K={kernel}) · {stored} at any length",
                 "cache.where.recurrent": "state · layer {layer} of 0–{last_layer} · value head {head} of "
                                          "0–{last_head}",
                 "fault.delta_chunk": "no prompt is longer than the delta rule's chunk ({chunk} tokens)",
                 "fault.no_deltanet": "the model has no Gated DeltaNet (linear-attention) layer",
                 "fault.deltanet_rounds": "it shows from decode round {round} on: generate at least {tokens} tokens"},
          "zh": {**causal_conv.CAUSES["zh"],
                 "against.recurrent": "值头 {head}，k{k}，d{d}（位置 {position} 之后）",
                 "cache.recurrent": "循环状态（最后由Token {last} 改变）· 卷积窗口：最近 {rows} 个输入（K={kernel}）· "
                                    "任何长度都占 {stored}",
                 "cache.recurrent.fresh": "循环状态：尚无Token · 卷积窗口：最近 {rows} 个输入（K={kernel}）· 任何长度都占 {stored}",
                 "cache.where.recurrent": "状态 · 第 {layer} 层（0–{last_layer}）· 第 {head} 个值头（0–{last_head}）",
                 "fault.delta_chunk": "没有提示长于 delta 规则的块（{chunk} 个Token）",
                 "fault.no_deltanet": "模型没有 Gated DeltaNet（线性注意力）层",
                 "fault.deltanet_rounds": "它从解码第 {round} 轮起才显现：至少生成 {tokens} 个Token"}}
GGUF_VALUE_HEADS = {  # llama.cpp's converter tiles the value heads (see value_heads_grouped): where they lie
    "linear_attn.w_qkv": "v rows", "linear_attn.w_z": "rows", "linear_attn.w_b": "rows", "linear_attn.w_a": "rows",
    "linear_attn.A_log": "rows", "linear_attn.dt_bias": "rows", "linear_attn.conv.w": "v rows",
    "linear_attn.w_out": "columns"}  # one operator per value head: what an intervention names a head of
RECURRENT = "recurrent_state"  # its dump item beside the window's conv_state
# engine.layout: [v_head, d_k, d_v] (or stacked [v_head·d_k, d_v]) as the engine's stacked rows
DUMP_LAYOUTS = {**causal_conv.DUMP_LAYOUTS, RECURRENT: DumpLayout(
    lambda array, shape: array.reshape(-1, array.shape[-1]) if array.ndim == 3 else array)}
EPS_L2 = 1e-6  # the L2 norm's ε (FLA's and transformers' l2norm), not the config's rms_norm_eps

EXPLANATIONS: dict[str, dict[str, tuple[str, str, str, str]]] = {
    ADDED: {
        "en": ("Map every value head's gated read back into the residual stream's features.",
               "concat of the heads' hook_gated_norm · W_out (no bias; Hugging Face: linear_attn.out_proj).",
               "W_out reads the normalised, gated reads (hook_gated_norm), not the raw ones (hook_read).",
               "Shape: new tokens × d_model; hook_resid_mid = hook_resid_pre + this row."),
        "zh": ("把各值头门控后的读出映射回残差特征。", "各头hook_gated_norm按序拼接后·W_out（无偏置；Hugging Face中为linear_attn.out_proj）。",
               "W_out读取的是归一化并门控后的读出（hook_gated_norm），而不是原始读出（hook_read）。", "形状：新Token数×d_model；hook_resid_mid = hook_resid_pre + 这一行。"),
    },
    "hook_qkv": {
        "en": ("One projection makes the queries, keys and values of every linear-attention head.",
               "h · W_qkv (in_proj_qkv): the columns are q (k_heads·d_k), then k (k_heads·d_k), then v (v_heads·d_v).",
               "The split is by these widths, not into three equal parts (value heads outnumber key heads).",
               "Width = 2·k_heads·d_k + v_heads·d_v."),
        "zh": ("一次投影得到所有线性注意力头的q、k、v。", "h·W_qkv（in_proj_qkv）：列依次为q（k头数·d_k）、k（k头数·d_k）、v（v头数·d_v）。",
               "按这些宽度切分，不是三等分（值头多于键头）。", "宽度=2·k头数·d_k+v头数·d_v。")},
    "hook_in_z": {
        "en": ("The output gate of every value head (in_proj_z).", "z = h · W_z; later SiLU(z) multiplies the normed read.",
               "z gates after the RMSNorm: gating before it changes the numbers.", "Width = v_heads·d_v."),
        "zh": ("每个值头的输出门（in_proj_z）。", "z = h·W_z；之后SiLU(z)乘以归一化后的读出。",
               "门控在RMSNorm之后：先门控再归一化结果不同。", "宽度=v头数·d_v。")},
    "hook_in_b": {
        "en": ("One number per value head: how strongly this token writes (before its sigmoid).", "b = h · W_b (in_proj_b).",
               "β is sigmoid(b), not b.", "One column per value head."),
        "zh": ("每个值头一个数：本Token写入的强度（sigmoid之前）。", "b = h·W_b（in_proj_b）。", "β是sigmoid(b)，不是b。", "每个值头一列。")},
    "hook_in_a": {
        "en": ("One number per value head: how fast the state forgets at this token (before softplus).",
               "a = h · W_a (in_proj_a).", "The decay adds dt_bias before the softplus.", "One column per value head."),
        "zh": ("每个值头一个数：本Token处状态遗忘的速度（softplus之前）。", "a = h·W_a（in_proj_a）。",
               "衰减在softplus之前加上dt_bias。", "每个值头一列。")},
    "hook_conv": {
        "en": ("A short causal convolution mixes each feature with the K−1 tokens before it.",
               "Per channel: Σ_j w[c, j] · x[t − K + 1 + j, c] over the conv window and the new rows, then SiLU.",
               "A cached decode must shift the window by one token per round; not shifting it reuses old inputs.",
               "Row t depends only on rows t−K+1 … t of hook_qkv."),
        "zh": ("短的因果卷积把每个特征与它之前的K−1个Token混合。", "逐通道：对卷积窗口和新行求Σ_j w[c,j]·x[t−K+1+j,c]，再取SiLU。",
               "缓存解码每轮必须把窗口移动一个Token；不移动会重复使用旧输入。", "第t行只依赖hook_qkv的第t−K+1…t行。")},
    "hook_q_l2": {
        "en": ("The queries, each key head's slice scaled to length 1.", "q / √(Σq² + 1e-6) per key head.",
               "The read also divides by √d_k (in the rule), on top of the L2 norm.", "Each head's slice has length ≈ 1."),
        "zh": ("查询，每个键头的切片缩放到长度1。", "每个键头q/√(Σq²+1e-6)。", "读出时在L2归一化之外还要除以√d_k。", "每个头的切片长度≈1。")},
    "hook_k_l2": {
        "en": ("The keys, each head's slice scaled to length 1: the delta rule's write address.",
               "k / √(Σk² + 1e-6) per key head.", "Unnormalised keys make the update unstable (β·k·kᵀ beyond 1).",
               "Each head's slice has length ≈ 1."),
        "zh": ("键，每个头的切片缩放到长度1：delta规则的写入地址。", "每个键头k/√(Σk²+1e-6)。",
               "键不归一化会使更新不稳定（β·k·kᵀ超过1）。", "每个头的切片长度≈1。")},
    "hook_v_conv": {
        "en": ("The values each value head writes into its state.", "The last v_heads·d_v columns of hook_conv.",
               "Values are convolved too, like q and k.", "Width = v_heads·d_v."),
        "zh": ("每个值头写入状态的值。", "hook_conv的最后v头数·d_v列。", "值也经过卷积，与q、k一样。", "宽度=v头数·d_v。")},
    "hook_beta": {
        "en": ("The write strength of each token per value head, in (0, 1).", "β = sigmoid(b).",
               "β = 1 overwrites what the key addressed; β = 0 writes nothing.", "Every value lies in (0, 1)."),
        "zh": ("每个Token在每个值头上的写入强度，在(0,1)之间。", "β = sigmoid(b)。", "β=1覆盖键所寻址的内容；β=0不写入。", "所有值在(0,1)内。")},
    "hook_decay": {
        "en": ("The log of how much each value head's state keeps at this token (≤ 0).",
               "g = −exp(A_log) · softplus(a + dt_bias); the state is multiplied by e^g before the token writes.",
               "Forgetting the decay before the update lets old tokens dominate.", "Every value is ≤ 0."),
        "zh": ("每个值头的状态在本Token处保留多少（对数，≤0）。", "g = −exp(A_log)·softplus(a+dt_bias)；写入前状态乘以e^g。",
               "更新前忘记衰减会让旧Token占主导。", "所有值≤0。")},
    "hook_delta": {
        "en": ("What each token writes: the part of its value the decayed state did not already predict.",
               "δ = β · (v − (e^g·S)ᵀ k) per value head; the chunked form gets the same δ from the UT transform.",
               "The chunked form must start each chunk from the state the previous chunk left.",
               "The cached decode's δ equals the full recompute's."),
        "zh": ("每个Token写入的内容：其值中衰减后的状态尚未预测的部分。", "每个值头δ = β·(v − (e^g·S)ᵀk)；分块形式由UT变换得到同样的δ。",
               "分块形式的每块必须从上一块留下的状态开始。", "缓存解码的δ等于全量重算的δ。")},
    "hook_state": {
        "en": ("The value head's memory after this pass: a d_k × d_v matrix that does not grow with the sequence.",
               "S ← e^g·S + k·δᵀ for every token fed (chunked: per chunk at once).",
               "The state is all the layer keeps: a state dropped at a chunk boundary forgets the prefix.",
               "Cached equals full recompute; its size is the same at every length."),
        "zh": ("本值头在本轮之后的记忆：d_k×d_v矩阵，不随序列增长。", "对每个输入Token：S ← e^g·S + k·δᵀ（分块时按块一起）。",
               "状态是本层保存的全部：在块边界丢掉状态会忘记前缀。", "缓存等于全量重算；任何长度下大小不变。")},
    "hook_read": {
        "en": ("What each token reads from its value head's state.", "o = Sᵀ q / √d_k with the state after the token.",
               "The read uses the state after the token's own write, not before.", "One row per token, d_v columns."),
        "zh": ("每个Token从其值头状态中读出的内容。", "o = Sᵀq/√d_k，使用写入本Token之后的状态。",
               "读出使用本Token写入之后的状态，而不是之前。", "每个Token一行，d_v列。")},
    "hook_gated_norm": {
        "en": ("Each value head's read normalised, then gated by SiLU(z).", "RMSNorm(o) · w · SiLU(z) per value head.",
               "The gain is w itself here, not 1 + w like the block's norms.", "Zero where z is very negative."),
        "zh": ("每个值头的读出先归一化，再由SiLU(z)门控。", "每个值头RMSNorm(o)·w·SiLU(z)。",
               "这里增益就是w，不像块的归一化那样是1+w。", "z很负时接近0。")},
}


@dataclass(frozen=True)
class DeltaNetSpec(KindOptions):
    """Its layers' shape (ModelSpec.deltanet; Qwen3.5's linear_attention layers, which a checkpoint lists)."""

    ROLE: ClassVar[str] = "mixer"
    KIND: ClassVar[str] = NAME

    k_heads: int
    v_heads: int  # a multiple of k_heads: each key head serves v_heads / k_heads value heads
    d_k: int
    d_v: int
    kernel: int  # the causal conv's width (linear_conv_kernel_dim)
    chunk: int = 64  # tokens per chunk of the chunked form (transformers' and FLA's default)

    @property
    def d_keys(self) -> int:
        return self.k_heads * self.d_k

    @property
    def d_values(self) -> int:
        return self.v_heads * self.d_v

    @property
    def conv_dim(self) -> int:
        return 2 * self.d_keys + self.d_values


class FaultPoints(causal_conv.ConvFaultPoints):
    """Where an injected bug (engine.faults) may change what the Gated DeltaNet does (its conv window's, and
    these); these are the correct answers."""

    def decayed(self, xp, state: Array, decay: Array) -> Array:
        """The recurrent form's state before a token writes: the kept state (H, d_k, d_v) times e^g per head."""
        return state * decay

    def carried(self, xp, state: Array, chunk: int) -> Array:
        """The state the chunked form starts its `chunk`-th chunk of a pass from."""
        return state


class StateNotDecayed:
    def decayed(self, xp, state, decay):
        return state

    def unseen(self, scenario):
        return _no_layer(scenario, rounds=2)


class ChunkStateDropped:
    def carried(self, xp, state, chunk):
        return state * 0.0 if chunk else state

    def unseen(self, scenario):
        net = scenario.model.deltanet
        why = _no_layer(scenario, rounds=1)
        if why is None and all(len(r.tokens) <= net.chunk for r in scenario.requests):
            return ("fault.delta_chunk", {"chunk": net.chunk})
        return why


def _no_layer(scenario, rounds: int) -> tuple[str, dict] | None:
    """Why a bug of its that shows from round `rounds` − 1 on cannot show."""
    if not any(block.mixer == NAME for block in scenario.model.blocks):
        return ("fault.no_deltanet", {})
    if all(r.max_new_tokens < rounds for r in scenario.requests):
        return ("fault.deltanet_rounds", {"round": rounds - 1, "tokens": rounds})
    return None


BUGS = (*causal_conv.BUGS, StateNotDecayed, ChunkStateDropped)


@dataclass(frozen=True)
class RecurrentFacts:
    """What a view shows of a recurrent state beside its matrices."""

    last: int  # the position of the token that last changed it (−1: none yet)
    heads: int  # value heads, each a d_k × d_v matrix
    kernel: int  # the conv's K: its window holds K−1 inputs
    nbytes: int  # what it stores, the same at every length
    heading: ClassVar[str] = "cache.where.recurrent"
    fed: ClassVar[bool] = True  # it counts the tokens fed, it holds no rows of them

    def words(self) -> tuple[str, dict]:
        facts = {"last": self.last, "rows": self.kernel - 1, "kernel": self.kernel, "stored": Size(self.nbytes)}
        return ("cache.recurrent.fresh" if self.last < 0 else "cache.recurrent"), facts  # fresh: no token changed it


@dataclass(frozen=True, eq=False)
class DeltaState:
    """A Gated DeltaNet layer's state (an engine.state.LayerState): the conv window and each value head's matrix."""

    window: causal_conv.ConvWindow  # the last K−1 inputs of the conv (engine.layers.causal_conv, shared with LFM2)
    recurrent: Array  # (v_heads, d_k, d_v)
    fingerprint: str
    module: ClassVar[str] = MODULE

    @property
    def length(self) -> int:
        return self.window.seen  # the tokens fed through it: what the timeline counts

    @property
    def seen(self) -> int:
        return self.window.seen

    @property
    def nbytes(self) -> int:
        return self.window.nbytes + int(self.recurrent.nbytes)

    @property
    def row_positions(self) -> tuple[int, ...]:
        """The conv window's rows: the positions of the last K−1 inputs (−1: not filled yet)."""
        return self.window.row_positions

    @property
    def facts(self) -> RecurrentFacts:
        return RecurrentFacts(self.seen - 1, int(self.recurrent.shape[0]), int(self.window.rows.shape[0]) + 1,
                              self.nbytes)

    def fresh(self, fingerprint: str) -> DeltaState:
        return DeltaState(self.window.fresh(fingerprint), self.recurrent * 0.0, fingerprint)

    def views(self) -> tuple[StateView, ...]:
        """Every value head's state side by side, (d_k, v_heads·d_v) shown a head at a time; then the conv window."""
        xp, (heads, d_k, d_v) = namespace(self.recurrent), self.recurrent.shape
        side = xp.reshape(xp.permute_dims(self.recurrent, (1, 0, 2)), (d_k, heads * d_v))
        return StateView("S", side, d_v, positional=False, axes=("k", "d")), *self.window.views()

    def delta(self, older) -> WholeState:
        return WholeState(self)

    def dump_items(self) -> dict[str, Array]:
        """`recurrent_state` (v_heads·d_k, d_v): head h's row i is row h·d_k + i; `conv_state` (K−1, channels),
        oldest input first."""
        xp, (heads, d_k, d_v) = namespace(self.recurrent), self.recurrent.shape
        return {"recurrent_state": xp.reshape(self.recurrent, (heads * d_k, d_v)), **self.window.dump_items()}

    def cell(self, item: str, row: int, col: int, position: str) -> tuple[str, dict] | None:
        """A cell of one of its dump items as a comparison names it, a code of its CAUSES and the facts (None: the
        window's, named as rows of channels). The recurrent state has no position rows: it says after which."""
        if item != RECURRENT:
            return None
        d_k = int(self.recurrent.shape[1])  # its rows: [v_head·d_k, d_v]
        return "against.recurrent", {"head": row // d_k, "k": row % d_k, "d": col, "position": self.seen - 1}

    def differing(self, theirs, beyond) -> frozenset[int]:
        """The conv window's rows that differ (the window's own rule), and the position of the token that last
        changed the recurrent state if it differs."""
        found = self.window.differing(theirs, beyond)
        if RECURRENT not in theirs:
            return found
        ours, other = np.asarray(to_host(self.dump_items()[RECURRENT]), np.float64), theirs[RECURRENT]
        if other is None or other.shape != ours.shape or beyond(RECURRENT, ours, np.asarray(other, np.float64)).any():
            found = found | {self.seen - 1}
        return found


def value_heads_grouped(w: np.ndarray, net, where: str) -> np.ndarray:
    """A GGUF tensor ([out, in], as read) with its value heads back in Hugging Face's grouped order.

    llama.cpp's converter (_LinearAttentionVReorderBase) stores value head g·r + j (key head g's j-th, r per key
    head) at j·k_heads + g, so that ggml broadcasts the key heads; `where`: "rows", "v rows" (the rows after
    q and k: in_proj_qkv, the conv's channels) or "columns" (out_proj's inputs)."""
    group = net.v_heads // net.k_heads
    if group == 1:
        return w
    if w.ndim == 0:  # a ValueError, as a reshape of any other wrong shape: the loader names the tensor
        raise ValueError("a tensor of no dimensions holds no value heads")
    if where == "columns":
        return value_heads_grouped(w.T, net, "rows").T
    if where == "v rows":
        qk = 2 * net.d_keys
        return np.concatenate([w[:qk], value_heads_grouped(w[qk:], net, "rows")])
    width = w.shape[0] // net.v_heads  # d_v, or 1 for a per-head number
    tiled = w.reshape(group, net.k_heads, width, *w.shape[1:])
    return np.swapaxes(tiled, 0, 1).reshape(w.shape)


# -- shapes and hooks ------------------------------------------------------------------------------------
def parameter_shapes(model: ModelSpec, layer: int, block: LayerSpec) -> dict[str, tuple[int, ...]]:
    net, p, d = model.deltanet, f"blocks.{layer}.{MODULE}", model.d_model
    return {f"{p}.w_qkv": (d, net.conv_dim), f"{p}.w_z": (d, net.d_values), f"{p}.w_b": (d, net.v_heads),
            f"{p}.w_a": (d, net.v_heads), f"{p}.conv.w": (net.kernel, net.conv_dim), f"{p}.dt_bias": (net.v_heads,),
            f"{p}.A_log": (net.v_heads,), f"{p}.norm.w": (net.d_v,), f"{p}.w_out": (net.d_values, d)}


def hf_tensor(leaf: str, tensors) -> Array:
    """Its parameter `leaf` from a Hugging Face block (`tensors`: an engine.loading.hf.BlockTensors); the conv's
    weight [C, 1, K] as the taps [K, C]."""
    stored = tensors.table(HF_RAW).get(leaf)
    if stored is None:
        return tensors.projection(leaf, tensors.table(HF)[leaf[1:]])
    found = tensors.get(stored)
    return found.reshape(tensors.spec.deltanet.conv_dim, -1).T if leaf == "conv.w" else found


def gguf_tensor(leaf: str, tensors) -> Array:
    """Its parameter `leaf` from a GGUF block (`tensors`: an engine.loading.gguf_model.GGUFBlock), undoing what
    llama.cpp's converter does ([out, in] as read): A as −exp(A_log), the value heads tiled; its norm is stored as w
    (not 1 + w, as the architecture's other norms)."""
    w = tensors.stored(leaf)
    if leaf == "A_log":
        with np.errstate(invalid="ignore", divide="ignore"):
            w = np.log(-w)  # −exp(A_log) < 0 always: anything else reads as NaN, refused by the engine's check
    where = GGUF_VALUE_HEADS.get(f"{MODULE}.{leaf}")
    if where is not None and tensors.spec.deltanet is not None:
        w = value_heads_grouped(w, tensors.spec.deltanet, where)
    return w if w.ndim == 1 else w.T


def gguf_locate(leaf: str, index: tuple[int, ...], tensors) -> tuple[str, int, int] | None:
    """The tensor, row and column holding its parameter `leaf` at `index` ([in, out], or a vector's [i]): where the
    value heads are tiled, the element that gguf_tensor reads there (None: the transposed index, as any other)."""
    where = GGUF_VALUE_HEADS.get(f"{MODULE}.{leaf}")
    if where is None or tensors.spec.deltanet is None:
        return None
    shape, name = tensors.shape(leaf), tensors.name(leaf)
    columns = where == "columns"  # out_proj's inputs are tiled, else the stored rows (the engine's outputs)
    order = value_heads_grouped(np.arange(shape[-1] if columns else shape[0]), tensors.spec.deltanet,
                                "rows" if columns else where)  # the stored place of each head-grouped one
    if len(shape) == 1:
        return name, 0, int(order[index[0]])
    inputs, out = index
    return (name, out, int(order[inputs])) if columns else (name, int(order[out]), inputs)


def hook_widths(model: ModelSpec) -> dict[str, int]:
    net = model.deltanet
    if net is None:
        return {}
    m = MODULE
    return {f"{m}.hook_qkv": net.conv_dim, f"{m}.hook_conv": net.conv_dim, f"{m}.hook_in_z": net.d_values,
            f"{m}.hook_in_b": net.v_heads, f"{m}.hook_in_a": net.v_heads, f"{m}.hook_q_l2": net.d_keys,
            f"{m}.hook_k_l2": net.d_keys, f"{m}.hook_v_conv": net.d_values, f"{m}.hook_beta": net.v_heads,
            f"{m}.hook_decay": net.v_heads, f"{m}.hook_delta": net.d_values, f"{m}.hook_state": net.d_v,
            f"{m}.hook_read": net.d_v, f"{m}.hook_gated_norm": net.d_values}


WHOLE = ("hook_qkv", "hook_in_z", "hook_in_b", "hook_in_a", "hook_conv", "hook_q_l2", "hook_k_l2", "hook_v_conv",
          "hook_beta", "hook_decay", "hook_delta")


def hooks(model: ModelSpec, layer: int, block: LayerSpec, hook, norm_sites) -> list[HookSite]:
    heads = model.deltanet.v_heads
    return ([HookSite(hook(layer, MODULE, name)) for name in WHOLE]
            + [HookSite(hook(layer, MODULE, name), heads) for name in PER_HEAD]
            + [HookSite(hook(layer, MODULE, "hook_gated_norm"))])


# -- the two forms of the delta rule ---------------------------------------------------------------------
def recurrent_rule(xp, fault, q, k, v, beta, g, state, delta=None):
    """One token at a time. q, k: (T, H, d_k) (q already / √d_k), v: (T, H, d_v), beta, g: (T, H), state:
    (H, d_k, d_v). `delta` (T, H, d_v): given corrections instead of computing them. -> δ, reads, the state."""
    deltas, reads = [], []
    for t in range(q.shape[0]):
        kept = fault.decayed(xp, state, xp.exp(g[t])[:, None, None])
        if delta is None:
            predicted = xp.sum(kept * k[t][:, :, None], axis=1)  # (H, d_v): Sᵀk
            step = (v[t] - predicted) * beta[t][:, None]
        else:
            step = delta[t]
        state = kept + k[t][:, :, None] * step[:, None, :]
        deltas.append(step)
        reads.append(xp.sum(state * q[t][:, :, None], axis=1))
    return xp.stack(deltas), xp.stack(reads), state


def chunked_rule(xp, fault, q, k, v, beta, g, state, size: int, delta=None):
    """`size` tokens at a time (the last chunk may be shorter), the same arguments and results as recurrent_rule.

    Within a chunk, with G the cumulative sum of g and D[i, j] = e^(G_i − G_j) for j ≤ i (0 above):
    A = I + strictly-lower(β_i k_i·k_j D[i, j]) (unit lower triangular), U = A⁻¹(β v), W = A⁻¹(β e^G k),
    δ = U − W S, reads = (e^G q) S + lower(q_i·k_j D[i, j]) δ, S ← e^(G_last) S + Σ_j e^(G_last − G_j) k_j δ_jᵀ."""
    deltas, reads = [], []
    for index, start in enumerate(range(0, q.shape[0], size)):
        part = slice(start, start + size)
        qc, kc, vc = (xp.permute_dims(x[part], (1, 0, 2)) for x in (q, k, v))  # (H, C, ·)
        state = fault.carried(xp, state, index)
        cum = xp.cumulative_sum(xp.permute_dims(g[part], (1, 0)), axis=1)  # (H, C)
        n = cum.shape[1]
        lower = xp.tril(xp.ones((n, n), dtype=xp.bool))
        gap = cum[:, :, None] - cum[:, None, :]
        decay = xp.where(lower, xp.exp(xp.where(lower, gap, xp.zeros_like(gap))), xp.zeros_like(gap))
        b = xp.permute_dims(beta[part], (1, 0))[:, :, None]  # (H, C, 1)
        if delta is None:
            system = (b * kc) @ xp.permute_dims(kc, (0, 2, 1)) * decay
            u = _unit_lower_solve(xp, system, b * vc)
            w = _unit_lower_solve(xp, system, b * kc * xp.exp(cum)[:, :, None])
            step = u - w @ state
        else:
            step = xp.permute_dims(delta[part], (1, 0, 2))
        within = (qc @ xp.permute_dims(kc, (0, 2, 1))) * decay
        reads.append(xp.permute_dims((qc * xp.exp(cum)[:, :, None]) @ state + within @ step, (1, 0, 2)))
        deltas.append(xp.permute_dims(step, (1, 0, 2)))
        last = cum[:, -1:]
        carried = kc * xp.exp(last - cum)[:, :, None]
        state = state * xp.exp(last)[:, :, None] + xp.permute_dims(carried, (0, 2, 1)) @ step
    return xp.concat(deltas, axis=0), xp.concat(reads, axis=0), state


def _unit_lower_solve(xp, system, rhs):
    """X with (I + strictly-lower(system)) X = rhs, by forward substitution over the chunk's rows (H, C, ·)."""
    rows = []
    for i in range(rhs.shape[1]):
        row = rhs[:, i, :]
        if rows:
            done = xp.stack(rows, axis=1)  # (H, i, ·)
            row = row - xp.sum(system[:, i, :i][:, :, None] * done, axis=1)
        rows.append(row)
    return xp.stack(rows, axis=1)


class GatedDeltaNet:
    """One layer's Gated DeltaNet, made once per model: its parameter names and hooks are resolved here."""

    def __init__(self, model, layer: int, block: LayerSpec):
        self.model, self.layer, self.net = model, layer, model.spec.deltanet
        self.prefix = f"blocks.{layer}.{MODULE}"
        self.hooks = {name: model.hook(layer, MODULE, name) for name in (*WHOLE, *PER_HEAD, "hook_gated_norm")}

    def fresh_state(self) -> DeltaState:
        xp, net, dtype = self.model.xp, self.net, self.model.backend.dtype
        return DeltaState(causal_conv.ConvWindow.empty(xp, net.kernel, net.conv_dim, dtype, self.model.fingerprint,
                                                        MODULE),
                          xp.zeros((net.v_heads, net.d_k, net.d_v), dtype=dtype), self.model.fingerprint)

    def forward(self, h: Op, states: list, positions: list[int], padded_keys: list[bool] | None, out) -> OpStream:
        model, net, hooks, p, xp = self.model, self.net, self.hooks, self.prefix, self.model.xp
        state = states[self.layer]
        t = h.values.shape[0]
        projections = [model.linear(hooks[name], h, f"{p}.{weight}", None) for name, weight in
                       (("hook_qkv", "w_qkv"), ("hook_in_z", "w_z"), ("hook_in_b", "w_b"), ("hook_in_a", "w_a"))]
        yield from projections
        qkv, z, b, a = projections
        read = state.window.extend(xp, qkv.values, model.fault, padded_keys[-t:] if padded_keys else None)
        taps = model.param(f"{p}.conv.w")
        conv = op(hooks["hook_conv"], ops.silu(xp, causal_conv.convolve(xp, read.rows, taps.values)), OpKind.MIX,
                  inputs=(qkv, taps))
        yield conv
        keys, values = net.d_keys, net.d_values
        q = op(hooks["hook_q_l2"], self._l2(conv.values[:, :keys]), OpKind.NORM, inputs=(conv,))
        k = op(hooks["hook_k_l2"], self._l2(conv.values[:, keys:2 * keys]), OpKind.NORM, inputs=(conv,))
        v = op(hooks["hook_v_conv"], conv.values[:, 2 * keys:], OpKind.MIX, inputs=(conv,))
        yield q
        yield k
        yield v
        beta = op(hooks["hook_beta"], ops.sigmoid(xp, b.values), OpKind.ACTIVATION, inputs=(b,))
        yield beta
        a_log, dt_bias = model.param(f"{p}.A_log"), model.param(f"{p}.dt_bias")
        decay = op(hooks["hook_decay"], -xp.exp(a_log.values) * _softplus(xp, a.values + dt_bias.values),
                   OpKind.ACTIVATION, inputs=(a, a_log, dt_bias))
        yield decay
        args = (*self._heads(q.values, k.values, v.values), beta.values, decay.values, state.recurrent)
        recurrent = t == 1 and state.seen > 0  # a cached decode step; a pass of several tokens runs in chunks
        rule = recurrent_rule if recurrent else lambda *a, **kw: chunked_rule(*a, size=net.chunk, **kw)
        deltas, reads, kept = rule(xp, model.fault, *args)
        computed = xp.reshape(deltas, (t, values))
        delta = op(hooks["hook_delta"], computed, OpKind.MIX, inputs=(k, v, beta, decay))
        yield delta
        if delta.values is not computed:  # replaced (an intervention): the reads and the state follow it
            deltas, reads, kept = rule(xp, model.fault, *args, delta=xp.reshape(delta.values, deltas.shape))
        states[self.layer] = DeltaState(read.state, kept, state.fingerprint)  # what the views show from here on
        heads = []
        for head in range(net.v_heads):
            s = op(hooks["hook_state"], kept[head], OpKind.MIX, head=head, inputs=(delta,), rows="features")
            yield s
            heads.append(s.values)
        if any(values is not kept[head] for head, values in enumerate(heads)):  # a head's state replaced
            states[self.layer] = DeltaState(read.state, xp.stack(heads), state.fingerprint)
        read_ops = []
        for head in range(net.v_heads):
            r = op(hooks["hook_read"], reads[:, head, :], OpKind.MIX, head=head, inputs=(q, delta))
            yield r
            read_ops.append(r)
        normed = op(hooks["hook_gated_norm"], self._gated_norm([r.values for r in read_ops], z.values), OpKind.NORM,
                    inputs=(*read_ops, z, model.param(f"{p}.norm.w")))
        yield normed
        total = model.linear(out, normed, f"{p}.w_out", None)
        yield total
        return total

    def _l2(self, x: Array) -> Array:
        xp, t, d_k = self.model.xp, x.shape[0], self.net.d_k
        split = xp.reshape(x, (t, -1, d_k))
        return xp.reshape(split / xp.sqrt(xp.sum(split * split, axis=-1, keepdims=True) + EPS_L2), (t, -1))

    def _heads(self, q: Array, k: Array, v: Array) -> tuple[Array, Array, Array]:
        """(T, H_v, ·) each: key head i serves value heads i·group … (i+1)·group − 1; q over √d_k."""
        xp, net, t = self.model.xp, self.net, q.shape[0]
        serve = xp.asarray([head // (net.v_heads // net.k_heads) for head in range(net.v_heads)])
        q, k = (xp.take(xp.reshape(x, (t, net.k_heads, net.d_k)), serve, axis=1) for x in (q, k))
        return q / net.d_k ** 0.5, k, xp.reshape(v, (t, net.v_heads, net.d_v))

    def _gated_norm(self, reads: list[Array], z: Array) -> Array:
        xp, net = self.model.xp, self.net
        o = xp.stack(reads, axis=1)  # (T, H, d_v)
        _, scale = ops.norm_scale(xp, o, self.model.spec.norm.eps, centred=False)
        gate = ops.silu(xp, xp.reshape(z, o.shape))
        w = self.model.param(f"{self.prefix}.norm.w").values
        return xp.reshape(o / scale * w * gate, (o.shape[0], net.d_values))


def _softplus(xp, x: Array) -> Array:
    """log(1 + eˣ), linear beyond 20 (torch's threshold)."""
    return xp.where(x > 20.0, x, xp.log1p(xp.exp(xp.where(x > 20.0, xp.zeros_like(x), x))))


Layer = GatedDeltaNet
