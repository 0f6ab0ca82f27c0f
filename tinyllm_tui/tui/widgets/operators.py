"""The operator list: every operator of the current round, grouped as the frame says, breakpoints marked."""

from __future__ import annotations

from rich.text import Text

from tinyllm_tui.debugger.frame import Frame, Group, OperatorLine
from tinyllm_tui.tui.i18n import tr
from tinyllm_tui.tui.widgets.linelist import Line, LineList

BREAK_MARK = "●"


def heading(line: OperatorLine, lang: str) -> str:
    text = tr(f"group.{line.group}", lang, layer=line.layer)
    return text + (tr("group.chunk", lang, chunk=line.chunk) if line.chunk else "")


def list_lines(operators: tuple[OperatorLine, ...], lang: str = "en") -> tuple[Line, ...]:
    lines, group = [], None
    for line in operators:
        title = heading(line, lang)
        if title != group:
            group = title
            lines.append((None, Text(f"─ {title}", style="bold")))
        mark = BREAK_MARK if line.breakpoint else " "
        lines.append((line.step, Text.assemble((mark, "bold red"), f"{line.step} {line.short}")))
    return tuple(lines)


class OperatorList(LineList):
    """Keys are step numbers; Enter or a click goes to that step, b toggles a breakpoint on it."""

    lang = "en"

    def show_frame(self, frame: Frame) -> None:
        """The lines of the frame's round; the highlight follows the current step when it moves."""
        if frame.operators is not getattr(self, "_shown", None):
            self._shown = frame.operators
            self.lines = list_lines(frame.operators, self.lang)
        if frame.step != getattr(self, "_current", None):
            self._current = frame.step
            with self.prevent(self.Highlighted):  # the screen moved it: nobody is told (a message up to the app)
                self.highlight(frame.step)


__all__ = ["Group", "OperatorList", "list_lines"]
