"""What the views know of the scenario opened, as plain facts: the app's title and sub-title, the file a save
offers, and what the main screen lays out (a KV cache or none, a batch or a chat line)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine import Scenario


@dataclass(frozen=True)
class Opened:
    title: str
    path: str  # the scenario file (a save as… makes the file written this)
    weights_file: Path | None  # the weight file the scenario names (weights: {file: …}), offered beside it
    cached: bool  # False for an encoder: it runs one pass and keeps no KV cache
    batch: bool  # the requests run as one batch
    chat: bool  # not a batch, and a request is a chat: the timeline gives it a line
    n_layers: int

    @property
    def name(self) -> str:
        return Path(self.path).name

    @classmethod
    def of(cls, scenario: Scenario) -> Opened:
        source = scenario.weights_source
        return cls(scenario.title, scenario.path, None if source is None else source.file, scenario.model.lm_head,
                   scenario.batch, not scenario.batch and any(request.chat for request in scenario.requests),
                   scenario.model.n_layers)
