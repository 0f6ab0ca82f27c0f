"""`run` output at size: never cut, streamed, summarised past 64 rows/columns; check explains itself."""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from conftest import ROOT, SCENARIOS, X01
from typer.testing import CliRunner

from engine import Session
from engine.parameters import parameter_shapes
from engine.scenario import Scenario
from engine.spec import DecodeRule, ModelSpec, NormSpec, Request, Vocab
from engine.trace import OpKind
from tinyllm_tui import cli

ENCODER = SCENARIOS / "encoder004.yaml"  # 8-wide rows with CJK labels: wider than 80 columns


def invoke(*args):
    return CliRunner().invoke(cli.app, list(args))


def every_number_in_full(text: str, document: dict) -> None:
    """Each record's values appear, with all 6 decimals, on the text line of their row."""
    lines = text.splitlines()
    assert not any("…" in line for line in lines)
    for rec in document["records"]:
        if rec["name"] == "sample.hook_choice":
            continue
        for label, row in zip(rec["rows"], rec["values"]):
            expected = ["−∞" if x == -math.inf else f"{x:.6f}".replace("-0.000000", "0.000000") for x in row]
            assert any(line.split()[-len(row):] == expected and line.lstrip().startswith(label.split()[0])
                       for line in lines), (rec["name"], label)


def test_run_into_a_file_keeps_every_number_whole(tmp_path):
    document = json.loads(invoke("run", str(ENCODER), "--json").output)
    out = tmp_path / "out.txt"
    with out.open("w") as file:
        done = subprocess.run([Path(sys.executable).parent / "tinyllm-tui", "run", str(ENCODER)], cwd=ROOT, stdout=file,
                              stderr=subprocess.PIPE, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress line when stderr is not a terminal
    every_number_in_full(out.read_text(), document)
    every_number_in_full(invoke("run", str(ENCODER)).output, document)


def test_jsonl_streams_the_json_records_then_the_requests():
    document = json.loads(invoke("run", str(X01), "--json").output)
    lines = [json.loads(line) for line in invoke("run", str(X01), "--jsonl").output.splitlines()]
    assert lines[:-1] == document["records"]
    assert lines[-1] == {"requests": document["requests"]}


def wide_scenario(vocab: int = 100) -> Scenario:
    model = ModelSpec(d_model=8, n_layers=1, n_heads=2, d_head=4, d_ff=16, norm=NormSpec("layernorm", "pre", 1e-5, False),
                      final_norm=True, ffn="relu", tied_unembed=True)
    rng = np.random.default_rng(1)
    weights = {n: rng.normal(0, 1, s) for n, s in parameter_shapes(model, vocab).items()}
    return Scenario("<wide>", "wide", Vocab(tuple(f"t{i}" for i in range(vocab))), model, weights,
                    (Request((1, 2, 3), 1),), DecodeRule(max_new_tokens=1))


def test_a_matrix_wider_than_32_prints_a_summary_and_its_corners():
    logits = next(s for s in Session(wide_scenario()).steps() if s.kind is OpKind.LOGITS)
    text = cli.state_text(logits, None, full=False)
    row = logits.values[-1]
    p = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
    best = int(np.argmax(p))
    assert "shape 3×100" in text and f"max {logits.values.max():.6f}" in text
    assert f"top 5 of row 2 · t3: {best} · t{best} p={p[best]:.6f}" in text
    assert "99 · t99" in text and "50 · t50" not in text  # the corners only
    assert "50 · t50" in cli.state_text(logits, None, full=True)


def test_check_says_which_printed_tables_follow_from_the_inputs():
    result = invoke("check", str(ENCODER))
    assert result.exit_code == 1
    lines = result.output.splitlines()
    summary = next(i for i, line in enumerate(lines) if line.startswith("summary: "))
    assert lines[summary].endswith("tables agree fully; 87/1216 printed cells agree")
    assert "do not follow from the scenario's inputs" in lines[summary + 1]
    assert sum("does not follow from the inputs" in line for line in lines[summary + 2:]) == 15
    assert invoke("check", str(X01)).output.splitlines()[-1] == "summary: 45/45 tables agree fully; 332/332 printed cells agree"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_goes_to_stderr_only_when_it_is_a_terminal(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    progress = cli._Progress()
    progress.show("step 3")
    progress.done()
    assert terminal.getvalue() == "\r\033[Kstep 3\r\033[K"  # each line clears the one before


def test_run_check_and_diff_show_how_far_loading_has_got_on_a_terminal(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    cli._loaded(X01, cli.Options())
    lines = terminal.getvalue().split("\r\033[K")
    size = f"{X01.stat().st_size / 1024:.1f} KiB"
    assert lines[1].startswith(f"loading {X01}: reading the YAML: ") and lines[1].endswith(f" of {size}")
    assert f"loading {X01}: reading the YAML: {size} of {size}" in lines
    assert lines[-2].startswith(f"loading {X01}: converting the weights: tensor ") and lines[-1] == ""


def test_the_readmes_at_size_commands_run_as_written(tmp_path):
    """The two commands of README's "At size", in a small size (the shape options are the tool's own)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## At size"):text.index("## Scenarios")]
    commands = re.findall(r"`(\.venv/bin/[^`]+)`", section)
    make, open_ = (command.split() for command in commands[:2])
    assert make[:2] == [".venv/bin/python", "tools/make_big_model.py"] and open_[0] == ".venv/bin/tinyllm-tui"
    folder = tmp_path / "gpt2"
    small = ["--d-model", "16", "--layers", "1", "--vocab", "40", "--prompt", "3", "--new", "2"]
    bin_folder = Path(sys.executable).parent  # the venv the tests run in, as .venv/bin
    made = subprocess.run([bin_folder / "python", make[1], str(folder), *small], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert made.returncode == 0, made.stderr
    args = [str(folder / "model.yaml") if a == make[2] + "/model.yaml" else a for a in open_[1:]]
    assert args[0] == str(folder / "model.yaml")
    result = invoke("run", *args, "--json")  # `run` takes what `open` takes: the TUI is not started here
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["dtype"] == "float32"


def test_every_readme_command_runs_from_the_venv_its_first_command_made():
    """Issue 27 defect 9: the real-model commands used a bare `tinyllm-tui`, which is not on PATH after the
    README's first command (it installs into .venv)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)  # every fenced block, its info string first
    lines = [line for kind, block in blocks if kind in ("", "sh", "bash") for line in block.splitlines()]
    assert any(line.startswith(".venv/bin/tinyllm-tui ") for line in lines)
    assert not [line for line in lines if re.match(r"(\S+ && )*tinyllm-tui\b", line)]
