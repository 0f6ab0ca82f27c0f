"""The Chinese TUI words every view from the catalogue: the lens, the heads at a glance, the expect: panel
and the row labels the frame builder makes (a ring's slots, a batch's rows) carry no English (issue 24)."""

from __future__ import annotations

import re

from conftest import X01

from engine import load_scenario, load_scenario_text
from tinyllm_tui.debugger.debugger import Debugger
from tinyllm_tui.debugger.readings import layer_patterns
from tinyllm_tui.presentation.cache_layout import RowWords
from tinyllm_tui.tui.i18n import tr
from tinyllm_tui.tui.widgets.panels import expectation_words
from tinyllm_tui.tui.widgets.readings import GlanceScreen, LensScreen

ENGLISH = re.compile(r"\b(positions?|of|top|direct|logit|attribution|terms|final|bias|more|layer|heads|last|"
                     r"queries|keys|request|prefill|decode|head|empty)\b")


def zh_words() -> RowWords:
    return RowWords(tr("label.slot", "zh"), tr("label.empty", "zh"), tr("label.batch_row", "zh"))


def at_the_first_choice() -> Debugger:
    debugger = Debugger(load_scenario(X01))
    debugger.search("sample.choice")
    return debugger


def test_the_lens_and_the_glance_speak_chinese():
    debugger = at_the_first_choice()
    run, rows, attribution = debugger.lens()
    lens = "\n".join(LensScreen("", run, rows, attribution, debugger.scenario.vocab, "zh").lines(160, 40))
    assert "直接逻辑归因" in lens and "位置 2 的前 3 名" in lens and "位置 0–2（本次前向共 3 个）" in lens
    assert ENGLISH.findall(lens) == []
    states, state = debugger.view.round_states, debugger.view.state
    glance = GlanceScreen("", 0, 1, lambda layer: layer_patterns(states, layer, state.chunk), state.context,
                          debugger.scenario.vocab, "zh")
    text = "\n".join(glance.lines(80, 20))
    assert "第 0 层（0–0）" in text and "第 0–1 头（共 2 个）" in text and ENGLISH.findall(text) == []


def test_an_expect_table_is_named_in_chinese():
    outcome = next(o for o in at_the_first_choice().check_expectations(load_scenario(X01)) if o.expectation.head == 0)
    words = expectation_words(outcome.expectation, "zh")
    assert words.startswith("请求 0 预填充 blocks.0.attn.") and words.endswith(" 头 0") and ENGLISH.findall(words) == []
    assert expectation_words(outcome.expectation, "en") == outcome.expectation.describe()  # the CLI's words


RING_BATCH = X01.read_text(encoding="utf-8").replace("\ndecode:", "\ncache: {layout: ring, window: 2}\nbatch: true\ndecode:")


def test_the_frames_row_labels_take_the_subscribers_words():
    """A ring's slots and a batch's rows are labelled with the words the view subscribed with."""
    debugger = Debugger(load_scenario_text(RING_BATCH))
    debugger.subscribe(zh_words())
    debugger.search("attn.k")  # the batch's first K: both rows stacked
    matrix = debugger.frame.matrix
    assert [label.split(" · ")[0] for label in matrix.rows] == ["请求0"] * 3 + ["请求1"] * 3
    cache = debugger.frame.cache.views[0]
    labels = list(cache.rows)
    assert labels[0].startswith("槽0") and any(label.endswith("空") for label in labels), labels
    assert not any(ENGLISH.search(label) for label in labels + [matrix.rows[0]])
