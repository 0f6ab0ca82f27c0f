"""The dense FFN: x·W_in through an activation, then ·W_out; gated (SwiGLU, GeGLU): act(x·W_gate) ⊙ x·W_up.

Keeps no state between tokens. Dropout (training only) draws its mask per (seed, layer, position) on
the host, so that a cached run and a full recompute drop the same features.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import ops
from engine.hooks import HookSite
from engine.operators import Op, OpStream, op
from engine.spec import FfnKind, LayerSpec, ModelSpec
from engine.trace import OpKind

Array = Any
NAME, MODULE = "dense", "mlp"
ADDED = "hook_mlp_out"  # the hook of what the residual stream adds: its output
HF = {"llama": {"_gate": "mlp.gate_proj", "_up": "mlp.up_proj", "_down": "mlp.down_proj"},
      "lfm2": {"_gate": "feed_forward.w1", "_up": "feed_forward.w3", "_down": "feed_forward.w2"},
      "phi3": {"_gate_up": "mlp.gate_up_proj", "_down": "mlp.down_proj"},  # _gate_up: gate | up side by side
      "gpt2": {"_in": "mlp.c_fc", "_out": "mlp.c_proj"},
      "bert": {"_in": "intermediate.dense", "_out": "output.dense"}}
HF_LAYER_TYPES: dict[str, bool] = {}
PER_HEAD = ()
GGUF = {"mlp.w_gate": "ffn_gate", "mlp.w_up": "ffn_up", "mlp.w_down": "ffn_down"}


def parameter_shapes(model: ModelSpec, layer: int, block: LayerSpec) -> dict[str, tuple[int, ...]]:
    prefix, d, f = f"blocks.{layer}.mlp", model.d_model, block.d_ff or model.d_ff
    if FfnKind(model.ffn).gated:
        shapes = {f"{prefix}.w_gate": (d, f), f"{prefix}.w_up": (d, f), f"{prefix}.w_down": (f, d)}
        biases = {f"{prefix}.b_gate": (f,), f"{prefix}.b_up": (f,), f"{prefix}.b_down": (d,)}
    else:
        shapes = {f"{prefix}.w_in": (d, f), f"{prefix}.w_out": (f, d)}
        biases = {f"{prefix}.b_in": (f,), f"{prefix}.b_out": (d,)}
    return shapes | biases if model.has_bias("mlp") else shapes


def hf_tensor(leaf: str, tensors) -> Array:
    """Its parameter `leaf` from a Hugging Face block (`tensors`: an engine.loading.hf.BlockTensors); a fused
    `_gate_up` module (Phi-3's) holds the gate's and the up projection's columns side by side."""
    table, f = tensors.table(HF), tensors.spec.d_ff
    if "_gate_up" in table and leaf in ("w_gate", "w_up"):
        fused = tensors.linear(table["_gate_up"])
        return fused[:, :f] if leaf == "w_gate" else fused[:, f:2 * f]
    return tensors.projection(leaf, table[leaf[1:]])

def hook_widths(model: ModelSpec) -> dict[str, int]:
    """Its hooks' columns where every dense layer has the same width (Gemma 4's KV-shared layers' are double)."""
    widths = {block.d_ff or model.d_ff for block in model.blocks if block.ffn == NAME}
    width = widths.pop() if len(widths) == 1 else None
    return {} if width is None else {"mlp.hook_pre": width, "mlp.hook_post": width}


def hooks(model: ModelSpec, layer: int, block: LayerSpec, hook, norm_sites) -> list[HookSite]:
    names = ["hook_pre"] + (["hook_pre_linear"] if FfnKind(model.ffn).gated else []) + ["hook_post"]
    names += ["hook_dropout"] if model.training and model.dropout > 0 else []
    return [HookSite(hook(layer, MODULE, name)) for name in names]


# What each of its operators computes, en and zh (why, how, pitfall, check): the views file it under the
# hook name's last part (tinyllm_tui.debugger.frame.hook_key) beside the stack's own texts.
EXPLANATIONS: dict[str, dict[str, tuple[str, str, str, str]]] = {
    ADDED: {
        "en": ("Project the FFN back to d_model.", "post · W_down (or W_out).",
               "X01's 0.25·I makes each output 0.25·SiLU(z)·z.", "Shape: new tokens × d_model."),
        "zh": ("把前馈结果投影回d_model。", "post·W_down（或W_out）。",
               "X01中0.25·I使输出为0.25×SiLU(z)×z。", "形状：新Token数×d_model。"),
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
}


class FaultPoints:
    """It has none: nothing it computes is kept, so no cache bug can reach it."""


BUGS: tuple[type, ...] = ()


class DenseFfn:
    def __init__(self, model, layer: int, block: LayerSpec):
        self.model, self.layer, self.spec = model, layer, model.spec
        self.prefix = p = f"blocks.{layer}.mlp"
        self.hooks = {name: model.hook(layer, MODULE, name)
                      for name in ("hook_pre", "hook_pre_linear", "hook_post", "hook_dropout")}
        self.gated = FfnKind(self.spec.ffn).gated
        self.down = (f"{p}.w_down", f"{p}.b_down") if self.gated else (f"{p}.w_out", f"{p}.b_out")

    def fresh_state(self):
        return None  # nothing kept between tokens

    def forward(self, h: Op, states: list, positions: list[int], padded_keys, out) -> OpStream:
        model, spec, hooks, p = self.model, self.spec, self.hooks, self.prefix
        if self.gated:
            gate = model.linear(hooks["hook_pre"], h, f"{p}.w_gate", f"{p}.b_gate")
            up = model.linear(hooks["hook_pre_linear"], h, f"{p}.w_up", f"{p}.b_up")
            yield gate
            yield up
            post = op(hooks["hook_post"], self._activation(gate.values) * up.values, OpKind.ACTIVATION,
                      inputs=(gate, up))
        else:
            pre = model.linear(hooks["hook_pre"], h, f"{p}.w_in", f"{p}.b_in")
            yield pre
            post = op(hooks["hook_post"], self._activation(pre.values), OpKind.ACTIVATION, inputs=(pre,))
        yield post
        if spec.training and spec.dropout > 0:
            post = self._dropout(post, positions)
            yield post
        total = model.linear(out, post, *self.down)
        yield total
        return total

    def _dropout(self, post: Op, positions: list[int]) -> Op:
        spec = self.spec
        width = post.values.shape[1]
        keep = np.stack([np.random.default_rng([spec.dropout_seed, self.layer, p]).random(width) >= spec.dropout
                         for p in positions])
        scale = self.model.backend.asarray(keep / (1.0 - spec.dropout))
        return op(self.hooks["hook_dropout"], post.values * scale, OpKind.DROPOUT, inputs=(post,))

    def _activation(self, x: Array) -> Array:
        xp, kind = self.model.xp, FfnKind(self.spec.ffn)
        if kind == FfnKind.GATED_SILU:
            return ops.silu(xp, x)
        if kind == FfnKind.RELU:
            return ops.relu(xp, x)
        if kind == FfnKind.TANH:
            return xp.tanh(x)
        if kind in (FfnKind.GELU_TANH, FfnKind.GATED_GELU_TANH):
            return ops.gelu_tanh(xp, x)
        return ops.gelu_from_erf(x, self.model.backend.erf(x / 2**0.5))


Layer = DenseFfn
