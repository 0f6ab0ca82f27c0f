"""The interventions a debugging session applies to activations: one checked before it joins the list
(tinyllm_tui/debugger/changes.py keeps them with the weight edits, in one undo list), the list put into every
session the Debugger starts, and written into the scenario's `interventions:`.

No UI imports: the TUI and the CLI show what this holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np

from engine import to_host
from engine.causes import Cause
from engine.interventions import (Intervention, InterventionError, check_intervention, check_operator,
                                  parse_any)
from engine.loading.document import round_trip_yaml
from engine.loading.weightfile import atomic_write
from engine.scenario import Scenario
from engine.trace import OpKind, OpState
from tinyllm_tui.debugger.readings import choice_before_after

MASKED_KINDS = (OpKind.SCORES, OpKind.SOFTCAP)  # attention scores: a mask writes −∞ where a query may not look


class Change(StrEnum):
    ADDED = "added"
    UNDONE = "undone"  # an undo took back the adding (or the dropping) of `text`
    REDONE = "redone"


@dataclass(frozen=True)
class Unmasked:
    """Cells of a scores operator that were masked (−∞) and an intervention made finite: a query position now
    attends where its mask hid the keys (the patch stays: it is the user's; the words say what it did)."""

    cells: int
    position: int  # the first query position that sees a masked key
    later: bool  # it sees a later position (what a causal mask hides), not only keys outside its window


@dataclass(frozen=True)
class Intervened:
    """A Debugger result: the interventions changed and the run was replayed to the same step."""

    change: Change
    text: str = ""  # the intervention added
    choice: tuple[tuple[str, float], tuple[str, float]] | None = None  # the round's (token text, p) before → after
    unreached: tuple[int, int] | None = None  # (layer, expert): no token routed there in the passes run so far
    unmasked: Unmasked | None = None  # masked scores the intervention made finite in this round


def unmasked(intervention: Intervention, states) -> Unmasked | None:
    """The masked (−∞) cells of a scores operator that `intervention` made finite in `states` (a round's
    engine.OpState, which keep what the operator computed as `original`), or None."""
    cells, opened = 0, []  # (query position, key position) of each cell made finite
    for state in states:
        if (state.original is None or state.kind not in MASKED_KINDS or state.name != intervention.hook
                or state.head != intervention.head):
            continue
        made = np.isneginf(to_host(state.original)) & np.isfinite(to_host(state.values))
        rows, cols = state.output.row_axis.positions, state.output.col_axis.positions
        cells += int(made.sum())
        opened += [(rows[row], cols[col]) for row, col in zip(*np.nonzero(made))]
    if not cells:
        return None
    position = min(query for query, _ in opened)
    return Unmasked(cells, position, any(key > query for query, key in opened if query == position))


def intervened(change: Change, text: str, states: Iterable[OpState], previous, tokens: Sequence[str]) -> Intervened:
    """With the round's choice before → after, once the round (`states`) has chosen: its token's text and
    probability (`previous`: the History of the run before the change; `tokens`: the vocabulary's texts)."""
    before_after = choice_before_after(states, previous)
    choice = None if before_after is None else tuple((tokens[token], p) for token, p in before_after)
    return Intervened(change, text, choice)


def problem(text: str, scenario: Scenario) -> Cause | None:
    """What is wrong with `text` as an intervention on `scenario`'s model (None: nothing seen before a run)."""
    try:
        _well_formed(text, scenario)
    except InterventionError as error:
        return error.cause
    return None


def checked(text: str, scenario: Scenario, hooks) -> Intervention:
    """Parse and check one spec (`--patch` or `--ablate` text); raises InterventionError.

    Args: hooks: the model's engine.hooks.HookRegistry, which every hook it names must be in."""
    intervention = _well_formed(text, scenario)
    check_operator(intervention, hooks)
    return intervention


def _well_formed(text: str, scenario: Scenario) -> Intervention:
    intervention = parse_any(text)
    check_intervention(intervention, scenario.model, len(scenario.requests), len(scenario.vocab))
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
