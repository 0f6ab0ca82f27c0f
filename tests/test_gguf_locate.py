"""Where an engine weight cell lies in its GGUF file (`locate`, behind the weights browser's quantisation block),
as a property over the cells of every parameter: the located element of the stored tensor, dequantized here by
gguf-py from the file's raw bytes, is the engine's value, and the located block holds it. The files lay their
tensors out otherwise than the engine: Qwen3.5's attn_q holds each head's query rows then its gate's, its Gated
DeltaNet's value heads are tiled, a llama file's q/k rows are permuted, deepseek2 splits kv_b per head and keeps its
rope columns on interleaved pairs, and Gemma 4's per-layer embedding is kept as stored, not transposed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize

from engine.loading.checkpoint import load_checkpoint

FIXTURES = Path(__file__).parent / "fixtures"
QWEN35S = ("gguf-qwen3_5/qwen35-q8_0.gguf", "gguf-qwen3_5_moe/qwen35moe-q8_0.gguf")


def stored_tables(path: Path) -> dict[str, np.ndarray]:
    """Each tensor dequantized from its raw bytes as [rows, row length] (a vector: one row; merged experts: expert ·
    rows + row), the rows that its quantisation blocks run along."""
    return {tensor.name: dequantize(tensor.data, tensor.tensor_type).reshape(-1, int(tensor.shape[0]))
            for tensor in gguf.GGUFReader(path).tensors}


def as_stored(tensor: str, value: float, fixture: str) -> float:
    """What llama.cpp's converter writes for the engine's `value` of `tensor`: Qwen3.5's norm gains as 1 + w (but
    Gated DeltaNet's ssm_norm), its ssm_a as −exp(A_log); the rest as it is."""
    if fixture in QWEN35S and tensor.endswith("norm.weight") and ".ssm_norm." not in tensor:
        return value + 1
    if tensor.endswith(".ssm_a"):
        return -np.exp(value)
    return value


def cells(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every element of a vector; of a matrix, every column of its row a third in (each head's, each block's) and
    every row of its last column."""
    if len(shape) == 1:
        return [(i,) for i in range(shape[0])]
    rows, cols = shape
    return [(rows // 3, col) for col in range(cols)] + [(row, cols - 1) for row in range(rows)]


@pytest.mark.parametrize("fixture", [*QWEN35S, "gguf-mixed-llama/mixed.gguf", "gguf-deepseek2/model.gguf",
                                     "gguf-gemma4/gemma4-q8_0.gguf", "gguf-lfm2/lfm2.q8_0.gguf"])
def test_the_located_element_and_block_hold_the_engines_value(fixture):
    scenario = load_checkpoint(FIXTURES / fixture, ids=[1, 2])
    weights, quantisation = scenario.weights, scenario.weights.quantisation
    tables, wrong = stored_tables(FIXTURES / fixture), []
    for name, shape in weights.shapes.items():
        engine = np.asarray(weights[name])
        for index in cells(shape):
            tensor, row, col = quantisation.model.locate(name, index, quantisation.spec)
            if tables[tensor][row, col] != pytest.approx(as_stored(tensor, engine[index], fixture), rel=1e-9):
                wrong.append((name, index, (tensor, row, col)))
                continue
            block = quantisation.block(name, index)
            if block is None:
                assert quantisation.kind(name) in ("F32", "F16"), name
                continue
            assert (block.tensor, block.row, block.start + block.index) == (tensor, row, col), (name, index)
            assert block.values[block.index] == engine[index], (name, index)
    assert not wrong, f"cells located wrong: {dict(Counter(name for name, *_ in wrong))}, e.g. {wrong[:2]}"


def test_the_fixtures_quantize_the_matrices_whose_layout_differs():
    """The blocks above are checked where the layouts differ: Qwen3.5's gated attention and Gated DeltaNet
    projections, a llama file's q/k are quantized (deepseek2's file is F32: its rows are too short for a block)."""
    for fixture, names in [(QWEN35S[0], ["blocks.2.attn.wq", "blocks.2.attn.wgate", "blocks.0.linear_attn.w_qkv",
                                         "blocks.0.linear_attn.w_z", "blocks.0.linear_attn.w_out"]),
                           ("gguf-mixed-llama/mixed.gguf", ["blocks.0.attn.wq", "blocks.0.attn.wk"])]:
        quantisation = load_checkpoint(FIXTURES / fixture, ids=[1]).weights.quantisation
        assert all(quantisation.kind(name) not in ("F32", "F16") for name in names), fixture
