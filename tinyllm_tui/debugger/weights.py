"""The weights a debugging session runs with: the file's, the edits on top of them (kept, with the
interventions, in the session's one undo list: changes.py), how many numbers differ from the file, the
autosave of unsaved edits, saving, a GGUF file's quantisation, and (WeightsBrowser) what the weights browser reads. The Debugger replays a session after
each change; this part knows nothing of sessions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from engine import Scenario, load_scenario
from engine.lazy_weights import LazyWeights, changed_names
from engine.loading.edits import Edit, apply_edit, save
from engine.trace import OpState
from tinyllm_tui.debugger import autosave
from tinyllm_tui.debugger.autosave import Unsaved
from tinyllm_tui.debugger.changes import Changes
from tinyllm_tui.debugger.frame import Labels, MatrixFrame, matrix_frame
from tinyllm_tui.debugger.readings import parameter_readers


class WeightEdits:
    def __init__(self, scenario: Scenario, changes: Changes, edits: list[Edit] = ()):
        """`changes` starts from the file's weights; `edits` (from --set) start as unsaved edits on top of them."""
        self.changes = changes
        self.file, self.fingerprint = scenario, scenario.fingerprint
        for edit in edits:
            self.push(apply_edit(self.current, edit), edit)
        self.found: Unsaved | None = autosave.find(scenario.path, self.fingerprint, scenario.weights)
        self._unsaved: tuple[tuple[int, int] | None, int] = (None, 0)

    @property
    def current(self) -> dict[str, np.ndarray]:
        return self.changes.weights

    def edited(self, edit: Edit) -> dict[str, np.ndarray]:
        """The current weights with `edit` applied (nothing is changed yet); raises EditError."""
        return apply_edit(self.current, edit, self.file.weights)

    def push(self, weights: dict[str, np.ndarray], edit: Edit) -> None:
        self.changes.edit(weights, edit)

    def restore(self, unsaved: Unsaved) -> None:
        """The edits an earlier session left unsaved, on top of the current weights."""
        for edit in unsaved.edits:
            self.push(self.edited(edit), edit)

    def unsaved(self) -> int:
        """How many numbers differ from the file; counted once per pair of weight sets (a GPT-2-sized
        model has 124 M numbers)."""
        current, saved = self.current, self.file.weights
        key = (id(current), id(saved))
        if self._unsaved[0] != key:
            count = sum(int(np.sum(current[name] != saved[name])) for name in changed_names(current, saved))
            self._unsaved = (key, count)
        return self._unsaved[1]

    def autosave(self) -> None:
        """Keep the unsaved edits beside the scenario; none (back to the file's numbers): nothing to offer later."""
        if self.unsaved():
            autosave.keep(self.file.path, self.fingerprint, self.changes.edits)
        else:
            self.drop_autosave()

    def drop_autosave(self) -> None:
        autosave.drop(self.file.path)

    def save(self, path: str | Path | None = None) -> Path:
        """Write the edited weights (atomically; raises OSError with the file untouched); the file written is
        the one edits are relative to from now on."""
        written = save(self.file, self.current, path)
        self.drop_autosave()
        self.file = load_scenario(written)
        self.fingerprint = self.file.fingerprint
        self.changes.start_from(self.file.weights)  # edits are relative to the file
        return written

    def original(self, name: str) -> np.ndarray | None:
        """The file's values of parameter `name` if it was edited (one never edited is not compared: a 0.5B
        embedding is 136M cells)."""
        return self.file.weights[name] if name in changed_names(self.current, self.file.weights) else None

    def quantisation(self):
        """How a GGUF checkpoint stores each parameter (None for weights read from elsewhere)."""
        current = self.current
        return current.quantisation if isinstance(current, LazyWeights) else None


class WeightsBrowser:
    """What the weights browser reads of the weights and the round the cursor is in; edits go through the
    Debugger's moves (its generator's owner)."""

    def __init__(self, edits: WeightEdits, round_states: Callable[[], Sequence[OpState]]):
        self._edits, self._round_states = edits, round_states

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter's shape, in the order the weights list them, reading no array (a checkpoint's are
        read on first use: listing them must not dequantize them all)."""
        current = self._edits.current
        if isinstance(current, LazyWeights):
            return {name: tuple(shape) for name, shape in current.shapes.items()}
        return {name: array.shape for name, array in current.items()}

    def value(self, name: str, index: tuple[int, ...]) -> float:
        """The current value of `name[index]`."""
        return float(self._edits.current[name][index])

    def readers(self, name: str) -> list[str]:
        """The operators of the current round that read parameter `name`."""
        return parameter_readers(self._round_states(), name)

    def kind(self, name: str) -> str | None:
        """Parameter `name`'s GGUF tensor type (Q4_K, …; a folder's MXFP4 experts: MXFP4), or None."""
        quantisation = self._edits.quantisation()
        return None if quantisation is None else quantisation.kind(name)

    def block(self, name: str, index: tuple[int, ...]):
        """The quantisation block behind `name[index]` (engine.loading.gguf_blocks.EncodedBlock); None: unquantized."""
        quantisation = self._edits.quantisation()
        return None if quantisation is None else quantisation.block(name, index)

    def frame(self, name: str, word: Callable[[str, int | None], str]) -> MatrixFrame:
        """Parameter `name` as the weights browser shows it: rows are input features, columns output
        features (the vocabulary where it is an axis); cells that differ from the file are marked.
        `word(axis, index)` is the view's label of a feature: axis "in", "out", or "value" (a vector's one row)."""
        array, original = np.atleast_2d(self._edits.current[name]), self._edits.original(name)
        original = None if original is None else np.atleast_2d(original)
        label = self._edits.file.vocab.label

        def axis(index: int, prefix: str) -> Labels:
            if {"embed": 0, "unembed": 1}.get(name) == index:
                return Labels(array.shape[index], label)
            return Labels(array.shape[index], lambda i: word(prefix, i))

        rows = axis(0, "in") if self._edits.current[name].ndim == 2 else Labels(1, lambda i: word("value", None))
        cols = axis(1, "out") if self._edits.current[name].ndim == 2 else Labels(array.shape[1], str)
        return matrix_frame(name, array, rows, cols, before=original)
