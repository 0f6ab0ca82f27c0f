"""The token timeline: which tokens are processed, being fed, selected or pending (A.9 of 003)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from engine import OpState, Scenario, Status
from engine.history import RoundSummary

# A glyph per status as well as a colour, so that monochrome terminals keep the meaning.
STYLES = {
    Status.PROCESSED: ("✓", "green"),
    Status.CURRENT: ("▶", "bold black on yellow"),
    Status.SELECTED: ("★", "bold magenta"),
    Status.PENDING: ("…", "dim"),
}
LEGEND = "✓ processed (K/V cached)  ▶ being fed  ★ selected, not yet fed  … pending"


class Timeline(Static):
    def show(self, state: OpState, scenario: Scenario, rounds: list[RoundSummary]) -> None:
        text = Text()
        requests = len(scenario.requests)
        where = f"request {state.request + 1}/{requests} · {state.phase}"
        where += f" round {state.round}" if state.phase == "decode" else ""
        where += f" · chunk {state.chunk}" if state.phase == "prefill" and scenario.decode.prefill_chunk else ""
        text.append(f"{where} · cache {state.caches[0].length if state.caches else 0}  ", style="bold")
        for token in state.timeline:
            glyph, style = STYLES[token.status]
            text.append(f"{glyph}{token.position}:{token.text}({token.token})", style=style)
            text.append(" ")
        text.append("\n")
        text.append(self._rounds(rounds) or "no round finished yet", style="italic")
        text.append("\n")
        text.append(LEGEND, style="dim")
        self.update(text)

    @staticmethod
    def _rounds(rounds: list[RoundSummary]) -> str:
        parts = []
        for r in rounds:
            name = "prefill" if r.phase == "prefill" else f"decode {r.round}"
            part = f"{name}: fed {' '.join(r.fed)} → cache {r.cache_length} → chose {r.chosen}"
            parts.append(part + (f" ■ stop: {r.stop}" if r.stop else ""))
        return " │ ".join(parts)
