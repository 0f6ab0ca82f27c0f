"""The weights browser: every parameter by name and shape, a cell cursor in a windowed grid, live edits.

Edits, undo and redo are the main screen's: the same Debugger moves through the same runner, so
they mean the same on both screens. This screen asks for them with typed messages posted to the screen
that opened it (`opener`), and redraws itself when that screen posts back a RunWorded.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.message_pump import MessagePump
from textual.screen import Screen
from textual.widgets import Static

from tinyllm_tui.debugger import Debugger
from tinyllm_tui.debugger.frame import MatrixFrame
from tinyllm_tui.debugger.results import Refused
from tinyllm_tui.presentation.summaries import shape_text
from tinyllm_tui.tui.i18n import tr
from tinyllm_tui.tui.result_words import describe
from tinyllm_tui.tui.messages import SaveOver
from tinyllm_tui.tui.runner import RunWorded
from tinyllm_tui.tui.widgets.footer import KeyFooter, translated_bindings
from tinyllm_tui.tui.widgets.dialogs import ChoiceScreen, PromptScreen
from tinyllm_tui.tui.widgets.linelist import LineList
from tinyllm_tui.tui.widgets.matrix import MatrixWindow
from tinyllm_tui.tui.widgets.quant_block import QuantBlock


class CursorMatrix(MatrixWindow, can_focus=True):
    SUMMARY = False  # a weight's last row is no position: nothing to summarise
    BINDINGS = [
        Binding("up", "move(-1, 0)", "Up", show=False),
        Binding("down", "move(1, 0)", "Down", show=False),
        Binding("left", "move(0, -1)", "Left", show=False),
        Binding("right", "move(0, 1)", "Right", show=False),
        Binding("pageup", "move(-20, 0)", "Page up", show=False),
        Binding("pagedown", "move(20, 0)", "Page down", show=False),
    ]

    def action_move(self, rows: int, cols: int) -> None:
        if self.matrix is None:
            return
        n_rows, n_cols = self.matrix.values.shape
        row, col = self.cursor or (0, 0)
        self.cursor = (max(0, min(row + rows, n_rows - 1)), max(0, min(col + cols, n_cols - 1)))


class WeightsScreen(Screen):
    # the footer drops what does not fit: Save and Back come first
    BINDINGS = [
        Binding("e,enter", "edit", "Edit cell"),
        Binding("ctrl+s", "app.save", "Save"),
        Binding("escape", "app.pop_screen", "Back"),
        Binding("u", "undo", "Undo"),
        Binding("ctrl+r", "redo", "Redo"),
        Binding("R", "reset", "Reset to file"),
        Binding("0", "fill('zeros')", "Zero"),
        Binding("1", "fill('identity')", "Identity"),
        Binding("asterisk", "scale", "Scale·I"),
        Binding("v", "before_after", "Before/after"),
        Binding("S", "app.save_as", "Save as"),
    ]

    class Asked(Message):
        """A move this screen asks its opener to run for it; the opener posts `asker` a RunWorded when done."""

        def __init__(self, asker: WeightsScreen) -> None:
            super().__init__()
            self.asker = asker

    class EditAsked(Asked):
        """Apply `edit` (keeping the stale cache if `keep_stale`)."""

        def __init__(self, asker: WeightsScreen, edit, keep_stale: bool) -> None:
            super().__init__(asker)
            self.edit, self.keep_stale = edit, keep_stale

    class UndoAsked(Asked):
        """Undo the last edit or intervention."""

    class RedoAsked(Asked):
        """Redo what was undone last."""

    class TensorRead(Message, bubble=False):
        """Parameter `name`, which `refresh_matrix` asked for (its `asked`-th ask), is read: `matrix` shows it,
        with `message`."""

        def __init__(self, asked: int, name: str, matrix: MatrixFrame, message: str) -> None:
            super().__init__()
            self.asked, self.name, self.matrix, self.message = asked, name, matrix, message

    def __init__(self, debugger: Debugger, opener: MessagePump, lang: str = "en"):
        """`opener`: the screen that runs edits, undo and redo (it handles this screen's `Asked` messages)."""
        super().__init__()
        self.debugger, self.opener, self.lang = debugger, opener, lang
        self._bindings = translated_bindings(self._bindings, lang)
        self._shapes = debugger.browser.shapes()  # an edit changes values, never a shape
        self.selected = next(iter(self._shapes))  # the parameter the grid shows
        self._wanted = self.selected  # the one highlighted in the list, shown once read
        self._asked = 0  # how many redraws were asked for: only the latest one's tensor is shown

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield LineList(id="parameters")
            with Vertical(id="weight-right"):
                yield Static(id="weight-title")
                yield CursorMatrix(id="weight-grid")
                yield QuantBlock(id="weight-quant")
                yield Static(id="weight-status")
        yield KeyFooter()

    def on_mount(self) -> None:
        lines = tuple((name, Text(f"{name}  {shape_text(shape)}")) for name, shape in self._shapes.items())
        self.query_one(LineList).show(lines, self.selected)
        grid = self.query_one(CursorMatrix)
        grid.lang = self.lang
        grid.cursor = (0, 0)
        grid.focus()  # the cursor starts in the grid: e edits a number straight away
        self.watch(grid, "cursor", lambda _: self.show_block())
        self.refresh_matrix()

    def show_block(self) -> None:
        """A GGUF checkpoint's (or MXFP4 experts') quantisation block under the cursor."""
        self.query_one(QuantBlock).show(self.debugger.browser.block(self.selected, self._cell_index()), self.lang)

    def on_screen_resume(self) -> None:
        self.refresh_matrix()

    def on_line_list_highlighted(self, event: LineList.Highlighted) -> None:
        if event.key != self._wanted:
            self._wanted = event.key
            self.refresh_matrix()

    def on_line_list_chosen(self) -> None:
        self.query_one(CursorMatrix).focus()

    def refresh_matrix(self, message: str = "") -> None:
        """Redraw the parameter highlighted in the list, saying `message`. Its tensor (a checkpoint's is read on
        first use) is read in a worker of this screen's, not the runner: the browser redraws while the main
        screen's edit is in flight. It is shown, and becomes `selected`, when the TensorRead it posts back is the
        latest asked for; until then the grid, the cursor and the keys are still the last tensor's."""
        self._asked += 1
        asked, name, lang, browser = self._asked, self._wanted, self.lang, self.debugger.browser

        def read() -> None:
            matrix = browser.frame(name, lambda axis, i: tr(f"weights.{axis}", lang, index=i))
            self.post_message(self.TensorRead(asked, name, matrix, message))

        self.run_worker(read, thread=True, group="tensor")

    def on_weights_screen_tensor_read(self, event: TensorRead) -> None:
        if event.asked != self._asked:  # another redraw is on its way
            return
        if event.name != self.selected:  # another parameter: its cursor starts at [0, 0]
            self.selected = event.name
            self.query_one(CursorMatrix).cursor = (0, 0)
        self._show_matrix(event.matrix, event.message)

    def _show_matrix(self, matrix: MatrixFrame, message: str) -> None:
        name, lang = self.selected, self.lang
        readers = ", ".join(self.debugger.browser.readers(name)) or tr("weights.no_reader", lang)
        kind = self.debugger.browser.kind(name)  # a GGUF tensor's type, e.g. Q4_K
        self.query_one("#weight-title", Static).update(tr("weights.read_by", lang, readers=readers))
        self.query_one(CursorMatrix).show(matrix, " · ".join(filter(None, [name, kind])))  # its title adds the shape
        self.show_block()
        status = tr("weights.differ", lang, count=0 if matrix.changed is None else int(matrix.changed.sum()))
        self.query_one("#weight-status", Static).update(" · ".join(filter(None, [status, message])))

    # -- edits -------------------------------------------------------------------------------------
    def _cell_index(self) -> tuple[int, ...]:
        row, col = self.query_one(CursorMatrix).cursor or (0, 0)
        return (col,) if len(self._shapes[self.selected]) == 1 else (row, col)

    def action_edit(self) -> None:
        index = self._cell_index()
        old = self.debugger.browser.value(self.selected, index)
        where = f"{self.selected}[{','.join(map(str, index))}]"
        self.app.push_screen(PromptScreen(tr("ask.value", self.lang, where=where, old=f"{old:g}"),
                                          lambda text: self._accept(index, text)))

    def _accept(self, index: tuple[int, ...], text: str) -> str | None:
        value = self.debugger.parse_value(text)
        if isinstance(value, Refused):
            return describe(value, self.lang)
        self._apply(self.debugger.cell_edit(self.selected, index, value))
        return None

    def _apply(self, edit) -> None:
        """Apply an edit; while decoding, ask first whether to keep the stale cache."""

        def apply(keep_stale: bool) -> None:
            self.opener.post_message(self.EditAsked(self, edit, keep_stale))
            self.refresh_matrix(tr("screen.applying", self.lang, name=edit.name))

        if not self.debugger.edit_asks_about_the_cache():
            apply(False)
            return
        answers = {"r": tr("answer.recompute", self.lang), "k": tr("answer.keep", self.lang)}
        choice = ChoiceScreen(tr("ask.stale", self.lang), answers, "r", lambda answer: apply(answer == "k"), self.lang)
        self.app.call_after_refresh(self.app.push_screen, choice)  # the editor that called us closes first

    def on_save_over(self, message: SaveOver) -> None:
        self.refresh_matrix(message.text)

    def on_run_worded(self, message: RunWorded) -> None:
        """A move asked for is done (or refused) and the opener has worded it: this screen redraws."""
        self.refresh_matrix(message.text)

    def action_undo(self) -> None:
        self.opener.post_message(self.UndoAsked(self))

    def action_redo(self) -> None:
        self.opener.post_message(self.RedoAsked(self))

    def action_reset(self) -> None:
        self._apply(self.debugger.fill_edit(self.selected, "file"))

    def action_fill(self, fill: str) -> None:
        self._apply(self.debugger.fill_edit(self.selected, fill))

    def action_before_after(self) -> None:
        """The file's values instead of the edited ones (• marks the cells that differ)."""
        grid = self.query_one(CursorMatrix)
        grid.show_before = not grid.show_before
        self.refresh_matrix(tr("screen.before" if grid.show_before else "screen.after", self.lang))

    def action_scale(self) -> None:
        self.app.push_screen(PromptScreen(tr("ask.scale", self.lang), self._accept_scale))

    def _accept_scale(self, text: str) -> str | None:
        scale = self.debugger.parse_value(text)
        if isinstance(scale, Refused):
            return describe(scale, self.lang)
        self._apply(self.debugger.fill_edit(self.selected, "scale", scale))
        return None
