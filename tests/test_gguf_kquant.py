"""K-quant GGUFs as llama.cpp's own llama-quantize writes them (tools/make_kquant_fixtures.py): a tiny Qwen3 converted
by convert_hf_to_gguf.py to float32 and quantized to Q4_K_M and to Q6_K, against transformers' true float64 forward
on the weights gguf-py dequantizes from each file: every pass's logits and layers, the greedy ids, cached equal to
the full recompute."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from engine import Session, make_backend, to_host
from engine.compare.diff import diff_scenario
from engine.loading.checkpoint import load_checkpoint
from engine.loading.gguf_file import GGUFFile

FOLDER = Path(__file__).parent / "fixtures" / "gguf-kquant"
MIXES = {"Q4_K_M": {"Q4_K", "Q6_K"}, "Q6_K": {"Q6_K"}}  # the matrices' types llama-quantize chose


@functools.cache
def run(mix: str):
    ref = dict(np.load(FOLDER / f"{mix}.npz"))
    scenario = load_checkpoint(FOLDER / f"{mix}.gguf", ids=[int(t) for t in ref["ids"]],
                               max_new_tokens=len(ref["greedy_ids"]))
    session = Session(scenario, make_backend("numpy", "float64"))
    return ref, scenario, session, list(session.steps())


@pytest.mark.parametrize("mix", MIXES)
def test_the_file_holds_llama_quantizes_k_quants_in_rows_of_256(mix):
    tensors = GGUFFile(FOLDER / f"{mix}.gguf").tensors
    matrices = {name: info for name, info in tensors.items() if len(info.shape) == 2}
    assert {info.kind.name for info in matrices.values()} == MIXES[mix]
    assert all(info.shape[-1] % 256 == 0 for info in matrices.values())
    assert {info.kind.name for name, info in tensors.items() if name not in matrices} == {"F32"}  # the norm gains
    if mix == "Q4_K_M":  # its mix: Q6_K where llama.cpp wants more bits (the tied embedding, some attn_v/ffn_down)
        assert tensors["token_embd.weight"].kind.name == "Q6_K" and tensors["blk.0.attn_q.weight"].kind.name == "Q4_K"


@pytest.mark.parametrize("mix", MIXES)
def test_every_pass_matches_transformers_on_the_dequantized_weights(mix):
    ref, scenario, session, states = run(mix)
    assert ref["ops"] > 1000 and scenario.model.qk_norm and len(scenario.model.blocks) == 2
    passes = sorted({s.round for s in states})
    assert passes == list(range(len(ref["greedy_ids"])))
    for round_ in passes:
        rows = slice(None) if round_ == 0 else slice(-1, None)
        ours = {s.name: to_host(s.values) for s in states if s.round == round_ and s.head is None}
        for layer, theirs in enumerate(ref[f"pass_layers_{round_}"]):
            assert np.abs(ours[f"blocks.{layer}.hook_resid_post"][rows] - theirs).max() <= 1e-9
        assert np.abs(ours["unembed.hook_out"][rows] - ref[f"pass_logits_{round_}"]).max() <= 1e-9
    assert list(session.results[0].generated) == ref["greedy_ids"].tolist()


@pytest.mark.parametrize("mix", MIXES)
def test_cached_decode_equals_the_full_recompute(mix):
    _, scenario, _, states = run(mix)
    diffs = diff_scenario(scenario, make_backend("numpy", "float64"))
    assert {d.round for d in diffs} == {s.round for s in states} and max(d.max_abs for d in diffs) <= 1e-12
