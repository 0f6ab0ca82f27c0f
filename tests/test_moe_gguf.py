"""Sparse GGUFs as llama.cpp's converter writes them (tools/make_moe_gguf_fixtures.py): gpt-oss with MXFP4 experts and
qwen3moe with Q8_0 experts in merged ffn_*_exps tensors, against transformers' true float64 forward on the weights
the files decode to (every pass); cached equal to the full recompute; an expert dequantized only once a token uses
it; the keys and settings llama.cpp runs otherwise refused by name."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import gguf_bytes as gb
import numpy as np
import pytest
from said import refused
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
from test_gpt_oss import assert_matches_transformers, rounds, yarn_divisors

from engine import Session, make_backend, to_host
from engine.compare.diff import diff_scenario
from engine.loading import ScenarioError
from engine.loading.checkpoint import load_checkpoint
from engine.loading.gguf_model import GGUFModel

FIXTURES = Path(__file__).parent / "fixtures"
ARCHS = {"gpt-oss": "MXFP4", "qwen3moe": "Q8_0"}


def path(arch: str) -> Path:
    return FIXTURES / f"gguf-{arch}" / "model.gguf"


@functools.cache
def fixture(arch: str):
    ref = dict(np.load(path(arch).parent / "reference.npz"))
    scenario = load_checkpoint(path(arch), ids=[int(t) for t in ref["ids"]], max_new_tokens=len(ref["greedy_ids"]))
    session = Session(scenario, make_backend("numpy", "float64"))
    return ref, scenario, session, list(session.steps())


@pytest.mark.parametrize("arch", ARCHS)
def test_the_files_hold_merged_quantized_experts_as_llama_cpps_converter_writes_them(arch):
    model = GGUFModel(path(arch))
    assert model.arch == arch
    for name in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
        info = model.tensors[f"blk.0.{name}.weight"]
        assert info.kind is GGMLQuantizationType[ARCHS[arch]] and info.shape[0] == 8  # the experts first
    assert ("blk.0.attn_sinks.weight" in model.tensors) == (arch == "gpt-oss")
    assert ("blk.0.ffn_gate_exps.bias" in model.tensors) == (arch == "gpt-oss")


@pytest.mark.parametrize("arch", ARCHS)
def test_every_pass_routes_and_computes_as_transformers_on_the_decoded_weights(arch):
    ref, scenario, session, states = fixture(arch)
    assert ref["float32_ops"] == 0 and all(block.ffn == "moe" for block in scenario.model.blocks)
    assert_matches_transformers(ref, states, session.results[0].generated)


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_decode_equals_the_full_recompute(arch):
    _, scenario, _, states = fixture(arch)
    diffs = diff_scenario(scenario, make_backend("numpy", "float64"))
    assert {d.round for d in diffs} == set(rounds(states)) and max(d.max_abs for d in diffs) <= 1e-12


def test_gpt_oss_runs_as_llama_cpp_does_its_limit_7_sliding_even_layers_and_a_truncated_yarn_ramp():
    _, scenario, _, states = fixture("gpt-oss")
    model = scenario.model
    assert model.moe.clamp == (1.702, 7.0) and model.attn_sinks and [b.window for b in model.blocks] == [4, None]
    gates = np.concatenate([to_host(s.values).ravel() for s in states if s.op.hook.name == "hook_pre"])
    assert (gates > 7).any()  # the clamp changes something
    params = {"rope_theta": 150000.0, "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
              "beta_slow": 1.0}
    divisors = np.array(model.blocks[0].rope_divisors)
    assert np.abs(divisors - yarn_divisors(params, 8, truncate=True)).max() <= 1e-12
    assert np.abs(divisors - yarn_divisors(params, 8, truncate=False)).max() > 1  # transformers' gpt-oss differs
    assert model.rope_scale == pytest.approx(1 + 0.1 * math.log(32), abs=1e-15)


# -- lazy experts -------------------------------------------------------------------------------------------------
def test_only_the_experts_a_token_uses_are_dequantized():
    ref, scenario, _, _ = fixture("gpt-oss")
    one = load_checkpoint(path("gpt-oss"), ids=[int(ref["ids"][0])], max_new_tokens=1)
    assert not [n for n in one.weights.cache.kept() if ".experts." in n]  # opening reads none
    states = list(Session(one, make_backend("numpy", "float64")).steps())
    used = {f"blocks.{s.layer}.mlp.experts.{int(e)}" for s in states if s.op.hook.name == "hook_topk"
            for e in to_host(s.values).ravel()}
    read = {n.rsplit(".", 1)[0] for n in one.weights.cache.kept() if ".experts." in n}
    assert read == used and len(used) < 2 * scenario.model.moe.n_experts


@pytest.mark.parametrize("arch", ARCHS)
def test_one_experts_slice_dequantizes_as_gguf_py_does_the_whole_tensor(arch):
    model = GGUFModel(path(arch))
    name = "blk.1.ffn_down_exps.weight"
    info = model.tensors[name]
    whole = dequantize(model.file.tensor_bytes(info), info.kind).reshape(info.shape)
    for expert in (0, 5):
        assert np.array_equal(model.dequantized(name, np.float64, expert), whole[expert])


def test_the_weights_browser_finds_an_experts_value_in_its_quantization_block():
    _, scenario, _, _ = fixture("gpt-oss")
    name = "blocks.1.mlp.experts.5.w_down"
    block = scenario.weights.quantisation.block(name, (3, 7))  # [in, out]: row 3 of f, column 7 of d
    assert block is not None and scenario.weights.quantisation.kind(name) == "MXFP4"
    assert block.values[block.index] == scenario.weights[name][3, 7] and block.row == 5 * 32 + 7 and block.start == 0


# -- refused by name ------------------------------------------------------------------------------------------------
def edited(tmp_path: Path, arch: str, key: str, kind: int, value) -> Path:
    parsed = gb.parse(path(arch).read_bytes())
    parsed.set(key, kind, value)
    out = tmp_path / f"{arch}.gguf"
    out.write_bytes(gb.serialize(parsed))
    return out


@pytest.mark.parametrize("arch, key, kind, value", [
    ("gpt-oss", "gpt-oss.expert_shared_count", gb.UINT32, 1),
    ("qwen3moe", "qwen3moe.expert_weights_scale", gb.FLOAT32, 2.5),
    ("qwen3moe", "qwen3moe.leading_dense_block_count", gb.UINT32, 1),
    ("gpt-oss", "gpt-oss.rope.scaling.yarn_ext_factor", gb.FLOAT32, 0.5),
    ("gpt-oss", "gpt-oss.expert_used_count", gb.UINT32, 9),
    ("gpt-oss", "gpt-oss.rope.scaling.type", gb.STRING, "longrope"),
])
def test_a_setting_it_does_not_run_as_llama_cpp_does_is_refused_naming_its_key(tmp_path, arch, key, kind, value):
    with refused(ScenarioError, key.replace(".", r"\.")):
        load_checkpoint(edited(tmp_path, arch, key, kind, value), ids=[1, 2])



def test_a_budget_below_every_expert_but_above_what_a_token_uses_opens_the_file():
    from engine.loading.budget import resident_weight_bytes, weight_bytes

    _, scenario, _, _ = fixture("gpt-oss")
    model, vocab = scenario.model, len(scenario.vocab)
    every, used = weight_bytes(model, vocab, "float64"), resident_weight_bytes(model, vocab, "float64")
    expert = 8 * (3 * 32 * 32 + 2 * 32 + 32)  # float64 w_gate, w_up, w_down and their biases
    assert every - used == 2 * (8 - 2) * expert  # two layers, 6 of 8 experts a token does not use
    assert load_checkpoint(path("gpt-oss"), ids=[1, 2], max_memory=(every + used) // 2).model.moe
    with refused(ScenarioError, "--max-memory"):
        load_checkpoint(path("gpt-oss"), ids=[1, 2], max_memory=used - 1)
