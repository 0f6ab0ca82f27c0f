"""Every key binding of the step debugger, driven headless with Textual's Pilot."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SCENARIOS, X01
from textual.widgets import TabbedContent
from tui_helpers import long_scenario, make_app, matrix_cells, matrix_text, screen_text, settle, state, status

from engine import load_scenario, load_scenario_text, to_host
from tinyllm_tui.tui.app import DebuggerApp
from tinyllm_tui.tui.main_screen import DebuggerScreen
from tinyllm_tui.presentation.numbers import format_number
from tinyllm_tui.tui.widgets.dialogs import BreakpointsScreen, HelpScreen, PromptScreen
from tinyllm_tui.tui.widgets.diffview import DiffScreen
from tinyllm_tui.tui.widgets.footer import KeyFooter
from tinyllm_tui.tui.widgets.matrix import MatrixWindow
from tinyllm_tui.tui.widgets.operators import OperatorList
from tinyllm_tui.tui.widgets.timeline import Timeline

PATTERN = "blocks.0.attn.hook_pattern"


@pytest.mark.parametrize("key", ["n", "right", "f10"])
async def test_step_keys_advance_one_operator(key):
    """n, → and F10 each move to the next operator."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*[key] * 4)  # embed -> resid_pre -> ln1 scale -> ln1 normalized -> hook_q
        assert (state(app).step, state(app).name) == (4, "blocks.0.attn.hook_q")


async def test_step_back_to_step_zero_and_no_further():
    """← walks back through recorded history; at step 0 it says so and stays."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*["n"] * 5, *["left"] * 5)  # to step 5 and back
        assert state(app).step == 0 and state(app).name == "hook_embed"
        await pilot.press("left")  # nothing before step 0
        assert state(app).step == 0 and "already at the first step" in status(app)


async def test_continue_stops_at_the_head0_pattern_of_the_first_request():
    """c runs to the breakpoint: the 3×3 head-0 pattern of 我爱学习 with the seed's numbers."""
    app = make_app(breakpoints=[PATTERN])
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("c")  # continue to the first hook_pattern
        await settle(pilot)
        assert (state(app).name, state(app).head, state(app).request, state(app).round) == (PATTERN, 0, 0, 0)
        cells = matrix_cells(app)
        # seed: 头0 softmax; ✓ marks cells the seed's expect: table printed the same
        assert cells[1][:3] == ["1 · 爱", "✓ 0.971309", "✓ 0.028691"]
        assert cells[2][2] == "✓ 0.598776"
        assert "breakpoint" in status(app)


async def test_continue_to_the_end_names_the_generated_tokens_as_text():
    """The end message shows tokens (爱), never their ids as numbers; requests count from 0 everywhere."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("c")  # no breakpoint: to the end
        await settle(pilot)
        assert state(app).name == "sample.hook_choice" and app.debugger.view.at_end
        assert "request 0 generated '爱爱'" in status(app) and "[2, 2]" not in status(app)  # decoded text
        assert "request 1 (of 2)" in str(app.main.query_one(Timeline).render())
        assert "chose 4 · 你" in matrix_text(app)[1] and matrix_cells(app)[0][1] == "4 · 你"  # 你爱 → 你
        await pilot.press("n")  # stepping past the end is refused with a message
        assert "end of trace" in status(app)


@pytest.mark.parametrize("key", ["b", "f9"])
async def test_toggle_breakpoint_on_the_highlighted_operator(key):
    """b / F9 toggles a breakpoint on the operator highlighted in the list."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        operators = app.main.query_one(OperatorList)
        await pilot.press(*["down"] * 4)  # highlight moves from embed to hook_q (past the layer heading)
        assert operators.highlighted_key == 4
        await pilot.press(key)  # set
        assert [b.text for b in app.debugger.breakpoints] == ["blocks.0.attn.hook_q"]
        assert "●" in operators.lines[operators.highlighted][1].plain
        await pilot.press("c")  # continue stops there
        await settle(pilot)
        assert state(app).step == 4
        await pilot.press(key)  # toggle off
        assert app.debugger.breakpoints == ()


async def test_add_breakpoint_by_kind_refuse_a_bad_one_and_never_twice():
    """B asks for a breakpoint text; a bad one gets a message and the prompt stays open; a repeat is refused."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("B", *"abs>x", "enter")  # not a number
        assert isinstance(app.screen, PromptScreen)
        assert "'x' is not a number" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press("escape", "B", *"softmax&round=1", "enter")  # a kind, in decode round 1
        await pilot.press("B", *"softmax&round=1", "enter")  # the same again
        assert [b.text for b in app.debugger.breakpoints] == ["softmax&round=1"]
        assert "already set" in status(app)
        await pilot.press("c")
        await settle(pilot)
        assert (state(app).kind, state(app).round, state(app).head) == ("softmax", 1, 0)


async def test_breakpoint_list_deletes_one_and_clears_all():
    """L lists the breakpoints; d deletes the highlighted one, C clears them all."""
    app = make_app(breakpoints=["softmax", "round=1", "nan"])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("L")
        assert isinstance(app.screen, BreakpointsScreen)
        await pilot.press("d")  # delete the first
        assert [b.text for b in app.debugger.breakpoints] == ["round=1", "nan"]
        await pilot.press("C")  # clear all
        assert app.debugger.breakpoints == ()
        await pilot.press("escape")
        assert "0 breakpoints" in status(app)


async def test_space_plays_until_a_breakpoint_and_plus_minus_change_the_speed():
    """Space auto-advances and stops at a breakpoint; + and - change the speed; space pauses."""
    app = make_app(breakpoints=[f"{PATTERN}&head=1"])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*["plus"] * 8)  # the fastest speed
        assert "50 steps/s" in status(app)
        await pilot.press("space")  # play
        for _ in range(200):
            await pilot.pause(0.02)
            if app.main.player is None:
                break
        assert state(app).step == 11 and state(app).head == 1
        await pilot.press(*["minus"] * 8)  # the slowest: no step happens before the pause below
        await pilot.press("space")
        assert app.main.player is not None and "0.5/s" in status(app)
        await pilot.press("space")  # pause
        assert app.main.player is None and "paused" in status(app)


async def test_goto_step_operator_condition_backwards_and_past_the_end():
    """g takes a step, an operator glob or a condition (round=2), wrapping around; G searches back."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g", "3", "0", "enter")  # step 30
        assert state(app).step == 30
        await pilot.press("g", *"blocks.*.hook_resid_post", "enter")  # next match after 30
        await settle(pilot)
        assert state(app).name == "blocks.0.hook_resid_post" and state(app).round == 1
        await pilot.press("G", *"softmax", "enter")  # back to the previous softmax
        await settle(pilot)
        assert state(app).kind == "softmax" and state(app).round == 1 and state(app).head == 1
        await pilot.press("g", *"round=0&request=1", "enter")  # conditions, as B takes them
        await settle(pilot)
        assert (state(app).request, state(app).round, state(app).step) == (1, 0, 62)
        await pilot.press("g", *"9999", "enter")  # beyond the trace: a message, and no move
        assert isinstance(app.screen, PromptScreen)
        assert "no step 9999: the trace has steps 0–92" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press("escape")
        assert state(app).step == 62


@pytest.mark.parametrize("key", ["question_mark", "f1"])
async def test_help_screen_lists_every_binding(key):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(key)
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert "Step" in text and "Breakpoint list" in text
        await pilot.press("escape")
        assert isinstance(app.screen, DebuggerScreen)


async def test_panel_keys_switch_tabs_and_heat_toggles():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        tabs = app.main.query_one(TabbedContent)
        for key, pane in [("k", "cache"), ("i", "inputs"), ("a", "expect"), ("x", "explain")]:
            await pilot.press(key)
            assert tabs.active == pane
        heat = app.main.query_one(MatrixWindow).heat
        await pilot.press("h")
        assert app.main.query_one(MatrixWindow).heat is not heat


WIDE_X01 = X01.read_text(encoding="utf-8")
WIDE_X01 = WIDE_X01[: WIDE_X01.index("weights:")].replace("d_model: 4", "d_model: 40").replace("d_ff: 4", "d_ff: 40")
WIDE_X01 += ("weights:\n  embed: zeros\n  blocks:\n    - attn: {wq: identity, wk: identity, wv: identity, wo: identity}\n"
             "      mlp: {w_gate: identity, w_up: identity, w_down: identity}\nrequests:\n  - tokens: [我]\n")


async def test_column_window_scrolls_a_wide_matrix():
    """A 40-feature model shows a window of columns; > and < move it; the title says which."""
    app = DebuggerApp(load_scenario_text(WIDE_X01), lang="en")
    async with app.run_test(size=(80, 24)) as pilot:
        title = lambda: matrix_text(app)[1]
        assert "cols 0–" in title() and "of 40" in title()
        width = len(matrix_cells(app)[0]) - 1
        await pilot.press("greater_than_sign")  # next window
        assert title().split("cols ")[1].split("–")[0] == str(width)
        await pilot.press("less_than_sign", "less_than_sign")  # back, then nothing further left
        assert "cols 0–" in title() and "no more columns" in status(app)


async def test_matrix_rows_scroll_from_the_keyboard():
    """A 64-row matrix: PageDown moves the row window (the operator list keeps its highlight)."""
    app = DebuggerApp(long_scenario(), lang="en")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n")  # positions: 64 rows
        first = matrix_cells(app)[0][0]
        assert first.startswith("0 ·") and "rows 0–" in matrix_text(app)[1]
        await pilot.press("pagedown")
        assert not matrix_cells(app)[0][0].startswith("0 ·") and state(app).step == 1
        await pilot.press("pageup")
        assert matrix_cells(app)[0][0] == first


async def test_timeline_shows_a_window_around_the_current_token():
    """64 prompt tokens at 80 columns: the tokens near the one being fed, with counts of those hidden."""
    app = DebuggerApp(long_scenario(), lang="en")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g", *"round=3", "enter")  # decode round 3 feeds position 66
        await settle(pilot)
        line = str(app.main.query_one(Timeline).render()).splitlines()[0]
        assert "▶66:" in line and line.split("cache")[1].split()[1].startswith("‹")


async def test_current_operator_stays_in_view_at_80x24():
    """g 61 (X01's last operator of decode round 1) keeps the highlighted line on screen, one line each."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g", *"61", "enter")
        operators = app.main.query_one(OperatorList)
        rendered = [line.plain for line in operators.text_lines()]
        assert len(rendered) <= operators.size.height
        assert any(" 61 sample.choice" in line for line in rendered)
        assert all(len(line) <= operators.size.width for line in rendered)  # no wrapped labels


async def test_click_an_operator_goes_there():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        operators = app.main.query_one(OperatorList)
        index = next(i for i, (key, _) in enumerate(operators.lines) if key == 4)
        await pilot.click(OperatorList, offset=(5, index))  # the row of step 4
        assert state(app).step == 4


async def test_click_a_key_in_the_footer_presses_it():
    """The footer draws its keys as one line; a click on an entry presses that entry's key."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        footer = screen_text(app).splitlines()[-1]
        await pilot.click(KeyFooter, offset=(footer.index("Step"), 0))
        await settle(pilot)
        assert state(app).step == 1
        await pilot.click(KeyFooter, offset=(footer.index("? Help"), 0))
        assert isinstance(app.screen, HelpScreen)


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
        await pilot.press(*["n"] * 7)  # head-0 scores of 我爱学习
        assert [cell.split()[-1] for cell in matrix_cells(app)[0][1:]] == ["0.665434", "−∞", "−∞"]
        assert to_host(state(app).values)[0, 1] == float("-inf")


async def test_diff_view_names_the_first_divergence_and_goes_there():
    """d computes the full recompute beside the cached run; Enter jumps to the chosen operator."""
    app = DebuggerApp(load_scenario(SCENARIOS / "chunked.yaml"), lang="en", inject="chunk-mask")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("d")  # compute the diff in a worker, then show it
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        summary = str(app.screen.query_one("#diff-summary").render())
        assert "first divergence: request 0 prefill round 0 blocks.0.attn.hook_attn_scores" in summary
        await pilot.press("enter")  # go to the first diverging operator: the second chunk's scores
        assert (state(app).name, state(app).chunk, state(app).positions) == ("blocks.0.attn.hook_attn_scores", 1, (3, 4))
        assert np.isinf(to_host(state(app).values)).tolist() == [[False, True, True, True, True],
                                                                  [False, False, True, True, True]]


async def test_diff_view_shows_each_operators_number_as_measured():
    """Issue 27 defect 7: `d` showed `≤ 1e-12` where the CLI prints the number measured."""
    app = DebuggerApp(load_scenario(SCENARIOS / "chunked.yaml"), lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("d")
        await settle(pilot)
        text = screen_text(app)
        first = app.debugger.compare().diffs[0]
        assert "≤ 1e-12" not in text.replace("within 1e-12", "") and f"{first.max_abs:.3e}  {first.name}" in text


async def test_cycling_injections_replays_to_the_same_step():
    """I switches the deliberate bug (none → chunk-mask → …) and keeps the cursor where it was."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g", *"39", "enter")  # decode round 1, head-0 pattern
        await pilot.press("I")  # chunk-mask: decode's single query sees only key 0
        await settle(pilot)  # the replay to step 39 runs in the worker
        assert app.debugger.inject == "chunk-mask" and state(app).step == 39
        assert to_host(state(app).values)[0].tolist() == [1.0, 0.0, 0.0, 0.0]
        assert "injected bug: chunk-mask" in status(app)
        for _ in range(4):  # through the other three bugs (X01 has neither positions nor a layer 1) and back to none
            await pilot.press("I")
            await settle(pilot)
        assert app.debugger.inject is None and "⚠" not in status(app)


async def test_chinese_for_the_explanations_status_panels_and_help():
    """--lang zh: the seeds' four questions, the status line, the tab titles and the help screen."""
    app = DebuggerApp(load_scenario(X01), lang="zh")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press(*["n"] * 8)  # the head-0 pattern
        await settle(pilot)
        screen = screen_text(app)
        assert "为什么需要" in screen and "每行和为1" in screen
        assert status(app).startswith("步骤 8") and "解释" in screen and "KV缓存" in screen
        await pilot.press("a")  # expectations
        assert "332/332" in screen_text(app)
        await pilot.press("question_mark")
        assert "按键" in screen_text(app) and "单步" in screen_text(app)


async def test_the_three_views_at_once_from_120_columns():
    """From 120 columns the timeline, the matrix and the current layer's KV cache are all on screen."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press(*["n"] * 8)  # the head-0 pattern
        side = app.main.query_one("#side-cache")
        assert side.display and side.region.width > 30
        assert "KV · layer 0" in screen_text(app) and app.main.query_one(TabbedContent).active == "explain"
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not app.main.query_one("#side-cache").display  # narrow: the KV cache is a tab again


async def test_at_120_columns_a_whole_x01_table_and_beside_it_a_whole_head_of_its_cache():
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        assert app.main.query_one("#matrix", MatrixWindow).window()[1] == range(4)  # the embedding's 3×4, whole
        assert " f3" in screen_text(app)
        await pilot.press(*["n"] * 8)  # the head-0 pattern
        keys = to_host(state(app).caches[0].k)[:, :2]  # layer 0's K, head 0's two columns
        side = screen_text(app).splitlines()
        for row in keys:
            assert any(all(format_number(x) in line for x in row) for line in side), row


async def test_kv_cache_says_which_weights_its_rows_come_from():
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press(*["n"] * 8)  # the head-0 pattern
        text = screen_text(app)
        assert "3 rows, 3 new (+) · from the current weights" in text and "31828e94" not in text


async def test_encoder_input_vectors_are_explained_as_given_vectors():
    """encoder004 feeds the text's input vectors: hook_embed is not explained as rows of E."""
    app = DebuggerApp(load_scenario(SCENARIOS / "encoder004.yaml"), lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "E[id]" not in text and "input vectors" in text


@pytest.fixture
def busy_process(monkeypatch):
    """Pilot waits after each key until the process is idle, at most 1 s; while a run computes it never is,
    so every key would wait the full second. Wait a fixed short time instead."""
    import asyncio

    async def short_wait(*args, **kwargs):
        await asyncio.sleep(0.02)

    monkeypatch.setattr("textual.pilot.wait_for_idle", short_wait)
    monkeypatch.setattr("textual.app.wait_for_idle", short_wait)


def running_app() -> DebuggerApp:
    """A model whose continue to the end takes many seconds: 4 layers, 64 + 2000 tokens, ~160 000 operators."""
    return DebuggerApp(long_scenario(d_model=64, layers=4, new=2000), lang="en")


async def start_a_long_continue(pilot) -> None:
    await pilot.press("c")
    for _ in range(100):
        if pilot.app.debugger.busy:
            return
        await pilot.pause(0.01)
    raise AssertionError("the continue did not start")


async def test_ctrl_c_quits_and_cancels_a_running_continue(busy_process):
    """ctrl+c cancels a continue in flight (no worker left), then quits."""
    app = running_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await start_a_long_continue(pilot)
        await pilot.press("ctrl+c")  # cancel it
        await settle(pilot)
        assert not app.debugger.busy and "cancelled at step" in status(app)
        assert not app.debugger.view.at_end
        await pilot.press("ctrl+c")  # nothing runs: quit
        await pilot.pause()
        assert not app.is_running


# b and F9 last: a breakpoint set during the run (on the highlighted embed) stops it at the next round
EVERY_KEY = ["n", "right", "f10", "left", "c", "f5", "space", "plus", "minus", "g", "G", "d", "I", "x", "k", "i", "a",
             "w", "u", "ctrl+r", "v", "r", "ctrl+s", "S", "h", "less_than_sign", "greater_than_sign", "pageup",
             "pagedown", "shift+up", "shift+down", "left_square_bracket", "right_curly_bracket", "question_mark", "f1",
             "B", "L", "z", "b", "f9"]


async def test_every_binding_while_a_long_continue_runs_then_quit_cleanly(busy_process):
    """Keys pressed during a continue either work or are refused with a message; nothing crashes."""
    app = running_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await start_a_long_continue(pilot)
        for key in EVERY_KEY:
            await pilot.press(key)
            while not isinstance(app.screen, DebuggerScreen):  # a key opened a screen: close it again
                await pilot.press("escape")
            assert app.debugger.busy or key in ("b", "f9")  # pressed while the run was in flight
            if key == "n":
                await pilot.pause(0.3)  # progress reports come in: the refusal of n stays said
                assert "running… step" in status(app) and "busy: a run is in flight" in status(app)
                assert app.main.query_one("#progress").display  # and a progress bar shows
        await pilot.press("escape")  # cancel the run
        await settle(pilot)
        assert not app.debugger.busy
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_your_own_activations_are_marked_cell_by_cell(tmp_path):
    """--against in the TUI: a dump from an independent NumPy forward of the tiny Llama, one cell perturbed;
    that cell shows ✗ and the title counts the rest as within the tolerance."""
    from test_against import IDS, LLAMA, prefill_arrays

    from engine.compare.dump import load_dump
    from engine.loading.checkpoint import load_checkpoint

    arrays = prefill_arrays()
    arrays["blocks.1.attn.hook_pattern"][2, 5, 3] += 1e-3  # head 2, query 5, key 3
    np.savez(tmp_path / "dump.npz", **arrays)
    app = DebuggerApp(load_checkpoint(LLAMA, ids=IDS), lang="en", against=(load_dump(tmp_path / "dump.npz"), 1e-9, None))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()  # a checkpoint opens on step 0, then lists round 0 in the runner: let it (and the
        await settle(pilot)  # comparison) finish before moving the headless Debugger from here
        app.debugger.search("blocks.1.attn.hook_pattern&head=2")
        app.main.show()
        await pilot.pause()
        cells = matrix_cells(app)
        assert cells[5][4].startswith("✗") and all(c.startswith("✓") for c in cells[5][1:4])
        assert f"your activations: {8 * 8 - 1}/{8 * 8} cells within 1e-09" in matrix_text(app)[1]
        app.debugger.search("blocks.1.attn.hook_pattern&head=1")
        app.main.show()
        assert f"{8 * 8}/{8 * 8} cells within" in matrix_text(app)[1]


async def test_a_breakpoint_that_names_no_operator_is_said_at_start():
    """Issue 24: a misspelt breakpoint from the file or --break was said by `run` only; the TUI now says it as it
    starts, before its keys."""
    app = make_app(breakpoints=["attn.patern"])
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        assert ("1 breakpoint · breakpoint 'attn.patern': no operator is named 'attn.patern' (did you mean "
                "'attn.pattern'?) · start · n/→ step") in status(app)


async def test_the_status_line_wraps_again_when_the_terminal_widens():
    """Widened, the status line is drawn at its new width at once (it kept its narrow lines until a key)."""
    app = make_app()
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.press("I")  # a long line: the bug's description
        await settle(pilot)
        await pilot.resize_terminal(160, 30)
        await pilot.pause()
        top = screen_text(app).splitlines()[0]
        assert top.startswith(" step 0/? embed · ⚠ injected bug: chunk-mask · 0 breakpoints · now: chunk-mask: ")
