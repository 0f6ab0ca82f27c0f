"""gpt-oss as the Hub ships it (tools/make_gptoss_mxfp4_fixture.py): experts stored as MXFP4 `_blocks` / `_scales` in
two bfloat16 safetensors shards, `quantization_config.quant_method: mxfp4`. Against transformers' true float64
forward of the model it loads with its own MXFP4 dequantization (every pass's router logits, chosen experts, layers
and logits; greedy ids), cached equal to the full recompute, an expert's values as transformers dequantizes them, the
repacked bytes as llama.cpp's converter writes them, and only the experts a token uses dequantized."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
from safetensors import safe_open
from test_gpt_oss import assert_matches_transformers, fixture, rounds

from engine import Session, make_backend, to_host
from engine.compare.diff import diff_scenario
from engine.loading import hf_mxfp4
from engine.loading.checkpoint import load_checkpoint

FOLDER = Path(__file__).parent / "fixtures" / "gpt_oss_mxfp4"
LAYER_1 = "model.layers.1.mlp.experts"


def stored() -> dict[str, tuple[str, list[int]]]:
    """Every tensor of the folder's shards: (dtype, shape)."""
    shards = set(json.loads((FOLDER / "model.safetensors.index.json").read_text())["weight_map"].values())
    held = {}
    for shard in shards:
        with safe_open(FOLDER / shard, framework="numpy") as file:
            held |= {name: (file.get_slice(name).get_dtype(), file.get_slice(name).get_shape()) for name in file.keys()}
    return held


def raw(name: str) -> np.ndarray:
    shard = json.loads((FOLDER / "model.safetensors.index.json").read_text())["weight_map"][name]
    with safe_open(FOLDER / shard, framework="numpy") as file:
        return file.get_tensor(name)


def test_the_folder_is_stored_as_the_hubs_gpt_oss_checkpoints_are():
    config = json.loads((FOLDER / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "mxfp4" and config["model_type"] == "gpt_oss"
    held = stored()
    assert held[f"{LAYER_1}.gate_up_proj_blocks"] == ("U8", [8, 128, 2, 16])  # experts × 2f rows × d/32 × 16 bytes
    assert held[f"{LAYER_1}.gate_up_proj_scales"] == ("U8", [8, 128, 2])
    assert held[f"{LAYER_1}.down_proj_blocks"] == ("U8", [8, 64, 2, 16]) and f"{LAYER_1}.down_proj" not in held
    assert {dtype for name, (dtype, _) in held.items() if not name.endswith(("_blocks", "_scales"))} == {"BF16"}


def test_every_pass_routes_and_computes_as_transformers_and_greedy_ids_agree():
    ref, scenario, session, states = fixture(FOLDER)
    assert ref["float32_ops"] == 0 and ref["ops"] > 1000 and scenario.model.moe.n_experts == 8
    for probs in (ref["probs"], ref["step_probs"]):  # the reference sits on no near tie
        ordered = -np.sort(-probs, axis=-1)
        assert (ordered[..., 1] - ordered[..., 2]).min() >= 1e-3
    assert rounds(states) == list(range(len(ref["step_logits"])))
    assert_matches_transformers(ref, states, session.results[0].generated)


def test_cached_decode_equals_the_full_recompute():
    _, scenario, _, states = fixture(FOLDER)
    diffs = diff_scenario(scenario, make_backend("numpy", "float64"))
    assert {d.round for d in diffs} == set(rounds(states)) and max(d.max_abs for d in diffs) <= 1e-12


def test_an_expert_reads_as_transformers_dequantizes_it_gate_and_up_interleaved():
    ref, scenario, _, _ = fixture(FOLDER)
    base = f"blocks.{int(ref['sample_layer'])}.mlp.experts.{int(ref['sample_expert'])}"
    gate_up = ref["gate_up_expert"]  # transformers' parameter: d × 2f, gate even columns, up odd
    assert np.array_equal(scenario.weights[f"{base}.w_gate"], gate_up[:, 0::2])
    assert np.array_equal(scenario.weights[f"{base}.w_up"], gate_up[:, 1::2])
    assert np.array_equal(scenario.weights[f"{base}.w_down"], ref["down_expert"])
    assert len(np.unique(gate_up)) > 16  # more than one block's scale: the blocks are told apart


def test_the_repacked_blocks_are_the_bytes_llama_cpps_converter_writes_to_a_gguf():
    ref, scenario, _, _ = fixture(FOLDER)
    layer, expert = int(ref["sample_layer"]), int(ref["sample_expert"])
    blocks, scales = raw(f"{LAYER_1}.gate_up_proj_blocks")[expert], raw(f"{LAYER_1}.gate_up_proj_scales")[expert]
    assert layer == 1
    gate = hf_mxfp4.ggml_blocks(blocks[0::2], scales[0::2]).reshape(64, -1)
    assert np.array_equal(gate, ref["converter_gate"])
    down = hf_mxfp4.ggml_blocks(raw(f"{LAYER_1}.down_proj_blocks")[expert], raw(f"{LAYER_1}.down_proj_scales")[expert])
    assert np.array_equal(down.reshape(64, -1), ref["converter_down"])
    from_gguf = dequantize(ref["converter_gate"], GGMLQuantizationType.MXFP4)  # gguf-py on the converter's bytes
    assert np.array_equal(scenario.weights[f"blocks.1.mlp.experts.{expert}.w_gate"], from_gguf.T)


def test_only_the_experts_a_token_uses_are_dequantized_one_expert_at_a_time(monkeypatch):
    asked, decoded = [], []
    load, repack = hf_mxfp4.Packed.load, hf_mxfp4.ggml_blocks
    monkeypatch.setattr(hf_mxfp4.Packed, "load", lambda self, key, expert: asked.append((key, expert))
                        or load(self, key, expert))
    monkeypatch.setattr(hf_mxfp4, "ggml_blocks", lambda blocks, scales: decoded.append(blocks.shape)
                        or repack(blocks, scales))
    ref = dict(np.load(FOLDER / "reference.npz"))
    one = load_checkpoint(FOLDER, ids=[int(ref["ids"][0])], max_new_tokens=1)
    assert asked == decoded == []  # opening dequantizes nothing
    states = list(Session(one, make_backend("numpy", "float64")).steps())
    used = {(s.layer, int(e)) for s in states if s.op.hook.name == "hook_topk" for e in to_host(s.values).ravel()}
    assert {(int(key.split(".")[1]), expert) for key, expert in asked} == used and len(used) == 4
    # one expert's bytes each time, gate_up_proj once for both its gate and up projections, down_proj once
    assert sorted(decoded) == sorted([(128, 2, 16), (64, 2, 16)] * len(used))


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # the OCP MX spec's FP4 magnitudes; the nibble's high bit is the sign


def decoded(byte_row: np.ndarray, scale: int) -> tuple[list[int], np.ndarray]:
    """One Hugging Face MXFP4 block (16 bytes, value 2k in byte k's low nibble, 2k + 1 in its high one; one e8m0
    scale byte, 2^(scale − 127)) decoded from the spec: each value's FP4 number doubled (ggml's integer code), and
    the values."""
    nibbles = [n for byte in byte_row.tolist() for n in (byte & 0xF, byte >> 4)]
    fp4 = [(-1 if n & 8 else 1) * E2M1[n & 7] for n in nibbles]
    return [int(2 * v) for v in fp4], np.array(fp4) * 2.0 ** (scale - 127)


async def test_the_weights_browser_shows_an_mxfp4_experts_block_under_the_cursor_as_for_a_gguf_file():
    """blocks.0.mlp.experts.1.w_up[37, 5]: gate_up_proj's row 2·5 + 1 of expert 1 (row 128 + 11 of the experts'
    rows), input 37, the 6th value of its second block; the title names MXFP4, the block shows its e8m0 scale byte,
    each value's code and the values, as decoded here from the file's bytes."""
    from tui_helpers import screen_text, settle

    from tinyllm_tui.presentation.numbers import format_number
    from tinyllm_tui.tui.app import DebuggerApp

    scenario = load_checkpoint(FOLDER, ids=[1, 2])
    name, (row, col) = "blocks.0.mlp.experts.1.w_up", (37, 5)
    blocks, scales = (raw(f"model.layers.0.mlp.experts.gate_up_proj_{part}") for part in ("blocks", "scales"))
    scale = int(scales[1, 11, 1])
    codes, values = decoded(blocks[1, 11, 1], scale)
    assert values[5] == scenario.weights[name][row, col] and len(set(codes)) > 4
    app = DebuggerApp(scenario, lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("w", "tab", *["down"] * list(scenario.weights).index(name), "enter")
        await pilot.press(*["down"] * row, *["right"] * col)
        await pilot.pause()
        text = screen_text(app)
    d = 2.0 ** (scale - 128)
    assert f"{name} · MXFP4" in text
    assert (f"MXFP4 block at model.layers.0.mlp.experts.gate_up_proj_blocks[139, 32–63] · e8m0 {scale} · d {d:.6g}"
            in text)
    assert f"value 5: {d:.6g} × code {codes[5]} + 0 = {format_number(values[5])}" in text
    assert "codes   " + " ".join(f"[{c}]" if k == 5 else str(c) for k, c in enumerate(codes[1:9], 1)) in text
    assert "values  " + " ".join(f"[{format_number(v)}]" if k == 5 else format_number(v)
                                 for k, v in enumerate(values[1:9], 1)) in text
