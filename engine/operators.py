"""What the forward pass yields and reads: operators (`Op`) and their operands.

Read-only by convention, like OpState: a frozen dataclass's __init__ costs twice as much, and
a decode step makes some 80 of these per layer.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from engine.hooks import Hook
from engine.trace import OpKind

Array = Any


@dataclass(eq=False, slots=True)
class Operand:
    """An array an operator reads or writes, with how to label its rows and columns.

    rows/cols are label schemes resolved by the session: "chunk" (the new tokens),
    "keys" (every cached position), "last" (the last new token), "features",
    "vocab", "in"/"out" (a weight's input/output features), "choice", "scale" (a norm's divisor).
    """

    name: str
    values: Array
    rows: str = "chunk"
    cols: str = "features"


@dataclass(eq=False, slots=True)
class Op(Operand):
    kind: OpKind = OpKind.EMBED
    layer: int | None = None
    head: int | None = None
    inputs: tuple[Operand, ...] = ()
    hook: Hook | None = None  # where it is (its site: the head is `head`); its `name` is the hook's text


OpStream = Generator[Op, None, Array]


def op(hook: Hook, values: Array, kind: OpKind, *, head: int | None = None, inputs: tuple[Operand, ...] = (),
       rows: str = "chunk", cols: str = "features") -> Op:
    """The operator at `hook`: its name and layer are the hook's."""
    return Op(hook.text, values, rows, cols, kind, hook.layer, head, inputs, hook)


def finish(stream: OpStream):
    """Run an operator stream to its end, unrecorded, and return what it returns."""
    while True:
        try:
            next(stream)
        except StopIteration as done:
            return done.value
