"""Every key binding of the step debugger, driven headless with Textual's Pilot."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SCENARIOS, X01
from textual.widgets import DataTable, Static, TabbedContent

from engine import load_scenario, load_scenario_text, to_host
from tinyllm_tui.app import DebuggerApp
from tinyllm_tui.widgets.dialogs import HelpScreen, PromptScreen
from tinyllm_tui.widgets.diffview import DiffScreen
from tinyllm_tui.widgets.matrix import MatrixView
from tinyllm_tui.widgets.operators import OperatorList

PATTERN = "blocks.0.attn.hook_pattern"


def make_app(**kwargs) -> DebuggerApp:
    return DebuggerApp(load_scenario(X01), lang="en", **kwargs)


def status(app) -> str:
    return str(app.query_one("#status").render())


def matrix_cells(app) -> list[list[str]]:
    table = app.query_one(MatrixView).query_one(DataTable)
    return [[str(cell).strip() for cell in table.get_row_at(i)] for i in range(table.row_count)]


async def settle(pilot):
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.parametrize("key", ["n", "right", "f10"])
async def test_step_keys_advance_one_operator(key):
    """n, → and F10 each move to the next operator."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(key)  # embed -> ln1
        await pilot.press(key)  # ln1 -> hook_q
        assert app.history.current.step == 2
        assert app.history.current.name == "blocks.0.attn.hook_q"


async def test_step_back_to_step_zero_and_no_further():
    """← walks back through recorded history; at step 0 it says so and stays."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*["n"] * 5)  # to step 5
        await pilot.press(*["left"] * 5)  # back to step 0
        assert app.history.current.step == 0 and app.history.current.name == "hook_embed"
        await pilot.press("left")  # nothing before step 0
        assert app.history.current.step == 0
        assert "already at the first step" in status(app)


async def test_continue_stops_at_the_head0_pattern_of_the_first_request():
    """c runs to the breakpoint: the 3×3 head-0 pattern of 我爱学习 with the seed's numbers."""
    app = make_app(breakpoints=[PATTERN])
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("c")  # continue to the first hook_pattern
        await settle(pilot)
        state = app.history.current
        assert (state.name, state.head, state.request, state.round) == (PATTERN, 0, 0, 0)
        cells = matrix_cells(app)
        # seed: 头0 softmax; ✓ marks cells the seed's expect: table printed the same
        assert cells[1][:3] == ["1 · 爱", "✓ 0.971309", "✓ 0.028691"]
        assert cells[2][2] == "✓ 0.598776"
        assert "breakpoint" in status(app)


async def test_continue_through_every_breakpoint_to_the_end():
    """c, F5, c…: each round's two heads (3 rounds in X01), then the end of the trace."""
    app = make_app(breakpoints=[PATTERN])
    async with app.run_test(size=(80, 24)) as pilot:
        hits = []
        for key in ["c", "f5"] * 3:  # six breakpoint hits
            await pilot.press(key)
            await settle(pilot)
            state = app.history.current
            hits.append((state.request, state.round, state.head))
        assert hits == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1)]
        await pilot.press("c")  # no breakpoint left: run to the end
        await settle(pilot)
        assert app.history.current.name == "sample.hook_choice" and app.history.at_end
        assert "end of trace" in status(app) and "request 0 generated [2, 2]" in status(app)
        await pilot.press("n")  # stepping past the end is refused with a message
        assert "end of trace" in status(app)


@pytest.mark.parametrize("key", ["b", "f9"])
async def test_toggle_breakpoint_on_the_selected_operator(key):
    """b / F9 toggles a breakpoint on the operator highlighted in the list."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        operators = app.query_one(OperatorList)
        operators.focus()
        await pilot.press("down", "down")  # highlight moves from embed to hook_q (past the layer heading)
        assert operators.highlighted_step == 2
        await pilot.press(key)  # set
        assert [b.text for b in app.breakpoints] == ["blocks.0.attn.hook_q"]
        assert "●" in str(operators.get_option("2").prompt)
        await pilot.press("c")  # continue stops there
        await settle(pilot)
        assert app.history.current.step == 2
        await pilot.press(key)  # toggle off
        assert app.breakpoints == []


async def test_add_breakpoint_by_kind_and_refuse_a_bad_one():
    """B asks for a breakpoint text; a bad one gets a message and the prompt stays open."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("B", *"abs>x", "enter")  # not a number
        assert isinstance(app.screen, PromptScreen)
        assert "'x' is not a number" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press("escape", "B", *"softmax&round=1", "enter")  # a kind, in decode round 1
        assert [b.text for b in app.breakpoints] == ["softmax&round=1"]
        await pilot.press("c")
        await settle(pilot)
        state = app.history.current
        assert (state.kind, state.round, state.head) == ("softmax", 1, 0)


async def test_space_plays_until_a_breakpoint_and_pauses():
    """Space auto-advances, stops at a breakpoint; space again pauses."""
    app = make_app(breakpoints=[f"{PATTERN}&head=1"])
    app.play_interval = 0.01
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space")  # play
        for _ in range(200):
            await pilot.pause(0.02)
            if app.player is None:
                break
        assert app.history.current.step == 9 and app.history.current.head == 1
        app.play_interval = 5.0  # slow enough that no step happens before the pause below
        await pilot.press("space")  # play again…
        assert app.player is not None
        await pilot.press("space")  # …and pause
        assert app.player is None and "paused" in status(app)


async def test_goto_step_and_operator_name():
    """g accepts a step number or an operator glob; bad answers get a message."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g", "3", "0", "enter")  # step 30
        assert app.history.current.step == 30
        await pilot.press("g", *"blocks.*.hook_resid_post", "enter")  # next match after 30
        assert app.history.current.name == "blocks.0.hook_resid_post" and app.history.current.round == 1
        await pilot.press("g", *"999", "enter")  # beyond the trace
        assert isinstance(app.screen, PromptScreen)
        assert "no step 999" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press("escape")


@pytest.mark.parametrize("key", ["question_mark", "f1"])
async def test_help_screen_lists_every_binding(key):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(key)
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_panel_keys_switch_tabs_and_heat_toggles():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        tabs = app.query_one(TabbedContent)
        for key, pane in [("k", "cache"), ("i", "inputs"), ("x", "explain")]:
            await pilot.press(key)
            assert tabs.active == pane
        heat = app.query_one(MatrixView).heat
        await pilot.press("h")
        assert app.query_one(MatrixView).heat is not heat


async def test_column_window_scrolls_a_wide_matrix():
    """A 40-feature model shows a window of columns; > and < move it."""
    text = X01.read_text(encoding="utf-8")
    text = text[: text.index("weights:")] .replace("d_model: 4", "d_model: 40").replace("d_ff: 4", "d_ff: 40")
    text += "weights:\n  embed: {scale: 1}\n  blocks:\n    - attn: {wq: identity, wk: identity, wv: identity, wo: identity}\n"
    text += "      mlp: {w_gate: identity, w_up: identity, w_down: identity}\nrequests:\n  - tokens: [我]\n"
    app = DebuggerApp(load_scenario_text(text.replace("embed: {scale: 1}", "embed: zeros")), lang="en")
    async with app.run_test(size=(80, 24)) as pilot:
        title = lambda: str(app.query_one("#matrix-title").render())
        assert "· cols 0–" in title() and "of 40" in title()
        first_window = matrix_cells(app)[0][1:]
        await pilot.press("greater_than_sign")  # next window
        assert title().split("cols ")[1].split("–")[0] == str(len(first_window))
        await pilot.press("less_than_sign", "less_than_sign")  # back, then nothing further left
        assert "cols 0–" in title() and "no more columns" in status(app)


async def test_click_an_operator_goes_there():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        operators = app.query_one(OperatorList)
        index = operators.get_option_index("4")
        await pilot.click(OperatorList, offset=(5, index))  # the row of step 4
        assert app.history.current.step == 4


async def test_unbound_key_gets_an_answer_and_q_quits():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("z")
        assert "no action on 'z'" in status(app)
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_matrix_shows_masked_scores_as_minus_infinity():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*["n"] * 5)  # head-0 scores of 我爱学习
        assert [cell.split()[-1] for cell in matrix_cells(app)[0][1:]] == ["0.665434", "−∞", "−∞"]
        values = to_host(app.history.current.values)
        assert values[0, 1] == float("-inf")


async def test_diff_view_names_the_first_divergence_and_goes_there():
    """d computes the full recompute beside the cached run; Enter jumps to the chosen operator."""
    app = DebuggerApp(load_scenario(SCENARIOS / "chunked.yaml"), lang="en", inject="chunk-mask")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("d")  # compute the diff in a worker, then show it
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        assert "first divergence: request 0 prefill round 0 blocks.0.attn.hook_attn_scores" in str(
            app.screen.query(Static)[1].render())
        await pilot.press("enter")  # go to the first diverging operator: the second chunk's scores
        state = app.history.current
        assert (state.name, state.chunk, state.positions) == ("blocks.0.attn.hook_attn_scores", 1, (3, 4))
        assert np.isinf(to_host(state.values)).tolist() == [[False, True, True, True, True], [False, False, True, True, True]]


async def test_cycling_injections_replays_to_the_same_step():
    """I switches the deliberate bug (none → chunk-mask → …) and keeps the cursor where it was."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g", *"31", "enter")  # decode round 1, head-0 pattern
        await pilot.press("I")  # chunk-mask: decode's single query sees only key 0
        assert app.inject == "chunk-mask" and app.history.current.step == 31
        assert to_host(app.history.current.values)[0].tolist() == [1.0, 0.0, 0.0, 0.0]
        assert "injected bug: chunk-mask" in status(app)
        for _ in range(5):  # through the other four bugs and back to none
            await pilot.press("I")
        assert app.inject is None and "⚠" not in status(app)


async def test_chinese_explanations_and_the_expectations_tab():
    """--lang zh explains with the seeds' four questions; a shows every expect: table of X01."""
    app = DebuggerApp(load_scenario(X01), lang="zh")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press(*["n"] * 6)  # the head-0 pattern
        screen = app.export_screenshot()
        assert "为什么需要" in screen and "每行和为1" in screen
        await pilot.press("a")  # expectations
        assert app.query_one(TabbedContent).active == "expect"
        assert "332/332" in app.export_screenshot()
