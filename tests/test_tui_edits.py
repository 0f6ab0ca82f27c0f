"""Editing weights in the TUI: the browser, validation, undo, stale caches, saving, quitting."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import ROOT, X01
from textual.widgets import DataTable

from engine import load_scenario, to_host
from tinyllm_tui.app import DebuggerApp
from tinyllm_tui.widgets.dialogs import ChoiceScreen, PromptScreen

from test_edits import head0_pattern_by_hand

SEED_TABLES = json.loads((ROOT / "tests" / "data" / "x01_seed_tables.json").read_text(encoding="utf-8"))
SEED_HEAD0_PATTERN = next(t for t in SEED_TABLES if t["section"] == 2 and t["heading"] == "头0：逐行softmax权重")


async def open_cell(pilot, parameter: str, row: int, col: int) -> None:
    """In the weights browser, select `parameter` and put the cursor on [row, col]."""
    await pilot.press("w")  # open the browser
    screen = pilot.app.screen
    names = list(pilot.app.weights)
    await pilot.press(*["down"] * names.index(parameter))  # walk the parameter list
    table = screen.query_one(DataTable)
    table.focus()
    table.cursor_coordinate = (row, col + 1)  # column 0 holds the labels


async def type_value(pilot, text: str) -> None:
    await pilot.press("e", *text, "enter")  # open the inline editor, type, accept


def head0_pattern(app) -> np.ndarray:
    app.history.goto(6)  # blocks.0.attn.hook_pattern, head 0, of 我爱学习
    return to_host(app.history.current.values)


async def test_edit_wk_changes_the_pattern_and_undo_restores_the_seed():
    app = DebuggerApp(load_scenario(X01), lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        seed_run = head0_pattern(app)
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        wk = load_scenario(X01).weights["blocks.0.attn.wk"].copy()
        wk[0, 1] = 0.5
        assert np.allclose(head0_pattern(app), head0_pattern_by_hand(wk), atol=1e-14)
        await pilot.press("u")  # undo
        restored = head0_pattern(app)
        assert restored.tobytes() == seed_run.tobytes()
        printed = [[float(x) for x in row["values"]] for row in SEED_HEAD0_PATTERN["rows"]]
        assert np.allclose(restored, printed, atol=5e-7)


@pytest.mark.parametrize("bad", ["abc", "nan", "1e999"])
async def test_an_invalid_entry_is_refused_and_changes_nothing(bad):
    app = DebuggerApp(load_scenario(X01), lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, bad)
        assert isinstance(app.screen, PromptScreen)  # still open, with the text typed kept
        assert "the old value is kept" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press("escape")
        assert app.weights is app.file_scenario.weights and app.weight_history.changed_cells() == 0


async def test_edit_during_decode_can_keep_a_stale_cache_then_recompute():
    app = DebuggerApp(load_scenario(X01), lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("g", *"30", "enter")  # decode round 1 of 我爱学习
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        assert isinstance(app.screen, ChoiceScreen)
        await pilot.press("k")  # keep the stale cache
        await pilot.press("escape")  # back to the debugger
        assert app.stale is not None and "stale cache" in str(app.query_one("#status").render())
        cache = app.history.current.caches[0]
        assert cache.fingerprint != app.scenario.fingerprint  # rows from the old weights
        await pilot.press("r")  # recompute
        assert app.stale is None and app.history.current.caches[0].fingerprint == app.scenario.fingerprint
        assert app.history.current.step == 30


async def test_ctrl_s_saves_after_confirmation(tmp_path):
    path = tmp_path / "x01.yaml"
    shutil.copy(X01, path)
    app = DebuggerApp(load_scenario(path), lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        await pilot.press("ctrl+s")  # asks first
        assert isinstance(app.screen, ChoiceScreen)
        await pilot.press("y")
        assert load_scenario(path).weights["blocks.0.attn.wk"][0, 1] == 0.5
        assert app._unsaved() == 0


async def test_quit_with_unsaved_edits_asks_first():
    app = DebuggerApp(load_scenario(X01), lang="en")
    async with app.run_test(size=(80, 24)) as pilot:
        await open_cell(pilot, "embed", 1, 0)
        await type_value(pilot, "0.3")
        await pilot.press("escape", "q")  # back, then quit
        assert isinstance(app.screen, ChoiceScreen) and app.is_running
        await pilot.press("c")  # cancel: nothing lost
        assert app.is_running and app._unsaved() == 1
        await pilot.press("q", "q")  # quit without saving
        await pilot.pause()
        assert not app.is_running


async def test_matrix_actions_reset_and_before_after():
    """0 zeroes, 1 sets identity, * sets s·I, R resets to the file; v shows the values before the edit."""
    app = DebuggerApp(load_scenario(X01), lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 0)
        await pilot.press("0")  # zero
        assert not app.weights["blocks.0.attn.wk"].any()
        await pilot.press("1")  # identity
        assert (app.weights["blocks.0.attn.wk"] == np.eye(4)).all()
        await pilot.press("asterisk", *"0.5", "enter")  # 0.5·I
        assert (app.weights["blocks.0.attn.wk"] == 0.5 * np.eye(4)).all()
        await pilot.press("R")  # back to the file's matrix
        assert (app.weights["blocks.0.attn.wk"] == app.file_scenario.weights["blocks.0.attn.wk"]).all()
        await pilot.press("1", "escape", "g", *"6", "enter")  # identity Wk, then the head-0 pattern
        now = to_host(app.history.current.values)
        await pilot.press("v")  # before the last edit: the file's Wk
        table = app.query_one(DataTable)
        shown = float(str(table.get_row_at(1)[1]).strip("•✓✗ "))
        assert abs(shown - 0.971309) < 5e-7 and abs(now[1, 0] - 0.971309) > 1e-3
        assert "BEFORE the edit" in str(app.query_one("#matrix-title").render())


async def test_save_as_writes_a_new_file_and_refuses_a_bad_path(tmp_path):
    app = DebuggerApp(load_scenario(X01), lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await open_cell(pilot, "blocks.0.attn.wk", 0, 1)
        await type_value(pilot, "0.5")
        await pilot.press("S", *str(tmp_path / "missing" / "x.yaml"), "enter")  # no such folder
        assert isinstance(app.screen, PromptScreen)
        assert "existing folder" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press(*["backspace"] * 200, *str(tmp_path / "copy.yaml"), "enter")  # clear, retype
        assert load_scenario(tmp_path / "copy.yaml").weights["blocks.0.attn.wk"][0, 1] == 0.5
        assert load_scenario(X01).weights["blocks.0.attn.wk"][0, 1] == 1.0  # the original is untouched
