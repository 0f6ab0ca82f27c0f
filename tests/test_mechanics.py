"""Cache mechanics from the 003 walkthrough: EOS, several layers, chunked prefill, sampling, A.5."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from conftest import ROOT, SCENARIOS, SEEDS, round_summaries

from engine import Session, Status, load_scenario, make_backend, to_host
from engine import ops
from engine.decoding import _filter
from engine.spec import DecodeRule
from extract_a5 import extract as extract_a5

A5_DATA = ROOT / "tests" / "data" / "a5_hand_example.json"
SEED_003 = SEEDS / "003_b083148e430164ac.txt"


def choices(states):
    return [s for s in states if s.kind == "choice"]


def test_a5_data_file_is_what_the_seed_prints():
    if not SEED_003.exists():
        pytest.skip("the seed text is not beside this checkout")
    assert extract_a5(SEED_003.read_text(encoding="utf-8")) == json.loads(A5_DATA.read_text())


def test_a5_hand_example_through_the_engine_attention(backend):
    """q=[1,1] over three keys: a = [0.24825508, 0.24825508, 0.50348984], output [3.00697968, 4.51046952]."""
    data = json.loads(A5_DATA.read_text())
    xp = backend.xp
    q, k, v = (backend.asarray(data[name]) for name in ("q", "k", "v"))
    pattern = ops.softmax(xp, ops.attention_scores(xp, q[None, :], k, None))
    output = pattern @ v
    assert np.allclose(to_host(pattern)[0], data["weights"], atol=5e-9)  # printed to 8 decimals
    assert np.allclose(to_host(output)[0], data["output"], atol=5e-8)


def test_eos7_stops_on_eos_with_the_seed_choices_and_cache_lengths(backend):
    states = list(Session(load_scenario(SCENARIOS / "eos7.yaml"), backend).steps())
    rounds = round_summaries(states, 0)
    assert [r.chosen for r in rounds] == ["学习", "！", "EOS"]  # ids 3, 5, 6
    assert [int(to_host(s.values)[0, 0]) for s in choices(states)] == [3, 5, 6]
    assert [r.cache_length for r in rounds] == [2, 3, 4]
    assert rounds[-1].stop == "eos" and choices(states)[-1].stop == "eos"
    timeline = states[-1].timeline
    assert [t.status for t in timeline] == [Status.PROCESSED] * 4 + [Status.SELECTED]  # EOS is never fed


@pytest.mark.parametrize("name", ["decoder2", "chunked"])
def test_multi_layer_scenarios_run_prefill_and_two_decode_rounds(name):
    session = Session(load_scenario(SCENARIOS / f"{name}.yaml"))
    states = list(session.steps())
    assert {s.round for s in states} == {0, 1, 2}
    assert {s.layer for s in states if s.layer is not None} == {0, 1}
    last = states[-1]
    assert len(last.caches) == 2 and all(c.length == last.caches[0].length for c in last.caches)
    prompt = len(session.scenario.requests[0].tokens)
    assert last.caches[0].length == prompt + 2  # each decode round fed one token; the last choice is not fed
    assert session.results[0].stop == "max_new_tokens" and len(session.results[0].generated) == 3


def test_chunked_prefill_masks_by_absolute_position():
    """Chunk 2 (positions 3, 4) over 5 keys: key ≤ past + query index, never tril(ones(2, 5))."""
    states = list(Session(load_scenario(SCENARIOS / "chunked.yaml")).steps())
    scores = [s for s in states if s.name == "blocks.0.attn.hook_attn_scores" and s.round == 0]
    assert [s.chunk for s in scores] == [0, 1]
    second = scores[1]
    assert second.positions == (3, 4) and second.past == 0  # the round began with an empty cache
    assert [r.split(" · ")[0] for r in second.output.rows] == ["3", "4"]
    assert len(second.output.cols) == 5 and second.output.cols[0].startswith("k0")
    visible = np.isfinite(to_host(second.values))
    assert visible.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    pending = [t.status for t in scores[0].timeline]
    assert pending == [Status.CURRENT] * 3 + [Status.PENDING] * 2  # the second chunk waits


def test_chunked_prefill_marks_only_the_chunks_own_rows_as_new():
    """chunked.yaml: chunk 0 appends positions 0-2, chunk 1 appends 3-4 onto them (5 rows, 2 new)."""
    states = list(Session(load_scenario(SCENARIOS / "chunked.yaml")).steps())
    for chunk, fed in ((0, (0, 1, 2)), (1, (3, 4))):
        scores = next(s for s in states if s.name == "blocks.0.attn.hook_attn_scores" and s.chunk == chunk)
        cache = scores.caches[0]  # layer 0 has appended this chunk's K/V before its scores
        assert cache.length == fed[-1] + 1 and scores.positions == fed
        assert tuple(range(scores.chunk_past, cache.length)) == fed
    decode = next(s for s in states if s.name == "blocks.0.attn.hook_attn_scores" and s.round == 1)
    assert (decode.chunk_past, decode.past, decode.caches[0].length) == (5, 5, 6)  # one fed token, one new row


def test_sampling_is_reproducible_and_backend_independent():
    scenario = load_scenario(SCENARIOS / "decoder2.yaml")
    rule = dataclasses.replace(scenario.decode, rule="sample", temperature=1.3, seed=11, top_k=5)
    sampled = dataclasses.replace(scenario, decode=rule)
    runs = [Session(sampled, make_backend(name)) for name in ("numpy", "array_api_strict", "numpy")]
    for run in runs:
        list(run.steps())
    assert runs[0].results == runs[1].results == runs[2].results


def test_filter_applies_forbid_temperature_top_k_and_top_p():
    """Checked against a direct NumPy computation of each rule."""
    backend = make_backend()
    logits = np.array([[2.0, 1.0, 0.5, 0.1, -1.0]])
    rule = DecodeRule(rule="sample", forbid=(0,), temperature=2.0, top_k=3, top_p=None)
    got = to_host(_filter(backend.xp, backend.asarray(logits), rule))[0]
    expected = logits[0] / 2.0
    expected[0] = -math.inf  # forbidden
    expected[expected < np.sort(expected)[-3]] = -math.inf  # top-3 of what is left
    assert got.tolist() == expected.tolist()
    rule = DecodeRule(rule="sample", top_p=0.6)
    got = to_host(_filter(backend.xp, backend.asarray(logits), rule))[0]
    probs = np.exp(logits[0]) / np.exp(logits[0]).sum()  # 0.571, 0.210, …: the top two reach 0.6
    assert np.isfinite(got).tolist() == [True, True, False, False, False]
    assert probs[0] < 0.6 <= probs[0] + probs[1]


def test_stop_at_max_new_tokens_without_eos():
    session = Session(load_scenario(SCENARIOS / "decoder2.yaml"))
    states = list(session.steps())
    assert [s.stop for s in choices(states)] == [None, None, "max_new_tokens"]


def test_position_encodings_and_gelu_follow_their_formulas(backend):
    """Against direct computations with the math module."""
    xp = backend.xp
    positions = xp.asarray([0, 1, 5])
    sinusoidal = to_host(ops.sinusoidal_positions(xp, positions, 6, backend.dtype))
    for row, p in enumerate((0, 1, 5)):
        for j in range(6):
            angle = p / 10000 ** ((j - j % 2) / 6)
            assert sinusoidal[row, j] == pytest.approx(math.sin(angle) if j % 2 == 0 else math.cos(angle), abs=1e-15)
    seed_sin = to_host(ops.seed_sin_positions(xp, positions, 4, backend.dtype))
    assert seed_sin[2, 3] == pytest.approx(0.1 * math.sin(6 / 4), abs=1e-15)
    x = backend.asarray([-2.0, -0.5, 0.0, 1.5])
    exact = to_host(ops.gelu_from_erf(x, backend.erf(x / math.sqrt(2))))
    assert exact.tolist() == pytest.approx([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in (-2, -0.5, 0, 1.5)])
    tanh_form = to_host(ops.gelu_tanh(xp, x))
    assert np.max(np.abs(tanh_form - exact)) < 5e-4  # the two forms differ by at most ~5e-4
