"""The weights browser: every parameter by name and shape, editable cell by cell."""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, OptionList, Static
from textual.widgets.option_list import Option

from engine import Scenario
from engine.edits import CellEdit, EditError, apply_edit, parse_value

from ..numbers import number_cell
from .dialogs import PromptScreen
from .matrix import relabel


def axis_labels(scenario: Scenario, name: str, axis: int, count: int) -> list[str]:
    """Rows are input features, columns output features; the vocabulary where it is an axis."""
    vocab_axis = {"embed": 0, "unembed": 1}.get(name)
    if vocab_axis == axis:
        return [scenario.vocab.label(i) for i in range(count)]
    return [f"{'in' if axis == 0 else 'out'} {i}" for i in range(count)]


class WeightsScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("e", "edit", "Edit cell"),
        Binding("u", "app.undo", "Undo"),
        Binding("ctrl+r", "app.redo", "Redo"),
        Binding("R", "reset", "Reset to file"),
        Binding("0", "fill('zeros')", "Zero"),
        Binding("1", "fill('identity')", "Identity"),
        Binding("asterisk", "scale", "Scale·I"),
        Binding("ctrl+s", "app.save", "Save"),
        Binding("S", "app.save_as", "Save as"),
    ]

    def __init__(self, readers: dict[str, list[str]]):
        super().__init__()
        self._readers = readers

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield OptionList(id="parameters")
            with Vertical(id="weight-right"):
                yield Static(id="weight-title")
                yield DataTable(id="weight-table", cursor_type="cell")
                yield Static(id="weight-status")
        yield Footer()

    def on_mount(self) -> None:
        weights = self.app.weights
        self.query_one(OptionList).set_options(
            Option(f"{name}  {'×'.join(map(str, w.shape))}", id=name) for name, w in weights.items())
        self.query_one(OptionList).highlighted = 0
        self.selected = next(iter(weights))
        self.refresh_matrix()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.selected = event.option.id
        self.refresh_matrix()

    def refresh_matrix(self, message: str = "") -> None:
        scenario, name = self.app.scenario, self.selected
        array = np.atleast_2d(self.app.weights[name])
        original = np.atleast_2d(self.app.file_scenario.weights[name])
        readers = ", ".join(self._readers.get(name, [])) or "no operator"
        shape = "×".join(map(str, self.app.weights[name].shape))
        title = Text.assemble((f"{name} · {shape}", "bold"), f"\nread by: {readers}")
        self.query_one("#weight-title", Static).update(title)
        table = self.query_one(DataTable)
        cursor = table.cursor_coordinate
        is_matrix = self.app.weights[name].ndim == 2
        rows = axis_labels(scenario, name, 0, array.shape[0]) if is_matrix else ["value"]
        cols = axis_labels(scenario, name, 1, array.shape[1]) if is_matrix else [str(j) for j in range(array.shape[1])]
        relabel(table, rows, cols)
        for label, row, before in zip(rows, array, original):
            cells = [Text("  ") + number_cell(float(x), "bold yellow" if x != b else "") for x, b in zip(row, before)]
            table.add_row(Text(label, style="bold"), *cells)
        table.cursor_coordinate = cursor
        edited = int(np.sum(array != original))
        status = f"{edited} cell{' differs' if edited == 1 else 's differ'} from the file (yellow)"
        self.query_one("#weight-status", Static).update(" · ".join(filter(None, [status, message])))

    def on_data_table_cell_selected(self) -> None:
        self.action_edit()  # Enter (or a click) on a cell edits it

    def _cell_index(self) -> tuple[int, ...] | None:
        table = self.query_one(DataTable)
        row, col = table.cursor_coordinate
        if col == 0:
            return None
        return (col - 1,) if self.app.weights[self.selected].ndim == 1 else (row, col - 1)

    def action_edit(self) -> None:
        index = self._cell_index()
        if index is None:
            self.refresh_matrix("move to a number first (the first column holds labels)")
            return
        old = float(self.app.weights[self.selected][index])
        where = f"{self.selected}[{','.join(map(str, index))}]"
        self.app.push_screen(PromptScreen(f"{where} = {old:g} → new value:", lambda text: self._accept(index, text)))

    def _accept(self, index: tuple[int, ...], text: str) -> str | None:
        try:
            value = parse_value(text)
        except EditError as error:
            return f"{error}; the old value is kept"
        self.app.edit_weights(self.selected, apply_edit(self.app.weights, CellEdit(self.selected, index, value))[self.selected])
        return None

    def action_reset(self) -> None:
        self.app.edit_weights(self.selected, self.app.file_scenario.weights[self.selected])

    def action_fill(self, kind: str) -> None:
        shape = self.app.weights[self.selected].shape
        if kind == "identity" and (len(shape) != 2 or shape[0] != shape[1]):
            self.refresh_matrix(f"identity needs a square matrix; this one is {'×'.join(map(str, shape))}")
            return
        self.app.edit_weights(self.selected, np.eye(shape[0]) if kind == "identity" else np.zeros(shape))

    def action_scale(self) -> None:
        shape = self.app.weights[self.selected].shape
        if len(shape) != 2 or shape[0] != shape[1]:
            self.refresh_matrix(f"s·I needs a square matrix; this one is {'×'.join(map(str, shape))}")
            return
        self.app.push_screen(PromptScreen("Set the matrix to s·I, s =", self._accept_scale))

    def _accept_scale(self, text: str) -> str | None:
        try:
            scale = parse_value(text)
        except EditError as error:
            return str(error)
        self.app.edit_weights(self.selected, scale * np.eye(self.app.weights[self.selected].shape[0]))
        return None
