"""LFM2's short-convolution token mixer: a gated, depthwise causal convolution over a few tokens.

Operator by operator (transformers' Lfm2ShortConv): in_proj makes three d-wide parts B, C and x of each
token (`hook_in`, then `hook_b`, `hook_c`, `hook_x`); B·x (`hook_bx`) goes through the causal conv of
K = conv_L_cache taps over the token and the K−1 before it (`hook_conv`, engine.layers.causal_conv); C
gates it (`hook_y`), and out_proj maps it back into the residual. Its state is the conv window: the last
K−1 values of B·x, a constant size whatever the sequence length. A cached decode step reads the window
(a dot with the taps); a full recompute convolves the whole sequence: the diff holds them equal.
"""

from __future__ import annotations

from typing import Any

from engine.hooks import HookSite
from engine.layers import causal_conv
from engine.layers.causal_conv import KERNEL, ConvFaultPoints, ConvWindow, convolve
from engine.operators import Op, Operand, OpStream, op
from engine.spec import LayerOption, LayerSpec, ModelSpec
from engine.state import StaleCacheError
from engine.trace import OpKind

Array = Any
NAME, MODULE = "short_conv", "conv"
ADDED = "hook_conv_out"  # the hook of what the residual stream adds: its output
# Hugging Face's module of each projection (w·/b· without the letter), GGUF's tensor (under blk.N)
HF = {"lfm2": {"_in": "conv.in_proj", "_out": "conv.out_proj", "_conv": "conv.conv"}}
HF_LAYER_TYPES = {"conv": False}
GGUF = {"conv.w_in": "shortconv.in_proj", "conv.w_conv": "shortconv.conv", "conv.w_out": "shortconv.out_proj"}
PER_HEAD = ()
# a scenario's `kernel: K`, the conv's taps (without one: LFM2's conv_L_cache, 3)
LAYER_OPTIONS = {KERNEL: LayerOption(parse=lambda node, context: node.integer(minimum=1), default=3,
                                     elsewhere="scenario.no_convolution")}
PARTS = ("hook_b", "hook_c", "hook_x")  # in_proj's output, in its column order
HOOKS = ("hook_in", *PARTS, "hook_bx", "hook_conv", "hook_y")


class FaultPoints(ConvFaultPoints):
    """Where an injected bug may change it: how the conv window moves (engine.layers.causal_conv)."""


BUGS = causal_conv.BUGS
CAUSES = {"en": {**causal_conv.CAUSES["en"], "scenario.no_convolution": "a {mixer} layer has no convolution"},
          "zh": {**causal_conv.CAUSES["zh"], "scenario.no_convolution": "{mixer} 层没有卷积"}}  # the kernel: refused
DUMP_LAYOUTS = causal_conv.DUMP_LAYOUTS


def parameter_shapes(model: ModelSpec, layer: int, block: LayerSpec) -> dict[str, tuple[int, ...]]:
    prefix, d = f"blocks.{layer}.{MODULE}", model.d_model
    shapes = {f"{prefix}.w_in": (d, 3 * d), f"{prefix}.w_conv": (block.option(KERNEL), d), f"{prefix}.w_out": (d, d)}
    if model.has_bias("conv"):
        shapes.update({f"{prefix}.b_in": (3 * d,), f"{prefix}.b_conv": (d,), f"{prefix}.b_out": (d,)})
    return shapes


def hf_tensor(leaf: str, tensors) -> Array:
    """Its parameter `leaf` from a Hugging Face block (`tensors`: an engine.loading.hf.BlockTensors); the conv, a
    depthwise Conv1d stored (channels, 1, K), as its taps (K, channels)."""
    module = tensors.table(HF)[leaf[1:]]
    if leaf == "w_conv":
        return tensors.get(f"{module}.weight")[:, 0, :].T
    return tensors.projection(leaf, module)

def hook_widths(model: ModelSpec) -> dict[str, int]:
    return {f"{MODULE}.{name}": (3 if name == "hook_in" else 1) * model.d_model for name in HOOKS}


def hooks(model: ModelSpec, layer: int, block: LayerSpec, hook, norm_sites) -> list[HookSite]:
    return [HookSite(hook(layer, MODULE, name)) for name in HOOKS]


# What each of its operators computes, en and zh (why, how, pitfall, check): the views file it under the
# hook name's last part (tinyllm_tui.debugger.frame.hook_key) beside the stack's own texts, the conv under
# conv.hook_conv (Gated DeltaNet's linear_attn.hook_conv is another computation: the conv, then SiLU).
EXPLANATIONS: dict[str, dict[str, tuple[str, str, str, str]]] = {
    ADDED: {
        "en": ("Map the gated convolution back into the residual stream's features.",
               "y · W_out (+ b_out) (Hugging Face: conv.out_proj).",
               "It projects y, the conv after C's gate: projecting the conv itself skips the gate.",
               "Shape: new tokens × d_model; hook_resid_mid = hook_resid_pre + this row."),
        "zh": ("把门控后的卷积结果映射回残差特征。", "y·W_out（+b_out）（Hugging Face中为conv.out_proj）。",
               "投影的是经C门控后的y：直接投影卷积输出会跳过门控。", "形状：新Token数×d_model；hook_resid_mid = hook_resid_pre + 这一行。"),
    },
    "hook_in": {
        "en": ("One projection makes the three parts of the short convolution: B, C and x.",
               "LN(x) · W_in (Hugging Face: conv.in_proj), 3·d columns: B, then C, then x.",
               "The order is B, C, x: splitting it as x, B, C gates the wrong parts.",
               "Width = 3 × d_model; the next three operators are its thirds."),
        "zh": ("一次投影得到短卷积的三部分：B、C和x。", "LN(x)·W_in（Hugging Face中为conv.in_proj），3·d列：依次为B、C、x。",
               "顺序是B、C、x：按x、B、C切分会门控错误的部分。", "宽度=3×d_model；后面三个算子是它的三等分。"),
    },
    "hook_b": {
        "en": ("B gates what each token writes into the convolution.", "The first d columns of in_proj's output.",
               "B multiplies x before the conv; C multiplies after it.", "Equals hook_in's columns 0…d−1."),
        "zh": ("B门控每个Token写入卷积的内容。", "in_proj输出的前d列。", "B在卷积之前乘x；C在卷积之后。", "等于hook_in的第0…d−1列。"),
    },
    "hook_c": {
        "en": ("C gates what each token reads out of the convolution.", "The middle d columns of in_proj's output.",
               "C is the current token's own: it is not convolved.", "Equals hook_in's columns d…2d−1."),
        "zh": ("C门控每个Token从卷积读出的内容。", "in_proj输出的中间d列。", "C属于当前Token本身，不参与卷积。",
               "等于hook_in的第d…2d−1列。"),
    },
    "hook_x": {
        "en": ("x is the content the convolution mixes across tokens.", "The last d columns of in_proj's output.",
               "x alone is not what the conv window holds: it holds B·x.", "Equals hook_in's columns 2d…3d−1."),
        "zh": ("x是卷积在Token之间混合的内容。", "in_proj输出的最后d列。", "卷积窗口保存的不是x，而是B·x。",
               "等于hook_in的第2d…3d−1列。"),
    },
    "hook_bx": {
        "en": ("The gated input of the convolution: what enters the conv window.", "B ⊙ x, feature by feature.",
               "The window keeps B·x of the last K−1 tokens, not their hidden states.",
               "The conv window's newest row equals this row after the step."),
        "zh": ("卷积的门控输入：写入卷积窗口的内容。", "B ⊙ x，逐特征相乘。", "窗口保存最近K−1个Token的B·x，而不是隐藏状态。",
               "本步之后卷积窗口最新一行等于这一行。"),
    },
    f"{MODULE}.hook_conv": {
        "en": ("Mix each feature over the token and the K−1 before it (a depthwise causal convolution).",
               "y_t = Σ_k w[k] ⊙ (B·x)_{t−K+1+k} per feature (+ bias); decode reads the K−1 earlier rows from the "
               "conv window, a full recompute from the sequence (zeros before the first token).",
               "The window must shift by exactly one row per token: not shifting, or shifting twice, reads the "
               "wrong earlier inputs in the next round.",
               "A cached decode equals the full recompute's last row; the conv window's rows are the last K−1 B·x rows."),
        "zh": ("对每个特征在当前Token及其前K−1个Token上做混合（逐通道因果卷积）。",
               "每个特征y_t = Σ_k w[k] ⊙ (B·x)_{t−K+1+k}（加偏置）；解码从卷积窗口读前K−1行，全量重算从序列读（首个Token之前为0）。",
               "窗口每个Token必须恰好移动一行：不移动或移动两次，下一轮就会读到错误的历史输入。",
               "缓存解码等于全量重算的最后一行；卷积窗口的各行是最近K−1个B·x。"),
    },
    "hook_y": {
        "en": ("C gates the convolution's output: each token reads what it needs.", "C ⊙ conv, feature by feature.",
               "The gate is C of the current token, applied after the conv, not before.",
               "Zero where C is zero; out_proj maps it into the residual next."),
        "zh": ("C门控卷积输出：每个Token读出所需的内容。", "C ⊙ conv，逐特征相乘。", "门是当前Token的C，在卷积之后而不是之前。",
               "C为0处为0；随后out_proj把它映射回残差。"),
    },
}


class ShortConv:
    """One layer's short convolution, made once per model: its parameter names and hooks are resolved here."""

    def __init__(self, model, layer: int, block: LayerSpec):
        self.model, self.layer, self.block = model, layer, block
        self.prefix = f"blocks.{layer}.{MODULE}"
        self.hooks = {name: model.hook(layer, MODULE, name) for name in HOOKS}
        self.window_name = model.hook(layer, MODULE, "conv_state").text  # the window as its dump names it

    def fresh_state(self) -> ConvWindow:
        model = self.model
        return ConvWindow.empty(model.xp, self.block.option(KERNEL), model.spec.d_model, model.backend.dtype,
                                model.fingerprint, MODULE)

    def forward(self, h: Op, states: list, positions: list[int], padded_keys: list[bool] | None, out) -> OpStream:
        model, hooks, p, d = self.model, self.hooks, self.prefix, self.model.spec.d_model
        projected = model.linear(hooks["hook_in"], h, f"{p}.w_in", f"{p}.b_in")
        yield projected
        b, c, x = (op(hooks[name], projected.values[:, i * d:(i + 1) * d], OpKind.LINEAR, inputs=(projected,))
                   for i, name in enumerate(PARTS))
        yield b
        yield c
        yield x
        bx = op(hooks["hook_bx"], b.values * x.values, OpKind.ACTIVATION, inputs=(b, x))
        yield bx
        conv = self._conv(bx, states, padded_keys)
        yield conv
        y = op(hooks["hook_y"], c.values * conv.values, OpKind.ACTIVATION, inputs=(c, conv))
        yield y
        total = model.linear(out, y, f"{p}.w_out", f"{p}.b_out")
        yield total
        return total

    def _conv(self, bx: Op, states: list, padded_keys: list[bool] | None) -> Op:
        """The conv of B·x read after the layer's window, which it replaces with the window to keep."""
        model, p = self.model, self.prefix
        window = states[self.layer]
        if window.fingerprint != model.fingerprint and not model.allow_stale:
            raise StaleCacheError(f"the conv window was computed with weights {window.fingerprint}, "
                                  f"the model now has {model.fingerprint}")
        count = int(bx.values.shape[0])
        read = window.extend(model.xp, bx.values, model.fault, padded_keys[-count:] if padded_keys else None)
        states[self.layer] = read.state
        rows = Operand(self.window_name, read.rows, rows=read.positions)
        weight = model.param(f"{p}.w_conv")
        bias = model.param(f"{p}.b_conv") if f"{p}.b_conv" in model.weights else None
        values = convolve(model.xp, read.rows, weight.values, None if bias is None else bias.values)
        inputs = (rows, weight) if bias is None else (rows, weight, bias)
        return op(self.hooks["hook_conv"], values, OpKind.MIX, inputs=inputs)


Layer = ShortConv
