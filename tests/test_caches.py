"""KV-cache layouts (engine.caches): ring buffer, paged blocks, quantized rows.

References: an independent NumPy Llama forward with a sliding-window mask written here, the
contiguous cache bit for bit, and each number format's rounding step.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from said import said
from engine import Session, load_scenario_text, make_backend
from engine.causes import Cause
from engine.caches import CacheSpec, Layout, PagedFacts, Quantize, RingFacts, ScaleAxis
from engine.compare.diff import diff_scenario, first_divergence
from engine.compare.exact import against_exact
from engine.loading import ScenarioError, load_checkpoint
from engine.spec import DecodeRule, Request
from engine.trace import OpKind

LLAMA = Path(__file__).resolve().parent / "fixtures" / "llama"
PROMPT = (5, 17, 42, 8, 99, 3, 250, 61, 7)  # nine tokens: longer than the window of 4


def llama(*prompts: tuple[int, ...], new: int = 5, cache: CacheSpec = CacheSpec(), window: int | None = None,
          max_new: tuple[int, ...] | None = None):
    base = load_checkpoint(LLAMA, ids=[0])
    model = dataclasses.replace(base.model, sliding_window=window)
    requests = tuple(Request(p, n) for p, n in zip(prompts, max_new or (new,) * len(prompts)))
    return dataclasses.replace(base, model=model, requests=requests, cache=cache,
                               decode=DecodeRule(max_new_tokens=new, stop_at_eos=False))


def logits_by_round(scenario, inject: str | None = None) -> dict[tuple[int, int], np.ndarray]:
    return {(s.request, s.round): np.asarray(s.values) for s in Session(scenario, inject=inject).steps()
            if s.name == "unembed.hook_out"}


# -- an independent sliding-window Llama ------------------------------------------------------------
def numpy_llama(weights: dict, spec, tokens: list[int], window: int, sinks: int = 0) -> np.ndarray:
    """Every position's logits of `tokens`, the whole sequence at once (no cache)."""
    t, dh, heads, kv = len(tokens), spec.d_head, spec.n_heads, spec.n_kv_heads

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + spec.norm.eps) * w

    def rope(x):  # (t, h, dh), half split
        inv = 1.0 / spec.rope_theta ** (np.arange(0, dh, 2) / dh)
        angle = np.arange(t)[:, None] * inv[None, :]
        cos, sin = np.cos(np.concatenate([angle, angle], 1))[:, None], np.sin(np.concatenate([angle, angle], 1))[:, None]
        return x * cos + np.concatenate([-x[..., dh // 2:], x[..., :dh // 2]], -1) * sin

    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    allowed = (j <= i) & ((j > i - window) | (j < sinks))
    x = weights["embed"][tokens]
    for layer in range(spec.n_layers):
        p = f"blocks.{layer}"
        h = rms(x, weights[f"{p}.ln1.w"])
        q = rope((h @ weights[f"{p}.attn.wq"]).reshape(t, heads, dh))
        k = np.repeat(rope((h @ weights[f"{p}.attn.wk"]).reshape(t, kv, dh)), heads // kv, axis=1)
        v = np.repeat((h @ weights[f"{p}.attn.wv"]).reshape(t, kv, dh), heads // kv, axis=1)
        scores = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(dh)
        scores = np.where(allowed, scores, -np.inf)
        pattern = np.exp(scores - scores.max(-1, keepdims=True))
        pattern /= pattern.sum(-1, keepdims=True)
        x = x + np.einsum("hij,jhd->ihd", pattern, v).reshape(t, -1) @ weights[f"{p}.attn.wo"]
        h = rms(x, weights[f"{p}.ln2.w"])
        gate = h @ weights[f"{p}.mlp.w_gate"]
        x = x + (gate / (1 + np.exp(-gate)) * (h @ weights[f"{p}.mlp.w_up"])) @ weights[f"{p}.mlp.w_down"]
    return rms(x, weights["ln_final.w"]) @ weights["unembed"]


@pytest.mark.parametrize("sinks", [0, 1])
def test_a_ring_buffer_matches_an_independent_sliding_window_forward_in_prefill_and_every_decode_step(sinks):
    scenario = llama(PROMPT, cache=CacheSpec(Layout.RING, window=4, sinks=sinks), window=4)
    session = Session(scenario)
    states = list(session.steps())
    generated = session.results[0].generated
    sequence = list(PROMPT) + list(generated)
    reference = numpy_llama(scenario.weights, scenario.model, sequence, window=4, sinks=sinks)
    rounds = [s for s in states if s.name == "unembed.hook_out"]
    assert len(rounds) == 5 and len(PROMPT) > 4 + sinks
    for state in rounds:
        last = len(PROMPT) - 1 + state.round  # the position whose logits choose the next token
        np.testing.assert_allclose(np.asarray(state.values)[-1], reference[last], rtol=0, atol=1e-12)
    assert reference.argmax(-1)[len(PROMPT) - 1:-1].tolist() == list(generated)
    assert first_divergence(diff_scenario(scenario)) is None  # the ring equals the masked full recompute


def test_the_ring_holds_only_the_window_and_wraps_round_robin():
    scenario = llama(PROMPT, new=3, cache=CacheSpec(Layout.RING, window=4, sinks=1), window=4)
    prefill_end = [s for s in Session(scenario).steps() if s.round == 0][-1]
    ring = prefill_end.caches[0]
    # a query reads itself and the 3 keys before it: slot 0 keeps sink 0; slots 1..3 take 1, 2, 3,
    # then 4, 5, 6 and 7, 8 overwrite them in turn
    assert ring.slots == (0, 7, 8, 6)
    assert (ring.length, ring.evicted, ring.write_position) == (4, 5, 3)  # 9 → slot 1 + (9 − 1) % 3
    assert ring.k.shape[0] == 4  # never more rows than sinks + window − 1
    assert ring.row_positions == ring.slots and ring.facts == RingFacts(window=4, sinks=1, write=3, evicted=5)


def test_a_ring_reads_its_keys_in_sequence_order_and_labels_them_by_position():
    scenario = llama(PROMPT, new=2, cache=CacheSpec(Layout.RING, window=4), window=4)
    decode = next(s for s in Session(scenario).steps() if s.round == 1 and s.name == "blocks.0.attn.hook_attn_scores")
    # the query at position 9 reads the ring's 6..8 and itself
    assert decode.output.cols == tuple(f"k{p} · {decode.moment.vocab.tokens[decode.context[p]]}" for p in range(6, 10))
    assert np.all(np.isfinite(np.asarray(decode.values)))


def test_a_paged_cache_with_block_size_2_is_bit_identical_to_the_contiguous_cache():
    contiguous = Session(llama(PROMPT, (4, 4, 4))).steps()
    paged = Session(llama(PROMPT, (4, 4, 4), cache=CacheSpec(Layout.PAGED, block_size=2))).steps()
    pairs = list(zip(contiguous, paged, strict=True))
    assert all(a.name == b.name and np.array_equal(np.asarray(a.values), np.asarray(b.values)) for a, b in pairs)
    last = pairs[-1][1].caches[1]
    # request 0 fed 9 + 4 tokens: blocks 0..6 of the pool; request 1 fed 3 + 4 in blocks 7..10
    assert last.table == (7, 8, 9, 10) and last.length == 7
    assert [last.pool.k[b].shape[0] for b in last.table] == [2, 2, 2, 1]


def test_two_requests_with_one_prompt_share_its_blocks_and_copy_the_last_one_before_writing():
    shared = PROMPT[:5]  # blocks [0 1] [2 3] [4]
    scenario = llama(shared, shared, max_new=(1, 3), cache=CacheSpec(Layout.PAGED, block_size=2))
    states = list(Session(scenario).steps())
    first = [s for s in states if s.request == 0][-1].caches[0]
    prefill = [s for s in states if s.request == 1 and s.round == 0][-1].caches[0]
    assert prefill.table == first.table == (0, 1, 2)  # the second request stored no block of its own
    assert [prefill.pool.refs[b] for b in prefill.table] == [2, 2, 2]
    decoded = [s for s in states if s.request == 1][-1].caches[0]
    assert decoded.table[:2] == (0, 1) and decoded.table[2] == 3  # the shared [4] was copied, then written
    assert decoded.pool.k[2].shape[0] == 1  # the first request's block is untouched
    assert np.array_equal(decoded.pool.k[3][:1], first.pool.k[2])
    assert prefill.facts == PagedFacts(block_size=2, table=(0, 1, 2), shared=(True, True, True), blocks=3)
    assert decoded.facts.shared == (True, True, False, False) and decoded.slot_of(5) == (3, 1)
    assert first_divergence(diff_scenario(scenario)) is None


FORMAT_STEP = {  # the largest relative rounding of one stored value (half a step at the group's max)
    (Quantize.INT8, ScaleAxis.PER_HEAD): 0.5 / 127,
    (Quantize.INT8, ScaleAxis.PER_TOKEN): 0.5 / 127,
    (Quantize.FLOAT8_E4M3, ScaleAxis.PER_HEAD): 2.0 ** -4,  # 3 mantissa bits
    (Quantize.FLOAT8_E5M2, ScaleAxis.PER_HEAD): 2.0 ** -3,  # 2 mantissa bits
}


def quantized_report(kind, scale):
    scenario = llama(PROMPT, (4, 4, 4), cache=CacheSpec(quantize=kind, scale=scale))
    return scenario, against_exact(scenario)


@pytest.mark.parametrize("kind, scale", list(FORMAT_STEP), ids=lambda x: str(x))
def test_a_quantized_cache_reports_its_logits_error_per_round_within_its_formats_step(kind, scale):
    scenario, report = quantized_report(kind, scale)
    step = FORMAT_STEP[kind, scale]
    for request in (0, 1):  # every round, until the two runs choose different tokens
        rows = [r for r in report if r.request == request]
        assert [r.round for r in rows] == list(range(len(rows)))
        assert len(rows) == 5 or not rows[-1].same_choice
    exact = logits_by_round(dataclasses.replace(scenario, cache=CacheSpec()))
    for row in report:
        # layer 0's K/V are computed from the same tokens in both runs: only the rounding differs,
        # at most half a step of the group's largest magnitude
        assert 0 < row.kv_error[0] <= step * row.kv_scale[0]
        # first order, the logits move by the relative step times their size, amplified through two
        # layers (at most 4× each)
        assert 0 < row.logits_error <= 16 * step * np.max(np.abs(exact[row.request, row.round]))
        assert len(row.pattern_error) == scenario.model.n_layers and all(e > 0 for e in row.pattern_error)
    facts = Session(scenario).steps().__next__().caches[0].facts
    assert (facts.quantize, facts.scale) == (kind, scale)
    assert first_divergence(diff_scenario(scenario)) is None  # row-local scales: cached equals full recompute


def test_a_coarser_format_makes_a_larger_error():
    worst = [max(r.logits_error for r in quantized_report(kind, ScaleAxis.PER_HEAD)[1])
             for kind in (Quantize.INT8, Quantize.FLOAT8_E4M3, Quantize.FLOAT8_E5M2)]
    assert worst == sorted(worst)  # steps 1/254 < 1/16 < 1/8


# -- each bug is caught where it acts ---------------------------------------------------------------
BUGS = [  # (bug, cache, prompt, expected first divergence), reasoned from what each bug breaks
    ("rope-off-by-one", CacheSpec(), PROMPT[:3], ("decode", 1, "blocks.0.attn.hook_rot_q", None)),
    ("gqa-modulo", CacheSpec(), PROMPT[:3], ("prefill", 0, "blocks.0.attn.hook_attn_scores", 1)),  # 1 // 2 ≠ 1 % 2
    ("transposed-k", CacheSpec(), PROMPT[:3], ("prefill", 0, "blocks.0.attn.hook_attn_scores", 0)),
    # 3 slots: decode 1 writes position 3 over position 1 (not 0); decode 2's query needs 1
    ("ring-wrong-slot", CacheSpec(Layout.RING, window=4), PROMPT[:3],
     ("decode", 2, "blocks.0.attn.hook_attn_scores", 0)),
    ("block-table-wrong", CacheSpec(Layout.PAGED, block_size=2), PROMPT[:3],
     ("prefill", 0, "blocks.0.attn.hook_attn_scores", 0)),
    ("scale-per-tensor", CacheSpec(quantize=Quantize.INT8), PROMPT[:3],
     ("prefill", 0, "blocks.0.attn.hook_attn_scores", 0)),
]


@pytest.mark.parametrize("bug, cache, prompt, expected", BUGS, ids=[b[0] for b in BUGS])
def test_each_cache_bug_is_caught_at_the_operator_where_it_acts(bug, cache, prompt, expected):
    scenario = llama(prompt, new=3, cache=cache, window=cache.window)
    diffs = diff_scenario(scenario, inject=bug)
    first = first_divergence([d for d in diffs if not d.state])  # the operators
    assert (first.phase, first.round, first.name, first.head) == expected
    state = first_divergence([d for d in diffs if d.state])  # the layer states at the ends of rounds
    assert (state.phase, state.round) <= (first.phase, first.round) and state.max_abs > state.tolerance


def test_a_ring_written_at_the_wrong_slot_differs_in_its_state_a_round_before_an_operator_reads_it():
    """The diff compares each layer's state at a round's end through the LayerState protocol: decode 1 wrote
    position 3 over position 1 instead of 0, so the ring holds 0, 2, 3 where the full recompute's holds 1–3."""
    scenario = llama(PROMPT[:3], new=3, cache=CacheSpec(Layout.RING, window=4), window=4)
    first = first_divergence(diff_scenario(scenario, inject="ring-wrong-slot"))
    assert (first.phase, first.round, first.name, first.state) == ("decode", 1, "blocks.0.attn.cache_k", True)
    assert first.max_abs == np.inf and first.mismatch == Cause("diff.positions", {"positions": "0, 2, 3", "theirs": "1–3"})
    assert first_divergence(diff_scenario(scenario)) is None


# -- scenario keys ----------------------------------------------------------------------------------
X01_HEAD = Path(__file__).resolve().parents[1] / "scenarios" / "x01.yaml"


@pytest.mark.parametrize("cache, expected", [
    ("{layout: ring}", "cache: a ring cache needs a window: the model has no sliding window, give cache.window"),
    ("{layout: paged, window: 2}", "cache.window: only a ring cache takes window (this one is paged)"),
    ("{quantize: int4}", "cache.quantize: expected one of none, int8, float8_e4m3, float8_e5m2, got 'int4'"),
    ("{layout: ring, window: 2, quantize: int8}", "cache.quantize: a quantized cache is contiguous; remove layout: ring"),
    ("{quantize: float8_e4m3, scale: per_token}", "cache.scale: only an int8 cache has a choice of scale"),
    ("{layout: paged, block_size: 0}", "cache.block_size: "),
    ("{layot: ring}", "cache"),
])
def test_a_bad_cache_key_names_its_line_and_path(cache, expected):
    text = X01_HEAD.read_text() + f"\ncache: {cache}\n"
    with pytest.raises(ScenarioError) as caught:
        load_scenario_text(text, "x.yaml")
    line = text.count("\n")  # the cache line is the last one
    assert said(caught.value).startswith(f"x.yaml:{line}: {expected}")


def test_scenario_keys_choose_the_layout_and_give_a_windowless_model_the_rings_window():
    text = X01_HEAD.read_text() + "\ncache: {layout: ring, window: 2, sinks: 1}\nbatch: true\n"
    scenario = load_scenario_text(text, "x.yaml")
    assert scenario.cache == CacheSpec(Layout.RING, window=2, sinks=1) and scenario.batch
    assert scenario.model.sliding_window == 2
    assert first_divergence(diff_scenario(scenario, make_backend("numpy"))) is None


# -- transformers' sliding-window models through a ring buffer -------------------------------------
@pytest.mark.parametrize("name", ["mistral", "gemma2"])
def test_a_ring_buffer_matches_transformers_sliding_window_forward_in_prefill_and_every_decode_step(name, tmp_path):
    """tools/make_fixtures.py (H4) dumped transformers' float64 prefill and greedy-step logits of a
    21/20-token prompt through a window of 4; the ring keeps 3 rows per sliding layer."""
    folder = LLAMA.parent / name
    ref = dict(np.load(folder / "reference.npz"))
    ids = ", ".join(str(int(t)) for t in ref["ids"])
    text = (f"checkpoint: {folder}\nrequests:\n  - ids: [{ids}]\n    max_new_tokens: {len(ref['greedy_ids'])}\n"
            "decode: {max_new_tokens: 5, stop_at_eos: false}\ncache: {layout: ring}\n")
    scenario = load_scenario_text(text, str(tmp_path / "ring.yaml"))
    assert scenario.model.sliding_window == 4 and len(ref["ids"]) > 4
    session = Session(scenario)
    states = list(session.steps())
    logits = {s.round: np.asarray(s.values) for s in states if s.kind == OpKind.LOGITS}  # Gemma 2: after its cap
    rounds = [logits[r] for r in sorted(logits)]
    np.testing.assert_allclose(rounds[0], ref["logits"], rtol=0, atol=1e-9)  # every prefill position
    np.testing.assert_allclose([r[-1] for r in rounds], ref["step_logits"], rtol=0, atol=1e-9)
    assert list(session.results[0].generated) == list(ref["greedy_ids"])
    final = states[-1].caches
    windowed = [layer for layer in range(scenario.model.n_layers) if scenario.model.window(layer)]
    assert windowed and all(final[layer].length == 3 for layer in windowed)
    assert all(final[layer].length == len(ref["ids"]) + 4 for layer in set(range(scenario.model.n_layers)) - set(windowed))


def test_diff_of_a_quantized_cache_prints_its_error_against_the_exact_cache_per_round(tmp_path):
    from typer.testing import CliRunner

    from tinyllm_tui.cli import app

    path = tmp_path / "int8.yaml"
    path.write_text(f"checkpoint: {LLAMA}\nrequests:\n  - ids: [5, 17, 42]\n    max_new_tokens: 3\n"
                    "decode: {max_new_tokens: 3, stop_at_eos: false}\ncache: {quantize: int8}\n")
    result = CliRunner().invoke(app, ["diff", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "int8 cache against the exact cache (max |Δ|):"
    assert [line.split(":")[0] for line in lines[1:4]] == [f"  request 0 round {r}" for r in range(3)]
    assert all("logits " in line and "pattern per layer " in line for line in lines[1:4])
    assert lines[-1].startswith("✓ cached equals full recompute")


# -- every layout on random models ------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from random_models import scenarios  # noqa: E402

LAYOUTS = st.one_of(
    st.builds(lambda w, s: CacheSpec(Layout.RING, window=w, sinks=s), st.integers(1, 4), st.integers(0, 2)),
    st.builds(lambda b: CacheSpec(Layout.PAGED, block_size=b), st.integers(1, 3)),
    st.builds(lambda q, s: CacheSpec(quantize=q, scale=s), st.sampled_from(list(Quantize)[1:]), st.sampled_from(list(ScaleAxis)[:2])),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios(), cache=LAYOUTS)
def test_every_layout_equals_its_full_recompute_and_an_exact_layout_equals_the_contiguous_cache(scenario, cache):
    model = dataclasses.replace(scenario.model, sliding_window=cache.window)
    contiguous = dataclasses.replace(scenario, model=model, cache=CacheSpec(sinks=cache.sinks))  # sinks: a mask
    laid_out = dataclasses.replace(contiguous, cache=cache)
    assert first_divergence(diff_scenario(laid_out)) is None
    if cache.quantize is Quantize.NONE:  # ring and paged store the exact rows: the same numbers
        exact = {(s.step, s.name): np.asarray(s.values) for s in Session(contiguous).steps()}
        for state in Session(laid_out).steps():
            theirs = exact[state.step, state.name]
            if cache.layout is Layout.PAGED:
                assert np.array_equal(np.asarray(state.values), theirs, equal_nan=True)
            elif state.kind not in (OpKind.SCORES, OpKind.SOFTMAX):  # a ring's key columns are its window only
                np.testing.assert_allclose(np.asarray(state.values), theirs, rtol=0, atol=1e-12)


@pytest.mark.parametrize("cache", [CacheSpec(Layout.RING, window=4, sinks=1), CacheSpec(Layout.PAGED, block_size=2),
                                   CacheSpec(quantize=Quantize.INT8)], ids=["ring", "paged", "int8"])
def test_a_history_resumes_every_layout_from_its_kept_round_starts(cache):
    """A kept round start holds a ring, a block table or int8 codes whole: resuming is bit for bit."""
    from tinyllm_tui.debugger.history import History

    scenario = llama(PROMPT, (4, 4, 4), new=3, cache=cache, window=cache.window)
    expected = list(Session(scenario).steps())
    history = History(Session(scenario).steps, limit=2)
    history.goto(len(expected) - 1)
    for step in reversed(range(len(expected))):  # most steps back are past the window: resumed
        assert history.goto(step)
        state = history.current
        assert (state.name, state.request, state.round) == (expected[step].name, expected[step].request,
                                                            expected[step].round)
        assert np.array_equal(np.asarray(state.values), np.asarray(expected[step].values), equal_nan=True)
        assert [type(c) for c in state.caches] == [type(c) for c in expected[step].caches]
        assert [c.row_positions for c in state.caches] == [c.row_positions for c in expected[step].caches]


# -- what the cache view shows ---------------------------------------------------------------------
def test_the_cache_view_labels_a_rings_slots_and_a_paged_rows_block_and_says_what_the_layout_holds():
    from tinyllm_tui.debugger.frame import cache_frame
    from tinyllm_tui.presentation.cache_layout import row_words
    from tinyllm_tui.tui.widgets.cache import layout_line

    def view(state, layer=0):
        frame = cache_frame(state, state.caches[layer].fingerprint, layer, 0, frozenset(), row_words("en"))
        return frame, list(frame.views[0].rows[: len(frame.views[0].rows)]), layout_line(frame, "en")

    ring_end = [s for s in Session(llama(PROMPT, new=3, cache=CacheSpec(Layout.RING, window=4, sinks=1),
                                         window=4)).steps() if s.round == 0][-1]
    tokens = [t.text for t in ring_end.timeline]  # slots (0, 7, 8, 6) after nine tokens, as test_the_ring_holds… reasons
    frame, rows, line = view(ring_end)
    assert line == "ring w4+1 sink · next s3 · evicted 1–5"  # 0 is the sink; 6, 7, 8 are held
    assert rows == [f"s0  +0 · {tokens[0]}", f"s1  +7 · {tokens[7]}", f"s2  +8 · {tokens[8]}", f"s3↺ +6 · {tokens[6]}"]
    assert (frame.length, frame.appended, frame.evicted) == (4, 4, (1, 2, 3, 4, 5))
    assert frame.views[0].new_from is None and not frame.views[0].newest_first  # the labels carry the marks: slots are not positions
    shared = PROMPT[:5]
    states = list(Session(llama(shared, shared, max_new=(1, 3), cache=CacheSpec(Layout.PAGED, block_size=2))).steps())
    frame, rows, line = view([s for s in states if s.request == 1][-1])
    assert line == "paged ×2 · table [0* 1* 3 4] (*shared) · pool 5"
    assert [label.split(" ")[0] for label in rows] == ["b0.0", "b0.1", "b1.0", "b1.1", "b3.0", "b3.1", "b4.0"]
    assert rows[-1].startswith("b4.0 +6 · ") and frame.appended == 1  # the row this round added
    quantized = [s for s in Session(llama(PROMPT, cache=CacheSpec(quantize=Quantize.INT8))).steps()
                 if s.round == 0][-1]
    # nine rows of K and V, 2 kv heads × 4: one byte a code, one float64 scale per head and row
    codes, scales, exact = 9 * 8 * 2, 9 * 2 * 8 * 2, 9 * 8 * 8 * 2
    assert view(quantized)[2] == f"int8 per head: {codes + scales} B stored (exact {exact / 1024:.1f} KiB)"
    contiguous = [s for s in Session(llama(PROMPT)).steps() if s.round == 0][-1]
    frame, rows, line = view(contiguous)
    assert line == "" and rows[0] == f"0 · {tokens[0]}" and frame.views[0].new_from == 0


def test_a_cache_counts_its_bytes_in_any_namespace():
    """array_api_strict's arrays have no nbytes: a Debugger's history still weighs their caches."""
    import array_api_strict as xp
    from typer.testing import CliRunner

    from engine.caches import LayerCache
    from tinyllm_tui.cli import app

    assert LayerCache(xp.zeros((3, 4), dtype=xp.float64), xp.zeros((3, 4), dtype=xp.float32), "w").nbytes == 96 + 48
    result = CliRunner().invoke(app, ["diff", str(X01_HEAD), "--backend", "array_api_strict"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("cache", [CacheSpec(), CacheSpec(Layout.PAGED, block_size=2)], ids=["contiguous", "paged"])
def test_a_request_after_a_kept_stale_edit_starts_from_a_cache_of_the_current_weights(cache):
    """Request 0 ran with the old weights (kept on purpose); request 1's fresh cache is of the new ones."""
    from engine.loading.edits import apply_edit, parse_set, with_weights
    from engine.session import StaleFrom

    base = dataclasses.replace(load_scenario_text(X01_HEAD.read_text(), "x01.yaml"), cache=cache)
    edited = with_weights(base, apply_edit(base.weights, parse_set("blocks.0.attn.wk[0,1]=0.5", base.weights)))
    states = list(Session(edited, stale=StaleFrom(base.weights, request=1, round=0)).steps())
    assert {c.fingerprint for s in states if s.request == 0 for c in s.caches} == {base.fingerprint}
    assert {c.fingerprint for s in states if s.request == 1 for c in s.caches} == {edited.fingerprint}


@pytest.mark.parametrize("fixture", ["lfm2", "gemma4"])
def test_a_quantized_cache_on_layers_of_other_kinds_reports_what_each_layer_has(fixture):
    """A short conv has no pattern and a window kept exact; a KV-shared layer keeps no K/V of its own: the report
    says so (None) instead of failing (it raised on both: every layer was taken for attention with K and V)."""
    scenario = load_checkpoint(ROOT / "tests" / "fixtures" / fixture, ids=[1, 2, 3], max_new_tokens=2)
    scenario = dataclasses.replace(scenario, cache=CacheSpec(quantize=Quantize.INT8))
    blocks = scenario.model.blocks
    for row in against_exact(scenario):
        for layer, block in enumerate(blocks):
            assert (row.pattern_error[layer] is None) == (block.mixer != "attention")
            assert (row.kv_error[layer] is None) == (block.kv_source is not None)
        assert row.logits_error > 0
    if fixture == "lfm2":  # layer 0's conv reads the embeddings only: the same in both runs
        assert blocks[0].mixer == "short_conv" and row.kv_error[0] == 0


def test_past_the_blocks_the_cache_panel_follows_the_last_layer_of_a_full_ring():
    """Past the last block (the final norm) the panel shows the last layer, which this round fed: its ring holds
    only the window (1 row of the 7 tokens fed), so the rows it holds say nothing of what it was fed."""
    from tinyllm_tui.debugger import Debugger

    scenario = llama((1, 2, 3, 4, 5), new=3, window=2, cache=CacheSpec(layout=Layout.RING))
    debugger = Debugger(scenario)
    states = list(debugger.history.states_from(0))
    first = next(s for s in states if s.round == 2 and s.layer == 0)
    final = next(s for s in states if s.round == 2 and s.layer is None and s.name.startswith("ln_final"))
    assert final.caches[-1].length == 1 < final.chunk_past  # a window of 2 holds the 1 token before the next
    debugger.goto_step(first.step)
    assert debugger.frame.cache.layer == 0
    debugger.goto_step(final.step)
    assert debugger.frame.cache.layer == scenario.model.n_layers - 1
