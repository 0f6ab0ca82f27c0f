"""The interventions a debugging session applies to activations: one checked before it joins the list
(tinyllm_tui/debugger/changes.py keeps them with the weight edits, in one undo list), the list put into every
session the Debugger starts, and written into the scenario's `interventions:`.

No UI imports: the TUI and the CLI show what this holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from engine.interventions import Intervention, check_intervention, check_operator, parse_any
from engine.loading.document import round_trip_yaml
from engine.loading.weightfile import atomic_write
from engine.scenario import Scenario


class Change(StrEnum):
    ADDED = "added"
    UNDONE = "undone"  # an undo took back the adding (or the dropping) of `text`
    REDONE = "redone"


@dataclass(frozen=True)
class Intervened:
    """A Debugger result: the interventions changed and the run was replayed to the same step."""

    change: Change
    text: str = ""  # the intervention added
    choice: tuple[tuple[str, float], tuple[str, float]] | None = None  # the round's (token text, p) before → after
    unreached: tuple[int, int] | None = None  # (layer, expert): no token routed there in the passes run so far


def checked(text: str, scenario: Scenario, hooks) -> Intervention:
    """Parse and check one spec (`--patch` or `--ablate` text); raises InterventionError.

    Args: hooks: the model's engine.hooks.HookRegistry, which every hook it names must be in."""
    intervention = parse_any(text)
    check_intervention(intervention, scenario.model, len(scenario.requests), len(scenario.vocab))
    check_operator(intervention, hooks)
    return intervention


def applied_to(scenario: Scenario, interventions: tuple[Intervention, ...]) -> Scenario:
    """`scenario` with `interventions` in place of its own."""
    if scenario.interventions == interventions:
        return scenario
    return dataclasses.replace(scenario, interventions=interventions)


def save_interventions(path: str | Path, interventions: Iterable[Intervention]) -> None:
    """Write `interventions:` into the scenario file at `path` (comments and the rest kept); none removes it."""
    yaml, path = round_trip_yaml(), Path(path)
    document = yaml.load(path.read_text(encoding="utf-8"))
    texts = [intervention.text for intervention in interventions]
    if texts:
        document["interventions"] = texts
    else:
        document.pop("interventions", None)
    atomic_write(path, lambda temporary: yaml.dump(document, temporary))
