"""Why an input is refused, as data: a code and its facts, which a view words from its own catalogue (the
TUI's tinyllm_tui/tui/i18n.py, en and zh: the engine words nothing the TUI shows).

An error that carries one (`CausedError`) still reads as the English sentence the CLI prints: each error
class's TEXTS give that sentence per code, formatted with the facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class Cause:
    """`code` names the case (`breakpoint.field`), `facts` its parts (a fact may be a Cause itself);
    `english` is the CLI's sentence."""

    code: str
    facts: Mapping[str, object] = field(default_factory=dict)
    english: str = ""

    def __str__(self) -> str:
        return self.english


class CausedError(ValueError):
    """A refused input whose message is its `cause` in English (`str(error)`)."""

    TEXTS: ClassVar[Mapping[str, str]] = {}  # code -> the English sentence, with {fact} fields

    def __init__(self, code: str, **facts):
        self.cause = Cause(code, facts, self.TEXTS[code].format(**facts))
        super().__init__(self.cause.english)
