"""Row and column labels, built only when something reads them.

An operator's rows and columns are described by an `Axis` (a scheme plus the
positions and tokens it refers to); the label strings — "2 · 学习", "k0 · 我",
"f3", "3 · 你", "token id" — are made here the first time they are read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

WHITESPACE = {" ": "␣", "\n": "\\n", "\t": "\\t", "\r": "\\r"}  # how a token of only whitespace is drawn
EMPTY = "∅"  # a token with no text at all
POSITIONAL = ("chunk", "last", "keys")  # rows/columns that stand for token positions
UNKNOWN = -1  # a cache row past the context has no token: an injected bug put it there
WORDS = {"sink": "sink", "scale": "scale", "scale_head": "scale h{head}", "token_id": "token id"}  # the words inside
# labels, by code: the engine's (English); a view hands pick its own (an attention sink's column, a norm's divisor,
# one a head, the decode rule's choice)
SINK = WORDS["sink"]  # the label of an attention sink's column, as the engine's own readers match it


class WithSink(NamedTuple):
    """An operator's columns that are its keys (a scheme or their positions) and then the `sink` column."""

    keys: str | tuple[int, ...]


class Axis(NamedTuple):
    """One axis of a labelled matrix (a NamedTuple: a traced run makes two per operand).

    scheme: "chunk" (the new tokens), "keys" (every cached position), "last" (the last
    new token), "features", "vocab", "in"/"out" (a weight's input/output features), "choice",
    "scale" (a norm's divisor), "experts" (a router's columns), "rank" (a token's chosen experts, best first).
    """

    scheme: str
    count: int
    first: int = 0  # the absolute position of entry 0 (positional schemes)
    context: tuple[int, ...] = ()  # the token ids at positions 0, 1, …
    vocab: Any = None  # engine.spec.Vocab
    column: bool = False  # key positions read "k0 · 我" as columns
    at: tuple[int, ...] | None = None  # the positions of the entries when they are not consecutive
    sink: bool = False  # attention sinks: a last column `sink` after the keys (a logit with no value row)

    @property
    def positions(self) -> range | tuple[int, ...]:
        """The positions of the entries (a sink column has none)."""
        return range(self.first, self.first + self.count - self.sink) if self.at is None else self.at

    def ids(self) -> tuple[int, ...] | range:
        """What each entry stands for: the token at its position, else its index."""
        if self.scheme not in POSITIONAL:
            return range(self.count)
        return tuple(self.context[p] if p < len(self.context) else UNKNOWN for p in self.positions)


def visible(text: str) -> str:
    """A token's text as drawn: one of only whitespace made visible (␣, \\n, \\t, other spaces as escapes), an empty
    one ∅; a token with a visible character stays as it is, its spaces included (" cat")."""
    if text.strip():
        return text
    return "".join(WHITESPACE.get(c) or ascii(c)[1:-1] for c in text) or EMPTY


def labels(axis: Axis) -> tuple[str, ...]:
    return pick(axis, range(axis.count))


def pick(axis: Axis, indices: Iterable[int], words: dict[str, str] = WORDS) -> tuple[str, ...]:
    """The labels of some entries only (a window onto a large matrix); `words`: those inside them, by code."""
    if axis.scheme in POSITIONAL:
        prefix, keys = "k" if axis.column else "", axis.positions
        shown, context = axis.vocab.shown, axis.context

        def label(p: int) -> str:
            return f"{prefix}{p} · {shown(context[p]) if 0 <= p < len(context) else '?'}"

        return tuple(label(keys[i]) if i < len(keys) else words["sink"] for i in indices)
    if axis.scheme == "vocab":
        return tuple(axis.vocab.label(i) for i in indices)
    if axis.scheme == "choice":
        return tuple(words["token_id"] for _ in indices)
    if axis.scheme == "experts":
        return tuple(f"e{i}" for i in indices)
    if axis.scheme == "rank":  # a token's chosen experts, best first
        return tuple(f"#{i + 1}" for i in indices)
    if axis.scheme == "scale":  # one divisor per row, or per head (q/k norms)
        return tuple(words["scale"] if axis.count == 1 else words["scale_head"].format(head=i) for i in indices)
    return tuple(f"f{i}" for i in indices)


def resolve(axis: Axis | tuple[str, ...]) -> tuple[str, ...]:
    """Labels given as strings pass through; an Axis is labelled now."""
    return labels(axis) if isinstance(axis, Axis) else tuple(axis)


def resolve_some(axis: Axis | tuple[str, ...], indices: Iterable[int],
                 words: dict[str, str] = WORDS) -> tuple[str, ...]:
    return pick(axis, indices, words) if isinstance(axis, Axis) else tuple(axis[i] for i in indices)
