"""The Chinese TUI words every view from the catalogue: the lens, the heads at a glance, the expect: panel
and the row labels the frame builder makes (a ring's slots, a batch's rows) carry no English; every cause the
engine refuses an input with (engine/causes.py) has its words in both languages (issue 24)."""

from __future__ import annotations

import ast
import dataclasses
import re
import string

import numpy as np
import pytest
from conftest import ROOT, SCENARIOS, X01
from tui_helpers import perturbed_dump

from engine import ScenarioError, Session, load_scenario, load_scenario_text
from engine.breakpoints import BreakpointError
from engine.loading import open_model
from engine import layers
from engine.causes import CODES, LOADING, Cause
from engine.faults import FAULTS
from engine.trace import OpKind
from tinyllm_tui.debugger.debugger import Debugger
from tinyllm_tui.debugger.errors import OptionError, bad_input
from tinyllm_tui.debugger.opening import ModelOptions, check_options, opening
from tinyllm_tui.debugger.readings import Routing
from tinyllm_tui.debugger.standalone import gradcheck
from tinyllm_tui.presentation.cache_layout import row_words
from tinyllm_tui.presentation.numbers import display_width
from tinyllm_tui.presentation.printed import outcome_lines
from tinyllm_tui.presentation.routing import EXPERT_CELL, LABEL, MARGIN
from tinyllm_tui.presentation.summaries import diff_summary
from tinyllm_tui.tui import i18n_causes, i18n_loading
from tinyllm_tui.tui.i18n import CATALOGUES, EN, ZH, cause_words
from tinyllm_tui.tui.result_words import describe
from tinyllm_tui.tui.widgets.diffview import diff_list_line, report_summary
from tinyllm_tui.tui.widgets.readings import GlanceScreen, LensScreen, RoutingScreen

ENGLISH = re.compile(r"\b(positions?|of|top|direct|logit|attribution|terms|final|bias|more|layer|heads|last|"
                     r"queries|keys|request|prefill|decode|head|empty)\b")


def at_the_first_choice() -> Debugger:
    debugger = Debugger(load_scenario(X01))
    debugger.search("sample.choice")
    return debugger


def test_the_lens_and_the_glance_speak_chinese():
    debugger = at_the_first_choice()
    lens = "\n".join(LensScreen("", debugger.lens(), "zh").lines(160, 40))
    assert "直接逻辑归因" in lens and "位置 2 的前 3 名" in lens and "位置 0–2（本次前向共 3 个）" in lens
    assert ENGLISH.findall(lens) == []
    glance = GlanceScreen("", debugger.glance(), "zh")
    text = "\n".join(glance.lines(80, 20))
    assert "第 0 层（0–0）" in text and "第 0–1 头（共 2 个）" in text and ENGLISH.findall(text) == []


def test_an_expect_table_is_named_in_chinese():
    outcome = next(o for o in at_the_first_choice().check_expectations(load_scenario(X01)) if o.expectation.head == 0)
    words = cause_words(outcome.expectation.title, "zh")
    assert words.startswith("请求 0 预填充 blocks.0.attn.") and words.endswith(" 头 0") and ENGLISH.findall(words) == []
    assert cause_words(outcome.expectation.title, "en") == f"request 0 prefill {outcome.expectation.op} head 0"


def test_a_table_that_cannot_be_compared_says_why_in_chinese():
    """A table naming an operator the trace lacks, and one with more columns than its operator (x01's d_model is
    4): the panel's words in zh, with the facts; the CLI's English from the same catalogue."""
    scenario = load_scenario(X01)
    table = next(e for e in scenario.expect if e.head == 0)
    missing = dataclasses.replace(table, op="blocks.0.attn.hook_nothing")
    wide = dataclasses.replace(table, op="blocks.0.hook_resid_post", head=None, cols=tuple(range(6)),
                               printed=tuple(row * 6 for row in ((0.0,),) * len(table.printed)))
    outcomes = at_the_first_choice().check_expectations(dataclasses.replace(scenario, expect=(missing, wide)))
    said = [cause_words(outcome.problem, "zh") for outcome in outcomes]
    assert said[0] == "运行中没有算子 请求 0 预填充 blocks.0.attn.hook_nothing 头 0"
    assert said[1] == "算子有 4 列，表中是 6 列"
    assert ("head 0: no operator request 0 prefill blocks.0.attn.hook_nothing head 0 in the trace"
            in outcome_lines(outcomes[0])[0])


ENCODER = SCENARIOS / "encoder004.yaml"
RING_BATCH = X01.read_text(encoding="utf-8").replace("\ndecode:", "\ncache: {layout: ring, window: 2}\nbatch: true\ndecode:")


def test_g_diverged_words_the_first_cells_labels_values_and_tolerance_in_chinese(tmp_path):
    """Issue 24: the engine worded the first divergence (its labels, reference and dump, the tolerance) in English,
    which the Chinese TUI showed; only the pass and the operator's names stay as the dump's keys name them."""
    dump, theirs = perturbed_dump(tmp_path)
    said = describe(Debugger(load_scenario(X01), against=(dump, None, None)).search("diverged"), "zh")
    assert said.startswith(f"第一次出现差异：参考 {theirs - 0.01!r}，转储 {theirs!r}（|Δ| 1.000e-02 > 1e-09 + 1e-09·|参考|")
    assert said.endswith("位于 request.0.decode.1 · blocks.0.attn.hook_z · [0, 0, 1] (位置 3 · 爱，头 0，d_head 1)")
    assert ENGLISH.findall(said.replace("request.0.decode.1", "")) == [] and "reference" not in said


def test_the_frames_row_labels_take_the_subscribers_words():
    """A ring's slots and a batch's rows are labelled in the language the view subscribed with, from the
    catalogue (issue 24: RowWords defaulted to English words of its own)."""
    debugger = Debugger(load_scenario_text(RING_BATCH))
    debugger.subscribe(row_words("zh"))
    debugger.search("attn.k")  # the batch's first K: both rows stacked
    matrix = debugger.frame.matrix
    assert [label.split(" · ")[0] for label in matrix.rows] == ["请求0"] * 3 + ["请求1"] * 3
    cache = debugger.frame.cache.views[0]
    labels = list(cache.rows)
    assert labels[0].startswith("槽0") and any(label.endswith("空") for label in labels), labels
    assert not any(ENGLISH.search(label) for label in labels + [matrix.rows[0]])


def test_a_subscriber_that_hands_no_words_gets_row_labels_in_no_language():
    """The Debugger has no words of its own (it imports nothing of the views' catalogue): a reader that subscribes
    without a view's words gets marks, a slot #0, an empty one –, a batch row #1."""
    debugger = Debugger(load_scenario_text(RING_BATCH))
    debugger.search("attn.k")
    rows = debugger.frame.matrix.rows
    assert [label.split(" · ")[0] for label in rows] == ["#0"] * 3 + ["#1"] * 3
    labels = list(debugger.frame.cache.views[0].rows)
    assert labels[0].startswith("#0") and any(label.endswith("–") for label in labels), labels


# -- the engine's causes: a code and facts, worded by the catalogue in each language -------------------------------
def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


CODE = re.compile(r"(breakpoint|edit|intervention|diff|expect|analysis|part|against|side|fault|option|size|mla"
                  r"|gradcheck|cache|view|label|value|doc|scenario|weightfile|checkpoint|chat|tok|gguf|hf|cacheopt|budget"
                  r"|dump|llamacpp|exact|backend)(\.[a-z_]+)+")  # a cause's code
NAMING = ("engine", "tinyllm_tui/debugger", "tinyllm_tui/serve")  # where codes are named: the engine, the options
# the Debugger refuses, the lessons serve refuses


def kinds_words() -> dict[str, dict[str, str]]:
    """Code -> language -> words, of every layer kind's own causes (their modules' CAUSES)."""
    found: dict[str, dict[str, str]] = {}
    for module in layers._every_kind():
        for lang, words in getattr(module, "CAUSES", {}).items():
            for code, text in words.items():
                found.setdefault(code, {})[lang] = text
    return found


def wording(code: str, lang: str) -> str:
    """The words of `code` in `lang`: the catalogue's, or its kind's (never the English fallback)."""
    return kinds_words()[code][lang] if code in kinds_words() else CATALOGUES[lang][f"cause.{code}"]


def named_codes() -> set[str]:
    """Every code engine/ (or the Debugger's options) names: as the first argument of `SomeError("code", …)` /
    `Cause("code", …)`, or as data a kind hands on (its breakpoint conditions' refusals, its intervention refusals,
    why its bugs are unseen), read from the syntax trees."""
    return {node.value for folder in NAMING for path in (ROOT / folder).rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE.fullmatch(node.value)}


def raised_causes() -> list[tuple[str, str, set[str]]]:
    """(where, code, the facts it is raised with) for every `SomeError("code", fact=…)` and `Cause("code", …)` whose
    facts are written at the call (not `Cause("diff.none", mine)`, a mapping built before)."""
    found = []
    for path in sorted(path for folder in NAMING for path in (ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.func, ast.Name) and (node.func.id in ("Cause", "cause")
                                                             or node.func.id.endswith("Error"))
                    and isinstance(node.args[0].value, str) and CODE.fullmatch(node.args[0].value)):
                found.append((f"{path.relative_to(ROOT)}:{node.lineno}", node.args[0].value,
                              {keyword.arg for keyword in node.keywords}))
    return found


def test_every_cause_the_engine_has_is_worded_in_english_and_chinese():
    for code in sorted(CODES):
        assert f"cause.{code}" in EN and f"cause.{code}" in ZH, code  # not the fallback: each language its own
    assert set(i18n_causes.EN) == set(i18n_causes.ZH) == CODES - LOADING  # no wording of a code the engine no longer has
    assert set(i18n_loading.EN) == set(i18n_loading.ZH) == LOADING  # the loaders' refusals
    kinds = kinds_words()
    assert kinds and not set(kinds) & CODES  # a kind's code is worded in its module only
    for code, words in kinds.items():
        assert set(words) == {"en", "zh"}, code
    for code in CODES | set(kinds):  # both languages name the same facts
        assert fields(wording(code, "en")) == fields(wording(code, "zh")), code
    assert named_codes() == CODES | set(kinds)  # every code named in engine/ is worded; every worded code is used


def test_each_wording_names_exactly_the_facts_its_cause_is_raised_with():
    raised = raised_causes()
    assert len(raised) > 30
    for where, code, facts in raised:
        for lang in ("en", "zh"):
            assert fields(wording(code, lang)) == facts, (where, code, lang)


def test_an_error_class_refuses_a_code_that_has_no_words():
    with pytest.raises(KeyError, match="breakpoint.nonsense"):
        BreakpointError("breakpoint.nonsense", text="x")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_wording_formats_its_facts(lang):
    """Each code's words with its facts filled in (a nested cause worded too): nothing of `{…}` is left over."""
    kinds = kinds_words()
    for code in sorted(CODES | set(kinds)):
        text = wording(code, lang)
        facts = {name: Cause("part.row") if name in ("what", "name", "cause") else f"<{name}>" for name in fields(text)}
        worded = cause_words(Cause(code, facts, kinds.get(code, {})), lang)
        for literal in re.findall(r"\{\{.*?\}\}", text):  # braces the words say (cache: {layout: ring})
            worded = worded.replace(literal[1:-1], "")
        assert "{" not in worded and "}" not in worded and all(f"<{name}>" in worded for name in facts
                                                               if name not in ("what", "name", "cause")), (code, worded)


def test_a_bad_breakpoint_edit_and_intervention_refused_by_the_debugger_read_in_chinese():
    """Real bad inputs through the Debugger, as the zh status line words them: the zh sentence, with its facts."""
    debugger = Debugger(load_scenario(X01))
    said = describe(debugger.add_breakpoint("lyer=2"), "zh")
    assert said == "断点 'lyer=2'：未知字段 'lyer'（应为 phase, round, request, layer, head 之一）"
    said = describe(debugger.apply(debugger.cell_edit("blocks.0.attn.wq", (99, 0), 1.0)), "zh")
    assert said == "下标 [99, 0] 超出了 blocks.0.attn.wq 的范围，它的形状是 4×4；保留原值"
    said = describe(debugger.intervene("blocks.9.hook_resid_post=0"), "zh")
    assert said == "'blocks.9.hook_resid_post=0'：模型的层为 0–0"
    assert describe(debugger.intervene("blocks.0.hook_resid_post[3:1,:]=0"), "zh").endswith("：行 3:1 是空的")
    assert cause_words(debugger.intervention_problem("blocks.0.attn.hook_z head 7=0"), "zh").endswith("：模型的头为 0–1")
    assert describe(debugger.search("abs>x"), "zh") == "断点 'abs>x'：'x' 不是数"
    assert ENGLISH.findall(describe(debugger.parse_value("abc"), "zh")) == []


def test_the_lens_of_an_encoder_is_refused_in_chinese():
    debugger = Debugger(load_scenario(ENCODER))
    assert describe(debugger.lens(), "zh") == "没有逻辑透镜：模型是编码器：它没有可用来读出残差流的反嵌入"
    assert describe(debugger.lens(), "en") == ("no logit lens: the model is an encoder: it has no unembedding to read "
                                               "the residual stream through")  # the CLI's words, from one catalogue


def test_a_bad_breakpoint_in_a_file_is_located_and_worded_by_the_front_end():
    text = X01.read_text(encoding="utf-8") + "\nbreakpoints:\n  - abs>x\n"
    with pytest.raises(ScenarioError) as caught:
        load_scenario_text(text, "x.yaml")
    line = text.count("\n", 0, text.index("abs>x")) + 1
    assert bad_input(caught.value, lambda cause: cause_words(cause, "zh")) == f"x.yaml:{line}: breakpoints[0]: 断点 'abs>x'：'x' 不是数"
    assert bad_input(caught.value, lambda cause: cause_words(cause, "en")).endswith("breakpoint 'abs>x': 'x' is not a number")


def test_the_diff_says_how_rows_fail_to_meet_in_chinese():
    """duplicate-append feeds decode round 1 the whole sequence: 4 rows at positions 3–6 against the reference's
    4 at 0–3 (the prompt is 4 tokens; x01's d_model is 4), worded from the catalogue, not the engine."""
    report = Debugger(load_scenario(X01), inject="duplicate-append").compare()
    first = report.diffs[report.first]
    assert first.mismatch == Cause("diff.shape", {"shape": "4×4", "positions": "3–6", "their_shape": "4×4",
                                                  "theirs": "0–3"})
    line = diff_list_line(first, True, "zh").plain
    assert "位置 3–6 上的 4×4，参考运行为位置 0–3 上的 4×4" in line and "形状" in line and "shape" not in line
    summary = report_summary(report, "zh").plain
    assert "第一次出现差异：请求 0 解码 第 1 轮 hook_embed（位置 3–6 上的 4×4" in summary
    assert diff_summary(report.diffs, None) == ("✗ first divergence: request 0 decode round 1 hook_embed (4×4 at "
                                                "positions 3–6, the reference 4×4 at positions 0–3)")  # the CLI's


def test_the_routing_view_and_its_glance_speak_chinese():
    """The routing of a made-up sparse layer (3 tokens, 2 of 8 experts each) in the zh routing screen's words: the
    title line's facts, the column heads aligned by display cells (a CJK character takes two)."""
    routing = Routing(5, (10, 11, 12), ("10 · a", "11 · b", "12 · c"), np.array([[7, 2], [0, 1], [3, 4]]),
                      np.array([[0.75, 0.25], [0.5, 0.5], [0.9, 0.1]]), np.array([0.1, 2e-4, 0.3]), 8)
    screen = RoutingScreen("", [routing], 0, "zh")
    lines = screen.lines(70, 8)
    assert lines[0] == "第 5 层 · 位置 10–12 · 专家 0–7（共 8 个）"
    assert screen.lines(70, 4)[0] == "第 5 层 · 位置 10（共 3 个中的 1 个） · 专家 0–7（共 8 个）"  # one row of three
    assert lines[1].endswith("e7      差距") and display_width(lines[1]) == LABEL + 8 * EXPERT_CELL + MARGIN
    assert lines[-1].split() == ["Token数", "1", "1", "1", "1", "1", "0", "0", "1"]
    screen.glance = True  # as `a` sets it (the screen is not mounted here)
    glance = screen.lines(90, 8)
    assert glance[0] == "1 个稀疏层 · 专家 0–7（共 8 个）· 每个专家分到的Token数（本次前向共 3 个）"
    assert glance[1].startswith("层" + " " * 9 + "e0")  # the layer column is 7 cells, "层" two of them and glance[1].endswith("最小差距")
    assert not any(ENGLISH.search(line) or re.search(r"\b(margin|tokens|sparse|experts)\b", line)
                   for line in lines + glance)


def test_the_decode_rules_choice_column_is_labelled_in_the_views_language():
    """The engine labels the choice's column by a code (engine.labels.WORDS); the zh view subscribes with its word."""
    debugger = Debugger(load_scenario(X01))
    debugger.subscribe(row_words("zh"))
    debugger.goto_step(next(s.step for s in Session(load_scenario(X01)).steps() if s.kind is OpKind.CHOICE))
    assert list(debugger.frame.matrix.cols) == ["Token编号"]


def test_a_kinds_own_cause_reaches_the_chinese_status_line_in_its_modules_words():
    """`expert=x` is refused by the sparse FFN's breakpoint condition: its words come from engine/layers/moe_ffn.py
    (CAUSES), carried by the cause, in the language the view asks for."""
    said = describe(Debugger(load_scenario(X01)).add_breakpoint("expert=x"), "zh")
    assert said == "断点 'expert=x'：'x' 不是专家编号"


def test_a_bug_that_cannot_run_is_refused_with_a_cause_that_reads_in_chinese():
    """x01 has one layer of one kv head: the Debugger's --inject refusal, the session's reason and a kind's (the
    attention's own CAUSES), each worded in zh, where the engine used to hand English."""
    scenario = load_scenario(X01)
    with pytest.raises(OptionError) as refused:
        opening(scenario, ModelOptions(inject="no-cache-layer1"))
    assert refused.value.option == "--inject"
    assert cause_words(refused.value.cause, "zh") == f"错误 'no-cache-layer1' 无法在 {scenario.path} 上运行：模型没有第 1 层"
    assert cause_words(FAULTS["gqa-modulo"].cannot_run(scenario), "zh") == "模型需要至少两个 kv 头的分组查询注意力"
    assert cause_words(FAULTS["ring-wrong-slot"].cannot_run(scenario), "zh") == (
        "没有环形缓冲区发生回绕（cache: {layout: ring}，且序列长于其窗口）")
    encoder = load_scenario(SCENARIOS / "encoder004.yaml")
    assert cause_words(FAULTS["stale-cache"].cannot_run(encoder), "zh") == (
        "编码器（model.lm_head: false）只运行一次预填充，没有使用缓存的轮次，缓存错误无从显现")


def test_the_options_refused_before_loading_read_in_chinese():
    for options, words in ((ModelOptions(inject="no-such-bug"), "未知的错误 'no-such-bug'（应为 "),
                           (ModelOptions(max_memory="12Q"), "应为形如 8G、512M 或 1.5G 的大小，得到的是 '12Q'")):
        with pytest.raises(OptionError) as refused:
            check_options(options)
        assert cause_words(refused.value.cause, "zh").startswith(words)


def test_a_head_the_gradient_check_cannot_take_is_refused_in_chinese():
    """x01 has two heads; Gemma 2 soft-caps its scores: the gradient check's refusals, worded in zh."""
    with pytest.raises(OptionError) as refused:
        gradcheck(load_scenario(X01), request=0, layer=0, head=9)
    assert refused.value.option == "" and cause_words(refused.value.cause, "zh") == "请求 0 的第 0 层没有头 9"
    with pytest.raises(OptionError) as refused:
        gradcheck(open_model(ROOT / "tests" / "fixtures" / "gemma2", ids=[[1, 2, 3]]), request=0, layer=0, head=0)
    assert refused.value.option == "--layer"
    assert cause_words(refused.value.cause, "zh").startswith("第 0 层（attention）：它的头不是其分数算子的查询与键的 softmax")


def test_the_batch_tolerance_line_reads_in_chinese():
    """The rule a batch is held to was English in the engine (diff.BATCH_RULE); the catalogue words it."""
    assert diff_summary([], "stale-cache", batch=True, lang="zh") == (
        "✓ 批次等于各请求单独运行：每个算子都在该数据类型的容差（float64 中为 1e-12）+ 4·(经过的块数 + 1)·ε·max|值| 之内"
        "（ε：该数据类型的舍入步长；Token编号须完全相同）（注入：stale-cache）")


def test_every_word_inside_a_label_has_its_cause():
    from engine.causes import LABEL_WORDS
    from engine.labels import WORDS

    assert set(LABEL_WORDS) == set(WORDS)
    assert all(f"cause.{LABEL_WORDS[code].code}" in EN and f"label.{code}" in ZH for code in WORDS)


def test_a_backend_this_machine_cannot_use_is_refused_in_the_readers_language():
    from engine import BackendError, make_backend
    from tinyllm_tui.debugger.errors import bad_input
    from tinyllm_tui.tui.i18n import cause_words

    with pytest.raises(BackendError) as refused:
        make_backend("torch")
    said = {lang: bad_input(refused.value, lambda cause: cause_words(cause, lang)) for lang in ("en", "zh")}
    assert said == {"en": "unknown backend 'torch' (expected one of numpy, cupy, array_api_strict)",
                    "zh": "未知的后端 'torch'（应为 numpy, cupy, array_api_strict 之一）"}


def test_a_scalars_shape_is_worded_by_the_catalogue():
    from engine.causes import cause
    from engine.parameters import format_shape
    from tinyllm_tui.tui.i18n import cause_words

    refused = cause("scenario.tensor_shape", expected=format_shape((4, 2)), got=format_shape(()))
    assert cause_words(refused, "en").endswith("4×2, got a single number (no dimensions)")
    assert cause_words(refused, "zh").endswith("单个数（没有维度）")
