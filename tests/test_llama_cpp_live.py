"""check --against-llama-cpp for real: llama.cpp's own evaluation (llama-cpp-python's cb_eval) in the dump layout.

Runs only where llama-cpp-python is importable (CI skips it). Built for this file from the 0.3.36 sdist:

    python3 -m venv /work/llamaenv
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \\
        /work/llamaenv/bin/pip install llama_cpp_python-0.3.36.tar.gz        # ~35 min on 2 busy cores
    /work/llamaenv/bin/pip install -e '.[test]'
    /work/llamaenv/bin/pytest -q tests/test_llama_cpp_live.py

A float32 copy of each GGUF fixture (every tensor dequantized by gguf-py) run with a float32 KV cache must agree
with the float64 reference as closely as the engine's own float32 run does, over the prompt and 2 decode rounds,
with the same experts chosen for every token: that checks every conversion (q/k rows back from llama.cpp's pairs
where the converter permuted them — llama — and left alone where it did not — Qwen, gpt-oss —, the q/k norms, the
transposed V cache, the scores' scale, causal and sliding mask, gpt-oss's sink column, the biases, the experts'
weights). The quantized files themselves drift from their first quantized matrix product on, choosing the same
experts; a router row made a near copy of another (a tie of ~1e-9) is where llama.cpp's float32 first routes
otherwise, and the report names that token."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (an optional extra that builds "
                    "llama.cpp from source: see this module's docstring)")

import gguf  # noqa: E402

from engine import Session, make_backend, to_host  # noqa: E402
from engine.compare.llama_cpp import compare_with_llama_cpp, llama_cpp_dump  # noqa: E402
from engine.layout import Passes, parse_key  # noqa: E402
from engine.causes import Cause  # noqa: E402
from engine.loading import open_model  # noqa: E402
from tinyllm_tui.presentation.against_words import report_lines  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
FILES = {"llama": FIXTURES / "tiny-gguf" / "tiny.gguf", "qwen3": FIXTURES / "gguf-qwen3" / "qwen3.gguf",
         "qwen3moe": FIXTURES / "gguf-qwen3moe" / "model.gguf", "gpt-oss": FIXTURES / "gguf-gpt-oss" / "model.gguf"}
IDS = [1, 5, 9, 13, 40]
SEEN = {"blocks.0.attn.hook_q", "blocks.0.attn.hook_rot_k", "blocks.0.attn.cache_k", "blocks.0.attn.cache_v",
        "blocks.0.attn.hook_attn_scores", "blocks.0.attn.hook_pattern", "blocks.0.attn.hook_z",
        "blocks.0.ln1.hook_normalized", "blocks.0.ln2.hook_normalized", "ln_final.hook_out", "unembed.hook_out"}
MOE = {"blocks.1.mlp.hook_router_logits", "blocks.1.mlp.hook_topk", "blocks.1.mlp.hook_topk_weights",
       "blocks.1.hook_mlp_out"}

CACHED = {"hook_rot_k": "cache_k", "hook_v": "cache_v"}  # what each cache holds


def float32_copy(source: Path, target: Path, change=lambda name, values: values) -> Path:
    """The same GGUF (metadata copied field by field) with every tensor dequantized to float32 (and `change`d)."""
    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(target), reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if not name.startswith("GGUF.") and name != "general.architecture":
            writer.add_key_value(name, field.contents(), field.types[0],
                                 sub_type=field.types[1] if len(field.types) > 1 else None)
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        writer.add_tensor(tensor.name, change(tensor.name, np.array(values, dtype=np.float32)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def float32_drift(scenario) -> dict:
    """|float32 run − float64 run| per pass and operator (every head together) of the engine itself."""
    runs = []
    for dtype in ("float64", "float32"):
        passes = Passes(scenario)
        runs.append({(passes.key(s), s.head): to_host(s.values).astype(np.float64)
                     for s in Session(scenario, make_backend("numpy", dtype)).steps() if s.request == 0})
    drift: dict = {}
    for (key, head), ours in runs[0].items():
        with np.errstate(invalid="ignore"):  # −∞ − −∞ where both mask
            delta = np.nan_to_num(np.abs(ours - runs[1][key, head]), nan=0.0, posinf=0.0)
        drift[key] = max(drift.get(key, 0.0), float(delta.max(initial=0.0)))
        cache = CACHED.get(key.name.rsplit(".", 1)[-1])  # a cache holds the rows of every pass so far
        if cache:
            name = f"{key.name.rsplit('.', 1)[0]}.{cache}"
            drift[name] = max(drift.get(name, 0.0), drift[key])
    return drift


@functools.cache
def float32_report(arch: str, folder: Path):
    path = float32_copy(FILES[arch], folder / f"{arch}.gguf")
    scenario = open_model(path, ids=IDS, max_new_tokens=3)
    return scenario, compare_with_llama_cpp(scenario, path, float32_cache=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("float32")


@pytest.mark.parametrize("arch", FILES)
def test_a_float32_copy_agrees_as_closely_as_the_engines_own_float32_run(arch, folder):
    scenario, report = float32_report(arch, folder)
    assert {op.key.pass_ for op in report.ops} == {"prefill", "decode.1", "decode.2"}
    names = {op.key.name for op in report.ops if op.key.pass_ == "decode.2"}
    assert SEEN | (MOE if arch in ("qwen3moe", "gpt-oss") else set()) <= names
    assert ({"blocks.0.attn.hook_q_normed", "blocks.0.attn.q_norm.hook_normalized"} <= names) == arch.startswith("qwen3")
    drift = float32_drift(scenario)
    for op in report.ops:  # llama.cpp's float32 is as far from the float64 reference as ours, up to a factor
        ours = drift[op.key] if op.key in drift else drift[op.key.name]
        assert op.max_abs <= 1e-6 + 4 * ours, (op.key, op.max_abs, ours)
    assert max(op.max_abs for op in report.ops) > 1e-8  # float32 rounding is there: llama.cpp computed these


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3moe"])
def test_where_no_sum_cancels_every_cell_holds_float32s_default_tolerance(arch, folder):
    _, report = float32_report(arch, folder)
    assert report.first_divergence is None, report_lines(report, "en")[1]


@pytest.mark.parametrize("arch", ["qwen3moe", "gpt-oss"])
def test_llama_cpp_chooses_the_same_experts_for_every_token_of_every_pass(arch, folder):
    for report in (float32_report(arch, folder)[1],
                   compare_with_llama_cpp(open_model(FILES[arch], ids=IDS, max_new_tokens=3), FILES[arch])):
        chosen = [op for op in report.ops if op.key.name.endswith("hook_topk")]
        assert report.flip is None and len(chosen) == 3 * len({op.key.name for op in chosen}) >= 6
        assert all(op.agrees and op.max_abs == 0 and op.dtype == "int32" for op in chosen)


def tied(name: str, values: np.ndarray) -> np.ndarray:
    """Layer 1's router row of expert 1 made expert 0's, its first weight one float32 step up: every token's two
    logits differ by that step times one input, ~1e-9, which float64 resolves and float32 sums cannot."""
    if name == "blk.1.ffn_gate_inp.weight":
        values[1] = values[0]
        values[1, 0] = np.nextafter(values[0, 0], np.float32(np.inf))
    return values


def test_a_near_tie_in_the_router_is_reported_as_llama_cpps_first_routing_flip(tmp_path):
    path = float32_copy(FILES["qwen3moe"], tmp_path / "tie.gguf", tied)
    scenario = open_model(path, ids=IDS, max_new_tokens=3)
    report = compare_with_llama_cpp(scenario, path, float32_cache=True)
    session = Session(scenario, make_backend("numpy", "float64"))
    passes = Passes(scenario)
    ours = {passes.key(s).pass_: to_host(s.values) for s in session.steps() if s.name == "blocks.1.mlp.hook_topk"}
    dump = llama_cpp_dump(path, IDS, list(session.results[0].generated[:-1]), float32_cache=True)
    differ = [(pass_, t) for pass_ in ("prefill", "decode.1", "decode.2") for t in range(len(ours[pass_]))
              if set(ours[pass_][t]) != set(dump.get(parse_key(f"{pass_}.blocks.1.mlp.hook_topk"))[t].tolist())]
    flip = report.flip
    assert differ and (flip.key.pass_, flip.layer) == (differ[0][0], 1)  # the first token chosen otherwise
    round_ = int(flip.key.pass_.split(".")[1]) if flip.key.pass_ != "prefill" else 0
    position = differ[0][1] + (len(IDS) + round_ - 1 if round_ else 0)
    assert int(flip.token.split(" · ")[0]) == position
    assert set(flip.ours) ^ set(flip.theirs) == {0, 1} and 0 < flip.margin < 1e-8 and flip.other == Cause("side.llama_cpp")
    assert report_lines(report, "en")[1].startswith(f"first routing flip: {flip.key.pass_} · layer 1 · token {position}")


def test_the_quantized_gguf_drifts_from_its_first_quantized_matrix_product():
    report = compare_with_llama_cpp(open_model(FILES["llama"], ids=IDS, max_new_tokens=2), FILES["llama"])
    first = report.first_divergence
    assert (first.key.pass_, first.key.name) == ("prefill", "blocks.0.attn.hook_q")  # attn_q is Q4_0
    before = [op for op in report.ops if op.step < first.step]
    assert {op.key.name for op in before} == {"hook_embed", "blocks.0.ln1.hook_normalized", "blocks.0.ln1.hook_out"}
    assert all(op.agrees for op in before)
    caches = {op.dtype for op in report.ops if op.key.name.endswith(("cache_k", "cache_v"))}
    assert caches == {"float16"}  # llama.cpp's default KV cache, held to float16's tolerance
