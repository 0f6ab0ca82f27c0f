"""The plain-text lines the CLI and the TUI share (X01's seed: prefill and decode 1 both choose 爱)."""

from __future__ import annotations

import numpy as np
from conftest import X01, round_summaries
from rich.cells import cell_len

from engine import Session, load_scenario
from engine.compare.check import check_scenario
from engine.compare.diff import OpDiff, diff_scenario
from engine.trace import Labelled, Phase
from tinyllm_tui.debugger import Debugger
from engine.labels import Axis
from engine.spec import Vocab
from tinyllm_tui.presentation.numbers import format_number, number_texts, text_table
from tinyllm_tui.presentation.printed import request_results
from tinyllm_tui.presentation.summaries import diff_cell, diff_summary, expect_summary, shape_text, token_text
from tinyllm_tui.tui.i18n import where
from tinyllm_tui.tui.main_screen import matrix_title
from tinyllm_tui.tui.widgets.timeline import round_line


def test_where_shape_and_tokens():
    assert where(Phase.PREFILL, 0, "en") == "prefill" and where("decode", 2, "en") == "decode 2"
    assert shape_text((3, 4)) == "3×4"
    assert token_text(load_scenario(X01).vocab, [1, 2, 3.0]) == "我 爱 学习"


def test_a_run_in_words():
    scenario = load_scenario(X01)
    session = Session(scenario)
    states = list(session.steps())
    pattern = next(s for s in states if s.name == "blocks.0.attn.hook_pattern" and s.head == 0)
    debugger = Debugger(scenario)
    debugger.goto_step(pattern.step)
    assert matrix_title(debugger.frame, "en") == "blocks.0.attn.hook_pattern · head 0 · request 0 · prefill"
    assert round_line(round_summaries(states, 0), "en") == (
        "prefill: fed 我 爱 学习 → cache 3 → chose 爱 │ decode 1: fed 爱 → cache 4 → chose 爱 (max_new_tokens)")
    assert round_line(round_summaries(states, 0)[:1], "zh") == "预填充：输入 我 爱 学习 → 缓存 3 → 选出 爱"
    assert request_results(session.results, scenario.vocab) == (
        "request 0 generated 爱 爱 (max_new_tokens); request 1 generated 你 (max_new_tokens)")


def test_diff_lines_hide_round_off_and_name_the_first_divergence():
    assert diff_cell(OpDiff(0, 0, "prefill", 0, "x", None, None, 3e-15)) == "3.000e-15"  # as measured, as the CLI
    assert diff_cell(OpDiff(0, 0, "prefill", 0, "x", None, None, 0.2484)) == "2.484e-01"
    scenario = load_scenario(X01)
    assert diff_summary(diff_scenario(scenario), None) == "✓ cached equals full recompute: every operator within 1e-12"
    line = diff_summary(diff_scenario(scenario, inject="stale-cache"), "stale-cache")
    assert line.startswith("✗ first divergence: request 0 decode round 1 blocks.0.attn.hook_attn_scores head 0")
    assert line.endswith("(injected: stale-cache)")


def test_expect_summary_counts_tables_and_printed_cells():
    assert expect_summary(check_scenario(load_scenario(X01))) == "45/45 tables agree fully; 332/332 printed cells agree"


def test_a_printed_table_lines_up_in_terminal_cells_with_cjk_labels():
    """Every line of a table is as wide on a terminal (Rich's measure: 学习 is four cells), and its
    numbers' columns end at the same cell; with `keep`, "…" stands for the rows and columns left out."""
    values = np.array([[0.2, -0.1, 0.7], [-0.3, 0.8, -np.inf], [0.6, 12345.5, -0.4]])
    matrix = Labelled("m", values, ("0 · 我", "1 · 爱", "2 · 学习"), ("f0", "f1", "f2"))
    lines = text_table(matrix, title="t").splitlines()[1:]
    assert len({cell_len(line) for line in lines}) == 1
    assert lines[3].endswith("12345.500000  -0.400000") and lines[2].endswith("−∞")
    corner = text_table(matrix, title="t", keep=1).splitlines()[1:]
    assert [line.split()[-3:] for line in corner] == [["f0", "…", "f2"], ["0.200000", "…", "0.700000"],
                                                       ["…", "…", "…"], ["0.600000", "…", "-0.400000"]]
    assert len({cell_len(line) for line in corner}) == 1


def test_a_table_writes_every_number_as_format_number_does():
    """The table's numbers are formatted a block at a time: each must read as format_number writes it alone,
    signs of rounded zeros, NaN and infinities included."""
    values = np.array([[1e-9, -1e-9, -0.0, 123456.25], [np.nan, np.inf, -np.inf, -2.5e-7]])
    for block in (values[:1], values, np.arange(12.0).reshape(3, 4) - 5.5):
        assert number_texts(block) == [format_number(float(x)) for x in block.ravel()]


def test_labels_made_once_still_follow_each_vocabulary():
    """Two runs whose axes differ only in their vocabulary get each vocabulary's labels."""
    first, second = Vocab(("a", "b")), Vocab(("x", "y"))
    for vocab, words in ((first, "a b"), (second, "x y"), (first, "a b")):
        matrix = Labelled("m", np.zeros((2, 1)), Axis("chunk", 2, 0, (0, 1), vocab), ("f0",))
        assert [line.split()[-2] for line in text_table(matrix, title="t").splitlines()[2:]] == words.split()
