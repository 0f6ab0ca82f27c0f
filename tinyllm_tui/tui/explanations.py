"""What each operator computes, in English and Chinese.

Each entry follows the seeds' four questions: why it is needed, how it is done,
the usual mistake, and how to tell it was done right.
"""

from __future__ import annotations

import locale
import os

from tinyllm_tui.debugger.frame import Frame

LANGUAGES = ("en", "zh")
HEADINGS = {
    "en": ("Why", "How", "Pitfall", "Check", "Shapes"),
    "zh": ("为什么需要", "怎样实现", "可能的代价与误解", "如何判断是否做对", "形状"),
}

# Keyed by the last part of the hook name: (why, how, pitfall, check) per language.
TEXTS: dict[str, dict[str, tuple[str, str, str, str]]] = {
    "hook_embed": {
        "en": ("Turn token ids into vectors the network can multiply.",
               "Row id of the embedding table E, one row per token.",
               "An id is not a meaning; E is a learned lookup, not a search.",
               "Each row equals E[id] exactly."),
        "zh": ("把Token编号变成可计算的向量。", "按编号取Embedding表E的对应行。",
               "编号本身没有语义；E是查表，不是检索服务。", "每行与E[编号]完全相同。"),
    },
    "hook_embed(vectors)": {
        "en": ("The request gives its input vectors directly (as the 004 text does), instead of token ids.",
               "Each row is the given input vector of that position; no embedding table is read.",
               "These vectors already stand for the tokens: looking them up in E again would be wrong.",
               "Each row equals the request's input vectors exactly."),
        "zh": ("请求直接给出输入向量（如004文中所示），而不是Token编号。", "每行就是该位置给定的输入向量，不读取Embedding表。",
               "这些向量已经代表Token，再到E中查表是错误的。", "每行与请求给出的输入向量完全相同。"),
    },
    "hook_pos_embed": {
        "en": ("Without positions attention cannot tell order apart.",
               "A term that depends only on the absolute position is added to each row.",
               "Restarting positions at 0 in decode silently shifts every later token.",
               "Decode position = number of cached tokens."),
        "zh": ("没有位置信息，注意力无法区分顺序。", "按绝对位置生成一项加到每行上。",
               "解码时把位置重置为0会悄悄错位。", "解码位置应等于缓存中的Token数。"),
    },
    "hook_resid_pre": {
        "en": ("The layer's input: token vector plus position term.", "Elementwise sum.",
               "Adding positions twice (prefill and decode) doubles them.", "Row = embed + pos_embed."),
        "zh": ("本层输入：Token向量加位置项。", "逐元素相加。", "位置项重复相加会加倍。", "每行=embed+pos_embed。"),
    },
    "hook_embed(scaled)": {
        "en": ("Gemma's token vectors: embedding rows scaled up to the size the blocks expect.",
               "Row id of the embedding table E, times embed_scale = √d_model (the tied head reads E unscaled).",
               "Forgetting the scale leaves every row √d too small; the logits still look plausible.",
               "Each row equals E[id] · √d_model."),
        "zh": ("Gemma的Token向量：把Embedding行放大到各层期望的尺度。", "取E的对应行，再乘以embed_scale=√d_model（绑定的输出头读未缩放的E）。",
               "漏掉缩放会让每行小√d倍，logits看起来仍然合理。", "每行等于E[编号]·√d_model。"),
    },
    "hook_normalized": {
        "en": ("Keep each row at a steady scale before the next matrix.",
               "Per row: subtract the mean, divide by sqrt(variance + eps) (RMSNorm: no mean).",
               "Normalising across tokens would let a new token change old rows and break the cache.",
               "Each row has mean 0 and variance ≈ 1 (before the affine gain/bias)."),
        "zh": ("让每行在进入下一次矩阵乘法前保持稳定尺度。", "每行减均值，除以sqrt(方差+eps)（RMSNorm不减均值）。",
               "跨Token归一化会让新Token改变旧位置，破坏缓存。", "每行均值为0、方差约为1（仿射前）。"),
    },
    "hook_scale": {
        "en": ("Each row's divisor: how large the row was before the norm.",
               "LayerNorm: sqrt(variance + eps) of the row; RMSNorm: sqrt(mean(x²) + eps).",
               "A tiny scale means a near-zero row: eps then decides the output.",
               "hook_normalized · hook_scale gives back the (centred) input row."),
        "zh": ("每行的除数：归一化前这一行有多大。", "LayerNorm：sqrt(方差+eps)；RMSNorm：sqrt(平方均值+eps)。",
               "除数极小说明该行接近零，此时eps决定输出。", "hook_normalized × hook_scale 还原（去均值后的）输入行。"),
    },
    "norm.hook_out": {
        "en": ("The norm's output after its learned gain (and bias): what the next matrix reads.",
               "hook_normalized · w (+ b); Gemma's RMSNorm stores w as an offset: · (1 + w).",
               "Loading Gemma's w without the 1 + offset shrinks every row to almost nothing.",
               "Equals hook_normalized when the gain is 1 and the bias 0."),
        "zh": ("归一化加上可学习增益（和偏置）后的输出，下一次矩阵乘法读它。",
               "hook_normalized·w（+b）；Gemma的RMSNorm把w存为偏移量：·(1+w)。",
               "加载Gemma权重时漏掉1+偏移会让每行几乎变成零。", "增益为1、偏置为0时与hook_normalized相同。"),
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
    "hook_softcap": {
        "en": ("Gemma 2's final soft cap: the logits decoding reads stay within (−cap, cap).",
               "cap · tanh(logit / cap) on unembed.hook_out.",
               "Sampling from the uncapped logits gives other probabilities (greedy keeps its order).",
               "|logit| < cap; the argmax is the same as before the cap."),
        "zh": ("Gemma 2最终的软上限：解码读取的logits保持在(−cap, cap)内。", "对unembed.hook_out做cap·tanh(logit/cap)。",
               "用未加上限的logits采样会得到不同概率（贪心顺序不变）。", "|logit|<cap；argmax与上限前相同。"),
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
    "hook_result": {
        "en": ("What this head alone adds to the residual stream.", "z · Wo's rows for this head.",
               "A head's result is not its z: Wo maps it into the residual's features.",
               "The heads' results sum to attn_out (less bo)."),
        "zh": ("本头单独加到残差流的量。", "z × Wo中本头的行。", "头的结果不是z：Wo把它映射到残差特征。",
               "各头结果之和等于attn_out（减去bo）。"),
    },
    "hook_attn_out": {
        "en": ("Mix the heads into the residual stream's features.", "Σ heads' results (+ bo) = concat · Wo (+ bo).",
               "Forgetting Wo only works when Wo = I, as in X01.", "Shape: new tokens × d_model."),
        "zh": ("把各头结果映射回残差特征。", "各头结果之和（+bo）= concat·Wo（+bo）。", "省略Wo只在Wo=I时成立。",
               "形状：新Token数×d_model。"),
    },
    "hook_resid_mid": {
        "en": ("Keep the input and add what attention found.", "x + attention output, elementwise.",
               "The residual adds to this layer's input, not to the embedding.", "Same row, same feature added."),
        "zh": ("保留输入并加上注意力结果。", "x + 注意力输出，逐元素。", "残差加的是本层输入。", "同位置同特征相加。"),
    },
    "hook_dropout": {
        "en": ("Training only: drop features so the model cannot lean on any single one.",
               "Each feature is kept with probability 1−p (a seeded mask) and scaled by 1/(1−p).",
               "Dropout at inference changes the output: it is off unless training is on.",
               "Zeros where the mask dropped; kept cells are the activation divided by 1−p."),
        "zh": ("仅在训练时：随机丢弃特征，避免模型依赖单一特征。", "每个特征以1−p的概率保留（固定种子掩码），并乘以1/(1−p)。",
               "推理时开启dropout会改变输出：除非开启训练模式，否则关闭。", "被丢弃处为0；保留处等于激活值除以1−p。"),
    },
    "hook_pre": {
        "en": ("The FFN's first projection (the gate, for gated FFNs).", "LN(x) · W_in (or W_gate).",
               "The FFN works per position: it never mixes tokens.", "Rows depend only on their own input row."),
        "zh": ("前馈网络的第一次投影（门控时为gate）。", "LN(x)·W_in（或W_gate）。",
               "前馈逐位置计算，不混合Token。", "每行只依赖自己的输入行。"),
    },
    "hook_pre_linear": {
        "en": ("The gated FFN's second projection (up).", "LN(x) · W_up.",
               "Gate and up are separate matrices even when equal here.", "Same shape as the gate."),
        "zh": ("门控前馈的第二个投影（up）。", "LN(x)·W_up。", "gate与up是不同矩阵，即使此处相等。", "形状与gate相同。"),
    },
    "hook_post": {
        "en": ("The nonlinearity that lets the FFN do more than a matrix.",
               "Gated: SiLU(gate) · up; otherwise ReLU / tanh / GELU of the first projection.",
               "SiLU(z)·z is not SiLU(z): the gate multiplies the up projection.", "Zero input gives zero."),
        "zh": ("非线性让前馈不只是矩阵乘法。", "门控：SiLU(gate)×up；否则对第一次投影取ReLU/tanh/GELU。",
               "SiLU(z)·z不等于SiLU(z)。", "输入为0时输出为0。"),
    },
    "hook_mlp_out": {
        "en": ("Project the FFN back to d_model.", "post · W_down (or W_out).",
               "X01's 0.25·I makes each output 0.25·SiLU(z)·z.", "Shape: new tokens × d_model."),
        "zh": ("把前馈结果投影回d_model。", "post·W_down（或W_out）。",
               "X01中0.25·I使输出为0.25×SiLU(z)×z。", "形状：新Token数×d_model。"),
    },
    "hook_resid_post": {
        "en": ("The layer's output: the next layer's input.", "resid_mid + FFN output.",
               "Feeding this vector back as the next token is wrong: the next round starts from E[id].",
               "Cached decode's row equals the full recompute's row (≤ 1e-12)."),
        "zh": ("本层输出，也是下一层输入。", "resid_mid + 前馈输出。",
               "不能把它当作下一轮输入，下一轮从E[编号]开始。", "缓存解码与全量重算一致（≤1e-12）。"),
    },
    "hook_out": {
        "en": ("A score for every vocabulary entry.", "final state · Eᵀ (tied) or · W_U.",
               "Only the last position predicts the next token.", "One column per vocabulary entry."),
        "zh": ("为词表每一项打分。", "最终状态·Eᵀ（绑定）或·W_U。", "只有最后位置用于预测下一个Token。", "每个词表项一列。"),
    },
    "hook_filtered": {
        "en": ("Apply the decode rule's filters before probabilities.",
               "Forbidden tokens → −∞; sampling also divides by temperature and keeps top-k / top-p.",
               "A zero PAD vector does not make PAD's probability zero: it must be forbidden.",
               "Forbidden entries are −∞."),
        "zh": ("在求概率前应用解码规则。", "禁止的Token设为−∞；采样时再除以温度并保留top-k/top-p。",
               "PAD向量为零不会让其概率为零，必须显式禁止。", "被禁止项为−∞。"),
    },
    "hook_probs": {
        "en": ("The next-token distribution.", "softmax over the filtered logits.",
               "Temperature changes this distribution, never the cached K/V.", "Sums to 1; forbidden tokens are 0."),
        "zh": ("下一个Token的分布。", "对过滤后的logits做softmax。", "温度只改变分布，不改变已缓存的K/V。", "和为1，禁止项为0。"),
    },
    "hook_choice": {
        "en": ("Pick the next token: selected, not yet processed.",
               "Greedy: the most probable id; sampling: a seeded draw on the host.",
               "The chosen token has no K/V yet: the cache length does not include it.",
               "Next round feeds exactly this id at position = cache length."),
        "zh": ("选出下一个Token：已选出，尚未处理。", "贪心取最大概率；采样在主机上用固定种子抽取。",
               "刚选出的Token还没有K/V，缓存长度不包含它。", "下一轮在位置=缓存长度处送入此编号。"),
    },
}


def default_language() -> str:
    code = os.environ.get("LC_ALL") or os.environ.get("LANG") or (locale.getlocale()[0] or "")
    return "zh" if code.lower().startswith("zh") else "en"


def explain(frame: Frame, lang: str) -> list[tuple[str, str]]:
    """(heading, text) lines for the frame's operator in `lang`."""
    why, how, pitfall, check, shapes = HEADINGS[lang]
    texts = TEXTS.get(frame.hook, {}).get(lang)
    lines = list(zip((why, how, pitfall, check), texts)) if texts else []
    return lines + [(shapes, _shapes(frame))]


def _shapes(frame: Frame) -> str:
    rows, cols = frame.matrix.values.shape
    output = f"{frame.matrix.name} {rows}×{cols}"
    inputs = ", ".join(f"{operand.name} {'×'.join(map(str, operand.shape))}" for operand in frame.inputs)
    return f"{output} ← {inputs}" if inputs else output
