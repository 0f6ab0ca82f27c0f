"""Every GGUF tensor type: read from a file by GGUFFile/GGUFModel equals gguf-py's own dequantization
of the same bytes; types gguf-py cannot dequantize are refused naming the tensor and the type.

One file holds a 3×512 tensor of every type. Where gguf-py can quantize, the bytes are its
quantization of known floats (and the values read back are checked against those floats too);
elsewhere they are random bytes below 0x70, so that no float16/bfloat16 scale is Inf or NaN.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from said import refused
from gguf import GGMLQuantizationType as T

from engine.loading.document import ScenarioError
from engine.loading.gguf_file import GGUFFile
from engine.loading import gguf_blocks
from engine.loading.gguf_model import GGUFModel, dequantizable

SHAPE = (3, 512)  # 512: a whole number of blocks of every type
QUANTIZES = {T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.TQ1_0, T.TQ2_0, T.MXFP4}
CLOSE = {T.F32: 0, T.F16: 1e-3, T.BF16: 1e-2, T.Q8_0: 0.02, T.Q5_0: 0.1, T.Q5_1: 0.1, T.Q4_0: 0.2, T.Q4_1: 0.2,
         T.MXFP4: 0.5}  # max |read - original| for values in [-1, 1) (the ternary types only keep signs)
ORIGINAL = np.random.default_rng(0).uniform(-1, 1, SHAPE).astype(np.float32)


def raw_bytes(kind: T) -> np.ndarray:
    if kind in QUANTIZES:
        data = gguf.quants.quantize(ORIGINAL, kind)
        return data if kind in (T.F32, T.F16) else data.view(np.uint8)
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return np.random.default_rng(int(kind)).integers(0, 0x70, (SHAPE[0], SHAPE[1] // block * size), dtype=np.uint8)


@pytest.fixture(scope="module")
def every_type(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("types") / "types.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for kind in T:
        data = raw_bytes(kind)
        writer.add_tensor(kind.name, data, raw_dtype=None if kind in (T.F32, T.F16) else kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_table_matches_gguf_pys_reader(every_type):
    ours = GGUFFile(every_type).tensors
    for tensor in gguf.GGUFReader(every_type).tensors:
        info = ours[tensor.name]
        assert info.kind == tensor.tensor_type and info.offset == tensor.data_offset
        assert info.shape == tuple(int(n) for n in reversed(tensor.shape)) == SHAPE
        assert info.nbytes == tensor.n_bytes


@pytest.mark.parametrize("kind", sorted(dequantizable(), key=int), ids=lambda kind: kind.name)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("rows_at_a_time", [None, 1])
def test_each_type_reads_as_gguf_py_dequantizes_it(every_type, kind, dtype, rows_at_a_time, monkeypatch):
    if rows_at_a_time:  # the tensor read in several chunks of rows
        monkeypatch.setattr(gguf_blocks, "CHUNK", rows_at_a_time * SHAPE[1])
    read = GGUFModel(every_type).dequantized(kind.name, dtype)
    expected = gguf.quants.dequantize(raw_bytes(kind), kind)
    assert read.dtype == dtype and read.shape == SHAPE
    np.testing.assert_array_equal(read, expected.astype(dtype))
    assert np.isfinite(read).all()
    if kind in CLOSE:
        assert np.abs(read - ORIGINAL).max() <= CLOSE[kind]


@pytest.mark.parametrize("kind", sorted(set(T) - dequantizable(), key=int), ids=lambda kind: kind.name)
def test_a_type_gguf_py_lacks_is_refused_by_name(every_type, kind):
    with refused(ScenarioError, f"tensor type {kind.name} cannot be dequantized by gguf-py") as error:
        GGUFModel(every_type).stand_in(kind.name)
    assert error.value.path == kind.name


def test_the_eight_common_types_and_the_iq_types_are_read():
    names = {kind.name for kind in dequantizable()}
    assert {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1", "Q8_0", "BF16", "IQ4_XS", "IQ2_XXS"} <= names
