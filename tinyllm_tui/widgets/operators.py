"""The operator list: every operator of the current round, grouped by layer, breakpoints marked."""

from __future__ import annotations

import re

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from engine import OpState

BREAK_MARK = "●"


def short_name(state: OpState) -> str:
    """`blocks.0.attn.hook_pattern` (head 0) -> `attn.pattern h0`: fits a narrow list."""
    name = re.sub(r"^blocks\.\d+\.", "", state.name).replace("hook_", "").replace("attn.attn_", "attn.")
    return name if state.head is None else f"{name} h{state.head}"


def group_name(state: OpState) -> str:
    if state.layer is not None:
        return f"layer {state.layer}"
    if state.name.startswith("sample."):
        return "decode rule"
    return "output" if state.name.startswith(("ln_final", "unembed")) else "input"


class OperatorList(OptionList):
    """Options have the step number as id; group headings are disabled options."""

    def show(self, states: list[OpState], current: int, breaks: set[int]) -> None:
        key = (tuple(s.step for s in states), frozenset(breaks))
        if key != getattr(self, "_shown_key", None):
            self._shown_key = key
            self.set_options(self._build_options(states, breaks))
        self.highlighted = self.get_option_index(str(current))

    def _build_options(self, states: list[OpState], breaks: set[int]) -> list[Option]:
        options, group = [], None
        for state in states:
            heading = group_name(state) + (f" · chunk {state.chunk}" if state.chunk else "")
            if heading != group:
                group = heading
                options.append(Option(Text(f"── {heading} ──", style="bold"), disabled=True))
            mark = BREAK_MARK if state.step in breaks else " "
            prompt = Text.assemble((mark, "bold red"), f"{state.step:>3} {short_name(state)}")
            options.append(Option(prompt, id=str(state.step)))
        return options

    @property
    def highlighted_step(self) -> int | None:
        option = self.highlighted_option
        return int(option.id) if option is not None and option.id else None
