"""The status line: step, then warnings (they must survive a narrow terminal), then the rest."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from tinyllm_tui.tui.i18n import tr


@dataclass(frozen=True)
class StatusData:
    step: int
    last: int | None
    operator: str  # the current operator's short name: on screen at any terminal size
    inject: str | None = None
    stale: bool = False
    unsaved: int = 0
    breakpoints: int = 0
    playing: float | None = None  # steps per second while playing
    interventions: tuple[str, ...] = ()  # on activations, as --patch/--ablate write them
    message: str = ""


def status_text(data: StatusData, lang: str) -> Text:
    last = "?" if data.last is None else data.last
    text = Text(f"{tr('step', lang)} {data.step}/{last} ")
    text.append(data.operator, style="bold")
    if data.inject:
        text.append(f" · ⚠ {tr('injected bug', lang)}: {data.inject}", style="bold yellow")
    if data.stale:
        text.append(f" · ⚠ {tr('stale cache (r: recompute)', lang)}", style="bold yellow")
    if data.unsaved:
        text.append(f" · {data.unsaved} {tr('unsaved edit' if data.unsaved == 1 else 'unsaved edits', lang)}",
                    style="bold")
    if data.interventions:
        count = len(data.interventions)
        text.append(f" · ✂ {count} {tr('intervention' if count == 1 else 'interventions', lang)}: "
                    f"{data.interventions[-1]}", style="bold magenta")
    parts = [f"{data.breakpoints} {tr('breakpoint' if data.breakpoints == 1 else 'breakpoints', lang)}"]
    if data.playing:
        parts.append(f"▶ {tr('playing', lang)} {data.playing:g}/s (+ -)")
    if data.message:
        parts.append(tr(data.message, lang))
    text.append(" · " + " · ".join(parts))
    return text


class StatusBar(Static):
    lang = "en"

    def show(self, data: StatusData) -> None:
        self.update(status_text(data, self.lang), layout=False)  # always one line
