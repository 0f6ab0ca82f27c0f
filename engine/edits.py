"""Weight edits: `blocks.0.attn.wk[0,1]=0.5`, an undo/redo history, and saving back to YAML.

Saving writes only the edited numbers into the user's own document (ruamel
round-trip keeps comments, key order and layout) and replaces the file atomically.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ruamel.yaml.comments import CommentedSeq

from .document import round_trip_yaml
from .parameters import name_parts
from .scenario import Scenario

Weights = dict[str, np.ndarray]
SET_SYNTAX = re.compile(r"^\s*([\w.]+)\[\s*(\d+)\s*(?:,\s*(\d+)\s*)?\]\s*=\s*(.+?)\s*$")


class EditError(ValueError):
    """An edit that cannot be applied: unknown name, index out of range, not a finite number."""


@dataclass(frozen=True)
class CellEdit:
    name: str
    index: tuple[int, ...]
    value: float


def parse_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise EditError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise EditError(f"expected a finite number, got {text!r}")
    return value


def parse_set(text: str, weights: Weights) -> CellEdit:
    """Parse and check `NAME[ROW,COL]=VALUE` (or `NAME[I]=VALUE` for a vector) against `weights`."""
    match = SET_SYNTAX.match(text)
    if not match:
        raise EditError(f"--set {text!r}: expected NAME[ROW,COL]=VALUE, e.g. blocks.0.attn.wk[0,1]=0.5")
    name, row, col, value = match.groups()
    index = (int(row),) if col is None else (int(row), int(col))
    try:
        return check_edit(CellEdit(name, index, parse_value(value)), weights)
    except EditError as error:
        raise EditError(f"--set {text!r}: {error}") from None


def check_edit(edit: CellEdit, weights: Weights) -> CellEdit:
    if edit.name not in weights:
        raise EditError(f"unknown parameter {edit.name!r} (this model has: {', '.join(weights)})")
    shape = weights[edit.name].shape
    if len(edit.index) != len(shape) or any(not 0 <= i < n for i, n in zip(edit.index, shape)):
        raise EditError(f"index {list(edit.index)} is outside {edit.name}, which is {'×'.join(map(str, shape))}")
    return edit


def apply_edit(weights: Weights, edit: CellEdit) -> Weights:
    """A new weights dict; only the edited array is copied."""
    array = weights[edit.name].copy()
    array[edit.index] = edit.value
    return weights | {edit.name: array}


def with_weights(scenario: Scenario, weights: Weights) -> Scenario:
    return dataclasses.replace(scenario, weights=weights)


class WeightHistory:
    """Undo/redo over whole weight sets (arrays are shared between entries unless edited)."""

    def __init__(self, original: Weights):
        self._states, self._index = [original], 0

    @property
    def current(self) -> Weights:
        return self._states[self._index]

    @property
    def original(self) -> Weights:
        return self._states[0]

    def push(self, weights: Weights) -> None:
        del self._states[self._index + 1 :]
        self._states.append(weights)
        self._index += 1

    def undo(self) -> bool:
        if self._index == 0:
            return False
        self._index -= 1
        return True

    def redo(self) -> bool:
        if self._index + 1 == len(self._states):
            return False
        self._index += 1
        return True

    def changed_cells(self) -> int:
        return sum(int(np.sum(self.current[n] != self.original[n])) for n in self.original)


# -- saving -----------------------------------------------------------------------------------
def edited_text(scenario: Scenario, weights: Weights) -> str:
    """The scenario's document with every number that differs from the file replaced."""
    document = copy.deepcopy(scenario.document)
    for name, array in weights.items():
        original = scenario.weights[name]
        if np.array_equal(array, original):
            continue
        parent, key = _locate(document["weights"], name)
        if not isinstance(parent[key], list):  # a shorthand (identity, {scale: s}) becomes numbers
            parent[key] = _flow_rows(array)
            continue
        for index in zip(*np.nonzero(array != original)):
            _set_number(parent[key], tuple(int(i) for i in index), float(array[index]))
    buffer = io.StringIO()
    yaml = round_trip_yaml()
    yaml.dump(document, buffer)
    return buffer.getvalue()


def save(scenario: Scenario, weights: Weights, path: str | Path | None = None) -> Path:
    """Write atomically (temporary file in the same folder, then rename) and return the path."""
    target = Path(path or scenario.path)
    text = edited_text(scenario, weights)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def _locate(weights_node, name: str):
    parent, *path = [weights_node, *name_parts(name)]
    for part in path[:-1]:
        parent = parent[part]
    return parent, path[-1]


def _set_number(node, index: tuple[int, ...], value: float) -> None:
    row = node if len(index) == 1 else node[index[0]]
    row[index[-1]] = value


def _flow_rows(array: np.ndarray) -> CommentedSeq:
    def flow(values) -> CommentedSeq:
        seq = CommentedSeq(float(x) for x in values)
        seq.fa.set_flow_style()
        return seq

    if array.ndim == 1:
        return flow(array)
    return CommentedSeq(flow(row) for row in array)
