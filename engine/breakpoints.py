"""Breakpoints: where `continue` stops.

A breakpoint is one or more conditions joined by `&`, each one of:
  `blocks.*.attn.hook_pattern`  an operator name glob, or a short name as the TUI lists it
                                (`attn.pattern h1`, `ln_final.normalized`) or its first parts
  `softmax`                     an operator kind: embed, positions, norm, linear, scores, softmax,
                                mix, concat, residual, activation, dropout, logits, filter, probs,
                                choice
  `phase=decode`, `round=1`, `request=0`, `layer=0`, `head=1`
  `nan`                         any NaN in the output
  `inf`                         any ±∞ in the output, except the −∞ that masking puts into scores
  `abs>5`                       max |x| of the output above a threshold
and each layer kind's own (its module's BREAKPOINTS: the MoE FFN's `expert=3`, a token routed to expert 3, and
`route_margin<1e-3`, a near tie between a token's k-th score and the next).
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from engine.causes import CausedError
from engine.arrays import to_host
from engine import layers
from engine.hooks import Hook
from engine.trace import OpKind, OpState, Phase

KINDS = tuple(kind.value for kind in OpKind)
FIELDS = ("phase", "round", "request", "layer", "head")
PHASES = tuple(Phase)
MASKED_KINDS = ("scores", "filter")  # −∞ there is a mask, not an overflow


class BreakpointError(CausedError):
    """A breakpoint text that cannot be understood."""


Condition = Callable[[OpState], bool]


@dataclass(frozen=True)
class Breakpoint:
    text: str
    conditions: tuple[Condition, ...]
    names: tuple[str, ...] = ()  # its operator-name conditions

    def hits(self, state: OpState) -> bool:
        return all(condition(state) for condition in self.conditions)


def parse_breakpoint(text: str) -> Breakpoint:
    parts = [part.strip() for part in text.split("&")]
    if not all(parts):
        raise BreakpointError("breakpoint.empty", text=text)
    names = tuple(part for part in parts if _is_name(part))
    return Breakpoint(text, tuple(_condition(part, text) for part in parts), names)


def _is_name(part: str) -> bool:
    """A name glob or short name (`attn.pattern h1`, `unembed`), as opposed to a kind or a condition."""
    return bool(re.fullmatch(r"[\w.*?\[\]-]+( h[\d*?]+)?", part)) and part not in (*KINDS, "nan", "inf")


def misnamed(breakpoint: Breakpoint, hooks: Iterable[Hook]) -> list[tuple[str, str | None]]:
    """The breakpoint's names that none of `hooks` (a session's registry: every hook a pass may yield) has, each
    with the nearest name one has."""
    hooks = list(hooks)
    known = {form for hook in hooks for form in (hook.text, hook.short, hook.site.short)}
    return [(name, next(iter(difflib.get_close_matches(name, sorted(known), n=1)), None))
            for name in breakpoint.names if not any(hook_matches(hook, name) for hook in hooks)]


def _condition(part: str, text: str) -> Condition:
    for pattern, _, (reads, refusal), condition in layers.breakpoint_conditions():
        if match := re.fullmatch(pattern, part):
            value = match.group(1)
            if not (value.isdigit() if reads == "index" else _is_number(value)):
                raise BreakpointError(refusal, text=text, value=value)
            return condition(int(value) if reads == "index" else float(value))
    if match := re.fullmatch(r"(\w+)=(\w+)", part):
        field, value = match.groups()
        if field not in FIELDS:
            raise BreakpointError("breakpoint.field", text=text, field=field, fields=", ".join(FIELDS))
        wanted = _field_value(field, value, text)
        return lambda s: getattr(s, field) == wanted
    if match := re.fullmatch(r"abs>(.+)", part):
        threshold = _number(match.group(1), text)
        return lambda s: bool(np.max(np.abs(_finite(s)), initial=0.0) > threshold)
    if part == "nan":
        return lambda s: bool(np.isnan(to_host(s.values)).any())
    if part == "inf":
        return _has_overflow
    if part in KINDS:
        return lambda s: s.kind == part
    if _is_name(part):
        return lambda s: name_matches(s, part)
    forms = ["nan", "inf", "abs>N", *(form for _, form, _, _ in layers.breakpoint_conditions())]
    raise BreakpointError("breakpoint.part", text=text, part=part, kinds=", ".join(KINDS), others=", ".join(forms[:-1]),
                          last=forms[-1])


def _field_value(field: str, value: str, text: str) -> str | int:
    """A field's value as a state holds it: `phase` a phase, the others a whole number (`head=01` is head 1);
    anything else is refused, since nothing would ever hit it."""
    if field == "phase":
        if value not in PHASES:
            raise BreakpointError("breakpoint.phase", text=text, value=value, phases=" | ".join(PHASES))
        return value
    if not value.isdigit():
        raise BreakpointError("breakpoint.whole", text=text, field=field, value=value)
    return int(value)


def _number(text: str, breakpoint: str) -> float:
    if not _is_number(text):
        raise BreakpointError("breakpoint.number", text=breakpoint, value=text)
    return float(text)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def short_name(state: OpState) -> str:
    """`blocks.0.attn.hook_pattern` (head 0) -> `attn.pattern h0`: fits a narrow list."""
    return state.hook.short


def name_matches(state: OpState, pattern: str) -> bool:
    """The operator's hook fits the name (hook_matches)."""
    return hook_matches(state.hook, pattern)


def hook_matches(hook: Hook, pattern: str) -> bool:
    """The hook's name or short name fits the glob, or the short name starts with its parts (`unembed` finds
    `unembed.out`, `attn.pattern` every head's pattern)."""
    short = hook.short
    return (fnmatch.fnmatchcase(hook.text, pattern) or fnmatch.fnmatchcase(hook.render(), pattern)
            or fnmatch.fnmatchcase(short, pattern)
            or short.startswith((f"{pattern}.", f"{pattern} ")))


def _finite(state: OpState) -> np.ndarray:
    values = to_host(state.values)
    return values[np.isfinite(values)]


def _has_overflow(state: OpState) -> bool:
    values = to_host(state.values)
    if state.kind in MASKED_KINDS:
        return bool(np.isposinf(values).any())
    return bool(np.isinf(values).any())
