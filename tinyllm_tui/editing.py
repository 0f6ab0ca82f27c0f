"""Editing weights from the debugger: the browser, undo/redo, stale caches, saving, quitting.

A mixin of DebuggerApp: it uses the app's history, scenario and status line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine import OpState, Session, load_scenario, to_host
from engine.edits import save, with_weights
from engine.session import StaleFrom

from .widgets.dialogs import ChoiceScreen, PromptScreen
from .widgets.weights import WeightsScreen


class WeightEditing:
    @property
    def weights(self) -> dict[str, np.ndarray]:
        return self.weight_history.current

    def action_weights(self) -> None:
        self.push_screen(WeightsScreen(self._readers()))

    def _readers(self) -> dict[str, list[str]]:
        """Which operators read each parameter, from the first round of a fresh run."""
        readers: dict[str, list[str]] = {}
        for state in Session(self.scenario, self.backend).steps():
            if state.round > 0:
                break
            for operand in state.inputs:
                name = operand.name.removesuffix(".T")
                if name in self.weights and state.name not in readers.setdefault(name, []):
                    readers[name].append(state.name)
        return readers

    def edit_weights(self, name: str, array: np.ndarray) -> None:
        """Replace one parameter; ask about the cache when decoding is under way."""
        if np.array_equal(array, self.weights[name]):
            self._refresh_weights_screen(f"{name} unchanged")
            return
        previous = self.weights
        self.weight_history.push(self.weights | {name: np.asarray(array, dtype=np.float64)})
        state = self.history.current
        if state.phase == "decode":
            question = (f"The KV cache of request {state.request} was computed with the old {name}. "
                        "Recompute it, or keep the stale cache to see what it breaks?")
            choice = ChoiceScreen(question, {"r": "recompute (default)", "k": "keep the stale cache"}, "r",
                                  lambda answer: self._rebuild(f"edited {name}", previous if answer == "k" else None))
            self.call_after_refresh(self.push_screen, choice)  # the editor that called us closes first
        else:
            self._rebuild(f"edited {name}")

    def _rebuild(self, message: str, stale_weights: dict | None = None) -> None:
        """A new session with the current weights, replayed to the same step."""
        state = self.history.current
        self.previous = self.history
        self.stale = None if stale_weights is None else StaleFrom(stale_weights, state.request, state.round)
        self.scenario = with_weights(self.file_scenario, self.weights)
        self._start_session(self.inject)
        self._start_checks()
        self.history.goto(state.step)
        self.show_current(message)
        self._refresh_weights_screen(message)

    def _refresh_weights_screen(self, message: str) -> None:
        if isinstance(self.screen, WeightsScreen):
            self.screen.refresh_matrix(message)

    def _before(self, state: OpState):
        """The current operator's values before the last edit, when it has the same shape."""
        if self.previous is None or not self.previous.goto(state.step):
            return None
        before = self.previous.current
        same = before.name == state.name and before.values.shape == state.values.shape
        return to_host(before.values) if same else None

    def action_undo(self) -> None:
        if self.weight_history.undo():
            self._rebuild("undid the last edit")
        else:
            self.set_status("nothing to undo")

    def action_redo(self) -> None:
        if self.weight_history.redo():
            self._rebuild("redid the edit")
        else:
            self.set_status("nothing to redo")

    def action_recompute(self) -> None:
        if self.stale is None:
            self.set_status("the cache is not stale")
        else:
            self._rebuild("recomputed the cache with the current weights")

    def action_before_after(self) -> None:
        self.show_before = not self.show_before
        self.show_current("showing values BEFORE the last edit" if self.show_before else "showing current values")

    def _unsaved(self) -> int:
        return sum(int(np.sum(self.weights[n] != self.file_scenario.weights[n])) for n in self.weights)

    def action_save(self) -> None:
        count = self._unsaved()
        if not count:
            self.set_status("nothing to save: the weights equal the file")
            return
        question = f"Write {count} edited number{'s' if count != 1 else ''} into {self.file_scenario.path}?"
        self.push_screen(ChoiceScreen(question, {"y": "save", "n": "cancel"}, "n",
                                      lambda answer: self._save_to(self.file_scenario.path) if answer == "y" else None))

    def action_save_as(self) -> None:
        self.push_screen(PromptScreen("Save the scenario with the edited weights as:", self._accept_save_as))

    def _accept_save_as(self, text: str) -> str | None:
        target = Path(text).expanduser()
        if not text or target.is_dir() or not target.parent.is_dir():
            return f"cannot write {text!r}: give a file name in an existing folder"
        return self._save_to(target)

    def _save_to(self, path) -> str | None:
        try:
            written = save(self.file_scenario, self.weights, path)
        except OSError as error:
            self.set_status(f"not saved: {error.strerror} ({path})")
            return f"not saved: {error.strerror}"
        self.file_scenario = load_scenario(written)
        self.sub_title = written.name
        self.show_current(f"saved to {written}")
        self._refresh_weights_screen(f"saved to {written}")
        return None

    async def action_quit(self) -> None:
        count = self._unsaved()
        if not count:
            self.exit()
            return
        question = f"{count} edited number{'s' if count != 1 else ''} not saved."
        answers = {"s": "save and quit", "q": "quit without saving", "c": "cancel"}
        self.push_screen(ChoiceScreen(question, answers, "c", self._after_quit_question))

    def _after_quit_question(self, answer: str) -> None:
        if answer == "q" or (answer == "s" and self._save_to(self.file_scenario.path) is None):
            self.exit()
