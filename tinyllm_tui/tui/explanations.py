"""What each operator computes, in English and Chinese.

Each entry follows the seeds' four questions: why it is needed, how it is done,
the usual mistake, and how to tell it was done right.
"""

from __future__ import annotations

import locale
import os

from tinyllm_tui.debugger.frame import Frame, explanation_texts

HEADINGS = {
    "en": ("Why", "How", "Pitfall", "Check", "Shapes"),
    "zh": ("为什么需要", "怎样实现", "可能的代价与误解", "如何判断是否做对", "形状"),
}

# Keyed by the last part of the hook name: (why, how, pitfall, check) per language. The stack's own operators
# (embedding, norms, residual sums, head, decoding); each layer kind's are in its module (engine.layers).
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
    "hook_token_type_embed": {
        "en": ("BERT's segment term: which sentence of a pair each token belongs to.",
               "Row 0 of the token-type table for every token (a single segment), added to the embeddings.",
               "It is added to every row, not only the first: leaving it out shifts every position alike.",
               "Every row equals the token-type table's row 0."),
        "zh": ("BERT的句段项：每个Token属于句对中的哪一句。", "每个Token取句段表的第0行（单一句段），加到Embedding上。",
               "它加到每一行，而不只是第一行：漏掉它会让每个位置同样偏移。", "每行都等于句段表的第0行。"),
    },
    "hook_sum": {
        "en": ("The summed embeddings, before the embedding norm.",
               "token embedding + position term (+ token-type term), elementwise.",
               "The embedding norm reads this sum, not the token embedding alone.",
               "Row = hook_embed + hook_pos_embed (+ hook_token_type_embed)."),
        "zh": ("Embedding归一化之前的各项之和。", "Token向量 + 位置项（+ 句段项），逐元素相加。",
               "Embedding归一化读取的是这个和，而不只是Token向量。", "每行=hook_embed + hook_pos_embed（+ hook_token_type_embed）。"),
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
    "hook_softcap": {
        "en": ("Gemma 2's final soft cap: the logits decoding reads stay within (−cap, cap).",
               "cap · tanh(logit / cap) on unembed.hook_out.",
               "Sampling from the uncapped logits gives other probabilities (greedy keeps its order).",
               "|logit| < cap; the argmax is the same as before the cap."),
        "zh": ("Gemma 2最终的软上限：解码读取的logits保持在(−cap, cap)内。", "对unembed.hook_out做cap·tanh(logit/cap)。",
               "用未加上限的logits采样会得到不同概率（贪心顺序不变）。", "|logit|<cap；argmax与上限前相同。"),
    },
    "hook_resid_mid": {
        "en": ("Keep the input and add what the layer's token mixer computed (attention, a convolution, a "
               "recurrent state's read).", "x + the mixer's output (hook_<mixer>_out), elementwise.",
               "The residual adds to this layer's input, not to the embedding.", "Same row, same feature added."),
        "zh": ("保留输入并加上本层Token混合器（注意力、卷积或循环状态的读出）的结果。", "x + 混合器输出（hook_<混合器>_out），逐元素。",
               "残差加的是本层输入。", "同位置同特征相加。"),
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


def texts_of(key: str) -> dict[str, tuple[str, ...]] | None:
    """Every language's texts of the operator filed under `key`: the stack's, or its layer kind's."""
    return TEXTS.get(key) or explanation_texts(key)


def explain(frame: Frame, lang: str) -> list[tuple[str, str]]:
    """(heading, text) lines for the frame's operator in `lang`."""
    why, how, pitfall, check, shapes = HEADINGS[lang]
    texts = (texts_of(frame.hook) or {}).get(lang)
    lines = list(zip((why, how, pitfall, check), texts)) if texts else []
    return lines + [(shapes, _shapes(frame))]


def _shapes(frame: Frame) -> str:
    rows, cols = frame.matrix.values.shape
    output = f"{frame.matrix.name} {rows}×{cols}"
    inputs = ", ".join(f"{operand.name} {'×'.join(map(str, operand.shape))}" for operand in frame.inputs)
    return f"{output} ← {inputs}" if inputs else output
