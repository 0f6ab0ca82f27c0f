"""The kinds of layer a block is made of: one module per kind, named here once.

A block is a token mixer, then an FFN (engine.spec.LayerSpec names one of each). A kind's module
holds everything about it: `NAME` (what `layers:` and LayerSpec call it), `MODULE` (its part of the
hook and parameter names: `attn`, `mlp`), `Layer` (made once per layer: `fresh_state()`, and
`forward(h, states, positions, padded_keys, out)`, a stream of operators that may replace `states[layer]`),
`parameter_shapes(model, layer, block)`, `hooks(model, layer, block, hook, norm_sites)` (what it yields),
`ADDED` (the hook of what it adds to the residual stream), `hook_widths(model)` and `PER_HEAD` (for
interventions), `GGUF` (its tensors' names in a GGUF file), `HF`
(its modules in Hugging Face checkpoints, per family), `HF_LAYER_TYPES` (the config's `layer_types` it
stands for), `FaultPoints` (where an injected bug may change what it does, with the correct answers) and
`EXPLANATIONS` (what each of its operators computes, en and zh: catalogue data the views render). Where it has
them: `BUGS` (the bugs of its fault points), `BREAKPOINTS`, `ABLATES` / `ABLATIONS`, `intervention_refusal`,
`routed_expert`, `route` / `ROUTE_HOOKS` (a choice an operator holds), `DUMP_LAYOUTS`, `STACKED_HEADS`,
`explanation_key`, `FORMS` / `in_form`, `CAUSES`, `LAYER_OPTIONS` (its per-layer scenario options),
`hf_tensor(leaf, tensors)` (its parameter from a Hugging Face block's tensors, engine.loading.hf.BlockTensors:
every kind a checkpoint holds has one), `gguf_tensor(leaf, tensors)` / `gguf_locate(leaf, index, tensors)` /
`GGUF_SUFFIX` (a GGUF tensor it lays out otherwise than transposed, or names with another suffix:
engine.loading.gguf_model.GGUFBlock), `HF_FUSED` (where a Hugging Face checkpoint's fused tensor holds a routed
expert's matrix: engine.loading.hf_mxfp4). The functions below read each; docs/architecture.md lists them. Generic code
reads a kind only through these functions, never by its name (tests/test_kind_names.py). Adding a kind is its
module and one line below.
"""

from __future__ import annotations

from types import ModuleType

from engine.hooks import Hook
from engine.layers import attention, dense_ffn, gated_deltanet, mla, moe_ffn, per_layer_input, short_conv

MIXERS: dict[str, ModuleType] = {attention.NAME: attention, short_conv.NAME: short_conv,
                                 gated_deltanet.NAME: gated_deltanet, mla.NAME: mla}
FFNS: dict[str, ModuleType] = {dense_ffn.NAME: dense_ffn, moe_ffn.NAME: moe_ffn}
ROLES = {"mixer": MIXERS, "ffn": FFNS}


FaultPoints = type("FaultPoints", tuple(dict.fromkeys(module.FaultPoints for kinds in ROLES.values()
                                                    for module in kinds.values())), {})  # the kinds of the lines above


def fault_points() -> tuple[type, ...]:
    """Every kind's FaultPoints, as the registry holds them now (engine.faults.Fault asks a kind registered later)."""
    return tuple(dict.fromkeys(module.FaultPoints for module in _every_kind()))


class UnknownKind(ValueError):
    def __init__(self, role: str, name: str):
        self.role, self.name, self.known = role, name, tuple(ROLES[role])
        super().__init__(f"{role} kind {name!r} is not one of {', '.join(self.known)}")


def kind(role: str, name: str) -> ModuleType:
    """The module of the `role` ("mixer" or "ffn") kind called `name`."""
    found = ROLES[role].get(name)
    if found is None:
        raise UnknownKind(role, name)
    return found


def block_kinds(block) -> tuple[ModuleType, ModuleType]:
    """The mixer's and the FFN's modules of an engine.spec.LayerSpec."""
    return kind("mixer", block.mixer), kind("ffn", block.ffn)


def layer_options(mixer: str, ffn: str) -> dict:
    """The per-layer options (engine.spec.LayerOption, by key) a block of the mixer kind `mixer` and the FFN kind
    `ffn` takes: their modules' LAYER_OPTIONS."""
    return {**getattr(kind("mixer", mixer), "LAYER_OPTIONS", {}), **getattr(kind("ffn", ffn), "LAYER_OPTIONS", {})}


def hook_widths(model) -> dict[str, int]:
    """Every kind's hook widths under `model` (an engine.spec.ModelSpec), with what each adds to the residual
    stream (its ADDED: d_model wide)."""
    widths: dict[str, int] = {}
    for block in dict.fromkeys(model.blocks):
        for module in block_kinds(block):
            widths.update(module.hook_widths(model))
            widths[module.ADDED] = model.d_model
    return widths


def per_head_hooks() -> tuple[str, ...]:
    """The hook names with one operator per head (an intervention there names its head)."""
    return tuple(name for module in _every_kind() for name in module.PER_HEAD)


def _every_kind():
    return (module for kinds in ROLES.values() for module in kinds.values())


def bugs() -> tuple[type, ...]:
    """Every kind's bugs (its BUGS: classes, each overriding one of its fault points; engine.faults makes each a
    Fault named after it)."""
    return tuple(dict.fromkeys(bug for module in _every_kind() for bug in getattr(module, "BUGS", ())))


def state_head(mixer, head: int) -> int:
    """The head of its layer state that a mixer's (a kind's `Layer`) operators of head `head` read: its
    `state_head` (attention's kv head, under grouped-query attention shared by several query heads), else the same."""
    read = getattr(mixer, "state_head", None)
    return head if read is None else read(head)


def route(operator):
    """The choice a routing operator (an engine.operators.Op) holds, read by its kind (its module's `route`: an
    engine.layers.moe_ffn.Route); None for any other operator."""
    return next((found for module in _every_kind() if hasattr(module, "route")
                 and (found := module.route(operator)) is not None), None)


def route_hooks() -> frozenset[tuple[str, str]]:
    """(module, name) of the operators a run's routing is kept as, to compare another run's with (ROUTE_HOOKS)."""
    return frozenset(hook for module in _every_kind() for hook in getattr(module, "ROUTE_HOOKS", ()))


def breakpoint_conditions() -> tuple:
    """Every kind's breakpoint conditions (its BREAKPOINTS: regex, form, (how its value reads, the refusal's code),
    the condition made of the value)."""
    return tuple(condition for module in _every_kind() for condition in getattr(module, "BREAKPOINTS", ()))


def kind_words(code: str) -> dict[str, str]:
    """Language -> the words of the cause `code`, where a kind owns it (its CAUSES: `breakpoint.expert`, its state's
    line `cache.conv`, a view's title `view.latent`); {} for one of the stack's own, which the views' catalogues word
    (engine.causes)."""
    return {lang: words[code] for module in _every_kind() for lang, words in getattr(module, "CAUSES", {}).items()
            if code in words}


def ablated_hooks() -> dict[str, str]:
    """A kind's module -> the per-head hook `blocks.L.<module> head H` ablates (its ABLATES: attention's hook_z)."""
    return {module.MODULE: module.ABLATES for module in _every_kind() if hasattr(module, "ABLATES")}


def ablations() -> tuple:
    """Every kind's own ablation forms (its ABLATIONS: regex, form, what it sets)."""
    return tuple(form for module in _every_kind() for form in getattr(module, "ABLATIONS", ()))


def intervention_refusals(hook, action: str, values: tuple, model) -> list[tuple[str, dict]]:
    """Why the kinds of `hook`'s module refuse an intervention there (their `intervention_refusal`)."""
    return [refusal for module in _every_kind() if module.MODULE == hook.module and hasattr(module, "intervention_refusal")
            and (refusal := module.intervention_refusal(hook, action, values, model)) is not None]


def routed_expert(hook) -> int | None:
    """The routed part (an expert) whose hooks `hook` is one of, by its kind's `routed_expert`; None for another."""
    return next((found for module in _every_kind() if hasattr(module, "routed_expert")
                 and (found := module.routed_expert(hook)) is not None), None)


def routed_name(parameter) -> str:
    """A routed expert's parameter (a Hook) within its block, its expert's number dropped: the name of the tensor
    that holds every expert's (`mlp.experts.3.w_gate` -> `mlp.experts.w_gate`), in a GGUF file or a Hugging Face
    fused one."""
    return f"{Hook.parse(parameter.module).module}.{parameter.name}"


def dump_layouts() -> dict:
    """A kind's state item (`conv_state`, `cache_k`) -> how a dump lays it out (an engine.state.DumpLayout: its
    module's DUMP_LAYOUTS)."""
    return {item: layout for module in _every_kind() for item, layout in getattr(module, "DUMP_LAYOUTS", {}).items()}


def routes(model) -> bool:
    """Whether a block of `model` (an engine.spec.ModelSpec) chooses a route (a kind with `route`: experts)."""
    return any(hasattr(kind, "route") for block in dict.fromkeys(model.blocks) for kind in block_kinds(block))


def forms() -> dict[str, tuple[str, ...]]:
    """A kind's name -> the forms of the same function its option (`--NAME`) picks between (its module's FORMS)."""
    return {module.NAME: tuple(module.FORMS) for module in _every_kind() if hasattr(module, "FORMS")}


def in_form(model, name: str, form: str):
    """`model` (an engine.spec.ModelSpec) with its layers of the kind `name` in `form` (the kind's `in_form`:
    ValueError(a code of the kind's CAUSES) where the model has none)."""
    return next(module for module in _every_kind() if module.NAME == name).in_form(model, form)


def head_matrices() -> tuple[str, ...]:
    """The hook names whose operators are one [query, key] matrix per head, dumped [head, query, key] (a kind's
    HEAD_MATRICES: attention's scores and pattern)."""
    return _every(lambda module: getattr(module, "HEAD_MATRICES", ()))


def head_axis() -> tuple[str, ...]:
    """The hook names whose operators a dump lays out [pos, head, d_head] (a kind's HEAD_AXIS: attention's q, k, v,
    z)."""
    return _every(lambda module: getattr(module, "HEAD_AXIS", ()))


def masked() -> tuple[str, ...]:
    """The hook names whose masked cells hold −∞, a dump's dtype's lowest value in another program's (MASKED)."""
    return _every(lambda module: getattr(module, "MASKED", ()))


def pattern_hooks() -> frozenset[tuple[str, str]]:
    """(module, name) of each head's attention pattern, where a kind has one (its PATTERN_HOOKS)."""
    return frozenset(_every(lambda module: getattr(module, "PATTERN_HOOKS", ())))


def head_results() -> frozenset[tuple[str, str]]:
    """(module, name) of each head's contribution to the residual, where a kind adds its heads' (HEAD_RESULT)."""
    return frozenset((module.MODULE, module.HEAD_RESULT) for module in _every_kind() if hasattr(module, "HEAD_RESULT"))


def head_result(block, part: str) -> str | None:
    """The hook name of each head's contribution to the residual in the kind of `block` (an engine.spec.LayerSpec)
    whose module is `part`; None where its heads are not added one by one."""
    return getattr(_part_of(block, part), "HEAD_RESULT", None)


def output_bias(block, part: str, layer: int) -> str | None:
    """The weight the kind of `block` whose module is `part` adds once to its heads' results in `layer` (its
    `output_bias`), None where it has none."""
    bias = getattr(_part_of(block, part), "output_bias", None)
    return None if bias is None else bias(layer)


def _every(read) -> tuple:
    return tuple(dict.fromkeys(item for module in _every_kind() for item in read(module)))


def gguf_tensors() -> dict[str, str]:
    """Every kind's parameter (within a block, `attn.wq`) -> its GGUF tensor under `blk.N`."""
    return {name: tensor for module in _every_kind() for name, tensor in module.GGUF.items()}


def hf_fused_experts() -> dict[str, tuple[str, int, int]]:
    """Every kind's routed-expert matrix (within a block, any expert's: `mlp.experts.w_gate`) that a Hugging Face
    checkpoint stores fused -> the fused tensor (under the block) and where the matrix's outputs lie among its,
    (first, step) (its module's HF_FUSED)."""
    return {name: fused for module in _every_kind() for name, fused in getattr(module, "HF_FUSED", {}).items()}


def hf_tensor(block, part: str, leaf: str, tensors):
    """A block parameter `part.leaf` (`attn.wq`) from a Hugging Face checkpoint, read by the kind of `block` (an
    engine.spec.LayerSpec) whose module is `part` (its `hf_tensor(leaf, tensors)`; `tensors`: the block's
    tensors, an engine.loading.hf.BlockTensors)."""
    return _part_of(block, part).hf_tensor(leaf, tensors)


def gguf_tensor(block, part: str, leaf: str, tensors):
    """A block parameter `part.leaf` from a GGUF file, read by the kind of `block` whose module is `part` (its
    `gguf_tensor(leaf, tensors)`; `tensors`: an engine.loading.gguf_model.GGUFBlock), else as stored (a norm, a kind
    that defines none)."""
    read = getattr(_part_of(block, part), "gguf_tensor", None)
    return tensors.weight(leaf) if read is None else read(leaf, tensors)


def gguf_locate(block, part: str, leaf: str, index: tuple[int, ...], tensors) -> tuple[str, int, int] | None:
    """The GGUF tensor, row and column holding a block parameter `part.leaf` at `index` ([in, out] of a matrix, [i]
    of a vector), where its kind lays it out otherwise than as stored, a matrix transposed (its `gguf_locate`); None
    elsewhere."""
    locate = getattr(_part_of(block, part), "gguf_locate", None)
    return None if locate is None else locate(leaf, index, tensors)


def gguf_suffixes() -> dict[str, str]:
    """A kind's parameter (within a block) -> its GGUF tensor's suffix, where that is not `.weight` / `.bias` as the
    parameter's letter says (its GGUF_SUFFIX)."""
    return {name: suffix for module in _every_kind() for name, suffix in getattr(module, "GGUF_SUFFIX", {}).items()}


def _part_of(block, part: str) -> ModuleType | None:
    return next((module for module in block_kinds(block) if module.MODULE == part), None)

def hf_layer_types(mixer: str | None = None) -> dict[str, bool]:
    """The `layer_types` of a Hugging Face config that a mixer kind (or the one called `mixer`) stands for ->
    whether the layer slides."""
    return {name: sliding for kind, module in MIXERS.items() if mixer in (None, kind)
            for name, sliding in module.HF_LAYER_TYPES.items()}


def hf_layer_kinds() -> dict[str, str]:
    """The `layer_types` of a Hugging Face config -> the mixer kind that stands for it."""
    return {name: kind for kind, module in MIXERS.items() for name in module.HF_LAYER_TYPES}


def explanation_key(operator) -> str | None:
    """What a kind files the explanation of `operator` under where its hook name alone does not tell (its module's
    `explanation_key`: an expert's output, latent attention's expanded keys); None: the hook name."""
    return next((key for module in _every_kind() if hasattr(module, "explanation_key")
                 and (key := module.explanation_key(operator)) is not None), None)


def explanation(key: str) -> dict[str, tuple[str, str, str, str]] | None:
    """The kind's texts (per language) of the operator filed under `key` (a hook name's last part)."""
    modules = (*_every_kind(), per_layer_input)  # the kinds', then Gemma 4's block tail's
    return next((module.EXPLANATIONS[key] for module in modules if key in module.EXPLANATIONS), None)
