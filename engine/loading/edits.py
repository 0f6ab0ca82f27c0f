"""Weight edits: `blocks.0.attn.wk[0,1]=0.5`, an undo/redo history, and saving.

Saving an inline scenario writes only the edited numbers into the user's own document
(ruamel round-trip keeps comments, key order and layout); a scenario whose weights come
from a file gets a new weight file and its YAML is left as it is. Both replace their file
atomically. `convert_scenario` moves a scenario's weights into a file and names it in the YAML.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.causes import CausedError
from engine.loading.document import parse, round_trip_yaml
from engine.parameters import name_parts
from engine.scenario import Scenario
from engine.loading.weightfile import atomic_write, write_weights

if TYPE_CHECKING:
    from ruamel.yaml.comments import CommentedSeq

Weights = dict[str, np.ndarray]
PLAIN_PATH = re.compile(r"^[\w][\w./-]*$")
SET_SYNTAX = re.compile(r"^\s*([\w.]+)\[\s*(\d+)\s*(?:,\s*(\d+)\s*)?\]\s*=\s*(.+?)\s*$")


class EditError(CausedError):
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
        raise EditError("edit.number", text=text) from None
    if not math.isfinite(value):
        raise EditError("edit.finite", text=text)
    return value


def parse_set(text: str, weights: Weights) -> CellEdit:
    """Parse and check `NAME[ROW,COL]=VALUE` (or `NAME[I]=VALUE` for a vector) against `weights`."""
    match = SET_SYNTAX.match(text)
    if not match:
        raise EditError("edit.syntax", text=text)
    name, row, col, value = match.groups()
    index = (int(row),) if col is None else (int(row), int(col))
    try:
        return check_edit(CellEdit(name, index, parse_value(value)), weights)
    except EditError as error:
        raise EditError("edit.in_set", text=text, cause=error.cause) from None


def check_edit(edit: CellEdit, weights: Weights) -> CellEdit:
    if edit.name not in weights:
        raise EditError("edit.unknown", name=edit.name, names=", ".join(weights))
    shape = weights[edit.name].shape
    if len(edit.index) != len(shape) or any(not 0 <= i < n for i, n in zip(edit.index, shape)):
        raise EditError("edit.index", index=list(edit.index), name=edit.name, shape="×".join(map(str, shape)))
    return edit


FILLS = ("zeros", "identity", "scale", "file")


@dataclass(frozen=True)
class FillEdit:
    """A whole parameter at once: zeros, the identity, s·I, or back to the file's values."""

    name: str
    fill: str  # one of FILLS
    scale: float = 1.0


Edit = CellEdit | FillEdit


def apply_edit(weights: Weights, edit: Edit, file_weights: Weights | None = None) -> Weights:
    """A new weights dict; only the edited array is new. `file_weights` serves the "file" fill. Raises EditError
    for a parameter the model lacks or a cell outside it (a negative index too: it must not wrap around)."""
    if isinstance(edit, CellEdit):
        check_edit(edit, weights)
    old = weights[edit.name]
    if isinstance(edit, CellEdit):
        array = old.copy()
        array[edit.index] = edit.value
    elif edit.fill == "file":
        array = file_weights[edit.name]
    elif edit.fill == "zeros":
        array = np.zeros(old.shape)
    else:
        if old.ndim != 2 or old.shape[0] != old.shape[1]:
            raise EditError("edit.square", fill=edit.fill, name=edit.name, shape="×".join(map(str, old.shape)))
        array = np.eye(old.shape[0]) * (edit.scale if edit.fill == "scale" else 1.0)
    return weights | {edit.name: array}


def edit_record(edit: Edit) -> dict:
    """A JSON-ready form of an edit (the autosaved list of unsaved edits)."""
    return dataclasses.asdict(edit) | {"type": type(edit).__name__}


def edit_from_record(record: dict, weights: Weights) -> Edit:
    """Raises EditError (or KeyError/TypeError/ValueError for a malformed record)."""
    fields = {key: value for key, value in record.items() if key != "type"}
    if record["type"] == "CellEdit":
        return check_edit(CellEdit(fields["name"], tuple(fields["index"]), parse_value(str(fields["value"]))), weights)
    edit = FillEdit(**fields)
    if edit.name not in weights or edit.fill not in FILLS:
        raise EditError("edit.record", record=record)
    return edit


def with_weights(scenario: Scenario, weights: Weights) -> Scenario:
    return dataclasses.replace(scenario, weights=weights)


# -- saving -----------------------------------------------------------------------------------
def edited_text(scenario: Scenario, weights: Weights) -> str:
    """The scenario's document with every number that differs from the file replaced."""
    document = round_trip_yaml().load(scenario.document)  # parsed only now: round-trip is slow
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
    round_trip_yaml().dump(document, buffer)
    return buffer.getvalue()


def save(scenario: Scenario, weights: Weights, path: str | Path | None = None) -> Path:
    """Write the edited scenario to `path` (default: its own file) and return that path.

    Inline weights are written into the YAML. Weights from a file go into a new weight
    file: the scenario's own (its YAML untouched), or, saved as another YAML, one beside it.
    """
    target = Path(path or scenario.path)
    source = scenario.weights_source
    if source is not None and target.resolve() == Path(scenario.path).resolve():
        write_weights(weights, source.file)
        return target
    if source is not None:
        return convert_scenario(scenario, target.with_suffix(source.file.suffix), target, weights)
    text = edited_text(scenario, weights)
    return atomic_write(target, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def convert_scenario(scenario: Scenario, weight_file: str | Path, yaml_file: str | Path,
                     weights: Weights | None = None) -> Path:
    """Write the weights (default: the scenario's) to `weight_file` and a copy of the YAML
    that names it to `yaml_file`; only the `weights:` section of the text changes."""
    weight_file, yaml_file = Path(weight_file), Path(yaml_file)
    write_weights(scenario.weights if weights is None else weights, weight_file)
    relative = Path(os.path.relpath(weight_file.resolve(), yaml_file.resolve().parent)).as_posix()
    text = text_naming_weight_file(scenario, relative)
    return atomic_write(yaml_file, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def text_naming_weight_file(scenario: Scenario, relative: str) -> str:
    """The scenario's text with its `weights:` section replaced by `weights: {file: RELATIVE}`.

    A text splice at the section's position (from the fast composer), not a round-trip dump:
    every other byte stays, and a big inline file is not parsed by the slow round-trip loader.
    Comments after the section's last value (they belong to what follows) stay too.
    """
    text = scenario.document
    key, value = next((k, v) for k, v in parse(text, scenario.path).value if k.value == "weights")
    starts = np.cumsum([0, *(len(line) for line in text.splitlines(keepends=True))])
    begin = int(starts[key.start_mark.line]) + key.start_mark.column
    span = text[begin : int(starts[value.end_mark.line]) + value.end_mark.column].splitlines(keepends=True)
    while len(span) > 1 and span[-1].strip()[:1] in ("", "#"):
        span.pop()
    end = begin + sum(map(len, span))
    name = relative if PLAIN_PATH.match(relative) else json.dumps(relative)
    newline = "\n" if span[-1].endswith("\n") else ""
    return f"{text[:begin]}weights: {{file: {name}}}{newline}{text[end:]}"


def _locate(weights_node, name: str):
    parent, *path = [weights_node, *name_parts(name)]
    for part in path[:-1]:
        parent = parent[part]
    return parent, path[-1]


def _set_number(node, index: tuple[int, ...], value: float) -> None:
    row = node if len(index) == 1 else node[index[0]]
    row[index[-1]] = value


def _flow_rows(array: np.ndarray) -> CommentedSeq:
    from ruamel.yaml.comments import CommentedSeq  # ruamel loads only to save edits

    def flow(values) -> CommentedSeq:
        seq = CommentedSeq(float(x) for x in values)
        seq.fa.set_flow_style()
        return seq

    if array.ndim == 1:
        return flow(array)
    return CommentedSeq(flow(row) for row in array)
