"""Hooks: where in the model an operator's output is, as a typed value.

A hook is (layer, module, name, head): `blocks.2.attn.hook_pattern` head 3 is Hook(2, "attn", "hook_pattern", 3).
`Hook.render()` writes the TransformerLens-style text and `Hook.parse()` reads it back; nothing else
builds or splits hook names. A model emits its `HookRegistry`: every hook its forward pass yields, known
before it runs, which breakpoints, interventions and comparisons check names against.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

_TEXT = re.compile(r"^(?:blocks\.(\d+)\.)?(?:(.+)\.)?([^.\s]+)(?: h(\d+))?$")


class HookError(ValueError):
    """A text that is not a hook name: `text`, which the refusal that catches it words."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


@dataclass(frozen=True, slots=True)
class Hook:
    layer: int | None  # None: before the first block or after the last (embedding, final norm, head, decoding)
    module: str  # the dotted part between layer and name: "attn", "attn.q_norm", "ln1", "mlp", "unembed", "" …
    name: str  # the last part: "hook_q", "hook_resid_pre", "cache_k", …
    head: int | None = None
    text: str = field(default="", compare=False, repr=False)  # render() without the head, made once

    def __post_init__(self):
        parts = ([] if self.layer is None else ["blocks", str(self.layer)]) + ([self.module] if self.module else [])
        object.__setattr__(self, "text", ".".join([*parts, self.name]))

    def render(self) -> str:
        """`blocks.2.attn.hook_pattern`, and ` h3` after it for a head."""
        return self.text if self.head is None else f"{self.text} h{self.head}"

    @classmethod
    def parse(cls, text: str) -> Hook:
        """The hook `render()` wrote (a trailing ` hN` is its head)."""
        match = _TEXT.match(text.strip())
        if match is None:
            raise HookError(text)
        layer, module, name, head = match.groups()
        return cls(None if layer is None else int(layer), module or "", name,
                   None if head is None else int(head))

    @classmethod
    def within(cls, layer: int | None, local: str) -> Hook:
        """The hook `local` (as `local` writes it: `attn.hook_q`, `hook_resid_pre`) names in block `layer`."""
        hook = cls.parse(local)
        return hook if hook.layer == layer else replace(hook, layer=layer)

    def at(self, head: int | None) -> Hook:
        return self if head == self.head else replace(self, head=head)

    @property
    def site(self) -> Hook:
        """The hook without its head: every head's operator at this place."""
        return self.at(None)

    @property
    def local(self) -> str:
        """The name within its layer: `attn.hook_q`, `hook_resid_pre` (the whole text outside a block)."""
        if self.layer is None:
            return self.text
        return f"{self.module}.{self.name}" if self.module else self.name

    @property
    def short(self) -> str:
        """`blocks.0.attn.hook_pattern` head 0 -> `attn.pattern h0`: fits a narrow list."""
        name = self.local.replace("hook_", "").replace("attn.attn_", "attn.")
        return name if self.head is None else f"{name} h{self.head}"

    @property
    def in_block(self) -> bool:
        return self.layer is not None

    def __str__(self) -> str:
        return self.render()


@dataclass(frozen=True)
class HookSite:
    """A hook as a registry lists it: with how many heads yield there (0: one operator, no head)."""

    hook: Hook
    heads: int = 0
    routed: bool = False  # yielded only in a pass that routes a token there (a mixture's expert)


class HookRegistry:
    """Every hook a model's forward pass emits, in the order it yields them (the `routed` ones when a token
    is routed there)."""

    def __init__(self, sites: Iterable[HookSite]):
        self.sites = tuple(sites)
        self._by_text = {site.hook.text: site for site in self.sites}

    def __iter__(self) -> Iterator[HookSite]:
        return iter(self.sites)

    def __len__(self) -> int:
        return len(self.sites)

    def __contains__(self, hook: Hook | str) -> bool:
        hook = Hook.parse(hook) if isinstance(hook, str) else hook
        site = self._by_text.get(hook.text)
        return site is not None and (hook.head is None or hook.head < site.heads)

    def texts(self) -> tuple[str, ...]:
        return tuple(self._by_text)

    def every(self) -> Iterator[Hook]:
        """Every hook an operator may have: one per head where heads yield."""
        for site in self.sites:
            yield from (site.hook.at(head) for head in range(site.heads)) if site.heads else (site.hook,)

    def __add__(self, other: HookRegistry) -> HookRegistry:
        return HookRegistry((*self.sites, *other.sites))


class Interned:
    """One Hook object per site, made at first use and shared by every operator there: a decode step
    then builds no hook names (it made some 80 f-strings per layer before)."""

    def __init__(self):
        self._hooks: dict[tuple[int | None, str, str], Hook] = {}

    def __call__(self, layer: int | None, module: str, name: str) -> Hook:
        key = (layer, module, name)
        hook = self._hooks.get(key)
        if hook is None:
            hook = self._hooks[key] = Hook(layer, module, name)
        return hook
