"""The sparse mixture-of-experts FFN (Qwen3-MoE, Qwen2-MoE, gpt-oss, DeepSeek-V3): a router picks the top k of n gated MLPs
per token.

Operator by operator: the router's logits (LN(x) · W_router), its scores (a softmax over the experts), the
top k experts of each token (best first), their scores gathered (and, with `norm_topk`, divided by their
sum: the weights), each chosen expert's SwiGLU run on the tokens routed to it alone, Qwen2-MoE's shared
expert (every token) and its sigmoid gate, and the sum: the weighted experts plus the gated shared expert.
An expert no token chose does not run and yields nothing. Keeps no state between tokens.
DeepSeek-V3 (MoeSpec.sigmoid): the scores are sigmoid(logits); top k reads the selection scores, scores + the
selection bias (mlp.score_bias), −∞ outside each token's topk_groups best groups of experts (a group's score: its
two best selection scores summed, `hook_group_scores`); the weights are the chosen unbiased scores (normalised
with `norm_topk`) times routed_scale; its shared experts are added ungated.

gpt-oss (MoeSpec.bias, MoeSpec.clamp): the router and each expert's projections add biases, and its experts'
activation is the clamped SwiGLU (up.clamp(−limit, limit) + 1) · g · sigmoid(alpha · g), g = gate.clamp(max=limit).
Its router takes the top k of the logits and a softmax over those k: the same choice and weights as the softmax
over every expert renormalised over the chosen (norm_topk), which is how it runs here.

The top k read the scores operator's values, so an intervention there steers the choice: an ablated
expert is a score of −∞ (never chosen; the next best takes its place, with its own score as weight). The
chosen ids are read back from the top-k operator, so a route may be forced there too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from engine import ops
from engine.arrays import to_host
from engine.hooks import Hook, HookSite
from engine.operators import Op, OpStream, op
from engine.spec import KindOptions, LayerSpec, ModelSpec
from engine.trace import OpKind

Array = Any
NAME, MODULE = "moe", "mlp"
ADDED = "hook_mlp_out"  # the hook of what the residual stream adds: its output
HF = {"llama": {"router": "mlp.gate", "experts": "mlp.experts",  # under it: per expert or fused (hf_tensor)
               "shared": "mlp.shared_expert", "shared_gate": "mlp.shared_expert_gate"},
      "deepseek": {"router": "mlp.gate", "experts": "mlp.experts", "shared": "mlp.shared_experts"},
      "gpt_oss": {"router": "mlp.router", "experts": "mlp.experts"}}  # its experts: fused, interleaved (_gpt_oss)
EXPERT_PROJECTIONS = {"w_gate": "gate_proj", "w_up": "up_proj", "w_down": "down_proj"}  # an expert's modules
# gpt-oss's fused experts under its experts module: an expert's matrix (within a block, any expert's) -> the tensor
# and where its outputs lie among that tensor's, (first, step): the gate's and the up projection's interleaved, gate
# first, their biases alike; the Hub's MXFP4 pairs hold the outputs as rows (engine.loading.hf_mxfp4)
HF_FUSED = {f"{MODULE}.experts.w_{projection}": (f"{HF['gpt_oss']['experts']}.{tensor}", first, step)
            for projection, tensor, first, step in (("gate", "gate_up_proj", 0, 2), ("up", "gate_up_proj", 1, 2),
                                                    ("down", "down_proj", 0, 1))}
HF_LAYER_TYPES: dict[str, bool] = {}
PER_HEAD = ()
# llama.cpp's merged tensors: every expert's matrix (or bias) of a projection in one, expert first
GGUF = {"mlp.router": "ffn_gate_inp", "mlp.b_router": "ffn_gate_inp", **{f"mlp.experts.{w}_{name}": f"ffn_{name}_exps"
                                                                          for w in "wb" for name in ("gate", "up", "down")},
        **{f"mlp.shared.w_{name}": f"ffn_{name}_shexp" for name in ("gate", "up", "down")},
        "mlp.shared_gate": "ffn_gate_inp_shexp",  # (the shared expert's gate: a [d, 1] matrix, as the engine's)
        "mlp.score_bias": "exp_probs_b"}  # DeepSeek's selection bias
GGUF_SUFFIX = {"mlp.score_bias": ".bias"}
SCORES, TOPK = "hook_router_scores", "hook_topk"  # what top-k reads (an ablation's hook), what it chooses
SELECTION = ("hook_selection_scores", "hook_group_scores")  # DeepSeek-V3: what top-k reads instead of the scores
ROUTING = ("hook_router_logits", SCORES, *SELECTION, TOPK, "hook_topk_scores", "hook_topk_weights")
EXPERT_HOOKS = ("hook_pre", "hook_pre_linear", "hook_post", "hook_out")
SHARED = f"{MODULE}.shared"  # the shared expert's hooks and parameters
EXPERTS = f"{MODULE}.experts"  # under it, expert E's (expert_module)


@dataclass(frozen=True)
class MoeSpec(KindOptions):
    """Its model-wide options (ModelSpec.moe): a router scores `n_experts` gated MLPs for each token and the `top_k`
    best run, their outputs summed with the chosen scores as weights."""

    ROLE: ClassVar[str] = "ffn"
    KIND: ClassVar[str] = NAME

    n_experts: int
    top_k: int
    d_expert: int  # each expert's hidden width (Qwen3-MoE: moe_intermediate_size)
    norm_topk: bool = False  # the chosen scores divided by their sum (norm_topk_prob)
    layers: tuple[int, ...] | None = None  # the sparse layers (the others stay dense); None: every layer
    d_shared: int = 0  # Qwen2-MoE: a shared expert of this width runs on every token, times sigmoid(x·w_gate)
    bias: bool = False  # gpt-oss: the router and every expert's projections add a bias
    clamp: tuple[float, float] | None = None  # gpt-oss's clamped SwiGLU (alpha, limit) in place of SwiGLU
    shared_gate: bool = True  # the shared expert under its sigmoid gate (Qwen2-MoE); False: added whole (DeepSeek)
    sigmoid: bool = False  # DeepSeek-V3: scores are sigmoid(logits) (else a softmax), chosen by score + mlp.score_bias
    groups: int = 1  # DeepSeek-V3's n_group: the experts in this many equal groups ...
    topk_groups: int = 1  # ... of which each token chooses among the topk_group best (a group: its top-2 sum)
    routed_scale: float = 1.0  # the chosen weights times this (routed_scaling_factor)

    def covers(self, layer: int) -> bool:
        return self.layers is None or layer in self.layers


class RouteError(ValueError):
    """A route that names no expert: engine.interventions refuses such a forced top-k before a run."""


def expert_module(expert: int) -> str:
    """Expert E's part of its hooks' names, `mlp.experts.E`: a hook's module that reads as a hook name itself."""
    return Hook(None, EXPERTS, str(expert)).text


def _swiglu_shapes(prefix: str, d: int, f: int, bias: bool = False) -> dict[str, tuple[int, ...]]:
    shapes = {f"{prefix}.w_gate": (d, f), f"{prefix}.w_up": (d, f), f"{prefix}.w_down": (f, d)}
    return shapes | ({f"{prefix}.b_gate": (f,), f"{prefix}.b_up": (f,), f"{prefix}.b_down": (d,)} if bias else {})


def parameter_shapes(model: ModelSpec, layer: int, block: LayerSpec) -> dict[str, tuple[int, ...]]:
    moe, d, prefix = model.moe, model.d_model, f"blocks.{layer}.mlp"
    f = moe.d_expert
    shapes = {f"{prefix}.router": (d, moe.n_experts)} | ({f"{prefix}.b_router": (moe.n_experts,)} if moe.bias else {})
    shapes |= {f"{prefix}.score_bias": (moe.n_experts,)} if moe.sigmoid else {}
    for expert in range(moe.n_experts):
        shapes |= _swiglu_shapes(f"{prefix}.experts.{expert}", d, f, moe.bias)
    if moe.d_shared:
        shapes |= _swiglu_shapes(f"blocks.{layer}.{SHARED}", d, moe.d_shared)
        shapes |= {f"{prefix}.shared_gate": (d, 1)} if moe.shared_gate else {}
    return shapes


def hf_tensor(leaf: str, tensors) -> Array:
    """Its parameter `leaf` from a Hugging Face block (`tensors`: an engine.loading.hf.BlockTensors): the router
    (mlp.gate) and DeepSeek's selection bias, the shared expert (Qwen2-MoE's with its gate) and expert E's
    projections: mlp.experts.E.gate_proj.weight … as the Hub stores them, else transformers 5's fused
    mlp.experts.gate_up_proj (E × 2f × d, the gate's rows first) and mlp.experts.down_proj (E × d × f)."""
    family = tensors.family(HF)
    table = HF[family]
    if family == "gpt_oss":
        return _gpt_oss(leaf, table, tensors)
    if leaf in ("router", "shared_gate"):
        return tensors.linear(table[leaf])
    if leaf == "score_bias":
        return tensors.get(f"{table['router']}.e_score_correction_bias")
    if leaf.startswith("shared."):
        return tensors.linear(f"{table['shared']}.{EXPERT_PROJECTIONS[leaf[7:]]}")
    _, expert, projection = leaf.split(".")
    experts, e, f = table["experts"], int(expert), tensors.spec.moe.d_expert

    def fused() -> Array:
        if projection == "w_down":
            return tensors.get(f"{experts}.down_proj")[e].T
        both = tensors.get(f"{experts}.gate_up_proj")[e]
        return (both[:f] if projection == "w_gate" else both[f:]).T

    return tensors.either(lambda: tensors.linear(f"{experts}.{expert}.{EXPERT_PROJECTIONS[projection]}"), fused)


def _gpt_oss(leaf: str, table: dict, tensors) -> Array:
    """gpt-oss's mlp.router (weight, bias) and its fused experts, stored [in, out]: mlp.experts.gate_up_proj
    (E × d × 2f, the gate's and the up projection's columns interleaved: gate even, up odd) and its bias (E × 2f),
    mlp.experts.down_proj (E × f × d) and its bias (E × d); the Hub's checkpoints store both matrices as MXFP4."""
    if leaf in ("router", "b_router"):
        return tensors.linear(table["router"]) if leaf == "router" else tensors.get(f"{table['router']}.bias")
    _, expert, name = leaf.split(".")
    kind, projection = name.split("_")  # w_gate -> ("w", "gate")
    tensor, first, step = HF_FUSED[f"{MODULE}.experts.w_{projection}"]
    fused = tensors.get(f"{tensor}{'' if kind == 'w' else '_bias'}", int(expert))  # MXFP4: only this expert dequantized
    return fused[..., first::step]

def hook_widths(model: ModelSpec) -> dict[str, int]:
    moe = model.moe
    if moe is None:
        return {}
    widths = {"mlp.hook_router_logits": moe.n_experts, f"mlp.{SCORES}": moe.n_experts, f"mlp.{TOPK}": moe.top_k,
              "mlp.hook_topk_scores": moe.top_k, "mlp.hook_topk_weights": moe.top_k,
              "mlp.hook_selection_scores": moe.n_experts, "mlp.hook_group_scores": moe.groups}
    shared = [(SHARED, moe.d_shared)] if moe.d_shared else []
    for module, f in [(expert_module(e), moe.d_expert) for e in range(moe.n_experts)] + shared:
        widths |= {f"{module}.hook_pre": f, f"{module}.hook_pre_linear": f, f"{module}.hook_post": f,
                   f"{module}.hook_out": model.d_model}
    return widths | ({"mlp.hook_shared_gate": 1} if moe.d_shared and moe.shared_gate else {})


def hooks(model: ModelSpec, layer: int, block: LayerSpec, hook, norm_sites) -> list[HookSite]:
    """Every hook the layer may yield; an expert's only when a token is routed to it."""
    names = ["hook_router_logits", SCORES, *_selection(model.moe), TOPK]
    names += ["hook_topk_scores"] if model.moe.norm_topk or model.moe.routed_scale != 1.0 else []
    sites = [HookSite(hook(layer, MODULE, name)) for name in names + ["hook_topk_weights"]]
    sites += [HookSite(hook(layer, expert_module(expert), name), routed=True)
              for expert in range(model.moe.n_experts) for name in EXPERT_HOOKS]
    if model.moe.d_shared:
        sites += [HookSite(hook(layer, SHARED, name)) for name in EXPERT_HOOKS]
        sites += [HookSite(hook(layer, MODULE, "hook_shared_gate"))] if model.moe.shared_gate else []
    return sites


def _selection(moe) -> list[str]:
    """DeepSeek-V3's operators between the scores and top-k: the scores plus the bias, and the groups' scores."""
    return [] if not moe.sigmoid else ["hook_selection_scores"] + (["hook_group_scores"] if moe.groups > 1 else [])


@dataclass(frozen=True)
class Route:
    """One pass's choice at one layer, as its top-k operator holds it (host arrays), and the hooks of its module
    that a comparison reads (engine.compare.routes): the scores it chose by, the router's logits (a dump
    without the choice or scores: its choice is their k best) and the chosen experts' weights."""

    chosen: np.ndarray  # (T, k): each token's experts, best first
    scores: np.ndarray  # (T, n_experts): what top-k read
    SCORES: ClassVar[str] = SCORES
    LOGITS: ClassVar[str] = "hook_router_logits"
    WEIGHTS: ClassVar[str] = "hook_topk_weights"

    @cached_property
    def margins(self) -> np.ndarray:
        """Per token, the k-th chosen score less the best score not chosen: how near the choice came to
        another (negative where a forced route passed over a better expert; +∞ when every expert is chosen)."""
        scores = self.scores.astype(np.float64)
        taken = np.zeros(scores.shape, dtype=bool)
        np.put_along_axis(taken, self.chosen, True, axis=1)
        kth = np.take_along_axis(scores, self.chosen, axis=1).min(axis=1)
        return kth - np.where(taken, -np.inf, scores).max(axis=1)


def route(operator) -> Route | None:
    """The routing a top-k operator (an engine.operators.Op) holds; None for any other operator."""
    if operator.kind != OpKind.ROUTE or operator.hook.name != TOPK:
        return None
    return Route(to_host(operator.values).astype(np.int64), to_host(operator.inputs[0].values))


def explanation_key(operator) -> str | None:
    """An expert's (or the shared expert's) output, and the experts' weighted sum: filed apart from a dense FFN's."""
    hook = operator.hook
    if hook.name == "hook_out" and (routed_expert(hook) is not None or hook.module == SHARED):
        return "hook_out(expert)"
    return "hook_mlp_out(experts)" if hook.name == ADDED and operator.kind == OpKind.MIX else None


ROUTE_HOOKS = ((MODULE, TOPK), (MODULE, SCORES))  # what a run's routing is kept as, to compare another run with


def _routed_to(expert: int):
    return lambda state: (chosen := route(state.op)) is not None and bool((chosen.chosen == expert).any())


def _near_tie(margin: float):
    return lambda state: (chosen := route(state.op)) is not None and bool((chosen.margins < margin).any())


# its breakpoint conditions (engine.breakpoints): a regex, its form as a message names it, how its value is read
# ("index": a whole number ≥ 0, "number") with the code of the message refusing another, the condition it makes
BREAKPOINTS = ((r"expert=(.*)", "expert=E", ("index", "breakpoint.expert"), _routed_to),
               (r"route_margin<(.+)", "route_margin<N", ("number", "breakpoint.number"), _near_tie))


def _ablated(match) -> tuple[str, float, tuple[int, int]]:
    expert = int(match["expert"])  # the score top-k reads, −∞: never chosen, the next best takes its place
    return Hook(int(match["layer"]), MODULE, SCORES).text, -math.inf, (expert, expert + 1)


# its ablation (engine.interventions): a regex of the words before ` @…`, its form, what it sets (hook, value, columns)
ABLATIONS = ((rf"blocks\.(?P<layer>\d+)\.{MODULE}\s+expert\s+(?P<expert>\d+)", f"blocks.L.{MODULE} expert E", _ablated),)


def intervention_refusal(hook, action: str, values: tuple, model) -> tuple[str, dict] | None:
    """Why an intervention on `hook` (an engine.hooks.Hook of its module) cannot apply to `model`, as the code and
    facts of the refusal (None: it can): its routing hooks exist on its sparse layers only, and a forced route
    (`action` "set") names experts."""
    if hook.name not in ROUTING:
        return None
    sparse = [i for i, block in enumerate(model.blocks) if block.ffn == NAME]
    if hook.layer not in sparse:
        return ("intervention.no_experts", {"layer": hook.layer, "sparse": ", ".join(map(str, sparse))}) if sparse \
            else ("intervention.no_sparse", {"layer": hook.layer})
    n = model.moe.n_experts
    if hook.name == TOPK and action != "patch" and (action != "set" or not all(v == int(v) and 0 <= v < n for v in values)):
        return "intervention.route", {"last": n - 1}
    return None


def routed_expert(hook) -> int | None:
    """The expert whose hooks `hook` (an engine.hooks.Hook) is one of (None for another): its module read as the
    hook name expert_module wrote."""
    if not hook.module:
        return None
    module = Hook.parse(hook.module)
    return int(module.name) if module.module == EXPERTS and module.name.isdigit() else None


# the words of its causes (engine.causes: a code and facts), per language; the English is the CLI's
CAUSES = {"en": {"breakpoint.expert": "breakpoint {text!r}: {value!r} is not an expert's number",
                 "intervention.no_experts": "{text!r}: layer {layer}'s FFN has no experts (the sparse layers are "
                                            "{sparse})",
                 "intervention.no_sparse": "{text!r}: layer {layer}'s FFN has no experts (the model has none)",
                 "intervention.route": "{text!r}: a route is set to expert numbers 0–{last}"},
          "zh": {"breakpoint.expert": "断点 {text!r}：{value!r} 不是专家编号",
                 "intervention.no_experts": "{text!r}：第 {layer} 层的前馈网络没有专家（稀疏层为 {sparse}）",
                 "intervention.no_sparse": "{text!r}：第 {layer} 层的前馈网络没有专家（模型没有稀疏层）",
                 "intervention.route": "{text!r}：路由只能设为专家编号 0–{last}"}}


class FaultPoints:
    """It has none: nothing it computes is kept, so no cache bug can reach it."""


BUGS: tuple[type, ...] = ()


class MoeFfn:
    """One layer's sparse FFN: its router, experts and hooks resolved once."""

    def __init__(self, model, layer: int, block: LayerSpec):
        self.model, self.layer, self.moe = model, layer, model.spec.moe
        self.prefix = f"blocks.{layer}.mlp"
        self.hooks = {name: model.hook(layer, MODULE, name) for name in ROUTING}
        self.expert_hooks = [{name: model.hook(layer, expert_module(e), name) for name in EXPERT_HOOKS}
                             for e in range(self.moe.n_experts)]
        self.shared_hooks = {name: model.hook(layer, SHARED, name) for name in EXPERT_HOOKS}
        self.shared_gate = model.hook(layer, MODULE, "hook_shared_gate")

    def fresh_state(self):
        return None  # nothing kept between tokens

    def forward(self, h: Op, states: list, positions: list[int], padded_keys, out) -> OpStream:
        hooks, xp = self.hooks, self.model.xp
        logits = self._linear(hooks["hook_router_logits"], h, h.values, "router", cols="experts")
        yield logits
        if self.moe.sigmoid:
            scores = op(hooks[SCORES], ops.sigmoid(xp, logits.values), OpKind.ACTIVATION, inputs=(logits,),
                        cols="experts")
        else:
            scores = op(hooks[SCORES], ops.softmax(xp, logits.values), OpKind.SOFTMAX, inputs=(logits,),
                        cols="experts")
        yield scores
        read = (yield from self._selection(scores)) if self.moe.sigmoid else scores
        order = xp.argsort(read.values, axis=1, descending=True, stable=True)[:, :self.moe.top_k]
        topk = op(hooks[TOPK], xp.astype(order, scores.values.dtype), OpKind.ROUTE, inputs=(read,), cols="rank")
        yield topk
        chosen = self._chosen(topk.values)
        weights = yield from self._weights(scores, topk, chosen)
        outputs = []
        for expert in sorted(set(chosen.ravel().tolist())):
            rows = np.flatnonzero((chosen == expert).any(axis=1))
            result = yield from self._expert(self.expert_hooks[expert], f"{self.prefix}.experts.{expert}", h, rows,
                                             positions)
            outputs.append((expert, rows, result))
        total, inputs = self._weighted_sum(weights.values, chosen, outputs), (weights, *(r for _, _, r in outputs))
        if self.moe.d_shared:
            shared, gate = yield from self._shared(h, positions)
            if gate is None:
                total, inputs = total + shared.values, inputs + (shared,)
            else:
                total, inputs = total + gate.values * shared.values, inputs + (shared, gate)
        total = op(out, total, OpKind.MIX, inputs=inputs)
        yield total
        return total

    def _shared(self, h: Op, positions: list[int]) -> OpStream:
        """The shared expert over every token, and Qwen2-MoE's gate sigmoid(LN(x) · w_shared_gate), (T, 1) (DeepSeek's
        shared experts have none: None)."""
        model = self.model
        shared = yield from self._expert(self.shared_hooks, f"blocks.{self.layer}.{SHARED}", h,
                                         np.arange(h.values.shape[0]), positions)
        if not self.moe.shared_gate:
            return shared, None
        w = model.param(f"{self.prefix}.shared_gate")
        gate = op(self.shared_gate, ops.sigmoid(model.xp, h.values @ w.values), OpKind.ACTIVATION, inputs=(h, w),
                  cols="scale")
        yield gate
        return shared, gate

    def _selection(self, scores: Op) -> OpStream:
        """DeepSeek-V3's choice reads the scores plus the selection bias (mlp.score_bias, transformers'
        e_score_correction_bias: for choosing only, the weights are the scores), and only in the topk_groups groups
        whose two best biased scores sum highest (n_group, topk_group): the other groups' experts are −∞."""
        xp, moe = self.model.xp, self.moe
        bias = self.model.param(f"{self.prefix}.score_bias")
        biased = scores.values + bias.values
        if moe.groups == 1:
            chosen = op(self.hooks["hook_selection_scores"], biased, OpKind.LINEAR, inputs=(scores, bias),
                        cols="experts")
            yield chosen
            return chosen
        t = biased.shape[0]
        grouped = xp.reshape(biased, (t, moe.groups, -1))
        best = xp.sort(grouped, axis=2, descending=True)
        group = op(self.hooks["hook_group_scores"], best[..., 0] + best[..., 1], OpKind.ROUTE, inputs=(scores, bias),
                   cols="groups")
        yield group
        kept = xp.argsort(group.values, axis=1, descending=True, stable=True)[:, :moe.topk_groups]
        keep = xp.any(xp.arange(moe.groups)[None, None, :] == kept[:, :, None], axis=1)  # (T, groups)
        masked = xp.where(keep[:, :, None], grouped, xp.asarray(-xp.inf, dtype=biased.dtype))
        chosen = op(self.hooks["hook_selection_scores"], xp.reshape(masked, (t, -1)), OpKind.ROUTE,
                    inputs=(group, scores, bias), cols="experts")
        yield chosen
        return chosen

    def _chosen(self, values: Array) -> np.ndarray:
        """The experts of each token as whole numbers, best first, as the top-k operator holds them now."""
        chosen = to_host(values)
        ids = chosen.astype(np.int64)
        if not np.array_equal(ids, chosen) or ids.min(initial=0) < 0 or ids.max(initial=0) >= self.moe.n_experts:
            raise RouteError(f"{Hook(self.layer, MODULE, TOPK).text}: a route names the experts 0–{self.moe.n_experts - 1}, "
                             f"got {chosen[~np.isin(chosen, np.arange(self.moe.n_experts))][:1].tolist()}")
        return ids

    def _weights(self, scores: Op, topk: Op, chosen: np.ndarray) -> OpStream:
        """The chosen experts' scores, each token's divided by their sum when the model normalises them."""
        xp, (t, k) = self.model.xp, chosen.shape
        flat = (np.arange(t)[:, None] * self.moe.n_experts + chosen).ravel()
        picked = xp.reshape(xp.take(xp.reshape(scores.values, (-1,)), xp.asarray(flat), axis=0), (t, k))
        moe = self.moe
        name = "hook_topk_scores" if moe.norm_topk or moe.routed_scale != 1.0 else "hook_topk_weights"
        gathered = op(self.hooks[name], picked, OpKind.ROUTE, inputs=(scores, topk), cols="rank")
        yield gathered
        if name == "hook_topk_weights":
            return gathered
        values = gathered.values
        values = values / xp.sum(values, axis=1, keepdims=True) if moe.norm_topk else values
        weights = op(self.hooks["hook_topk_weights"], values * moe.routed_scale, OpKind.NORM,
                     inputs=(gathered,), cols="rank")
        yield weights
        return weights

    def _expert(self, hooks: dict, p: str, h: Op, rows: np.ndarray, positions: list[int]) -> OpStream:
        """One expert's gated MLP (parameters under `p`) over the tokens routed to it; its operators' rows are those
        tokens' positions."""
        xp = self.model.xp
        at = tuple(positions[r] for r in rows)
        x = xp.take(h.values, xp.asarray(rows), axis=0)
        gate = self._linear(hooks["hook_pre"], h, x, "gate", p, rows=at)
        yield gate
        up = self._linear(hooks["hook_pre_linear"], h, x, "up", p, rows=at)
        yield up
        post = op(hooks["hook_post"], self._activation(gate.values, up.values), OpKind.ACTIVATION, inputs=(gate, up),
                  rows=at)
        yield post
        result = self._linear(hooks["hook_out"], post, post.values, "down", p, rows=at)
        yield result
        return result

    def _linear(self, hook, source: Op, x: Array, name: str, under: str | None = None, **axes) -> Op:
        """x · w_name (+ b_name where the model has biases) under the expert's prefix `under`, or the router's."""
        model = self.model
        w = model.param(f"{under}.w_{name}" if under else f"{self.prefix}.{name}")
        y, inputs = x @ w.values, (source, w)
        if self.moe.bias:
            b = model.param(f"{under or self.prefix}.b_{name}")
            y, inputs = y + b.values, (source, w, b)
        return op(hook, y, OpKind.LINEAR, inputs=inputs, **axes)

    def _activation(self, gate: Array, up: Array) -> Array:
        """SwiGLU, or gpt-oss's clamped variant (MoeSpec.clamp: alpha, limit)."""
        xp = self.model.xp
        if self.moe.clamp is None:
            return ops.silu(xp, gate) * up
        alpha, limit = self.moe.clamp
        gate, up = xp.clip(gate, None, limit), xp.clip(up, -limit, limit)
        return (up + 1) * gate * ops.sigmoid(xp, alpha * gate)

    def _weighted_sum(self, weights: Array, chosen: np.ndarray, outputs: list) -> Array:
        """Σ_j weight[t, j] · expert_{chosen[t, j]}(x_t), over the ranks j in order."""
        xp = self.model.xp
        stacked = xp.concat([result.values for _, _, result in outputs], axis=0)
        where, start = {}, 0  # (expert, token) -> its row in `stacked`
        for expert, rows, _ in outputs:
            where.update({(expert, int(row)): start + i for i, row in enumerate(rows)})
            start += len(rows)
        total = None
        for rank in range(chosen.shape[1]):
            index = xp.asarray([where[(int(e), t)] for t, e in enumerate(chosen[:, rank])])
            term = weights[:, rank:rank + 1] * xp.take(stacked, index, axis=0)
            total = term if total is None else total + term
        return total


Layer = MoeFfn


EXPLANATIONS: dict[str, dict[str, tuple[str, str, str, str]]] = {
    "hook_router_logits": {
        "en": ("The router: how strongly each token asks for each expert.",
               "LN(x) · W_router, one column per expert (Hugging Face: mlp.gate).",
               "A float32 or quantized router can swap two experts whose logits nearly tie; every later number "
               "then differs.", "Columns = experts; the largest logits become the chosen experts."),
        "zh": ("路由器：每个Token对每个专家的需求强度。", "LN(x)·W_router，每个专家一列（Hugging Face中为mlp.gate）。",
               "float32或量化的路由器会在两个logit几乎相等时换掉专家，之后所有数值都不同。", "列数=专家数；最大的logit对应被选中的专家。"),
    },
    "hook_router_scores": {
        "en": ("Turn the router's logits into scores comparable across experts.",
               "A softmax over the experts of each token (in the compute dtype: transformers casts it to float32).",
               "Top-k reads these scores: an ablated expert is −∞ here, so the next best takes its place.",
               "Each row sums to 1 (−∞ entries are 0 in the sum)."),
        "zh": ("把路由logit变成专家之间可比较的分数。", "对每个Token的所有专家做softmax（按计算精度；transformers会转成float32）。",
               "top-k读取这些分数：被消融的专家在此为−∞，由次优专家替代。", "每行和为1。"),
    },
    "hook_selection_scores": {
        "en": ("DeepSeek-V3: what top-k chooses by, the sigmoid scores plus the selection bias.",
               "scores + score_bias (e_score_correction_bias); with n_group, the experts outside each token's "
               "topk_group best groups (a group's score: its two best biased scores summed) are −∞.",
               "The bias only chooses: the weights are the unbiased scores of the chosen experts.",
               "Top-k's experts are each row's k largest here, not in the router scores."),
        "zh": ("DeepSeek-V3：top-k依据的分数，即sigmoid分数加上选择偏置。",
               "scores+score_bias（e_score_correction_bias）；有n_group时，不在该Token最好的topk_group个组内的专家为−∞（组分数：组内最好两个偏置分数之和）。",
               "偏置只用于选择：权重是被选专家未加偏置的分数。", "top-k的专家是这里每行最大的k个，而不是路由分数中的。"),
    },
    "hook_group_scores": {
        "en": ("DeepSeek-V3's group-limited routing: how good each group of experts is for the token.",
               "Per group of n_experts / n_group experts: the sum of its two best biased scores; the topk_group "
               "best groups stay, the others' experts cannot be chosen.",
               "Two groups whose scores nearly tie flip with rounding, and every expert choice after with them.",
               "One column per group."),
        "zh": ("DeepSeek-V3的分组路由：每组专家对该Token有多好。",
               "每组（n_experts/n_group个专家）：组内最好两个偏置分数之和；保留最好的topk_group个组，其余组的专家不能被选。",
               "两个组分数几乎相等时，舍入会翻转选择，之后所有专家选择随之改变。", "每组一列。"),
    },
    "hook_topk": {
        "en": ("Which experts each token goes to: the k best scores, best first.",
               "The indices of each row's k largest scores (ties: the lower index); stored as numbers.",
               "A near tie between the k-th and (k+1)-th score flips with rounding: see route_margin.",
               "Each row holds k distinct experts; their scores are the row's k largest."),
        "zh": ("每个Token去哪些专家：分数最高的k个，按分数从高到低。", "每行最大的k个分数的下标（相等时取较小下标），以数值存储。",
               "第k与第k+1个分数几乎相等时，舍入会翻转选择：见route_margin。", "每行有k个不同专家，其分数是该行最大的k个。"),
    },
    "hook_topk_scores": {
        "en": ("The scores of the chosen experts, before they become weights.",
               "scores[t, topk[t, j]] for each rank j.", "These do not sum to 1: only the normalisation makes them.",
               "Row t equals the router scores at that token's chosen experts."),
        "zh": ("被选中专家的分数，尚未变成权重。", "对每个名次j取scores[t, topk[t, j]]。", "它们的和不为1，归一化之后才是。",
               "第t行等于该Token被选中专家处的路由分数。"),
    },
    "hook_topk_weights": {
        "en": ("How much each chosen expert's output counts.",
               "With norm_topk_prob: the chosen scores over their sum; without: the chosen scores themselves; "
               "times routed_scaling_factor (DeepSeek-V3).",
               "Qwen3-MoE normalises, Qwen2-MoE and Mixtral-style configs may not: the config decides.",
               "With normalisation each row sums to 1."),
        "zh": ("每个被选中专家的输出占多大比重。", "有norm_topk_prob时：被选分数除以它们的和；否则就是被选分数本身。",
               "Qwen3-MoE做归一化，其他配置可能不做：以配置为准。", "归一化时每行和为1。"),
    },
    "hook_out(expert)": {
        "en": ("What one expert makes of the tokens routed to it (a shared expert: every token), before its weight.",
               "SwiGLU: (SiLU(x·W_gate) ⊙ x·W_up) · W_down, on those tokens' rows only.",
               "Rows are the routed tokens' positions, not every token: an expert no token chose never runs.",
               "One row per token that chose this expert; width d_model."),
        "zh": ("单个专家对路由到它的Token的输出（共享专家：所有Token），尚未乘权重。",
               "SwiGLU：(SiLU(x·W_gate)⊙x·W_up)·W_down，只算这些Token的行。",
               "行只对应路由到该专家的Token位置，而非全部Token：没有被选中的专家不会运行。", "每个选择该专家的Token一行，宽度d_model。"),
    },
    "hook_shared_gate": {
        "en": ("Qwen2-MoE: how much of the shared expert each token takes.",
               "sigmoid(LN(x) · w_shared_gate), one number in (0, 1) per token, times the shared expert's output.",
               "The gate is a sigmoid of its own projection, not one of the router's softmax scores.",
               "One column; every value strictly between 0 and 1."),
        "zh": ("Qwen2-MoE：每个Token使用多少共享专家的输出。", "sigmoid(LN(x)·w_shared_gate)，每个Token一个(0,1)内的数，乘以共享专家的输出。",
               "门控是它自己投影的sigmoid，而不是路由器softmax分数之一。", "只有一列；每个值都严格在0与1之间。"),
    },
    "hook_mlp_out(experts)": {
        "en": ("The sparse FFN's output: the chosen experts' outputs, weighted.",
               "Σ_j weight[t, j] · expert_topk[t, j](x_t) (+ gate · shared expert); an expert no token chose never ran.",
               "Summing every expert's output, or forgetting the weights, gives a dense FFN's wrong answer.",
               "Row t equals the weighted sum of the experts.E.out rows at t."),
        "zh": ("稀疏前馈的输出：被选中专家输出的加权和。", "Σ_j weight[t,j]·expert_topk[t,j](x_t)；没有被选中的专家不会运行。",
               "把所有专家相加或忘记权重都会得到错误结果。", "第t行等于各experts.E.out在t处的行的加权和。"),
    },
}
