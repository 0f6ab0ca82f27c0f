"""check --against: the dump's forms (keys without a pass, batch axis or not, stacked heads, missing and
foreign keys, masked scores), `run --save-activations` read back exactly, and the CLI's table and --json.

The dumps come from the independent NumPy decoder of tests/numpy_llama.py on the tiny Llama fixture."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from said import refused
from safetensors.numpy import load_file

from engine import ScenarioError
from engine.compare.against import compare_generation
from engine.compare.dump import load_dump
from engine.layout import Key, parse_key
from engine.loading.checkpoint import load_checkpoint
from numpy_llama import NumpyLlama
from tinyllm_tui import Recorder
from tinyllm_tui.presentation.against_words import report_lines
from engine.causes import Cause

LLAMA = Path(__file__).parent / "fixtures" / "llama"
IDS = [0, 266, 222, 286, 280, 279, 261, 276]


def prefill_arrays() -> dict[str, np.ndarray]:
    """The decoder's prompt pass under TransformerLens's own names (no pass prefix)."""
    rec = Recorder()
    NumpyLlama(LLAMA).generate(IDS, 1, rec)
    return {key.removeprefix("prefill."): array for key, array in rec.arrays.items()}


@pytest.fixture(scope="module")
def scenario():
    return load_checkpoint(LLAMA, ids=IDS)


def test_keys_name_their_pass():
    assert parse_key("decode.3.blocks.1.attn.hook_k") == Key(0, "decode.3", "blocks.1.attn.hook_k")
    assert parse_key("request.1.prefill.chunk.2.hook_embed") == Key(1, "prefill.chunk.2", "hook_embed")
    assert parse_key("blocks.0.attn.hook_pattern") == Key(0, "prefill", "blocks.0.attn.hook_pattern")
    assert Key(1, "decode.2", "hook_embed").text(requests=2) == "request.1.decode.2.hook_embed"


def test_a_dump_without_pass_prefixes_is_the_prompt_pass(scenario, tmp_path):
    dump = tmp_path / "dump.npz"
    np.savez(dump, **{name: a[None] for name, a in prefill_arrays().items()})  # with TL's batch axis
    report = compare_generation(scenario, dump)
    assert report.first_divergence is None, report_lines(report, "en")[1]
    assert not report.absent_passes  # one new token: the prompt's pass is the whole run
    assert [op.head for op in report.ops if op.key.name == "blocks.1.attn.hook_pattern"] == [0, 1, 2, 3]
    assert [op.key.name for op in report.ops].count("blocks.1.attn.cache_v") == 1
    assert not report.unused


def test_one_perturbed_cell_of_a_head_is_named(scenario, tmp_path):
    arrays = prefill_arrays()
    arrays["blocks.1.attn.hook_pattern"][2, 5, 3] += 1e-6  # head 2, query 5, key 3
    dump = tmp_path / "dump.npz"
    np.savez(dump, **arrays)
    report = compare_generation(scenario, dump)
    first = report.first_divergence
    assert (first.key.name, first.head, first.index) == ("blocks.1.attn.hook_pattern", 2, (2, 5, 3))
    assert first.place == Cause("against.pattern", {"head": 2, "query": "5 ·  on", "key": "k3 · cat"})  # their tokens
    assert [op for op in report.ops if not op.agrees] == [first]


def test_stacked_heads_missing_keys_and_shapes_that_do_not_fit(scenario, tmp_path):
    arrays = prefill_arrays()
    arrays["blocks.0.attn.hook_z"] = arrays["blocks.0.attn.hook_z"].reshape(len(IDS), -1)  # [pos, head·d_head]
    del arrays["blocks.1.hook_mlp_out"]
    arrays["blocks.0.mlp.hook_post"] = arrays["blocks.0.mlp.hook_post"][:, :5]
    arrays["my.own.tensor"] = np.zeros(3)
    dump = tmp_path / "dump.npz"
    np.savez(dump, **arrays)
    report = compare_generation(scenario, dump)
    assert "blocks.1.hook_mlp_out" in report.missing and report.unused == ("prefill.my.own.tensor",)
    first = report.first_divergence
    assert first.key.name == "blocks.0.mlp.hook_post" and first.place.code == "against.shape"
    assert all(op.agrees for op in report.ops if op.key.name == "blocks.0.attn.hook_z")
    assert any(line.startswith("not in the dump") and "blocks.1.hook_mlp_out" in line for line in report_lines(report, "en"))


def test_masked_scores_as_minus_infinity_or_the_lowest_float_agree_and_a_real_score_there_does_not(scenario, tmp_path):
    arrays = prefill_arrays()
    scores = arrays["blocks.0.attn.hook_scores"] = arrays.pop("blocks.0.attn.hook_attn_scores")
    assert (scores == np.finfo(np.float64).min).any()  # the decoder writes masks as TransformerLens does
    arrays["blocks.0.attn.hook_attn_scores"] = np.where(scores == np.finfo(np.float64).min, -np.inf, scores)
    scores = arrays["blocks.1.attn.hook_attn_scores"]
    scores[1, 2, 6] = -1e300  # query 2 may not read key 6: a masked cell, but not the lowest float
    np.savez(tmp_path / "dump.npz", **arrays)
    report = compare_generation(scenario, tmp_path / "dump.npz")
    first = report.first_divergence
    assert (first.key.name, first.index) == ("blocks.1.attn.hook_attn_scores", (1, 2, 6))
    assert first.ours == -np.inf and first.theirs == -1e300
    assert report.unused == ("prefill.blocks.0.attn.hook_scores",)


def test_transformer_lens_bridge_keys_are_listed_in_one_line(scenario, tmp_path):
    arrays = prefill_arrays()
    arrays.update({"blocks.0.attn.hook_in": np.zeros((8, 16)), "blocks.0.attn.q.hook_out": np.zeros((8, 4, 4)),
                   "hook_unembed": np.zeros((8, 300))})
    np.savez(tmp_path / "dump.npz", **arrays)
    report = compare_generation(scenario, tmp_path / "dump.npz")
    assert report.first_divergence is None and not report.unused
    assert {"prefill.blocks.0.attn.hook_in", "prefill.blocks.0.attn.q.hook_out", "prefill.hook_unembed"} <= set(report.bridge)
    assert sum(line.startswith("TransformerLens bridge keys") for line in report_lines(report, "en")) == 1


def test_passes_only_one_side_has_are_listed(tmp_path):
    rec = Recorder()
    NumpyLlama(LLAMA).generate(IDS, 3, rec)
    arrays = {k: v for k, v in rec.arrays.items() if not k.startswith("decode.2.")}
    np.savez(tmp_path / "dump.npz", **arrays)
    report = compare_generation(load_checkpoint(LLAMA, ids=IDS, max_new_tokens=3), tmp_path / "dump.npz")
    assert report.first_divergence is None and report.absent_passes == ("decode.2",)
    np.savez(tmp_path / "dump.npz", **rec.arrays)
    report = compare_generation(load_checkpoint(LLAMA, ids=IDS, max_new_tokens=2), tmp_path / "dump.npz")
    assert report.beyond == ("decode.2",) and not report.unused  # a pass the shorter run never reaches


def cli(*args):
    from typer.testing import CliRunner

    from tinyllm_tui import cli as command

    return CliRunner().invoke(command.app, [str(a) for a in args])


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_run_save_activations_then_check_against_agrees_exactly(suffix, tmp_path):
    dump = tmp_path / f"ref{suffix}"
    ids = ",".join(map(str, IDS))
    assert cli("run", LLAMA, "--ids", ids, "--max-new-tokens", 4, "--save-activations", dump).exit_code == 0
    saved = load_file(dump) if suffix == ".safetensors" else dict(np.load(dump))
    assert saved["prefill.blocks.0.attn.hook_pattern"].shape == (1, 4, len(IDS), len(IDS))
    assert saved["decode.3.blocks.0.attn.cache_k"].shape == (1, 2, len(IDS) + 3, 4)  # [1, kv_head, position, d_head]
    result = cli("check", LLAMA, "--ids", ids, "--against", dump, "--json")  # decode rounds read from the dump
    document = json.loads(result.output)
    assert result.exit_code == 0 and document["agrees"]
    assert {row["pass"] for row in document["operators"]} == {"prefill", "decode.1", "decode.2", "decode.3"}
    assert max(row["max_abs"] for row in document["operators"]) == 0.0


def test_cli_names_the_first_divergence_and_exits_1(tmp_path):
    dump = tmp_path / "ref.npz"
    assert cli("run", LLAMA, "--prompt", "The cat", "--max-new-tokens", 3, "--save-activations", dump).exit_code == 0
    arrays = dict(np.load(dump))
    arrays["decode.2.blocks.0.hook_mlp_out"][0, 0, 7] += 1e-3
    np.savez(dump, **arrays)
    differs = cli("check", LLAMA, "--prompt", "The cat", "--against", dump)
    assert differs.exit_code == 1
    assert "first divergence: decode.2 · blocks.0.hook_mlp_out · [0, 7] (row" in differs.output
    assert cli("check", LLAMA, "--prompt", "The cat", "--against", dump, "--tolerance", "2e-3").exit_code == 0


def test_unreadable_dump_is_one_error(tmp_path):
    with refused(ScenarioError, "cannot read"):
        load_dump(tmp_path / "absent.npz")
    with refused(ScenarioError, "expected a .safetensors or .npz"):
        load_dump(tmp_path / "dump.pt")
    result = cli("check", LLAMA, "--ids", "1,2", "--against", tmp_path / "absent.npz")
    assert result.exit_code == 2 and "absent.npz" in result.output and "Traceback" not in result.output


def test_chunked_prefill_and_several_requests_name_their_passes(tmp_path):
    scenarios = Path(__file__).parents[1] / "tinyllm_tui" / "scenarios"
    chunked, x01 = tmp_path / "chunked.npz", tmp_path / "x01.npz"
    assert cli("run", scenarios / "chunked.yaml", "--save-activations", chunked).exit_code == 0
    saved = dict(np.load(chunked))  # a 5-token prompt in chunks of 3: the cache after each chunk
    assert saved["prefill.chunk.0.blocks.0.attn.cache_k"].shape[2] == 3
    assert saved["prefill.chunk.1.blocks.0.attn.cache_k"].shape[2] == 5
    assert "prefill.chunk.1.sample.hook_choice" in saved  # the choice follows the last chunk
    assert cli("check", scenarios / "chunked.yaml", "--against", chunked).exit_code == 0
    assert cli("run", scenarios / "x01.yaml", "--save-activations", x01).exit_code == 0
    arrays = dict(np.load(x01))
    arrays["request.1.prefill.blocks.0.attn.hook_pattern"][0, 0, 1, 0] += 1e-3  # head 0, query 1, key 0
    np.savez(x01, **arrays)
    result = cli("check", scenarios / "x01.yaml", "--against", x01)
    assert result.exit_code == 1
    assert "first divergence: request.1.prefill · blocks.0.attn.hook_pattern · [0, 1, 0] (head 0" in result.output


def test_tolerances_follow_the_dtype_unless_asked():
    from engine.compare.against import Tolerance, dump_tolerance

    assert dump_tolerance("float16") == Tolerance(1e-3, 1e-3) and dump_tolerance("float64") == Tolerance(1e-9, 1e-9)
    assert dump_tolerance("float16", atol=1e-9) == Tolerance(1e-9, 0.0)  # --tolerance alone: |Δ| ≤ it
    assert dump_tolerance("float32", rtol=1e-3) == Tolerance(1e-5, 1e-3)  # --rtol alone keeps the dtype's atol
    assert dump_tolerance("int64") == Tolerance(0.0, 0.0)  # the chosen token must match exactly


def test_a_divergence_in_an_attention_sinks_column_is_worded_in_the_readers_language(tmp_path):
    """The sink column's label is a word of the catalogue (sink, 汇聚), not the engine's English."""
    from tinyllm_tui.tui.i18n import cause_words

    gpt_oss = Path(__file__).parent / "fixtures" / "gpt_oss"
    dump = tmp_path / "ref.npz"
    assert cli("run", gpt_oss, "--prompt", "The cat", "--max-new-tokens", 1, "--save-activations", dump).exit_code == 0
    arrays = dict(np.load(dump))
    pattern = arrays["prefill.blocks.0.attn.hook_pattern"]
    pattern[0, 0, 1, -1] += 1e-6  # head 0, query 1: the sink's share
    np.savez(dump, **arrays)
    first = compare_generation(load_checkpoint(gpt_oss, prompt="The cat", max_new_tokens=1), dump).first_divergence
    assert (first.key.name, first.head) == ("blocks.0.attn.hook_pattern", 0)
    assert cause_words(first.place, "en").endswith(", key sink")
    assert cause_words(first.place, "zh").endswith("，键 汇聚")
