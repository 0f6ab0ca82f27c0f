"""The quantisation view: for a weight, its block's type, scales/mins and integer codes, checked
against gguf-py's dequantization (every decoded value is scale · code + offset) and, through a
checkpoint, against the very weight the engine computes with (transposed, q/k rows unpermuted)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from engine.loading.checkpoint import load_checkpoint
from engine.loading.edits import CellEdit, apply_edit
from engine.loading.gguf_blocks import DECODERS, block_of

FIXTURES = Path(__file__).parent / "fixtures"
SHAPE = (4, 512)
CODE_RANGES = {"Q4_0": (-8, 7), "Q4_1": (0, 15), "Q5_0": (-16, 15), "Q5_1": (0, 31), "Q8_0": (-128, 127),
               "Q2_K": (0, 3), "Q3_K": (-4, 3), "Q4_K": (0, 15), "Q5_K": (0, 31), "Q6_K": (-32, 31), "MXFP4": (-12, 12)}
CELLS = [(0, 0), (1, 37), (2, 300), (3, 511)]


def raw_rows(kind: T) -> np.ndarray:
    """gguf-py's quantization of known floats where it has one, else random bytes (no Inf/NaN scales)."""
    rng = np.random.default_rng(int(kind))
    if kind.name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
        return gguf.quants.quantize(rng.uniform(-1, 1, SHAPE).astype(np.float32), kind)
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return rng.integers(0, 0x70, (SHAPE[0], SHAPE[1] // block * size), dtype=np.uint8)


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_scale_times_code_plus_offset_is_gguf_pys_value(name):
    kind = T[name]
    rows = raw_rows(kind)
    full = gguf.quants.dequantize(rows, kind)
    size = gguf.GGML_QUANT_SIZES[kind][0]
    seen = set()
    for row, col in CELLS:
        block = block_of("t", kind, rows, row, col)
        assert block.kind == name and block.start == col // size * size and block.index == col % size
        np.testing.assert_array_equal(block.values, full[row, block.start:block.start + size])
        np.testing.assert_allclose(block.scale * block.codes + block.offset, block.values, rtol=1e-6, atol=1e-7)
        low, high = CODE_RANGES[name]
        assert block.codes.min() >= low and block.codes.max() <= high
        assert block.fields["d"] != 0 and len(block.codes) == size
        seen.update(block.codes.tolist())
    assert len(seen) >= min(high - low + 1, len(CELLS) * size) // 2  # spread codes, not one value repeated


def test_types_without_a_decoder_show_values_and_unquantized_ones_no_block():
    rows = raw_rows(T.IQ4_NL)
    block = block_of("t", T.IQ4_NL, rows, 1, 40)
    np.testing.assert_array_equal(block.values, gguf.quants.dequantize(rows, T.IQ4_NL)[1, 32:64])
    assert block.codes is None and block.kind == "IQ4_NL"
    assert block_of("t", T.F32, np.zeros((2, 16), np.uint8), 0, 1) is None


@pytest.mark.parametrize("fixture", ["gguf-mixed-llama/mixed.gguf", "gguf-mixed-qwen2/mixed.gguf"])
def test_a_weights_block_holds_the_very_value_the_engine_uses(fixture):
    scenario = load_checkpoint(FIXTURES / fixture, prompt="The cat", dtype="float32")
    kinds = set()
    for name, shape in scenario.weights.shapes.items():
        if len(shape) == 1:
            continue
        for index in [(0, 0), (shape[0] - 1, shape[1] - 1), (shape[0] // 3, shape[1] // 2 + 1)]:
            block = scenario.weights.quantisation.block(name, index)
            assert block.values[block.index] == scenario.weights[name][index], (name, index)
            assert block.scale[block.index] * block.codes[block.index] + block.offset[block.index] == \
                pytest.approx(float(scenario.weights[name][index]), rel=1e-6, abs=1e-7)
            kinds.add(block.kind)
    assert kinds == {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1", "Q8_0"}
    assert scenario.weights.quantisation.block("ln_final.w", (3,)) is None  # F32: nothing quantized
    assert scenario.weights.quantisation.kind("blocks.0.attn.wq") == ("Q2_K" if "llama" in fixture else "Q5_0")
    edited = apply_edit(scenario.weights, CellEdit("embed", (0, 0), 1.0))
    assert edited.quantisation is scenario.weights.quantisation  # an edit still shows the file's blocks


def test_a_block_reads_as_lines_with_the_cursors_code_marked():
    from tinyllm_tui.presentation.quantisation import block_lines

    codes = np.arange(32, dtype=np.int8) - 16  # a hand-made Q8_0 block: d = 0.5, codes −16…15
    block_bytes = np.concatenate([np.array([0.5], dtype="<f2").view(np.uint8), codes.view(np.uint8)])
    rows = np.concatenate([block_bytes, block_bytes])[None, :]  # one row of two blocks
    lines = block_lines(block_of("blk.0.attn_q.weight", T.Q8_0, rows, 0, 37))  # the 6th value of the 2nd block
    assert lines[0] == "Q8_0 block at blk.0.attn_q.weight[0, 32–63] · d 0.5"
    assert lines[1] == "value 5: 0.5 × code -11 + 0 = -5.500000"
    assert lines[2] == "codes   -15 -14 -13 -12 [-11] -10 -9 -8"
    assert lines[3].startswith("values  -7.500000 -7.000000") and "[-5.500000]" in lines[3]
    iq = block_lines(block_of("t", T.IQ4_NL, raw_rows(T.IQ4_NL), 0, 3))
    assert iq[1] == "codes   (not decoded for IQ4_NL: its values only)" and len(iq) == 3


def test_a_block_reads_in_chinese_in_the_zh_weights_browser():
    """The weights browser shows the block in the view's language (it was English in the zh TUI too)."""
    from tinyllm_tui.presentation.numbers import display_width
    from tinyllm_tui.presentation.quantisation import block_lines

    codes = np.arange(32, dtype=np.int8) - 16  # as above: d = 0.5, codes −16…15, the 6th value of the 2nd block
    block_bytes = np.concatenate([np.array([0.5], dtype="<f2").view(np.uint8), codes.view(np.uint8)])
    lines = block_lines(block_of("blk.0.attn_q.weight", T.Q8_0, np.concatenate([block_bytes, block_bytes])[None, :], 0,
                                 37), "zh")
    assert lines[0] == "Q8_0 块，位于 blk.0.attn_q.weight[0, 32–63] · d 0.5"
    assert lines[1] == "值 5：0.5 × 编码 -11 + 0 = -5.500000"
    assert lines[2] == "编码    -15 -14 -13 -12 [-11] -10 -9 -8"
    assert display_width(lines[2][:lines[2].index("-")]) == 8  # the label padded by display cells, as in English
    assert lines[3].startswith("值      -7.500000 -7.000000")
    iq = block_lines(block_of("t", T.IQ4_NL, raw_rows(T.IQ4_NL), 0, 3), "zh")
    assert iq[1] == "编码    （IQ4_NL 的编码未解码：只有值）"
    assert not any(word in line for line in lines + iq for word in ("block", "value", "code", "decoded"))


async def test_the_weights_browser_shows_the_block_under_the_cursor():
    """The title names the tensor's type; below the grid, the block of the cell under the cursor."""
    from tui_helpers import screen_text, settle

    from tinyllm_tui.presentation.numbers import format_number
    from tinyllm_tui.tui.app import DebuggerApp

    scenario = load_checkpoint(FIXTURES / "gguf-mixed-llama" / "mixed.gguf", prompt="The cat")
    app = DebuggerApp(scenario, lang="en")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)  # a checkpoint's first screen comes before its round is listed: w waits for that
        await pilot.press("w")  # the browser opens on the first parameter, the embedding, at [0, 0]
        await pilot.press("down", "right", "right")
        await pilot.pause()
        text = screen_text(app)
        assert "embed · " in text and " · Q8_0" in text
        assert "Q8_0 block at token_embd.weight[1, 0–31]" in text
        value = format_number(float(scenario.weights["embed"][1, 2]))
        assert "value 2: " in text and f"= {value}" in text


@pytest.mark.parametrize("fixture", ["gguf-gpt-oss/model.gguf", "gpt_oss_mxfp4"])
def test_an_mxfp4_experts_block_holds_the_very_value_the_engine_uses(fixture):
    """gpt-oss's experts, MXFP4 in a GGUF file or in a Hugging Face folder (repacked as ggml's blocks): the block of
    every corner of each expert matrix holds the engine's value as its e8m0 scale times its code."""
    scenario = load_checkpoint(FIXTURES / fixture, ids=[1, 2])
    quantisation, seen = scenario.weights.quantisation, set()
    for name in (f"blocks.{layer}.mlp.experts.{e}.{w}" for layer in (0, 1) for e in (0, 5) for w in
                 ("w_gate", "w_up", "w_down")):
        shape = scenario.weights.shapes[name]
        assert quantisation.kind(name) == "MXFP4"
        for index in [(0, 0), (shape[0] - 1, shape[1] - 1), (shape[0] // 3, shape[1] // 2 + 1)]:
            block = quantisation.block(name, index)
            i, value = block.index, float(scenario.weights[name][index])
            assert block.values[i] == value and block.scale[i] * block.codes[i] == value, (name, index)
            assert block.fields["d"] == 2.0 ** (block.fields["e8m0"] - 128)
            seen.update(block.codes.tolist())
    assert seen <= set(range(-12, 13)) and len(seen) > 8
