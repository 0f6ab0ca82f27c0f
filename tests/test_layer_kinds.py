"""Layer kinds: the scenario file's `layers:`, RoPE, kv_heads and windows, the GQA toy against an independent
NumPy Llama, and a kind written in tests/ (toy_kind.py) that runs, shows, dumps, compares and travels in time
once registered, with nothing else touched."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import toy_kind
from conftest import ROOT, SCENARIOS
from said import refused
from typer.testing import CliRunner

from engine import Session, load_scenario, load_scenario_text, to_host
from engine.loading.document import ScenarioError
from engine import layers, ops
from engine.compare.diff import diff_runs, diff_scenario
from engine.export import ActivationDump
from engine.layout import Passes
from engine.session import StaleFrom
from tinyllm_tui.cli import app
from tinyllm_tui.debugger.debugger import Debugger

GQA_TOY = SCENARIOS / "gqa_toy.yaml"
GQA_TEXT = GQA_TOY.read_text(encoding="utf-8")


# -- the GQA toy -------------------------------------------------------------------------------------------
def numpy_llama_logits(w: dict, tokens: list[int], heads=4, kv_heads=2, windows=(4, None), theta=1e4, eps=1e-6):
    """Every position's logits, written from the Llama equations (not the engine's code): pre-RMSNorm with
    gains, half-split RoPE, query head h reading kv head h // (heads / kv_heads), a window per layer,
    SwiGLU, a final norm and the tied head."""
    x = w["embed"][tokens]
    t, d = x.shape
    dh = d // heads
    pos = np.arange(t)
    angle = pos[:, None] * theta ** (-np.arange(0, dh, 2) / dh)[None, :]
    cos, sin = np.cos(np.concatenate([angle, angle], 1)), np.sin(np.concatenate([angle, angle], 1))

    def rms(v, g):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * g

    def rope(v):  # (t, n, dh)
        turned = np.concatenate([-v[..., dh // 2:], v[..., :dh // 2]], -1)
        return v * cos[:, None, :] + turned * sin[:, None, :]

    for layer, window in enumerate(windows):
        p = f"blocks.{layer}."
        h = rms(x, w[p + "ln1.w"])
        q = rope((h @ w[p + "attn.wq"]).reshape(t, heads, dh))
        k = rope((h @ w[p + "attn.wk"]).reshape(t, kv_heads, dh))
        v = (h @ w[p + "attn.wv"]).reshape(t, kv_heads, dh)
        visible = (pos[None, :] <= pos[:, None]) & ((pos[None, :] > pos[:, None] - window) if window else True)
        z = []
        for head in range(heads):
            kv = head // (heads // kv_heads)
            s = np.where(visible, q[:, head] @ k[:, kv].T / np.sqrt(dh), -np.inf)
            e = np.exp(s - s.max(-1, keepdims=True))
            z.append(e / e.sum(-1, keepdims=True) @ v[:, kv])
        x = x + np.concatenate(z, 1) @ w[p + "attn.wo"]
        h = rms(x, w[p + "ln2.w"])
        gate = h @ w[p + "mlp.w_gate"]
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w[p + "mlp.w_up"])) @ w[p + "mlp.w_down"]
    return rms(x, w["ln_final.w"]) @ w["embed"].T


def test_the_gqa_toy_computes_what_an_independent_numpy_llama_computes():
    scenario = load_scenario(GQA_TOY)
    session = Session(scenario)
    states = list(session.steps())
    prompt = list(scenario.requests[0].tokens)
    sequence = prompt + list(session.results[0].generated)
    logits = [to_host(s.values) for s in states if s.name == "unembed.hook_out"]
    expected = numpy_llama_logits(scenario.weights, sequence[:-1])
    assert len(prompt) > 4  # longer than layer 0's window: the window changes what is read
    np.testing.assert_allclose(logits[0], expected[:len(prompt)], rtol=0, atol=1e-12)
    for round_, row in enumerate(logits[1:], start=len(prompt)):
        np.testing.assert_allclose(row[-1], expected[round_], rtol=0, atol=1e-12)


def test_the_gqa_toy_cached_equals_full_and_the_gqa_modulo_bug_is_caught():
    scenario = load_scenario(GQA_TOY)
    assert max(d.max_abs for d in diff_scenario(scenario)) <= 1e-12
    wrong = {(d.layer, d.head): d.max_abs for d in diff_scenario(scenario, inject="gqa-modulo")
             if d.name == "blocks.0.attn.hook_attn_scores" and d.round == 0}
    assert wrong[(0, 0)] == wrong[(0, 3)] == 0.0  # h // 2 and h % 2 agree for heads 0 and 3
    assert wrong[(0, 1)] > 1e-3 and wrong[(0, 2)] > 1e-3
    result = CliRunner().invoke(app, ["diff", str(GQA_TOY), "--inject", "gqa-modulo"])
    assert result.exit_code == 1 and "✗ request 0 prefill  blocks.0.attn.hook_attn_scores head 1" in result.output


def test_partial_rotary_turns_only_the_first_features_of_each_head():
    x = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]])  # two heads of width 4
    p = 3.0
    out = ops.rope(np, x, np.array([p]), 4, 10000.0, dims=2)
    c, s = np.cos(p), np.sin(p)  # dims 2: one pair (0, 1) per head at frequency θ^0 = 1
    expected = [1 * c - 2 * s, 2 * c + 1 * s, 3, 4, 5 * c - 6 * s, 6 * c + 5 * s, 7, 8]
    np.testing.assert_allclose(out[0], expected, rtol=0, atol=1e-15)
    assert np.array_equal(ops.rope(np, x, np.array([p]), 4, 10000.0, dims=4), ops.rope(np, x, np.array([p]), 4, 1e4))


def test_rotary_dims_reach_the_attention():
    """Two heads of width 4 over one kv head (wk stays 8×4): rotary_dims 2 turns half of each head."""
    text = GQA_TEXT.replace("heads: 4            # d_head 2", "heads: 2").replace("kv_heads: 2 ", "kv_heads: 1 ")
    partial = text.replace("rope: {theta: 10000.0}", "rope: {theta: 10000.0, rotary_dims: 2}")
    (_, whole), (k, turned) = ([to_host(next(s for s in Session(load_scenario_text(t)).steps()
                                            if s.name == f"blocks.0.attn.hook_{n}").values) for n in ("k", "rot_k")]
                               for t in (text, partial))
    assert load_scenario_text(partial).model.rope_dims == 2
    p = np.arange(5.0)[:, None]  # one pair (0, 1) at frequency θ^0 = 1; features 2 and 3 pass
    np.testing.assert_allclose(turned[:, 0], (k[:, 0:1] * np.cos(p) - k[:, 1:2] * np.sin(p))[:, 0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(turned[:, 1], (k[:, 1:2] * np.cos(p) + k[:, 0:1] * np.sin(p))[:, 0], rtol=0, atol=1e-15)
    np.testing.assert_array_equal(turned[:, 2:], k[:, 2:])
    assert not np.array_equal(whole, turned)


CASES = [  # (old, new, marker on the reported line, path: message)
    ("kv_heads: 2 ", "kv_heads: 3 ", "kv_heads: 3", "model.kv_heads: 3 kv heads do not divide the 4 query heads"),
    ("{mixer: attention}  ", "{mixer: mamba}  ", "mamba", "model.layers[1].mixer: expected one of attention, short_conv, got 'mamba'"),
    ("{mixer: attention}  ", "{mixer: mla}  ", "mla", "model.layers[1].mixer: expected one of attention, short_conv, got 'mla'"),
    ("{mixer: attention, window: 4}", "{mixer: attention, window: 0}", "window: 0",
     "model.layers[0].window: expected an integer ≥ 1, got 0"),
    ("{mixer: attention, window: 4}", "{mixer: attention, windw: 4}", "windw", "model.layers[0].windw: unknown key (expected one of: ffn, kernel, mixer, rope_theta, window)"),
    ("{mixer: attention, window: 4}", "{mixer: attention, kernel: 3}", "kernel",
     "model.layers[0].kernel: a attention layer has no convolution"),
    ("{mixer: attention}  ", "{mixer: short_conv, kernel: 0}  ", "kernel: 0",
     "model.layers[1].kernel: expected an integer ≥ 1, got 0"),
    ("rope: {theta: 10000.0}", "rope: {theta: 10000.0, rotary_dims: 3}", "rotary_dims: 3",
     "model.rope.rotary_dims: expected an even number of features ≤ d_head 2, got 3"),
    ("positions: rope", "positions: learned\n  max_positions: 16", "rope: {theta",
     "model.rope: rope: needs positions: rope"),
    ("rope: {theta: 10000.0}", "rope: {theta: -1.0}", "theta: -1.0", "model.rope.theta: expected a number > 0, got -1.0"),
]


@pytest.mark.parametrize("old, new, marker, message", CASES, ids=[c[3].split(":")[0] for c in CASES])
def test_a_bad_layer_option_is_refused_on_its_line(tmp_path, old, new, marker, message):
    assert old in GQA_TEXT
    text = GQA_TEXT.replace(old, new, 1)
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    line = text[: text.index(marker) + len(marker)].count("\n") + 1
    result = CliRunner().invoke(app, ["run", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.splitlines() == [f"tinyllm-tui: error: {path}:{line}: {message}"]


# -- a kind of its own, registered at test time ------------------------------------------------------------
TOY_TEXT = """\
title: a running-mean mixer after an attention layer
vocab:
  tokens: [PAD, a, b, c, d, e]
  pad: PAD
model:
  d_model: 4
  heads: 1
  layers:
    - {mixer: attention}
    - {mixer: mean}
  norm: {kind: rmsnorm, placement: pre, eps: 1.0e-5, affine: false}
  ffn: {kind: relu, d_ff: 4}
weights:
  embed:
    - [0.1, -0.2, 0.3, 0.4]
    - [0.5, 0.1, -0.3, 0.2]
    - [-0.4, 0.6, 0.1, -0.1]
    - [0.2, 0.2, -0.5, 0.3]
    - [-0.1, -0.3, 0.4, 0.6]
    - [0.3, -0.6, 0.2, -0.2]
  blocks:
    - attn: {wq: identity, wk: identity, wv: identity, wo: identity}
      mlp: {w_in: identity, w_out: identity}
    - mean:
        g: [1.0, 2.0, 0.5, -1.0]
      mlp: {w_in: identity, w_out: identity}
requests:
  - tokens: [a, b, c]
    max_new_tokens: 3
decode: {rule: greedy, forbid: [PAD]}
"""


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(layers.MIXERS, toy_kind.NAME, toy_kind)  # the one registry line
    return load_scenario_text(TOY_TEXT)


def test_a_new_kind_runs_cached_equal_to_full_and_computes_the_running_mean(toy):
    assert max(d.max_abs for d in diff_scenario(toy)) <= 1e-12
    states = list(Session(toy).steps())
    prefill = [s for s in states if s.round == 0]
    h = to_host(next(s for s in prefill if s.name == "blocks.1.ln1.hook_normalized").values)
    means = to_host(next(s for s in prefill if s.name == "blocks.1.mean.hook_running_mean").values)
    np.testing.assert_allclose(means, np.cumsum(h, axis=0) / np.arange(1, 4)[:, None], rtol=0, atol=1e-15)
    model = Session(toy).model
    assert {site.hook.text for site in model.hooks} >= {"blocks.1.mean.hook_running_mean", "blocks.1.hook_mean_out"}
    assert model.hooks.sites and {(s.name, s.head) for s in states if s.layer == 1} <= {
        (site.hook.text, None) for site in model.hooks}


def test_what_a_new_kind_adds_is_explained_and_its_width_checked_from_its_module_alone(toy):
    """Its ADDED names the hook of its output (blocks.L.hook_mean_out): the views explain every one of its operators
    from its EXPLANATIONS, and an intervention there is held to d_model (4) before the run."""
    from test_explanations import unexplained

    from engine.interventions import InterventionError, check_intervention, parse_intervention

    assert unexplained(toy) == {}
    with refused(InterventionError, "2 numbers for 4 columns"):
        check_intervention(parse_intervention("blocks.1.hook_mean_out[0,:]=[1, 2]"), toy.model, 1, len(toy.vocab))


def test_a_new_kinds_state_is_shown_dumped_compared_and_travelled_without_touching_their_code(toy):
    debugger = Debugger(toy)
    states = list(Session(toy).steps())
    last = states[-1]
    debugger.goto_step(last.step)
    debugger.move_cache(layers=1 - debugger.frame.cache.layer)  # onto layer 1
    shown = debugger.frame.cache
    assert shown.layer == 1 and [view.name for view in shown.views] == ["sum"]
    np.testing.assert_array_equal(shown.views[0].values, to_host(last.caches[1].total))
    assert shown.length == last.caches[1].count == 5  # 3 prompt tokens + 2 fed back
    middle = next(s for s in states if s.round == 1 and s.layer == 1)  # time travel back into decode round 1
    debugger.goto_step(middle.step)
    np.testing.assert_array_equal(debugger.frame.cache.views[0].values, to_host(middle.caches[1].total))
    assert debugger.frame.cache.length == middle.caches[1].count
    dump = ActivationDump(Passes(toy))
    for state in states:
        dump.see(state)
    arrays = dump.arrays()
    np.testing.assert_array_equal(arrays["decode.2.blocks.1.mean.state_sum"][0], to_host(last.caches[1].total))
    same = middle.caches[1].differing({"state_sum": to_host(middle.caches[1].total)},
                                      lambda name, a, b: np.abs(a - b) > 0)
    other = middle.caches[1].differing({"state_sum": to_host(middle.caches[1].total) + 1},
                                       lambda name, a, b: np.abs(a - b) > 0)
    assert same == frozenset() and other == frozenset({middle.caches[1].count - 1})


def test_a_new_kinds_state_line_heading_and_view_title_are_its_modules_words_in_english_and_chinese(toy):
    """The cache panel's heading and line beside the running sum and its window's title: the words of toy_kind's
    CAUSES, carried by the frame to the view, in the language it asks for (the catalogue has none of them)."""
    from tinyllm_tui.tui.i18n import EN, cause_words, words
    from tinyllm_tui.tui.widgets.cache import layout_line

    debugger = Debugger(toy)
    debugger.goto_step(list(Session(toy).steps())[-1].step)
    debugger.move_cache(layers=1 - debugger.frame.cache.layer)  # onto layer 1
    shown = debugger.frame.cache
    assert layout_line(shown, "en") == "a running mean of 5 tokens: one row, their sum"
    assert layout_line(shown, "zh") == "5 个Token的累计均值：一行，即它们的和"
    assert [words(title, lang) for title in shown.titles for lang in ("en", "zh")] == ["sum", "累计和"]
    assert cause_words(shown.heading, "en") == "running mean · layer 1 of 0–1"
    assert cause_words(shown.heading, "zh") == "累计均值 · 第 1 层（0–1）"
    assert not {"cache.mean", "cache.where.mean", "view.sum"} & set(EN)


def test_the_diff_compares_a_new_kinds_state_through_its_own_protocol(toy):
    """Cached against full, the diff reads each layer's state at a round's end as its dump items and the kind's
    own `differing`: the running sum is one row per round, and a stale cache of layer 0 (kept from the weights
    before an edit) makes the sum it fed layer 1 differ by exactly what the two runs' sums differ by."""
    rows = [d for d in diff_scenario(toy) if d.name == "blocks.1.mean.state_sum"]
    assert [(d.round, d.state, d.agrees) for d in rows] == [(0, True, True), (1, True, True), (2, True, True)]
    edited = dict(toy.weights)
    edited["blocks.0.mlp.w_in"] = edited["blocks.0.mlp.w_in"] * 2
    scenario = dataclasses.replace(toy, weights=edited)
    stale = list(Session(scenario, stale=StaleFrom(toy.weights, request=0, round=1)).steps())
    full = list(Session(scenario, mode="full").steps())
    rows = {d.round: d for d in diff_runs(stale, full) if d.name == "blocks.1.mean.state_sum"}
    ends = [[s for s in run if s.round == 1][-1].caches[1].total for run in (stale, full)]
    assert rows[1].max_abs == np.max(np.abs(to_host(ends[0]) - to_host(ends[1]))) > 1e-3 and not rows[1].agrees


SHORT_CONV_TEXT = """\
vocab: {tokens: [a, b]}
model:
  d_model: 2
  heads: 1
  layers: [{mixer: short_conv, kernel: 2}, {mixer: short_conv}]
  ffn: {kind: relu, d_ff: 2}
weights:
  embed: zeros
  blocks:
    - {conv: {w_in: zeros, w_conv: zeros, w_out: zeros}, mlp: {w_in: zeros, w_out: zeros}}
    - {conv: {w_in: zeros, w_conv: zeros, w_out: zeros}, mlp: {w_in: zeros, w_out: zeros}}
requests: [{tokens: [a]}]
"""


def test_a_short_convs_kernel_is_its_layers_option_and_sets_its_taps():
    """`kernel: 2` is short_conv's own option (its LAYER_OPTIONS): the layer's taps, the rows of w_conv; a layer
    without one has LFM2's 3."""
    scenario = load_scenario_text(SHORT_CONV_TEXT)
    assert [block.option("kernel") for block in scenario.model.blocks] == [2, 3]
    assert [scenario.weights[f"blocks.{i}.conv.w_conv"].shape for i in (0, 1)] == [(2, 2), (3, 2)]


TOY_SCALED = TOY_TEXT.replace("- {mixer: mean}", "- {mixer: mean, scale: 3}")


def test_a_new_kinds_layer_option_is_declared_in_its_module_and_read_in_its_forward(toy):
    """The toy declares `scale` in its LAYER_OPTIONS: once registered, a scenario's layer of its kind takes the key
    (neither engine/spec.py nor the scenario file's reader names it), its layer reads it in its forward (3 times
    g ⊙ mean), a layer of another kind refuses it on its line, and an unknown key lists it among the keys."""
    scaled = load_scenario_text(TOY_SCALED)
    assert [block.option("scale") for block in scaled.model.blocks] == [None, 3]
    assert toy.model.blocks[1].option("scale") == 1
    outputs = {}
    for name, scenario in (("default", toy), ("scaled", scaled)):
        prefill = [s for s in Session(scenario).steps() if s.round == 0]
        mean, out = (to_host(next(s for s in prefill if s.name == f"blocks.1.{hook}").values)
                     for hook in ("mean.hook_running_mean", "hook_mean_out"))
        outputs[name] = out
        np.testing.assert_array_equal(out, mean * np.array([1.0, 2.0, 0.5, -1.0]) * (3 if name == "scaled" else 1))
    assert not np.array_equal(outputs["default"], outputs["scaled"])
    refuses(TOY_SCALED.replace("- {mixer: attention}", "- {mixer: attention, scale: 3}"),
            "model.layers[0].scale: a layer of mixer attention and FFN dense takes no such option")
    refuses(TOY_SCALED.replace("scale: 3", "scal: 3"),
            "model.layers[1].scal: unknown key (expected one of: ffn, kernel, mixer, rope_theta, scale, window)")


def test_a_kinds_layer_option_is_unknown_until_its_kind_is_registered():
    refuses(TOY_SCALED, "model.layers[1].scale: unknown key (expected one of: ffn, kernel, mixer, rope_theta, window)")


def refuses(text: str, said: str):
    with refused(ScenarioError, re.escape(said)):
        load_scenario_text(text)


def test_an_unknown_kind_is_refused_by_the_registry():
    with pytest.raises(layers.UnknownKind, match="mixer kind 'mean' is not one of attention"):
        layers.kind("mixer", "mean")


async def test_the_cache_view_shows_as_many_windows_as_a_state_has_views(toy):
    """A view-only matter: the running mean's one view fills one window and hides the other; a state with
    three views gets a third window. Its facts say it counts the tokens fed (one row, not one per token): the
    title says so."""
    from dataclasses import replace

    from tinyllm_tui.tui.app import DebuggerApp
    from tinyllm_tui.tui.widgets.cache import CacheView
    from tinyllm_tui.tui.widgets.matrix import MatrixWindow
    from tinyllm_tui.tui.widgets.wrapped import Wrapped

    app = DebuggerApp(toy, lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        app.debugger.goto_step(len(list(Session(toy).steps())) - 1)
        app.debugger.move_cache(layers=1 - app.debugger.frame.cache.layer)
        view = app.main.query(CacheView).first()
        view.show(app.debugger.frame.cache)
        await pilot.pause()
        assert "5 tokens fed, 1 new (+)" in view.query_one(".cache-title", Wrapped)._text.plain
        shown = [w for w in view.query(MatrixWindow) if w.display]
        assert len(shown) == 1 and "sum · 1×4" in "\n".join(getattr(line, "plain", None) or line.text for line in shown[0]._lines())
        cache = app.debugger.frame.cache
        view.show(replace(cache, views=cache.views * 3, titles=cache.titles * 3))
        await pilot.pause()
        assert len([w for w in view.query(MatrixWindow) if w.display]) == 3


def test_a_new_kinds_fault_point_and_its_bug_are_its_module_alone(toy, monkeypatch):
    """The toy's bug (sum-forgotten: its kept sum is the chunk's last row) is offered once the kind is registered,
    asked at the toy's own fault point, and found by the diff where it acts: the prefill's kept sum, short of the
    first two rows' sum (the full run keeps h0 + h1 + h2, the bug h2)."""
    from engine.compare.diff import first_divergence
    from engine.faults import FAULTS, INJECTIONS

    assert INJECTIONS[-1] == "sum-forgotten" and FAULTS["sum-forgotten"].cannot_run(toy) is None
    first = first_divergence(diff_scenario(toy, inject="sum-forgotten"))
    h = to_host(next(s for s in Session(toy).steps() if s.name == "blocks.1.ln1.hook_normalized").values)
    assert (first.round, first.name) == (0, "blocks.1.mean.state_sum")
    assert abs(first.max_abs - np.max(np.abs(h[0] + h[1]))) <= 1e-12
    monkeypatch.delitem(layers.MIXERS, toy_kind.NAME)
    assert "sum-forgotten" not in INJECTIONS  # the registry as it is now


def test_a_new_kinds_breakpoint_condition_is_its_module_alone(toy):
    """`mean_count>3` (the toy's): the prompt's 3 tokens, then one token a round: the running mean counts 4 and 5
    tokens in decode rounds 1 and 2 only."""
    from engine.breakpoints import BreakpointError, parse_breakpoint

    breakpoint = parse_breakpoint("mean_count>3 & layer=1")
    hits = [(s.round, s.name) for s in Session(toy).steps() if breakpoint.hits(s)]
    assert hits == [(1, "blocks.1.mean.hook_running_mean"), (2, "blocks.1.mean.hook_running_mean")]
    with refused(BreakpointError, "'x' is not a number"):
        parse_breakpoint("mean_count>x")
    with refused(BreakpointError, "abs>N, mean_count>N, expert=E or route_margin<N"):
        parse_breakpoint("mean_count<3")


def test_no_kind_module_assigns_a_registry_name_twice():
    """A kind's CAUSES, BUGS, BREAKPOINTS… are read once, at the end of its module: a second assignment (two merged
    branches each adding a `CAUSES = {…}`) silently drops the first one's words."""
    import ast

    for path in sorted((ROOT / "engine" / "layers").glob("*.py")) + [ROOT / "tests" / "toy_kind.py"]:
        names = [target.id for node in ast.parse(path.read_text()).body if isinstance(node, ast.Assign)
                 for target in node.targets if isinstance(target, ast.Name) and target.id.isupper()]
        assert sorted({n for n in names if names.count(n) > 1}) == [], path.name


def test_the_routed_expert_of_a_hook_is_read_from_its_module_as_a_hook_name():
    """Expert E's hooks are under `mlp.experts.E`; the shared expert's, the router's and a deeper module's are no
    expert's."""
    from engine.hooks import Hook

    assert layers.routed_expert(Hook.parse("blocks.3.mlp.experts.12.hook_out")) == 12
    for text in ("blocks.3.mlp.shared.hook_out", "blocks.3.mlp.hook_router_logits", "blocks.3.mlp.experts.hook_pre",
                 "blocks.3.mlp.experts.1.2.hook_pre", "blocks.3.attn.experts.1.hook_pre", "hook_embed"):
        assert layers.routed_expert(Hook.parse(text)) is None, text


def test_a_checkpoints_block_parameters_are_read_by_their_kinds_and_a_new_kind_reads_its_own(toy, monkeypatch):
    """engine.loading.hf asks each block's kinds for their parameters (hf_tensor): attention's under the family's
    block prefix, transposed to [in, out], and a kind registered later (the toy, given an hf_tensor) its own."""
    from engine.loading import hf

    stored = {"layers.0.self_attn.q_proj.weight": np.arange(6.0).reshape(3, 2), "layers.1.mean.gain": np.ones(4)}
    monkeypatch.setattr(toy_kind, "hf_tensor", lambda leaf, tensors: tensors.get({"g": "mean.gain"}[leaf]) * 2,
                        raising=False)
    weight = lambda name: hf.engine_weight("llama", toy.model, name, stored.__getitem__)  # noqa: E731
    np.testing.assert_array_equal(weight("blocks.0.attn.wq"), np.arange(6.0).reshape(3, 2).T)
    np.testing.assert_array_equal(weight("blocks.1.mean.g"), np.full(4, 2.0))
