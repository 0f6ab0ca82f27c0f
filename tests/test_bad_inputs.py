"""The bad-input corpus (tests/data/bad, expected.yaml) and the binary cases built from tiny valid files.

Every case goes through the command line: exit status 2, exactly one stderr line naming the
file (with line and path where there is one), no traceback, nothing written beside it, and
no memory allocated from a size the file merely claims.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, peak_bytes
from said import said
from typer.testing import CliRunner

from engine import ScenarioError, load_scenario, load_scenario_text
from engine.loading.checkpoint import load_checkpoint
from engine.loading.document import MAX_SCENARIO_BYTES, MAX_SCENARIO_VALUES
from tinyllm_tui.cli import app
from tinyllm_tui.debugger.errors import bad_input
from tinyllm_tui.tui.i18n import cause_words

BAD = ROOT / "tests" / "data" / "bad"
EXPECTED = yaml.safe_load((BAD / "expected.yaml").read_text(encoding="utf-8"))
FIXTURES = ROOT / "tests" / "fixtures"
CLI = Path(sys.executable).parent / "tinyllm-tui"


def expected_line(case: str) -> tuple[str, str]:
    """The start of the one stderr line (`error: FILE[:line]: [path: ]`) and the fragment it must hold."""
    entry = EXPECTED[case]
    named = BAD / entry.get("names", case)
    where = f"{named}:{entry['line']}" if entry["line"] else str(named)
    return f"tinyllm-tui: error: {where}: " + (f"{entry['path']}: " if entry["path"] else ""), entry["message"]


def assert_refused(exit_code: int, stderr: str, start: str, fragment: str) -> None:
    assert exit_code == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(start), f"{lines[0]!r} does not start with {start!r}"
    assert fragment in lines[0][len(start):], lines[0]


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"), key=str) if p.is_file()}


def test_corpus_is_large_and_complete():
    files = {p.name for p in BAD.iterdir() if p.name not in ("expected.yaml", "make_bad.py")}
    cases = set(EXPECTED)
    assert len(cases) >= 60
    assert cases <= files
    named = {entry.get("names") for entry in EXPECTED.values()} - {None}
    assert files - cases - named == set()  # every file is a case or the weight file a case names


CASES = [(case, command) for case in sorted(EXPECTED)
         for command in sorted({"run", EXPECTED[case].get("command", "run")})]


@pytest.mark.parametrize("case, command", CASES, ids=[f"{command}-{case}" for case, command in CASES])
def test_bad_file_is_one_located_line(case, command):
    """`run FILE`, and `check FILE` for an expect: case: the same one line either way."""
    before = listing(BAD)
    result = CliRunner().invoke(app, [command, str(BAD / case)])
    assert_refused(result.exit_code, result.stderr, *expected_line(case))
    assert result.stdout == ""
    assert listing(BAD) == before  # nothing written beside it


@pytest.mark.parametrize("case", ["syntax_unclosed_flow.yaml", "tag_python_object.yaml", "expect_row_out_of_range.yaml",
                                  "weights_claims_more.yaml", "not_utf8.yaml"])
def test_bad_file_through_a_real_process(case):
    command = EXPECTED[case].get("command", "run")
    done = subprocess.run([str(CLI), command, str(BAD / case)], capture_output=True, text=True, timeout=60)
    assert_refused(done.returncode, done.stderr, *expected_line(case))
    assert done.stdout == ""


def test_missing_path(tmp_path):
    path = tmp_path / "nowhere.yaml"
    result = CliRunner().invoke(app, ["run", str(path)])
    assert_refused(result.exit_code, result.stderr, f"tinyllm-tui: error: {path}: ", "cannot read (No such file")


def test_expect_problem_is_not_a_disagreement():
    """A table naming rows the run never computes is refused by check (2), not reported as failing (1)."""
    result = CliRunner().invoke(app, ["check", str(BAD / "expect_round_range.yaml")])
    assert result.exit_code == 2 and "summary" not in result.stdout


# -- size and memory -----------------------------------------------------------------------------
def refusal(action) -> str:
    with pytest.raises(ScenarioError) as caught:
        action()
    return said(caught.value)


def test_200_megabyte_scenario_is_refused_quickly_without_reading_it(tmp_path):
    path = tmp_path / "huge.yaml"
    block = (BAD.parent.parent.parent / "scenarios" / "template.yaml").read_bytes()
    with path.open("wb") as file:
        file.write(block)
        file.write(b"# " + b"0.125, " * (1 << 20) + b"\n")  # then 200 MB of comment lines
        for _ in range(200 * (1 << 20) // (7 << 20)):
            file.write(b"# " + b"0.125, " * (1 << 20) + b"\n")
    assert path.stat().st_size > 200 * 10**6
    started = time.perf_counter()
    peak = peak_bytes(lambda: refusal(lambda: load_scenario(path)))
    assert time.perf_counter() - started < 1.0
    assert peak < 1 << 20
    message = refusal(lambda: load_scenario(path))
    assert message.startswith(f"{path}: larger than the {MAX_SCENARIO_BYTES >> 20} MiB")
    result = CliRunner().invoke(app, ["run", str(path)])
    assert_refused(result.exit_code, result.stderr, f"tinyllm-tui: error: {path}: ", "64 MiB")


def test_endless_special_file_is_read_only_up_to_the_limit():
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    assert "64 MiB" in refusal(lambda: load_scenario("/dev/zero"))


@pytest.mark.parametrize("case", ["weights_claims_more.yaml", "weights_npz_claims.yaml"])
def test_header_claiming_a_terabyte_allocates_nothing_of_it(case):
    peak = peak_bytes(lambda: refusal(lambda: load_scenario(BAD / case)))
    assert peak < 4 << 20


def test_billion_laughs_is_refused_without_expanding():
    started = time.perf_counter()
    peak = peak_bytes(lambda: refusal(lambda: load_scenario(BAD / "laughs_embed.yaml")))
    assert time.perf_counter() - started < 2.0 and peak < 16 << 20


# -- checkpoints: built in tmp_path from the tiny valid fixtures ----------------------------------
def hf_copy(tmp_path: Path, name: str = "llama") -> Path:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    return folder


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            del config[key]
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))


def cli_refuses(target: Path, start: str, fragment: str) -> None:
    before = listing(target.parent)
    result = CliRunner().invoke(app, ["run", str(target), "--ids", "1,2"])
    assert_refused(result.exit_code, result.stderr, f"tinyllm-tui: error: {start}", fragment)
    assert listing(target.parent) == before


CONFIG_CASES = [  # (fixture, config changes, key in the message, fragment)
    ("llama", {"num_hidden_layers": None}, "num_hidden_layers", "missing"),
    ("llama", {"num_hidden_layers": 0}, "num_hidden_layers", "expected an integer ≥ 1, got 0"),
    ("llama", {"hidden_size": "16"}, "hidden_size", "expected an integer ≥ 1, got '16'"),
    ("llama", {"num_key_value_heads": 3}, "num_key_value_heads", "3 key/value heads do not divide 4 heads"),
    ("llama", {"rms_norm_eps": -1}, "rms_norm_eps", "expected a number in [0, 1), got -1"),
    ("llama", {"vocab_size": None}, "vocab_size", "missing"),
    ("llama", {"eos_token_id": 300}, "eos_token_id", "expected a token id in 0..299"),
    ("llama", {"model_type": "mamba"}, "model_type", "unsupported architecture 'mamba'"),
    ("bert", {"model_type": {}}, "model_type", "unsupported architecture {}"),  # not a name: refused, not a TypeError
    ("llama", {"rope_scaling": {"rope_type": "longrope"}}, "rope_scaling.rope_type", "RoPE scaling type 'longrope'"),
    ("llama", {"rope_parameters": "fast"}, "rope_parameters", "expected a JSON object"),
    ("gpt2", {"n_head": 5}, "n_head", "5 heads do not divide the width 16"),
    ("gpt2", {"activation_function": {"gelu": 1}}, "activation_function", "unsupported activation"),
    ("bert", {"intermediate_size": 10**12}, "intermediate_size", "beyond any model this opens"),
]


@pytest.mark.parametrize("fixture, changes, key, fragment", CONFIG_CASES, ids=[c[2] for c in CONFIG_CASES])
def test_bad_config_names_the_key(tmp_path, fixture, changes, key, fragment):
    folder = hf_copy(tmp_path, fixture)
    edit_config(folder, **changes)
    cli_refuses(folder, f"{folder / 'config.json'}: {key}: ", fragment)


def test_absurd_width_is_refused_before_reading_a_tensor(tmp_path):
    folder = hf_copy(tmp_path)
    edit_config(folder, hidden_size=10**9, head_dim=None)
    peak = peak_bytes(lambda: refusal(lambda: load_checkpoint(folder, ids=[1])))
    assert peak < 8 << 20
    cli_refuses(folder, f"{folder / 'config.json'}: hidden_size: ", "a 1000000000×1000000000 query projection has more "
                "numbers than the weight files'")


def test_a_billion_layers_are_refused_before_any_is_listed(tmp_path):
    """Counting a billion layers' tensors one by one took minutes and gigabytes (found by the fuzzer)."""
    folder = hf_copy(tmp_path, "qwen2")
    edit_config(folder, num_hidden_layers=10**9)
    started = time.perf_counter()
    peak = peak_bytes(lambda: refusal(lambda: load_checkpoint(folder, ids=[1])))
    assert time.perf_counter() - started < 2.0 and peak < 8 << 20
    cli_refuses(folder, f"{folder / 'config.json'}: num_hidden_layers: ", "1000000000 layers, but the weight files hold")


def test_config_not_json(tmp_path):
    folder = hf_copy(tmp_path)
    (folder / "config.json").write_text('{"model_type": "llama",')
    cli_refuses(folder, f"{folder / 'config.json'}: ", "not a readable JSON file")


def test_tokenizer_missing_or_corrupt(tmp_path):
    folder = hf_copy(tmp_path)
    (folder / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": 7}}')
    cli_refuses(folder, f"{folder / 'tokenizer.json'}: ", "not a readable tokenizer")
    (folder / "tokenizer.json").unlink()
    result = CliRunner().invoke(app, ["run", str(folder), "--prompt", "The cat"])
    assert_refused(result.exit_code, result.stderr, f"tinyllm-tui: error: {folder}: tokenizer.json: ",
                   "missing: --prompt needs it to turn text into ids")


def test_ids_need_no_tokenizer(tmp_path):
    folder = hf_copy(tmp_path)
    (folder / "tokenizer.json").unlink()
    without = CliRunner().invoke(app, ["run", str(folder), "--ids", "1,2,3", "--json"])
    assert without.exit_code == 0, without.stderr
    records = json.loads(without.stdout)["records"]
    assert records[0]["rows"] == ["0 · #1", "1 · #2", "2 · #3"]  # no tokenizer: each id stands for itself
    with_tokenizer = json.loads(CliRunner().invoke(app, ["run", str(FIXTURES / "llama"), "--ids", "1,2,3",
                                                         "--json"]).stdout)["records"]
    assert [r["values"] for r in records] == [r["values"] for r in with_tokenizer]  # only the labels differ


@pytest.mark.parametrize("options", [[], ["--prompt", "The cat"], ["--ids", "1,2"]])
def test_a_folder_without_config_json_says_so(tmp_path, options):
    folder = hf_copy(tmp_path)
    (folder / "config.json").unlink()
    result = CliRunner().invoke(app, ["run", str(folder), *options])
    assert_refused(result.exit_code, result.stderr, f"tinyllm-tui: error: {folder}: config.json: ",
                   "missing: a checkpoint folder holds config.json")


def test_checkpoint_tensors_truncated_missing_or_misshapen(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = hf_copy(tmp_path)
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    length = struct.unpack("<Q", data[:8])[0]
    entries = sorted(((name, entry) for name, entry in json.loads(data[8:8 + length]).items()
                      if name != "__metadata__"), key=lambda item: item[1]["data_offsets"])
    held = len(data) // 2 - 8 - length
    cut, entry = next((name, entry) for name, entry in entries if entry["data_offsets"][1] > held)
    cli_refuses(folder, f"{weights}: {cut}: ", f"its data ends at byte {entry['data_offsets'][1]} of the data, the "
                f"file holds {held} bytes of data (truncated?)")
    missing = {k: v for k, v in tensors.items() if k != "model.norm.weight"}
    save_file(missing, str(weights))
    cli_refuses(folder, f"{folder}: norm.weight: ", "tensor missing from the checkpoint")
    save_file(tensors | {"model.norm.weight": tensors["model.norm.weight"][:-1]}, str(weights))
    cli_refuses(folder, f"{folder}: ln_final.w: ", "expected 16 (engine layout [in, out]), the checkpoint gives 15")
    save_file(tensors | {"model.norm.weight": tensors["model.norm.weight"].astype("int64")}, str(weights))
    cli_refuses(folder, f"{folder}: ln_final.w: ", "expected floating-point numbers, the checkpoint gives int64")


MXFP4_SHARD = "model-00002-of-00002.safetensors"  # gpt_oss_mxfp4's layer 1
MXFP4_DOWN = "model.layers.1.mlp.experts.down_proj"


def rewrite_safetensors(file: Path, change) -> None:
    """The file with its tensors as {name: (dtype, shape, bytes)} passed through `change` (bfloat16 kept as bytes)."""
    data = file.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    metadata = header.pop("__metadata__", None)
    tensors = change({name: (entry["dtype"], entry["shape"], data[8 + length:][slice(*entry["data_offsets"])])
                      for name, entry in header.items()})
    entries, offset = {"__metadata__": metadata} if metadata else {}, 0
    for name, (dtype, shape, raw) in tensors.items():
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(entries).encode()
    file.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(raw for _, _, raw in tensors.values()))


MXFP4_CASES = {  # a change to layer 1's down_proj tensors -> (the tensor named, what the message says)
    "blocks misshapen": (lambda t: t | {f"{MXFP4_DOWN}_blocks": ("U8", [8, 64, 1, 16],
                                                                 t[f"{MXFP4_DOWN}_blocks"][2][::2])},
                         f"{MXFP4_DOWN}_blocks", "expected U8 8×64×2×16 (experts × rows × blocks of 32 values × 16 "
                         "bytes), got U8 8×64×1×16"),
    "blocks not bytes": (lambda t: t | {f"{MXFP4_DOWN}_blocks": ("I8", *t[f"{MXFP4_DOWN}_blocks"][1:])},
                         f"{MXFP4_DOWN}_blocks", "expected U8 8×64×2×16"),
    "scales missing": (lambda t: {n: v for n, v in t.items() if n != f"{MXFP4_DOWN}_scales"},
                       f"{MXFP4_DOWN}_scales", "missing from the checkpoint: MXFP4 blocks need their scales"),
    "scales misshapen": (lambda t: t | {f"{MXFP4_DOWN}_scales": ("U8", [8, 64, 1], t[f"{MXFP4_DOWN}_scales"][2][::2])},
                         f"{MXFP4_DOWN}_scales", "expected U8 8×64×2 (experts × rows × blocks: one scale byte each)"),
}


@pytest.mark.parametrize("case", MXFP4_CASES)
def test_gpt_oss_mxfp4_experts_misshapen_or_without_scales_name_the_file_and_tensor(tmp_path, case):
    change, tensor, fragment = MXFP4_CASES[case]
    folder = hf_copy(tmp_path, "gpt_oss_mxfp4")
    index = folder / "model.safetensors.index.json"
    if case == "scales missing":
        document = json.loads(index.read_text())
        del document["weight_map"][f"{MXFP4_DOWN}_scales"]
        index.write_text(json.dumps(document))
    rewrite_safetensors(folder / MXFP4_SHARD, change)
    cli_refuses(folder, f"{folder / MXFP4_SHARD}: {tensor}: ", fragment)


@pytest.mark.parametrize("method", ["gptq", "fp8", None])
def test_a_quantization_other_than_gpt_oss_mxfp4_is_refused_by_its_key(tmp_path, method):
    folder = hf_copy(tmp_path, "gpt_oss_mxfp4")
    edit_config(folder, quantization_config={"quant_method": method})
    fragment = f"{method!r} checkpoints are not read" if method else "expected a quantization method"
    cli_refuses(folder, f"{folder / 'config.json'}: quantization_config.quant_method: ", fragment)


def test_mxfp4_is_refused_outside_gpt_oss(tmp_path):
    folder = hf_copy(tmp_path, "llama")
    edit_config(folder, quantization_config={"quant_method": "mxfp4"})
    cli_refuses(folder, f"{folder / 'config.json'}: quantization_config.quant_method: ", "only gpt-oss's mxfp4 experts")


def gguf_copy(tmp_path: Path) -> tuple[Path, bytearray]:
    data = bytearray((FIXTURES / "tiny-gguf" / "tiny.gguf").read_bytes())
    return tmp_path / "bad.gguf", data


@pytest.mark.parametrize("keep", [0.5, 0.9, -100])
def test_a_truncated_gguf_names_the_tensor_and_the_bytes_it_lacks(tmp_path, keep):
    from gguf import GGUFReader

    path, data = gguf_copy(tmp_path)
    cut = int(len(data) * keep) if keep > 0 else len(data) + keep
    path.write_bytes(data[:cut])
    tensors = GGUFReader(FIXTURES / "tiny-gguf" / "tiny.gguf").tensors  # the intact file, read by the gguf package
    first = next(t for t in tensors if t.data_offset + t.n_bytes > cut)  # in the order the header lists them
    cli_refuses(path, f"{path}: tensor {first.name}: ", f"expected {first.n_bytes} bytes ({first.tensor_type.name} "
                f"{'×'.join(str(n) for n in first.shape)}) from byte {first.data_offset}, the file holds "
                f"{max(cut - first.data_offset, 0)} there (it ends at byte {cut}: truncated?)")


def test_a_gguf_cut_inside_its_metadata_names_the_field(tmp_path):
    from gguf import GGUFReader

    path, data = gguf_copy(tmp_path)
    field = GGUFReader(FIXTURES / "tiny-gguf" / "tiny.gguf").fields["tokenizer.ggml.tokens"]
    cut = field.offset + 200  # inside the list of token texts
    path.write_bytes(data[:cut])
    cli_refuses(path, f"{path}: tokenizer.ggml.tokens", "(truncated")


def field_start(name: str) -> int:
    from gguf import GGUFReader

    field = GGUFReader(FIXTURES / "tiny-gguf" / "tiny.gguf").fields[name]
    return field.offset + sum(part.nbytes for part in field.parts[:-1])  # where its value starts


HEADER_DAMAGE = [  # (offset, bytes written there, where, fragment)
    (0, b"GGUB", "header.magic", "expected the bytes 'GGUF', the file starts with b'GGUB'"),
    (4, struct.pack("<I", 99), "header.version", "expected version 2 or 3, the file holds 99"),
    (8, struct.pack("<Q", 10**9), "header.tensor_count", "the file claims 1000000000 tensors"),
    (16, struct.pack("<Q", 10**12), "header.kv_count", "the file claims 1000000000000 metadata fields"),
]


@pytest.mark.parametrize("offset, raw, where, fragment", HEADER_DAMAGE, ids=[c[2] for c in HEADER_DAMAGE])
def test_a_damaged_gguf_header_names_the_field(tmp_path, offset, raw, where, fragment):
    path, data = gguf_copy(tmp_path)
    assert data[offset:offset + len(raw)] != raw
    data[offset:offset + len(raw)] = raw
    path.write_bytes(data)
    cli_refuses(path, f"{path}: {where}: ", fragment)


def test_a_damaged_gguf_value_type_or_string_length_names_the_key(tmp_path):
    path, data = gguf_copy(tmp_path)
    start = field_start("llama.attention.head_count")
    data[start - 4:start] = struct.pack("<I", 77)  # the value's type code
    path.write_bytes(data)
    cli_refuses(path, f"{path}: llama.attention.head_count: ", "expected a value type 0..12, the file holds 77")
    path, data = gguf_copy(tmp_path)
    start = field_start("general.architecture")
    data[start - 8:start] = struct.pack("<Q", 2**40)  # the length of the string "llama"
    path.write_bytes(data)
    cli_refuses(path, f"{path}: general.architecture (a string of {2**40} bytes): ", "the file ends at byte")


def test_gguf_with_another_architecture(tmp_path):
    from gguf import GGUFReader

    path, data = gguf_copy(tmp_path)
    field = GGUFReader(FIXTURES / "tiny-gguf" / "tiny.gguf").fields["general.architecture"]
    start = field.offset + sum(part.nbytes for part in field.parts[:-1])
    assert data[start:start + 5] == b"llama"
    data[start:start + 5] = b"mamba"
    path.write_bytes(data)
    cli_refuses(path, f"{path}: general.architecture: ", "unsupported architecture 'mamba'")


def test_gguf_with_an_unsupported_quantisation(tmp_path):
    from gguf import GGUFReader

    path, data = gguf_copy(tmp_path)
    tensor = next(t for t in GGUFReader(FIXTURES / "tiny-gguf" / "tiny.gguf").tensors if t.name == "token_embd.weight")
    start = tensor.field.offset + sum(part.nbytes for part in tensor.field.parts[:4])
    assert struct.unpack("<I", data[start:start + 4])[0] == int(tensor.tensor_type)
    data[start:start + 4] = struct.pack("<I", 24)  # I8: a byte a value, fewer than Q8_0's, so still inside the file
    path.write_bytes(data)
    cli_refuses(path, f"{path}: token_embd.weight: ", "tensor type I8 cannot be dequantized by gguf-py")


def test_gguf_with_zero_heads(tmp_path):
    from gguf import GGUFReader

    path, data = gguf_copy(tmp_path)
    field = GGUFReader(FIXTURES / "tiny-gguf" / "tiny.gguf").fields["llama.attention.head_count"]
    start = field.offset + sum(part.nbytes for part in field.parts[:-1])
    assert struct.unpack("<I", data[start:start + 4])[0] == 4
    data[start:start + 4] = struct.pack("<I", 0)
    path.write_bytes(data)
    cli_refuses(path, f"{path}: llama.attention.head_count: ", "expected an integer in 1..2^31, got 0")


def test_a_table_the_trace_cannot_hold_becomes_a_located_error():
    """Problems only the run can find (an operator name no step has) name the table's line, for `check` to refuse."""
    from engine.compare.check import check_scenario

    text = (BAD / "expect_layer_range.yaml").read_text(encoding="utf-8").replace("blocks.3.hook_resid_post", "hook_embedd")
    scenario = load_scenario_text(text, "typo.yaml")
    outcome = check_scenario(scenario)[0]
    line = text[: text.index("op: hook_embedd")].count("\n") + 1
    said = bad_input(outcome.error(scenario.path), lambda cause: cause_words(cause, "en"))  # as the CLI says it
    assert said.startswith(f"typo.yaml:{line}: expect[0]: no operator request 0 prefill hook_embedd")


def test_a_dense_file_under_the_size_limit_is_refused_before_parsing(tmp_path):
    """64 MiB of `0,` would be 32 million YAML nodes (~10 GB): the value count is refused first."""
    path = tmp_path / "dense.yaml"
    path.write_text("title: [" + "0," * (MAX_SCENARIO_VALUES + 1) + "0]\n", encoding="utf-8")
    assert path.stat().st_size < MAX_SCENARIO_BYTES
    started = time.perf_counter()
    peak = peak_bytes(lambda: refusal(lambda: load_scenario(path)))
    assert time.perf_counter() - started < 2.0 and peak < 3 * path.stat().st_size
    assert f"more than the {MAX_SCENARIO_VALUES} a scenario file may" in refusal(lambda: load_scenario(path))


@pytest.mark.parametrize("printed", ["0e395964", "0e" + "9" * 5000, "0.0e-395964"])
def test_a_printed_exponent_beyond_floats_is_compared_not_crashed(tmp_path, printed):
    """`0e395964` is the number 0 printed to a unit of 10^395964 (an OverflowError, found by the long fuzz)."""
    text = (ROOT / "scenarios" / "template.yaml").read_text(encoding="utf-8")
    path = tmp_path / "exponent.yaml"
    table = "    values:                          # (required) rows of equal length, numbers as printed (−∞ allowed)\n"
    assert text.count(table + "      - [1.0, 0.0,") == 1
    path.write_text(text.replace(table + "      - [1.0, 0.0,", table + f"      - [1.0, {printed},"), encoding="utf-8")
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output


def test_a_scenario_naming_a_folder_without_tokenizer_takes_ids_not_text(tmp_path):
    folder = hf_copy(tmp_path)
    (folder / "tokenizer.json").unlink()
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("checkpoint: llama\nrequests:\n  - ids: [1, 2]\n", encoding="utf-8")
    ran = CliRunner().invoke(app, ["run", str(scenario), "--json"])
    assert ran.exit_code == 0, ran.stderr
    assert json.loads(ran.stdout)["records"][0]["rows"] == ["0 · #1", "1 · #2"]
    scenario.write_text("checkpoint: llama\nrequests:\n  - text: The cat\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(scenario)])
    assert_refused(result.exit_code, result.stderr, f"tinyllm-tui: error: {scenario}:3: requests[0].text: ",
                   "text needs a checkpoint's tokenizer")
