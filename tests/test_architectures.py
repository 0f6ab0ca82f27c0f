"""The newer architectures against transformers: tiny random qwen3 (q/k norms, sliding from layer 1),
mistral and phi3 (sliding windows; phi3's fused projections), gemma2 (GeGLU, (1 + w) pre- and
post-norms, √d embeddings, query_pre_attn_scalar, soft-capped scores and logits, every other layer
sliding), gemma3 (q/k norms, a RoPE base per layer type, the global one linearly scaled) and llama3
(Llama 3's RoPE scaling). tools/make_fixtures.py wrote each folder
and transformers' float64 outputs (its float32 casts patched out); every window is shorter than the
prompt, and its decode reference recomputes the whole sequence at every step."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_models import scenarios

from conftest import X01
from engine import ScenarioError, Session, make_backend, to_host
from engine.compare.diff import diff_scenario
from engine.loading import open_model
from engine.loading.checkpoint import load_checkpoint
from engine.parameters import parameter_shapes
from engine.spec import FfnKind, NormKind, NormPlacement, Positions, Rule
from tinyllm_tui.debugger.frame import BY_KIND, hook_key, lazy_labels
from tinyllm_tui.presentation.cache_layout import row_words
from tinyllm_tui.tui.explanations import texts_of

FIXTURES = Path(__file__).parent / "fixtures"
ARCHS = ("qwen3", "mistral", "phi3", "gemma2", "gemma3", "llama3")
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}


def reference(arch: str) -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURES / arch / "reference.npz"))


def open_fixture(arch: str, dtype: str = "float64", **changes):
    ref = reference(arch)
    scenario = load_checkpoint(FIXTURES / arch, ids=[int(t) for t in ref["ids"]],
                               max_new_tokens=len(ref["greedy_ids"]), dtype=dtype)
    if changes:
        scenario = replace(scenario, model=replace(scenario.model, **changes))
    session = Session(scenario, make_backend("numpy", dtype))
    return ref, scenario, session, list(session.steps())


def logits_per_round(states) -> list[np.ndarray]:
    """What each round's decoding read: the last logits operator (after Gemma 2's cap)."""
    last = {}
    for state in states:
        if state.kind == "logits":
            last[state.round] = to_host(state.values)
    return [last[r] for r in sorted(last)]


def resid_post(states, round_: int) -> list[np.ndarray]:
    rows = {s.layer: to_host(s.values) for s in states
            if s.round == round_ and s.name == f"blocks.{s.layer}.hook_resid_post"}
    return [rows[layer] for layer in sorted(rows)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_every_layer_and_the_logits_match_transformers(arch, dtype):
    ref, _, _, states = open_fixture(arch, dtype)
    layers = resid_post(states, 0)
    assert len(layers) == len(ref["layers"])
    for ours, theirs in zip(layers, ref["layers"]):
        assert np.abs(ours - theirs).max() <= TOLERANCE[dtype]
    assert np.abs(logits_per_round(states)[0] - ref["logits"]).max() <= TOLERANCE[dtype]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_cached_decode_step_matches_transformers(arch):
    """Each round's logits and every layer's row of the fed token, against the full recompute
    transformers ran at that step; then the greedy ids."""
    ref, _, session, states = open_fixture(arch)
    steps = logits_per_round(states)
    assert len(steps) == len(ref["step_logits"])
    for round_, (ours, theirs) in enumerate(zip(steps, ref["step_logits"])):
        assert np.abs(ours[-1] - theirs).max() <= 1e-9
        layers = resid_post(states, round_)
        assert all(np.abs(mine[-1] - row).max() <= 1e-9 for mine, row in zip(layers, ref["step_layers"][round_]))
    assert list(session.results[0].generated) == list(ref["greedy_ids"])


@pytest.mark.parametrize("arch", [a for a in ARCHS if a != "llama3"])
def test_cached_decode_equals_the_full_recompute_with_sliding_windows(arch):
    _, scenario, _, _ = open_fixture(arch)
    assert scenario.model.sliding_window is not None
    diffs = diff_scenario(scenario, make_backend("numpy", "float64"))
    assert {d.round for d in diffs if d.phase == "decode"} == set(range(1, len(reference(arch)["greedy_ids"])))
    assert max(d.max_abs for d in diffs) <= 1e-12


@pytest.mark.parametrize("arch, change", [
    ("qwen3", {"sliding_window": None}), ("mistral", {"sliding_window": None}), ("phi3", {"sliding_window": None}),
    ("gemma2", {"sliding_window": None}), ("gemma2", {"attn_softcap": None}), ("gemma2", {"final_softcap": None}),
    ("gemma2", {"attn_scale": None}), ("gemma2", {"embed_scale": 1.0}), ("gemma2", {"post_norms": False}),
    ("gemma3", {"rope_theta_local": None}), ("gemma3", {"sliding_window": None}), ("gemma3", {"qk_norm": False}),
    ("qwen3", {"qk_norm": False}), ("gemma3", {"rope_factors": None}), ("llama3", {"rope_factors": None}),
])
def test_each_feature_changes_what_the_fixture_computes(arch, change):
    """Without the feature the logits leave the reference: the fixtures exercise every one of them."""
    ref, _, _, states = open_fixture(arch, **change)
    assert np.abs(logits_per_round(states)[0] - ref["logits"]).max() > 1e-6


def test_rope_scaling_divides_each_frequency_as_configured():
    """llama3: the highest frequency stays, one between the wavelength bounds is blended, the two lowest
    slow down by the factor 8; gemma3: its global layer is slowed by 8, its sliding layers not at all."""
    llama3 = open_fixture("llama3")[1].model
    assert llama3.rope_factors[0] == 1.0 and 1.0 < llama3.rope_factors[1] < 8.0
    assert llama3.rope_factors[2:] == pytest.approx((8.0, 8.0), rel=1e-15)
    gemma3 = open_fixture("gemma3")[1].model
    assert gemma3.rope_divisors(1) == (8.0,) * 4 and gemma3.rope_divisors(0) is None
    assert (gemma3.theta(0), gemma3.theta(1)) == (10000.0, 1000000.0)


def names(states) -> set[str]:
    return {s.name for s in states}


def test_gemma2_trace_has_its_operators_under_transformerlens_style_names():
    _, scenario, _, states = open_fixture("gemma2")
    spec = scenario.model
    assert {"blocks.0.hook_resid_pre", "blocks.0.ln1.hook_scale", "blocks.0.ln1.hook_normalized",
            "blocks.0.ln1.hook_out", "blocks.0.attn.hook_out", "blocks.0.ln1_post.hook_normalized",
            "blocks.0.hook_attn_out", "blocks.0.mlp.hook_out", "blocks.0.hook_mlp_out",
            "blocks.0.attn.hook_attn_scores_uncapped", "blocks.0.attn.hook_attn_scores",
            "unembed.hook_out", "unembed.hook_softcap"} <= names(states)
    embed = next(s for s in states if s.name == "hook_embed")  # TransformerLens's meaning: the scaled rows
    table = dict(np.load(FIXTURES / "gemma2" / "reference.npz"))["ids"]
    rows = to_host(next(m for m in embed.inputs if m.name == "embed").values)[table]
    assert np.allclose(to_host(embed.values), rows * np.sqrt(spec.d_model), rtol=1e-15)
    assert texts_of(hook_key(embed))["en"][0].startswith("Gemma's token vectors")
    capped = [s for s in states if s.name == "blocks.1.attn.hook_attn_scores"]
    assert capped[0].kind == "softcap"
    finite = np.concatenate([to_host(s.values)[np.isfinite(to_host(s.values))] for s in capped])
    assert np.abs(finite).max() < spec.attn_softcap
    logits = next(s for s in states if s.name == "unembed.hook_softcap")
    assert np.abs(to_host(logits.values)).max() < spec.final_softcap


def test_a_sliding_layer_masks_keys_at_or_beyond_the_window():
    """gemma2: layer 0 slides (window 4), layer 1 reads every earlier key."""
    _, scenario, _, states = open_fixture("gemma2")
    window = scenario.model.window(0)
    sliding = to_host(next(s for s in states if s.name == "blocks.0.attn.hook_attn_scores").values)
    full = to_host(next(s for s in states if s.name == "blocks.1.attn.hook_attn_scores").values)
    i, j = np.indices(sliding.shape)
    assert np.isneginf(sliding[j <= i - window]).all() and np.isfinite(sliding[(j > i - window) & (j <= i)]).all()
    assert np.isfinite(full[j <= i]).all() and scenario.model.window(1) is None


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_qk_norms_are_per_head_and_come_before_rope(arch):
    _, scenario, _, states = open_fixture(arch)
    spec = scenario.model
    order = [s.name for s in states if s.round == 0 and s.layer == 0]
    assert order.index("blocks.0.attn.hook_q_normed") < order.index("blocks.0.attn.hook_rot_q")
    assert order.index("blocks.0.attn.hook_k_normed") < order.index("blocks.0.attn.hook_rot_k")
    scale = next(s for s in states if s.name == "blocks.0.attn.q_norm.hook_scale")
    normalized = to_host(next(s for s in states if s.name == "blocks.0.attn.q_norm.hook_normalized").values)
    assert to_host(scale.values).shape[1] == spec.n_heads and scale.output.cols[-1] == f"scale h{spec.n_heads - 1}"
    assert lazy_labels(scale.output.col_axis, row_words("zh").labels)[-1] == f"尺度 h{spec.n_heads - 1}"  # the view's
    heads = normalized.reshape(normalized.shape[0], spec.n_heads, spec.d_head)
    assert np.allclose(np.sqrt((heads**2).mean(-1)), 1.0, atol=1e-3)  # eps 1e-6 keeps it just below 1


def test_every_new_operator_has_an_explanation():
    _, _, _, gemma2 = open_fixture("gemma2")
    _, _, _, qwen3 = open_fixture("qwen3")
    for state in gemma2 + qwen3:
        hook = state.name.rsplit(".", 1)[-1]
        if hook in ("hook_scale", "hook_q_normed", "hook_k_normed", "hook_attn_scores_uncapped", "hook_softcap",
                    "hook_embed") or (hook, state.kind) in BY_KIND:
            texts = texts_of(hook_key(state))
            assert len(texts["en"]) == len(texts["zh"]) == 4, state.name  # why, how, pitfall, check
    assert all(texts_of(key) for key in BY_KIND.values())


def transformer_lens_layout(state_values: dict[str, list], name: str) -> np.ndarray:
    """Our per-head operators stacked as TransformerLens lays them out: scores and patterns
    [head, query, key], hook_z [pos, head, d_head]."""
    stacked = np.stack(state_values[name])
    return stacked.transpose(1, 0, 2) if name.endswith("hook_z") else stacked


@pytest.mark.parametrize("arch", ["qwen3", "gemma2", "gemma3"])
def test_every_name_shared_with_transformer_lens_means_the_same(arch):
    """TransformerLens 4.3's own run_with_cache (its bridge, float64, softmax made float64 too) on the first
    8 tokens: every hook name the two traces share holds the same numbers (masked scores: −∞ here, the
    dtype's most negative number there)."""
    theirs = dict(np.load(FIXTURES / arch / "transformer_lens.npz"))
    ids = [int(t) for t in reference(arch)["ids"][:8]]
    states = list(Session(load_checkpoint(FIXTURES / arch, ids=ids, max_new_tokens=1)).steps())
    ours: dict[str, list] = {}
    for state in states:
        ours.setdefault(state.name, []).append(to_host(state.values))
    shared = sorted(set(ours) & set(theirs))
    assert len(shared) >= 80 and {"blocks.0.ln1.hook_scale", "blocks.0.ln1.hook_normalized", "blocks.0.hook_resid_pre",
                                  "hook_embed", "unembed.hook_out"} <= set(shared)
    for name in shared:
        mine = ours[name][0] if len(ours[name]) == 1 else transformer_lens_layout(ours, name)
        other = theirs[name]
        if ("_norm." in name or name.endswith("_normed")) and other.ndim == 3:  # q/k norms: [head, pos, d_head]
            other = other.transpose(1, 0, 2)
        other = np.where(other <= np.finfo(other.dtype).min, -np.inf, other).reshape(mine.shape)
        assert np.array_equal(np.isneginf(mine), np.isneginf(other)), name
        finite = np.isfinite(mine)
        assert np.abs(mine[finite] - other[finite]).max() <= 1e-12, name


def edited_copy(tmp_path: Path, arch: str, edit) -> Path:
    folder = tmp_path / arch
    shutil.copytree(FIXTURES / arch, folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("arch, edit, key", [
    ("gemma2", lambda c: c.update(layer_types=["sliding_attention", "chunked_attention", "full_attention"]),
     "layer_types[1]"),
    ("gemma2", lambda c: c.update(hidden_activation="gelu"), "hidden_activation"),
    ("gemma3", lambda c: c["rope_parameters"]["full_attention"].update(rope_type="longrope", factor=8.0),
     "rope_parameters.full_attention.rope_type"),
    ("gemma3", lambda c: c["rope_parameters"]["full_attention"].update(factor=0), "rope_parameters.full_attention.factor"),
    ("gemma3", lambda c: c["rope_parameters"]["sliding_attention"].update(rope_type="linear", factor=2.0),
     "rope_parameters.sliding_attention.rope_type"),
    ("llama3", lambda c: c["rope_parameters"].pop("low_freq_factor"), "rope_parameters.low_freq_factor"),
    ("gemma3", lambda c: c.update(use_bidirectional_attention=True), "use_bidirectional_attention"),
    ("phi3", lambda c: c.update(rope_scaling={"rope_type": "longrope", "short_factor": [1.0]}),
     "rope_scaling.rope_type"),
    ("phi3", lambda c: c.update(partial_rotary_factor=0.5), "partial_rotary_factor"),
    ("mistral", lambda c: c.update(sliding_window=0), "sliding_window"),
    ("qwen3", lambda c: c.update(layer_types=["full_attention"]), "layer_types"),
    ("gemma3", lambda c: c.pop("layer_types") and c.update(sliding_window_pattern=0), "sliding_window_pattern"),
])
def test_unsupported_options_are_refused_naming_the_key(tmp_path, arch, edit, key):
    with pytest.raises(ScenarioError) as error:
        load_checkpoint(edited_copy(tmp_path, arch, edit), ids=[1, 2])
    assert error.value.path == key


def test_every_kind_is_parsed_once_into_its_enum():
    """Scenario files and checkpoints both hand the engine enums, never raw strings."""
    for scenario in (open_model(X01), open_fixture("gemma2")[1]):
        model = scenario.model
        kinds = (model.norm.kind, model.norm.placement, model.positions, model.ffn, scenario.decode.rule)
        assert [type(k) for k in kinds] == [NormKind, NormPlacement, Positions, FfnKind, Rule]
    assert open_fixture("gemma2")[1].model.ffn is FfnKind.GATED_GELU_TANH


@st.composite
def newer_scenarios(draw):
    """A random small decoder with every feature of the newer architectures switched on or off at random."""
    scenario = draw(scenarios(sampled=False))
    heads = draw(st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 2)]))
    layers, d_head = draw(st.integers(1, 3)), draw(st.sampled_from([2, 4]))
    model = replace(
        scenario.model, n_layers=layers, n_heads=heads[0], kv_heads=heads[1], d_head=d_head,
        norm=replace(scenario.model.norm, kind=NormKind.RMSNORM, placement=NormPlacement.PRE, affine=True,
                     weight_offset=draw(st.booleans())),
        positions=Positions.ROPE, ffn=draw(st.sampled_from([FfnKind.GATED_SILU, FfnKind.GATED_GELU_TANH])),
        qk_norm=draw(st.booleans()), post_norms=draw(st.booleans()),
        embed_scale=draw(st.sampled_from([1.0, 2.0**0.5])), attn_scale=draw(st.sampled_from([None, 0.3])),
        attn_softcap=draw(st.sampled_from([None, 0.5, 2.0])), final_softcap=draw(st.sampled_from([None, 1.5])),
        sliding_window=draw(st.sampled_from([None, 1, 2, 3])),
        sliding_layers=draw(st.sampled_from([None, tuple(range(0, layers, 2))])),
        rope_theta_local=draw(st.sampled_from([None, 100.0])),
        rope_factors=draw(st.sampled_from([None, (8.0,) * (d_head // 2), (1.0, 3.5)[: d_head // 2]])),
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    weights = {name: rng.normal(0.0, 1.0 / np.sqrt(shape[0]), shape)
               for name, shape in parameter_shapes(model, len(scenario.vocab)).items()}
    return replace(scenario, model=model, weights=weights)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=newer_scenarios())
def test_cached_rounds_equal_full_recompute_with_every_newer_feature(scenario, backend):
    """Sliding windows, soft caps, q/k norms, post-norms, (1 + w) gains, per-layer RoPE bases, scaled RoPE
    and chunked prefill: the cached rounds equal the full recompute, on NumPy and array_api_strict.
    A random model's operators can hold values well above 1, whose round-off alone passes an absolute 1e-12
    (1.08e-12 was seen): 1e-12 is relative to the operator's largest |value| where that is above 1 (the
    scenarios keep the absolute 1e-12: test_cache_properties.test_every_scenario_cached_equals_full)."""
    diffs = diff_scenario(scenario, backend)
    largest = {state.step: _magnitude(to_host(state.values)) for state in Session(scenario, backend).steps()}
    assert diffs and all(d.max_abs <= 1e-12 * max(1.0, largest[d.step]) for d in diffs)


def _magnitude(values: np.ndarray) -> float:
    """The largest finite |value| (masked scores are −∞)."""
    return float(np.abs(values[np.isfinite(values)]).max(initial=0.0))


def test_without_layer_types_the_sliding_layers_follow_each_architectures_default(tmp_path):
    """Gemma 3: sliding_window_pattern (every Nth layer full); Qwen: from max_window_layers on; Mistral: all."""
    def no_types(pattern):
        return lambda c: c.pop("layer_types") and c.update(sliding_window_pattern=pattern)

    gemma3 = load_checkpoint(edited_copy(tmp_path / "a", "gemma3", no_types(2)), ids=[1, 2]).model
    assert gemma3.sliding_layers == (0, 2) and gemma3.window(1) is None
    qwen3 = load_checkpoint(edited_copy(tmp_path / "b", "qwen3", lambda c: c.pop("layer_types")), ids=[1]).model
    assert qwen3.sliding_layers == (1, 2)
    assert open_fixture("mistral")[1].model.sliding_layers is None and open_fixture("mistral")[1].model.window(2) == 4
