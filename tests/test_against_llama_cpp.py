"""check --against-llama-cpp: llama.cpp's own evaluation (llama-cpp-python's cb_eval) in the dump layout.

A float32 copy of the tiny GGUF fixture (every tensor dequantized by gguf-py) run with a float32 KV
cache must agree with the float64 reference within float32 rounding over the prompt and 2 decode
rounds: that checks every conversion (the q/k row permutation undone, the transposed V cache, the
scores' scale and mask, the pass positions). The quantized fixture itself then drifts from the first
quantized matrix product on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (an optional extra that builds "
                    "llama.cpp from source, ~18 min on 2 cores: see NOTES-stack.md)")

import gguf  # noqa: E402

from engine.compare.llama_cpp import compare_with_llama_cpp  # noqa: E402
from engine.loading import open_model  # noqa: E402

TINY = Path(__file__).parent / "fixtures" / "tiny-gguf" / "tiny.gguf"
IDS = [1, 5, 9, 13, 40]


def float32_copy(source: Path, target: Path) -> Path:
    """The same GGUF (metadata copied field by field) with every tensor dequantized to float32."""
    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(target), reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if not name.startswith("GGUF.") and name != "general.architecture":
            writer.add_key_value(name, field.contents(), field.types[0],
                                 sub_type=field.types[1] if len(field.types) > 1 else None)
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        writer.add_tensor(tensor.name, np.ascontiguousarray(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def test_a_float32_gguf_agrees_within_float32_rounding_over_every_pass(tmp_path):
    path = float32_copy(TINY, tmp_path / "tiny32.gguf")
    report = compare_with_llama_cpp(open_model(path, ids=IDS, max_new_tokens=3), path, float32_cache=True)
    assert report.first_divergence is None, report.lines()[1]
    assert {op.key.pass_ for op in report.ops} == {"prefill", "decode.1", "decode.2"}
    names = {op.key.name for op in report.ops if op.key.pass_ == "decode.2"}
    assert {"blocks.0.attn.hook_q", "blocks.1.attn.hook_rot_k", "blocks.1.attn.cache_k", "blocks.0.attn.cache_v",
            "blocks.1.attn.hook_attn_scores", "blocks.1.attn.hook_pattern", "blocks.0.attn.hook_z",
            "blocks.1.ln2.hook_normalized", "ln_final.hook_out", "unembed.hook_out"} <= names
    assert 1e-8 < max(op.max_abs for op in report.ops) < 1e-5  # float32 rounding, nothing more


def test_the_quantized_gguf_drifts_from_its_first_quantized_matrix_product():
    report = compare_with_llama_cpp(open_model(TINY, ids=IDS, max_new_tokens=2), TINY)
    first = report.first_divergence
    assert (first.key.pass_, first.key.name) == ("prefill", "blocks.0.attn.hook_q")  # attn_q is Q4_0
    before = [op for op in report.ops if op.step < first.step]
    assert {op.key.name for op in before} == {"hook_embed", "blocks.0.ln1.hook_normalized", "blocks.0.ln1.hook_out"}
    assert all(op.agrees for op in before)
    caches = {op.dtype for op in report.ops if op.key.name.endswith(("cache_k", "cache_v"))}
    assert caches == {"float16"}  # llama.cpp's default KV cache, held to float16's tolerance
