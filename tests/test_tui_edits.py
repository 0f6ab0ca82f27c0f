"""Editing weights in the TUI: the browser, validation, undo, stale caches, saving, quitting."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import ROOT, X01
from tui_helpers import make_app, matrix_cells, matrix_text, screen_text, settle, state, status

from engine import load_scenario, to_host
from tinyllm_tui.tui.widgets.dialogs import ChoiceScreen, PromptScreen
from tinyllm_tui.tui.widgets.weights import CursorMatrix, WeightsScreen

from test_edits import head0_pattern_by_hand

SEED_TABLES = json.loads((ROOT / "tests" / "data" / "x01_seed_tables.json").read_text(encoding="utf-8"))
SEED_HEAD0_PATTERN = next(t for t in SEED_TABLES if t["section"] == 2 and t["heading"] == "头0：逐行softmax权重")
SEED_PRINTED = [[float(x) for x in row["values"]] for row in SEED_HEAD0_PATTERN["rows"]]


async def open_cell(pilot, parameter: str, row: int, col: int) -> None:
    """In the weights browser, select `parameter` and move the cell cursor to [row, col] with the keys."""
    await pilot.press("w")  # open the browser: the cursor starts in the grid at [0, 0]
    names = list(pilot.app.debugger.weights)
    await pilot.press("tab")  # to the parameter list
    await pilot.press(*["down"] * names.index(parameter), "enter")  # walk the list; Enter returns to the grid
    await pilot.press(*["down"] * row, *["right"] * col)


async def type_value(pilot, text: str) -> None:
    await pilot.press("e", *text, "enter")  # open the inline editor, type, accept


def grid_cell(app, row: int, col: int) -> float:
    """The number the weights grid shows at [row, col] (cells carry a • when they differ from the file)."""
    cells = matrix_cells(app, "#weight-grid")
    return float(cells[row][col + 1].strip("•✓✗ "))


def head0_pattern(app) -> np.ndarray:
    app.debugger.goto_step(8)  # blocks.0.attn.hook_pattern, head 0, of 我爱学习
    return to_host(state(app).values)


async def test_the_cursor_starts_in_the_grid_and_an_edit_shows_at_once():
    """e edits the cell under the cursor (no label column to land on); the grid shows the new value right away."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        assert isinstance(app.screen, WeightsScreen) and app.screen.query_one(CursorMatrix).has_focus
        assert grid_cell(app, 0, 1) == 1.0
        await type_value(pilot, "0.25")
        assert grid_cell(app, 0, 1) == 0.25  # without leaving the matrix
        assert "•" in matrix_cells(app, "#weight-grid")[0][2]
        assert "1 cell differs from the file" in screen_text(app)


async def test_edit_wk_changes_the_pattern_and_undo_restores_the_seed():
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        seed_run = head0_pattern(app)
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        wk = load_scenario(X01).weights["blocks.0.attn.wk"].copy()
        wk[0, 1] = 0.5
        assert np.allclose(head0_pattern(app), head0_pattern_by_hand(wk), atol=1e-14)
        await pilot.press("u")  # undo
        assert grid_cell(app, 0, 1) == 1.0
        restored = head0_pattern(app)
        assert restored.tobytes() == seed_run.tobytes()
        assert np.allclose(restored, SEED_PRINTED, atol=5e-7)


@pytest.mark.parametrize("bad", ["abc", "nan", "1e999"])
async def test_an_invalid_entry_is_refused_and_changes_nothing(bad):
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, bad)
        assert isinstance(app.screen, PromptScreen)  # still open, with the text typed kept
        assert "the old value is kept" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press("escape")
        assert app.debugger.unsaved() == 0


async def test_edit_during_decode_can_keep_a_stale_cache_then_recompute():
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("g", *"32", "enter")  # decode round 1 of 我爱学习
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        assert isinstance(app.screen, ChoiceScreen)
        await pilot.press("k")  # keep the stale cache
        await pilot.press("escape")  # back to the debugger
        assert app.debugger.stale is not None and "stale cache" in status(app)
        assert state(app).caches[0].fingerprint != app.debugger.fingerprint  # rows from the old weights
        assert "⚠ stale: old weights, r recomputes" in screen_text(app)  # so says the KV cache beside the matrix
        await pilot.press("r")  # recompute
        assert app.debugger.stale is None and state(app).caches[0].fingerprint == app.debugger.fingerprint
        assert state(app).step == 32


async def test_ctrl_s_saves_after_confirmation(x01_copy):
    path = x01_copy
    app = make_app(path)
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        await pilot.press("ctrl+s")  # asks first
        assert isinstance(app.screen, ChoiceScreen)
        await pilot.press("y")
        await settle(pilot)  # written in the runner
        assert load_scenario(path).weights["blocks.0.attn.wk"][0, 1] == 0.5
        assert app.debugger.unsaved() == 0


async def test_a_failed_save_says_why_and_keeps_the_edit(tmp_path):
    """The scenario's folder is gone when saving (as a read-only folder or a full disk would fail it)."""
    folder = tmp_path / "gone"
    folder.mkdir()
    shutil.copy(X01, folder / "x01.yaml")
    app = make_app(folder / "x01.yaml")
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        shutil.rmtree(folder)
        await pilot.press("ctrl+s", "y")
        await settle(pilot)
        assert app.debugger.unsaved() == 1 and app.debugger.weights["blocks.0.attn.wk"][0, 1] == 0.5
        await pilot.press("escape")
        assert "not saved: No such file or directory" in status(app)


async def test_quit_with_unsaved_edits_asks_first():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_cell(pilot, "embed", 1, 0)
        await type_value(pilot, "0.3")
        await pilot.press("escape", "q")  # back, then quit
        assert isinstance(app.screen, ChoiceScreen) and app.is_running
        await pilot.press("c")  # cancel: nothing lost
        assert app.is_running and app.debugger.unsaved() == 1
        await pilot.press("ctrl+c", "q")  # ctrl+c asks the same; quit without saving
        await pilot.pause()
        assert not app.is_running


async def test_save_and_quit_ends_the_app_once_written_and_stays_when_the_write_fails(tmp_path, x01_copy):
    """q, then s: the app quits only after the runner has written the file."""
    app = make_app(x01_copy)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_cell(pilot, "embed", 1, 0)
        await type_value(pilot, "0.3")
        shutil.move(x01_copy, tmp_path / "moved.yaml")
        x01_copy.mkdir()  # the file to write is now a folder: the write fails
        await pilot.press("escape", "q", "s")
        await settle(pilot)
        assert app.is_running and app.debugger.unsaved() == 1
        assert "not saved: Is a directory" in status(app)
        x01_copy.rmdir()
        await pilot.press("q", "s")
        await settle(pilot)
        assert not app.is_running
    assert load_scenario(x01_copy).weights["embed"][1, 0] == 0.3


async def test_matrix_actions_reset_and_before_after():
    """0 zeroes, 1 sets identity, * sets s·I, R resets to the file; v shows the values before the edit."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 0)
        weights = lambda: app.debugger.weights["blocks.0.attn.wk"]
        await pilot.press("0")  # zero
        assert not weights().any()
        await pilot.press("1")  # identity
        assert (weights() == np.eye(4)).all()
        await pilot.press("asterisk", *"0.5", "enter")  # 0.5·I
        assert (weights() == 0.5 * np.eye(4)).all()
        await pilot.press("R")  # back to the file's matrix
        assert (weights() == app.debugger.file_scenario.weights["blocks.0.attn.wk"]).all()


async def test_before_after_marks_changed_cells_and_judges_the_values_shown():
    """v after an edit: the seed's printed numbers agree (✓) with the values before it, and • marks each change."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 0)
        await pilot.press("1", "escape", "g", *"8", "enter")  # identity Wk, then the head-0 pattern
        await settle(pilot)
        now = to_host(state(app).values)
        after = matrix_cells(app)
        assert after[1][1].startswith("•✗")  # edited value, which the seed did not print
        await pilot.press("v")  # before the last edit: the file's Wk
        before = matrix_cells(app)
        assert before[1][1] == "•✓ 0.971309" and abs(now[1, 0] - 0.971309) > 1e-3
        assert "BEFORE the edit" in matrix_text(app)[1] and "expect: 9/9" in matrix_text(app)[1]


async def test_save_as_writes_a_new_file_and_refuses_a_bad_path(tmp_path):
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        await pilot.press("S", *str(tmp_path / "missing" / "x.yaml"), "enter")  # no such folder
        assert isinstance(app.screen, PromptScreen)
        assert "existing folder" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press("home", "shift+end", "backspace", *str(tmp_path / "copy.yaml"), "enter")  # clear, retype
        await settle(pilot)
        assert load_scenario(tmp_path / "copy.yaml").weights["blocks.0.attn.wk"][0, 1] == 0.5
        assert load_scenario(X01).weights["blocks.0.attn.wk"][0, 1] == 1.0  # the original is untouched


async def test_edits_survive_a_crash_and_are_offered_on_the_next_start(tmp_path, x01_copy, monkeypatch):
    """Unsaved edits are autosaved beside the scenario (as edits, not weights) and offered again."""
    monkeypatch.delenv("TINYLLM_AUTOSAVE_DIR")  # the real place: beside the scenario
    path = x01_copy
    app = make_app(path)
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        await pilot.press("0")  # and zero the whole of Wk... (a fill, kept as one edit)
        await pilot.press("u")  # ...then undo that
    # the app is gone without the quit question, as after a kill
    autosaved = (tmp_path / ".x01.yaml.unsaved-edits.json").read_text(encoding="utf-8")
    assert '"CellEdit"' in autosaved and "zeros" not in autosaved and len(autosaved) < 1000
    assert load_scenario(path).weights["blocks.0.attn.wk"][0, 1] == 1.0  # the scenario itself is untouched
    app = make_app(path)
    async with app.run_test(size=(160, 48)) as pilot:
        assert isinstance(app.screen, ChoiceScreen)  # an earlier session left 1 unsaved weight edit
        await pilot.press("r")  # restore
        assert app.debugger.weights["blocks.0.attn.wk"][0, 1] == 0.5 and app.debugger.unsaved() == 1
        await pilot.press("q", "q")  # quit without saving, on purpose: the autosave goes
    assert not (tmp_path / ".x01.yaml.unsaved-edits.json").exists()
    app = make_app(path)
    async with app.run_test(size=(160, 48)) as pilot:
        assert not isinstance(app.screen, ChoiceScreen)  # nothing left to offer


async def test_the_weights_screen_asks_the_main_screen_by_messages(monkeypatch):
    """An edit, undo and redo made in the weights browser are typed messages the main screen handles (the
    browser never reaches for `app.main`); the main screen words each result, and the browser shows those words."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        main, asked = app.screen, []
        post = main.post_message
        monkeypatch.setattr(main, "post_message", lambda message: asked.append(type(message).__name__) or post(message))
        monkeypatch.setattr(type(app), "main", property(lambda _: pytest.fail("the weights screen used app.main")))
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        await settle(pilot)
        applied = main.message
        assert "blocks.0.attn.wk" in applied and applied in screen_text(app)  # the main screen's words, shown here
        await pilot.press("u")
        await settle(pilot)
        assert app.debugger.weights["blocks.0.attn.wk"][0, 1] == 1.0 and main.message in screen_text(app)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert app.debugger.weights["blocks.0.attn.wk"][0, 1] == 0.5
        assert [name for name in asked if name.endswith("Asked")] == ["EditAsked", "UndoAsked", "RedoAsked"]
