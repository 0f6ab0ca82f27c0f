"""What only the views do, for the defects a new user found: keys that reach the KV cache's columns,
a search prompt that keeps what is typed, the footer and the lists at small sizes."""

from __future__ import annotations

import numpy as np
from conftest import SCENARIOS, X01
from test_tui_pilot import busy_process, running_app, start_a_long_continue  # noqa: F401 (a fixture)
from textual.widgets import TabbedContent
from tui_helpers import (long_scenario, make_app, matrix_cells, matrix_text, perturbed_dump, screen_text, settle,
                         state, status)

from engine import Session, load_scenario
from tinyllm_tui.tui.app import DebuggerApp
from tinyllm_tui.tui.widgets.dialogs import PromptScreen
from tinyllm_tui.tui.widgets.matrix import MatrixWindow


def header(window: MatrixWindow) -> list[str]:
    """The column labels the window shows now."""
    lines = [line.plain if hasattr(line, "plain") else line.text for line in window._lines()]
    return lines[window._title_lines()].split()


async def test_the_kv_cache_columns_scroll_beside_the_matrix_and_in_the_tab():
    """Defect 1: `< >` reach every dimension of a head, in the side cache and in the KV tab."""
    app = DebuggerApp(long_scenario(prompt=8, new=2, d_model=32, layers=1), lang="en")  # heads 16 wide
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press(*["n"] * 8)  # past the K and V append: the cache has rows now
        side = app.main.query_one("#side-cache").windows[0]
        first = header(side)
        assert first[0] == "d0" and len(first) < 16  # not every dimension fits
        await pilot.press("greater_than_sign")  # the next columns, of the side cache too
        assert header(side)[0] == f"d{len(first)}"
        await pilot.press("k", "greater_than_sign", "greater_than_sign")  # the KV tab: its own window moves
        await pilot.pause()
        tab = app.main.query_one("#tab-cache").windows[0]
        assert header(tab)[0] != "d0"


async def test_typing_into_the_search_prompt_during_a_run_never_reaches_the_bindings(busy_process):
    """Defect 10: G during a long run opens the prompt; `b` typed there is text, not a breakpoint."""
    app = running_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await start_a_long_continue(pilot)
        await pilot.press("G", "b", "enter")
        assert isinstance(app.screen, PromptScreen) and app.debugger.breakpoints == ()
        assert "busy" in str(app.screen.query_one("#prompt-error").render())
        await pilot.press("escape", "escape")  # close the prompt, cancel the run
        await settle(pilot)


async def test_the_status_drops_the_breakpoint_hit_once_the_breakpoints_are_cleared():
    """Defect 10: after C in the breakpoint list, no `⚑ breakpoint` stays on the status line."""
    app = make_app(breakpoints=["softmax"])
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("c")
        await settle(pilot)
        assert "⚑ breakpoint: softmax" in status(app)
        await pilot.press("L", "C", "escape")
        await pilot.pause()
        assert "⚑" not in status(app)


async def test_at_80_by_24_the_footer_keeps_help_quit_and_save():
    """Defect 12: the keys a new user needs first are in the footer at 80×24 (main screen, weights browser)."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        footer = screen_text(app).splitlines()[-1]
        assert "? Help" in footer and "q Quit" in footer
        await pilot.press("w")
        await pilot.pause()
        footer = screen_text(app).splitlines()[-1]
        assert "^s Save" in footer and "esc Back" in footer
        assert footer.rstrip().endswith("0 Zero")  # the keys that do not fit whole are left out, not cut ("1 Ide")


async def test_at_40_by_12_operator_names_read_whole_and_the_kv_tab_says_where_it_is():
    """Defect 12: the list keeps `attn.pattern h0` whole; the KV tab's windows name the rows they show."""
    app = make_app()
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.press(*["n"] * 8)  # head 0's pattern
        await pilot.pause()
        assert "8 attn.pattern h0" in screen_text(app)
    async with make_app().run_test(size=(80, 24)) as pilot:
        scores = next(s.step for s in Session(load_scenario(X01)).steps()
                      if s.round == 1 and s.name == "blocks.0.attn.hook_attn_scores")
        await pilot.press("g", *str(scores), "enter", "k")  # decode round 1: 4 cache rows, 2 of them shown
        await settle(pilot)
        await pilot.pause()
        assert pilot.app.main.query_one(TabbedContent).active == "cache"
        assert "rows 2–3 of 4" in screen_text(pilot.app)
        assert "layer 0 of 0–0" in screen_text(pilot.app)  # never `layer 0/0`, "zero of zero"


async def test_v_in_the_weights_browser_shows_the_files_values():
    """Defect 13: `v` is advertised there, so it works: the file's numbers instead of the edited ones."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("w", "0")  # zero the first parameter (the embedding)
        await settle(pilot)
        grid = app.screen.query_one("#weight-grid", MatrixWindow)
        assert not np.any(grid.matrix.values)
        await pilot.press("v")
        await pilot.pause()
        assert grid.show_before and "BEFORE the edit (v)" in screen_text(app)
        file_value = app.debugger.file_scenario.weights["embed"][1, 0]
        assert f"{file_value:.6f}" in screen_text(app)


async def test_generated_text_is_decoded_and_its_pieces_come_on_demand():
    """Defect 11: the end of the trace says the generated text decoded; p shows it token by token."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("c")  # to the end: 我爱学习 continues with 爱 爱
        await settle(pilot)
        assert "request 0 generated '爱爱'" in status(app)
        await pilot.press("T")
        assert "request 0 generated '爱|爱'" in status(app)


async def test_g_keeps_its_prompt_open_on_a_condition_b_refuses():
    """Defect 13: `g abs>` says what `B abs>` says, and the prompt stays open to correct it."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g", *"abs>", "enter")
        assert isinstance(app.screen, PromptScreen)
        said_by_g = str(app.screen.query_one("#prompt-error").render())
        await pilot.press("escape", "B", *"abs>", "enter")
        assert said_by_g == str(app.screen.query_one("#prompt-error").render()) and "abs>" in said_by_g


async def test_the_intervention_prompt_starts_with_the_operator_and_what_is_typed_follows_it():
    """Issue 27 defect 2: `p` pre-filled the spec selected, so the value typed replaced it."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n", "n", "p")
        await pilot.pause()
        await pilot.press("0")
        typed = app.screen.query_one("Input").value
        assert typed == f"{state(app).name}[:,:]=0"


async def test_keys_beyond_the_queue_are_counted_and_said_once_it_has_drained():
    """Issue 27 defect 4: 200 quick `n` stopped at step 50 without a word about the keys dropped."""
    from tinyllm_tui.tui.main_screen import QUEUED

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for _ in range(30):  # at once, on the UI thread: one runs, QUEUED wait, the rest find the queue full
            app.main.action_step()
        while app.runner.running or app.main._queued:
            await settle(pilot)
        dropped = 30 - 1 - QUEUED
        assert state(app).step == 1 + QUEUED
        assert f"{dropped} keys dropped: pressed while {QUEUED} already waited" in status(app)


async def test_b_on_one_heads_operator_breaks_on_that_head_only():
    """Issue 27 defect 9: `b` on `attn.pattern h0` set the breakpoint on every head's pattern."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        step = next(s.step for s in app.debugger.view.round_states if s.name.endswith("hook_pattern") and s.head == 0)
        app.debugger.goto_step(step)
        app.main.show()
        await pilot.pause()
        await pilot.press("b")
        (breakpoint,) = app.debugger.breakpoints
        hit = [(s.name, s.head) for s in app.debugger.view.round_states if breakpoint.hits(s)]
        assert hit == [("blocks.0.attn.hook_pattern", 0)]


async def test_an_encoder_shows_no_kv_cache_it_does_not_keep():
    """Issue 27 defect 9: BERT got a KV-cache panel, a KV tab and a "(K/V cached)" legend, and keeps no cache."""
    app = make_app(SCENARIOS / "encoder004.yaml")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "KV cache" not in text and "KV · " not in text and "K/V cached" not in text and "cache 0" not in text
        assert "✓ processed  ▶ being fed" in text
        await pilot.press("k")
        assert "keeps no KV cache" in status(app)


async def test_the_weights_browser_names_the_parameter_once_and_summarises_no_row():
    """Issue 27 defect 9: the title was printed twice, and a 'last position' summary meant nothing for a weight."""
    app = make_app()
    async with app.run_test(size=(64, 24)) as pilot:  # not every column fits: the old summary line showed
        await pilot.press("w")
        await pilot.pause()
        lines = screen_text(app).splitlines()
        name = next(iter(app.debugger.weights))
        assert sum(f"{name} · " in line for line in lines) == 1
        assert not any(": min " in line and " mean " in line for line in lines)


async def test_g_diverged_says_the_values_first_and_v_shows_the_dumps_own(tmp_path):
    """Issue 27 defect 5: the status line cut the reference and dump values, and the dump's values showed nowhere."""
    dump, theirs = perturbed_dump(tmp_path)
    app = make_app(against=(dump, None, None))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("g", *"diverged", "enter")
        await settle(pilot)
        words = status(app)
        assert f"first divergence: reference {theirs - 0.01!r}, dump {theirs!r} (|Δ| 1.000e-02" in words
        cell = lambda: matrix_cells(app)[0][2]  # noqa: E731 (row 3 · 爱, column f1: the cell that differs)
        assert cell() == f"✗{theirs - 0.01:.6f}"
        await pilot.press("v")
        assert cell() == f"✗{theirs:.6f}" and "showing your dump's values" in status(app)


async def test_at_160_columns_a_faults_description_and_the_stale_cache_note_read_whole():
    """Issue 27 defect 5: I's description, the KV panel's title and the stale-cache note were cut at 160 columns."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("g", *"40", "enter")
        await settle(pilot)
        app.main.action_cycle_injection()
        await settle(pilot)
        while app.debugger.inject != "stale-cache":
            app.main.action_cycle_injection()
            await settle(pilot)
        text = screen_text(app)
        flat = " ".join(line.strip() for line in text.splitlines())
        assert "decode reuses a prefix cache computed with other weights (every weight ×1.1)" in flat
        assert "⚠ stale: old weights, r recomputes" in flat and "…" not in text.splitlines()[0]


async def test_v_after_an_edit_shows_the_earlier_values_under_the_earlier_runs_labels():
    """Issue 27 defect 7: an edit that changed the token fed showed the old values under the new run's labels."""
    from engine.loading.edits import FillEdit

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.debugger.goto_step(40)  # decode 1's hook_z: row 3 is the token the prefill chose
        app.debugger.apply(FillEdit("blocks.0.attn.wq", "zeros"))  # the prefill now chooses 学习, not 爱
        app.main.show()
        await pilot.pause()
        assert matrix_cells(app)[0][0] == "3 · 学习"
        await pilot.press("v")
        assert matrix_cells(app)[0][0] == "3 · 爱"  # the values of the run that fed 爱, under its label
        assert app.debugger.frame.matrix.before is not None


async def test_keys_refused_during_a_continue_are_counted_after_its_result():
    """A new user's report: `c n n n` on X01 ended at the breakpoint without a word about the three n's, the
    refusal said during the run being overwritten by its result."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.main.action_continue()  # on the UI thread: the run is in flight when the n's come
        for _ in range(3):
            app.main.action_step()
        assert "busy: a run is in flight" in status(app)
        await settle(pilot)
        assert app.debugger.view.at_end  # the continue's result is said, then the keys it refused
        assert status(app).endswith("3 keys refused: pressed while the run was in flight")
        await pilot.press("n")  # a step after it: the count is not said again
        await settle(pilot)
        assert "refused" not in status(app)


async def test_a_patch_of_the_scores_is_said_as_an_intervention_that_unmasks():
    """A new user's report: `p 0` on attn.scores h0 said `9 cells changed by the edit (•)` (no weight was edited)
    and nothing of the masked cells it made finite."""
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("g", *"attn.scores h0", "enter", "p")
        assert app.screen.query_one("Input").value == "blocks.0.attn.hook_attn_scores head 0[:,:]="
        await pilot.press("0", "enter")
        await settle(pilot)
        assert "3 masked cells now finite: position 0 sees later positions" in status(app)
        header = matrix_text(app)[1]
        assert "9 cells changed by the intervention (•)" in header and "edit" not in header
        await pilot.press("v")
        await pilot.pause()
        assert "BEFORE the intervention (v)" in matrix_text(app)[1]
