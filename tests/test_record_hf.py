"""`record_hf` on the 2026 architectures: transformers' own float64 generations (Qwen3.5's Gated DeltaNet and gated
attention, Gemma 4's per-layer inputs and KV-shared layers, DeepSeek-V3's latent cache and routing, Qwen3-MoE and
gpt-oss routing), recorded once by tools/make_record_hf_dumps.py in the transformers environment and committed as
tests/fixtures/<arch>/hf_generation.safetensors. Torch is not needed here: `check --against` reads those files.

Each dump agrees with the engine's run at 1e-9 over every pass; its prefill logits are transformers' (they equal
the rows of reference.npz, which the fixture scripts wrote by another path, greedy_passes); a value changed in one
recorded state of decode round 2 is found at that pass, layer and state, and a changed expert choice as the first
routing flip. The last test records live where transformers is installed (skipped elsewhere)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from engine.compare.against import compare_generation
from engine.loading.checkpoint import load_checkpoint
from tinyllm_tui.presentation.against_words import report_lines
from tinyllm_tui.tui.i18n import cause_words

FIXTURES = Path(__file__).parent / "fixtures"
ARCHS = ("qwen3_5", "gemma4", "deepseek_v3", "qwen3_moe", "gpt_oss")
PASSES = ("prefill", "decode.1", "decode.2", "decode.3")
# each architecture's recorded states after every pass: the layers that hold them
STATES = {"qwen3_5": {f"blocks.{layer}.linear_attn.{item}" for layer in (0, 1)
                      for item in ("recurrent_state", "conv_state")} | {"blocks.2.attn.cache_k", "blocks.2.attn.cache_v"},
          "deepseek_v3": {f"blocks.{layer}.attn.{item}" for layer in range(3) for item in ("cache_latent", "cache_rope_key")},
          "gemma4": {"blocks.1.attn.cache_k", "blocks.1.attn.cache_v"},  # layer 0 slides, 2 and 3 read others' caches
          "qwen3_moe": {f"blocks.{layer}.attn.cache_{kv}" for layer in range(4) for kv in "kv"},
          "gpt_oss": {"blocks.1.attn.cache_k", "blocks.1.attn.cache_v"}}  # layer 0 slides
CHOICES = {"qwen3_5": set(), "gemma4": set(), "deepseek_v3": {1, 2}, "qwen3_moe": {0, 1, 3}, "gpt_oss": {0, 1}}


def dump_of(arch: str) -> tuple[Path, list[int]]:
    path = FIXTURES / arch / "hf_generation.safetensors"
    with safe_open(str(path), "np") as opened:
        return path, json.loads(opened.metadata()["ids"])


def check(arch: str, path: Path | None = None):
    dump, ids = dump_of(arch)
    scenario = load_checkpoint(FIXTURES / arch, ids=ids, max_new_tokens=len(PASSES))
    return compare_generation(scenario, path or dump, atol=1e-9, rtol=0)


def planted(tmp_path: Path, arch: str, key: str, change) -> Path:
    arrays = load_file(dump_of(arch)[0])
    arrays[key] = change(arrays[key].copy())
    with safe_open(str(dump_of(arch)[0]), "np") as opened:
        metadata = opened.metadata()
    save_file(arrays, tmp_path / "planted.safetensors", metadata=metadata)
    return tmp_path / "planted.safetensors"


@pytest.mark.parametrize("arch", ARCHS)
def test_each_dump_is_transformers_own_forward(arch):
    """Not the engine's numbers: every layer's prefill output is reference.npz's, written by transformers through
    another path (tools/float64_reference.greedy_passes) over the whole prompt (causal: its first rows are ours)."""
    path, ids = dump_of(arch)
    with safe_open(str(path), "np") as opened:
        assert opened.metadata()["written_by"].startswith("record_hf, transformers 5.24.0")
    arrays, reference = load_file(path), np.load(FIXTURES / arch / "reference.npz")
    assert list(reference["ids"][:len(ids)]) == ids and len(ids) < len(reference["ids"])
    for layer, rows in enumerate(reference["layers"]):
        assert np.abs(arrays[f"prefill.blocks.{layer}.hook_resid_post"] - rows[:len(ids)]).max() <= 1e-9


@pytest.mark.parametrize("arch", ARCHS)
def test_each_dump_agrees_with_every_pass_every_state_and_every_choice(arch):
    report = check(arch)
    assert report.first_divergence is None and report.flip is None, report_lines(report, "en")[:3]
    assert not report.unused, report.unused  # every recorded key is one of the engine's operators or states
    compared = {(op.key.pass_, op.key.name) for op in report.ops}
    assert {(p, state) for p in PASSES for state in STATES[arch]} <= compared
    assert {(p, f"blocks.{layer}.mlp.hook_topk") for p in PASSES for layer in CHOICES[arch]} <= compared
    assert {p for p, _ in compared} == set(PASSES)


def test_gemma4s_per_layer_inputs_are_recorded_and_its_kv_shared_layers_hold_no_state():
    compared = {(op.key.pass_, op.key.name) for op in check("gemma4").ops}
    for layer in range(4):
        assert ("decode.2", f"blocks.{layer}.hook_per_layer_input") in compared
        assert ("decode.2", f"blocks.{layer}.attn.hook_q") in compared
    assert ("decode.2", "hook_per_layer_embed") in compared
    assert not {name for _, name in compared if name.startswith(("blocks.2.attn.cache", "blocks.3.attn.cache"))}
    assert not {name for _, name in compared if name.startswith(("blocks.2.attn.hook_k", "blocks.3.attn.hook_k"))}


@pytest.mark.parametrize("arch, key, cell, where", [
    ("qwen3_5", "decode.2.blocks.0.linear_attn.recurrent_state", (1, 3, 2), ("value head 1, k3, d2",)),
    ("qwen3_5", "decode.2.blocks.1.linear_attn.conv_state", (5, 2), ("channel 5",)),  # [channels, K]: the newest input
    ("deepseek_v3", "decode.2.blocks.1.attn.cache_latent", (4, 3), ("position 4", ", channel 3")),  # rows, no heads
    ("gemma4", "decode.2.blocks.1.attn.cache_k", (0, 6, 1), ("kv head 0, position 6", ", d_head 1")),
])
def test_a_value_changed_in_one_state_of_decode_round_2_is_found_at_that_pass_layer_and_state(tmp_path, arch, key,
                                                                                               cell, where):
    def change(values):
        values[cell] += 1e-3
        return values

    found = check(arch, planted(tmp_path, arch, key, change)).first_divergence
    assert (found.key.pass_, found.key.name) == ("decode.2", key.removeprefix("decode.2."))
    words = cause_words(found.place, "en")
    assert all(part in words for part in where), words


def test_a_changed_expert_choice_in_decode_round_2_is_the_first_routing_flip(tmp_path):
    key = "decode.2.blocks.1.mlp.hook_topk"
    chosen = load_file(dump_of("qwen3_moe")[0])[key]
    other = next(e for e in range(8) if e not in chosen[0])

    def change(values):
        values[0, 1] = other
        return values

    report = check("qwen3_moe", planted(tmp_path, "qwen3_moe", key, change))
    assert (report.flip.key.pass_, report.flip.layer) == ("decode.2", 1)
    assert report.flip.theirs == (int(chosen[0, 0]), other) and set(report.flip.ours) == set(chosen[0].tolist())


def test_recording_live_agrees_where_transformers_is_installed():
    pytest.importorskip("transformers", reason="transformers is not installed (the dumps above were recorded with it)")
    sys.path.insert(0, str(Path(__file__).parents[1] / "tools"))
    import make_record_hf_dumps as script

    from tinyllm_tui import record_hf

    _, ids = dump_of("qwen3_5")
    model, context = script.loaded("qwen3_5")
    with context:
        recorded = record_hf(model, ids, len(PASSES))
    committed = load_file(dump_of("qwen3_5")[0])
    assert set(recorded.arrays) == set(committed)
    assert max(np.abs(recorded.arrays[k] - committed[k]).max() for k in committed) <= 1e-12
