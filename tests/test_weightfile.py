"""Weights in a safetensors/npz file the scenario names: load, edit, save, convert, refuse bad files."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, X01
from said import refused, said
from safetensors.numpy import save_file

from engine import Session, load_scenario, to_host
from engine.causes import CausedError
from engine.loading.budget import parse_size, weight_bytes
from engine.loading.document import ScenarioError
from engine.loading.edits import CellEdit, apply_edit, convert_scenario, save, with_weights
from engine.spec import ModelSpec, NormSpec


@pytest.fixture(params=[".safetensors", ".npz"])
def converted(request, tmp_path, x01_copy):
    """X01 with its weights moved into a weight file beside a YAML that names it."""
    source = x01_copy
    target = tmp_path / "x01_file.yaml"
    convert_scenario(load_scenario(source), tmp_path / f"x01{request.param}", target)
    return target


def trace(scenario) -> list[tuple]:
    return [(s.step, s.name, s.head, to_host(s.values).tolist()) for s in Session(scenario).steps()]


def test_converted_scenario_names_the_file_and_keeps_everything_else(converted):
    text, original = converted.read_text(encoding="utf-8"), X01.read_text(encoding="utf-8")
    suffix = "safetensors" if (converted.parent / "x01.safetensors").exists() else "npz"
    section = slice(original.index("weights:"), original.index("\n\nrequests:") + 1)  # the blank line stays
    assert text == original[: section.start] + f"weights: {{file: x01.{suffix}}}\n" + original[section.stop :]
    assert "# Embedding E" not in text and "# X01 — " in text  # the section's own comments go with it


def test_inline_and_file_backed_scenarios_trace_identically(converted):
    inline, from_file = load_scenario(X01), load_scenario(converted)
    assert from_file.weights_source is not None and inline.weights_source is None
    assert set(from_file.weights) == set(inline.weights)
    assert trace(from_file) == trace(inline)


def test_edit_save_reload_keeps_the_yaml_and_changes_the_weight_file(converted):
    scenario = load_scenario(converted)
    yaml_before = converted.read_bytes()
    edited = apply_edit(scenario.weights, CellEdit("blocks.0.attn.wk", (0, 1), 0.5))
    assert save(scenario, edited) == converted
    assert converted.read_bytes() == yaml_before  # comments and all: untouched
    reloaded = load_scenario(converted)
    for name, array in edited.items():
        assert np.array_equal(reloaded.weights[name], array), name
    assert reloaded.weights["blocks.0.attn.wk"][0, 1] == 0.5
    assert not [p.name for p in converted.parent.iterdir() if p.name.startswith(".")]  # no temporary left


def test_save_as_writes_a_new_yaml_and_weight_file_beside_it(converted, tmp_path):
    scenario = load_scenario(converted)
    edited = apply_edit(scenario.weights, CellEdit("embed", (1, 0), 9.0))
    (tmp_path / "out").mkdir()
    written = save(scenario, edited, tmp_path / "out" / "mine.yaml")
    weight_file = written.with_suffix(scenario.weights_source.file.suffix)
    assert weight_file.exists() and f"{{file: {weight_file.name}}}" in written.read_text(encoding="utf-8")
    assert load_scenario(written).weights["embed"][1, 0] == 9.0
    assert load_scenario(converted).weights["embed"][1, 0] == 0.2  # the original is left alone


def test_fingerprint_follows_edits_not_reloads(converted):
    scenario = load_scenario(converted)
    assert load_scenario(converted).fingerprint == scenario.fingerprint
    edit = CellEdit("embed", (1, 0), 9.0)
    edited = with_weights(scenario, apply_edit(scenario.weights, edit))
    assert edited.fingerprint != scenario.fingerprint
    assert with_weights(scenario, apply_edit(scenario.weights, edit)).fingerprint == edited.fingerprint
    assert with_weights(scenario, dict(scenario.weights)).fingerprint == scenario.fingerprint  # undo to the file


def _shapes_file(tmp_path, arrays: dict, name="x01.safetensors"):
    """X01's YAML naming a weight file with exactly `arrays`."""
    text = X01.read_text(encoding="utf-8")
    text = text[: text.index("weights:")] + f"weights: {{file: {name}}}\n" + text[text.index("\nrequests:") + 1 :]
    (tmp_path / "x01.yaml").write_text(text, encoding="utf-8")
    if name.endswith(".safetensors"):
        save_file(arrays, str(tmp_path / name))
    else:
        np.savez(tmp_path / name, **arrays)
    return tmp_path / "x01.yaml", tmp_path / name


def _x01_arrays() -> dict:
    return {name: np.ascontiguousarray(a) for name, a in load_scenario(X01).weights.items()}


@pytest.mark.parametrize("name", ["x01.safetensors", "x01.npz"])
@pytest.mark.parametrize("change, message", [
    (lambda a: a.update({"blocks.0.attn.wq": np.zeros((4, 3))}), "blocks.0.attn.wq: expected 4×4, got 4×3"),
    (lambda a: a.update({"blocks.0.attn.wk": np.zeros((4, 4), dtype=np.int32)}),
     "blocks.0.attn.wk: expected floating-point numbers, got "),
    (lambda a: a.pop("blocks.0.mlp.w_down"), "blocks.0.mlp.w_down: missing from the weight file"),
    (lambda a: a.update({"blocks.0.attn.bq": np.zeros(4)}), "blocks.0.attn.bq: not a parameter of this model"),
])
def test_a_bad_weight_file_is_one_located_error(tmp_path, name, change, message):
    arrays = _x01_arrays()
    change(arrays)
    yaml_path, weight_path = _shapes_file(tmp_path, arrays, name)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(yaml_path)
    assert said(caught.value).startswith(f"{weight_path}: {message}"), said(caught.value)


@pytest.mark.parametrize("name", ["x01.safetensors", "x01.npz"])
def test_a_truncated_weight_file_is_refused(tmp_path, name):
    yaml_path, weight_path = _shapes_file(tmp_path, _x01_arrays(), name)
    weight_path.write_bytes(weight_path.read_bytes()[:-40])
    with pytest.raises(ScenarioError) as caught:
        load_scenario(yaml_path)
    start = f"{weight_path}: embed: its data ends at byte" if name.endswith(".safetensors") else f"{weight_path}: not a readable "
    assert said(caught.value).startswith(start), said(caught.value)


def test_a_missing_weight_file_is_reported_at_its_line(tmp_path):
    yaml_path, weight_path = _shapes_file(tmp_path, _x01_arrays())
    weight_path.unlink()
    line = yaml_path.read_text(encoding="utf-8").splitlines().index("weights: {file: x01.safetensors}") + 1
    with refused(ScenarioError, rf"^{yaml_path}:{line}: weights.file: no weight file "):
        load_scenario(yaml_path)


def test_bfloat16_tensors_are_widened(tmp_path):
    """A bf16 file written by hand: 0x3F80 is 1.0 and 0xC020 is -2.5 in bfloat16."""
    arrays = _x01_arrays()
    yaml_path, weight_path = _shapes_file(tmp_path, arrays)
    header, blobs, offset = {}, [], 0
    for name, array in arrays.items():
        bits = np.full(array.shape, 0x3F80, dtype="<u2")
        if name == "embed":
            bits[1, 0] = 0xC020
        header[name] = {"dtype": "BF16", "shape": list(array.shape), "data_offsets": [offset, offset + bits.nbytes]}
        blobs.append(bits.tobytes())
        offset += bits.nbytes
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    weight_path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + b"".join(blobs))
    weights = load_scenario(yaml_path).weights
    assert weights["embed"][1, 0] == -2.5 and weights["embed"][0, 0] == 1.0
    assert weights["blocks.0.attn.wq"].dtype == np.float32


# -- memory budget -------------------------------------------------------------------------
def gpt2_small() -> ModelSpec:
    return ModelSpec(d_model=768, n_layers=12, n_heads=12, d_head=64, d_ff=3072,
                     norm=NormSpec("layernorm", "pre", 1e-5, True), final_norm=True, ffn="gelu_tanh",
                     positions="learned", max_positions=1024, bias=True, tied_unembed=True)


def test_weight_bytes_of_gpt2_small_match_its_published_parameter_count():
    assert weight_bytes(gpt2_small(), 50257, "float32") == 124_439_808 * 4  # GPT-2 small: 124,439,808 parameters


@pytest.mark.parametrize("text, size", [("8G", 8 * 2**30), ("512M", 512 * 2**20), ("1.5GiB", 3 * 2**29),
                                        ("1000", 1000), ("2k", 2048)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "", "-1G", "0", "8X"])
def test_parse_size_refuses(text):
    with pytest.raises(CausedError) as refused:
        parse_size(text)
    assert refused.value.cause.facts == {"text": text} and refused.value.cause.code == "size.syntax"


def test_a_model_over_budget_is_refused_before_its_weights_are_read(tmp_path):
    """The weight file is gone: the refusal comes from the spec alone, before any tensor is read."""
    path = _make_big(tmp_path, "--d-model", "64", "--layers", "2", "--vocab", "1000")
    scenario = load_scenario(path)
    need = weight_bytes(scenario.model, len(scenario.vocab), "float64")
    (path.parent / "model.safetensors").unlink()
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path, max_memory=need - 1)
    message = said(caught.value)
    assert message.startswith(f"{path}:") and "model: the weights alone need about" in message
    assert "--max-memory" in message and f"{need / 2**20:.1f} MiB" in message
    with refused(ScenarioError, "no weight file"):  # at the budget it goes on to read the file
        load_scenario(path, max_memory=need)


# -- the generator of big scenarios ------------------------------------------------------------
def _make_big(tmp_path, *args) -> Path:
    tool = ROOT / "tools" / "make_big_model.py"
    subprocess.run([sys.executable, str(tool), str(tmp_path / "big"), *args], check=True, capture_output=True)
    return tmp_path / "big" / "model.yaml"


def test_make_big_model_writes_a_loadable_scaled_model(tmp_path):
    path = _make_big(tmp_path, "--d-model", "32", "--layers", "2", "--vocab", "300", "--prompt", "5", "--new", "3")
    scenario = load_scenario(path)
    wq = scenario.weights["blocks.0.attn.wq"]
    assert wq.dtype == np.float32 and wq.shape == (32, 32)
    assert math.isclose(float(np.std(scenario.weights["blocks.0.mlp.w_out"])), 1 / math.sqrt(128), rel_tol=0.1)
    assert np.all(scenario.weights["blocks.1.ln2.w"] == 1) and np.all(scenario.weights["ln_final.b"] == 0)
    assert len(scenario.vocab) == 300 and len(scenario.requests[0].tokens) == 5
    session = Session(scenario)
    for _ in session.steps():
        pass
    assert len(session.results[0].generated) == 3


def test_make_big_model_inline_writes_every_weight_into_the_yaml(tmp_path):
    path = _make_big(tmp_path, "--inline", "--d-model", "16", "--layers", "2", "--vocab", "20", "--prompt", "4")
    scenario = load_scenario(path)
    assert scenario.weights_source is None and not (path.parent / "model.safetensors").exists()
    assert scenario.weights["blocks.1.attn.wo"].shape == (16, 16) and len(scenario.requests[0].tokens) == 4


# -- the command line ---------------------------------------------------------------------------
def test_convert_command_writes_a_scenario_that_checks_like_x01(tmp_path):
    from typer.testing import CliRunner

    from tinyllm_tui.cli import app

    runner = CliRunner()
    weights, target = tmp_path / "w.safetensors", tmp_path / "x.yaml"
    result = runner.invoke(app, ["convert", str(X01), "--weights", str(weights), "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert "weights: {file: w.safetensors}" in target.read_text(encoding="utf-8")
    summary = runner.invoke(app, ["check", str(target)]).output.splitlines()[-1]
    assert "45/45" in summary and "332/332" in summary


@pytest.mark.parametrize("args, message", [
    (["--max-memory", "lots"], "Invalid value for --max-memory: expected a size such as 8G"),
    (["--max-memory", "1K"], "model: the weights alone need about 1.1 KiB as float64, over the memory budget of "
                             "1.0 KiB; raise it with --max-memory"),
])
def test_max_memory_on_the_command_line(args, message):
    from typer.testing import CliRunner

    from tinyllm_tui.cli import app

    result = CliRunner().invoke(app, ["run", str(X01), *args])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
