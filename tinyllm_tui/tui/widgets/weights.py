"""The weights browser: every parameter by name and shape, a cell cursor in a windowed grid, live edits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from engine.loading.edits import CellEdit, Edit, EditError, FillEdit, parse_value
from tinyllm_tui.presentation.summaries import shape_text

from tinyllm_tui.debugger.debugger import Busy, Debugger
from tinyllm_tui.tui.widgets.dialogs import ChoiceScreen, PromptScreen
from tinyllm_tui.tui.widgets.linelist import LineList
from tinyllm_tui.tui.widgets.matrix import Labels, MatrixData, MatrixWindow


def axis_labels(debugger: Debugger, name: str, axis: int, count: int) -> Labels:
    """Rows are input features, columns output features; the vocabulary where it is an axis."""
    if {"embed": 0, "unembed": 1}.get(name) == axis:
        return Labels(count, debugger.scenario.vocab.label)
    prefix = "in" if axis == 0 else "out"
    return Labels(count, lambda i: f"{prefix} {i}")


class CursorMatrix(MatrixWindow, can_focus=True):
    BINDINGS = [
        Binding("up", "move(-1, 0)", "Up", show=False),
        Binding("down", "move(1, 0)", "Down", show=False),
        Binding("left", "move(0, -1)", "Left", show=False),
        Binding("right", "move(0, 1)", "Right", show=False),
        Binding("pageup", "move(-20, 0)", "Page up", show=False),
        Binding("pagedown", "move(20, 0)", "Page down", show=False),
    ]

    def action_move(self, rows: int, cols: int) -> None:
        if self.data is None:
            return
        n_rows, n_cols = self.data.values.shape
        row, col = self.cursor or (0, 0)
        self.cursor = (max(0, min(row + rows, n_rows - 1)), max(0, min(col + cols, n_cols - 1)))


class WeightsScreen(Screen):
    @dataclass
    class Edited(Message):
        """The weights changed: `message` says how (the debugger's status line shows it)."""

        message: str

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("e,enter", "edit", "Edit cell"),
        Binding("u", "undo", "Undo"),
        Binding("ctrl+r", "redo", "Redo"),
        Binding("R", "reset", "Reset to file"),
        Binding("0", "fill('zeros')", "Zero"),
        Binding("1", "fill('identity')", "Identity"),
        Binding("asterisk", "scale", "Scale·I"),
        Binding("ctrl+s", "app.save", "Save"),
        Binding("S", "app.save_as", "Save as"),
    ]

    def __init__(self, debugger: Debugger):
        super().__init__()
        self.debugger = debugger
        self.selected = next(iter(debugger.weights))

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield LineList(id="parameters")
            with Vertical(id="weight-right"):
                yield Static(id="weight-title")
                yield CursorMatrix(id="weight-grid")
                yield Static(id="weight-status")
        yield Footer()

    def on_mount(self) -> None:
        lines = tuple((name, Text(f"{name}  {shape_text(w.shape)}")) for name, w in self.debugger.weights.items())
        self.query_one(LineList).show(lines, self.selected)
        grid = self.query_one(CursorMatrix)
        grid.cursor = (0, 0)
        grid.focus()  # the cursor starts in the grid: e edits a number straight away
        self.refresh_matrix()

    def on_screen_resume(self) -> None:
        self.refresh_matrix()

    def on_line_list_highlighted(self, event: LineList.Highlighted) -> None:
        if event.key != self.selected:
            self.selected = event.key
            self.query_one(CursorMatrix).cursor = (0, 0)
            self.refresh_matrix()

    def on_line_list_chosen(self) -> None:
        self.query_one(CursorMatrix).focus()

    def refresh_matrix(self, message: str = "") -> None:
        name, debugger = self.selected, self.debugger
        array = np.atleast_2d(debugger.weights[name])
        original = np.atleast_2d(debugger.file_scenario.weights[name])
        readers = ", ".join(debugger.readers(name)) or "no operator of this round"
        self.query_one("#weight-title", Static).update(
            Text.assemble((f"{name} · {shape_text(debugger.weights[name].shape)}", "bold"), f"\nread by: {readers}"))
        is_matrix = debugger.weights[name].ndim == 2
        rows = axis_labels(debugger, name, 0, array.shape[0]) if is_matrix else ["value"]
        cols = axis_labels(debugger, name, 1, array.shape[1]) if is_matrix else Labels(array.shape[1], str)
        self.query_one(CursorMatrix).data = MatrixData(name, array, rows, cols, before=original)
        edited = int(np.sum(array != original))
        status = f"{edited} cell{' differs' if edited == 1 else 's differ'} from the file (•)"
        self.query_one("#weight-status", Static).update(" · ".join(filter(None, [status, message])))

    # -- edits -------------------------------------------------------------------------------------
    def _cell_index(self) -> tuple[int, ...]:
        row, col = self.query_one(CursorMatrix).cursor or (0, 0)
        return (col,) if self.debugger.weights[self.selected].ndim == 1 else (row, col)

    def action_edit(self) -> None:
        index = self._cell_index()
        old = float(self.debugger.weights[self.selected][index])
        where = f"{self.selected}[{','.join(map(str, index))}]"
        self.app.push_screen(PromptScreen(f"{where} = {old:g} → new value:", lambda text: self._accept(index, text)))

    def _accept(self, index: tuple[int, ...], text: str) -> str | None:
        try:
            value = parse_value(text)
        except EditError as error:
            return f"{error}; the old value is kept"
        self._apply(CellEdit(self.selected, index, value))
        return None

    def _apply(self, edit: Edit) -> None:
        """Apply an edit; while decoding, ask first whether to keep the stale cache."""

        def apply(keep_stale: bool) -> None:
            self.refresh_matrix(f"applying {edit.name}, replaying to this step…")
            self._in_background(self.debugger.apply, edit, keep_stale=keep_stale)

        if not self.debugger.edit_asks_about_the_cache():
            apply(False)
            return
        question = ("The KV cache was computed with the old weights. "
                    "Recompute it, or keep the stale cache to see what it breaks?")
        choice = ChoiceScreen(question, {"r": "recompute (default)", "k": "keep the stale cache"}, "r",
                              lambda answer: apply(answer == "k"))
        self.app.call_after_refresh(self.app.push_screen, choice)  # the editor that called us closes first

    @work(thread=True, exclusive=True, group="edit")
    def _in_background(self, call, *args, **options) -> None:
        """An edit replays the session to the current step: off the UI thread, owning the generator."""
        try:
            message = call(*args, **options)
        except (EditError, Busy) as error:
            message = str(error)
        self.app.call_from_thread(self._edited, message)

    def _edited(self, message: str) -> None:
        self.refresh_matrix(message)
        self.post_message(self.Edited(message))

    def action_undo(self) -> None:
        self._in_background(self.debugger.undo)

    def action_redo(self) -> None:
        self._in_background(self.debugger.redo)

    def action_reset(self) -> None:
        self._apply(FillEdit(self.selected, "file"))

    def action_fill(self, fill: str) -> None:
        self._apply(FillEdit(self.selected, fill))

    def action_scale(self) -> None:
        self.app.push_screen(PromptScreen("Set the matrix to s·I, s =", self._accept_scale))

    def _accept_scale(self, text: str) -> str | None:
        try:
            scale = parse_value(text)
        except EditError as error:
            return str(error)
        self._apply(FillEdit(self.selected, "scale", scale))
        return None
