"""The Hub's composite checkpoints (Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration,
Gemma4ForConditionalGeneration, Gemma3ForConditionalGeneration, Lfm2VlForConditionalGeneration,
Mistral3ForConditionalGeneration: the text model's settings under `text_config`, its tensors under
`model.language_model.` (Gemma 3, Mistral 3: `language_model.model.`, the head `language_model.lm_head`), a vision
tower beside) open as their text model (tools/make_composite_fixtures.py): against the composite's own float64
forward in transformers, every pass's logits, every layer, the recurrent states and routes where the family has
them, greedy ids; cached equal to the full recompute."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import pytest

from engine import Session, make_backend, to_host
from engine.compare.diff import diff_scenario
from engine.loading.checkpoint import load_checkpoint

FIXTURES = Path(__file__).parent / "fixtures"
FAMILIES = ("qwen3_5", "qwen3_5_moe", "gemma4", "gemma3", "lfm2_vl", "mistral3")
TEXT = {"lfm2_vl": "lfm2", "mistral3": "mistral"}  # the text fixture of each, where its name is not the family's
UNTIED = ("qwen3_5", "mistral3")  # their fixtures' heads are their own (random) matrices
FLOAT64 = make_backend("numpy", "float64")


def reference(family: str) -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURES / f"{family}-composite" / "reference.npz"))


def scenario(family: str, folder: Path | None = None):
    """The composite checkpoint (or `folder`, an edited copy) with the reference's delta-rule chunk, shorter than the
    prompt, where it has one."""
    ref = reference(family)
    found = load_checkpoint(folder or FIXTURES / f"{family}-composite", ids=ref["ids"].tolist(),
                            max_new_tokens=len(ref["greedy_ids"]))
    if "chunk" not in ref:
        return found
    return dataclasses.replace(found, model=dataclasses.replace(
        found.model, deltanet=dataclasses.replace(found.model.deltanet, chunk=int(ref["chunk"]))))


@functools.cache
def run(family: str):
    found = scenario(family)
    return found, list(Session(found, FLOAT64).steps())


def values(states, name: str, round_: int) -> np.ndarray:
    return next(to_host(s.values) for s in states if s.name == name and s.round == round_)


def logits(states, round_: int) -> np.ndarray:
    """The pass's logits as decoding reads them (Gemma 4's soft-capped)."""
    return to_host([s for s in states if s.round == round_ and s.name.startswith("unembed.")][-1].values)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_composite_opens_as_the_text_model_of_its_text_config(family):
    """The same model as the family's text fixture (its language model's weights): Qwen3.5 dense and Mistral 3
    untied, their own lm_head read; the others tied, as the composite's top-level tie_word_embeddings says."""
    composite = load_checkpoint(FIXTURES / f"{family}-composite", ids=[1], max_new_tokens=1)
    text = load_checkpoint(FIXTURES / TEXT.get(family, family), ids=[1], max_new_tokens=1).model
    untied = family in UNTIED
    assert composite.model == dataclasses.replace(text, tied_unembed=not untied)
    assert ("unembed" in composite.weights) == untied


@pytest.mark.parametrize("family", FAMILIES)
def test_every_pass_logits_and_every_layer_match_the_composites_forward_and_the_greedy_ids_agree(family):
    ref, (found, states) = reference(family), run(family)
    assert ref["float32_ops"] == 0 and ref["ops"] > 1000
    assert np.abs(logits(states, 0) - ref["logits"]).max() <= 1e-9
    for layer in range(found.model.n_layers):
        assert np.abs(values(states, f"blocks.{layer}.hook_resid_post", 0) - ref["layers"][layer]).max() <= 1e-9
    for round_ in range(len(ref["greedy_ids"])):
        assert np.abs(logits(states, round_)[-1] - ref["step_logits"][round_]).max() <= 1e-9, round_
        for layer in range(found.model.n_layers):
            ours = values(states, f"blocks.{layer}.hook_resid_post", round_)[-1]
            assert np.abs(ours - ref["step_layers"][round_, layer]).max() <= 1e-9, (round_, layer)
    assert [int(to_host(s.values)[0, 0]) for s in states if s.kind == "choice"] == ref["greedy_ids"].tolist()


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_5_moe"])
def test_every_linear_attention_state_after_every_pass_matches(family):
    """transformers' conv cache keeps K columns, (channels, K); ours the K−1 inputs the next pass reads."""
    ref, (_, states) = reference(family), run(family)
    ends = [s for s, after in zip(states, states[1:] + [None]) if after is None or after.round != s.round]
    assert len(ends) == len(ref["step_recurrent"])
    for round_, end in enumerate(ends):
        for i, layer in enumerate(ref["linear_layers"]):
            kept = end.caches[int(layer)]
            assert np.abs(to_host(kept.recurrent) - ref["step_recurrent"][round_, i]).max() <= 1e-9
            assert np.abs(to_host(kept.window.rows) - ref["step_conv"][round_, i][:, 1:].T).max() <= 1e-9


def test_the_moe_composite_routes_every_token_of_every_pass_as_transformers():
    ref, (found, states) = reference("qwen3_5_moe"), run("qwen3_5_moe")
    for layer in range(found.model.n_layers):
        assert np.abs(values(states, f"blocks.{layer}.mlp.hook_router_logits", 0) - ref["router_logits"][layer]).max() \
            <= 1e-9
        assert np.array_equal(values(states, f"blocks.{layer}.mlp.hook_topk", 0), ref["topk"][layer])
        for round_ in range(len(ref["greedy_ids"])):
            assert np.array_equal(values(states, f"blocks.{layer}.mlp.hook_topk", round_)[-1],
                                  ref["step_topk"][round_, layer])


@pytest.mark.parametrize("family", FAMILIES)
def test_the_cached_decode_equals_the_full_recompute(family):
    diffs = diff_scenario(scenario(family), FLOAT64)
    assert {d.round for d in diffs} == set(range(len(reference(family)["greedy_ids"])))
    assert max(d.max_abs for d in diffs) <= 1e-12


def test_the_hubs_extras_beside_the_text_model_change_nothing(tmp_path):
    """What Qwen3.5's Hub checkpoints carry besides the text model: multi-token-prediction tensors (`mtp.*`, which
    transformers' composite skips on loading) and their settings, mrope's sections in rope_parameters (equal
    position rows for text); the same logits as without them."""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "hub"
    shutil.copytree(FIXTURES / "qwen3_5-composite", folder)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"] |= {"mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False}
    config["text_config"]["rope_parameters"] |= {"mrope_interleaved": True, "mrope_section": [1, 1, 0]}
    (folder / "config.json").write_text(json.dumps(config))
    tensors = load_file(folder / "model.safetensors")
    tensors["mtp.fc.weight"] = np.ones((32, 64), np.float32)
    save_file(tensors, folder / "model.safetensors")
    states = list(Session(scenario("qwen3_5", folder), FLOAT64).steps())
    assert np.abs(logits(states, 0) - reference("qwen3_5")["logits"]).max() <= 1e-9
