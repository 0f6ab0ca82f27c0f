"""check --against over a whole generation: prompt + 4 decode rounds of an independent NumPy decoder
(tests/numpy_llama.py, recorded through the public Recorder) against the engine, on the tiny GQA
Llama fixture (4 query heads, 2 kv heads). Each deliberate bug must be the first divergence at exactly
its pass, operator and cell."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from engine.compare.against import compare_generation
from engine.loading.checkpoint import load_checkpoint
from numpy_llama import NumpyLlama
from tinyllm_tui import Recorder
from tinyllm_tui.presentation.against_words import report_lines
from engine.causes import Cause

LLAMA = Path(__file__).parent / "fixtures" / "llama"
IDS = [0, 266, 222, 286, 280, 279]  # 6 prompt positions: 0 … 5
NEW_TOKENS = 5  # prefill + decode rounds 1 … 4


@pytest.fixture(scope="module")
def scenario():
    return load_checkpoint(LLAMA, ids=IDS, max_new_tokens=NEW_TOKENS)


def dump_of(tmp_path: Path, faults: tuple[str, ...] = (), suffix: str = ".safetensors") -> tuple[Path, list[int]]:
    rec = Recorder()
    chosen = NumpyLlama(LLAMA, faults).generate(IDS, NEW_TOKENS, rec)
    path = tmp_path / f"dump{suffix}"
    rec.save(path)
    return path, chosen


def first(scenario, path, **tolerance):
    report = compare_generation(scenario, path, **tolerance)
    op = report.first_divergence
    return report, (None if op is None else (op.key.pass_, op.key.name, op.index))


def test_a_clean_dump_of_prompt_and_four_decode_rounds_agrees_everywhere(scenario, tmp_path):
    path, chosen = dump_of(tmp_path)
    report, divergence = first(scenario, path)
    assert divergence is None, report_lines(report, "en")[1]
    assert {op.key.pass_ for op in report.ops} == {"prefill", "decode.1", "decode.2", "decode.3", "decode.4"}
    names = {op.key.name for op in report.ops}
    assert {"blocks.1.attn.cache_k", "blocks.0.attn.cache_v", "blocks.1.attn.hook_rot_k"} <= names
    assert max(op.max_abs for op in report.ops) < 1e-12
    assert "blocks.0.attn.hook_concat" in report.missing  # the decoder has no concat: listed, not fatal
    assert not report.absent_passes
    # the greedy tokens the engine chose are the decoder's (its last choice is made in round 4)
    choices = [op for op in report.ops if op.key.name == "unembed.hook_out"]
    assert len(choices) == NEW_TOKENS
    assert chosen == [int(np.argmax(load_file(path)[f"{p}.unembed.hook_out"][-1]))
                      for p in ["prefill", "decode.1", "decode.2", "decode.3", "decode.4"]]


def test_one_cell_of_decode_3_layer_1_hook_k(scenario, tmp_path):
    path, chosen = dump_of(tmp_path, ("k-cell",))
    report, divergence = first(scenario, path)
    assert divergence == ("decode.3", "blocks.1.attn.hook_k", (0, 1, 2))  # [pos, kv head, d_head]
    op = report.first_divergence
    # round 3 feeds position 8, the token the decoder chose in round 2
    assert op.place == Cause("against.head", {"position": f"{len(IDS) + 2} · {scenario.vocab.tokens[chosen[2]]}",
                                              "head": 1, "d_head": 2})
    assert abs(abs(op.ours - op.theirs) - 1e-3) < 1e-12
    assert report_lines(report, "en")[1].startswith("first divergence: decode.3 · blocks.1.attn.hook_k · [0, 1, 2] (position")


def test_a_cache_row_written_one_position_late_from_round_2(scenario, tmp_path):
    path, chosen = dump_of(tmp_path, ("late-cache",))
    report, divergence = first(scenario, path)
    late = len(IDS) + 1  # round 2 feeds position 7; the decoder left that row empty and wrote position 8
    assert divergence == ("decode.2", "blocks.0.attn.cache_k", (0, late, 0))
    # the cache names its cell: kv head 0's first column at position 7, the token chosen in round 1
    assert report.first_divergence.place == Cause("against.kv", {"kv_head": 0, "position":
                                                                 f"{late} · {scenario.vocab.tokens[chosen[1]]}", "d_head": 0})


def test_rope_with_position_minus_one_in_decode_rounds_only(scenario, tmp_path):
    path, _ = dump_of(tmp_path, ("rope-minus-1",))
    report, divergence = first(scenario, path)
    assert divergence == ("decode.1", "blocks.0.attn.hook_rot_q", (0, 0, 0))
    assert all(op.agrees for op in report.ops if op.key.pass_ == "prefill")


def test_query_head_3_reading_the_wrong_kv_head(scenario, tmp_path):
    path, _ = dump_of(tmp_path, ("kv-head",))
    report, divergence = first(scenario, path)
    assert divergence == ("prefill", "blocks.0.attn.hook_attn_scores", (3, 0, 0))  # [head, query, key]
    assert report.first_divergence.head == 3
    heads = [op.head for op in report.ops if op.key == report.first_divergence.key and not op.agrees]
    assert heads == [3]


def test_a_float16_dump_passes_its_default_tolerance_and_fails_1e_9(scenario, tmp_path):
    path, _ = dump_of(tmp_path)
    with np.errstate(over="ignore"):  # masked scores (the most negative float64) become −∞
        save_file({k: v.astype(np.float16) for k, v in load_file(path).items()}, tmp_path / "half.safetensors")
    report, divergence = first(scenario, tmp_path / "half.safetensors")
    assert divergence is None, report_lines(report, "en")[1]
    assert max(op.max_abs for op in report.ops) > 1e-5  # the float16 rounding is there, and allowed
    _, divergence = first(scenario, tmp_path / "half.safetensors", atol=1e-9)
    assert divergence is not None and divergence[0] == "prefill"


def test_a_bfloat16_dump_is_read_and_held_to_its_own_tolerance(scenario, tmp_path):
    path, _ = dump_of(tmp_path)
    # bfloat16 = the top 16 bits of a float32 (truncated here): written by hand as safetensors BF16
    with np.errstate(over="ignore"):
        bits = {k: (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16) for k, v in load_file(path).items()}
    from safetensors import TensorSpec, serialize_file

    serialize_file({k: TensorSpec(dtype="bfloat16", shape=b.shape, data_ptr=b.ctypes.data, data_len=b.nbytes)
                    for k, b in bits.items()}, str(tmp_path / "bf16.safetensors"))
    report = compare_generation(scenario, tmp_path / "bf16.safetensors")
    assert {op.dtype for op in report.ops} == {"bfloat16"}
    assert report.first_divergence is None, report_lines(report, "en")[1]
    assert compare_generation(scenario, tmp_path / "bf16.safetensors", atol=1e-3).first_divergence is not None



def test_round_verdicts_the_step_to_jump_to_and_the_cache_rows_that_differ(scenario, tmp_path):
    """What the debugger shows: ✓/✗ per round, where `g diverged` goes, which cache rows to mark."""
    from engine.compare.against import Against
    from engine.compare.dump import load_dump
    from engine.session import Session

    path, _ = dump_of(tmp_path, ("late-cache",))
    report = compare_generation(scenario, path)
    assert report.round_verdicts() == {(0, 0): True, (0, 1): True, (0, 2): False, (0, 3): False, (0, 4): False}
    states = list(Session(scenario).steps())
    first = report.first_divergence
    at = states[first.step]  # the cache is compared where its layer's attention first reads it
    assert (at.round, at.layer, at.name, at.head) == (2, 0, "blocks.0.attn.hook_attn_scores", 0)
    assert first.cell == (len(IDS) + 1, 0)  # [position, kv_head·d_head] in the engine's cache rows
    against = Against(load_dump(path), scenario)
    last = {state.round: state for state in states}  # each round's last state: every layer appended
    assert against.differing_cache_rows(last[1], 0) == frozenset()
    assert against.differing_cache_rows(last[2], 0) == {len(IDS) + 1}
    assert against.differing_cache_rows(last[3], 1) == {len(IDS) + 1, len(IDS) + 2}
    before_append = next(s for s in states if s.round == 2 and s.name == "blocks.1.attn.hook_q")
    assert against.differing_cache_rows(before_append, 1) == frozenset()  # rows 0 … 6 still agree


def test_the_debugger_finds_a_decode_round_fault_with_g_diverged(scenario, tmp_path):
    """Headless: `g diverged` lands on the cache row written late in round 2; rounds get ✓/✗."""
    from engine.compare.dump import load_dump
    from tinyllm_tui.debugger.debugger import Debugger

    path, _ = dump_of(tmp_path, ("late-cache",))
    debugger = Debugger(scenario, against=(load_dump(path), None, None))
    assert debugger.round_verdicts() == {}  # not compared yet
    debugger.search("diverged")
    state = debugger.view.state
    assert (state.round, state.name, state.head) == (2, "blocks.0.attn.hook_attn_scores", 0)
    assert debugger.round_verdicts() == {(0, 0): True, (0, 1): True, (0, 2): False, (0, 3): False, (0, 4): False}
    assert debugger.differing_cache_rows(state, 0) == {len(IDS) + 1}
    assert debugger.differing_cache_rows(state, 1) == frozenset()  # layer 1 has not appended in round 2 yet


def test_the_debugger_without_a_dump_refuses_g_diverged_and_a_clean_dump_agrees(scenario, tmp_path):
    from engine.compare.dump import load_dump
    from tinyllm_tui.debugger.debugger import Debugger
    from tinyllm_tui.debugger.results import Diverged, Reason, Refused

    assert Debugger(scenario).search("diverged") == Refused(Reason.NO_DUMP)
    path, _ = dump_of(tmp_path)
    debugger = Debugger(scenario, against=(load_dump(path), None, None))
    assert debugger.search("diverged") == Diverged(None)  # your activations agree everywhere
    assert set(debugger.round_verdicts().values()) == {True} and debugger.view.state.step == 0
