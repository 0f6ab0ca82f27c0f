"""The command line: routing, run (text and JSON) and diff."""

from __future__ import annotations

import gc
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SCENARIOS, X01
from typer.testing import CliRunner

from engine import to_host
from engine.export import json_number
from engine.faults import INJECTIONS
from engine.gctuning import YOUNG_THRESHOLD
from tinyllm_tui import cli


def invoke(*args):
    return CliRunner().invoke(cli.app, list(args))


def test_run_prints_labelled_tables_grouped_by_request_and_round():
    result = invoke("run", str(X01))
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.index("request 0 · 我 爱 学习 · prefill") < out.index("request 0 · 我 爱 学习 · decode 1")
    assert out.index("decode 1") < out.index("request 1 · 你 爱 · prefill")
    assert "blocks.0.attn.hook_attn_scores · head 0" in out
    scores_row = next(line for line in out.splitlines() if line.strip().startswith("0 · 我") and "−∞" in line)
    assert scores_row.split()[3:] == ["0.665434", "−∞", "−∞"]  # seed: head 0, query 0 sees only key 0
    assert "sample.hook_choice: chose 爱 (token id 2)" in out  # the seed: prefill chooses 爱
    assert out.splitlines()[-1] == "request 0 generated 爱 爱 (max_new_tokens); request 1 generated 你 (max_new_tokens)"


def test_run_json_document():
    result = invoke("run", str(X01), "--json")
    assert result.exit_code == 0
    doc = json.loads(result.output)
    assert (doc["scenario"], doc["backend"], doc["dtype"]) == (str(X01), "numpy", "float64")
    assert doc["requests"] == [
        {"input": [1, 2, 3], "generated": [2, 2], "stop": "max_new_tokens"},
        {"input": [4, 2], "generated": [4], "stop": "max_new_tokens"},
    ]
    record = next(r for r in doc["records"] if r["name"] == "blocks.0.attn.hook_attn_scores" and r["head"] == 0)
    assert set(record) == {"step", "request", "phase", "round", "name", "layer", "head", "rows", "cols", "values"}
    assert record["rows"] == ["0 · 我", "1 · 爱", "2 · 学习"]
    assert record["cols"] == ["k0 · 我", "k1 · 爱", "k2 · 学习"]
    assert record["values"][0][1:] == [-math.inf, -math.inf]  # written -1e999: a number every JSON reader parses
    assert [r["step"] for r in doc["records"]] == list(range(len(doc["records"])))


def test_diff_says_cached_equals_full_and_prints_each_measured_max():
    result = invoke("diff", str(X01))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[-1] == "✓ cached equals full recompute: every operator within 1e-12"
    # the decode round looks up 爱's embedding row as the full recompute does: exactly the same, and 0 is printed
    assert "✓ request 0 decode 1  hook_embed  max|Δ| 0.000e+00 (≤ 1e-12)" in lines
    resid = next(line for line in lines if line.startswith("✓ request 0 decode 1  blocks.0.hook_resid_post  max|Δ| "))
    assert float(resid.split("max|Δ| ")[1].split()[0]) <= 1e-12 and resid.endswith("(≤ 1e-12)")


def test_diff_json_holds_every_measured_number():
    result = invoke("diff", str(X01), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert (document["agrees"], document["first_divergence"], document["inject"]) == (True, None, None)
    operators = document["operators"]
    decode = [o for o in operators if o["phase"] == "decode"]
    assert len([o for o in decode if not o["state"]]) == 31  # X01's one cached round (test_diff)
    assert [o["name"] for o in decode if o["state"]] == ["blocks.0.attn.cache_k", "blocks.0.attn.cache_v"]  # its end
    assert all(isinstance(o["max_abs"], float) and 0 <= o["max_abs"] <= 1e-12 and o["agrees"] for o in operators)
    assert [o["max_abs"] for o in operators if o["name"] == "hook_embed"] == [0.0, 0.0, 0.0]  # rows looked up alike


def test_diff_json_names_the_first_divergence_of_an_injected_bug():
    result = invoke("diff", str(SCENARIOS / "chunked.yaml"), "--inject", "chunk-mask", "--json")
    assert result.exit_code == 1
    document = json.loads(result.output)
    first = next(o for o in document["operators"] if o["step"] == document["first_divergence"])
    assert (document["agrees"], document["inject"]) == (False, "chunk-mask")
    assert (first["request"], first["phase"], first["name"], first["head"]) == (0, "prefill",
                                                                              "blocks.0.attn.hook_attn_scores", 0)
    assert first["max_abs"] == math.inf and not first["agrees"]  # a key the full run masks is read: −∞ against a number


def test_a_file_argument_opens_the_tui(monkeypatch):
    opened = []  # what the loading screen would load
    monkeypatch.setattr("tinyllm_tui.tui.app.launch", lambda loading, backend, **kw: opened.append(loading.load()))
    assert invoke(str(X01), "--break", "softmax").exit_code == 0
    assert invoke().exit_code == 0  # no argument: the bundled X01
    assert [o.scenario.title for o in opened] == ["X01 · 我爱学习 / 你爱"] * 2
    assert opened[0].breakpoints == ["softmax"]
    assert invoke(str(X01), "--max-memory", "1G").exit_code == 0
    x01_weights = sum(w.size * 8 for w in opened[0].scenario.weights.values())  # float64
    assert opened[2].budget == 2**30 - x01_weights  # the history gets what the weights leave


def test_help_lists_the_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("open", "run", "diff"):
        assert command in result.output


def test_diff_with_an_injected_bug_names_the_first_divergence_and_exits_1():
    result = invoke("diff", str(SCENARIOS / "chunked.yaml"), "--inject", "chunk-mask")
    assert result.exit_code == 1
    assert result.output.splitlines()[0].startswith("injected bug chunk-mask: ")
    assert result.output.splitlines()[-1].startswith(
        "✗ first divergence: request 0 prefill round 0 blocks.0.attn.hook_attn_scores head 0")
    assert result.output.splitlines()[-1].endswith("(injected: chunk-mask)")


def test_gradcheck_reports_a_small_relative_error():
    result = invoke("gradcheck", str(X01))
    assert result.exit_code == 0, result.output
    error = float(result.output.split("relative error ")[1].split()[0])
    assert error < 1e-6


def test_eos_stop_is_reported_by_run():
    result = invoke("run", str(SCENARIOS / "eos7.yaml"))
    assert "request 0 generated 学习 ！ EOS (eos)" in result.output


def test_the_program_collects_young_garbage_less_often_than_python_by_default(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["tinyllm-tui", "--help"])
    before = gc.get_threshold()
    try:
        with pytest.raises(SystemExit):
            cli.main()
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:]) and YOUNG_THRESHOLD > before[0]
    finally:
        gc.set_threshold(*before)


def titles(output: str) -> list[str]:
    """The `[step] name · head h` line of every operator `run` printed."""
    return [line for line in output.splitlines() if line.startswith("[")]


def test_run_break_prints_only_the_operators_where_a_breakpoint_hits():
    result = invoke("run", str(X01), "--break", "blocks.*.attn.hook_pattern")
    assert result.exit_code == 0, result.output
    # X01 runs three rounds (request 0's prefill and decode 1, request 1's prefill) of one layer with two heads
    assert [t.split("] ")[1] for t in titles(result.output)] == [f"blocks.0.attn.hook_pattern · head {h}"
                                                                for _ in range(3) for h in (0, 1)]
    lines = result.output.splitlines()
    assert all(lines[lines.index(t) - 1] == "⚑ breakpoint: blocks.*.attn.hook_pattern" for t in titles(result.output))
    assert lines[-1].startswith("request 0 generated 爱 爱")  # the run still goes to the end


def test_run_break_takes_what_the_tui_takes_and_json_keeps_only_the_hits():
    records = json.loads(invoke("run", str(X01), "--break", "round=1", "--break", "hook_embed", "--json").output)["records"]
    decode = [r for r in records if r["round"] == 1]
    assert len(decode) == 31  # every operator of X01's one cached decode round (as test_diff counts them)
    assert [(r["request"], r["round"]) for r in records if r["name"] == "hook_embed"] == [(0, 0), (0, 1), (1, 0)]
    assert len(records) == 31 + 2


def test_run_break_that_never_hits_says_so():
    result = invoke("run", str(X01), "--break", "abs>1000")
    assert result.exit_code == 0 and titles(result.output) == []
    assert "no operator hits a breakpoint (abs>1000)" in result.output


def test_a_bad_break_is_refused_before_loading():
    result = invoke("run", "missing.yaml", "--break", "no such thing")
    assert result.exit_code == 2 and result.stderr.startswith("tinyllm-tui: error: breakpoint 'no such thing': ")


def test_a_misspelt_command_is_suggested():
    result = invoke("rnu", str(X01))
    assert result.exit_code == 2
    assert result.stderr == "tinyllm-tui: error: no command 'rnu' (did you mean 'run'?)\n"


def test_check_on_a_scenario_without_expect_tables_says_so(tmp_path):
    plain = tmp_path / "plain.yaml"
    text = X01.read_text(encoding="utf-8")
    plain.write_text(text[: text.index("\nexpect:")] + "\n", encoding="utf-8")
    assert invoke("run", str(plain)).exit_code == 0  # a valid scenario
    result = invoke("check", str(plain))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"tinyllm-tui: error: {plain}: expect: no expect: tables to check (")
    assert len(result.stderr.splitlines()) == 1


CLI = Path(sys.executable).parent / "tinyllm-tui"


def test_run_into_a_closed_pipe_exits_0_quietly():
    """`tinyllm-tui run FILE | head`: the reader stops reading; nothing to complain about."""
    process = subprocess.Popen([CLI, "run", str(X01)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # no reader at all: the first write meets a broken pipe
    assert process.wait(timeout=120) == 0
    assert process.stderr.read() == b""
    process.stderr.close()


def test_open_with_its_output_redirected_writes_only_the_error_line():
    bad = ROOT / "tests" / "data" / "bad" / "duplicate_key.yaml"
    done = subprocess.run([CLI, str(bad)], capture_output=True, timeout=120, check=False)
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode() == f"tinyllm-tui: error: {bad}:25: model.causal: this key appears twice\n"


@pytest.mark.parametrize("bug", list(INJECTIONS))
def test_an_injected_cache_bug_is_refused_on_an_encoder(bug):
    """encoder004 runs one prefill and no cached round: no cache bug can change it, so none is accepted."""
    encoder = SCENARIOS / "encoder004.yaml"
    for command in ("run", "diff"):
        result = invoke(command, str(encoder), "--inject", bug)
        assert result.exit_code == 2 and result.stdout == ""
        assert result.stderr.startswith(f"tinyllm-tui: error: Invalid value for --inject: bug {bug!r} cannot run on "
                                        f"{encoder}: ") and len(result.stderr.splitlines()) == 1


def test_the_debuggers_trace_streams_every_operator_once_and_leaves_the_cursor():
    """`run`'s pass reads a stream of its own, from the first operator to the end of the trace: no history."""
    from engine import load_scenario
    from tinyllm_tui.debugger.debugger import Debugger

    debugger = Debugger(load_scenario(X01), breakpoints=["blocks.0.attn.hook_pattern"])
    debugger.step()
    debugger.step()
    trace = debugger.trace()
    passed = list(trace)
    assert [state.step for state, _ in passed] == list(range(len(passed))) and debugger.history.cursor == 2
    assert not hasattr(trace, "history")
    records = json.loads(invoke("run", str(X01), "--json").output)["records"]
    assert [state.name for state, _ in passed] == [r["name"] for r in records]  # to the end of the trace
    assert [bool(hits) for _, hits in passed] == [s.name == "blocks.0.attn.hook_pattern" for s, _ in passed]


def test_set_is_one_unsaved_edit_of_the_debugger_in_the_tui_and_in_run(monkeypatch):
    opened = []
    monkeypatch.setattr("tinyllm_tui.tui.app.launch", lambda loading, backend, **kw: opened.append(loading.load()))
    edit = "blocks.0.attn.wk[0,1]=0.5"
    assert invoke(str(X01), "--set", edit).exit_code == 0
    [opening] = opened
    assert [(e.name, e.index, e.value) for e in opening.edits] == [("blocks.0.attn.wk", (0, 1), 0.5)]
    assert opening.scenario.weights["blocks.0.attn.wk"][0, 1] != 0.5  # the file's weights: the edit is unsaved
    records = json.loads(invoke("run", str(X01), "--set", edit, "--json").output)["records"]
    from tinyllm_tui.debugger.debugger import Debugger

    tui = Debugger(opening.scenario, edits=opening.edits)  # as the TUI prepares it from the opening
    assert tui.unsaved() == 1
    assert [r["values"] for r in records] == [
        [[json_number(float(x)) for x in row] for row in to_host(state.values)] for state, _ in tui.trace()]


def test_run_builds_no_frame_and_no_history(monkeypatch):
    """The frame builder is the TUI's (it subscribes): `run` streams its pass once and pays for neither frames
    nor the history (issue 24: the Debugger built a Frame the CLI never read)."""
    from tinyllm_tui.debugger import debugger as debugger_module
    from tinyllm_tui.debugger import frames

    made = []
    monkeypatch.setattr(frames.FrameBuilder, "publish", lambda self, ahead=True: made.append("frame"))
    monkeypatch.setattr(debugger_module, "History", lambda *a, **k: made.append("history"))
    result = invoke("run", str(X01), "--break", "attn.pattern")
    assert result.exit_code == 0, result.output
    assert "⚑ breakpoint: attn.pattern" in result.output and "request 0 generated 爱 爱" in result.output
    assert made == []
