"""The command line: routing, run (text and JSON) and diff."""

from __future__ import annotations

import gc
import json
import sys

import pytest
from conftest import SCENARIOS, X01
from typer.testing import CliRunner

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
    assert record["values"][0][1:] == ["-inf", "-inf"]
    assert [r["step"] for r in doc["records"]] == list(range(len(doc["records"])))


def test_diff_says_cached_equals_full():
    result = invoke("diff", str(X01))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "✓ cached equals full recompute: every operator within 1e-12"
    assert "✓ request 0 decode 1  blocks.0.hook_resid_post  max|Δ| ≤ 1e-12" in result.output


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
