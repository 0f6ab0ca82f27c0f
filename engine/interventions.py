"""Interventions on activations, as data: set, scale, zero or patch an operator's output.

An intervention names a hook (`blocks.0.attn.hook_z`), for per-head hooks a head, the rows
(absolute token positions) and columns it touches, what it does, and optionally the pass
(`prefill`, `decode.N`) and the request it applies to; by default every pass of every request.

    blocks.0.hook_resid_post[2,:]=0              zero position 2's residual
    blocks.0.hook_resid_post[2,5]=1.5            set one cell
    blocks.0.hook_resid_post[2,:]=[1, 2, 3, 4]   replace a row
    blocks.0.hook_resid_post[2,:]*=0.5           scale a row
    blocks.0.attn.hook_z head 1=0 @decode.1      zero head 1's output in decode round 1
    blocks.3.hook_resid_post=from:1 @request.0   activation patching: request 1's value, into request 0
    blocks.1.mlp expert 3                        ablate an expert: its router score −∞, never chosen

The forward pass never branches on an intervention: the session hands each operator to a
`Patcher` as it is produced, which replaces the Op's values; the model reads them from there on
(engine.model), so everything downstream, KV cache rows included, is recomputed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine.causes import Cause, CausedError
from engine import layers
from engine.hooks import Hook, HookError

Array = Any
Span = tuple[int | None, int | None]  # [start, stop) like a slice; (None, None) is ":"
_SPEC = re.compile(r"""^(?P<hook>[A-Za-z_][\w.]*?)(?:\s+head\s+(?P<head>\d+))?\s*
                       (?:\[(?P<rows>[^,\]]*),(?P<cols>[^\]]*)\])?\s*(?P<op>\*=|=)\s*
                       (?P<value>.*?)(?P<where>(?:\s+@\S+)*)\s*$""", re.VERBOSE)
_WHERE = r"(?P<where>(?:\s+@\S+)*)\s*$"
_ABLATION = re.compile(r"^(?P<hook>[A-Za-z_][\w.]*?)\s+head\s+(?P<head>\d+)" + _WHERE)


class InterventionError(CausedError):
    """A malformed or impossible intervention; its cause names it and what is wrong.

    `intervention` is the one that failed, when it failed while a run applied it (it may fit every round
    but a later one: a row of the wrong width for a longer cache, a request with no such pass)."""

    intervention: Intervention | None = None


class Action(StrEnum):
    SET = "set"  # value: a number, or a row of numbers
    SCALE = "scale"  # value: the factor
    PATCH = "patch"  # value: the request whose value of the same hook is copied in


@dataclass(frozen=True)
class Intervention:
    hook: str
    action: Action
    value: float | int | tuple[float, ...]
    head: int | None = None
    rows: Span = (None, None)
    cols: Span = (None, None)
    when: str | None = None  # "prefill" or "decode.N"; None: every pass
    request: int | None = None  # None: every request

    @property
    def text(self) -> str:
        """The spec this intervention parses from (canonical: the same text parses to it again)."""
        where = "" if (self.rows, self.cols) == ((None, None), (None, None)) else \
            f"[{_span_text(self.rows)},{_span_text(self.cols)}]"
        if self.action is Action.PATCH:
            value = f"=from:{self.value}"
        elif self.action is Action.SCALE:
            value = f"*={_number_text(self.value)}"
        else:
            value = "=" + (_number_text(self.value) if isinstance(self.value, float)
                           else "[" + ", ".join(_number_text(v) for v in self.value) + "]")
        passes = (f" @{self.when}" if self.when else "") + ("" if self.request is None else f" @request.{self.request}")
        return f"{target_text(self.hook, self.head)}{where}{value}{passes}"

    def applies(self, request: int, round_: int) -> bool:
        return (self.request is None or self.request == request) and self.when in (None, pass_name(round_))


def target_text(hook: str, head: int | None) -> str:
    """Where a spec acts, as it writes it: `blocks.0.attn.hook_pattern head 1` (the hook's text, then its head)."""
    return hook if head is None else f"{hook} head {head}"


def pass_name(round_: int) -> str:
    return "prefill" if round_ == 0 else f"decode.{round_}"


def _number_text(value: float) -> str:
    """Short where that loses nothing: 0.5, not 0.50000000000000000; 0.1234567891 whole."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def _span_text(span: Span) -> str:
    start, stop = span
    if start is not None and stop == start + 1:
        return str(start)
    return f"{'' if start is None else start}:{'' if stop is None else stop}"


# -- parsing ---------------------------------------------------------------------------------------
def parse_intervention(text: str) -> Intervention:
    """`HOOK[ head H][ROWS,COLS]=VALUE` (or `*=FACTOR`) with optional ` @prefill`, ` @decode.N`,
    ` @request.N`; VALUE is a number, `[n, n, …]` or `from:REQUEST`."""
    match = _SPEC.match(text.strip())
    site = _hook(match["hook"]) if match else None
    if site is None:
        raise InterventionError("intervention.syntax", text=text)
    hook, value, op = site.text, match["value"].strip(), match["op"]
    rows = _span(match["rows"], text, Cause("part.row")) if match["rows"] is not None else (None, None)
    cols = _span(match["cols"], text, Cause("part.column")) if match["cols"] is not None else (None, None)
    if op == "*=":
        action, amount = Action.SCALE, _number(value, text)
    elif value.startswith("from:"):
        action, amount = Action.PATCH, _index(value[5:], text, "a request number after from:")
    elif value.startswith("["):
        action, amount = Action.SET, _row(value, text)
    else:
        action, amount = Action.SET, _number(value, text)
    when, request = _where(match["where"], text)
    head = None if match["head"] is None else int(match["head"])
    return Intervention(hook, action, amount, head, rows, cols, when, request)


def parse_ablation(text: str) -> Intervention:
    """`blocks.L.attn head H` (a layer kind's module and a head: the per-head hook its kind ablates, ABLATES: head
    H's output zeroed before the output projection, hook_z; a Gated DeltaNet's `blocks.L.linear_attn head H`:
    value head H's read of its state), or `HOOK head H` for another per-head hook, or a kind's own form (its
    ABLATIONS: `blocks.L.mlp expert E`, the score top-k reads −∞ for expert E: never chosen, the next best takes
    its place); ` @prefill`, ` @decode.N`, ` @request.N` as for a patch."""
    for match, make in _kind_ablation(text):
        hook, value, cols = make(match)
        when, request = _where(match["where"], text)
        return Intervention(hook, Action.SET, value, cols=cols, when=when, request=request)
    match = _ABLATION.match(text.strip())
    site = _hook(match["hook"]) if match else None
    if site is None:
        forms = [*(f"'blocks.L.{module} head H'" for module in layers.ablated_hooks()),
                 *(f"'{form}'" for _, form, _ in layers.ablations())]
        raise InterventionError("intervention.ablation", text=text, forms=", ".join(forms[:-1]), last=forms[-1])
    ablated = layers.ablated_hooks().get(site.name) if site.in_block and not site.module else None
    hook = site if ablated is None else Hook(site.layer, site.name, ablated)  # `blocks.L.attn`: the module's hook
    when, request = _where(match["where"], text)
    return Intervention(hook.text, Action.SET, 0.0, int(match["head"]), when=when, request=request)


def _hook(text: str) -> Hook | None:
    """The hook an intervention names (None: `text` is not a hook name)."""
    try:
        return Hook.parse(text)
    except HookError:
        return None


def _kind_ablation(text: str):
    """(match, what it sets) of the layer kinds' own ablation forms that `text` is written in."""
    return [(match, make) for pattern, _, make in layers.ablations()
            if (match := re.match(f"^{pattern}{_WHERE}", text.strip()))]


def parse_any(text: str) -> Intervention:
    """An ablation ('blocks.L.attn head H') or any other intervention spec."""
    ablation = _ABLATION.match(text.strip()) or _kind_ablation(text)
    return parse_ablation(text) if ablation else parse_intervention(text)


def _span(text: str, spec: str, what: Cause) -> Span:
    text = text.strip()
    if text == ":":
        return None, None
    if ":" in text:
        start, stop = (part.strip() for part in text.split(":", 1))
        span = (_index(start, spec, what) if start else None, _index(stop, spec, what) if stop else None)
        if None not in span and span[1] <= span[0]:
            raise InterventionError("intervention.empty_span", text=spec, what=what, span=text)
        return span
    index = _index(text, spec, what)
    return index, index + 1


def _index(text: str, spec: str, what: Cause) -> int:
    if not text.strip().isdigit():
        raise InterventionError("intervention.index", text=spec, what=what, value=text.strip())
    return int(text)


def _number(text: str, spec: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InterventionError("intervention.number", text=spec, value=text) from None


def _row(text: str, spec: str) -> tuple[float, ...]:
    if not text.endswith("]"):
        raise InterventionError("intervention.row_end", text=spec)
    return tuple(_number(part, spec) for part in text[1:-1].split(",") if part.strip())


def _where(text: str, spec: str) -> tuple[str | None, int | None]:
    when = request = None
    for word in text.split():
        if word == "@prefill" or re.fullmatch(r"@decode\.[1-9]\d*", word):
            when = word[1:]
        elif re.fullmatch(r"@request\.\d+", word):
            request = int(word.split(".")[1])
        else:
            raise InterventionError("intervention.where", text=spec, word=word)
    return when, request


def hook_width(hook: str, model, vocab: int) -> int | None:
    """How many columns `hook`'s operator has, where the spec alone says (None: keys, or a hook not listed)."""
    d = model.d_model
    stack = dict.fromkeys(("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_embed"), d)
    widths = stack | layers.hook_widths(model) | {"unembed.hook_out": vocab}
    return widths.get(Hook.parse(hook).local)


def check_intervention(intervention: Intervention, model, requests: int, vocab: int | None = None) -> None:
    """Refuse what cannot apply to `model` (an engine.spec.ModelSpec) with `requests` requests (and, given the
    vocabulary's size, columns or a row the operator does not have)."""
    spec, text = intervention, intervention.text
    width = None if vocab is None else hook_width(spec.hook, model, vocab)
    if width is not None:
        _check_width(spec, width)
    site = Hook.parse(spec.hook)
    if site.layer is not None and site.layer >= model.n_layers:
        raise InterventionError("intervention.layers", text=text, last=model.n_layers - 1)
    for refusal in layers.intervention_refusals(site, spec.action, _values(spec), model):
        code, facts = refusal
        raise InterventionError(code, text=text, **facts)
    head_hooks = layers.per_head_hooks()
    per_head = site.name in head_hooks
    if per_head and spec.head is None:
        raise InterventionError("intervention.name_head", text=text, hook=spec.hook)
    if not per_head and spec.head is not None:
        raise InterventionError("intervention.not_per_head", text=text, hook=spec.hook, hooks=", ".join(head_hooks))
    if spec.head is not None and spec.head >= model.n_heads:
        raise InterventionError("intervention.heads", text=text, last=model.n_heads - 1)
    for index, name in ((spec.request, Cause("part.request")),
                        (spec.value if spec.action is Action.PATCH else None, Cause("part.from"))):
        if index is not None and index >= requests:
            raise InterventionError("intervention.requests", text=text, name=name, index=index, last=requests - 1)


def _values(spec: Intervention) -> tuple:
    return spec.value if isinstance(spec.value, tuple) else (spec.value,)


def routed_expert(intervention: Intervention) -> tuple[int, int] | None:
    """(layer, expert) of an intervention on one expert's hooks (its kind's `routed_expert`): it applies only where a
    token is routed there, which may be a later pass than the first (None for any other hook)."""
    site = Hook.parse(intervention.hook)
    expert = layers.routed_expert(site) if site.layer is not None else None
    return None if expert is None else (site.layer, expert)


def check_operator(intervention: Intervention, hooks) -> None:
    """Refuse an intervention that names no operator the model yields (`hooks`: its engine.hooks.HookRegistry),
    e.g. a misspelt hook."""
    wanted = Hook.parse(intervention.hook)
    if wanted.at(intervention.head) not in hooks:
        near = sorted({site.hook.text for site in hooks if site.hook.name == wanted.name})
        if near:
            raise InterventionError("intervention.no_operator.near", text=intervention.text, hook=intervention.hook,
                                    near=near[0])
        raise InterventionError("intervention.no_operator", text=intervention.text, hook=intervention.hook)


def _check_width(spec: Intervention, width: int) -> None:
    cols = _columns(spec, width)
    if spec.action is Action.SET and isinstance(spec.value, tuple):
        _check_row(spec, len(range(width)[cols]))


def _check_row(spec: Intervention, columns: int) -> None:
    if len(spec.value) != columns:
        raise InterventionError("intervention.row_width", text=spec.text, count=len(spec.value), columns=columns)


# -- applying --------------------------------------------------------------------------------------
Sources = dict[tuple[int, str, int | None], dict[tuple[int, int], tuple[int, Array]]]


class Patcher:
    """Applies a scenario's interventions to each operator as a session produces it."""

    def __init__(self, interventions: Iterable[Intervention], xp, clean_run: Callable[[], Iterator]):
        """Args:
        clean_run: the same session's states without interventions (for `from:` patches).
        """
        self.interventions = tuple(interventions)
        self.xp, self.clean_run = xp, clean_run
        self.by_hook: dict[str, list[Intervention]] = {}
        for intervention in self.interventions:
            self.by_hook.setdefault(intervention.hook, []).append(intervention)
        self.used: set[Intervention] = set()
        self._sources: Sources | None = None

    def unused(self) -> list[Intervention]:
        """The interventions no operator of the run so far matched."""
        return [i for i in self.interventions if i not in self.used]

    def apply(self, op, request: int, round_: int, chunk: int, first: int) -> Array | None:
        """Replace `op.values` as the interventions say; return the values it had, or None if untouched.

        Args:
            first: the absolute position of the op's first row.
        """
        matching = [i for i in self.by_hook.get(op.name, ()) if i.head == op.head and i.applies(request, round_)]
        original, new = op.values, None
        for intervention in matching:
            spans = (_routed(intervention, op.rows) if isinstance(op.rows, tuple)
                     else [_local(intervention.rows, first, original.shape[0])])
            spans = [rows for rows in spans if rows is not None]
            if not spans:
                continue
            new = self.xp.asarray(original, copy=True) if new is None else new
            try:
                cols = _columns(intervention, original.shape[1])
                for rows in spans:
                    new[rows, cols] = self._value(intervention, new[rows, cols], (round_, chunk), rows, first)
            except InterventionError as error:
                error.intervention = intervention
                raise
            self.used.add(intervention)
        if new is None:
            return None
        op.values = new
        return original

    def _value(self, intervention: Intervention, current: Array, at: tuple[int, int], rows: slice, first: int):
        xp, spec = self.xp, intervention
        if spec.action is Action.SCALE:
            return current * spec.value
        if spec.action is Action.SET and isinstance(spec.value, tuple):
            _check_row(spec, current.shape[1])
            return xp.asarray(spec.value, dtype=current.dtype)[None, :]
        if spec.action is Action.SET:
            return spec.value
        source_first, values = self._source(spec, at)
        start, stop = first + rows.start - source_first, first + rows.stop - source_first
        if start < 0 or stop > values.shape[0]:
            raise InterventionError("intervention.patch_rows", text=spec.text, request=spec.value,
                                    first=first + rows.start, last=first + rows.stop - 1, at=pass_name(at[0]))
        patch = values[start:stop, _columns(spec, values.shape[1])]
        if patch.shape != current.shape:
            raise InterventionError("intervention.patch_shape", text=spec.text, request=spec.value,
                                    theirs=f"{patch.shape[0]}×{patch.shape[1]}", at=pass_name(at[0]),
                                    ours=f"{current.shape[0]}×{current.shape[1]}")
        return patch

    def _source(self, spec: Intervention, at: tuple[int, int]) -> tuple[int, Array]:
        if self._sources is None:
            self._sources = self._record()
        passes = self._sources.get((spec.value, spec.hook, spec.head), {})
        if at not in passes:
            raise InterventionError("intervention.patch_pass", text=spec.text, request=spec.value,
                                    at=pass_name(at[0]), chunk=at[1])
        return passes[at]

    def _record(self) -> Sources:
        """One run without interventions, up to the last request patched from, keeping the hooks wanted."""
        wanted = {(i.value, i.hook, i.head) for i in self.interventions if i.action is Action.PATCH}
        last = max(request for request, _, _ in wanted)
        sources: Sources = {key: {} for key in wanted}
        for state in self.clean_run():
            if state.request > last:
                break
            key = (state.request, state.name, state.head)
            if key in sources:
                first = len(state.context) - state.values.shape[0]
                sources[key][(state.round, state.chunk)] = (first, state.values)
        return sources


def _routed(spec: Intervention, positions: tuple[int, ...]) -> list[slice]:
    """An expert's operator holds the rows of the tokens routed to it (`positions`, not a run of the chunk's):
    one row each that the intervention's positions cover."""
    start, stop = spec.rows
    rows = [slice(i, i + 1) for i, p in enumerate(positions)
            if (start is None or p >= start) and (stop is None or p < stop)]
    if rows and spec.action is Action.PATCH:
        raise InterventionError("intervention.expert_patch", text=spec.text)
    return rows


def _local(span: Span, first: int, count: int) -> slice | None:
    """The op's own rows that `span` (absolute positions) covers, or None."""
    start = 0 if span[0] is None else max(span[0] - first, 0)
    stop = count if span[1] is None else min(span[1] - first, count)
    return slice(start, stop) if start < stop else None


def _columns(spec: Intervention, count: int) -> slice:
    start, stop = spec.cols
    if (start or 0) >= count or (stop is not None and stop > count):
        raise InterventionError("intervention.columns", text=spec.text, hook=spec.hook, last=count - 1)
    return slice(start, stop)
