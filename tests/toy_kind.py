"""A layer kind written for the tests, registered at test time: a token mixer that mixes by a running mean.

y_t = g ⊙ mean(h_0 … h_t): its state is one row, the sum of every token fed so far, and the count; no K/V,
no positions. It proves a new kind (operators, parameter, hooks, state, views, dump, compare, time travel, a
fault point and the bug that changes it, a breakpoint condition, how the cache view words its state, in en and zh, a
per-layer option a scenario's `layers:` gives it) is this one module plus one registry line (`MIXERS["mean"] =
toy_kind`), nothing else touched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from engine.hooks import HookSite
from engine.operators import op
from engine.spec import LayerOption
from engine.state import StateView
from engine.trace import OpKind

NAME, MODULE = "mean", "mean"
ADDED = "hook_mean_out"  # the hook of what the residual stream adds: its output
HF: dict = {}
HF_LAYER_TYPES: dict = {}
GGUF: dict = {}
PER_HEAD = ()
# `layers: [{mixer: mean, scale: 3}]`: the factor of its output (without one: 1)
LAYER_OPTIONS = {"scale": LayerOption(parse=lambda node, context: node.integer(minimum=1), default=1)}
EXPLANATIONS = {"hook_running_mean": {
    "en": ("Mix tokens by their running mean.", "sum of the tokens so far / their count.",
           "Forgetting the count grows the values with the sequence.", "Row t is the mean of rows 0..t."),
    "zh": ("用累计均值混合Token。", "到目前为止的Token之和除以个数。", "忘记除以个数会让数值随序列增长。", "第t行是0..t行的均值。")},
    ADDED: {
    "en": ("What the residual adds: the mean, scaled per feature.", "g ⊙ mean × the layer's scale.",
           "The gain is per feature, not one number.", "Zero where g is zero."),
    "zh": ("残差加上的内容：按特征缩放的均值。", "g ⊙ 均值 × 本层的scale。", "增益按特征给出，不是一个数。", "g为0处为0。")}}


class FaultPoints:
    """Where an injected bug may change it: the sum it keeps for the next round (the correct answer here)."""

    def kept_sum(self, total, last):
        """The sum kept after a chunk: `total`, of every token so far (`last`: the chunk's last token's row)."""
        return total


class SumForgotten:
    """The bug (sum-forgotten): the state keeps the chunk's last row for its sum, not the sum of every row."""

    def kept_sum(self, total, last):
        return last

    def unseen(self, scenario):
        return None if any(len(r.tokens) > 1 for r in scenario.requests) else ("fault.one_prompt_token", {})


BUGS = (SumForgotten,)


def _counted_over(count: int):
    return lambda state: state.op.hook.name == "hook_running_mean" and state.caches[state.layer].count > count


# `mean_count>N`: a running mean over more than N tokens
BREAKPOINTS = ((r"mean_count>(.+)", "mean_count>N", ("index", "breakpoint.number"), _counted_over),)
CAUSES = {"en": {"fault.one_prompt_token": "every prompt is one token",  # its bug's words, then its state's
                 "cache.mean": "a running mean of {count} tokens: one row, their sum", "view.sum": "sum",
                 "cache.where.mean": "running mean · layer {layer} of 0–{last_layer}"},
          "zh": {"fault.one_prompt_token": "每个提示都只有一个Token",
                 "cache.mean": "{count} 个Token的累计均值：一行，即它们的和", "view.sum": "累计和",
                 "cache.where.mean": "累计均值 · 第 {layer} 层（0–{last_layer}）"}}


@dataclass(frozen=True)
class Counted:
    """What the cache view shows beside its one row: it counts the tokens fed (it holds no row of each)."""

    count: int
    fed: ClassVar[bool] = True
    heading: ClassVar[str] = "cache.where.mean"  # the panel's heading, worded by CAUSES

    def words(self) -> tuple[str, dict]:
        return "cache.mean", {"count": self.count}  # the line beside its row, worded by CAUSES


@dataclass(frozen=True, eq=False)
class RunningSum:
    """The kind's LayerState: one row, the sum of the `count` tokens fed."""

    total: Any  # (1, d_model)
    count: int
    fingerprint: str
    module: ClassVar[str] = MODULE

    @property
    def length(self) -> int:
        return self.count

    @property
    def seen(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        return int(self.total.nbytes)

    @property
    def row_positions(self) -> tuple[int, ...]:
        return (self.count - 1,)  # the one row stands for the last token fed

    @property
    def facts(self) -> Counted:
        return Counted(self.count)

    def fresh(self, fingerprint: str) -> RunningSum:
        return dataclasses.replace(self, total=self.total * 0.0, count=0, fingerprint=fingerprint)

    def views(self) -> tuple[StateView, ...]:
        return (StateView("sum", self.total, 0, title="view.sum"),)

    def delta(self, older) -> Whole:
        return Whole(self)

    def dump_items(self) -> dict[str, Any]:
        return {"state_sum": self.total}

    def differing(self, theirs, beyond) -> frozenset[int]:
        other = theirs.get("state_sum")
        if other is None or (beyond("state_sum", self.total, other)).any():
            return frozenset(self.row_positions) if "state_sum" in theirs else frozenset()
        return frozenset()


@dataclass(frozen=True)
class Whole:
    state: RunningSum
    whole: bool = True

    @property
    def nbytes(self) -> int:
        return self.state.nbytes

    def after(self, earlier) -> Whole:
        return self

    def restore(self, earlier) -> RunningSum:
        return self.state


def parameter_shapes(model, layer, block):
    return {f"blocks.{layer}.mean.g": (model.d_model,)}


def hook_widths(model):
    return {"mean.hook_running_mean": model.d_model}


def hooks(model, layer, block, hook, norm_sites):
    return [HookSite(hook(layer, MODULE, "hook_running_mean"))]


class Layer:
    def __init__(self, model, layer: int, block):
        self.model, self.layer, self.scale = model, layer, block.option("scale")
        self.hook = model.hook(layer, MODULE, "hook_running_mean")

    def fresh_state(self) -> RunningSum:
        model = self.model
        return RunningSum(model.xp.zeros((1, model.spec.d_model), dtype=model.backend.dtype), 0, model.fingerprint)

    def forward(self, h, states, positions, padded_keys, out):
        xp, state = self.model.xp, states[self.layer]
        total, count, rows = state.total, state.count, []
        for t in range(h.values.shape[0]):  # one token at a time: a cached round adds what a full one does
            total, count = total + h.values[t:t + 1, :], count + 1
            rows.append(total / count)
        kept = self.model.fault.kept_sum(total, h.values[-1:, :])
        states[self.layer] = RunningSum(kept, count, state.fingerprint)
        mean = op(self.hook, xp.concat(rows, axis=0), OpKind.MIX, inputs=(h,))
        yield mean
        gain = self.model.param(f"blocks.{self.layer}.mean.g")
        result = op(out, mean.values * gain.values * self.scale, OpKind.LINEAR, inputs=(mean, gain))
        yield result
        return result
