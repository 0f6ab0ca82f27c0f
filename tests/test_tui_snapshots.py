"""SVG snapshots of the step debugger at 80×24 and 160×48 (accept with --snapshot-update)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import SCENARIOS, X01, still

from textual.widgets import Input

from engine import load_scenario
from tinyllm_tui.debugger.debugger import Debugger
from tinyllm_tui.tui.app import DebuggerApp

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]


def make_app(**kwargs) -> DebuggerApp:
    return still(DebuggerApp(load_scenario(X01), lang="en", **kwargs))


def keys_then_settle(*keys: str):
    async def run_before(pilot) -> None:
        await pilot.app.workers.wait_for_complete()  # the expect: check runs in a worker
        for key in keys:
            await pilot.press(key)
            await pilot.app.workers.wait_for_complete()
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False  # a blinking cursor would make the snapshot flaky
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES)
def test_start_screen(snap_compare, size):
    assert snap_compare(make_app(), terminal_size=size, run_before=keys_then_settle())


@pytest.mark.parametrize("size", SIZES)
def test_head0_pattern_of_the_first_request(snap_compare, size):
    # embed, resid_pre, ln1 scale and normalized, q, k, v, head-0 scores, then the head-0 pattern
    assert snap_compare(make_app(), terminal_size=size, run_before=keys_then_settle(*["n"] * 8))


@pytest.mark.parametrize("size", SIZES)
def test_cached_decode_round_with_four_cache_rows(snap_compare, size):
    # step 36 is the head-0 scores of decode round 1; k shows the KV cache (4 rows, 1 appended)
    assert snap_compare(make_app(), terminal_size=size, run_before=keys_then_settle("g", "3", "6", "enter", "k"))


@pytest.mark.parametrize("size", SIZES)
def test_a_wide_matrix_through_its_window(snap_compare, size):
    """d_model 40 at 80 and 160 columns: a window of columns, its place in the title, a summary of the row."""
    from test_tui_pilot import WIDE_X01

    from engine import load_scenario_text

    app = still(DebuggerApp(load_scenario_text(WIDE_X01), lang="en"))
    assert snap_compare(app, terminal_size=size, run_before=keys_then_settle("n", "greater_than_sign"))


@pytest.mark.parametrize("size", SIZES)
def test_help_screen(snap_compare, size):
    assert snap_compare(make_app(), terminal_size=size, run_before=keys_then_settle("question_mark"))


@pytest.mark.parametrize("size", SIZES)
def test_breakpoint_hit(snap_compare, size):
    app = make_app(breakpoints=["blocks.0.attn.hook_pattern"])
    assert snap_compare(app, terminal_size=size, run_before=keys_then_settle("c"))


def without_round_off(compare):
    """The Debugger's diff with every agreeing operator's |Δ| shown as 0: below the tolerance the figure is the
    machine's BLAS summation order (1.1e-16 on one CPU, 0 on another), which no snapshot may hold; the figures
    themselves are tested in test_diff.py."""
    def compared(self, *args, **kwargs):
        report = compare(self, *args, **kwargs)
        diffs = tuple(d if not d.agrees else dataclasses.replace(d, max_abs=0.0) for d in report.diffs)
        return dataclasses.replace(report, diffs=diffs)
    return compared


@pytest.mark.parametrize("inject", [None, "chunk-mask"])
def test_diff_view(snap_compare, inject, monkeypatch):
    monkeypatch.setattr(Debugger, "compare", without_round_off(Debugger.compare))
    app = still(DebuggerApp(load_scenario(SCENARIOS / "chunked.yaml"), lang="en", inject=inject))
    assert snap_compare(app, terminal_size=(160, 48), run_before=keys_then_settle("d"))


@pytest.mark.parametrize("size", SIZES)
def test_timeline_after_an_eos_stop(snap_compare, size):
    app = still(DebuggerApp(load_scenario(SCENARIOS / "eos7.yaml"), lang="en"))
    assert snap_compare(app, terminal_size=size, run_before=keys_then_settle("c"))  # no breakpoint: to the end


WK_CELL = ["w", "tab", "down", "down", "enter", "right"]  # weights browser, blocks.0.attn.wk, cell [0, 1]


def test_weights_browser(snap_compare):
    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=keys_then_settle(*WK_CELL))


def test_inline_editor(snap_compare):
    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=keys_then_settle(*WK_CELL, "e", *"0.5"))


@pytest.mark.parametrize("size", SIZES)
def test_stale_cache_warning(snap_compare, size):
    keys = ["g", "3", "6", "enter", *WK_CELL, "e", "0", ".", "5", "enter", "k", "escape", "k"]  # …then the KV cache tab
    assert snap_compare(make_app(), terminal_size=size, run_before=keys_then_settle(*keys))


def encoder_app() -> DebuggerApp:
    return still(DebuggerApp(load_scenario(SCENARIOS / "encoder004.yaml"), lang="en",
                             breakpoints=["blocks.0.attn.hook_attn_scores&head=0"]))


@pytest.mark.parametrize("size", SIZES)
def test_encoder_masked_scores_with_the_expectation_overlay(snap_compare, size):
    # PAD key columns −∞ in every row; ✓/✗ against the text's printed head-1 scores
    assert snap_compare(encoder_app(), terminal_size=size, run_before=keys_then_settle("c"))


def test_expectation_summary_panel(snap_compare):
    assert snap_compare(encoder_app(), terminal_size=(160, 48), run_before=keys_then_settle("c", "a"))


@pytest.mark.parametrize("size", SIZES)
def test_a_chat_as_the_timelines_first_stage(snap_compare, size):
    """chat-qwen2 given a system and a user message: the messages with their token positions, the template's
    control tokens underlined; at the end, the reply stopped at <|im_end|> (every token but it forbidden)."""
    import dataclasses

    from conftest import ROOT

    from engine.loading.checkpoint import load_checkpoint
    from engine.spec import DecodeRule

    scenario = load_checkpoint(ROOT / "tests" / "fixtures" / "chat-qwen2", max_new_tokens=3,
                               chat=[[("system", "Be brief."), ("user", "The cat sat on the mat?")]])
    scenario = dataclasses.replace(scenario, decode=DecodeRule(forbid=tuple(range(301)), max_new_tokens=3))
    app = still(DebuggerApp(scenario, lang="en"))
    assert snap_compare(app, terminal_size=size, run_before=keys_then_settle("c"))
