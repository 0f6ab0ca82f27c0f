"""Gemma 4's per-layer input embeddings (PLE) and its layer scalar: what a block adds after its FFN.

Once per pass, from the token ids and the embedded rows (`inputs`): a packed table of [vocab, layers × p] rows
times √p (`hook_per_layer_embed`, the token's identity), the embedded rows projected to layers × p times
d_model^-½ (`hook_per_layer_proj`, the context) and RMS-normalized per layer (`ln_per_layer`), the two summed
times 2^-½ (`hook_per_layer_inputs`). Then in block L (`Tail`), after the FFN's residual x: its p columns
(`hook_per_layer_input`), gelu(x · w_gate) ⊙ them (`hook_per_layer_gated`), · w_proj back to d_model
(`hook_per_layer_projected`), an RMSNorm (ln3_post), added to x; and the block's output times its scalar. It keeps no state between tokens.
"""

from __future__ import annotations

from typing import Any

from engine import ops
from engine.hooks import HookSite
from engine.operators import Op, OpStream, op
from engine.spec import ModelSpec
from engine.trace import OpKind

Array = Any
FFN_RESIDUAL = "hook_resid_post_mlp"  # the FFN's residual sum, where the block's output is not yet
HF = {"per_layer_embed": "embed_tokens_per_layer.weight", "per_layer_proj": "per_layer_model_projection.weight",
      "ln_per_layer.w": "per_layer_projection_norm.weight"}  # outside the blocks; within: HF_BLOCK
HF_BLOCK = {"per_layer.w_gate": "per_layer_input_gate.weight", "per_layer.w_proj": "per_layer_projection.weight",
            "ln3_post.w": "post_per_layer_input_norm.weight", "layer_scalar": "layer_scalar"}
GGUF = {"per_layer_embed": "per_layer_token_embd", "per_layer_proj": "per_layer_model_proj",
        "ln_per_layer.w": "per_layer_proj_norm"}
GGUF_BLOCK = {"per_layer.w_gate": "inp_gate", "per_layer.w_proj": "proj", "ln3_post.w": "post_norm",
              "layer_scalar": "layer_output_scale"}


def parameter_shapes(model: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Its parameters outside the blocks (the table's rows are the vocabulary's: `vocab` stands for it)."""
    p, layers = model.per_layer_input, model.n_layers
    if not p:
        return {}
    return {"per_layer_embed": ("vocab", layers * p), "per_layer_proj": (model.d_model, layers * p),
            "ln_per_layer.w": (p,)}


def block_shapes(model: ModelSpec, layer: int) -> dict[str, tuple[int, ...]]:
    prefix, p, d = f"blocks.{layer}", model.per_layer_input, model.d_model
    shapes = {f"{prefix}.per_layer.w_gate": (d, p), f"{prefix}.per_layer.w_proj": (p, d),
              f"{prefix}.ln3_post.w": (d,)} if p else {}
    return shapes | ({f"{prefix}.layer_scalar": (1,)} if model.layer_scalar else {})


def hooks(model: ModelSpec, hook, norm_sites) -> list[HookSite]:
    """What the pass yields once, after the embedding."""
    if not model.per_layer_input:
        return []
    return ([HookSite(hook(None, "", "hook_per_layer_embed")), HookSite(hook(None, "", "hook_per_layer_proj"))]
            + norm_sites(None, "ln_per_layer") + [HookSite(hook(None, "", "hook_per_layer_inputs"))])


def block_hooks(model: ModelSpec, layer: int, hook, norm_sites) -> list[HookSite]:
    sites = []
    if model.per_layer_input:
        sites = [HookSite(hook(layer, "", "hook_per_layer_input"))]
        sites += [HookSite(hook(layer, "", name)) for name in ("hook_per_layer_gate", "hook_per_layer_gated",
                                                              "hook_per_layer_projected")]
        sites += norm_sites(layer, "ln3_post", hook(layer, "", "hook_per_layer_out"))
        sites += [HookSite(hook(layer, "", "hook_resid_post_ple"))]
    return sites + ([HookSite(hook(layer, "", "hook_resid_post"))] if model.layer_scalar else [])


def has_tail(model: ModelSpec) -> bool:
    return bool(model.per_layer_input or model.layer_scalar)


def inputs(model, ids: list[int], embedded: Op) -> OpStream:
    """Every layer's input embedding for the chunk, (T, layers × p): the pass's once (`model`: the Transformer)."""
    spec, hook = model.spec, model.hook
    p, layers = spec.per_layer_input, spec.n_layers
    table, rows = model.table_rows("per_layer_embed", ids)
    rows = rows * p**0.5
    identity = op(hook(None, "", "hook_per_layer_embed"), rows, OpKind.EMBED, inputs=(table,))
    yield identity
    w = model.param("per_layer_proj")
    context = op(hook(None, "", "hook_per_layer_proj"), (embedded.values @ w.values) * spec.d_model**-0.5,
                 OpKind.LINEAR, inputs=(embedded, w))
    yield context
    context = yield from model.norm(None, "ln_per_layer", context, heads=layers)
    total = op(hook(None, "", "hook_per_layer_inputs"), (context.values + identity.values) * 2.0**-0.5,
               OpKind.RESIDUAL, inputs=(context, identity))
    yield total
    return total


class Tail:
    """Block `layer`'s end: its per-layer input gated into the residual, then the layer scalar."""

    def __init__(self, model, layer: int):
        self.model, self.layer, self.spec = model, layer, model.spec
        hook = model.hook
        self.hooks = {name: hook(layer, "", name) for name in (
            "hook_per_layer_input", "hook_per_layer_gate", "hook_per_layer_gated", "hook_per_layer_projected",
            "hook_per_layer_out", "hook_resid_post_ple", "hook_resid_post")}

    def forward(self, x: Op, per_layer: Op | None) -> OpStream:
        model, spec, hooks, prefix = self.model, self.spec, self.hooks, f"blocks.{self.layer}"
        if spec.per_layer_input:
            p = spec.per_layer_input
            mine = op(hooks["hook_per_layer_input"], per_layer.values[:, self.layer * p:(self.layer + 1) * p],
                      OpKind.EMBED, inputs=(per_layer,))
            yield mine
            gate = model.linear(hooks["hook_per_layer_gate"], x, f"{prefix}.per_layer.w_gate", None)
            yield gate
            gated = op(hooks["hook_per_layer_gated"], ops.gelu_tanh(model.xp, gate.values) * mine.values, OpKind.ACTIVATION,
                       inputs=(gate, mine))
            yield gated
            out = model.linear(hooks["hook_per_layer_projected"], gated, f"{prefix}.per_layer.w_proj", None)
            yield out
            out = yield from model.norm(self.layer, "ln3_post", out, out=hooks["hook_per_layer_out"])
            x = op(hooks["hook_resid_post_ple"], x.values + out.values, OpKind.RESIDUAL, inputs=(x, out))
            yield x
        if spec.layer_scalar:
            scalar = model.param(f"{prefix}.layer_scalar")
            x = op(hooks["hook_resid_post"], x.values * scalar.values, OpKind.RESIDUAL, inputs=(x, scalar))
            yield x
        return x


# What each of its operators computes, en and zh (why, how, pitfall, check), filed under the hook name's last part.
EXPLANATIONS: dict[str, dict[str, tuple[str, str, str, str]]] = {
    "hook_per_layer_embed": {
        "en": ("Gemma 4 gives every layer an input of its own for each token: this is the token's part.",
               "A row of the packed [vocab, layers × p] table (per_layer_embed) times √p; layer L's p columns "
               "are L·p…(L+1)·p.",
               "The row is the token's own: in a cached decode step it is the new token's, not the previous one's.",
               "Equal tokens have equal rows; width = layers × p."),
        "zh": ("Gemma 4给每层、每个Token一份自己的输入：这是Token本身的部分。",
               "打包表[vocab, layers×p]（per_layer_embed）中的一行乘以√p；第L层取第L·p…(L+1)·p列。",
               "这一行属于当前Token：缓存解码时是新Token的行，而不是前一个Token的。", "相同Token的行相同；宽度=层数×p。"),
    },
    "hook_per_layer_proj": {
        "en": ("The context's part of each layer's input: the embedded row seen through a projection.",
               "embedded row · per_layer_proj ([d_model, layers × p]) times d_model^-½.",
               "It reads the scaled embedding (×√d_model), not the raw table row.",
               "Width = layers × p; each layer's slice is then RMS-normalized on its own."),
        "zh": ("每层输入中来自上下文的部分：嵌入行经过一个投影。", "嵌入行·per_layer_proj（[d_model, layers×p]）再乘以d_model^-½。",
               "它读的是缩放后的嵌入（×√d_model），不是原始表行。", "宽度=层数×p；之后每层的切片各自做RMS归一化。"),
    },
    "hook_per_layer_inputs": {
        "en": ("Every layer's input embedding for this token, the two parts combined.",
               "(RMSNorm per layer of the projection + the table row) · 2^-½.",
               "Summing without the 2^-½, or normalizing the whole row at once, changes every layer.",
               "Layer L's block reads columns L·p…(L+1)·p (blocks.L.hook_per_layer_input)."),
        "zh": ("每层对这个Token的输入嵌入，两部分合在一起。", "（投影按层RMSNorm + 表行）·2^-½。",
               "少了2^-½，或把整行一起归一化，都会改变每一层。", "第L层读取第L·p…(L+1)·p列（blocks.L.hook_per_layer_input）。"),
    },
    "hook_per_layer_input": {
        "en": ("This layer's own slice of the per-layer inputs.", "Columns L·p…(L+1)·p of hook_per_layer_inputs.",
               "Taking another layer's slice mixes the layers up.", "Width p (hidden_size_per_layer_input)."),
        "zh": ("本层自己的每层输入切片。", "hook_per_layer_inputs的第L·p…(L+1)·p列。", "取错层的切片会把各层混在一起。",
               "宽度为p（hidden_size_per_layer_input）。"),
    },
    "hook_per_layer_gate": {
        "en": ("How much of its per-layer input the residual lets in.", "residual after the FFN · per_layer.w_gate "
               "([d_model, p]).", "The gate reads the residual, not the per-layer input.", "Width p."),
        "zh": ("残差让多少每层输入进来。", "FFN之后的残差·per_layer.w_gate（[d_model, p]）。", "门读的是残差，不是每层输入。", "宽度为p。"),
    },
    "hook_per_layer_gated": {
        "en": ("The per-layer input under its gate.", "gelu_tanh(gate) ⊙ per-layer input.",
               "gelu of the product is not the product with the gelu.", "Zero where the per-layer input is zero."),
        "zh": ("门控后的每层输入。", "gelu_tanh(门)⊙每层输入。", "乘积的gelu不等于gelu再相乘。", "每层输入为0处结果为0。"),
    },
    "hook_per_layer_projected": {
        "en": ("The gated per-layer input mapped back to the residual's width.", "gated · per_layer.w_proj ([p, d_model]).",
               "Its norm (ln3_post) follows: this is not yet what the residual adds.", "Width d_model."),
        "zh": ("门控后的每层输入映射回残差宽度。", "门控结果·per_layer.w_proj（[p, d_model]）。",
               "之后还有归一化（ln3_post）：这还不是加到残差上的量。", "宽度为d_model。"),
    },
    "hook_per_layer_out": {
        "en": ("What the per-layer input adds to the residual stream.",
               "gated · per_layer.w_proj ([p, d_model]), RMS-normalized with its gain ln3_post.w.",
               "The norm comes after the projection, as Gemma's post-norms do.", "Added to hook_resid_post_mlp."),
        "zh": ("每层输入加到残差流的量。", "门控结果·per_layer.w_proj（[p, d_model]），再经带增益ln3_post.w的RMSNorm。",
               "归一化在投影之后，与Gemma的后置归一化一样。", "加到hook_resid_post_mlp上。"),
    },
    "hook_resid_post_mlp": {
        "en": ("The residual stream after the FFN, before this layer's per-layer input.", "x + ln2_post(FFN(ln2(x))).",
               "In Gemma 4 this is not yet the block's output.", "Then the per-layer input and the layer scalar follow."),
        "zh": ("FFN之后、本层每层输入之前的残差流。", "x + ln2_post(FFN(ln2(x)))。", "在Gemma 4中这还不是块的输出。",
               "之后还有每层输入和层缩放。"),
    },
    "hook_resid_post_ple": {
        "en": ("The residual stream with the per-layer input added.", "hook_resid_post_mlp + hook_per_layer_out.",
               "The layer scalar still follows.", "Equals the sum of its two inputs."),
        "zh": ("加上每层输入之后的残差流。", "hook_resid_post_mlp + hook_per_layer_out。", "之后还有层缩放。", "等于两个输入之和。"),
    },
}
