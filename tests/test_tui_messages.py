"""The message catalogues: every Debugger result has words in English and Chinese, and every English
key has its Chinese text (no screen needed)."""

from __future__ import annotations

import re

import pytest

from engine.causes import Cause
from tinyllm_tui.debugger.results import (BreakpointAdded, BreakpointRemoved, BreakpointsCleared, CacheShown,
                                          Cancelled, EditKind, EndOfTrace, Generated, InjectionChanged, Moved,
                                          Reason, Rebuilt, Refused, Saved)
from tinyllm_tui.tui.i18n import EN, ZH, tr
from tinyllm_tui.tui.result_words import describe

HAN = re.compile(r"[\u4e00-\u9fff]")
RESULTS = [Moved(3, wrapped=True), EndOfTrace((Generated("爱爱", ("爱", "爱"), "eos"), Generated("", (), "eos"))),
           Cancelled(7), BreakpointAdded("softmax"), BreakpointRemoved("softmax"), BreakpointsCleared(1),
           BreakpointsCleared(2), InjectionChanged("chunk-mask"), InjectionChanged(None), Saved("x.yaml"),
           CacheShown(0, 1), *(Rebuilt(kind, "blocks.0.attn.wq", 2) for kind in EditKind)]
REFUSALS = {Reason.NO_STEP: (99, 74), Reason.NO_MATCH: ("blocks.9.*",),
            Reason.BAD_QUERY: (Cause("breakpoint.empty", {"text": "x &"}),), Reason.ALREADY_SET: ("softmax",),
            Reason.NO_BREAKPOINT: ("softmax",), Reason.UNCHANGED: ("embed",),
            Reason.BAD_EDIT: (Cause("edit.number", {"text": "x"}),), Reason.NO_LENS: (Cause("analysis.encoder"),)}


def test_every_english_text_has_a_chinese_one_with_the_same_facts():
    plural = {key for key in EN if key.endswith(".one")}  # English's singular forms; Chinese needs none
    assert set(ZH) == set(EN) - plural
    for key in set(ZH):
        assert set(re.findall(r"{(\w*)", ZH[key])) == set(re.findall(r"{(\w*)", EN[key])), key


@pytest.mark.parametrize("result", [*RESULTS, *(Refused(reason, REFUSALS.get(reason, ())) for reason in Reason)],
                         ids=repr)
def test_every_result_is_worded_in_both_languages(result):
    english, chinese = describe(result, "en"), describe(result, "zh")
    assert english and not HAN.search(english.replace("爱", "")) and english != chinese
    assert HAN.search(chinese.replace("爱", ""))


def test_counts_of_one_read_as_one():
    assert tr("status.breakpoints", "en", count=1) == "1 breakpoint"
    assert tr("status.breakpoints", "en", count=3) == "3 breakpoints"
    assert describe(BreakpointsCleared(1), "en") == "removed 1 breakpoint"
