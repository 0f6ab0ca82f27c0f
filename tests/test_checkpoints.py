"""Checkpoints against transformers: tiny random-weight llama (GQA), qwen2 (q/k/v biases), gpt2, bert
and a quantized llama GGUF, whose float64 reference outputs tools/make_fixtures.py made with
transformers (torch is not needed here, only the committed fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from said import refused
from tinyllm_tui.tui.i18n import cause_words
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from engine import ScenarioError, Session, make_backend, to_host
from engine.loading.checkpoint import load_checkpoint
from engine.loading.file_kinds import is_checkpoint
from engine.loading.tokenizer import PieceTexts, make_vocab
from engine.compare.diff import diff_scenario

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = {"llama": "llama", "qwen2": "qwen2", "gpt2": "gpt2", "bert": "bert", "gguf": "tiny-gguf/tiny.gguf"}
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}


def reference(name: str) -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURES / Path(MODELS[name]).parts[0] / "reference.npz"))


def run(name: str, dtype: str, **request):
    ref = reference(name)
    scenario = load_checkpoint(FIXTURES / MODELS[name], **(request or {"ids": [int(t) for t in ref["ids"]]}),
                               max_new_tokens=len(ref.get("greedy_ids", [0])))
    session = Session(scenario, make_backend("numpy", dtype))
    return ref, scenario, session, list(session.steps())


def layer_outputs(states) -> list[np.ndarray]:
    """Each block's output in the prefill: the later of its residual sum and its second norm
    (pre-LN: the sum; post-LN, as BERT: the norm after it, past its affine)."""
    last = {}
    for state in states:
        if state.round == 0 and state.name in (f"blocks.{state.layer}.hook_resid_post",
                                               f"blocks.{state.layer}.ln2.hook_out"):
            last[state.layer] = to_host(state.values)
    return [last[layer] for layer in sorted(last)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(MODELS))
def test_every_layer_and_the_logits_match_transformers(name, dtype):
    ref, scenario, session, states = run(name, dtype)
    tolerance = TOLERANCE[dtype]
    outputs = layer_outputs(states)
    assert len(outputs) == len(ref["layers"])
    for ours, theirs in zip(outputs, ref["layers"]):
        assert np.abs(ours - theirs).max() <= tolerance
    if name == "bert":  # an encoder: the last record is the final hidden states
        assert np.abs(to_host(states[-1].values) - ref["hidden"]).max() <= tolerance
        return
    prefill = next(s for s in states if s.name == "unembed.hook_out" and s.round == 0)
    assert np.abs(to_host(prefill.values) - ref["logits"]).max() <= tolerance


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", [n for n in MODELS if n != "bert"])
def test_cached_greedy_generation_matches_transformers_step_by_step(name, dtype):
    ref, scenario, session, states = run(name, dtype)
    steps = [to_host(s.values)[-1] for s in states if s.name == "unembed.hook_out"]
    assert len(steps) == len(ref["step_logits"])
    for ours, theirs in zip(steps, ref["step_logits"]):
        assert np.abs(ours - theirs).max() <= TOLERANCE[dtype]
    assert list(session.results[0].generated) == list(ref["greedy_ids"])


@pytest.mark.parametrize("name", list(MODELS))
def test_own_tokenizer_gives_the_reference_ids(name):
    """For the GGUF, transformers built its tokenizer from the same metadata its own way."""
    prompt = "The cat sat on the mat." if name == "bert" else "The cat sat on the mat, 我爱 café"
    scenario = load_checkpoint(FIXTURES / MODELS[name], prompt=prompt)
    assert list(scenario.requests[0].tokens) == list(reference(name)["ids"])


@pytest.mark.parametrize("name", ["llama", "gguf"])
def test_cached_rounds_equal_full_recompute_with_rope_and_gqa(name):
    scenario = load_checkpoint(FIXTURES / MODELS[name], prompt="The cat sat", max_new_tokens=4)
    diffs = diff_scenario(scenario, make_backend("numpy"))
    assert {d.round for d in diffs} == {0, 1, 2, 3}
    assert max(d.max_abs for d in diffs) <= 1e-12


def test_rope_and_gqa_run_on_array_api_strict():
    scenario = load_checkpoint(FIXTURES / "llama", prompt="The cat", max_new_tokens=2)
    strict = [to_host(s.values) for s in Session(scenario, make_backend("array_api_strict")).steps()]
    plain = [to_host(s.values) for s in Session(scenario, make_backend("numpy")).steps()]
    assert len(strict) == len(plain)
    for a, b in zip(strict, plain):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)  # −∞ (masked scores) equals −∞


def test_byte_level_pieces_read_as_text():
    """我 is the bytes e6 88 91, written æ Ī ij in GPT-2's byte alphabet; Ġ is a space."""
    e6, x88, x91 = "æ", "\u012a", "\u0133"  # bytes 0x88 and 0x91 are not printable: 256 + their rank
    vocab = {e6: 0, x88: 1, x91: 2, e6 + x88: 3, e6 + x88 + x91: 4, "Ġ": 5, "t": 6, "Ġt": 7, "Ċ": 8}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[(e6, x88), (e6 + x88, x91), ("Ġ", "t")]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    assert tuple(PieceTexts(tokenizer)) == ("\\xe6", "\\x88", "\\x91", "\\xe6\\x88", "我", " ", "t", " t", "\\n")
    assert tokenizer.encode("我 t").ids == [4, 7]


def test_a_vocabulary_reads_like_a_tuple_of_its_texts():
    """make_vocab's texts are made as they are read; they read as the tuple would, past the pieces too."""
    vocab = {"Ġthe": 0, "Ċ": 1, "cat": 2}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.decoder = decoders.ByteLevel()
    tokens = make_vocab(tokenizer, 5, eos=None, pad=None).tokens
    assert len(tokens) == 5 and tokens[-1] == tokens[4] == "<unused 4>" and tokens[1] == "\\n"
    assert tokens[1:4] == ("\\n", "cat", "<unused 3>")
    assert list(tokens) == [" the", "\\n", "cat", "<unused 3>", "<unused 4>"]
    assert tokens.index("cat") == 2 and "cat" in tokens
    with pytest.raises(IndexError):
        tokens[5]
    assert tuple(make_vocab(tokenizer, 2, eos=None, pad=None).tokens) == (" the", "\\n")
    assert tokens == (" the", "\\n", "cat", "<unused 3>", "<unused 4>") != tokens[:4]
    copy = Tokenizer.from_str(tokenizer.to_str())  # another tokenizer of the same pieces
    assert make_vocab(copy, 5, eos=None, pad=None) == make_vocab(tokenizer, 5, eos=None, pad=None)
    assert hash(tokens) == hash(tuple(tokens))


def test_timeline_shows_the_tokenizer_pieces():
    scenario = load_checkpoint(FIXTURES / "gpt2", prompt="The cat sat", max_new_tokens=1)
    state = next(iter(Session(scenario).steps()))
    assert [t.text for t in state.timeline] == ["The", "␣", "cat", " sat"]  # a one-space piece drawn visibly


def test_wordpiece_pieces_stay_as_they_are():
    scenario = load_checkpoint(FIXTURES / "bert", prompt="the cat")
    assert [scenario.vocab.tokens[t] for t in scenario.requests[0].tokens] == ["[CLS]", "the", "cat", "[SEP]"]


def test_is_checkpoint():
    assert is_checkpoint(FIXTURES / "llama") and is_checkpoint(FIXTURES / "tiny-gguf" / "tiny.gguf")
    assert not is_checkpoint(FIXTURES)


# -- config variants and refusals ----------------------------------------------------------
def edited_copy(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "llama", folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_older_top_level_rope_theta_is_read(tmp_path):
    def older(config):
        config["rope_theta"] = config.pop("rope_parameters")["rope_theta"]

    ref = reference("llama")
    scenario = load_checkpoint(edited_copy(tmp_path, older), ids=[int(t) for t in ref["ids"]])
    last = [s for s in Session(scenario).steps() if s.name == "unembed.hook_out"][0]
    assert np.abs(to_host(last.values) - ref["logits"]).max() <= 1e-9

    def other(config):
        config.pop("rope_parameters")
        config["rope_theta"] = 500.0

    assert load_checkpoint(edited_copy(tmp_path / "b", other), prompt="a").model.rope_theta == 500.0


@pytest.mark.parametrize("edit, key", [
    (lambda c: c.update(model_type="mamba"), "model_type"),
    (lambda c: c.update(rope_scaling={"rope_type": "longrope", "factor": 4.0}), "rope_scaling.rope_type"),
    (lambda c: c["rope_parameters"].update(rope_type="dynamic", factor=2.0), "rope_parameters.rope_type"),
    (lambda c: c.update(hidden_act="gelu"), "hidden_act"),
    (lambda c: c.pop("num_hidden_layers"), "num_hidden_layers"),
])
def test_unsupported_configs_are_refused_naming_the_key(tmp_path, edit, key):
    with pytest.raises(ScenarioError) as error:
        load_checkpoint(edited_copy(tmp_path, edit), prompt="a")
    assert error.value.path == key and "config.json" not in cause_words(error.value.message, "en")


def test_bad_requests_are_refused(tmp_path):
    with refused(ScenarioError, "out of range"):
        load_checkpoint(FIXTURES / "llama", ids=[1, 300])
    with refused(ScenarioError, "exactly one"):
        load_checkpoint(FIXTURES / "llama")
    with refused(ScenarioError, "config.json: missing"):
        load_checkpoint(tmp_path)
    with refused(ScenarioError, "positions"):
        load_checkpoint(FIXTURES / "gpt2", ids=[1] * 60, max_new_tokens=10)


def test_missing_tensor_is_named(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = edited_copy(tmp_path, lambda c: None)
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ScenarioError) as error:
        load_checkpoint(folder, prompt="a")
    assert error.value.path == "layers.1.mlp.up_proj.weight"


def test_bfloat16_tensors_are_read(tmp_path):
    """NumPy has no bfloat16; its bits are the top half of a float32."""
    from safetensors.numpy import load_file

    folder = edited_copy(tmp_path, lambda c: None)
    tensors = load_file(folder / "model.safetensors")
    values = {name: (t.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16) for name, t in tensors.items()}
    header = {name: {"dtype": "BF16", "shape": list(v.shape)} for name, v in values.items()}
    offset, blob = 0, b""
    for name, v in values.items():
        header[name]["data_offsets"] = [offset, offset + v.nbytes]
        offset += v.nbytes
        blob += v.tobytes()
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (folder / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + blob)
    scenario = load_checkpoint(folder, prompt="a")
    embed = tensors["model.embed_tokens.weight"].astype(np.float32)
    truncated = (embed.view(np.uint32) & 0xFFFF0000).view(np.float32)
    assert np.array_equal(scenario.weights["embed"], truncated.astype(np.float64))


# -- CuPy ------------------------------------------------------------------------------------
def cupy_backend():
    pytest.importorskip("cupy", reason="CuPy is not installed (pip install '.[gpu]' on a machine with a GPU)")
    from engine import BackendError

    try:
        return make_backend("cupy")
    except BackendError as error:
        pytest.skip(str(error))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(MODELS))
def test_cupy_matches_numpy_on_every_operator(name):
    backend = cupy_backend()
    scenario = load_checkpoint(FIXTURES / MODELS[name], prompt="The cat sat", max_new_tokens=3)
    on_gpu = [to_host(s.values) for s in Session(scenario, backend).steps()]
    on_host = [to_host(s.values) for s in Session(scenario, make_backend("numpy")).steps()]
    assert len(on_gpu) == len(on_host)
    for a, b in zip(on_gpu, on_host):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)


def test_memory_budget_refuses_before_reading(tmp_path):
    with refused(ScenarioError, "more than the budget") as error:
        load_checkpoint(FIXTURES / "llama", prompt="a", max_memory=1000)
    assert error.value.path == "--max-memory"


def test_open_model_takes_either_kind_of_file():
    from conftest import X01

    from engine.loading import open_model

    assert open_model(X01).title and open_model(FIXTURES / "gpt2", ids=[1, 2]).requests[0].tokens == (1, 2)
    with refused(ScenarioError, "only a checkpoint") as error:
        open_model(X01, prompt="hello")
    assert error.value.path == "--prompt"


def test_unreadable_files_are_one_error(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 10)
    with refused(ScenarioError, "header.version: expected version 2 or 3, the file holds 0"):
        load_checkpoint(broken, prompt="a")
    folder = edited_copy(tmp_path, lambda c: None)
    (folder / "model.safetensors").write_bytes(b"\x0a\0\0\0\0\0\0\0{not json}")
    with refused(ScenarioError, r"model.safetensors: header: not a JSON object \(Expecting property name"):
        load_checkpoint(folder, prompt="a")


# -- the command line --------------------------------------------------------------------------
def cli(*args: str):
    from typer.testing import CliRunner

    from tinyllm_tui import cli as command

    return CliRunner().invoke(command.app, [str(a) for a in args])


def test_cli_run_json_of_a_checkpoint_has_logits_under_unembed():
    result = cli("run", FIXTURES / MODELS["gguf"], "--ids", "1,2,3", "--max-new-tokens", "2", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["requests"][0]["input"] == [1, 2, 3] and len(document["requests"][0]["generated"]) == 2
    assert any(r["name"] == "unembed.hook_out" for r in document["records"])


def test_cli_encoder_json_ends_with_final_hidden_states():
    document = json.loads(cli("run", FIXTURES / "bert", "--prompt", "the cat", "--json").output)
    assert document["records"][-1]["name"] == "blocks.1.ln2.hook_out"


def test_cli_diff_and_gradcheck_take_a_checkpoint():
    assert cli("diff", FIXTURES / "qwen2", "--prompt", "The cat", "--max-new-tokens", "3").exit_code == 0
    result = cli("gradcheck", FIXTURES / "llama", "--prompt", "The cat sat", "--layer", "1", "--head", "3")
    assert result.exit_code == 0 and "agree" in result.output


def test_sentencepiece_pieces_read_with_spaces_and_bytes():
    vocab = {"▁the": 0, "<0x0A>": 1, "cat": 2, "<0xE6>": 3, "<0x41>": 4, "<0xZZ>": 5}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.decoder = decoders.Metaspace()
    assert tuple(PieceTexts(tokenizer)) == (" the", "\\n", "cat", "\\xe6", "A", "<0xZZ>")


def test_sharded_checkpoint_reads_like_one_file(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = edited_copy(tmp_path, lambda c: None)
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, folder / shard)
    index = {"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    scenario = load_checkpoint(folder, prompt="The cat")
    whole = load_checkpoint(FIXTURES / "llama", prompt="The cat")
    assert list(scenario.weights) == list(whole.weights)
    assert all(np.array_equal(scenario.weights[name], whole.weights[name]) for name in whole.weights)
