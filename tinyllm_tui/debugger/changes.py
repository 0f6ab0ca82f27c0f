"""The user's changes to a debugging session, weight edits and interventions, in one undo list: undo takes
back whichever came last, redo brings it again, and a new change forgets what was undone. Each entry is
the whole state the session runs with (arrays are shared between entries unless edited), with the change
that made it. The Debugger replays a session after each move through this list; it knows nothing of
sessions."""

from __future__ import annotations

from dataclasses import dataclass

from engine.interventions import Intervention
from engine.loading.edits import Edit, Weights


@dataclass(frozen=True)
class Changed:
    """What the session runs with after one change, and that change: an edit, or the intervention added or
    dropped (both None: the start)."""

    weights: Weights
    interventions: tuple[Intervention, ...]
    edit: Edit | None = None
    intervention: Intervention | None = None


class Changes:
    """Every state the session has had, in order, and which one is current."""

    def __init__(self, weights: Weights, interventions: tuple[Intervention, ...] = ()):
        self._states, self._at = [Changed(weights, tuple(interventions))], 0
        self.last = self.current  # the change last made, taken back or brought again: what the last replay shows

    @property
    def current(self) -> Changed:
        return self._states[self._at]

    @property
    def weights(self) -> Weights:
        return self.current.weights

    @property
    def interventions(self) -> tuple[Intervention, ...]:
        return self.current.interventions

    def _push(self, state: Changed) -> None:
        del self._states[self._at + 1:]
        self._states.append(state)
        self._at += 1
        self.last = state

    def discard(self) -> None:
        """Forget the last change altogether (it cannot be redone): one that could not run."""
        del self._states[self._at:]
        self._at -= 1
        self.last = self.current

    def edit(self, weights: Weights, edit: Edit) -> None:
        self._push(Changed(weights, self.interventions, edit=edit))

    def add(self, intervention: Intervention) -> None:
        self._push(Changed(self.weights, (*self.interventions, intervention), intervention=intervention))

    def drop(self, intervention: Intervention) -> None:
        """A change of its own: undo puts it back."""
        index = self.interventions.index(intervention)
        kept = self.interventions[:index] + self.interventions[index + 1:]
        self._push(Changed(self.weights, kept, intervention=intervention))

    @property
    def edits(self) -> list[Edit]:
        """The edits that lead from the first weights to the current ones."""
        return [state.edit for state in self._states[1:self._at + 1] if state.edit is not None]

    def undo(self) -> Changed | None:
        """The change taken back, or None when there is none."""
        if self._at == 0:
            return None
        self._at -= 1
        self.last = self._states[self._at + 1]
        return self.last

    def redo(self) -> Changed | None:
        """The change brought again, or None when there is none."""
        if self._at + 1 == len(self._states):
            return None
        self._at += 1
        self.last = self.current
        return self.last

    def start_from(self, weights: Weights) -> None:
        """Weights just written to the file (saved) are where edits start from: nothing before can be undone."""
        self._states, self._at = [Changed(weights, self.interventions)], 0
        self.last = self.current
