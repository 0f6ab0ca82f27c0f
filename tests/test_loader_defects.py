"""The loader defects of issue 27, each with the smallest file that showed it.

A hostile checkpoint is refused by the command line in one located, printable line (exit 2), before
anything is made from a size it claims; what is legal but absurd loads with one warning line.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, peak_bytes
from said import said, warned
from safetensors.numpy import save_file
from typer.testing import CliRunner

import gguf_bytes as gb
from engine import ScenarioError
from engine.loading.checkpoint import load_checkpoint
from engine.loading.document import LoaderWarning
from engine.loading.gguf_checks import gguf_damage
from tinyllm_tui.cli import app

FIXTURES = ROOT / "tests" / "fixtures"
TINY = FIXTURES / "tiny-gguf" / "tiny.gguf"  # llama, byte-level BPE vocabulary of 300
SENTENCEPIECE = FIXTURES / "gguf-mixed-llama" / "mixed.gguf"  # llama, SentencePiece vocabulary with scores
CLI = Path(sys.executable).parent / "tinyllm-tui"


def refused(target: Path, *options: str) -> str:
    """The command line's one stderr line for `run TARGET` (exit 2, nothing else written)."""
    result = CliRunner().invoke(app, ["run", str(target), *(options or ("--ids", "1,2"))])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tinyllm-tui: error: "), result.stderr
    assert lines[0].isprintable(), lines[0]
    return lines[0].removeprefix("tinyllm-tui: error: ")


def gguf(tmp_path: Path, edit, source: Path = TINY) -> Path:
    """A copy of a fixture with `edit(parsed file)` applied."""
    parsed = gb.parse(source.read_bytes())
    edit(parsed)
    path = tmp_path / "edited.gguf"
    path.write_bytes(gb.serialize(parsed))
    return path


def folder(tmp_path: Path, name: str, config=None, tokenizer=None) -> Path:
    """A copy of a Hugging Face fixture with its config.json and tokenizer.json edited in place."""
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    for file, edit in (("config.json", config), ("tokenizer.json", tokenizer)):
        if edit is not None:
            document = json.loads((target / file).read_text())
            edit(document)
            (target / file).write_text(json.dumps(document))
    return target


# -- 1. tokenizers' errors escaping from encoding ------------------------------------------------
def test_a_wordpiece_vocabulary_without_unk_refuses_the_prompt(tmp_path):
    def without_unk(tokenizer):
        del tokenizer["model"]["vocab"]["[UNK]"]
        tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"] if t["content"] != "[UNK]"]

    bert = folder(tmp_path, "bert", tokenizer=without_unk)
    assert refused(bert, "--prompt", "zzq") == (f"{bert / 'tokenizer.json'}: --prompt: its tokenizer cannot encode "
                                                "the prompt (WordPiece error: Missing [UNK] token from the vocabulary)")


def test_a_post_processor_naming_a_missing_token_is_one_line_not_a_rust_panic(tmp_path):
    """pyo3's PanicException is a BaseException; Rust's panic hook also writes a backtrace to fd 2."""
    def template_naming_nothing(tokenizer):
        tokenizer["post_processor"] = {"type": "TemplateProcessing", "pair": [], "special_tokens": {},
                                       "single": [{"SpecialToken": {"id": "[NOPE]", "type_id": 0}},
                                                  {"Sequence": {"id": "A", "type_id": 0}}]}

    bert = folder(tmp_path, "bert", tokenizer=template_naming_nothing)
    ran = subprocess.run([str(CLI), "run", str(bert), "--prompt", "the cat"], capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 2
    assert ran.stderr == (f"tinyllm-tui: error: {bert / 'tokenizer.json'}: --prompt: its tokenizer cannot encode "
                          "the prompt (no entry found for key)\n")


# -- 2. nesting ------------------------------------------------------------------------------------
def test_metadata_arrays_nested_1100_deep_are_refused(tmp_path):
    nested = gb.Raw(struct.pack("<IQ", gb.ARRAY, 1) * 1100 + struct.pack("<IQI", gb.UINT32, 1, 7))
    path = gguf(tmp_path, lambda g: g.set("x.deep", gb.ARRAY, nested))
    where = "x.deep" + "[0]" * 8
    assert refused(path) == f"{path}: {where}: arrays nested more than 8 deep"
    assert said(gguf_damage(path)) == f"{path}: {where}: arrays nested more than 8 deep"  # it raised RecursionError


# -- 3. alignment ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, value, said", [
    (gb.STRING, "32", "expected an integer, a power of two, got '32'"),
    (gb.ARRAY, gb.Array(gb.UINT32, [32]), "expected an integer, a power of two, got an array"),
    (gb.UINT32, 0, "expected a power of two, got 0"),
    *((gb.UINT32, n, f"expected a power of two, got {n}") for n in (3, 7, 33, 48)),
])
def test_an_alignment_that_is_not_a_power_of_two_is_refused(tmp_path, kind, value, said):
    path = gguf(tmp_path, lambda g: g.set("general.alignment", kind, value))  # the data stays at 32
    assert refused(path) == f"{path}: general.alignment: {said}"


# -- 4. memory before checks -----------------------------------------------------------------------
def test_a_head_dim_of_2_to_the_31_is_refused_before_its_rope_table_is_made(tmp_path):
    llama3 = folder(tmp_path, "llama3", config=lambda c: c.update(head_dim=2**31))  # Llama 3 RoPE scaling
    peak = peak_bytes(lambda: pytest.raises(ScenarioError, load_checkpoint, llama3, ids=[1]))
    assert peak < 8 << 20
    assert refused(llama3) == (f"{llama3 / 'config.json'}: head_dim: a 24×{4 * 2**31} query projection has more "
                               f"numbers than the weight files' {weight_data_bytes(llama3)} bytes hold")


def weight_data_bytes(folder: Path) -> int:
    data = (folder / "model.safetensors").read_bytes()
    return len(data) - 8 - struct.unpack("<Q", data[:8])[0]


def test_a_gguf_key_length_of_2_to_the_31_is_refused_before_its_rope_table_is_made(tmp_path):
    def linear_scaling(g):
        g.set("llama.attention.key_length", gb.UINT32, 2**31)
        g.set("llama.rope.scaling.type", gb.STRING, "linear")
        g.set("llama.rope.scaling.factor", gb.FLOAT32, 2.0)

    path = gguf(tmp_path, linear_scaling)
    peak = peak_bytes(lambda: pytest.raises(ScenarioError, load_checkpoint, path, ids=[1]))
    assert peak < 8 << 20
    heads, width = gb.parse(TINY.read_bytes()).get("llama.attention.head_count"), 32
    assert refused(path) == (f"{path}: llama.attention.key_length: a query projection of {width * heads * 2**31} "
                             f"numbers is more than the file's {path.stat().st_size} bytes hold")


def test_a_gguf_claiming_2_to_the_29_tokens_allocates_none_of_them(tmp_path):
    claim = gb.Raw(struct.pack("<IQ", gb.STRING, 2**29))  # then the file's remaining bytes, read as strings
    path = gguf(tmp_path, lambda g: g.set("tokenizer.ggml.tokens", gb.ARRAY, claim))
    peak = peak_bytes(lambda: pytest.raises(ScenarioError, load_checkpoint, path, ids=[1]))
    assert peak < 8 << 20
    assert refused(path).startswith(f"{path}: tokenizer.ggml.tokens (its length): the file claims {2**29} items")


# -- 5. a 1 MiB SentencePiece token ----------------------------------------------------------------
def test_a_one_megabyte_sentencepiece_token_costs_no_time(tmp_path):
    def long_token(g):
        g.get("tokenizer.ggml.tokens").items[-1] = "a" * (1 << 20)

    path = gguf(tmp_path, long_token, SENTENCEPIECE)
    started = time.perf_counter()
    scenario = load_checkpoint(path, prompt="The cat")  # (took over a minute: every cut of the piece was tried)
    assert time.perf_counter() - started < 5
    assert scenario.requests[0].tokens


# -- 6. one printable line -------------------------------------------------------------------------
HOSTILE = "w\n\r\x00\x1b]0;title\x07\u202e"
ESCAPED = r"w\n\r\x00\x1b]0;title\x07\u202e"


def test_a_safetensors_tensor_name_cannot_forge_a_line_or_set_the_title(tmp_path):
    llama = folder(tmp_path, "llama")
    save_file({HOSTILE: np.zeros(2, np.float32)}, str(llama / "model.safetensors"))
    data = (llama / "model.safetensors").read_bytes()
    (llama / "model.safetensors").write_bytes(data[:-4])  # its data cut short: the message names the tensor
    assert refused(llama) == (f"{llama / 'model.safetensors'}: {ESCAPED}: its data ends at byte 8 of the data, "
                              "the file holds 4 bytes of data (truncated?)")


def test_a_gguf_tensor_name_is_escaped_and_a_long_one_cut(tmp_path):
    def renamed(g):
        g.tensors[0].name, g.tensors[0].kind = HOSTILE + "x" * 300_000, 99

    path = gguf(tmp_path, renamed)
    line = refused(path)
    assert line.startswith(f"{path}: tensor {ESCAPED}xxx")
    assert len(line) < 1200 and "more characters)" in line  # it was 290 KB over 1 638 lines


def test_a_tokenizers_error_is_folded_into_one_line(tmp_path):
    """tokenizers quotes the piece it refuses, newlines and all."""
    llama = folder(tmp_path, "llama", tokenizer=lambda t: t["model"]["merges"].append(["a\nb\nc", "d"]))
    assert refused(llama).startswith(f"{llama / 'tokenizer.json'}: not a readable tokenizer (Token `a b c` out of "
                                     "vocabulary at line 1 column ")


# -- 7. invalid refused, absurd warned -------------------------------------------------------------
def duplicate_key(g):
    g.fields.append(next(f for f in g.fields if f[0] == "llama.block_count"))


def duplicate_tensor(g):
    g.tensors.append(g.tensors[2])


GGUF_INVALID = [
    (duplicate_key, "llama.block_count: this key appears twice in the metadata"),
    (duplicate_tensor, "tensor blk.0.attn_k.weight: listed twice in the tensor table"),
    (lambda g: g.set("tokenizer.ggml.eos_token_id", gb.INT64, -2**63),
     f"tokenizer.ggml.eos_token_id: expected a token id in 0..299, got {-2**63}"),
    (lambda g: g.set("llama.context_length", gb.INT32, -1), "llama.context_length: expected an integer in 0..2^31, got -1"),
    (lambda g: g.set("llama.vocab_size", gb.FLOAT32, math.nan), "llama.vocab_size: expected an integer in 1..2^31, got nan"),
    (lambda g: g.set("llama.attention.layer_norm_rms_epsilon", gb.FLOAT64, 1e300),
     "llama.attention.layer_norm_rms_epsilon: expected a number in [0, 1), got 1e+300"),
]


@pytest.mark.parametrize("edit, said", GGUF_INVALID, ids=[said.split(":")[0] + str(i) for i, (_, said) in
                                                          enumerate(GGUF_INVALID)])
def test_an_invalid_gguf_is_refused_naming_what(tmp_path, edit, said):
    path = gguf(tmp_path, edit)
    assert refused(path) == f"{path}: {said}"


def test_overlapping_or_misaligned_tensor_data_is_refused(tmp_path):
    """Tensors sharing bytes read garbage (NaN from a Q8_0 scale); llama.cpp refuses misaligned data."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    parsed = gb.parse(TINY.read_bytes())
    first, second = parsed.tensors[2], parsed.tensors[3]
    start = len(TINY.read_bytes()) - len(parsed.data)  # where the data section begins
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(first.kind)]
    nbytes = math.prod(first.dims) // block * size
    path = gguf(tmp_path, lambda g: setattr(g.tensors[3], "offset", first.offset))
    assert refused(path) == (f"{path}: tensor {second.name}: its data (from byte {start + first.offset}) overlaps "
                             f"tensor {first.name}'s (bytes {start + first.offset}..{start + first.offset + nbytes - 1})")
    path = gguf(tmp_path, lambda g: setattr(g.tensors[3], "offset", second.offset + 4))
    assert refused(path) == (f"{path}: tensor {second.name}: its data offset {second.offset + 4} is not a multiple of "
                             "the alignment 32")


def test_a_shard_outside_the_folder_is_refused(tmp_path):
    llama = folder(tmp_path, "llama")
    shutil.copy(llama / "model.safetensors", tmp_path / "outside.safetensors")
    (llama / "model.safetensors").unlink()
    index = llama / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"model.norm.weight": "../outside.safetensors"}}))
    assert refused(llama) == (f"{index}: weight_map.model.norm.weight: expected the name of a file in the "
                                        "folder, got '../outside.safetensors'")


def test_llama3_scaling_with_equal_frequency_factors_warns_once_and_divides_by_nothing(tmp_path):
    def equal(config):
        config["rope_parameters"]["high_freq_factor"] = config["rope_parameters"]["low_freq_factor"]

    llama3 = folder(tmp_path, "llama3", config=equal)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        factors = load_checkpoint(llama3, ids=[1]).model.rope_factors
    assert [(w.category, warned(w.message)) for w in caught] == [(LoaderWarning, (
        f"{llama3 / 'config.json'}: rope_parameters.high_freq_factor: equals low_freq_factor (1.0): no band of "
        "frequencies is blended, they step from scaled to unscaled"))]  # and no NumPy divide-by-zero
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
    wavelen = 2 * math.pi / inv_freq
    assert factors == tuple(8.0 if w > 256 else 1.0 for w in wavelen)  # the step the blend tends to
    result = CliRunner().invoke(app, ["run", str(llama3), "--ids", "1,2"])
    assert result.exit_code == 0 and result.stderr == f"tinyllm-tui: warning: {warned(caught[0].message)}\n"


def test_llama3_scaling_with_the_factors_reversed_is_refused(tmp_path):
    llama3 = folder(tmp_path, "llama3", config=lambda c: c["rope_parameters"].update(high_freq_factor=0.5))
    assert refused(llama3) == (f"{llama3 / 'config.json'}: rope_parameters.high_freq_factor: expected at least "
                               "low_freq_factor (1.0), got 0.5")


# -- 8. located messages instead of the catch-all --------------------------------------------------
GGUF_LOCATED = [
    (lambda g: g.set("tokenizer.ggml.bos_token_id", gb.UINT32, 300),  # an IndexError
     "tokenizer.ggml.bos_token_id: expected a token id in 0..299, got 300"),
    (lambda g: g.drop("tokenizer.ggml.tokens"),  # a KeyError
     "tokenizer.ggml.tokens: missing: a GGUF file lists its vocabulary there"),
    (lambda g: g.set("tokenizer.ggml.merges", gb.ARRAY, gb.Array(gb.UINT32, [1, 2])),  # an AttributeError
     "tokenizer.ggml.merges: expected an array of strings, each two pieces with a space between"),
    (lambda g: g.set("tokenizer.ggml.token_type", gb.ARRAY, gb.Array(gb.INT32, [3] * 301)),  # an IndexError
     "tokenizer.ggml.token_type: expected an array of 300 numbers (one per token)"),
]


@pytest.mark.parametrize("edit, said", GGUF_LOCATED, ids=[said.split(":")[0] for _, said in GGUF_LOCATED])
def test_what_was_an_internal_error_is_located(tmp_path, edit, said):
    path = gguf(tmp_path, edit)
    assert refused(path) == f"{path}: {said}"


def test_an_index_without_weight_map_is_located(tmp_path):
    llama = folder(tmp_path, "llama")
    index = llama / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}}))  # a KeyError
    assert refused(llama) == f"{index}: weight_map: expected a JSON object naming each tensor's file"


def test_a_weight_file_that_is_a_folder_is_located(tmp_path):
    llama = folder(tmp_path, "llama")
    (llama / "model.safetensors").unlink()
    (llama / "model.safetensors").mkdir()  # an OSError
    assert refused(llama) == f"{llama / 'model.safetensors'}: expected a safetensors file, this is not a regular file"


def with_header(weights: Path, write) -> str:
    """The safetensors file with its header JSON replaced by `write(header, first tensor's name)`; that name."""
    data = weights.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    name = next(n for n in header if n != "__metadata__")
    text = write(header, name)
    weights.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + length:])
    return name


def test_safetensors_own_errors_name_the_tensor(tmp_path):
    weights = folder(tmp_path, "llama") / "model.safetensors"
    name = with_header(weights, lambda header, name: json.dumps(header | {name: header[name] | {"dtype": "F17"}}).encode())
    assert refused(weights.parent) == f"{weights}: {name}: unknown dtype 'F17'"


# -- found by tests/fuzz_loaders.py ----------------------------------------------------------------
def test_a_safetensors_tensor_listed_twice_is_refused(tmp_path):
    """JSON allows a key twice and safetensors keeps one entry without a word."""
    weights = folder(tmp_path, "llama") / "model.safetensors"
    name = with_header(weights, lambda header, name: json.dumps(header).encode()[:-1] + b", "
                       + json.dumps({name: header[name]}).encode()[1:])
    assert refused(weights.parent) == f"{weights}: {name}: listed twice in the header"


def test_a_gguf_vocabulary_repeating_texts_loads_with_a_warning(tmp_path):
    def repeated(g):
        tokens = g.get("tokenizer.ggml.tokens").items
        tokens[10:13] = [tokens[9]] * 3

    path = gguf(tmp_path, repeated)
    result = CliRunner().invoke(app, ["run", str(path), "--ids", "1,2"])
    assert result.exit_code == 0
    assert result.stderr == (f"tinyllm-tui: warning: {path}: tokenizer.ggml.tokens: 3 of the 300 tokens repeat "
                             "another's text\n")


def test_a_llama_query_of_three_dimensions_is_refused_by_its_shape(tmp_path):
    """Undoing llama.cpp's row permutation reshaped it first (a ValueError)."""
    def three_dims(g):
        query = next(t for t in g.tensors if t.name == "blk.0.attn_q.weight")
        query.dims = [*query.dims, 1]

    path = gguf(tmp_path, three_dims)
    width = gb.parse(TINY.read_bytes()).get("llama.embedding_length")
    assert refused(path) == (f"{path}: blocks.0.attn.wq: expected {width}×{width} (engine layout [in, out]), the "
                             f"checkpoint gives {width}×{width}×1")


# -- found by the fuzzer once the 2026 architectures joined its sources --------------------------------------------
def test_a_deepseek2_block_count_of_2_to_the_31_is_refused_before_anything_is_made_per_layer(tmp_path):
    """deepseek2's own spec reader skipped the depth check the other GGUF architectures make: a MemoryError."""
    deep = gguf(tmp_path, lambda g: g.set("deepseek2.block_count", 4, 2**31),
                FIXTURES / "gguf-deepseek2" / "model.gguf")
    peak = peak_bytes(lambda: pytest.raises(ScenarioError, load_checkpoint, deep, ids=[1]))
    assert peak < 8 << 20
    assert refused(deep).startswith(f"{deep}: deepseek2.block_count: {2**31} layers, but the file's tensor table lists")


def test_a_qwen35_tensor_whose_tiled_value_heads_cannot_be_undone_is_refused_naming_it(tmp_path):
    """The converter's tiled value heads are put back by reshaping; a tensor of another shape made that reshape
    raise, reported as an internal error."""
    def shrink(g):
        tensor = next(t for t in g.tensors if t.name == "blk.0.ssm_alpha.weight")
        tensor.dims = [tensor.dims[0], 1]  # one value head's row where there are several

    edited = gguf(tmp_path, shrink, FIXTURES / "gguf-qwen3_5" / "qwen35-q8_0.gguf")
    said = refused(edited)
    assert said.startswith(f"{edited}: blocks.0.linear_attn.w_a: expected ") and "cannot be laid out" in said, said


@pytest.mark.parametrize("source", ["gguf-qwen3_5/qwen35-q8_0.gguf", "gguf-qwen3_5_moe/qwen35moe-q8_0.gguf"])
def test_a_qwen35_per_head_tensor_of_no_dimensions_is_refused_naming_it(tmp_path, source):
    """Found once qwen35moe joined the fuzzer's sources (qwen35 files had it too): a 0-d ssm_a made putting its
    value heads back raise an IndexError, reported as an internal error."""
    def scalar(g):
        next(t for t in g.tensors if t.name == "blk.1.ssm_a").dims = []

    edited = gguf(tmp_path, scalar, FIXTURES / source)
    said = refused(edited)
    assert said.startswith(f"{edited}: blocks.1.linear_attn.A_log: expected 4 ") and "cannot be laid out" in said, said


def test_a_deepseek_v3_config_without_head_dim_turns_the_rope_part_by_its_own_width(tmp_path):
    """transformers takes DeepSeek-V3's rotary width from qk_rope_head_dim; the loader took RoPE's frequencies from
    head_dim (else hidden/heads), and without it the run broke mid-pass (2 frequencies broadcast against 3)."""
    source = FIXTURES / "deepseek_v3"
    dropped = folder(tmp_path, "deepseek_v3", config=lambda c: c.pop("head_dim"))
    ours, theirs = (load_checkpoint(path, ids=[1, 2, 3]) for path in (dropped, source))
    assert (ours.model.rope_theta, ours.model.rope_factors) == (theirs.model.rope_theta, theirs.model.rope_factors)
    result = CliRunner().invoke(app, ["run", str(dropped), "--ids", "1,2,3"])
    assert result.exit_code == 0, result.output


# -- the Hub's composite checkpoints (…ForConditionalGeneration) --------------------------------------------------
@pytest.mark.parametrize("family, edit, said", [
    ("qwen3_5", lambda c: c.pop("text_config"), "text_config: missing: a qwen3_5 checkpoint's language model"),
    ("gemma4", lambda c: c.update(text_config=[]), "text_config: expected a JSON object of the language model's "
                                                   "settings, got []"),
    ("qwen3_5_moe", lambda c: c["text_config"].update(model_type="qwen3_moe"),
     "text_config.model_type: expected 'qwen3_5_moe_text' in a qwen3_5_moe checkpoint, got 'qwen3_moe'"),
    ("qwen3_5", lambda c: c["text_config"].pop("hidden_size"), "text_config.hidden_size: missing"),
    ("gemma4", lambda c: c["text_config"]["rope_parameters"].pop("full_attention"),
     "text_config.rope_parameters.full_attention: expected a JSON object, got None"),
])
def test_a_composite_config_is_refused_at_its_text_config_key(tmp_path, family, edit, said):
    edited = folder(tmp_path, f"{family}-composite", config=edit)
    assert refused(edited).startswith(f"{edited / 'config.json'}: {said}")


@pytest.mark.parametrize("family, tensor", [
    ("qwen3_5_moe", "model.language_model.layers.1.mlp.experts.2.up_proj.weight"),
    ("gemma4", "model.language_model.embed_tokens_per_layer.weight"),
    ("qwen3_5", "lm_head.weight"),  # untied: the composite's own head, outside its language model
    ("gemma3", "language_model.model.layers.2.self_attn.k_norm.weight"),  # llava's older nesting
    ("mistral3", "language_model.lm_head.weight"),  # and its head
])
def test_a_composite_missing_a_tensor_of_its_language_model_is_refused_naming_it(tmp_path, family, tensor):
    from safetensors.numpy import load_file

    edited = folder(tmp_path, f"{family}-composite")
    tensors = load_file(edited / "model.safetensors")
    del tensors[tensor]
    save_file(tensors, edited / "model.safetensors")
    assert refused(edited) == f"{edited}: {tensor}: tensor missing from the checkpoint"


@pytest.mark.parametrize("family, edit", [
    ("qwen3_5_moe", lambda c: c.update(tie_word_embeddings=False)),  # text_config still says true
    ("lfm2_vl", lambda c: c.update(tie_embedding=False)),  # LFM2-VL's older key, over tie_word_embeddings: true
])
def test_a_composites_head_is_tied_or_not_by_its_top_level_setting(tmp_path, family, edit):
    """As transformers ties the composite's lm_head: untied, the tied fixtures lack their head."""
    edited = folder(tmp_path, f"{family}-composite", config=edit)
    assert refused(edited) == f"{edited}: lm_head.weight: tensor missing from the checkpoint"
