"""A scenario file that names a checkpoint instead of inline weights: its own requests (text, ids
or pieces), decode rule, breakpoints and expect: tables, checked against the fixtures' reference
outputs that transformers computed (tools/make_fixtures.py), never against the engine's own output."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from engine import load_scenario
from tinyllm_tui.cli import app

FIXTURES = Path(__file__).parent / "fixtures"
PROMPT = "The cat sat on the mat, 我爱 café"  # the text tools/make_fixtures.py tokenized for the reference
ROW, COLS = 20, (0, 5, 42, 299)  # the prompt's last position; a few vocabulary columns


def invoke(*args):
    return CliRunner().invoke(app, [str(arg) for arg in args])


def reference(folder: str) -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURES / folder / "reference.npz"))


def write(tmp_path: Path, body: str, checkpoint: str = "llama") -> Path:
    """A scenario beside tmp_path naming the fixture by a path relative to itself."""
    relative = os.path.relpath(FIXTURES / checkpoint, tmp_path)
    path = tmp_path / "scenario.yaml"
    path.write_text(f"title: tiny llama\ncheckpoint: {relative}\n{body}", encoding="utf-8")
    return path


def expect_logits(shift: float = 0.0) -> str:
    """Prefill logits at the last position and the first decode round's, printed to 6 decimals."""
    ref = reference("llama")
    prefill = [f"{ref['logits'][ROW, c] + shift:.6f}" for c in COLS]
    decode = [f"{ref['step_logits'][1, c]:.6f}" for c in COLS]
    cols = ", ".join(map(str, COLS))
    return (f"expect:\n"
            f"  - {{op: unembed.hook_out, rows: [{ROW}], cols: [{cols}], values: [[{', '.join(prefill)}]]}}\n"
            f"  - {{op: unembed.hook_out, round: 1, rows: [{ROW + 1}], cols: [{cols}], values: [[{', '.join(decode)}]]}}\n")


REQUESTS = f'requests:\n  - text: "{PROMPT}"\ndecode: {{rule: greedy, max_new_tokens: 2}}\n'


def assert_located(result, path: Path, marker: str, message: str) -> None:
    """Exit 2, one line on stderr naming the YAML file and the line where `marker` stands."""
    text = path.read_text(encoding="utf-8")
    line = text[: text.index(marker)].count("\n") + 1
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and f"{path}:{line}: " in lines[0] and message in lines[0], result.stderr


def test_check_passes_on_reference_logits_and_fails_on_a_perturbed_cell(tmp_path):
    path = write(tmp_path, REQUESTS + expect_logits())
    result = invoke("check", path)
    assert result.exit_code == 0, result.output
    assert "summary: 2/2 tables agree fully" in result.output
    write(tmp_path, REQUESTS + expect_logits(shift=0.001))
    result = invoke("check", path)
    assert result.exit_code == 1, result.output
    assert "1/2 tables agree fully" in result.output


def test_text_ids_and_pieces_give_the_reference_ids(tmp_path):
    ids = [int(i) for i in reference("llama")["ids"]]
    by_text = load_scenario(write(tmp_path, REQUESTS))
    pieces = [by_text.vocab.tokens[i] for i in ids]
    quoted = ", ".join('"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"' for p in pieces)
    by_ids = load_scenario(write(tmp_path, f"requests:\n  - ids: {ids}\n  - tokens: [{quoted}]\n"))
    assert [r.tokens for r in (*by_text.requests, *by_ids.requests)] == [tuple(ids)] * 3
    assert by_text.decode.max_new_tokens == 2 and by_text.title == "tiny llama"


def test_a_gguf_checkpoint_tokenizes_text_with_its_own_metadata(tmp_path):
    scenario = load_scenario(write(tmp_path, REQUESTS, checkpoint="tiny-gguf/tiny.gguf"))
    assert scenario.requests[0].tokens == tuple(int(i) for i in reference("tiny-gguf")["ids"])


def test_breakpoints_are_kept_and_open_passes_them_before_the_command_line_ones(tmp_path, monkeypatch):
    path = write(tmp_path, REQUESTS + 'breakpoints: [softmax, "layer=1 & abs>3"]\n')
    assert load_scenario(path).breakpoints == ("softmax", "layer=1 & abs>3")
    opened = []
    monkeypatch.setattr("tinyllm_tui.tui.app.launch", lambda loading, backend, **kw: opened.append(loading.load()))
    assert invoke(path, "--break", "nan").exit_code == 0
    assert opened[0].breakpoints == ["softmax", "layer=1 & abs>3", "nan"]


def test_a_scenario_without_breakpoints_has_none(tmp_path):
    assert load_scenario(write(tmp_path, REQUESTS)).breakpoints == ()


def test_checkpoint_and_inline_weights_together_are_refused(tmp_path):
    path = write(tmp_path, REQUESTS + "weights: {file: model.safetensors}\n")
    assert_located(invoke("check", path), path, "weights:", "weights: a scenario with a checkpoint takes")


def test_a_bad_breakpoint_is_located(tmp_path):
    path = write(tmp_path, REQUESTS + "breakpoints:\n  - softmax\n  - layer=x=1\n")
    assert_located(invoke("run", path), path, "- layer=x=1", "breakpoints[1]: breakpoint 'layer=x=1'")


def test_a_checkpoint_path_may_start_at_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(FIXTURES))
    path = tmp_path / "scenario.yaml"
    path.write_text(f"checkpoint: ~/llama\n{REQUESTS}", encoding="utf-8")
    assert load_scenario(path).vocab == load_scenario(write(tmp_path, REQUESTS)).vocab


def test_a_missing_checkpoint_names_the_yaml_line(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text(f"title: gone\ncheckpoint: no/such/model\n{REQUESTS}", encoding="utf-8")
    assert_located(invoke("run", path), path, "checkpoint:", "checkpoint: no checkpoint")


@pytest.mark.parametrize("request_text, marker, message", [
    ('  - {text: "hi", ids: [1]}', "- {text", "requests[0].text: give one of tokens, ids, text, messages, not ids and text"),
    ("  - {ids: [a]}", "- {ids", "requests[0].ids[0]: expected an integer"),
    ("  - {ids: [300]}", "- {ids", "requests[0].ids[0]: token id 300 is out of range 0..299"),
])
def test_bad_requests_are_located(tmp_path, request_text, marker, message):
    path = write(tmp_path, f"requests:\n{request_text}\n")
    assert_located(invoke("run", path), path, marker, message)


def test_text_without_a_checkpoint_is_refused(tmp_path):
    x01 = Path(__file__).parent.parent / "tinyllm_tui" / "scenarios" / "x01.yaml"
    path = tmp_path / "x01.yaml"
    path.write_text(x01.read_text(encoding="utf-8").replace("- tokens: [你, 爱]", '- text: "你爱"'), encoding="utf-8")
    assert_located(invoke("run", path), path, "- text:", "text needs a checkpoint's tokenizer")
