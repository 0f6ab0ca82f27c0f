"""The loaders' refusals are causes (engine/causes.py: a code and its facts) that the catalogue words: no loader
writes a sentence of its own, the English the CLI prints is what it printed before, and --lang zh words them in
Chinese."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import ROOT
from engine import ScenarioError, load_scenario, load_scenario_text
from loader_mutations import mutant
from said_before import SEED
from tinyllm_tui.cli import app

DATA = ROOT / "tests" / "data"
BAD = DATA / "bad"
BEFORE = json.loads((DATA / "said_before.json").read_text(encoding="utf-8"))  # tests/data/said_before.py wrote it
SOURCES = sorted([*(ROOT / "engine").rglob("*.py"), *(ROOT / "tinyllm_tui").rglob("*.py")])  # the loaders and the rest
REFUSING = {"ScenarioError", "ConfigError", "TokenizerError", "LayoutError", "Damage", "error", "warn"}  # `node.error(…)` too


def worded_in_place(node: ast.expr) -> bool:
    """A sentence written at the call: a literal, an f-string, or text joined from them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, ast.BinOp) and (worded_in_place(node.left) or worded_in_place(node.right))


def sentences(path: Path) -> list[str]:
    """`file:line` of each refusal in `path` whose message (its last argument: ScenarioError(file, line, path,
    message), ConfigError(file, key, message), node.error(message), warn(file, path, message), …) is a sentence
    rather than a cause."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in REFUSING and worded_in_place(node.args[-1]):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_sentence_finder_finds_sentences():
    said = ast.parse('raise node.error(f"got {x}")\nraise ScenarioError(f, None, "", "no " + x)\n'
                     'raise node.error(cause("doc.tag", tag=t))\nraise ConfigError(f, "key", why)')
    calls = [n for n in ast.walk(said) if isinstance(n, ast.Call) and n.args and
             getattr(n.func, "attr", getattr(n.func, "id", "")) in REFUSING]
    assert [worded_in_place(call.args[-1]) for call in calls] == [True, True, False, False]


def test_no_loader_words_a_refusal_itself():
    """Nor does any other module give a ScenarioError (a LoaderWarning, …) a sentence: the front ends' file
    refusals are causes too."""
    assert len(SOURCES) > 100
    assert [where for path in SOURCES for where in sentences(path)] == []


def said(args: list[str]) -> list[str]:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    return result.stderr.splitlines()


BAD_CASES = sorted(key.removeprefix("bad/") for key in BEFORE if key.startswith("bad/"))
MUTANTS = sorted(int(key.removeprefix("mutant/")) for key in BEFORE if key.startswith("mutant/"))


@pytest.mark.parametrize("case", BAD_CASES)
def test_a_bad_file_is_refused_in_the_words_it_was_before(case):
    command = yaml.safe_load((BAD / "expected.yaml").read_text(encoding="utf-8"))[case].get("command", "run")
    assert [line.replace(str(BAD), "{bad}") for line in said([command, str(BAD / case)])] == BEFORE[f"bad/{case}"]


def test_a_refused_checkpoint_mutant_is_refused_in_the_words_it_was_before(tmp_path):
    """The mutants of tests/loader_mutations.py (seed SEED) the loaders refused before: GGUF metadata and tensor
    tables, safetensors headers, config.json and tokenizer.json values, each line as it was."""
    assert len(MUTANTS) > 150
    for index in MUTANTS:
        case, folder = mutant(SEED, index), tmp_path / str(index)
        folder.mkdir()
        lines = said(["run", str(case.build(folder)), *case.options])
        assert [line.replace(str(folder), "{dir}") for line in lines] == BEFORE[f"mutant/{index}"], (index, case.edits)


# -- in Chinese ------------------------------------------------------------------------------------
ZH_REFUSALS = {  # a bad file of tests/data/bad: where, then why in the zh words
    "size_heads_not_dividing.yaml": ":9: model.heads: 3 个头不能整除 d_model 4",
    "decode_forbid_unknown.yaml": ":74: decode.forbid[0]: 词元 'UNK' 不在词表中",
    "shape_wq.yaml": ":37: weights.blocks[0].attn.wq: 应为 4×4，实际是 4×3",
    "tag_python_object.yaml": ":1: title: 不允许标签 tag:yaml.org,2002:python/object/apply:os.system：场景只能包含纯数据",
    "expect_round_range.yaml": ":85: expect[0].round: 轮次 5 不存在：请求 0 运行轮次 0..2",
    "request_past_positions.yaml": ":70: requests[0]: 需要 9 个位置（2 个词元 + 7 个回送），但 model.max_positions 是 8",
    "duplicate_key.yaml": ":25: model.causal: 这个键出现了两次",
}


@pytest.mark.parametrize("case", sorted(ZH_REFUSALS))
def test_a_bad_file_is_refused_in_chinese_by_the_front_ends_words(case):
    from said import said

    with pytest.raises(ScenarioError) as caught:
        load_scenario(BAD / case)
    assert said(caught.value, "zh") == f"{BAD / case}{ZH_REFUSALS[case]}"
    assert said(caught.value, "en") == BEFORE[f"bad/{case}"][0].removeprefix("tinyllm-tui: error: ").replace(
        "{bad}", str(BAD))  # the same cause, in the English it had


def test_a_weight_file_and_a_checkpoints_refusals_and_warning_read_in_chinese(tmp_path):
    import warnings

    from engine.loading.checkpoint import load_checkpoint
    from said import said, warned
    from test_loader_defects import folder

    weights = BAD / "claims_more.safetensors"
    with pytest.raises(ScenarioError) as caught:
        load_scenario(BAD / "weights_claims_more.yaml")
    assert said(caught.value, "zh") == f"{weights}: header: 长度字段声称有 1000000000000 字节，超过了 safetensors 允许的 100 MiB"
    llama = folder(tmp_path, "llama", config=lambda config: config.update(hidden_act="gelu"))
    with pytest.raises(ScenarioError) as caught:
        load_checkpoint(llama, ids=[1])
    assert said(caught.value, "zh") == f"{llama / 'config.json'}: hidden_act: 只支持 'silu'，实际是 'gelu'"

    def equal(config):
        config["rope_parameters"]["high_freq_factor"] = config["rope_parameters"]["low_freq_factor"]

    llama3 = folder(tmp_path, "llama3", config=equal)
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        load_checkpoint(llama3, ids=[1])
    assert [warned(w.message, "zh") for w in caught_warnings] == [
        f"{llama3 / 'config.json'}: rope_parameters.high_freq_factor: 等于 low_freq_factor（1.0）：没有频段被混合，"
        "频率从缩放直接跳到不缩放"]


def test_a_gguf_files_layout_refusal_reads_in_chinese(tmp_path):
    import gguf_bytes as gb
    from said import said
    from test_loader_defects import gguf

    from engine.loading.checkpoint import load_checkpoint

    path = gguf(tmp_path, lambda g: g.set("general.alignment", gb.UINT32, 48))
    with pytest.raises(ScenarioError) as caught:
        load_checkpoint(path, ids=[1])
    assert said(caught.value, "zh") == f"{path}: general.alignment: 应为 2 的幂，实际是 48"


@pytest.mark.parametrize("on_a_terminal", [False, True], ids=["loaded-first", "in-the-loading-screen"])
def test_open_with_lang_zh_refuses_a_bad_file_in_chinese(monkeypatch, on_a_terminal):
    """Loaded before the app starts (output redirected) or by the TUI's loading screen: the one line is in the
    language the app was opened in."""
    from functools import partialmethod

    from textual.app import App

    from tinyllm_tui import cli
    from tinyllm_tui.tui.app import DebuggerApp

    monkeypatch.setattr(DebuggerApp, "run", partialmethod(App.run, headless=True))
    monkeypatch.setattr(cli, "_on_a_terminal", lambda: on_a_terminal)
    case = BAD / "duplicate_key.yaml"
    result = CliRunner().invoke(app, ["open", str(case), "--lang", "zh"])
    assert (result.exit_code, result.stderr) == (2, f"tinyllm-tui: error: {case}{ZH_REFUSALS[case.name]}\n")
    english = CliRunner().invoke(app, ["open", str(case), "--lang", "en"])
    assert english.stderr == "\n".join(BEFORE[f"bad/{case.name}"]).replace("{bad}", str(BAD)) + "\n"


def test_a_layer_option_another_kind_takes_is_refused_in_its_kinds_words():
    """`kernel:` on an attention layer: the short conv's cause, worded in its module in both languages."""
    from said import said
    from test_layer_kinds import GQA_TEXT

    text = GQA_TEXT.replace("{mixer: attention, window: 4}", "{mixer: attention, kernel: 3}", 1)
    with pytest.raises(ScenarioError) as caught:
        load_scenario_text(text, "gqa.yaml")
    where = f"gqa.yaml:{caught.value.line}: model.layers[0].kernel: "
    assert said(caught.value, "zh") == where + "attention 层没有卷积"
    assert said(caught.value, "en") == where + "a attention layer has no convolution"


def test_the_debugger_commands_warnings_are_said_in_its_language(tmp_path):
    """`open --lang zh` says a loader's warning in Chinese, the app's language."""
    from test_loader_defects import folder

    from tinyllm_tui.cli import app

    def equal(config):
        config["rope_parameters"]["high_freq_factor"] = config["rope_parameters"]["low_freq_factor"]

    llama3 = folder(tmp_path, "llama3", config=equal)
    bad_set = ["--ids", "1", "--set", "nonsense[0,0]=1"]  # refused once loaded: the command ends before the app
    opened = CliRunner().invoke(app, [str(llama3), "--lang", "zh", *bad_set])
    assert opened.exit_code == 2
    assert "tinyllm-tui: warning: " + f"{llama3 / 'config.json'}: rope_parameters.high_freq_factor: 等于" in opened.stderr
