"""TransformerLens parity and transformers through `record_hf`: dumps written once by
tools/make_tl_dumps.py (TL 4 and transformers 5 in float64) and committed under tests/fixtures/tl-*/.

run_with_cache.safetensors is TL's own `run_with_cache` on the prompt, keyed as TL keys it (bridge keys
and batch axis included); hf_generation.safetensors is transformers' greedy generation, prompt + 4
decode rounds with every layer's KV cache, recorded by forward hooks. The prompt ids are in each file's
metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from engine.compare.against import compare_generation
from engine.loading.checkpoint import load_checkpoint
from tinyllm_tui.presentation.against_words import report_lines

FIXTURES = Path(__file__).parent / "fixtures"
# TL's Llama bridge runs transformers' RMSNorm, which computes in float32 (~2e-6 here); GPT-2 is float64 throughout
GOALS = {"gpt2": 1e-9, "llama": 1e-5}


def compare(model: str, dump: str, new_tokens: int, tolerance: float):
    path = FIXTURES / f"tl-{model}" / dump
    with safe_open(str(path), framework="numpy") as file:
        ids = json.loads(file.metadata()["ids"])
    scenario = load_checkpoint(FIXTURES / model, ids=ids, max_new_tokens=new_tokens)
    return compare_generation(scenario, path, atol=tolerance)


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_transformer_lens_run_with_cache_agrees_on_every_shared_operator(model):
    report = compare(model, "run_with_cache.safetensors", 1, GOALS[model])
    assert report.first_divergence is None, report_lines(report, "en")[1]
    assert not report.unused  # every key is an operator of ours or one of TL's bridge keys
    names = {op.key.name for op in report.ops}
    # TL's meanings: the norm's divisor and its value before the affine, scores masked as −1.797e308
    assert {"blocks.0.ln1.hook_scale", "blocks.1.ln2.hook_normalized", "ln_final.hook_normalized",
            "blocks.1.hook_resid_pre", "blocks.0.attn.hook_attn_scores", "blocks.1.attn.hook_z"} <= names
    assert {"prefill.blocks.0.attn.hook_in", "prefill.blocks.0.attn.q.hook_out"} <= set(report.bridge)
    assert sum(line.startswith("TransformerLens bridge keys") for line in report_lines(report, "en")) == 1


def test_transformer_lens_llama_drift_is_transformers_float32_rmsnorm():
    """Not float64 agreement: at 1e-9 TL's Llama leaves us at its first norm (it computes in float32)."""
    report = compare("llama", "run_with_cache.safetensors", 1, 1e-9)
    assert report.first_divergence is not None
    assert 1e-7 < max(op.max_abs for op in report.ops) < 1e-5


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_transformers_generation_through_record_hf_agrees_over_every_pass_and_cache(model):
    report = compare(model, "hf_generation.safetensors", 5, 1e-9)  # Llama patched to pure float64 there
    assert report.first_divergence is None, report_lines(report, "en")[1]
    assert {op.key.pass_ for op in report.ops} == {"prefill", "decode.1", "decode.2", "decode.3", "decode.4"}
    names = {op.key.name for op in report.ops if op.key.pass_ == "decode.4"}
    assert {"blocks.1.attn.cache_k", "blocks.1.attn.cache_v", "blocks.0.attn.hook_pattern", "unembed.hook_out"} <= names
