"""The status line: step, then warnings (they must survive a narrow terminal), then the rest."""

from __future__ import annotations

from rich.text import Text
from tinyllm_tui.tui.widgets.wrapped import Wrapped

from tinyllm_tui.debugger.frame import StatusFacts
from tinyllm_tui.tui.i18n import tr


def status_text(facts: StatusFacts, lang: str, *, playing: float | None = None, message: str = "") -> Text:
    """Args: playing: steps per second while playing. message: what the last key did, already in words."""
    text = Text(tr("status.step", lang, step=facts.step, last="?" if facts.last is None else facts.last) + " ")
    text.append(facts.operator, style="bold")
    if facts.inject:
        text.append(" · " + tr("status.inject", lang, name=facts.inject), style="bold yellow")
    if facts.stale:
        text.append(" · " + tr("status.stale", lang), style="bold yellow")
    if facts.unsaved:
        text.append(" · " + tr("status.unsaved", lang, count=facts.unsaved), style="bold")
    if facts.interventions:
        text.append(" · " + tr("status.interventions", lang, count=len(facts.interventions),
                               last=facts.interventions[-1]), style="bold magenta")
    if facts.hits:  # from the breakpoints set now: clearing them clears this
        text.append(" · " + tr("status.hit", lang, names=", ".join(facts.hits)), style="bold red")
    parts = [tr("status.breakpoints", lang, count=facts.breakpoints)]
    if playing:
        parts.append(tr("status.playing", lang, speed=f"{playing:g}"))
    if message:
        parts.append(message)
    text.append(" · " + " · ".join(parts))
    return text


class StatusBar(Wrapped):
    lang = "en"

    def __init__(self, **options):
        super().__init__(lines=1, most=2, **options)  # a long message takes a second line, not an ellipsis

    def show(self, facts: StatusFacts, *, playing: float | None = None, message: str = "") -> None:
        self.show_text(status_text(facts, self.lang, playing=playing, message=message))
