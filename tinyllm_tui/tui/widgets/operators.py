"""The operator list: every operator of the current round, grouped by layer, breakpoints marked."""

from __future__ import annotations

from rich.text import Text

from engine import OpState
from engine.breakpoints import short_name

from tinyllm_tui.debugger.debugger import View
from tinyllm_tui.tui.i18n import tr
from tinyllm_tui.tui.widgets.linelist import Line, LineList

BREAK_MARK = "●"


def group_name(state: OpState, lang: str = "en") -> str:
    if state.layer is not None:
        return f"{tr('layer', lang)} {state.layer}"
    if state.name.startswith("sample."):
        return tr("decode rule", lang)
    return tr("output" if state.name.startswith(("ln_final", "unembed")) else "input", lang)


def operator_lines(view: View, lang: str = "en") -> tuple[Line, ...]:
    lines, group = [], None
    for state in view.round_states:
        heading = group_name(state, lang) + (f" · {tr('chunk', lang)} {state.chunk}" if state.chunk else "")
        if heading != group:
            group = heading
            lines.append((None, Text(f"─ {heading}", style="bold")))
        mark = BREAK_MARK if state.step in view.breaks else " "
        lines.append((state.step, Text.assemble((mark, "bold red"), f"{state.step:>4} {short_name(state)}")))
    return tuple(lines)


class OperatorList(LineList):
    """Keys are step numbers; Enter or a click goes to that step, b toggles a breakpoint on it."""

    lang = "en"

    def show_view(self, view: View) -> None:
        """The lines of `view`'s round; the highlight follows the current step when it moves."""
        key = (view.round_states[0].step if view.round_states else None, len(view.round_states), view.breaks)
        if key != getattr(self, "_shown", None):
            self._shown = key
            self.lines = operator_lines(view, self.lang)
        if view.state.step != getattr(self, "_current", None):
            self._current = view.state.step
            self.highlight(view.state.step)
