"""Weight edits: --set parsing, stale caches, saving back with the file's comments and layout."""

from __future__ import annotations

import difflib
import json

import numpy as np
import pytest
from conftest import X01
from typer.testing import CliRunner

from engine import Session, load_scenario, to_host
from engine.compare.diff import TOLERANCE, diff_runs, first_divergence
from engine.loading.edits import CellEdit, EditError, apply_edit, parse_set, save, with_weights
from engine.session import StaleFrom
from tinyllm_tui.cli import app

EDIT = "blocks.0.attn.wk[0,1]=0.5"


def head0_pattern_by_hand(wk: np.ndarray) -> np.ndarray:
    """X01's head-0 pattern of 我爱学习 computed directly with NumPy from the file's numbers."""
    scenario = load_scenario(X01)
    x = scenario.weights["embed"][[1, 2, 3]]
    ln = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    q, k = ln @ scenario.weights["blocks.0.attn.wq"], ln @ wk
    scores = q[:, :2] @ k[:, :2].T / np.sqrt(2) + np.triu(np.full((3, 3), -np.inf), 1)
    e = np.exp(scores - scores.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def pattern(scenario) -> np.ndarray:
    state = next(s for s in Session(scenario).steps() if s.name == "blocks.0.attn.hook_pattern")
    return to_host(state.values)


def test_set_changes_the_pattern_as_numpy_says():
    scenario = load_scenario(X01)
    edited = with_weights(scenario, apply_edit(scenario.weights, parse_set(EDIT, scenario.weights)))
    wk = scenario.weights["blocks.0.attn.wk"].copy()
    wk[0, 1] = 0.5
    assert np.allclose(pattern(edited), head0_pattern_by_hand(wk), atol=1e-14)
    assert not np.allclose(pattern(edited), pattern(scenario))


@pytest.mark.parametrize("text, message", [
    ("blocks.0.attn.wk[0,1]=abc", "expected a number, got 'abc'"),
    ("blocks.0.attn.wk[0,1]=nan", "expected a finite number, got 'nan'"),
    ("blocks.0.attn.wk[0,1]=1e999", "expected a finite number, got '1e999'"),
    ("blocks.0.attn.wk[4,0]=1", "index [4, 0] is outside blocks.0.attn.wk, which is 4×4"),
    ("blocks.9.attn.wk[0,0]=1", "unknown parameter 'blocks.9.attn.wk'"),
    ("wk=1", "expected NAME[ROW,COL]=VALUE"),
])
def test_bad_set_is_refused_on_the_command_line(text, message):
    result = CliRunner().invoke(app, ["run", str(X01), "--set", text])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1 and message in result.stderr
    with pytest.raises(EditError):
        parse_set(text, load_scenario(X01).weights)


def test_set_applies_to_diff_and_run():
    runner = CliRunner()
    assert runner.invoke(app, ["diff", str(X01), "--set", EDIT]).exit_code == 0  # edited, still consistent
    doc = json.loads(runner.invoke(app, ["run", str(X01), "--set", EDIT, "--json"]).output)
    record = next(r for r in doc["records"] if r["name"] == "blocks.0.attn.hook_pattern" and r["head"] == 0)
    wk = load_scenario(X01).weights["blocks.0.attn.wk"].copy()
    wk[0, 1] = 0.5
    assert np.allclose(record["values"], head0_pattern_by_hand(wk), atol=1e-14)


def test_a_kept_stale_cache_diverges_and_a_recompute_agrees():
    """Edit Wk after the prefill of X01 and keep the cache: the diff shows where it departs."""
    scenario = load_scenario(X01)
    edited = with_weights(scenario, apply_edit(scenario.weights, parse_set(EDIT, scenario.weights)))
    stale = Session(edited, stale=StaleFrom(scenario.weights, request=0, round=1))
    diffs = diff_runs(stale.steps(), Session(edited, mode="full").steps())
    first = first_divergence(diffs)
    assert (first.request, first.round, first.name) == (0, 0, "blocks.0.attn.hook_k")  # K came from the old Wk
    decode = [d for d in diffs if d.round == 1 and not d.agrees]
    assert decode[0].name == "blocks.0.attn.hook_attn_scores"  # the new query meets stale keys
    recomputed = diff_runs(Session(edited).steps(), Session(edited, mode="full").steps())
    assert max(d.max_abs for d in recomputed) <= TOLERANCE


def test_save_changes_only_the_edited_number(tmp_path, x01_copy):
    path = x01_copy
    scenario = load_scenario(path)
    save(scenario, apply_edit(scenario.weights, parse_set(EDIT, scenario.weights)))
    before, after = X01.read_text(encoding="utf-8"), path.read_text(encoding="utf-8")
    changed = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["-          - [0.0, 1.0, 0.0, 0.0]", "+          - [0.0, 0.5, 0.0, 0.0]"]
    assert load_scenario(path).weights["blocks.0.attn.wk"][0, 1] == 0.5
    assert [p.name for p in tmp_path.iterdir()] == ["x01.yaml"]  # no temporary file left behind


def test_saving_an_edited_shorthand_writes_its_numbers(x01_copy):
    path = x01_copy
    scenario = load_scenario(path)
    save(scenario, apply_edit(scenario.weights, CellEdit("blocks.0.attn.wq", (0, 1), 0.25)))
    reloaded = load_scenario(path)
    expected = np.eye(4)
    expected[0, 1] = 0.25
    assert reloaded.weights["blocks.0.attn.wq"].tolist() == expected.tolist()
    assert "# Rows are input features, columns output features" in path.read_text(encoding="utf-8")
