"""Checkpoint weights read on first use: nothing is read at open, each array once, the least recently
used dropped past the budget, edits share the cache, and the fingerprint is the file's identity
plus the edited arrays (no pass over every byte)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from engine import Session
from engine.lazy_weights import LazyWeights, WeightCache, changed_names
from engine.loading.checkpoint import load_checkpoint
from engine.loading.edits import CellEdit, FillEdit, apply_edit, with_weights

FIXTURES = Path(__file__).parent / "fixtures"
GGUF = FIXTURES / "gguf-mixed-qwen2" / "mixed.gguf"


def counting(arrays: dict[str, np.ndarray], budget: int) -> tuple[LazyWeights, list[str]]:
    reads: list[str] = []

    def read(name: str) -> np.ndarray:
        reads.append(name)
        return arrays[name].copy()

    shapes = {name: array.shape for name, array in arrays.items()}
    return LazyWeights(shapes, WeightCache(read, budget), "file identity"), reads


def test_an_array_is_read_when_first_asked_for_and_then_kept():
    arrays = {"a": np.ones(4), "b": np.zeros(4)}
    weights, reads = counting(arrays, budget=1 << 20)
    assert reads == [] and len(weights) == 2 and "a" in weights and list(weights) == ["a", "b"]
    assert weights["a"] is weights["a"]
    assert reads == ["a"]
    with pytest.raises(ValueError):
        weights["a"][0] = 5.0  # shared by every edited copy: read-only


def test_past_the_budget_the_least_recently_used_array_goes_first():
    arrays = {name: np.full(100, i, dtype=np.float64) for i, name in enumerate("abc")}  # 800 bytes each
    weights, reads = counting(arrays, budget=1700)
    weights["a"], weights["b"]
    weights["a"]  # now b is the least recently used
    weights["c"]
    assert weights.cache.kept() == ["a", "c"]
    weights["b"]  # dropped and nothing else held it: read again
    assert reads == ["a", "b", "c", "b"]


def test_an_array_still_held_elsewhere_is_found_not_read_twice():
    arrays = {name: np.full(100, i, dtype=np.float64) for i, name in enumerate("ab")}
    weights, reads = counting(arrays, budget=900)
    held = weights["a"]
    weights["b"]  # drops a from the cache; `held` keeps it alive
    assert weights["a"] is held and reads == ["a", "b"]


def test_edits_share_the_cache_and_only_they_count_as_changed():
    arrays = {"a": np.ones((2, 2)), "b": np.zeros((2, 2))}
    weights, reads = counting(arrays, budget=1 << 20)
    edited = apply_edit(weights, CellEdit("a", (0, 1), 3.0))
    assert isinstance(edited, LazyWeights) and edited.cache is weights.cache
    assert edited["a"][0, 1] == 3.0 and weights["a"][0, 1] == 1.0
    assert changed_names(edited, weights) == ["a"] and changed_names(weights, weights) == []
    back = apply_edit(edited, FillEdit("a", "file"), weights)
    assert changed_names(back, weights) == [] and back.edited == {}
    assert reads == ["a"]  # b was never needed


def test_opening_a_checkpoint_reads_no_tensor_and_the_fingerprint_needs_none():
    scenario = load_checkpoint(GGUF, prompt="The cat", max_new_tokens=2)
    assert scenario.weights.cache.kept() == []
    fingerprint = scenario.fingerprint
    assert scenario.weights.cache.kept() == []
    Session(scenario).steps().__next__()  # the first operator embeds: only the prompt's rows are read, not kept
    assert scenario.weights.cache.kept() == []
    edited = apply_edit(scenario.weights, CellEdit("blocks.0.attn.wq", (0, 0), 0.5))
    assert with_weights(scenario, edited).fingerprint != fingerprint


def test_a_changed_file_changes_the_fingerprint(tmp_path):
    copy = tmp_path / "copy.gguf"
    shutil.copy(GGUF, copy)
    before = load_checkpoint(copy, prompt="The cat").fingerprint
    data = bytearray(copy.read_bytes())
    data[-1] ^= 1  # the last byte of the last tensor
    copy.write_bytes(bytes(data))
    assert load_checkpoint(copy, prompt="The cat").fingerprint != before


def test_hugging_face_tensors_are_views_of_the_file_until_converted(tmp_path):
    float32 = load_checkpoint(FIXTURES / "llama", prompt="The cat", dtype="float32")
    embed = float32.weights["embed"]
    assert embed.dtype == np.float32 and not embed.flags.owndata  # a view of the memory map
    float64 = load_checkpoint(FIXTURES / "llama", prompt="The cat")
    np.testing.assert_array_equal(float64.weights["embed"], embed)


def test_embedding_rows_past_the_tokenizer_read_as_unused(tmp_path):
    folder = tmp_path / "gpt2"
    shutil.copytree(FIXTURES / "gpt2", folder)
    config = json.loads((folder / "config.json").read_text())
    tensors = load_file(folder / "model.safetensors")
    name = next(n for n in tensors if n.endswith("wte.weight"))
    tensors[name] = np.concatenate([tensors[name], np.zeros((3, tensors[name].shape[1]), np.float32)])
    save_file(tensors, folder / "model.safetensors")
    config["vocab_size"] += 3
    (folder / "config.json").write_text(json.dumps(config))
    vocab = load_checkpoint(folder, prompt="The cat").vocab
    assert len(vocab) == config["vocab_size"] and vocab.tokens[-1] == f"<unused {config['vocab_size'] - 1}>"


def test_the_first_step_of_a_gguf_dequantizes_only_the_prompts_embedding_rows(monkeypatch):
    """A 248 320-token table took 21 s to dequantize whole for a 5-token prompt's first screen."""
    from engine import make_backend
    from engine.loading.gguf_model import GGUFModel
    from tinyllm_tui.debugger.debugger import Debugger

    read: list[tuple[str, object]] = []
    whole = GGUFModel.dequantized

    def spy(self, name, dtype, expert=None, ids=None):
        read.append((name, None if ids is None else ids.tolist()))
        return whole(self, name, dtype, expert) if ids is None else whole(self, name, dtype, expert, ids)

    monkeypatch.setattr(GGUFModel, "dequantized", spy)
    scenario = load_checkpoint(FIXTURES / "gguf-qwen3_5" / "qwen35-q8_0.gguf", ids=[5, 3, 5], max_new_tokens=2)
    debugger = Debugger(scenario, make_backend("numpy", "float64"), quick_start=True)
    assert debugger.frame.step == 0 and debugger.frame.inputs[0].shape == scenario.weights.shapes["embed"]
    table = [ids for name, ids in read if name == "token_embd.weight"]
    assert table == [[5, 3, 5], [0, 1, 2, 3]]  # the prompt's rows, then the inputs panel's corner; never all rows
    embedded = debugger.history.current.values
    assert np.array_equal(embedded, scenario.weights["embed"][[5, 3, 5]])  # the same numbers as the whole table's


def test_the_weights_browser_lists_a_checkpoints_shapes_reading_no_tensor(monkeypatch):
    """Opening the weights browser (its list of names and shapes) dequantized every tensor on the UI thread."""
    from engine import make_backend
    from engine.loading.gguf_model import GGUFModel
    from tinyllm_tui.debugger.debugger import Debugger

    read: list[str] = []
    whole = GGUFModel.dequantized

    def spy(self, name, *args, **kwargs):
        read.append(name)
        return whole(self, name, *args, **kwargs)

    monkeypatch.setattr(GGUFModel, "dequantized", spy)
    scenario = load_checkpoint(FIXTURES / "gguf-qwen3" / "qwen3.gguf", ids=[5, 3, 5], max_new_tokens=2)
    debugger = Debugger(scenario, make_backend("numpy", "float64"), quick_start=True)
    before = list(read)
    shapes = debugger.browser.shapes()
    assert read == before  # no tensor read for the list
    assert len(shapes) == len(scenario.weights) > 10
    assert shapes == {name: scenario.weights[name].shape for name in scenario.weights}  # each read, for the check
    assert len(read) > len(before)  # (the check above did read them: the spy sees reads)
